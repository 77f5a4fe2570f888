"""The instructor guide's numbers: the committed timings table against the notebooks as they are now, the
tracks within their budgets, and notebook 00's checks (tools.notebook_timings, mla_edu.workshop.setup_check)."""

import json
import re
import subprocess
import sys
from importlib import metadata

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


def test_counts_and_markers_match_the_notebooks(committed, current):
    keys = ("title", "marker", "exercise", "words", "equations", "code_lines", "code_cells", "figures")
    for name, secs in current.items():
        shape = lambda ss: [tuple(s[k] for k in keys) for s in ss]  # noqa: E731
        assert shape(committed["notebooks"][name]["sections"]) == shape(secs), f"{name}: {RERUN}"


def test_every_section_is_marked_core_or_optional(current):
    unmarked = [f"{name}: {s['title']}" for name, secs in current.items() for s in secs if s["marker"] is None]
    assert not unmarked, f"headings without ' (core)' or ' (optional)': {unmarked}"


def test_the_rates_are_the_models(committed):
    assert (committed["words_per_min"], committed["min_per_equation"], committed["min_per_code_line"],
            committed["min_per_figure"], committed["attendee_factor"], committed["exercise_min"]) == (
        nt.WORDS_PER_MIN, nt.MIN_PER_EQUATION, nt.MIN_PER_CODE_LINE, nt.MIN_PER_FIGURE, nt.ATTENDEE_FACTOR,
        nt.EXERCISE_MIN), RERUN
    assert committed["prose_factor"] == nt.prose_factor() > 1, RERUN  # from results/timing_readaloud_03.json
    assert committed["prose_factor_source"] == "results/timing_readaloud_03.json"


def test_the_prose_factor_is_the_read_aloud_prose_over_the_model(tmp_path):
    """The factor is read from python -m tools.timing_readaloud's json, never copied: its prose audio minutes over
    the prose's words at the model's rate; a json without them, or read aloud at another rate, is refused."""
    result = json.loads((nt.RESULTS_DIR / "timing_readaloud_03.json").read_text())
    assert nt.prose_factor() == pytest.approx(result["prose_audio_min"] / result["prose_model_min"])
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"words_per_min": nt.WORDS_PER_MIN, "prose_model_min": 10, "prose_audio_min": 12.5}))
    assert nt.prose_factor(path) == 1.25
    for bad, match in [({"words_per_min": nt.WORDS_PER_MIN, "prose_model_min": 10}, r"missing \['prose_audio_min'\]"),
                       ({"words_per_min": 150, "prose_model_min": 10, "prose_audio_min": 12}, "read aloud at 150"),
                       ({"words_per_min": nt.WORDS_PER_MIN, "prose_model_min": 0, "prose_audio_min": 12},
                        "expected positive")]:
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            nt.prose_factor(path)
    with pytest.raises(FileNotFoundError, match="python -m tools.timing_readaloud"):
        nt.prose_factor(tmp_path / "missing.json")


