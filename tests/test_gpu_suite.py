"""``tools.gpu_suite`` here, without a GPU: which wheels it carries, its commands (dry run), and the report it writes
from a real pytest junit file."""

import subprocess
import sys
import textwrap

import pytest

from tools import gpu_suite as gs

LOCK = textwrap.dedent("""\
    # a uv lock
    colorspacious==1.1.2
        # via mla-edu (pyproject.toml)
    ipykernel==7.4.0
        # via
        #   mla-edu (pyproject.toml)
        #   nbval
    nbval==0.11.0
        # via mla-edu (pyproject.toml)
    numpy==2.4.6
        # via
        #   colorspacious
        #   torch
    nvidia-cublas==13.0
        # via torch
    pyzmq==27.3.0
        # via ipykernel
    ruff==0.15.0
        # via mla-edu (pyproject.toml)
    torch==2.13.0+cpu
        # via mla-edu (pyproject.toml)
    """)


def test_carried_is_the_roots_and_what_they_need_but_the_machines_own():
    assert gs.carried(LOCK, roots=("nbval", "colorspacious")) == {
        "colorspacious": "1.1.2", "ipykernel": "7.4.0", "nbval": "0.11.0", "pyzmq": "27.3.0"}  # numpy: the machine's
    assert gs.carried(LOCK, roots=("nbval",), not_carried=()) == {"ipykernel": "7.4.0", "nbval": "0.11.0",
                                                                  "pyzmq": "27.3.0"}
    with pytest.raises(ValueError, match=r"\['hypothesis'\] not pinned in the lock"):
        gs.carried(LOCK, roots=("nbval", "hypothesis"))


def test_the_locks_carried_stack():
    pins = gs.carried(gs.LOCK.read_text())
    assert set(gs.ROOTS) <= set(pins) and {"nbformat", "jupyter-client", "pyzmq", "ipython"} <= set(pins)
    assert not {"torch", "triton", "numpy", "jupyterlab", "ruff", "pytest-xdist", "selenium", "sphinx"} & set(pins)
    assert not [p for p in pins if p.startswith("nvidia")]
    cmds = gs.download(pins)
    assert len(cmds) == len(pins) and cmds[0][-1] == f"{next(iter(pins))}=={next(iter(pins.values()))}"
    assert all(c[c.index("--python-version") + 1] == "3.12" and "manylinux_2_28_x86_64" in c for c in cmds)


def test_run_dry_prints_both_parts_and_runs_nothing(tmp_path, capsys):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "a-1.0-py3-none-any.whl").write_bytes(b"")
    assert gs.main(["run", "--dry-run", "--wheels", str(tmp_path / "w"), "--runs", str(tmp_path / "r"),
                    "--out", str(tmp_path / "o.md")]) == 0
    out = capsys.readouterr().out
    assert "--target /tmp/site" in out and "(1 wheels)" in out
    assert "== unit: python3 -m pytest -q -p no:cacheprovider -p _hypothesis_pytestplugin tests\n" in out
    assert "== nbval: python3 -m pytest -q -p no:cacheprovider -p nbval.plugin --nbval-lax " \
           "notebooks/[0-9][0-9]_*.ipynb\n" in out
    assert list((tmp_path / "r").iterdir()) == [] and not (tmp_path / "o.md").exists()
    with pytest.raises(SystemExit):
        gs.main(["run", "unit", "lab"])


SAMPLE = '''
import pytest

def test_ok():
    pass

@pytest.mark.parametrize("x", [1, 2])
def test_skipped(x):
    pytest.skip("needs a CUDA GPU")

@pytest.mark.skipif(True, reason="Triton on CPU tensors needs TRITON_INTERPRET=1")
def test_skipif():
    pass

def test_fails():
    assert 1 == 2, "one is not two"

@pytest.fixture
def broken():
    raise RuntimeError("CUDA error: device-side assert triggered")

def test_error(broken):
    pass
'''


@pytest.fixture(scope="module")
def junit(tmp_path_factory):
    """A real pytest run's junit xml: 1 passed, 1 failed, 1 error, 3 skipped for 2 reasons."""
    d = tmp_path_factory.mktemp("sample")
    (d / "test_sample.py").write_text(SAMPLE)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                    f"--junitxml={d / 'unit.xml'}", str(d / "test_sample.py")], cwd=d, capture_output=True)
    return (d / "unit.xml").read_text()


