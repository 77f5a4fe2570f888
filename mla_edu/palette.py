"""The colours of every figure: Okabe and Ito's colour-blind-safe palette, with one role per colour.

Colour is never the only channel: every categorical distinction also has a hatch, a marker or a glyph
(``HATCH``, ``MARKERS``, the page grid's " x" and "P"). ``tests/test_palette.py`` simulates deuteranopia,
protanopia and tritanopia on each group below and checks every pair stays apart.

Okabe, M. and Ito, K., "Color Universal Design (CUD): how to make figures and presentations that are
friendly to colorblind people" (2002), https://jfly.uni-koeln.de/color/
"""

from __future__ import annotations

#: The eight colours of Okabe and Ito's palette.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
}
GREY = "#999999"  # neutral: a baseline, a peer, a bar that is not the point


def tint(color: str, white: float) -> str:
    """``color`` (``#RRGGBB``) mixed with ``white`` parts of white (0: the colour, 1: white), as ``#rrggbb``:
    cell fills light enough for black text on top."""
    if not (isinstance(color, str) and len(color) == 7 and color[0] == "#"):
        raise ValueError(f"color: expected '#RRGGBB', got {color!r}")
    if not 0 <= white <= 1:
        raise ValueError(f"white: expected a fraction in [0, 1], got {white!r}")
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * white):02x}" for c in rgb)


# ---- roles --------------------------------------------------------------------------------------
RIGHT = OKABE_ITO["bluish green"]  # read the right page; a setting that keeps its accuracy
WRONG = OKABE_ITO["vermillion"]  # read another page; a setting that loses accuracy (always hatched too)
HIGHLIGHT = OKABE_ITO["vermillion"]  # the one bar or line a figure is about (MLA, the absorbed order)
BASELINE = OKABE_ITO["blue"]  # eager, the reference run
HATCH = {"wrong": "xx"}  # the second channel of a wrong cell or bar
HATCH_COLOR = "#444444"  # hatch lines: dark enough over any fill


def hatched(flags) -> dict:
    """``ax.bar`` keywords: the bars where ``flags`` is true hatched (``HATCH["wrong"]``), the others plain."""
    return {"hatch": [HATCH["wrong"] if f else "" for f in flags], "edgecolor": HATCH_COLOR, "lw": 0}


#: Lines of one plot, in order: colour and marker change together.
SERIES = [OKABE_ITO[k] for k in ("blue", "vermillion", "bluish green", "orange", "reddish purple", "sky blue",
                                 "black")]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]

#: The page grid's cell fills, by what a cell holds (``mla_edu.kvcache.plots.draw_page_grid``). Wrong cells
#: are hatched, stale ones carry " x", poison "P": the fills are a second channel, not the only one.
GRID_COLORS = {
    "unused": "#ffffff",  # past the request's pages: nothing is read there
    "owned": tint(OKABE_ITO["sky blue"], 0.55),  # a page the request owns: what it should read
    "right": tint(RIGHT, 0.45),  # read, and it is the page the request owns
    "wrong": tint(WRONG, 0.4),  # read, and it is another page (hatched)
    "written": tint(OKABE_ITO["bluish green"], 0.75),  # an index-buffer entry written for this step
    "stale": tint(OKABE_ITO["orange"], 0.35),  # an entry left from an earlier step: marked " x"
    "poison": tint(GREY, 0.3),  # an entry holding the poison id: shown as "P"
}
FRAME_COLOR = WRONG  # the outline of a cell a kernel read: a frame (a shape), coloured as a wrong read

#: Groups whose members one figure tells apart, checked by tests/test_palette.py.
GROUPS = {
    "read grid": {k: GRID_COLORS[k] for k in ("unused", "right", "wrong")},
    "intended grid": {k: GRID_COLORS[k] for k in ("unused", "owned")},
    "index buffer": {k: GRID_COLORS[k] for k in ("written", "stale", "poison")},
    "accuracy bars": {"baseline": BASELINE, "right": RIGHT, "wrong": WRONG},
    "highlighted bars": {"neutral": GREY, "highlight": HIGHLIGHT},
    "series": dict(zip(map(str, range(len(SERIES))), SERIES)),
}
