"""kernel_lab.tools.choice_fit: its committed output, its leave-one-family-out fit, and wrong choices scoring worse."""

from __future__ import annotations

import pytest

from kernel_lab.tools import choice_fit as cf
from kernel_lab.tools import long_tail as lt
from kernel_lab.tools import split_model_fit as smf
from kernel_lab.tests.results import result
from mla_edu.kernels import schedule as sc


@pytest.fixture(scope="module")
def fit():
    return cf.run()


def test_the_committed_markdown_is_the_tools_output():
    assert cf.OUT.read_text(encoding="utf-8") == cf.render(out=cf.OUT), (
        "kernel_lab/results/choice_fit_h200.md is stale: python -m kernel_lab.tools.choice_fit "
        "--out kernel_lab/results/choice_fit_h200.md")


def test_the_launch_order_model_is_the_packages_choice_before_stage_2_entered_it(fit):
    data = result("family_bench_h200.json")
    rows = data["family"] + data["uniform"]
    problems = fit["problems"][:len(rows)]
    spans = cf.modelled(problems, fit["sms"])["launch order"][:len(rows)]
    before = smf.load(smf.FIT_SETS[:1])  # the family bench at 29d1c24
    assert [(p.heads, p.lens) for p in problems] == [(p.heads, p.lens) for p in before]
    assert smf.BEFORE.margin == cf.STAGE1_MARGIN
    assert [cf.choose(p, s, cf.STAGE1_MARGIN) for p, s in zip(problems, spans)] == [
        smf.choice(p, smf.BEFORE) for p in before]


def test_the_balanced_schedule_is_modelled_as_the_family_bench_ran_it(fit):
    data = result("family_bench_h200.json")
    rows = data["family"] + data["uniform"]
    sms, problems = fit["sms"], fit["problems"]
    spans = cf.modelled(problems, sms)
    now = [sc.stage1_makespans(p.lens, cf.PAGE, p.heads, sms, p.rule_splits) for p in problems]
    # the rule's term is the package's; the balanced one is capped on the parts the bench stored
    assert [s[0] for s in spans["launch order"]] == [s[0] for s in now]
    for p, r, s, lb in zip(problems, rows, spans["launch order"], spans["lower bound"]):
        assert s[1] == lb[1] == lt.capped_makespan(r["lens"], r["parts"])
    # on the uniform grid (h_q 16 and 128) the package's model is the bench's
    assert all(s[1] == n[1] for s, n in zip(spans["launch order"][len(rows):], now[len(rows):]))
    # it differs where the package's schedule changed since: the cap lifted, and 16-head programs at h_q=32
    changed = {(p.heads, len(p.lens)) for p, s, n in zip(problems, spans["launch order"], now) if s[1] != n[1]}
    assert {(32, 1), (32, 4), (32, 16)} <= changed and all(b >= sc.PIECE_CAP_BATCH or h == 32 for h, b in changed)


def test_the_lower_bound_misses_a_long_request_launched_last():
    # h_q=16 on 132 SMs: one head block, one program a slot. 132 one-page requests fill the slots once, then a
    # 40-page one runs alone: the bound says 45 page-times (its program), launch order 6 + 45.
    lens = [64] * 132 + [64 * 40]
    rule, _ = cf.lower_bound_makespans(lens, 64, 16, 132, 1)
    assert rule == 40 + sc.FIXED_OVERHEAD_PAGES
    assert sc.makespans(lens, 64, 16, 132, 1)[0] == 1 + 2 * sc.FIXED_OVERHEAD_PAGES + 40


def synthetic(family: str, ratio: float, balanced_faster: bool) -> tuple[cf.Problem, tuple[float, float]]:
    """A problem whose modelled balanced / rule is ``ratio``, and the measured winner."""
    us = {"split_4": 2.0, "balanced": 1.0} if balanced_faster else {"split_4": 1.0, "balanced": 2.0}
    return cf.Problem(family, 16, (64,), 4, us, {}), (1.0, ratio)


def test_leave_one_family_out_finds_the_margin_the_data_hold():
    # The balanced schedule wins where modelled below 0.85 of the rule: 0.82 wins, 0.88 loses. Only margins m with
    # 0.82 < 1 - m <= 0.88 choose right, 0.15 alone on the grid; A and B each hold both, so every fit without one
    # of them still sees both ratios. C alone allows 0.05-0.25 and its fit takes the one nearest STAGE1_MARGIN.
    cases = [synthetic(f, r, r < 0.85) for f, rs in (("A", (0.82, 0.88)), ("B", (0.82, 0.88)), ("C", (0.7, 0.95)))
             for r in rs]
    problems, spans = [p for p, _ in cases], [s for _, s in cases]
    assert cf.fit_margin(problems, spans) == 0.15
    assert {f: m for f, (m, _) in cf.lofo(problems, spans).items()} == {"A": 0.15, "B": 0.15, "C": 0.15}
    assert all(p.regret(c) == 1 for p, c in zip(problems, cf.held_out_choices(problems, cf.lofo(problems, spans))))
    assert cf.fit_margin(problems[4:], spans[4:]) == cf.STAGE1_MARGIN
    # Without A and B's evidence at 0.85, a family whose threshold is 0.75 is mis-scored when held out.
    shifted = [synthetic("D", r, r < 0.75) for r in (0.72, 0.78)]
    got = cf.lofo(problems + [p for p, _ in shifted], spans + [s for _, s in shifted])
    assert got["D"][0] == 0.15 and got["D"][1] == ["balanced", "balanced"]


@pytest.mark.parametrize("wrong", ["always balanced", "always the rule", "the choice turned around"])
def test_a_wrong_choice_scores_worse_than_the_fitted_one(fit, wrong):
    problems = fit["problems"]
    fitted = cf.score([p.regret(c) for p, c in zip(problems, fit["held_out"]["launch order"])])
    picks = {"always balanced": ["balanced"] * len(problems), "always the rule": [p.rule for p in problems],
             "the choice turned around": [p.rule if c == "balanced" else "balanced"
                                          for p, c in zip(problems, fit["held_out"]["launch order"])]}[wrong]
    bad = cf.score([p.regret(c) for p, c in zip(problems, picks)])
    assert bad["within"] < fitted["within"] and bad["max"] > fitted["max"]


def test_the_launch_order_model_beats_the_lower_bound_held_out(fit):
    scores = {m: cf.score([p.regret(c) for p, c in zip(fit["problems"], fit["held_out"][m])]) for m in cf.MODELS}
    assert scores["launch order"]["within"] > scores["lower bound"]["within"]
    assert scores["launch order"]["max"] < scores["lower bound"]["max"]
