"""Notebook 00's setup check never lies: each broken environment gives its red with its one remedy, none a green;
the environments that are fine (no dev or book tools, no Triton on macOS or Windows) give a green."""

import json
import re
import shutil
import subprocess
import sys
import venv

import pytest

from mla_edu.device import HAS_CUDA
from mla_edu.paths import REPO_ROOT
from mla_edu.workshop import setup_check as sc

NOTEBOOK = REPO_ROOT / "notebooks" / "00_setup_check.py"
PINS = sc.read_lock(sc.lock_path())
try:
    LEARNER = sc.learner_packages()
except LookupError as e:  # a GPU machine that runs the tree from PYTHONPATH (make test-gpu) has no mla-edu installed
    pytest.skip(f"the setup check reads the installed mla-edu's metadata: {e}", allow_module_level=True)


def _report(name, check, *args, **kwargs) -> sc.Report:
    report = sc.Report()
    report.run(name, check, *args, **kwargs)
    return report


def _red(name, check, *args, **kwargs) -> str:
    """The remedy of a check that must be red; the summary must not be green."""
    report = _report(name, check, *args, **kwargs)
    assert report.red == [name], report.verdicts
    assert "all green" not in report.summary() and report.summary().endswith(f"; red: {name}")
    return report.verdicts[name].remedy


def _learner_env(**changes) -> dict[str, str]:
    """The packages a learner imports at their pinned versions (no dev or book tool), with ``changes``
    (None: uninstalled)."""
    env = {n: PINS[n] for n in LEARNER if n in PINS}
    for name, version in changes.items():
        if version is None:
            env.pop(name)
        else:
            env[name] = version
    return env


def _first_code_cell() -> str:
    cells = NOTEBOOK.read_text().split("\n# %%")
    return next(c.split("\n", 1)[1] for c in cells if "import mla_edu" in c and not c.startswith(" [markdown]"))


