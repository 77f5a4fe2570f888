"""The instructor guide's numbers: the committed timings table against the notebooks as they are now, the
tracks within their budgets, and notebook 00's checks (tools.notebook_timings, mla_edu.workshop.setup_check)."""

import json

import pytest

from mla_edu.workshop import setup_check as sc
from tools import notebook_timings as nt

RERUN = "the notebooks changed since the table was written: run python -m tools.notebook_timings and commit"


@pytest.fixture(scope="module")
def committed():
    return sc.load_timings()


@pytest.fixture(scope="module")
def current():
    return {p.name: nt.sections(json.loads(p.read_text()))
            for p in sorted(nt.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))}


def test_the_table_has_every_notebook(committed, current):
    assert list(committed["notebooks"]) == list(current), RERUN


def test_words_cells_and_markers_match_the_notebooks(committed, current):
    for name, secs in current.items():
        shape = lambda ss: [(s["title"], s["marker"], s["words"], s["code_cells"]) for s in ss]  # noqa: E731
        assert shape(committed["notebooks"][name]["sections"]) == shape(secs), f"{name}: {RERUN}"


def test_every_section_is_marked_core_or_optional(current):
    unmarked = [f"{name}: {s['title']}" for name, secs in current.items() for s in secs if s["marker"] is None]
    assert not unmarked, f"headings without ' (core)' or ' (optional)': {unmarked}"


def test_tracks_fit_their_budgets_and_the_page_shows_the_table(committed):
    for track, blocks in nt.TRACKS.items():
        minutes = nt.track_minutes(committed, blocks)
        assert minutes == committed["tracks"][track], RERUN
        assert 0 < minutes["total_min"] <= nt.BUDGET_MIN[track], f"{track}: {minutes['total_min']} min"
    assert nt.TABLE_MD.read_text() == nt.to_markdown(committed), RERUN


@pytest.mark.parametrize("which, match", [([99], r"sections \[99\] do not exist"), ("some", "expected 'core'"),
                                          ([1.5], "expected 'core'")])
def test_a_track_block_naming_no_section_is_refused(committed, which, match):
    nb = committed["notebooks"]["03_paged_kv_cache.ipynb"]
    with pytest.raises(ValueError, match=match):
        nt.select(nb, which)


def test_section_minutes_add_reading_cells_and_running():
    s = {"words": 260, "code_cells": 3, "run_s": 90}
    assert nt.minutes(s) == 260 / nt.WORDS_PER_MIN + 3 * nt.MIN_PER_CODE_CELL + 1.5


def test_sections_split_at_headings_and_read_timestamps():
    nb = {"cells": [
        {"cell_type": "markdown", "source": "# 09 · Title\n\nTwo words"},
        {"cell_type": "code", "source": "x = 1", "metadata": {"execution": {
            "iopub.execute_input": "2026-01-01T00:00:00.000Z", "shell.execute_reply": "2026-01-01T00:00:02.500Z"}}},
        {"cell_type": "markdown", "source": ["## 1. First (optional)\n", "a b $x$ ---"]},
        {"cell_type": "code", "source": "y = 2", "metadata": {}},
        {"cell_type": "markdown", "source": "## Unmarked"}]}
    secs = nt.sections(nb)
    assert [(s["title"], s["marker"], s["words"], s["code_cells"], s["nbclient_s"]) for s in secs] == [
        ("introduction", "core", 2, 1, 2.5), ("1. First", "optional", 3, 1, 0.0), ("Unmarked", None, 0, 0, 0.0)]


# ---- notebook 00's checks --------------------------------------------------------------------------
def test_lock_mismatches_name_each_package(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("# a comment\ntorch==2.13.0+cpu\n    # via x\nNumPy==2.4.6\nsome_pkg==1.0 ; python_version>'3'\n")
    assert sc.read_lock(lock) == {"torch": "2.13.0+cpu", "numpy": "2.4.6", "some-pkg": "1.0"}
    installed = {"torch": "2.13.0", "numpy": "2.4.6", "Some.Pkg": "1.0"}
    assert sc.lock_mismatches(lock, installed) == [("torch", "2.13.0+cpu", "2.13.0")]
    assert sc.lock_mismatches(lock, {"torch": "2.13.0+cpu"}) == [("numpy", "2.4.6", None), ("some-pkg", "1.0", None)]
    assert sc.lock_mismatches(lock, {"torch": "2.13.0+cpu", "numpy": "2.4.6", "some-pkg": "1.0"}) == []


def test_lock_refusals(tmp_path):
    with pytest.raises(FileNotFoundError, match="no lock at"):
        sc.read_lock(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("# nothing pinned\n")
    with pytest.raises(ValueError, match="expected 'name==version' lines"):
        sc.read_lock(tmp_path / "empty.txt")
    assert sc.lock_path(True).name == "gpu.txt" and sc.lock_path(False).name == "cpu.txt"


@pytest.mark.skipif(not sc.locked(), reason="make test-latest: the newest versions, not the lock's, on purpose")
def test_this_environment_matches_its_lock():
    # make test-no-triton leaves Triton out on purpose (the packages a Mac gets); everything else is the lock's
    wrong = [m for m in sc.lock_mismatches() if not (m[0] == "triton" and m[2] is None)]
    assert wrong == [], "the environment differs from its lock: make clean-venv && make .venv/.ready"


def test_expected_run_times_scale_by_the_smoke_run():
    timings = {"reference_smoke_s": 2.0, "notebooks": {"01_a.ipynb": {"run_all_s": 10.0}}}
    assert sc.expected_run_times(4.0, timings) == {"01_a.ipynb": 20.0}
    for bad in (0, -1.0, "3", None):
        with pytest.raises(ValueError, match="smoke_seconds: expected a positive number"):
            sc.expected_run_times(bad, timings)
    with pytest.raises(ValueError, match="expected a positive 'reference_smoke_s', got 0"):
        sc.expected_run_times(1.0, {**timings, "reference_smoke_s": 0})


def test_weights_and_smoke_run_refusals():
    with pytest.raises(ValueError, match="variant: expected one of"):
        sc.weights_ok("huge")
    for bad in (1, 2.0, True, "8"):
        with pytest.raises(ValueError, match="num_questions: expected an int >= 2"):
            sc.smoke_run(bad)


def test_readme_quotes_the_tracks_the_table_times():
    """README quotes each track by its budget, which the table's total fits (test above), and the guide's page
    includes the table itself."""
    from mla_edu.paths import REPO_ROOT

    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    for track, budget in nt.BUDGET_MIN.items():
        assert f"(within {budget} minutes" in readme, track
    assert "docs/instructor.md" in readme
    assert "{include} timings.md" in (REPO_ROOT / "docs" / "instructor.md").read_text()
