"""``kernel_lab.tools.half_block_fit``: the committed markdown is its output, and the package's
``schedule.HALF_BLOCK_PAGE_COST`` is the cost it fits."""

from kernel_lab.tools import half_block_fit as hb
from mla_edu.kernels import schedule as sc


def test_the_committed_markdown_is_the_tools_output():
    assert hb.OUT.read_text(encoding="utf-8") == hb.render(), (
        "kernel_lab/results/half_block_fit_h200.md is stale: python -m kernel_lab.tools.half_block_fit --out "
        "kernel_lab/results/half_block_fit_h200.md")


def test_the_package_takes_the_fitted_cost():
    probs, sms = hb.problems()
    assert len(probs) == 25 and sms == 132  # 17 of ours alone (families at B=16, uniform B=1, 4, 16), 8 with FlashMLA
    assert hb.fit(probs, sms) == sc.HALF_BLOCK_PAGE_COST
    within, worst, _ = hb.score(probs, sc.HALF_BLOCK_PAGE_COST, sms)
    assert (within, round(worst, 2)) == (25, 1.00)  # stage 2 in the choice: L16384 B=1's 1.10x is gone
    # the cost measured at B=64-256 (time over model, kernel_lab/results/partition_ab_h200_h32.md) took the balanced
    # schedule at uniform B=1 and B=4, up to 1.32x slower than the split rule: the package's comment says so
    assert hb.score(probs, 0.65, sms)[0] == 21 and round(hb.score(probs, 0.65, sms)[1], 2) == 1.32


def test_a_regret_is_the_choice_over_the_best_option():
    p = hb.Problem("run", "fam", (4096,), 32, {"split_32": 10.0, "balanced": 20.0, "split_16": 12.0})
    assert p.regret(1.0, 132) == 1.0  # one request: the rule, the fastest
    assert p.regret(0.01, 132) == 2.0  # a cost near 0 makes the balanced schedule look free: twice the best
