"""The slide files of make slides (docs/slides/*.yaml, tools.slides): one per notebook, each slide within its
limits and on a (core) section of its notebook, a section split at the heading's line, not at the cell."""

from __future__ import annotations

import json

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
