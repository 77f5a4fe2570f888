"""Which tests can run differently without Triton, as the run with Triton saw them.

Without Triton the package differs only where code learns whether Triton is here: where it asks
(``device.triton_available``, which Triton-only paths reach through ``require_triton``; ``importlib.util.find_spec``
under it) or where it imports triton (``import triton``, ``from triton.x import y``, ``importlib.import_module``).
The tests' own skips are decided at collection (the ``triton`` marker, ``importorskip``) or ask the same way. So a
test that, run with Triton, passed and never asked, never imported triton, never read which packages are installed and
never started a process (whose asks this process cannot see) runs the same code without Triton: the run without
Triton (``make no-triton-tests``) may leave it out.

What is asked while a test module is collected, while a fixture wider than one test is set up, or while a test is torn
down (a wider fixture's finalizer) counts for the whole module; in a session-wide fixture or its finalizer (the last
test's teardown), in another thread or outside any module, for every test. ``make unit`` writes what it saw
(``--triton-record FILE``): the tests that passed, whether CUDA was there, a hash of every file of the checkout, and
what each test or module did first. ``make no-triton-tests`` reads it (``--triton-skip-unasked FILE``) and deselects
the tests that passed and did none of it, only where the record is of this checkout and of a machine with CUDA
as this one (or without, as this one); otherwise every test runs, and the run says why.

Not followed: state one test leaves for another (a cache filled by a test that asked, read later by one that did
not). ``make no-triton-tests TRITON_RECORD=none`` runs every test without Triton, as CI did before the record.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
import torch

try:
    import _posixsubprocess  # how multiprocessing's spawn starts a process on POSIX
except ImportError:  # Windows
    _posixsubprocess = None
try:
    import _winapi  # how they do on Windows
except ImportError:
    _winapi = None

ROOT = Path(__file__).resolve().parents[1]
#: Folders of the checkout that are not sources (where no git lists the files).
NOT_SOURCES = {".git", "build", "node_modules", "__pycache__", ".device", ".whl", ".ipynb_checkpoints"}
#: The key of what was done outside any test module (or in a session-wide fixture): every test runs.
OUTSIDE = "(outside any test module)"


def _files() -> list[Path]:
    """Every file of the checkout: what git tracks and the files it does not ignore, or, without git (the
    attendees' copy), every file outside the build, venv and cache folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout
        return sorted(ROOT / name for name in set(out.decode().split("\0")) if name)
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for p in ROOT.rglob("*") if p.is_file() and not any(
            part in NOT_SOURCES or part.startswith(".venv") for part in p.relative_to(ROOT).parts))


