"""The size of every figure: legible on a projector and in the book.

A label must be at least ``MIN_TEXT_PX`` pixels tall on a 1920x1080 screen, where the figures are shown two ways:
- in the book (and in JupyterLab), at their own pixel size: the book's column is wider than any figure here
  (``BOOK_COLUMN_PX``), so ``pt * DPI / 72`` pixels;
- on a slide: reveal.js lays a deck out on a ``SLIDE_CANVAS`` canvas and scales it, with its margin, to the
  screen (1.44 at 1080p);
  a figure gets at most ``SLIDE_FIGURE_BOX`` of it under the slide's title, shrunk to fit, never enlarged.

So every drawing function makes its figure with ``subplots``, ``subplot_mosaic`` or ``figure`` here (at ``DPI``),
uses no font under ``MIN_FONT_PT``, and keeps its figure under ``SLIDE_FIGURE_BOX`` (a tall figure is split).
``tests/test_plotstyle.py`` draws every figure and measures its size and every text in it.
"""

from __future__ import annotations

DPI = 110
MIN_FONT_PT = 10.0  # 15.3 px at DPI: tick labels, legends, annotations, cell labels
TITLE_PT = 12.0
MIN_TEXT_PX = 14.0
SCREEN = (1920, 1080)
BOOK_COLUMN_PX = 1000  # sphinx-book-theme's article at 1920 px: 1126 px wide, less its padding
SLIDE_CANVAS = (1280, 720)
SLIDE_MARGIN = 0.04  # reveal.js's margin around the canvas, a fraction of its size
SLIDE_FIGURE_BOX = (1180, 540)  # the canvas less the slide's margins and a one-line title


def subplots(*args, figsize, **kwargs):
    """``matplotlib.pyplot.subplots`` at ``DPI``."""
    import matplotlib.pyplot as plt

    return plt.subplots(*args, figsize=figsize, dpi=DPI, **kwargs)


def subplot_mosaic(layout, *, figsize, **kwargs):
    """``matplotlib.pyplot.subplot_mosaic`` at ``DPI``: axes that span rows or columns, by name."""
    import matplotlib.pyplot as plt

    return plt.subplot_mosaic(layout, figsize=figsize, dpi=DPI, **kwargs)


def figure(figsize):
    """A ``matplotlib.figure.Figure`` at ``DPI``, outside pyplot (the panel's widget draws it itself)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, dpi=DPI)


def shown_scale(width_px: float, height_px: float, where: str) -> float:
    """Screen pixels per figure pixel at 1080p: ``where`` is "book" or "slide"."""
    if where == "book":
        return 1.0 if width_px <= BOOK_COLUMN_PX else BOOK_COLUMN_PX / width_px
    if where == "slide":
        fit = min(1.0, SLIDE_FIGURE_BOX[0] / width_px, SLIDE_FIGURE_BOX[1] / height_px)
        return fit * min(SCREEN[0] / SLIDE_CANVAS[0], SCREEN[1] / SLIDE_CANVAS[1]) / (1 + SLIDE_MARGIN)
    raise ValueError(f"where: expected 'book' or 'slide', got {where!r}")


def text_px(font_pt: float, size: dict, where: str) -> float:
    """Height in screen pixels at 1080p of a ``font_pt`` text in a figure ``size`` (``measure``'s answer)."""
    return font_pt * size["dpi"] / 72 * shown_scale(size["width_px"], size["height_px"], where)


def measure(fig) -> dict:
    """The figure as saved (``bbox_inches="tight"``): ``width_px``, ``height_px``, ``dpi``, and ``texts``: (font
    size in points, text) of every visible, non-empty text in it, tick labels included."""
    from matplotlib.text import Text

    import matplotlib

    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    pad = 2 * matplotlib.rcParams["savefig.pad_inches"]  # savefig's margin around the tight box
    texts = [(t.get_fontsize(), t.get_text()) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_figure() is not None]
    return {"width_px": (box.width + pad) * fig.dpi, "height_px": (box.height + pad) * fig.dpi, "dpi": fig.dpi,
            "texts": texts}