# ---- the seven broken environments ------------------------------------------------------------------------
def test_1_wrong_kernel_without_mla_edu_is_named(tmp_path):
    """A Python that is not the project's venv (here a bare venv): the first cell names the wrong kernel."""
    venv.create(tmp_path / "other", with_pip=False)
    python = tmp_path / "other" / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    proc = subprocess.run([str(python), "-I", "-c", _first_code_cell()], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: wrong kernel: ") and "cannot import mla_edu" in last, proc.stderr
    assert ".venv/bin/jupyter lab" in last and "docs/setup.md" in last


def test_2_wrong_kernel_of_another_checkout_or_python(tmp_path):
    other = tmp_path / "other-checkout"
    (other / "mla_edu").mkdir(parents=True)
    (other / "pyproject.toml").write_text("")
    remedy = _red("kernel", sc.check_kernel, other / "notebooks")
    assert remedy.startswith("wrong kernel: it imports mla_edu from") and "other-checkout" in remedy
    # notebooks copied out of any checkout (as JupyterLab's browser tests run them): the kernel's mla_edu is the one
    assert _report("kernel", sc.check_kernel, tmp_path / "copy" / "notebooks", python=(3, 11)).red == []
    assert sc.Report().verdicts == {}
    remedy = _red("kernel", sc.check_kernel, REPO_ROOT / "notebooks", python=(3, 12))
    assert remedy.startswith("wrong kernel: Python 3.12; the locks are for Python 3.11")
    assert "make PYTHON=python3.11" in remedy
    assert _report("kernel", sc.check_kernel, REPO_ROOT / "notebooks", python=(3, 11)).red == []


def test_the_kernel_line_shows_this_checkouts_paths_relative_and_anothers_absolute(tmp_path):
    """Run in its own checkout, the kernel line names no machine's folders (the committed notebook 00 once showed
    a developer's worktree); for another checkout's notebooks it shows where mla_edu really came from."""
    line = sc.check_kernel(REPO_ROOT / "notebooks").lines[0]
    assert line.endswith("mla_edu from mla_edu") and str(REPO_ROOT) not in line, line
    other = tmp_path / "other-checkout"
    (other / "mla_edu").mkdir(parents=True)
    (other / "pyproject.toml").write_text("")
    assert sc.check_kernel(other / "notebooks").lines[0].endswith(f"mla_edu from {REPO_ROOT / 'mla_edu'}")
    assert sc.shown_path("/elsewhere/bin/python", REPO_ROOT) == "/elsewhere/bin/python"
    assert sc.shown_path(REPO_ROOT / ".venv" / "bin" / "python", REPO_ROOT) == ".venv/bin/python"
    assert sc.shown_path(REPO_ROOT / "mla_edu", None) == str(REPO_ROOT / "mla_edu")


def test_notebook_00_quotes_the_committed_run_all_times():
    """The stored output of 00's timings cell (NBVAL_IGNORE_OUTPUT: the times scaled to this machine vary) quotes
    every notebook's reference Run All time exactly as results/notebook_timings.json has it, so it cannot go stale
    when the table is rewritten: re-execute notebook 00 after python -m tools.notebook_timings."""
    nb = json.loads(NOTEBOOK.with_suffix(".ipynb").read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and 'report.run("timings"' in "".join(c["source"])]
    assert len(cells) == 1, "expected one timings cell in notebook 00"
    printed = "".join("".join(o.get("text", "")) for o in cells[0]["outputs"])
    quoted = dict(re.findall(r"^  (\S+) +Run All +([\d.]+) s on the reference machine", printed, re.M))
    want = {name[:-6]: f"{nb_['run_all_s']:.1f}" for name, nb_ in sc.load_timings()["notebooks"].items()}
    assert quoted == want, ("notebook 00's timings cell (quoted) against results/notebook_timings.json: re-execute "
                            f"notebooks/00_setup_check.ipynb: {quoted} != {want}")
    kernel = ["".join("".join(o.get("text", "")) for o in c["outputs"]) for c in nb["cells"]
              if c["cell_type"] == "code" and 'report.run("kernel"' in "".join(c["source"])]
    assert len(kernel) == 1 and kernel[0].rstrip().endswith("mla_edu from mla_edu"), (
        f"notebook 00 was executed with another checkout's mla_edu: {kernel}")


@pytest.mark.parametrize("name, version", [("numpy", "2.0.0"), ("transformers", None), ("torch", "2.12.0")])
def test_3_4_a_learner_package_at_another_version_or_missing(name, version):
    remedy = _red("versions", sc.check_versions, installed=_learner_env(**{name: version}))
    index = f" --extra-index-url {sc.TORCH_CPU_INDEX}" if "+cpu" in PINS[name] else ""
    assert remedy == f'%pip install "{name}=={PINS[name]}"{index}, then restart the kernel (Kernel > Restart Kernel)'


def test_5_ipywidgets_missing_gets_its_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    remedy = _red("widgets", sc.check_widgets)
    assert remedy.endswith(f'%pip install "ipywidgets=={PINS["ipywidgets"]}", then restart the kernel '
                           "(Kernel > Restart Kernel)"), remedy
    # the versions check leaves a missing widget package to this check: one red, one remedy
    assert _report("versions", sc.check_versions, installed=_learner_env(ipywidgets=None)).red == []


def test_6_the_widget_front_end_missing_gets_its_install_command():
    """jupyterlab_widgets missing: the kernel side works, JupyterLab draws no widget (the panel shows no figure)."""
    remedy = _red("widgets", sc.check_widgets, installed={})
    assert remedy.startswith("jupyterlab_widgets is missing, so JupyterLab draws no widget")
    assert remedy.endswith(f'%pip install "jupyterlab_widgets=={PINS["jupyterlab-widgets"]}", then restart '
                           "JupyterLab and reload the page")
    assert _report("versions", sc.check_versions, installed=_learner_env(**{"jupyterlab-widgets": None})).red == []


class _BrokenTriton:
    """A meta-path finder for which ``import triton`` fails as a half-installed Triton does."""

    def find_spec(self, name, path=None, target=None):
        if name == "triton":
            raise ImportError("libtriton.so: cannot open shared object file: No such file or directory")


def test_7_a_broken_triton_gets_a_reinstall(monkeypatch):
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BrokenTriton(), *sys.meta_path])
    remedy = _red("triton", sc.check_triton)
    assert remedy.startswith("Triton is installed but does not import (ImportError: libtriton.so")
    assert '%pip install --force-reinstall "triton==' in remedy


