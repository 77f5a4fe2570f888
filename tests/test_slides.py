"""The slide files of make slides (docs/slides/*.yaml, tools.slides): one per notebook, each slide within its
limits and on a (core) section of its notebook, a section split at the heading's line, not at the cell."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from pydantic import ValidationError

from tools import notebook_timings as nt
from tools import slides

PATHS = sorted(slides.SLIDES_DIR.glob("[0-9][0-9]_*.yaml"))


def test_every_notebook_has_a_deck():
    assert [p.stem for p in PATHS] == [p.stem for p in sorted(nt.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_each_deck_loads_within_its_limits(path):
    deck = slides.load(path)
    assert deck.slides and all(s.notes.strip() for s in deck.slides)
    html = slides.deck_html(deck)
    assert html.count("<aside class=\"notes\">") == len(deck.slides) + 1  # and the title slide's
    assert "http://" not in html and "https://" not in html, "a deck loads nothing from the network"


def test_every_exercise_of_the_tracks_has_a_slide():
    shown = {(p.stem[:2], s.section) for p in PATHS for s in slides.load(p).slides}
    wanted = {(prefix, w) for blocks in nt.TRACKS.values() for prefix, which, _ in blocks
              if prefix is not None and isinstance(which, list) for w in which if "exercise" in str(w)}
    assert wanted <= shown, sorted(wanted - shown)


GOOD = {"section": "1. A", "title": "A", "bullets": ["one", "two"], "notes": "say it"}


@pytest.mark.parametrize("change, match", [
    ({"bullets": [f"b{i}" for i in range(6)]}, "at most 5 bullets"),
    ({"bullets": [" ".join(["word"] * 61)]}, "at most 60 words"),
    ({"code": "\n".join(["x = 1"] * 16)}, "at most 15 lines"),
    ({"code": "x" * 81}, "1 wider"),
    ({"bullets": [], "figure": "page_table", "code": "x = 1"}, "a figure takes the slide"),
    ({"figure": "page_table"}, "a figure takes the slide"),
    ({"bullets": [], "figure": "no_such_figure"}, "expected a figure of figures/"),
    ({"notes": "  "}, "expected text"),
    ({"math": ["a", "b", "c", "d"]}, "at most 3 display equations"),
    ({"colour": "red"}, "Extra inputs are not permitted"),
])
def test_a_slide_over_its_limits_is_refused(change, match):
    slides.Slide(**GOOD)
    with pytest.raises(ValidationError, match=match):
        slides.Slide(**{**GOOD, **change})


def _deck(tmp_path, section: str, notebook: str = "03_paged_kv_cache"):
    path = tmp_path / f"{notebook}.yaml"
    path.write_text(yaml.safe_dump({"notebook": notebook, "title": "t", "slides": [{**GOOD, "section": section}]}))
    return path


@pytest.mark.parametrize("section, match", [("4. Writing a step's latents", r"expected a \(core\) section.*optional"),
                                            ("9. Nothing", "no such section")])
def test_a_slide_on_an_optional_or_missing_section_is_refused(tmp_path, section, match):
    with pytest.raises(ValueError, match=match):
        slides.load(_deck(tmp_path, section))
    assert slides.load(_deck(tmp_path, "5. The page table")).slides[0].section == "5. The page table"


def test_a_notebook_without_a_core_section_takes_slides_on_any_of_its_sections(tmp_path):
    """09, the GPU track's deep dive, is optional throughout: its deck teaches its (optional) sections."""
    name = "09_the_kernel_on_the_h200"
    secs = nt.sections(json.loads((nt.NOTEBOOKS_DIR / f"{name}.ipynb").read_text()))
    assert {s["marker"] for s in secs if s["title"] != "introduction"} == {"optional"}
    assert slides.load(_deck(tmp_path, "2. What the compiler made of it", name)).slides
    with pytest.raises(ValueError, match="no such section"):
        slides.load(_deck(tmp_path, "9. Nothing", name))


def test_a_heading_partway_down_a_cell_starts_its_section_there():
    """06's cell ending section 6 and opening the optional section 7: the words above the heading stay core."""
    nb = {"cells": [{"cell_type": "markdown", "source": "## 6. Core part (core)\n\none two three\n\n"
                                                          "## 7. Side road (optional)\n\nfour five"},
                    {"cell_type": "code", "source": "x = 1", "metadata": {}}]}
    secs = {s["title"]: s for s in nt.sections(nb)}
    assert (secs["6. Core part"]["marker"], secs["6. Core part"]["words"], secs["6. Core part"]["code_cells"]) == (
        "core", 7, 0)  # "6.", "Core", "part", "(core)" and three words
    assert (secs["7. Side road"]["marker"], secs["7. Side road"]["code_cells"]) == ("optional", 1)


