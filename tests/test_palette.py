"""The figures' palette stays readable under colour-vision deficiency, and figures use it.

Simulation: colorspacious's ``sRGB1+CVD`` (Machado, Oliveira and Fernandes 2009) at severity 100, i.e.
deuteranopia, protanopia and tritanopia. Distance: CIECAM02-UCS Delta E (``colorspacious.deltaE``), where about 1
is a just-noticeable difference between large patches. Threshold: every pair of colours one figure tells
apart stays at least ``MIN_DELTA_E`` = 10 apart, for normal vision and each simulation.
"""

import itertools

import numpy as np
import pytest

from mla_edu import palette

MIN_DELTA_E = 10.0
DEFICIENCIES = (None, "deuteranomaly", "protanomaly", "tritanomaly")


def _rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)]) / 255


def _seen(hex_color: str, cvd) -> np.ndarray:
    from colorspacious import cspace_convert

    rgb = _rgb(hex_color)
    if cvd is None:
        return rgb
    return np.clip(cspace_convert(rgb, {"name": "sRGB1+CVD", "cvd_type": cvd, "severity": 100}, "sRGB1"), 0, 1)


def _delta_e(a: np.ndarray, b: np.ndarray) -> float:
    from colorspacious import deltaE

    return float(deltaE(a, b, input_space="sRGB1", uniform_space="CAM02-UCS"))


@pytest.mark.parametrize("cvd", DEFICIENCIES, ids=lambda c: c or "normal")
@pytest.mark.parametrize("group", sorted(palette.GROUPS))
def test_every_pair_stays_apart(group, cvd):
    colors = palette.GROUPS[group]
    assert len(colors) >= 2
    close = [(a, b, round(_delta_e(_seen(colors[a], cvd), _seen(colors[b], cvd)), 1))
             for a, b in itertools.combinations(colors, 2)]
    close = [c for c in close if c[2] < MIN_DELTA_E]
    assert not close, f"{group} under {cvd or 'normal vision'}: pairs closer than Delta E {MIN_DELTA_E}: {close}"


def test_the_old_right_and_wrong_fail_the_same_check():
    """The check can fail: the figures' former right/wrong fills (#70b070, #e07070) merge under deuteranopia."""
    d = _delta_e(_seen("#70b070", "deuteranomaly"), _seen("#e07070", "deuteranomaly"))
    assert d < MIN_DELTA_E / 2


def test_groups_hold_the_colours_the_figures_use():
    from mla_edu.kvcache.plots import GRID_COLORS

    assert GRID_COLORS is palette.GRID_COLORS
    grid = {k: v for g in ("read grid", "intended grid", "index buffer") for k, v in palette.GROUPS[g].items()}
    assert grid == palette.GRID_COLORS  # every cell kind is in a checked group
    assert len(palette.SERIES) == len(palette.MARKERS) == len(set(palette.MARKERS))  # a marker per colour


@pytest.mark.parametrize("color, white, expected", [("#000000", 0.5, "#808080"), ("#D55E00", 0, "#d55e00"),
                                                    ("#D55E00", 1, "#ffffff")])
def test_tint(color, white, expected):
    assert palette.tint(color, white) == expected


@pytest.mark.parametrize("color, white, match", [("red", 0.5, "expected '#RRGGBB'"), ("#000000", 1.5, r"\[0, 1\]"),
                                                 ("#000000", -0.1, r"\[0, 1\]")])
def test_tint_refuses(color, white, match):
    with pytest.raises(ValueError, match=match):
        palette.tint(color, white)


def test_wrong_cells_are_hatched_not_only_coloured():
    """Right vs wrong reads: a wrong cell carries a hatch patch; a right one does not."""
    import matplotlib

    matplotlib.use("Agg")
    import torch
    from matplotlib.figure import Figure

    from mla_edu.kvcache.plots import draw_intended_and_read

    ax_int, ax_read = Figure().subplots(1, 2)
    draw_intended_and_read(ax_int, ax_read, torch.tensor([[5, 6], [7, -1]]), torch.tensor([[5, 6], [8, -1]]))
    hatched = [p for p in ax_read.patches if p.get_hatch()]
    assert [p.get_xy() for p in hatched] == [(-0.5, 0.5)]  # cell (b=1, j=0) only
    assert not [p for p in ax_int.patches if p.get_hatch()]


def test_no_colour_is_written_outside_the_palette():
    """Every figure takes its colours from mla_edu.palette: no hex colour or colour name in another module."""
    import re

    from docs_text import library_files, rel

    pattern = re.compile(r"""["']#[0-9a-fA-F]{6}["']|color=["'](?:red|green|blue|gr[ae]y|k|orange|black)["']""")
    found = [f"{rel(p)}: {m.group(0)}" for p in library_files() if p.name != "palette.py"
             for m in pattern.finditer(p.read_text())]
    assert not found, found


def test_accuracy_bars_that_lost_accuracy_are_hatched():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    from mla_edu.case_study.plots import accuracy_bars

    ax = Figure().subplots()
    bars = accuracy_bars(ax, ["eager", "pre-fix", "fixed"], [1.0, 0.1, 1.0], [False, True, False], baseline=(0,))
    assert [b.get_hatch() or "" for b in bars] == ["", palette.HATCH["wrong"], ""]
    assert [to_hex(b.get_facecolor()) for b in bars] == [c.lower() for c in (palette.BASELINE, palette.WRONG,
                                                                              palette.RIGHT)]
