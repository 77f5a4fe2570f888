"""Every figure legible on a projector and in the book: each figure of tools.figures (and notebook 09's schedule
figure, notebook 08's mystery figures) drawn by the library's code, its saved size and every text in it measured
(mla_edu.plotstyle)."""

from __future__ import annotations

import io
import re
import sys

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from mla_edu import plotstyle as ps  # noqa: E402
from mla_edu.kernels import plots as kernel_plots  # noqa: E402
from mla_edu.paths import FIGURES_DIR  # noqa: E402
from mla_edu.workshop import exercises, setup_check  # noqa: E402
from tools import figures  # noqa: E402

COLOUR_WORD = re.compile(r"\b(green|orange|red|blue|grey|gray|purple|yellow|vermillion|pink)\b", re.IGNORECASE)
DRAWN = {**{name: (lambda name=name: figures.draw(name)) for name in figures.FIGURES},
         **{f"mystery_figure({k}) (notebook 08)": (lambda k=k: exercises.mystery_figure(k))
            for k in exercises.MYSTERY_NUMBERS}}


#: Pixels compare only where matplotlib (which bundles its own FreeType) is the lock's version, on Linux, as CI runs
#: it: another version or platform may render text a pixel apart. And only without a GPU: the committed PNGs are the
#: CPU machine's (the panel's figures run the engine on the default device, and say "emulated" there).
LOCKED_MATPLOTLIB = (sys.platform == "linux" and setup_check.locked() and not torch.cuda.is_available()
                     and setup_check.read_lock(setup_check.lock_path())["matplotlib"] == matplotlib.__version__)
PNGS = {}  # figure name -> the drawing's PNG bytes, kept by the fixture for the test below


@pytest.fixture(scope="module", params=sorted(DRAWN))
def drawn(request):
    import matplotlib.pyplot as plt

    fig = DRAWN[request.param]()
    if request.param in figures.FIGURES:
        buf = io.BytesIO()
        figures.write_png(fig, buf)
        PNGS[request.param] = buf.getvalue()
    yield request.param, ps.measure(fig)
    plt.close("all")


def _legible(name, size):
    assert size["dpi"] == ps.DPI, f"{name}: drawn at {size['dpi']} dpi, not plotstyle.DPI"
    for where in ("book", "slide"):
        small = [(pt, text) for pt, text in size["texts"] if ps.text_px(pt, size, where) < ps.MIN_TEXT_PX]
        assert not small, (f"{name}, {where} ({size['width_px']:.0f} x {size['height_px']:.0f} px): texts under "
                           f"{ps.MIN_TEXT_PX} px at 1080p: {small[:5]}")


def _names_no_colour(name, size):
    assert not [t for _, t in size["texts"] if COLOUR_WORD.search(t)], name


def test_every_text_is_14_px_at_1080p_on_a_slide_and_in_the_book(drawn):
    _legible(*drawn)


def test_texts_name_categories_not_colours(drawn):
    _names_no_colour(*drawn)


@pytest.mark.triton  # its partition runs as a Triton kernel
def test_notebook_09s_schedule_gantt_is_legible_too():
    import matplotlib.pyplot as plt

    try:
        size = ps.measure(kernel_plots.schedule_gantt([4096, 512, 512, 128, 64], 64, 16, 132, 4))
        _legible("schedule_gantt (notebook 09)", size)
        _names_no_colour("schedule_gantt (notebook 09)", size)
    finally:
        plt.close("all")


def test_the_committed_pngs_are_the_drawings():
    """figures/ holds one PNG per figure of tools.figures and nothing else, each of the size drawn (python -m
    tools.figures rewrites them)."""
    from PIL import Image

    assert sorted(p.stem for p in FIGURES_DIR.glob("*.png")) == sorted(figures.FIGURES)
    size = ps.measure(figures.draw("graph_narrow_view_reads"))
    with Image.open(FIGURES_DIR / "graph_narrow_view_reads.png") as im:
        assert abs(im.size[0] - size["width_px"]) <= 2 and abs(im.size[1] - size["height_px"]) <= 2, im.size


@pytest.mark.skipif(not LOCKED_MATPLOTLIB, reason="pixels compare under the lock's matplotlib on a Linux CPU "
                                                  "machine only")
def test_each_committed_png_has_the_pixels_drawn_from_todays_numbers(drawn):
    """A figure drawn from numbers that changed since it was saved is stale (figures/kernel_bench_h200_compute.png
    kept two old points of the split rule's column for a month): every committed PNG is today's drawing."""
    from PIL import Image

    name, _ = drawn
    if name not in figures.FIGURES:
        pytest.skip(f"{name} is drawn in a notebook, not saved in figures/")
    with Image.open(FIGURES_DIR / f"{name}.png") as saved, Image.open(io.BytesIO(PNGS[name])) as now:
        same = saved.size == now.size and saved.convert("RGBA").tobytes() == now.convert("RGBA").tobytes()
    assert same, f"figures/{name}.png is not today's drawing: run python -m tools.figures {name}"


@pytest.mark.parametrize("w, h, where, scale", [
    (800, 500, "book", 1.0), (1000, 500, "book", 1.0), (2000, 500, "book", 0.5),
    (800, 500, "slide", 1.5 / 1.04), (1180, 540, "slide", 1.5 / 1.04), (800, 1080, "slide", 0.75 / 1.04),
    (2360, 540, "slide", 0.75 / 1.04)])
def test_shown_scale(w, h, where, scale):
    assert ps.shown_scale(w, h, where) == pytest.approx(scale)


def test_a_tall_figure_at_small_type_fails_and_bad_places_are_refused():
    tall = {"width_px": 813, "height_px": 1407, "dpi": 110}  # the H200 bench before it was split, at 7 pt
    assert ps.text_px(7, tall, "slide") < ps.MIN_TEXT_PX <= ps.text_px(ps.MIN_FONT_PT, {**tall, "height_px": 540},
                                                                       "slide")
    with pytest.raises(ValueError, match="where: expected 'book' or 'slide'"):
        ps.shown_scale(100, 100, "poster")