def test_the_notebooks_have_headings_partway_down_cells():
    """The case above is real: some markdown cells hold text before a section heading."""
    partway = 0
    for path in sorted(nt.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            lines = nt.cell_source(cell).splitlines() if cell["cell_type"] == "markdown" else []
            heads = [i for i, line in enumerate(lines) if line.startswith("## ")]
            partway += any(i > 0 and any(x.strip() for x in lines[:i]) for i in heads)
    assert partway > 0


@pytest.mark.parametrize("text, html", [("`q_pe` and *latent*", "<code>q_pe</code> and <em>latent</em>"),
                                        ("a < b & $x_1$", "a &lt; b &amp; $x_1$")])
def test_inline_markup(text, html):
    assert slides.inline(text) == html


# ---- the track decks, the minutes and numbers the slides quote, the questions to the class ----------------------
TABLE = slides.timing_table()
DECKS = {p.stem[:2]: slides.load(p, TABLE) for p in PATHS}
H2 = re.compile(r"<h2>(.*?)</h2>")


def _expected_titles(blocks: list) -> list[str]:
    """The slide titles a track deck must show, worked out here from the blocks, the table and the slide files."""
    out = []
    for prefix, which, mode in blocks:
        if prefix is None:
            out.append(f"{mode.capitalize()} ({which:g} min)")
            continue
        chosen = [s["title"] for s in nt.select(nt.notebook_entry(TABLE, prefix)[1], which)]
        out += [f"{prefix} · {slides.inline(s.title)}" for title in chosen for s in DECKS[prefix].slides
                if s.section == title]
    return out


@pytest.mark.parametrize("track", sorted(nt.TRACKS))
def test_every_block_of_every_track_has_a_slide(track):
    blocks = slides.track_blocks(track, DECKS, TABLE)
    assert [b for b, _ in blocks] == list(nt.TRACKS[track])
    empty = [b for b, sl in blocks if not sl]
    assert not empty, f"{track}: blocks with no slide (a gap in the track deck): {empty}"


@pytest.mark.parametrize("track", sorted(nt.TRACKS))
def test_the_track_deck_follows_tracks_in_order(track, tmp_path):
    path = slides.export_track(track, DECKS, TABLE, tmp_path)
    assert path == slides.track_path(track, tmp_path)
    page = path.read_text()
    assert H2.findall(page) == _opening(nt.TRACKS[track]) + _expected_titles(nt.TRACKS[track])
    shown = {s.figure for _, sl in slides.track_blocks(track, DECKS, TABLE) for s, _ in sl if s.figure}
    assert {p.stem for p in (tmp_path / "figures").glob("*.png")} == shown


def test_the_track_deck_reads_tracks_when_built(monkeypatch):
    """Another order, a block cut: the deck follows TRACKS as it is when the deck is built, not a copy."""
    blocks = list(reversed(nt.TRACKS["90-minute"]))[1:]
    monkeypatch.setitem(nt.TRACKS, "90-minute", blocks)
    titles = H2.findall(slides.track_html("90-minute", DECKS, TABLE))
    assert titles == _opening(blocks) + _expected_titles(blocks) and titles[-1] != "Questions (5 min)"


def _opening(blocks: list) -> list[str]:
    """The headline slide's title where the blocks do not teach the seed's table (06, section 1), else nothing."""
    prefix, section = slides.SEED_TABLE
    entry = nt.notebook_entry(TABLE, prefix)[1]
    chosen = [s["title"] for b in blocks if b[0] == prefix for s in nt.select(entry, b[1])]
    return [] if section in chosen else [slides.HEADLINE["title"]]


def test_every_track_shows_the_headline_numbers_from_their_files():
    """The seed's accuracies and the main job's, filled in from ``SEED`` and results/repro_cpu.json, never typed: a
    track that does not teach the seed's table (06, section 1, whose slide shows them) opens with them; the 3-hour
    and day tracks teach it, in their minutes, the 90-minute track does not."""
    from mla_edu.case_study.seed import SEED

    table = json.loads((slides.RESULTS_DIR / "repro_cpu.json").read_text())["table"]
    text = " ".join(slides.headline_slide().bullets)
    for value in (SEED["eager"], SEED["pre_fix"], *(f"{table[k]['accuracy']:.3f}" for k in ("eager", "pre_fix",
                                                                                        "fixed"))):
        assert value in text
    assert "{{" not in text and slides.ASK.search(slides.headline_slide().notes)
    assert any(s.section == slides.SEED_TABLE[1] for s in DECKS[slides.SEED_TABLE[0]].slides)
    raw = yaml.safe_load((slides.SLIDES_DIR / f"{DECKS['06'].notebook}.yaml").read_text())["slides"]
    assert "{{seed:eager}}" in " ".join(next(s["bullets"] for s in raw if s["section"] == slides.SEED_TABLE[1]))
    assert [_opening(nt.TRACKS[t]) for t in ("90-minute", "3-hour", "day")] == [[slides.HEADLINE["title"]], [], []]
    for track in nt.TRACKS:
        titles = H2.findall(slides.track_html(track, DECKS, TABLE))
        assert (titles[0] == slides.HEADLINE["title"]) == bool(_opening(nt.TRACKS[track]))


def test_a_pause_is_a_break_a_lunch_or_questions():
    """The day track's lunch gets its slide as a break does: its stated minutes and what comes next."""
    rest = [("06", [1], "demo")]
    lunch = slides.pause_slide(60, "lunch", rest, DECKS)
    assert (lunch.title, lunch.bullets) == ("Lunch (60 min)", [f"Next: {DECKS['06'].title}"])
    assert slides.ASK.search(lunch.notes)
    with pytest.raises(ValueError, match="expected 'break', 'lunch' or 'questions', got 'nap'"):
        slides.pause_slide(20, "nap", rest, DECKS)


def test_a_track_block_on_a_notebook_without_slides_is_refused(monkeypatch):
    monkeypatch.setitem(nt.TRACKS, "90-minute", [("03", [5], "demo")])
    with pytest.raises(ValueError, match=r"expected a slide file docs/slides/03_\*.yaml"):
        slides.track_blocks("90-minute", {k: v for k, v in DECKS.items() if k != "03"}, TABLE)


def test_a_track_block_without_a_slide_is_refused(monkeypatch):
    """04's section 2 has no slide: a track teaching only it would leave a gap in the deck."""
    monkeypatch.setitem(nt.TRACKS, "90-minute", [("04", [2], "demo"), (None, 5, "questions")])
    with pytest.raises(ValueError, match=r"expected a slide of docs/slides/04_decode_kernel.yaml on one of "
                                         r"\[\"2. A test problem.*got none \(a gap"):
        slides.track_blocks("90-minute", DECKS, TABLE)


@pytest.mark.parametrize("track", sorted(nt.TRACKS))
def test_the_first_slide_of_every_track_block_asks_the_class(track):
    """The instructor poses a question at least at the start of each block (a line "Ask the class: ...?")."""
    silent = [(b, sl[0][0].title) for b, sl in slides.track_blocks(track, DECKS, TABLE)
              if not slides.ASK.search(sl[0][0].notes)]
    assert not silent, f"{track}: blocks whose first slide asks the class nothing: {silent}"


def test_exercise_minutes_come_from_the_timing_table():
    seen = 0
    for deck in DECKS.values():
        for s in deck.slides:
            sec = [x for x in TABLE["notebooks"][f"{deck.notebook}.ipynb"]["sections"] if x["title"] == s.section]
            if sec[0]["exercise"] is not None:
                want = nt.whole(nt.minutes(sec[0], 'attendees run', prose_factor=TABLE["prose_factor"]))
                assert s.title.startswith(f"Exercise ({want} min): "), s.title
                seen += 1
    assert seen >= 7
    # a table with other counts gives other minutes: the slides read them, nothing typed
    longer = json.loads(json.dumps(TABLE))
    unit = next(x for x in longer["notebooks"]["03_paged_kv_cache.ipynb"]["sections"]
                if x["title"] == "Exercises · exercise 2")
    unit["words"] += 1000  # ten more minutes at 100 words a minute, times the read-aloud factor
    title = next(s.title for s in slides.load(slides.SLIDES_DIR / "03_paged_kv_cache.yaml", longer).slides
                 if s.section == "Exercises · exercise 2")
    want = nt.whole(nt.minutes(unit, "attendees run", prose_factor=longer["prose_factor"]))
    assert title.startswith(f"Exercise ({want} min)")
    # a half minute rounds up, as the timing table's tracks round it (Python's round would say 8): 4.5 minutes of
    # prose and the attempt's 4
    unit.update(words=450, equations=0, figures=0, code_lines=0, run_s=0.0)
    half = {**longer, "prose_factor": 1.0}
    assert nt.minutes(unit, "attendees run", prose_factor=1.0) == 8.5 and round(8.5) == 8
    title = next(s.title for s in slides.load(slides.SLIDES_DIR / "03_paged_kv_cache.yaml", half).slides
                 if s.section == "Exercises · exercise 2")
    assert title.startswith("Exercise (9 min)")
    assert nt.track_minutes(half, [("03", [nt.EX + "2"], "demo")])["blocks"][0]["exercises"] == 9
    del longer["prose_factor"]
    with pytest.raises(ValueError, match="prose_factor"):
        slides.load(slides.SLIDES_DIR / "03_paged_kv_cache.yaml", longer)


def test_a_table_without_the_exercise_unit_is_refused():
    short = json.loads(json.dumps(TABLE))
    nb = short["notebooks"]["03_paged_kv_cache.ipynb"]
    nb["sections"] = [x for x in nb["sections"] if x["title"] != "Exercises · exercise 2"]
    with pytest.raises(ValueError, match=r"notebook_timings.json: expected the exercise unit 'Exercises · exercise "
                                         r"2' of 03_paged_kv_cache.ipynb"):
        slides.load(slides.SLIDES_DIR / "03_paged_kv_cache.yaml", short)
    del short["notebooks"]["03_paged_kv_cache.ipynb"]
    with pytest.raises(ValueError, match="no such notebook"):
        slides.exercise_minutes(short, "03_paged_kv_cache", "Exercises · exercise 2")


@pytest.mark.parametrize("field, text", [("title", "Exercise (5 min): x"), ("bullets", ["about 8 minutes"]),
                                         ("notes", "give it 3 min")])
def test_typed_minutes_are_refused(field, text):
    with pytest.raises(ValidationError, match="expected no typed minutes"):
        slides.Slide(**{**GOOD, field: text})


def test_slide_files_type_no_minutes():
    typed = [(p.name, line.strip()) for p in PATHS for line in p.read_text().splitlines()
             if slides.TYPED_MINUTES.search(line)]
    assert not typed, typed


def test_06_quotes_its_numbers_from_the_results_the_notebook_reads():
    """The headline slide: each number from results/repro_cpu.json (the notebook's second table) or the seed,
    none typed; the run and the scale named beside them."""
    repro = json.loads((slides.RESULTS_DIR / "repro_cpu.json").read_text())["table"]
    raw = (slides.SLIDES_DIR / "06_reproducing_the_zero_accuracy_bug.yaml").read_text()
    assert "0.035" not in raw and "0.984" not in raw and "0.060" not in raw
    head = DECKS["06"].slides[0]
    text = " ".join(head.bullets)
    assert (f"pre-fix graph {repro['pre_fix']['accuracy']:.3f}" in text and f"Eager {repro['eager']['accuracy']:.3f}"
            in text and "256 recall questions" in text and "DeepSeek-V3 on GSM8K" in text)
    from mla_edu.case_study.seed import SEED

    assert f"{SEED['pre_fix']} with them" in text


@pytest.mark.parametrize("ref, match", [("{{repro_cpu:table.nothing.accuracy}}", "expected a key 'nothing'"),
                                        ("{{no_such_results:a}}", "expected a file results/no_such_results.json"),
                                        ("{{repro_cpu:table}}", "expected a number or text"),
                                        ("{{seed:later}}", "expected a key 'later' in mla_edu.case_study.seed")])
def test_a_number_that_is_not_there_is_refused(ref, match):
    with pytest.raises(ValueError, match=match):
        slides.fill_numbers({"bullets": [ref]})
    assert slides.fill_numbers(["{{repro_cpu:table.eager.num_questions}}"]) == ["256"]


def test_08s_panel_figures_fill_the_slide_unshrunk():
    """The control panel's 2 x 2 figure is taller than a slide's figure box (shrunk to two thirds): 08's slides show
    it a row at a time, each at full size."""
    from PIL import Image

    from mla_edu import plotstyle

    figs = [s.figure for s in DECKS["08"].slides if s.figure]
    assert len(figs) >= 4 and all(f.startswith("panel_") for f in figs)
    for f in figs:
        with Image.open(slides.FIGURES_DIR / f"{f}.png") as im:
            assert plotstyle.shown_scale(*im.size, "slide") == pytest.approx(1.5 / (1 + plotstyle.SLIDE_MARGIN)), f


def test_the_slides_page_links_the_track_decks_first():
    page = (slides.REPO_ROOT / "docs" / "slides.md").read_text()
    links = re.findall(r'href="slides/([^"]+)"', page)
    tracks = [slides.track_path(name, slides.OUT).name for name in nt.TRACKS]
    notebooks = [f"{p.stem}.slides.html" for p in PATHS]
    assert links == tracks + notebooks, links
