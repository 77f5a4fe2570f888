"""The locks, pyproject.toml, environment.yml, the Makefile and CI agree with one another."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCKS = {name: ROOT / "requirements" / f"{name}.txt" for name in ("cpu", "gpu", "macos-arm64", "windows-amd64")}
LAPTOP_LOCKS = ("macos-arm64", "windows-amd64")  # torch from PyPI (its CPU build there), no Triton


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
    missing = _pyproject_requirements() - set(pins) - ({"triton"} if lock in LAPTOP_LOCKS else set())  # Linux only
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


@pytest.mark.parametrize("lock", LAPTOP_LOCKS)
def test_laptop_locks_pin_the_linux_versions_without_triton(lock):
    cpu, laptop = _lock("cpu"), _lock(lock)
    assert laptop["torch"] == cpu["torch"].split("+")[0], f"{lock}: torch {laptop['torch']}, cpu.txt {cpu['torch']}"
    assert "triton" not in laptop, f"{lock}: Triton has no wheel there"
    assert not any(n.startswith("nvidia-") for n in laptop), f"{lock} pulls CUDA libraries"
    shared = set(cpu) & set(laptop) - {"torch"}
    differ = sorted((n, cpu[n], laptop[n]) for n in shared if cpu[n] != laptop[n])
    assert not differ, f"{lock} and cpu.txt disagree on (name, cpu, {lock}): {differ}"
    # what only one side has is platform-specific (appnope on macOS; colorama, pywinpty on Windows; pexpect on
    # Linux and macOS), never a package of pyproject.toml
    assert not (set(cpu) ^ set(laptop)) & _pyproject_requirements() - {"triton"}


def test_laptop_input_pins_the_lock_torch():
    torch = {path: line for path in ("cpu.in", "gpu.in", "laptop.in") for line in
             (ROOT / "requirements" / path).read_text().splitlines() if line.startswith("torch==")}
    assert set(torch) == {"cpu.in", "gpu.in", "laptop.in"}, f"a torch== line in each input, got {torch}"
    assert torch["laptop.in"] == torch["gpu.in"] == torch["cpu.in"].split("+")[0], torch


def test_makefile_picks_the_lock_by_platform():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^ifeq \(\$\(OS_ARCH\),Darwin-arm64\)\nLOCK\s*:=\s*requirements/macos-arm64\.txt", make, re.M)
    assert re.search(r"^else ifeq \(\$\(OS_ARCH\),Darwin-x86_64\)\n\$\(error Intel Mac.*docs/setup\.md", make, re.M)
    for lock, platform in (("macos-arm64", "aarch64-apple-darwin"), ("windows-amd64", "x86_64-pc-windows-msvc")):
        assert f"{lock}:{platform}" in make, f"make lock does not compile requirements/{lock}.txt"
    assert "requirements/laptop.in" in make


def test_environment_yml_installs_the_cpu_lock():
    text = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s*-\s*python=3\.11\s*$", text, flags=re.M), "environment.yml: python=3.11, as the lock"
    assert re.search(r"^\s*-\s*-r requirements/cpu\.txt\s*$", text, flags=re.M)
    assert "download.pytorch.org/whl/cpu" in text  # where torch's +cpu build lives
    assert "--python-version 3.11" in (ROOT / "Makefile").read_text()


def test_makefile_installs_exactly_the_lock():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCK\s*:=\s*requirements/\$\(if \$\(HAS_GPU\),gpu,cpu\)\.txt", make, flags=re.M)  # Linux
    assert "$(call INSTALL,$(PY)) -r $(LOCK)" in make and "--no-deps -e ." in make and "pip check" in make
    for target in ("repro:", "test:", "test-latest:", "test-lab:", "book:", "lock:", "test-no-triton:",
                   "no-triton-repro:", "no-triton-tests:", "check-platforms:"):
        assert re.search(rf"^{re.escape(target)}", make, flags=re.M), f"Makefile lacks {target}"


def test_ci_runs_the_readme_test_commands():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^make test 2>&1", ci, flags=re.M) and re.search(r"^make test-lab 2>&1", ci, flags=re.M)
    assert re.search(r"^make no-triton-tests 2>&1", ci, flags=re.M) and re.search(r"^\(make check-platforms >", ci,
                                                                                   flags=re.M)
    assert re.search(r"^\(make no-triton-venv no-triton-repro >", ci, flags=re.M)  # the main job without Triton
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^test-no-triton: no-triton-repro no-triton-tests$", make, flags=re.M)  # what CI runs, in parts
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
        f"test-lab:\n\t@echo '16 passed in 2.0s'; {lab_fails}\n".replace("True", "false").replace("False", "true")
        + "no-triton-venv:\n\t@echo 'venv made'\nno-triton-repro:\n\t@echo 'x/repro.md: the same 27 table rows'\n"
        "no-triton-tests:\n\t@echo '9 passed in 3.0s'\n"
        "check-platforms:\n\t@echo 'wheels: ok'\n")
    run = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True)
    assert run.returncode == (1 if unit_fails or lab_fails else 0), run.stdout + run.stderr
    tail = run.stdout[run.stdout.rindex("== make test:"):]
    assert tail.startswith(f"== make test: exit status {2 if unit_fails else 0}\nFAILED tests/test_a.py::test_x")
    assert f"== make test-lab: exit status {2 if lab_fails else 0}\n16 passed in 2.0s" in tail
    assert "== make test-no-triton: exit status 0\nx/repro.md: the same 27 table rows\n9 passed in 3.0s" in tail
    assert "== make check-platforms: exit status 0" in tail


@pytest.mark.parametrize("failing", ["no-triton-venv", "no-triton-repro", "check-platforms"])
def test_ci_fails_when_a_step_run_beside_the_browser_tests_fails(tmp_path, failing):
    """.ci/run makes the venv without Triton, runs the main job in it and checks the platforms' locks in the
    background: a failure there fails the run and shows in its summary, with that step's log."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    steps = {"test": "'1 passed in 1.0s'", "test-lab": "'16 passed in 2.0s'", "no-triton-venv": "'venv made'",
             "no-triton-repro": "'x/repro.md: the same 27 table rows'", "no-triton-tests": "'9 passed in 3.0s'",
             "check-platforms": "'wheels: ok'"}
    (tmp_path / "Makefile").write_text("".join(
        f"{name}:\n\t@echo {text}{'; echo boom-' + name + '; false' if name == failing else ''}\n"
        for name, text in steps.items()))
    run = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"boom-{failing}" in run.stdout
    tail = run.stdout[run.stdout.rindex("== make test:"):]
    shown = "check-platforms" if failing == "check-platforms" else "test-no-triton"
    assert f"== make {shown}: exit status 0" not in tail and f"== make {shown}: exit status" in tail, tail
