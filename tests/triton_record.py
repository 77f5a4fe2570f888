"""Which tests can run differently without Triton, as the run with Triton saw them.

Without Triton the package differs at one place: where it asks whether Triton is here (``device.triton_available``,
which every Triton-only path reaches through ``require_triton``; ``importlib.util.find_spec("triton")`` under it).
The tests' own skips are decided at collection (the ``triton`` marker, ``importorskip``) or ask the same question.
So a test that, run with Triton, never asked, never imported Triton, never read which packages are installed and
never started a process (whose asks this process cannot see) runs the same code without Triton: the run without
Triton (``make no-triton-tests``) may leave it out, where the run with Triton of the same tree passed every test.

What is asked while a test module is collected, while a fixture wider than one test is set up, or while a test is torn
down (a wider fixture's finalizer) counts for the whole module; a session-wide fixture's, or anything outside
a module, for every test. ``make unit`` writes what it saw (``--triton-record FILE``): every test collected, and
what each test or module did first. ``make no-triton-tests`` reads it (``--triton-skip-unasked FILE``) and deselects
the tests that did none, only where the file is for this tree (a hash of the sources); otherwise every test runs, and
the run says why.

Not followed: state one test leaves for another (a cache filled by a test that asked, read later by one that did
not). ``make no-triton-tests TRITON_RECORD=none`` runs every test without Triton, as CI did before the record.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import _posixsubprocess  # how multiprocessing's spawn starts a process on POSIX
except ImportError:  # Windows
    _posixsubprocess = None
try:
    import _winapi  # how they do on Windows
except ImportError:
    _winapi = None

ROOT = Path(__file__).resolve().parents[1]
#: What the record is valid for: the sources of the package, the tests, the tools, the notebooks and the lock.
SOURCES = ("mla_edu/**/*.py", "tests/**/*.py", "tools/**/*.py", "notebooks/*.py", "notebooks/*.ipynb",
           "pyproject.toml", "requirements/*.txt")
#: The key of what was done outside any test module (or in a session-wide fixture): every test runs.
OUTSIDE = "(outside any test module)"


def tree_hash() -> str:
    h = hashlib.sha256()
    for pattern in SOURCES:
        for p in sorted(ROOT.glob(pattern)):
            if "__pycache__" not in p.parts:
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
        self.did.setdefault(self.current or OUTSIDE, what)

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
        sys.meta_path.insert(0, self)  # a first `import triton` (later ones find it in sys.modules)

    def stop(self) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.current = None

    def find_spec(self, name, path=None, target=None):  # as a meta-path finder: notes, never finds
        if self.started and _is_triton(name):
            self.note(f"imported {name}")
        return None


def _module_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def _whole_run(config) -> bool:
    """Every test of tests/: no -k, no -m but pyproject's "not lab", no --deselect or --lf, no narrower path."""
    o = config.option
    if o.keyword or o.markexpr not in ("", "not lab") or getattr(o, "deselect", None) or getattr(o, "lf", False):
        return False
    tests = ROOT / "tests"
    return all(Path(config.invocation_params.dir, a).resolve() == tests for a in config.args)


class RecordPlugin:
    """``--triton-record FILE``: records in each process that runs tests; xdist's workers send theirs to the
    controller, which writes FILE after a green run of every test, with Triton (and removes it otherwise)."""

    def __init__(self, config, path: Path) -> None:
        self.config, self.path, self.recorder = config, path, Recorder()
        self.tests: set[str] = set()
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
        outer = self._during(_module_of(item.nodeid))  # where a wider fixture's finalizer runs
        yield
        self.recorder.current = outer

    def pytest_collection_finish(self, session):
        self.tests |= {i.nodeid for i in session.items}

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        out = getattr(node, "workeroutput", {}).get("triton_record")
        if out:
            self.tests |= set(out["tests"])
            for k, v in out["did"].items():
                self.did.setdefault(k, v)

    def pytest_sessionfinish(self, session, exitstatus):
        self.recorder.stop()
        for k, v in self.recorder.did.items():
            self.did.setdefault(k, v)
        if self.worker:
            self.config.workeroutput["triton_record"] = {"tests": sorted(self.tests), "did": self.did}
            return
        self.path.unlink(missing_ok=True)
        if exitstatus == 0 and _whole_run(self.config) and importlib.util.find_spec("triton") is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"tree": self.tree, "did": dict(sorted(self.did.items())),
                                             "tests": sorted(self.tests)}, indent=0) + "\n")


def unasked(path: Path) -> tuple[set[str], str]:
    """The tests a record says may be left out without Triton, and in words why (or why none may)."""
    if importlib.util.find_spec("triton") is not None:
        return set(), "Triton is installed here: every test runs"
    if not path.is_file():
        return set(), f"no record of a run with Triton at {path} (make unit writes it): every test runs"
    record = json.loads(path.read_text())
    if record["tree"] != tree_hash():
        return set(), f"{path} is of another tree (the sources changed since make unit wrote it): every test runs"
    if OUTSIDE in record["did"]:
        return set(), f"{path}: something outside any test module {record['did'][OUTSIDE]}: every test runs"
    leave = {t for t in record["tests"] if t not in record["did"] and _module_of(t) not in record["did"]}
    return leave, (f"the record clears {len(leave)} of the {len(record['tests'])} tests: in the run with Triton "
                   f"of this tree ({path}), every test passed and these never asked whether Triton is here, never "
                   "imported it, never read the installed packages and never started a process")


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