# ---- more reds ---------------------------------------------------------------------------------------------
@pytest.mark.skipif(HAS_CUDA, reason="the interpreter is needed without a GPU only")
def test_triton_without_its_interpreter_on_a_cpu(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "import mla_edu before anything imports triton" in _red("triton", sc.check_triton)


def test_changed_weights(tmp_path):
    from mla_edu.model import WEIGHTS_DIR, WEIGHTS_FILE

    shutil.copytree(WEIGHTS_DIR, tmp_path / "weights")
    data = bytearray((tmp_path / "weights" / WEIGHTS_FILE).read_bytes())
    data[-1] ^= 1
    (tmp_path / "weights" / WEIGHTS_FILE).write_bytes(bytes(data))
    assert _red("weights", sc.check_weights, tmp_path / "weights").startswith("the shipped weights changed")


def test_intel_mac_has_no_lock(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(sc.platform, "machine", lambda: "x86_64")
    remedy = _red("versions", sc.check_versions)
    assert remedy.startswith("no lock for an Intel Mac (x86_64): PyTorch publishes no torch 2.13")
    assert "docs/setup.md" in remedy


def test_a_check_that_raises_counts_as_red(capsys):
    def raises():
        raise RuntimeError("boom")

    report = sc.Report()
    report.run("fine", lambda: sc.Verdict(True))
    report.run("raises", raises)
    report.run("timings", sc.check_timings, None)  # what follows a smoke run that raised
    assert report.red == ["raises", "timings"]
    assert report.summary() == "setup check: 1 of 3 checks passed (fine, raises, timings); red: raises, timings"
    assert report.verdicts["raises"].remedy.startswith("it raised RuntimeError: boom.")
    assert "RED   raises: it raised RuntimeError: boom." in capsys.readouterr().out
    with pytest.raises(ValueError, match="expected a new check name"):
        report.run("fine", lambda: sc.Verdict(True))
    assert sc.Report().summary() == "setup check: no check ran"
    with pytest.raises(ValueError, match="a failed check needs its remedy"):
        sc.Verdict(False)
    report.run("no verdict", lambda: True)
    assert "expected a Verdict, got bool" in report.verdicts["no verdict"].remedy


# ---- environments that are fine: green ---------------------------------------------------------------------
def test_no_dev_or_book_tools_is_green():
    env = _learner_env()
    assert not {"pytest", "sphinx", "ruff", "jupytext", "nbval", "selenium"} & set(env)
    report = _report("versions", sc.check_versions, installed=env)
    assert report.red == [] and " 0 not at their pinned version" in report.verdicts["versions"].lines[0]


@pytest.mark.parametrize("sys_platform, where", [("darwin", "macOS"), ("win32", "Windows"), ("linux", "Linux")])
def test_no_triton_is_a_pass_with_a_note(monkeypatch, sys_platform, where):
    monkeypatch.setitem(sys.modules, "triton", None)
    report = _report("triton", sc.check_triton, sys_platform)
    assert report.red == [] and "all green" in report.summary()
    note = report.verdicts["triton"].note
    if where == "Linux":
        assert note == ("Triton: not installed, notebooks use the torch kernel "
                        f'(%pip install "triton=={PINS["triton"]}" adds the Triton kernels)')
    else:
        assert note == f"Triton: not available on {where}, notebooks use the torch kernel"
    assert report.notes() == [f"note  triton: {note}"]


def test_the_widget_is_displayed_and_read_back(capsys):
    report = _report("widgets", sc.check_widgets)
    assert report.red == [], report.verdicts
    assert report.verdicts["widgets"].lines[0].endswith("read back from the widget: True")
    assert "Output(" in capsys.readouterr().out  # displayed (its text form outside a notebook)


def test_lock_by_platform():
    assert sc.lock_path(sys_platform="darwin", machine="arm64").name == "macos-arm64.txt"
    assert sc.lock_path(sys_platform="win32", machine="AMD64").name == "windows-amd64.txt"
    assert sc.lock_path(False, "linux", "x86_64").name == "cpu.txt"
    assert sc.lock_path(True, "linux", "x86_64").name == "gpu.txt"
    with pytest.raises(LookupError, match="no lock for an Intel Mac"):
        sc.lock_path(sys_platform="darwin", machine="x86_64")
    for path in (sc.lock_path(sys_platform="darwin", machine="arm64"), sc.lock_path(sys_platform="win32")):
        assert path.is_file(), path


def test_learner_packages_leave_out_the_tools():
    assert {"torch", "numpy", "transformers", "matplotlib", "ipywidgets", "jupyterlab-widgets", "pydantic"} <= LEARNER
    assert not {"pytest", "sphinx", "ruff", "jupytext", "nbval", "selenium", "jupyterlab", "myst-nb"} & LEARNER
