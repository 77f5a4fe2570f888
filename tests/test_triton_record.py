"""The record that lets the run without Triton leave out the test modules that never ask for it
(tests/triton_record.py): each way of asking is seen and put on the module that ran, and the record clears
modules only for this tree, from a green run of every test, on a machine without Triton."""

import importlib.metadata
import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import triton_record
from triton_record import OUTSIDE, Recorder, tree_hash, unasked


def _noop():
    pass


def _find_submodule(name):
    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:  # its package is not installed (without Triton)
        return None


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
        "tests/f.py": lambda: recorder.find_spec("triton"),  # a first `import triton` reaches the meta-path finder
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
    record = {"tree": tree_hash(), "tests": ["tests/test_a.py::test_1", "tests/test_a.py::test_2[x]",
                                            "tests/test_b.py::test_1", "tests/test_c.py::test_1"],
              "did": {"tests/test_b.py": "asked for triton",
                      "tests/test_a.py::test_2[x]": "started a process"}} | change
    path.write_text(json.dumps(record))
    return path


def test_a_record_of_this_tree_clears_the_tests_that_did_nothing(tmp_path, no_triton):
    # a module's entry (its collection, a wider fixture) counts for each of its tests; a test's, for that test
    leave, why = unasked(_write(tmp_path / "r.json"))
    assert leave == {"tests/test_a.py::test_1", "tests/test_c.py::test_1"}
    assert why.startswith("the record clears 2 of the 4 tests")


@pytest.mark.parametrize("case, says", [
    ("missing", "no record of a run with Triton"),
    ("other tree", "is of another tree"),
    ("outside", "something outside any test module"),
])
def test_every_test_runs_where_the_record_cannot_vouch(tmp_path, no_triton, case, says):
    path = {"missing": lambda: tmp_path / "none.json",
            "other tree": lambda: _write(tmp_path / "r.json", tree="0" * 64),
            "outside": lambda: _write(tmp_path / "r.json", did={OUTSIDE: "asked for triton"})}[case]()
    leave, why = unasked(path)
    assert leave == set() and says in why and why.endswith("every test runs")


def test_with_triton_installed_every_test_runs(tmp_path):
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed here")
    assert unasked(_write(tmp_path / "r.json")) == (set(), "Triton is installed here: every test runs")


@pytest.mark.parametrize("args, keyword, markexpr, whole", [
    (["tests"], "", "not lab", True),
    ([], "", "not lab", True),  # testpaths
    (["tests/test_model.py"], "", "not lab", False),
    (["tests"], "model", "not lab", False),
    (["tests"], "", "not lab and not triton", False),
])
def test_only_a_run_of_every_test_is_recorded(args, keyword, markexpr, whole):
    root = triton_record.ROOT
    config = SimpleNamespace(option=SimpleNamespace(keyword=keyword, markexpr=markexpr, deselect=None, lf=False),
                             args=args or ["tests"], invocation_params=SimpleNamespace(dir=root))
    assert triton_record._whole_run(config) is whole
