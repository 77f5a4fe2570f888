"""The locks, pyproject.toml, environment.yml, the Makefile and CI agree with one another."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCKS = {name: ROOT / "requirements" / f"{name}.txt" for name in ("cpu", "gpu")}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-").replace(".", "-")


def _pyproject_requirements() -> set[str]:
    pyproject = (ROOT / "pyproject.toml").read_text()  # (no tomllib: Python 3.10 is supported)
    blocks = re.findall(r"^(?:dependencies|dev|lab|book) = \[(.*?)\]", pyproject, flags=re.M | re.S)
    assert len(blocks) == 4, "pyproject.toml: expected dependencies and the dev, lab and book extras"
    return {_name(r) for block in blocks for r in re.findall(r'"([^"]+)"', block)}


def _lock(name: str) -> dict[str, str]:
    pins = {}
    for line in LOCKS[name].read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][\w.\-]*)==([\w.+!\-]+)", line)
        assert m, f"{LOCKS[name].name}: expected 'name==version' lines only, got {line!r}"
        pins[_name(m[1])] = m[2]
    return pins


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_pins_every_requirement_exactly(lock):
    pins = _lock(lock)
    missing = _pyproject_requirements() - set(pins)
    assert not missing, f"{LOCKS[lock].name} lacks {sorted(missing)}: run make lock"
    assert "make lock" in LOCKS[lock].read_text().splitlines()[1], "the lock should say the command that made it"


def test_cpu_lock_is_the_cpu_build_with_the_gpu_locks_triton():
    cpu, gpu = _lock("cpu"), _lock("gpu")
    assert cpu["torch"].endswith("+cpu"), f"the CPU lock must pin torch's CPU build, got {cpu['torch']}"
    assert cpu["torch"].split("+")[0] == gpu["torch"], (cpu["torch"], gpu["torch"])
    assert cpu["triton"] == gpu["triton"], "CPU and GPU machines should run one Triton"
    assert not any(n.startswith("nvidia-") for n in cpu), "the CPU lock pulls CUDA libraries"
    shared = set(cpu) & set(gpu) - {"torch"}
    differ = sorted(n for n in shared if cpu[n] != gpu[n])
    assert not differ, f"the two locks disagree on {differ}"


def test_environment_yml_installs_the_cpu_lock():
    text = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s*-\s*python=3\.11\s*$", text, flags=re.M), "environment.yml: python=3.11, as the lock"
    assert re.search(r"^\s*-\s*-r requirements/cpu\.txt\s*$", text, flags=re.M)
    assert "download.pytorch.org/whl/cpu" in text  # where torch's +cpu build lives
    assert "--python-version 3.11" in (ROOT / "Makefile").read_text()


def test_makefile_installs_exactly_the_lock():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCK\s*:=\s*requirements/\$\(if \$\(HAS_GPU\),gpu,cpu\)\.txt", make, flags=re.M)
    assert "$(PIP) -r $(LOCK)" in make and "--no-deps -e ." in make and "pip check" in make
    for target in ("repro:", "test:", "test-latest:", "test-lab:", "book:", "lock:"):
        assert re.search(rf"^{re.escape(target)}", make, flags=re.M), f"Makefile lacks {target}"


def test_ci_runs_the_readme_test_commands():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^make test 2>&1", ci, flags=re.M) and re.search(r"^make test-lab 2>&1", ci, flags=re.M)
    for command in ("make test", "make repro", "make test-lab", "make test-latest", "make book", "make lock"):
        assert command in readme, f"README does not mention {command}"


@pytest.mark.parametrize("unit_fails, lab_fails", [(True, False), (False, True), (False, False)])
def test_ci_runs_the_browser_tests_after_a_red_make_test(tmp_path, unit_fails, lab_fails):
    """.ci/run on a stand-in Makefile: make test-lab runs whatever make test did, the run fails if either failed,
    and it ends with both summaries."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "Makefile").write_text(
        f"test:\n\t@echo 'FAILED tests/test_a.py::test_x - boom'; echo '1 failed, 3 passed in 1.0s'; {unit_fails}\n"
        f"test-lab:\n\t@echo '16 passed in 2.0s'; {lab_fails}\n".replace("True", "false").replace("False", "true"))
    run = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True)
    assert run.returncode == (1 if unit_fails or lab_fails else 0), run.stdout + run.stderr
    tail = run.stdout[run.stdout.rindex("== make test:"):]
    assert tail.startswith(f"== make test: exit status {2 if unit_fails else 0}\nFAILED tests/test_a.py::test_x")
    assert f"== make test-lab: exit status {2 if lab_fails else 0}\n16 passed in 2.0s" in tail
