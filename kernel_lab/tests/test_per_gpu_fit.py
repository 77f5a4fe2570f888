"""kernel_lab.tools.per_gpu_fit: its committed output, the H100's problems as the acceptance tool reads them, and the
fit's rule (most within, then the worst regret, then the nearest the package's)."""

from __future__ import annotations

from kernel_lab.tools import acceptance as acc
from kernel_lab.tools import per_gpu_fit as pg
from kernel_lab.tools import split_model_fit as smf


def test_the_committed_markdown_is_the_tools_output():
    assert pg.OUT.read_text(encoding="utf-8") == pg.render(), (
        "kernel_lab/results/per_gpu_fit_h100.md is stale: python -m kernel_lab.tools.per_gpu_fit "
        "--out kernel_lab/results/per_gpu_fit_h100.md")


def test_the_h100_problems_are_the_acceptances_and_the_package_scores_as_there():
    problems = pg.h100_problems()
    board = acc.scoreboard(acc.load(acc.H100_RUNS))
    (overall,) = [c for c in board["choice"] if c["heads"] is None]
    assert len(problems) == overall["n"] == 188 and {p.sms for p in problems} == {132}
    assert pg.numbers()["package"][0] == overall["within"]  # the two tools agree on the package's choice
    assert {pg.family(p) for p in problems} == {"bimodal", "giant", "lognormal_0.5", "lognormal_1", "lognormal_1.5",
                                                "normal_16k", "normal_4k", "uniform", "uniform_random"}
    assert (pg.PACKAGE.split_cost, pg.PACKAGE.merge_weight, pg.PACKAGE.margin) == (
        smf.PACKAGE.split_cost, smf.PACKAGE.merge_weight, smf.PACKAGE.margin)


def test_the_fit_prefers_more_within_then_a_smaller_worst_then_the_package():
    x = pg.numbers()
    problems = pg.h100_problems()
    n, worst = x["best_score"]
    for m in pg.MODELS:
        mn, mworst = pg.score(problems, m)
        assert (mn, -round(mworst, 6)) <= (n, -round(worst, 6)), m.name
    assert pg.PACKAGE in pg.MODELS  # the package's constants are a point of the grid, so the fit can keep them
