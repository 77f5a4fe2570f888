"""The record that lets the run without Triton leave out the tests that never ask for it (tests/triton_record.py):
each way of asking is seen and put on the test or module that ran, and a record written by a green run with Triton
clears tests only for this checkout, on a machine without Triton, with CUDA as the record's or without as it."""

import importlib.metadata
import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
import torch
import triton_record
from triton_record import OUTSIDE, Recorder, tree_hash, unasked


def _noop():
    pass


def _find_submodule(name):
    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:  # its package is not installed (without Triton)
        return None


def _import_statement():
    try:
        import triton  # noqa: F401  (with Triton, long imported by now: sys.modules has it)
    except ImportError:
        pass


def _from_import():
    try:
        from triton.runtime import interpreter  # noqa: F401
    except ImportError:
        pass


def _import_module():
    try:
        importlib.import_module("triton.language")
    except ImportError:
        pass


@pytest.fixture
def recorder():
    r = Recorder()
    originals = (importlib.util.find_spec, importlib.metadata.version)
    r.start()
    yield r
    r.stop()
    assert (importlib.util.find_spec, importlib.metadata.version) == originals  # put back


def test_every_way_of_asking_is_put_on_the_module_that_ran(recorder):
    ways = {
        "tests/a.py": lambda: importlib.util.find_spec("triton"),
        "tests/b.py": lambda: _find_submodule("triton.language"),
        "tests/c.py": lambda: importlib.metadata.version("torch"),
        "tests/d.py": lambda: importlib.metadata.distributions(),
        "tests/e.py": lambda: subprocess.run([sys.executable, "-c", "0"], check=True),
        "tests/f.py": _import_statement,
        "tests/f2.py": _from_import,
        "tests/f3.py": _import_module,
    }
    if sys.platform != "win32":
        def spawn():
            p = multiprocessing.get_context("spawn").Process(target=_noop)
            p.start()
            p.join()
        ways["tests/g.py"] = spawn
        ways["tests/h.py"] = lambda: os.system("true")
    for module, way in ways.items():
        recorder.current = module
        way()
    recorder.current = "tests/quiet.py"
    importlib.util.find_spec("json")
    importlib.util.find_spec("tritonclient")  # another package whose name starts the same
    recorder.current = None
    importlib.util.find_spec("triton")
    assert set(recorder.did) == set(ways) | {OUTSIDE}, recorder.did
    assert recorder.did["tests/a.py"] == "asked for triton" and recorder.did["tests/c.py"].startswith("read installed")
    assert recorder.did["tests/e.py"].startswith("started a process (_execute_child")


def test_what_another_thread_does_counts_for_every_test(recorder):
    recorder.current = "tests/a.py"
    # (the thread notes directly: an ask through find_spec would reach the recorder of a make-unit run too, and
    # count for every test there)
    t = threading.Thread(target=recorder.note, args=("asked for triton",))
    t.start()
    t.join()
    assert recorder.did == {OUTSIDE: "asked for triton"}


def test_the_first_thing_a_module_did_is_kept(recorder):
    recorder.current = "tests/a.py"
    importlib.util.find_spec("triton")
    importlib.metadata.version("torch")
    assert recorder.did == {"tests/a.py": "asked for triton"}


@pytest.fixture
def no_triton(monkeypatch):
    original = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else original(name, *a))


def _write(path, **change):
    record = {"tree": tree_hash(), "cuda": torch.cuda.is_available(),
              "tests": ["tests/test_a.py::test_1", "tests/test_a.py::test_2[x]", "tests/test_b.py::test_1",
                        "tests/test_c.py::test_1"],
              "did": {"tests/test_b.py": "asked for triton",
                      "tests/test_a.py::test_2[x]": "started a process"}} | change
    path.write_text(json.dumps(record))
    return path


def test_a_record_of_this_tree_clears_the_tests_that_did_nothing(tmp_path, no_triton):
    # a module's entry (its collection, a wider fixture) counts for each of its tests; a test's, for that test
    leave, why = unasked(_write(tmp_path / "r.json"))
    assert leave == {"tests/test_a.py::test_1", "tests/test_c.py::test_1"}
    assert why.startswith("the record clears 2 of the 4 tests that passed")


@pytest.mark.parametrize("case, says", [
    ("missing", "no record of a run with Triton"),
    ("other tree", "is of another tree"),
    ("outside", "something outside any test module"),
    ("other machine", "CUDA"),
])
def test_every_test_runs_where_the_record_cannot_vouch(tmp_path, no_triton, case, says):
    path = {"missing": lambda: tmp_path / "none.json",
            "other tree": lambda: _write(tmp_path / "r.json", tree="0" * 64),
            "outside": lambda: _write(tmp_path / "r.json", did={OUTSIDE: "asked for triton"}),
            "other machine": lambda: _write(tmp_path / "r.json", cuda=not torch.cuda.is_available())}[case]()
    leave, why = unasked(path)
    assert leave == set() and says in why and why.endswith("every test runs")


def test_with_triton_installed_every_test_runs(tmp_path):
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed here")
    assert unasked(_write(tmp_path / "r.json")) == (set(), "Triton is installed here: every test runs")


@pytest.mark.parametrize("args, keyword, markexpr, only, whole", [
    (["tests"], "", "not lab", None, True),
    ([], "", "not lab", None, True),  # testpaths
    (["tests/test_model.py"], "", "not lab", None, False),
    (["tests"], "model", "not lab", None, False),
    (["tests"], "", "not lab and not triton", None, False),
    (["tests"], "", "not lab", "collectonly", False),
    (["tests"], "", "not lab", "setupplan", False),
])
def test_only_a_run_of_every_test_is_recorded(args, keyword, markexpr, only, whole):
    root = triton_record.ROOT
    option = SimpleNamespace(keyword=keyword, markexpr=markexpr, deselect=None, lf=False, collectonly=False,
                             setuponly=False, setupplan=False)
    if only:
        setattr(option, only, True)
    config = SimpleNamespace(option=option, args=args or ["tests"], invocation_params=SimpleNamespace(dir=root))
    assert triton_record._whole_run(config) is whole