def test_tracks_fit_with_breaks_and_an_exercise_every_20_minutes(committed):
    for track, blocks in nt.TRACKS.items():
        minutes = nt.track_minutes(committed, blocks)
        assert minutes == committed["tracks"][track], RERUN
        assert nt.track_problems(committed, track, blocks) == []
        assert 0 < minutes["total_min"] <= nt.BUDGET_MIN[track], f"{track}: {minutes['total_min']} min"
        assert minutes["max_gap_min"] <= nt.MAX_GAP_MIN, f"{track}: {minutes['max_gap_min']} min without an exercise"
        assert minutes["exercises"] >= (minutes["teaching_min"] // nt.MAX_GAP_MIN), track
    assert committed["additions"] == {track: [nt.track_minutes(committed, [b])["blocks"][0] for b in blocks]
                                      for track, blocks in nt.ADD.items()}, RERUN
    assert nt.TABLE_MD.read_text() == nt.to_markdown(committed), RERUN


def test_every_exercise_of_a_track_comes_after_the_sections_it_needs(committed):
    """NEEDS declares, per exercise a track uses, the sections its text builds on; each track teaches them first.
    The 3-hour track once set 07's exercise 2 (poison with a real page id) before 07 section 4 (the poison fill)."""
    for track, blocks in nt.TRACKS.items():
        assert nt.unmet_needs(committed, blocks) == [], track
    for (prefix, title), needs in nt.NEEDS.items():  # each names an exercise and sections that exist
        nb = nt.notebook_entry(committed, prefix)[1]
        assert [s["exercise"] is not None for s in nt.select(nb, [title])] == [True], (prefix, title)
        for p, w in needs:
            assert all(s["exercise"] is None for s in nt.select(nt.notebook_entry(committed, p)[1], [w])), (p, w)
    poison_first = [("07", [1], "demo"), ("07", [nt.EX + "2"], "demo"), ("07", [4], "demo")]
    assert nt.unmet_needs(committed, poison_first) == [
        "07 Exercises · exercise 2 needs 07: 4. The poison fill: silent garbage becomes a loud failure, not taught "
        "before it"]
    assert nt.unmet_needs(committed, [("07", [1, 4], "demo"), ("07", [nt.EX + "1"], "demo")]) == [
        "07 Exercises · exercise 1: declares no needs (add it to NEEDS)"]


def test_track_problems_name_an_overrun_a_short_break_and_a_long_gap():
    sec = lambda title, words, ex=None: {"title": title, "marker": "core", "exercise": ex,  # noqa: E731
                                         "words": words, "equations": 0, "code_lines": 0, "figures": 0, "run_s": 0.0}
    table = {"prose_factor": 1.0, "notebooks": {"09_x.ipynb": {"sections": [
        sec("1. A", 1500), sec("2. B", 2500), sec("Exercises", 0), sec("Exercises · exercise 1", 0, 1)]}}}
    fits = [("09", [1], "demo"), ("09", ["Exercises · exercise 1"], "demo"), (None, 10, "break")]
    needs = {("09", "Exercises · exercise 1"): [("09", 1)]}
    undeclared = "90-minute: 09 Exercises · exercise 1: declares no needs (add it to NEEDS)"
    assert nt.track_problems(table, "90-minute", fits) == [undeclared]  # NEEDS declares 09's exercise nowhere
    long = [("09", [2], "demo"), ("09", ["Exercises · exercise 1"], "demo"), ("09", [1], "demo"),
            (None, 5, "break"), (None, 50, "questions")]
    assert nt.track_problems(table, "90-minute", long) == [
        "90-minute: 99 minutes, over its 90", "90-minute: 5 minutes of break, expected at least 10",
        "90-minute: 25 minutes of teaching without an exercise, expected at most 20", undeclared]
    lunch = [*fits[:2], (None, 60, "lunch")]  # a lunch is no break: it counts in the budget, not in the breaks
    assert nt.track_problems(table, "90-minute", lunch) == ["90-minute: 0 minutes of break, expected at least 10",
                                                            undeclared]
    assert nt.unmet_needs(table, fits, needs) == []
    assert nt.unmet_needs(table, long, needs) == ["09 Exercises · exercise 1 needs 09: 1. A, not taught before it"]
    with pytest.raises(ValueError, match="track: expected one of"):
        nt.track_problems(table, "2-hour", fits)


def test_tracks_use_only_core_sections(committed):
    """A track teaches the story: the sections and exercises it takes are marked (core) in the notebooks."""
    for track, blocks in nt.TRACKS.items():
        for prefix, which, _ in blocks:
            if prefix is not None:
                _, nb = nt.notebook_entry(committed, prefix)
                optional = [s["title"] for s in nt.select(nb, which) if s["marker"] != "core"]
                assert not optional, f"{track}, {prefix}: optional sections {optional}"


@pytest.mark.parametrize("which, match", [([99], r"sections \[99\] do not exist"), ("some", "expected 'core'"),
                                          ([1.5], "expected 'core'"), ([True], "expected 'core'"),
                                          (["Exercises · exercise 9"], "do not exist")])
def test_a_track_block_naming_no_section_is_refused(committed, which, match):
    nb = committed["notebooks"]["03_paged_kv_cache.ipynb"]
    with pytest.raises(ValueError, match=match):
        nt.select(nb, which)


def test_section_minutes_add_prose_equations_figures_code_and_exercise():
    s = {"words": 250, "equations": 2, "code_lines": 30, "figures": 1, "run_s": 90, "exercise": None}
    code = 30 * nt.MIN_PER_CODE_LINE + 1.5
    demo = 250 / nt.WORDS_PER_MIN + 2 * nt.MIN_PER_EQUATION + nt.MIN_PER_FIGURE + code
    assert nt.minutes(s, prose_factor=1) == pytest.approx(demo)
    assert nt.minutes(s, prose_factor=1.2) == pytest.approx(demo + 0.2 * 250 / nt.WORDS_PER_MIN)  # prose only
    assert nt.minutes(s, "attendees run", prose_factor=1) == pytest.approx(demo + code * (nt.ATTENDEE_FACTOR - 1))
    assert nt.minutes({**s, "exercise": 1}, prose_factor=1) == pytest.approx(demo + nt.EXERCISE_MIN)
    with pytest.raises(ValueError, match="mode: expected one of"):
        nt.minutes(s, "lecture", prose_factor=1)
    for bad in (0, -1.0, "1.2", True):
        with pytest.raises(ValueError, match="prose_factor: expected a positive number"):
            nt.minutes(s, prose_factor=bad)


def test_track_minutes_split_teaching_exercises_and_gaps():
    sec = lambda title, ex=None: {"title": title, "marker": "core", "exercise": ex, "words": 100,  # noqa: E731
                                  "equations": 0, "code_lines": 0, "figures": 0, "run_s": 0.0}
    table = {"prose_factor": 1.0, "notebooks": {"09_x.ipynb": {"sections": [
        sec("1. A"), sec("2. B"), sec("Exercises"), sec("Exercises · exercise 1", 1)]}}}
    blocks = [("09", [1], "demo"), ("09", ["Exercises · exercise 1"], "demo"), ("09", [2], "demo"),
              (None, 10, "break"), ("09", [2], "demo")]
    t = nt.track_minutes(table, blocks)
    assert [(r["teaching"], r["exercises"], r["other"]) for r in t["blocks"]] == [
        (1, 0, 0), (0, 5, 0), (1, 0, 0), (0, 0, 10), (1, 0, 0)]
    assert (t["teaching_min"], t["exercise_min"], t["exercises"], t["max_gap_min"], t["total_min"]) == (
        3, 5, 1, 2, 18)
    # the read-aloud factor scales the prose: 1.5 minutes a section, 5.5 the exercise, each rounded half up to a
    # whole minute before anything is added (the unrounded sums would give 4.5 teaching and 20 in all)
    slow = nt.track_minutes({**table, "prose_factor": 1.5}, blocks)
    assert [(r["teaching"], r["exercises"]) for r in slow["blocks"]] == [(2, 0), (0, 6), (2, 0), (0, 0), (2, 0)]
    assert (slow["teaching_min"], slow["exercise_min"], slow["max_gap_min"], slow["total_min"]) == (6, 6, 4, 22)
    assert nt.breaks_needed(90) == 10 and nt.breaks_needed(180) == 20 and nt.breaks_needed(60) == 0


def test_whole_minutes_round_half_up_and_a_block_rounds_each_stretch_between_its_exercises():
    """One rounding for the table and the decks: ``whole`` takes 8.5 to 9 (Python's round gives 8). A block holding
    teaching, an exercise and teaching again rounds each stretch of teaching on its own, so that the gaps between
    exercises are sums of the whole minutes the table prints."""
    assert [nt.whole(m) for m in (8.5, 8.49, 9.5, 0.5, 0.49, 0)] == [9, 8, 10, 1, 0, 0]
    assert round(8.5) == 8  # what the table printed before: half to even
    sec = lambda title, words, ex=None: {"title": title, "marker": "core", "exercise": ex,  # noqa: E731
                                         "words": words, "equations": 0, "code_lines": 0, "figures": 0, "run_s": 0.0}
    table = {"prose_factor": 1.0, "notebooks": {"09_x.ipynb": {"sections": [
        sec("1. A", 130), sec("2. B", 130), sec("Exercises", 0), sec("Exercises · exercise 1", 450, 1),
        sec("3. C", 160)]}}}
    t = nt.track_minutes(table, [("09", "all", "demo"), ("09", [1], "demo")])
    # 2.6 minutes before the exercise and 1.6 after it: 3 + 2 (whole(4.2) would be 4); the exercise 4.5 + 4 = 8.5
    assert [(r["teaching"], r["exercises"]) for r in t["blocks"]] == [(5, 9), (1, 0)]
    assert (t["max_gap_min"], t["total_min"]) == (3, 15)  # after the exercise: 2 + 1
    assert nt.exercise_unit_minutes(table["notebooks"]["09_x.ipynb"]["sections"][3], prose_factor=1.0) == 9
    with pytest.raises(ValueError, match="expected an exercise unit"):
        nt.exercise_unit_minutes(table["notebooks"]["09_x.ipynb"]["sections"][0], prose_factor=1.0)


def _columns(md: str, track: str) -> tuple[re.Match, list[list[str]]]:
    """The header line of ``track``'s table in the printed markdown, and its rows' cells."""
    head = re.search(rf"^\*\*{re.escape(track)} track: (\d+) of \d+ minutes\*\* \((\d+) teaching, (\d+) exercises in "
                     rf"(\d+), at most (\d+) minutes of teaching between two exercises\)$", md, re.M)
    assert head, f"no header for the {track} track"
    body = md[head.end():].split("\n\n", 2)[1]
    return head, [[c.strip() for c in line.strip("|").split("|")] for line in body.splitlines()[2:]]


@pytest.mark.parametrize("track", sorted(nt.TRACKS))
def test_the_printed_track_tables_add_up(committed, track):
    """docs/timings.md as printed: each column sums to its header's total, the "ends at" clock runs through the
    blocks' minutes to the header's total, and a block's exercise minutes are those its exercises' slide titles give
    (``tools.slides.exercise_minutes``): one exercise, the same number; several, their sum."""
    from tools import slides

    head, rows = _columns(nt.TABLE_MD.read_text(), track)
    total, teaching, exercises, exercise_min, gap = map(int, head.groups())
    assert len(rows) == len(nt.TRACKS[track])
    cols = [[int(c) for c in r[1:]] for r in rows]
    assert sum(c[0] for c in cols) == teaching and sum(c[1] for c in cols) == exercise_min, track
    assert sum(c[0] + c[1] + c[2] for c in cols) == total <= nt.BUDGET_MIN[track]
    clock = 0
    for c in cols:
        clock += c[0] + c[1] + c[2]
        assert c[3] == clock, (track, c)
    assert cols[-1][3] == total and gap <= nt.MAX_GAP_MIN
    units = singles = 0
    for (prefix, which, _), c in zip(nt.TRACKS[track], cols):
        if prefix is None:
            continue
        name, nb = nt.notebook_entry(committed, prefix)
        decks = [slides.exercise_minutes(committed, name.removesuffix(".ipynb"), s["title"])
                 for s in nt.select(nb, which) if s["exercise"] is not None]
        assert c[1] == sum(decks), (track, which)  # one exercise: its slide's minutes; several: their sum
        units, singles = units + len(decks), singles + (len(decks) == 1)
    assert units == exercises and singles > 0


def test_sections_split_at_headings_and_exercises_and_count_what_is_taught():
    png = {"output_type": "display_data", "data": {"image/png": "iVBOR"}}
    nb = {"cells": [
        {"cell_type": "markdown", "source": "# 09 · Title\n\nTwo words\n\n$$a = b$$\n\n$$c\n  = d$$"},
        {"cell_type": "code", "source": "x = 1\n\n# NBVAL_IGNORE_OUTPUT\nplot(x)", "outputs": [png],
         "metadata": {"execution": {"iopub.execute_input": "2026-01-01T00:00:00.000Z",
                                    "shell.execute_reply": "2026-01-01T00:00:02.500Z"}}},
        {"cell_type": "markdown", "source": ["## 1. First (optional)\n", "a b $x$ ---\n", "![fig](f.png)"]},
        {"cell_type": "code", "source": "y = 2", "metadata": {}},
        {"cell_type": "markdown", "source": "## Exercises (core)\n\nIntro.\n\n**1.** Do it.\n"},
        {"cell_type": "code", "source": "ex1 = None", "metadata": {}},
        {"cell_type": "markdown", "source": "**2.** Again.\n\n## Unmarked"}]}
    secs = nt.sections(nb)
    keys = ("title", "marker", "exercise", "words", "equations", "code_lines", "code_cells", "figures", "nbclient_s")
    assert [tuple(s[k] for k in keys) for s in secs] == [
        ("introduction", "core", None, 2, 2, 2, 1, 1, 2.5), ("1. First", "optional", None, 7, 0, 1, 1, 1, 0.0),
        ("Exercises", "core", None, 3, 0, 0, 0, 0, 0.0),
        ("Exercises · exercise 1", "core", 1, 3, 0, 1, 1, 0, 0.0),
        ("Exercises · exercise 2", "core", 2, 2, 0, 0, 0, 0, 0.0),
        ("Unmarked", None, None, 1, 0, 0, 0, 0, 0.0)]
    with pytest.raises(ValueError, match="display equation opened with"):
        nt.markdown_parts("$$a = b\nc")


def test_the_read_aloud_check_is_committed_and_agrees():
    """results/timing_readaloud_03.json (python -m tools.timing_readaloud): the synthesised narration of notebook
    03 at the model's rate, section by section, against the model's minutes for the same counts."""
    from tools import timing_readaloud as tr

    result = json.loads((nt.RESULTS_DIR / "timing_readaloud_03.json").read_text())
    assert result["words_per_min"] == nt.WORDS_PER_MIN
    for r in result["sections"]:
        assert r["model_min"] == pytest.approx(r["words_counted"] / nt.WORDS_PER_MIN + r["pause_s"] / 60, abs=0.01)
        assert r["audio_min"] * 60 >= r["pause_s"], r["title"]  # the silences are in the audio
    assert abs(result["audio_min"] / result["model_min"] - 1) <= tr.TOLERANCE
    assert (nt.RESULTS_DIR / "timing_readaloud_03.md").read_text() == tr.to_markdown(result)
    guide = " ".join((nt.REPO_ROOT / "docs" / "instructor.md").read_text().split())
    r = result
    for quoted in (f"The audio came to {r['audio_min']:.1f} minutes against the model's {r['model_min']:.1f}",
                   f"the prose alone to {r['prose_audio_min']:.1f} minutes against {r['prose_model_min']:.1f}",
                   f"A speaker says {r['spoken_per_counted']:.2f} words per word the model counts"):
        assert quoted in guide, f"docs/instructor.md does not quote results/timing_readaloud_03: {quoted!r}"
    pause = sum(r["pause_s"] for r in result["sections"]) / 60
    assert result["prose_audio_min"] == pytest.approx(result["audio_min"] - pause, abs=0.02)


@pytest.mark.parametrize("line, spoken", [("`req_to_token` maps *pages*", "req to token maps pages"),
                                          ("see [the table](x.md#y) <b>now</b>", "see the table now"),
                                          ("width $d_c + d^R_h$", "width d c + d R h")])
def test_prose_is_read_as_a_speaker_says_it(line, spoken):
    from tools import timing_readaloud as tr

    assert tr.speakable(line) == spoken


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


def test_installed_versions_are_the_ones_import_loads(tmp_path):
    # a later folder on sys.path with an older copy of a package (setuptools appends its _vendor folder on import,
    # with importlib-metadata 8.7.1 and zipp 3.23.0 in it) is not what is installed: the first copy wins
    older = tmp_path / "vendor" / "zipp-0.0.1.dist-info"
    older.mkdir(parents=True)
    (older / "METADATA").write_text("Metadata-Version: 2.1\nName: zipp\nVersion: 0.0.1\n")
    code = (f"import sys; sys.path.append({str(tmp_path / 'vendor')!r}); "
            "from mla_edu.workshop import setup_check as sc; print(sc.installed_versions()['zipp'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == metadata.version("zipp") != "0.0.1"


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


def test_every_notebook_has_its_kernels_peak_memory_and_setup_names_the_heavy_ones(committed):
    """The memory line (docs/timings.md) rests on a measured peak for every notebook, taken from the notebook itself
    (``tools.run_notebooks`` writes it into its metadata), and setup.md names exactly the notebooks whose kernel
    takes more than 2 GB."""
    import re

    peaks = {name[:2]: nb["kernel_peak_mb"] for name, nb in committed["notebooks"].items()}
    assert all(isinstance(v, int) and v > 0 for v in peaks.values()), peaks
    for p in sorted(nt.NOTEBOOKS_DIR.glob("[0-9][1-9]_*.ipynb")):  # 00 runs again after the table, to print it
        assert json.loads(p.read_text())["metadata"]["mla_edu"]["kernel_peak_rss_mb"] == peaks[p.name[:2]], RERUN
    assert nt.memory_line(committed) in nt.TABLE_MD.read_text()
    setup = " ".join((nt.REPO_ROOT / "docs" / "setup.md").read_text().split())
    named = re.search(r"notebooks ([\d, and]+) each take a few GB", setup).group(1)
    assert set(re.findall(r"\d\d", named)) == {k for k, v in peaks.items() if v > 2048}