def test_junit_counts(junit):
    c = gs.junit_counts(junit)
    assert (c["passed"], c["failed"], c["errors"], c["skipped"]) == (1, 1, 1, 3)
    assert c["skips"] == {"needs a CUDA GPU": 2, "Triton on CPU tensors needs TRITON_INTERPRET=1": 1}
    assert [name.split("::")[1] for name, _ in c["failures"]] == ["test_fails", "test_error"]
    assert "one is not two" in c["failures"][0][1] and "device-side assert" in c["failures"][1][1]


def test_the_report(junit, tmp_path):
    versions = {"python": "3.12.3", "torch": "2.11.0+cu130 (CUDA 13.0)", "triton": "3.6.0",
                "gpu": "NVIDIA H200 (sm90), 1 visible"}
    part = {"part": "unit", "command": "python3 -m pytest -q tests", "seconds": 312.4, "exit_status": 1,
            "versions": versions, "carried": ["a.whl", "b.whl"], "date": "2026-12-04 05:00 UTC"}
    (tmp_path / "unit.json").write_text(__import__("json").dumps(part))
    (tmp_path / "unit.xml").write_text(junit)
    gs.main(["report", "--runs", str(tmp_path), "--out", str(tmp_path / "r.md"), "--commit", "abc1234"])
    md = (tmp_path / "r.md").read_text()
    assert "at `abc1234`, 2026-12-04 05:00 UTC. Python 3.12.3, torch 2.11.0+cu130 (CUDA 13.0), triton 3.6.0, " \
           "GPU: NVIDIA H200 (sm90), 1 visible" in md and "carried as 2 wheels" in md
    assert "| unit | `python3 -m pytest -q tests` | 1 | 1 | 1 | 3 | 312 s | 1 |" in md
    assert "In all: 1 passed, 1 failed, 1 errors, 3 skipped in 5.2 min (the parts' times added)." in md
    assert "| 2 | needs a CUDA GPU |\n| 1 | Triton on CPU tensors needs TRITON_INTERPRET=1 |" in md
    assert "test_sample::test_fails`: " in md and "## unit: failed and errors" in md
    with pytest.raises(ValueError, match="no part ran"):
        gs.to_markdown([], None)


def test_run_writes_each_parts_files_and_the_report(tmp_path, monkeypatch, capsys):
    """``run`` for real, here (no GPU, no wheels), each part a small sample: its junit, log and json, then the report
    of both; the exit status is the first failing part's."""
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "test_green.py").write_text("def test_green():\n    pass\n")
    monkeypatch.setattr(gs, "PARTS", {"unit": ["-p", "_hypothesis_pytestplugin", str(tmp_path / "test_green.py")],
                                      "nbval": [str(tmp_path / "test_sample.py")]})
    (tmp_path / "w").mkdir()
    runs, out = tmp_path / "r", tmp_path / "o.md"
    assert gs.main(["run", "unit", "--wheels", str(tmp_path / "w"), "--runs", str(runs), "--out", str(out)]) == 0
    assert gs.main(["run", "nbval", "--wheels", str(tmp_path / "w"), "--runs", str(runs), "--out", str(out)]) == 1
    assert sorted(p.name for p in runs.iterdir()) == [f"{part}.{ext}" for part in ("nbval", "unit")
                                                      for ext in ("json", "log", "xml")]
    assert "1 passed" in (runs / "unit.log").read_text() and "1 failed" in (runs / "nbval.log").read_text()
    md = out.read_text()
    assert "| unit | `python3 -m pytest -q -p no:cacheprovider -p _hypothesis_pytestplugin" in md
    assert "| 1 | 0 | 0 | 0 |" in md and "| 1 | 1 | 1 | 3 |" in md and "In all: 2 passed, 1 failed" in md
    assert f"GPU: {gs.versions()['gpu']}" in md and "carried as 0 wheels" in md  # "none" on a CPU machine
    assert "no wheels in" in capsys.readouterr().out