def tree_hash() -> str:
    """A hash of every file of the checkout (the record is valid for these files only)."""
    h = hashlib.sha256()
    for p in _files():
        if p.is_file():
            h.update(p.relative_to(ROOT).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _is_triton(name) -> bool:
    return name == "triton" or str(name).startswith("triton.")


class Recorder:
    """Wraps the places where code learns whether Triton is here (or starts a process this one cannot watch), and
    records under ``current`` (a test's node id, a module's path or OUTSIDE) what was done first."""

    def __init__(self) -> None:
        self.current: str | None = None
        self.did: dict[str, str] = {}
        self._originals = []

    def note(self, what: str) -> None:
        main = threading.current_thread() is threading.main_thread()
        self.did.setdefault(self.current if main and self.current else OUTSIDE, what)

    def _wrap(self, owner, name: str, what) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            reason = what(*args, **kwargs)
            if reason:
                self.note(reason)
            return original(*args, **kwargs)

        self._originals.append((owner, name, original))
        setattr(owner, name, wrapper)

    @property
    def started(self) -> bool:
        return bool(self._originals)

    def start(self) -> None:
        self._wrap(importlib.util, "find_spec", lambda name, *a, **k: f"asked for {name}" if _is_triton(name) else None)
        for name in ("distribution", "distributions", "version", "metadata", "packages_distributions"):
            self._wrap(importlib.metadata, name, lambda *a, name=name, **k: f"read installed packages ({name})")
        starts = [(subprocess.Popen, "_execute_child"), (os, "fork"), (os, "forkpty"), (os, "posix_spawn"),
                  (os, "posix_spawnp"), (os, "system"), (_posixsubprocess, "fork_exec"), (_winapi, "CreateProcess")]
        for owner, name in starts:
            if owner is not None and hasattr(owner, name):
                self._wrap(owner, name, lambda *a, name=name, **k: f"started a process ({name})")
        self._wrap(builtins, "__import__", lambda name, *a, **k: f"imported {name}"
                   if _is_triton(name) and (a[3] if len(a) > 3 else k.get("level", 0)) == 0 else None)
        self._wrap(importlib, "import_module", lambda name, *a, **k: f"imported {name}" if _is_triton(name) else None)

    def stop(self) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()
        self.current = None


def _module_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def _whole_run(config) -> bool:
    """Every test of tests/, run: no -k, no -m but pyproject's "not lab", no --deselect or --lf, no narrower path, no
    --collect-only, --setup-only or --setup-plan."""
    o = config.option
    if any(getattr(o, name, False) for name in ("collectonly", "setuponly", "setupplan")):
        return False
    if o.keyword or o.markexpr not in ("", "not lab") or getattr(o, "deselect", None) or getattr(o, "lf", False):
        return False
    tests = ROOT / "tests"
    return all(Path(config.invocation_params.dir, a).resolve() == tests for a in config.args)


class RecordPlugin:
    """``--triton-record FILE``: records in each process that runs tests; xdist's workers send theirs to the
    controller, which writes FILE after a green run of every test, with Triton (and removes it otherwise)."""

    def __init__(self, config, path: Path) -> None:
        self.config, self.path, self.recorder = config, path, Recorder()
        self.passed: set[str] = set()  # the tests whose call passed (the controller sees every report)
        self.did: dict[str, str] = {}
        self.worker = hasattr(config, "workerinput")
        self.tree = None if self.worker else tree_hash()  # the tree the tests start from, not one edited meanwhile

    def _during(self, key: str | None):
        outer, self.recorder.current = self.recorder.current, key
        return outer

    def pytest_collectstart(self, collector):  # a process that runs tests (not xdist's controller)
        if not self.recorder.started:
            self.recorder.start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        outer = self._during(_module_of(collector.nodeid) if isinstance(collector, pytest.Module) else None)
        yield
        self.recorder.current = outer

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        outer = self._during(item.nodeid)
        yield
        self.recorder.current = outer

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        scope = fixturedef.scope
        key = (self.recorder.current if scope == "function" else OUTSIDE if scope in ("session", "package")
               else _module_of(request.node.nodeid))
        outer = self._during(key)
        yield
        self.recorder.current = outer

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        outer = self._during(item.nodeid)
        yield
        self.recorder.current = outer

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        # where a wider fixture's finalizer runs: a module's, or, after the last test, the session's
        outer = self._during(_module_of(item.nodeid) if nextitem is not None else OUTSIDE)
        yield
        self.recorder.current = outer

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.passed.add(report.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        for k, v in getattr(node, "workeroutput", {}).get("triton_record", {}).items():
            self.did.setdefault(k, v)

    def pytest_sessionfinish(self, session, exitstatus):
        self.recorder.stop()
        for k, v in self.recorder.did.items():
            self.did.setdefault(k, v)
        if self.worker:
            self.config.workeroutput["triton_record"] = self.did
            return
        self.path.unlink(missing_ok=True)
        if exitstatus == 0 and self.passed and _whole_run(self.config) and importlib.util.find_spec("triton"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"tree": self.tree, "cuda": torch.cuda.is_available(),
                                             "did": dict(sorted(self.did.items())), "tests": sorted(self.passed)},
                                            indent=0) + "\n")


def unasked(path: Path) -> tuple[set[str], str]:
    """The tests a record says may be left out without Triton, and in words why (or why none may)."""
    if importlib.util.find_spec("triton") is not None:
        return set(), "Triton is installed here: every test runs"
    if not path.is_file():
        return set(), f"no record of a run with Triton at {path} (make unit writes it): every test runs"
    record = json.loads(path.read_text())
    if record["tree"] != tree_hash():
        return set(), f"{path} is of another tree (a file changed since make unit wrote it): every test runs"
    if record["cuda"] != torch.cuda.is_available():
        return set(), (f"{path} is of a machine {'with' if record['cuda'] else 'without'} CUDA, this one has "
                       f"{'none' if record['cuda'] else 'it'}: every test runs")
    if OUTSIDE in record["did"]:
        return set(), f"{path}: something outside any test module {record['did'][OUTSIDE]}: every test runs"
    leave = {t for t in record["tests"] if t not in record["did"] and _module_of(t) not in record["did"]}
    return leave, (f"the record clears {len(leave)} of the {len(record['tests'])} tests that passed in the green run "
                   f"with Triton of this checkout ({path}): they never asked whether Triton is here, never imported "
                   "it, never read the installed packages and never started a process")


class SkipPlugin:
    """``--triton-skip-unasked FILE``: deselects the tests the record clears (in every process, the same way)."""

    def __init__(self, path: Path) -> None:
        self.leave, self.why = unasked(path)

    def pytest_report_header(self, config):
        return f"without Triton: {self.why}"

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        gone = [i for i in items if i.nodeid in self.leave]
        if gone:
            config.hook.pytest_deselected(items=gone)
            items[:] = [i for i in items if i.nodeid not in self.leave]

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_line(f"without Triton: {self.why}")


def addoption(parser) -> None:
    parser.addoption("--triton-record", metavar="FILE", help="write which tests asked whether Triton is here (after "
                     "a green run of every test, with Triton): tests/triton_record.py")
    parser.addoption("--triton-skip-unasked", metavar="FILE", help="without Triton, leave out the tests that FILE "
                     "(written by --triton-record for this tree) clears: tests/triton_record.py")


def configure(config) -> None:
    if config.getoption("triton_record"):
        config.pluginmanager.register(RecordPlugin(config, Path(config.getoption("triton_record"))), "triton_record")
    if config.getoption("triton_skip_unasked"):
        config.pluginmanager.register(SkipPlugin(Path(config.getoption("triton_skip_unasked"))), "triton_skip")
