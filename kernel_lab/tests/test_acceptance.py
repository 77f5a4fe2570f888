"""kernel_lab.tools.acceptance: the committed scoreboard regenerates from the committed runs, and its logic on small
synthetic runs, edge by edge: which run a problem takes, the bars at their values, B=1 in and out of the uniform
lines, and tables that are wrong failing."""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import re
import statistics

import pytest

from kernel_lab.tools import acceptance as acc
from kernel_lab.tools import family_bench as fb
from kernel_lab.tests.results import result

SMS = 132
#: 29d1c24, a2e9367, 8acf73a: the commits the generated tables name; they are judged at the rules from RULES
#: (``rules_from``), as the runs up to 8acf73a were pooled then.
OLD, RULES, NEW = acc.COMMITS[:3]
#: The committed runs up to 8acf73a, read alone (at the rules they ran under) by the tests that know their problems.
UP_TO_8ACF73A = acc.RUNS[:acc.RUNS.index(acc.LAB / "family_bench_h200_fm_8acf73a_h16_uniform.json") + 1]


def test_the_committed_markdown_is_the_tools_output():
    # the committed scoreboard is judged at today's rules: the runs from RULES_FROM on timed the kernels of today
    # (from 261e2bd to bd22e84 the kernels' device code and the schedule did not change; bd22e84 added host-side
    # refusals of shapes past int32, none of them a bench's)
    assert acc.COMMITS[acc.COMMITS.index(acc.RULES_FROM):] == ("261e2bd", "1699741", "84453eb", "69707eb",
                                                               "bd22e84")
    assert acc.OUT.read_text(encoding="utf-8") == acc.render(out=acc.OUT), (
        "kernel_lab/results/acceptance_h200.md is stale: python -m kernel_lab.tools.acceptance "
        "--out kernel_lab/results/acceptance_h200.md")


def test_the_h100_scoreboard_is_the_tools_output_on_the_h100_runs():
    # the same bench three times on an H100 (the H200's choice constants, another GPU): its own scoreboard
    runs = acc.H100_RUNS
    out = acc.LAB / "acceptance_h100.md"
    assert out.read_text(encoding="utf-8") == acc.render(runs, out), (
        "kernel_lab/results/acceptance_h100.md is stale: python -m kernel_lab.tools.acceptance --runs "
        + " ".join(acc.rel(p) for p in runs) + " --out kernel_lab/results/acceptance_h100.md")
    assert out.read_text(encoding="utf-8").startswith("# Issue 52's acceptance on NVIDIA H100 80GB HBM3")


def stale(committed: str, regenerated: str) -> list[str]:
    """The lines where a committed scoreboard differs from the tool's output."""
    return [x for x in difflib.unified_diff(committed.splitlines(), regenerated.splitlines(), lineterm="", n=0)
            if x[:1] in "+-" and x[:3] not in ("+++", "---")]


@pytest.mark.parametrize("wrong", ["a ratio", "a verdict", "a row dropped", "a run named", "two rows swapped"])
def test_a_wrong_table_fails(wrong):
    text = acc.OUT.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    i = next(i for i, x in enumerate(lines) if x.startswith("| 64 | giant |"))
    j = next(i for i, x in enumerate(lines) if f"`{acc.RUNS[-1].name}`" in x and x.startswith("|"))
    bad = list(lines)
    if wrong == "a ratio":
        cells = bad[i].split("|")
        cells[6] = f" {float(cells[6]) + 0.1:.2f} "  # B=256
        bad[i] = "|".join(cells)
    elif wrong == "a verdict":
        bad = [x.replace("| not met |", "| met |", 1) if x.startswith("| ragged") else x for x in bad]
    elif wrong == "a row dropped":
        del bad[i]
    elif wrong == "a run named":
        bad[j] = bad[j].replace(acc.RUNS[-1].name, acc.RUNS[-2].name)
    else:
        bad[i], bad[i + 1] = bad[i + 1], bad[i]
    assert "".join(bad) != text and stale("".join(bad), acc.render(out=acc.OUT))


def test_the_committed_tables_agree_with_family_bench_summary():
    """Each 8acf73a run alone, through ``family_bench.summary``: the scoreboard takes every one of their problems
    (nothing newer), so the geomean and lowest of the choice over a head count agree."""
    board = acc.scoreboard(acc.load(UP_TO_8ACF73A), rules_from=RULES)
    for name, kind, heads in (("h16", "family", 16), ("h16_uniform", "uniform", 16), ("b256", "family", 64),
                              ("b256", "family", 128)):
        data = result(f"family_bench_h200_fm_8acf73a_{name}.json")
        want = fb.summary(data)[f"{kind}_h{heads}"]
        picks = [p for k, p in board["picks"].items() if k[0] == kind and k[2] == heads
                 and p.run == f"family_bench_h200_fm_8acf73a_{name}.json" and (kind == "family" or k[3] >= 4)]
        assert len(picks) == want["problems"]
        xs = [p.x for p in picks]
        assert round(min(xs), 3) == want["choice_min"]
        assert round(statistics.geometric_mean(xs), 3) == want["choice_geomean"]
        assert sum(p.regret <= 1.05 for p in picks) == want["choice_within_5pct"]


def test_the_committed_runs_are_read_as_they_ran():
    board = acc.scoreboard(acc.load(UP_TO_8ACF73A), rules_from=RULES)
    got = board["picks"]
    assert board["skipped"] == ["family_bench_h200_ours_a2e9367.json"]
    # the one problem of two runs (the b128 run reached it before it stopped) takes the median of both, the later named
    twice = [p for p in got.values() if p.runs == 2]
    assert [p.key for p in twice] == [("family", "lognormal_0.5", 32, 256)]
    assert twice[0].run == "family_bench_h200_fm_8acf73a_b256.json"
    assert twice[0].pooled == ("family_bench_h200_fm_8acf73a_b128.json", "family_bench_h200_fm_8acf73a_b256.json")
    both = [next(r for r in result(f"family_bench_h200_fm_8acf73a_{n}.json")["family"]
                 if (r["family"], r["heads"], r["batch"]) == ("lognormal_0.5", 32, 256)) for n in ("b128", "b256")]
    assert twice[0].x == statistics.median(fb.x_flashmla(r, "balanced")[0] for r in both)
    # every family batch is measured at current rules; the uniform grid at h_q 32-128 only in the first run
    assert all(not p.older for k, p in got.items() if k[0] == "family") and len(got) == 128 + 15 + 10
    assert {(k[2], k[3]) for k, p in got.items() if p.older} == {(32, 1), (32, 4), (64, 1), (128, 1)}
    assert len(board["keys"]) == 188
    # held out: none, since the split count's stage 2 model read every run up to 8acf73a (split_model_fit.FIT_SETS)
    assert set(board["runs"]) <= set(board["fitted"]) and board["choice"][-1]["held"] == 0


def test_held_out_are_the_problems_only_the_runs_after_the_fits_timed():
    """On every committed run: the runs at today's rules are the three at 261e2bd (stage 2 changed there) and the
    whole one at 1699741, which no fit read. The 32 problems the 261e2bd runs timed (families at h_q 64 and 128, B 128
    and 256) are pooled from all four; every other problem from the 1699741 run alone; none is older, all held out."""
    board = acc.scoreboard(acc.load())
    unfitted = {n for n in board["runs"] if n not in board["fitted"]}
    stage2 = {f"family_bench_h200_fm_261e2bd_run{i}.json" for i in (1, 2, 3)}
    whole = "family_bench_h200_fm_1699741_run1.json"
    assert unfitted == stage2 | {whole} | {f"family_bench_h200_fm_4d46283_run{i}.json" for i in (1, 2, 3)}
    four = {k for k in board["keys"] if k[0] == "family" and k[2] >= 64 and k[3] >= 128}
    assert len(four) == 32 and all(set(board["picks"][k].pooled) == stage2 | {whole} for k in four)
    assert all(board["picks"][k].pooled == (whole,) for k in board["keys"] if k not in four)
    assert not any(p.older for p in board["picks"].values()) and len(board["picks"]) == len(board["keys"]) == 188
    assert board["choice"][-1]["held"] == 188


def row(family: str, batch: int, x: float, regret: float = 1.0, heads: int = 16, flashmla: bool = True) -> dict:
    """A family-bench row whose choice (the split rule, one split) runs at ``x`` FlashMLA and ``regret`` times the
    best option (the balanced schedule where above 1)."""
    r = {"family": family, "heads": heads, "batch": batch, "lens": [64] * batch, "rule_splits": 1,
         "us": {"split_1": [1.0], "balanced": [1.0 / regret]}}
    if flashmla:
        r["us"]["flashmla"] = [x]
    assert fb.backend_choice(r, SMS) == "split_1"  # short uniform requests: the model keeps the rule
    return r


def run(name: str, commit: str, family=(), uniform=()) -> tuple[str, dict]:
    return name, {"info": {"sm_count": SMS, "setup": f"NVIDIA H200; commit {commit}"}, "family": list(family),
                  "uniform": list(uniform)}


FAM = [("family", "fam", 16, b) for b in (16, 64)]


def board(*runs, keys=FAM, fitted=()):
    return acc.scoreboard(acc.runs_in_order(list(runs)), keys, fitted, rules_from=RULES)


def ragged_row(b: dict) -> dict:
    (r,) = b["ragged"]
    return r


@pytest.mark.parametrize("order", ["older then newer", "two at one commit"])
def test_a_problem_in_two_runs_takes_the_median_of_both(order):
    first = run("a", RULES if order == "older then newer" else NEW, [row("fam", 16, 0.5), row("fam", 64, 0.5)])
    second = run("b", NEW, [row("fam", 16, 1.2, regret=1.1)])
    got = board(first, second)["picks"]
    both = got["family", "fam", 16, 16]
    assert (both.run, both.runs) == ("b", 2) and (both.x, both.regret) == pytest.approx((0.85, 1.05))
    assert (got["family", "fam", 16, 64].run, got["family", "fam", 16, 64].runs) == ("a", 1)


def test_three_runs_give_the_middle_one():
    runs = [run(n, NEW, [row("fam", 16, x, regret=g)]) for n, x, g in (("a", 0.9, 1.2), ("b", 1.3, 1.0),
                                                                        ("c", 1.0, 1.1))]
    p = board(*runs, keys=FAM[:1])["picks"]["family", "fam", 16, 16]
    assert (p.run, p.runs) == ("c", 3) and (p.x, p.regret) == pytest.approx((1.0, 1.1))


@pytest.mark.parametrize("xs, always", [((0.90, 0.94, 0.93), True), ((0.90, 0.96, 0.93), False),
                                        ((0.94, 0.95, 0.90), False)])
def test_a_batch_below_the_floor_in_every_run_is_told_from_one_a_slow_run_pulled_down(xs, always):
    """The spread between runs against the bar: a median below 0.95 is 'below in every run' only where no run timed
    it at 0.95 or above (a value at the bar passes)."""
    runs = [run(n, NEW, [row("fam", 16, x), row("fam", 64, 1.2)]) for n, x in zip("abc", xs)]
    b = board(*runs)
    p = b["picks"]["family", "fam", 16, 16]
    assert p.xs == pytest.approx(xs) and p.always_below is always
    assert not b["picks"]["family", "fam", 16, 64].always_below
    assert (f"1 below 0.95 (of those timed in 2 or more runs: {int(always)} of the 1 below 0.95 in every run, 0 above "
            "with a run below)") in acc.verdicts(b)[0][1]
    assert "timed in 2 or more" not in acc.verdicts(board(runs[0]))[0][1]  # one run: no spread to judge
    # a median that passes with one run below the bar is counted too: the spread judged on both sides
    above = [run(n, NEW, [row("fam", 16, x), row("fam", 64, 1.2)]) for n, x in zip("abc", (0.96, 0.94, 0.97))]
    assert "0 below 0.95 (of those timed in 2 or more runs: 0 of the 0 below 0.95 in every run, 1 above with a run " \
           "below)" in acc.verdicts(board(*above))[0][1]


def test_a_run_before_the_rules_is_taken_only_alone_and_flagged():
    old = run("old", OLD, [row("fam", 16, 1.2), row("fam", 64, 1.2)])
    new = run("new", RULES, [row("fam", 16, 1.1)])
    b = board(old, new)
    assert b["picks"]["family", "fam", 16, 16].run == "new"
    kept = b["picks"]["family", "fam", 16, 64]
    assert (kept.run, kept.older) == ("old", True)
    r = ragged_row(b)
    assert not r["met"]  # counted as unmeasured, though 1.2 would pass
    assert "| 16 | fam | 1.10 | 1.20 (older) |" in acc.to_markdown(b, "cmd")
    assert acc.verdicts(b)[0][2] == "not met (1 unmeasured)"


def test_runs_out_of_order_are_an_error():
    order = re.escape(" < ".join(acc.COMMITS))
    with pytest.raises(ValueError, match=r"expected the runs in the order they ran, their commits in COMMITS' order "
                       rf"\({order}\), got old \(a2e9367\) after new \(8acf73a\)"):
        acc.runs_in_order([run("new", NEW), run("old", RULES)])
    swapped = list(acc.RUNS)
    swapped[1], swapped[3] = swapped[3], swapped[1]  # an 8acf73a run listed before the a2e9367 ones
    with pytest.raises(ValueError, match=r"got family_bench_h200_ours_a2e9367.json \(a2e9367\) after "
                       r"family_bench_h200_fm_8acf73a_h16.json \(8acf73a\)"):
        acc.load(swapped)
    assert [r.commit for r in acc.runs_in_order([run("a", NEW), run("b", NEW)])] == [NEW, NEW]  # one commit: any order


@pytest.mark.parametrize("setup, error", [
    ("no commit named", "expected a setup line naming 'commit <hash>', got 'no commit named'"),
    ("NVIDIA H200; commit 1234567", re.escape(f"expected a commit of COMMITS {acc.COMMITS}, got 1234567 (add it to "
                                              "COMMITS")),
    ("NVIDIA H200; commit abc", "expected a setup line naming 'commit <hash>'"),  # too short a hash
])
def test_a_run_whose_commit_is_not_in_commits_is_an_error(setup, error):
    with pytest.raises(ValueError, match=f"^x: {error}"):
        acc.runs_in_order([("x", {"info": {"sm_count": SMS, "setup": setup}})])


@pytest.mark.parametrize("commit", ["8acf73a", "8acf73a0", "8acf73a" + "0" * 33])
def test_a_commit_is_known_by_its_first_seven_digits(commit):
    assert acc.commit_of({"info": {"setup": f"NVIDIA H200; commit {commit}"}}, "x") == NEW


def test_the_committed_runs_are_all_listed():
    acc.check_listed()
    assert sorted(p.name for p in acc.LAB.glob(acc.PATTERN)) == sorted(
        [p.name for p in acc.RUNS] + list(acc.SKIPPED))


@pytest.mark.parametrize("runs, skipped, error", [
    ("ab", "", None),
    ("a", "b", None),
    ("abc", "", "RUNS: expected the file .*family_bench_h200_c.json, got none there"),  # a listed file missing
    ("a", "", "got family_bench_h200_b.json in neither"),  # a json not listed
    ("aba", "", "RUNS: expected each run once, got family_bench_h200_a.json more than once"),
    ("ab", "b", "SKIPPED: expected a file .* not in RUNS, got family_bench_h200_b.json, which RUNS lists"),
    ("ab", "c", "SKIPPED: .*got family_bench_h200_c.json, which is not there"),
])
def test_every_family_bench_json_is_listed_or_skipped(tmp_path, runs, skipped, error):
    """A results folder holding runs a and b (and a markdown, not a run); RUNS and SKIPPED the runs named."""
    for n in ("a.json", "b.json", "b.md"):
        (tmp_path / f"family_bench_h200_{n}").write_text("{}")
    paths = [tmp_path / f"family_bench_h200_{x}.json" for x in runs]
    names = tuple(f"family_bench_h200_{x}.json" for x in skipped)
    if error is None:
        acc.check_listed(paths, names, tmp_path)
    else:
        with pytest.raises(ValueError, match=error):
            acc.check_listed(paths, names, tmp_path)


def test_a_run_without_flashmla_is_skipped():
    fm = run("fm", RULES, [row("fam", 16, 1.2), row("fam", 64, 1.2)])
    ours = run("ours", NEW, [row("fam", 16, 0.5, flashmla=False), row("fam", 64, 0.5, flashmla=False)])
    b = board(fm, ours)
    assert b["skipped"] == ["ours"] and {p.run for p in b["picks"].values()} == {"fm"}
    alone = board(ours)
    assert alone["picks"] == {} and acc.verdicts(alone)[0][2] == "not met (2 unmeasured)"


A, B = 1.0004, 1.025  # (1.05 a b, 1.05 / a, 1.05 / b): geomean 1.05, computed 1.0499999999999998


@pytest.mark.parametrize("xs, met", [
    ((1.05 * A * B, 1.05 / A, 1.05 / B), True),  # the geomean at the bar, below it by float rounding
    ((1.05, 1.05), True),
    ((1.0499, 1.0499), False),
    ((1.5, 0.95), True),  # a batch exactly at the floor
    ((1.5, 0.9499), False),  # geomean 1.19, but a batch below the floor
])
def test_a_family_meets_the_bars_at_their_values(xs, met):
    batches = (16, 64, 128)[:len(xs)]
    b = board(run("a", RULES, [row("fam", n, x) for n, x in zip(batches, xs)]),
              keys=[("family", "fam", 16, n) for n in batches])
    if len(xs) == 3:
        assert statistics.geometric_mean(xs) < 1.05
    assert ragged_row(b)["met"] is met
    assert acc.verdicts(b)[0][2] == ("met" if met else "not met")


UNI = [("uniform", f"L{ln}", h, b) for b in (1, 4) for ln in (1024,) for h in (16, 32)]


@pytest.mark.parametrize("heads, b1, b4, big, h16", [
    (16, 0.9, 1.2, True, False),  # B=1 below 0.95: out of the 0.95 line, in h16's 1.0 line
    (16, 0.99, 1.2, True, False),  # below 1.0 at B=1 only
    (16, 1.0, 1.0, True, True),  # both at their bars
    (16, 1.2, 0.96, True, False),  # B=4 above 0.95, below h16's 1.0
    (16, 1.2, 0.9499, False, False),
    (32, 0.5, 0.95, True, True),  # h_q=32: B=1 in no line, and no 1.0 line
    (32, 1.2, 0.9499, False, True),
])
def test_uniform_b1_is_out_of_the_floor_and_in_h16s_line(heads, b1, b4, big, h16):
    good = {16: 1.5, 32: 1.5}
    rows = [row("L1024", b, {1: b1, 4: b4}[b] if h == heads else good[h], heads=h) for b in (1, 4) for h in (16, 32)]
    b = board(run("u", NEW, uniform=rows), keys=UNI)
    lines = {u["heads"]: u for u in b["uniform"]}
    assert lines[heads]["big"]["met"] is big
    verdict = {c.split(":")[0]: v for c, _, v in acc.verdicts(b)}
    assert verdict["uniform, every head count, B >= 4"] == ("met" if big else "not met")
    assert verdict["uniform h_q=16"] == ("met" if h16 else "not met")


@pytest.mark.parametrize("regret, within", [(1.0, True), (1.05, True), (1.0501, False), (1.3, False)])
def test_the_choice_within_five_percent_of_the_best(regret, within):
    b = board(run("a", RULES, [row("fam", 16, 1.2, regret=regret), row("fam", 64, 1.2)]))
    c = b["choice"][-1]
    assert (c["within"], c["best"]) == (1 + within, 1 + (regret == 1.0))
    assert acc.verdicts(b)[1][2] == ("met" if within else "not met")
    text = acc.to_markdown(b, "cmd")
    if regret > 1:
        printed = acc.ratio(regret, acc.WITHIN, upper=True)  # 1.0501 over the ceiling: not printed at it
        assert printed == {1.05: "1.05", 1.0501: "1.0501", 1.3: "1.30"}[regret]
        assert f"| all | 2 of 2 | 1 | {1 + within} | {printed}x (fam h_q=16 B=16: split_1, best balanced) |" in text


def test_missing_problems_are_listed_and_fail_the_criteria():
    keys = FAM + [("family", "fam", 16, 128)]
    b = board(run("a", RULES, [row("fam", 16, 1.2), row("fam", 64, 1.2)]), keys=keys)
    text = acc.to_markdown(b, "cmd")
    assert "| 16 | fam | 1.20 | 1.20 | - | 1.200 | 1.20 (B=16) | no |" in text
    assert "| family | 16 | 128 | 1 | not measured | 0 |" in text
    assert [v for _, _, v in acc.verdicts(b)][:2] == ["not met (1 unmeasured)", "not met (1 unmeasured)"]


@pytest.mark.parametrize("runs, verdict", [(1, "not met"), (2, "not met"), (3, "met")])
def test_three_runs_a_problem_are_asked(runs, verdict):
    b = board(*[run(f"r{i}", NEW, [row("fam", 16, 1.2), row("fam", 64, 1.2)]) for i in range(runs)])
    (line,) = [x for x in acc.verdicts(b) if x[0].startswith("each ratio")]
    assert line[2] == verdict and f"problems timed in {runs} run" in line[1]


def test_the_command_line(tmp_path):
    out = tmp_path / "a.md"
    text = acc.main(["--out", str(out)])
    assert out.read_text(encoding="utf-8") == text and "--out" in text.splitlines()[2]
    with pytest.raises(SystemExit):
        acc.main(["--runs", str(tmp_path / "missing.json")])


@pytest.mark.parametrize("read", [read for n in (1, 2, 3) for read in itertools.product((False, True), repeat=n)])
def test_a_problem_is_held_out_when_no_run_behind_its_ratio_was_read_by_a_fit(read):
    """A problem in 1, 2 or 3 runs, each run read by a fit or not: held out only where none was."""
    names = [f"r{i}" for i in range(len(read))]
    b = board(*[run(n, NEW, [row("fam", 16, 1.2)]) for n in names], keys=FAM[:1],
              fitted={n for n, r in zip(names, read) if r})
    held = int(not any(read))
    c = b["choice"][-1]
    assert (c["current"], c["within"], c["held"], c["held_within"]) == (1, 1, held, held)
    assert f"| all | 1 of 1 | 1 | 1 | - | {held} of {held} |" in acc.to_markdown(b, "cmd")
    (line,) = [s for c, s, _ in acc.verdicts(b) if c.startswith("the choice")]
    assert line.endswith(f"held out (no run behind the ratio read by a fit): {held} of {held}")


JUDGED = [  # (runs, the miss, within, the best option): on the median over the runs
    (1, 1.04, True, False), (1, 1.08, False, False), (1, 1.2, False, False),
    (2, 1.04, True, False), (2, 1.08, True, False), (2, 1.2, False, False),  # the mean of 1 and the miss
    (3, 1.04, True, True), (3, 1.08, True, True), (3, 1.2, True, True),  # the median is a run where it is the best
]


@pytest.mark.parametrize("runs, miss, within, best, at", [(*j, at) for j in JUDGED for at in range(j[0])])
def test_a_choice_that_misses_in_one_pooled_run_is_judged_on_the_median(runs, miss, within, best, at):
    """The choice off the best option in one run only (``miss`` times it, in the run ``at``), the best option in the
    others: judged on the median over the runs, wherever the miss lies; held out or not alike."""
    b = board(*[run(f"r{i}", NEW, [row("fam", 16, 1.2, regret=miss if i == at else 1.0)]) for i in range(runs)],
              keys=FAM[:1])
    c = b["choice"][-1]
    assert (c["within"], c["best"], c["held"], c["held_within"]) == (within, best, 1, within)
    (line,) = [x for x in acc.verdicts(b) if x[0].startswith("the choice")]
    assert line[2] == ("met" if within else "not met")
    row_all = next(x for x in acc.to_markdown(b, "cmd").splitlines() if x.startswith("| all |"))
    assert row_all.startswith(f"| all | 1 of 1 | {int(best)} | {int(within)} | ")
    assert row_all.endswith(f" | {int(within)} of 1 |")
    fitted = board(*[run(f"r{i}", NEW, [row("fam", 16, 1.2, regret=miss if i == at else 1.0)])
                     for i in range(runs)], keys=FAM[:1], fitted={"r0"})["choice"][-1]
    assert (fitted["within"], fitted["held"], fitted["held_within"]) == (within, 0, 0)


@pytest.mark.parametrize("commit", [acc.COMMITS[-1], "0123abc"])
def test_a_new_run_is_one_line_of_runs(tmp_path, monkeypatch, commit, capsys):
    """The committed runs and one more in a copy of the results folder: unlisted, the command fails naming it; listed
    last (and its commit, if new, in ``COMMITS``), its problems pool two runs."""
    for p in (*acc.RUNS, *(acc.LAB / n for n in acc.SKIPPED)):
        (tmp_path / p.name).symlink_to(p)
    data = json.loads((acc.LAB / "family_bench_h200_fm_8acf73a_h16.json").read_text(encoding="utf-8"))
    data["info"]["setup"] = data["info"]["setup"].replace("commit 8acf73a", f"commit {commit}")
    for r in data["family"] + data["uniform"]:  # its own times: a copy of a run is refused
        r["us"] = {o: [t * 1.01 for t in ts] for o, ts in r["us"].items()}
    new = tmp_path / "family_bench_h200_fm_new.json"
    new.write_text(json.dumps(data))
    monkeypatch.setattr(acc, "LAB", tmp_path)
    monkeypatch.setattr(acc, "RUNS", tuple(tmp_path / p.name for p in acc.RUNS))
    with pytest.raises(SystemExit):
        acc.main([])
    assert "got family_bench_h200_fm_new.json in neither" in capsys.readouterr().err
    monkeypatch.setattr(acc, "RUNS", (*acc.RUNS, new))
    if commit not in acc.COMMITS:
        with pytest.raises(ValueError, match=f"got {commit} \\(add it to COMMITS"):
            acc.load()
        monkeypatch.setattr(acc, "COMMITS", (*acc.COMMITS, commit))
    got = acc.scoreboard(acc.load(), rules_from=RULES)["picks"]
    h16 = [p for k, p in got.items() if k[0] == "family" and k[2] == 16]
    before = acc.scoreboard(acc.load(acc.RUNS[:-1]), rules_from=RULES)["picks"]
    assert len(h16) == 32 and all(p.pooled == (*before[p.key].pooled, new.name) for p in h16)


def test_the_choice_takes_todays_split_rule_and_refuses_a_count_the_run_did_not_time():
    # h_q=128, B=1, 2048 tokens: today's rule takes 16 splits (its merge at 32 costs more), whatever the row stored
    r = {"family": "L2048", "heads": 128, "batch": 1, "lens": [2048], "rule_splits": 32,
         "us": {"split_16": [1.0], "split_32": [0.9], "balanced": [2.0]}}
    assert fb.rule_splits_now(r, SMS) == 16 and fb.backend_choice(r, SMS) == "split_16"
    del r["us"]["split_16"]
    with pytest.raises(ValueError, match=r"takes split 16 at h_q=128, B=1, but the run timed only "
                                         r"\['balanced', 'split_32'\]"):
        fb.backend_choice(r, SMS)


def test_a_balanced_choice_the_run_did_not_time_is_refused_by_name():
    data = result("family_bench_h200_fm_1699741_run1.json")
    r = next(r for r in data["family"] if fb.backend_choice(r, data["info"]["sm_count"]) == "balanced")
    r = {**r, "us": {k: v for k, v in r["us"].items() if k != "balanced"}}
    with pytest.raises(ValueError, match="the backend now takes balanced at h_q="):
        fb.backend_choice(r, data["info"]["sm_count"])


@pytest.mark.parametrize("x, bar, text", [
    (0.948, 0.95, "0.948"), (0.9496, 0.95, "0.9496"), (0.95, 0.95, "0.95"), (0.951, 0.95, "0.95"), (0.9, 0.95, "0.90"),
    (0.99999, 1.0, "0.99999"), (1.004, 1.0, "1.00"), (0.996, 1.0, "0.996"), (1.0, 1.0, "1.00"),
])
def test_a_ratio_below_its_bar_never_prints_at_it(x, bar, text):
    assert acc.ratio(x, bar) == text
    assert acc.passes(float(text), bar) == acc.passes(x, bar)


def _write_runs(tmp_path, runs) -> list:
    paths = []
    for name, data in runs:
        (tmp_path / name).write_text(json.dumps(data), encoding="utf-8")
        paths.append(tmp_path / name)
    return paths


def test_a_run_given_twice_or_copied_under_another_name_is_an_error(tmp_path):
    """A copy passes for a second run unless refused: the median of three would be met by one run read thrice."""
    one = run("a.json", NEW, [row("fam", 16, 1.1), row("fam", 64, 1.2)])
    (path,) = _write_runs(tmp_path, [one])
    with pytest.raises(ValueError, match="a.json more than once"):
        acc.load([path, path, path])
    copy = _write_runs(tmp_path, [("b.json", one[1])])
    with pytest.raises(ValueError, match="timed as in a.json"):
        acc.load([path, *copy])
    other = run("c.json", NEW, [row("fam", 16, 1.15), row("fam", 64, 1.25)])
    assert len(acc.load([path, *_write_runs(tmp_path, [other])])) == 2  # times of their own: two runs
    # one problem timed to the last digit as in another run is refused too
    same_row = run("d.json", NEW, [row("fam", 16, 1.3), row("fam", 64, 1.2)])
    with pytest.raises(ValueError, match="B=64 timed as in a.json"):
        acc.load([path, *_write_runs(tmp_path, [same_row])])


@pytest.mark.parametrize("times, what", [
    ([float("nan"), 0.5, 2.0], "flashmla's times finite and positive"),
    ([0.5, float("nan"), 2.0], "flashmla's times finite and positive"),
    ([], "flashmla's times finite and positive"),
    ([0.0], "flashmla's times finite and positive"),
    ([float("inf")], "flashmla's times finite and positive"),
    ([1.0, 1.0], "as many rounds of every option as of FlashMLA's"),
])
def test_a_time_that_is_not_a_time_is_an_error_naming_the_problem(tmp_path, times, what):
    r = row("fam", 16, 1.1)
    r["us"]["flashmla"] = times
    paths = _write_runs(tmp_path, [run("a.json", NEW, [r])])
    with pytest.raises(ValueError, match=re.escape("a.json: family fam h_q=16 B=16: expected " + what)):
        acc.load(paths)


@pytest.mark.parametrize("option", ["split_1", "balanced"])
def test_a_nan_time_of_any_option_is_an_error(tmp_path, option):
    r = row("fam", 16, 1.1, regret=1.2)
    r["us"][option] = [float("nan")]
    with pytest.raises(ValueError, match=f"expected {option}'s times finite"):
        acc.load(_write_runs(tmp_path, [run("a.json", NEW, [r])]))


def test_loading_the_h100_runs_refuses_an_h100_json_not_listed(tmp_path, monkeypatch):
    for p in (*acc.RUNS, *acc.H100_RUNS, *(acc.LAB / n for n in acc.SKIPPED)):
        (tmp_path / p.name).symlink_to(p)
    monkeypatch.setattr(acc, "LAB", tmp_path)
    monkeypatch.setattr(acc, "RUNS", tuple(tmp_path / p.name for p in acc.RUNS))
    monkeypatch.setattr(acc, "H100_RUNS", tuple(tmp_path / p.name for p in acc.H100_RUNS))
    assert len(acc.load(acc.H100_RUNS)) == 4
    (tmp_path / "family_bench_h100_fm_0123abc_run1.json").write_text("{}", encoding="utf-8")
    for runs in (acc.H100_RUNS, acc.RUNS):
        with pytest.raises(ValueError, match="family_bench_h100_fm_0123abc_run1.json in neither"):
            acc.load(runs)


def test_an_h100_run_not_listed_is_an_error(tmp_path):
    for p in acc.H100_RUNS:
        (tmp_path / p.name).write_text("{}", encoding="utf-8")
    (tmp_path / "family_bench_h100_fm_0123abc_run1.json").write_text("{}", encoding="utf-8")
    paths = [tmp_path / p.name for p in acc.H100_RUNS]
    with pytest.raises(ValueError, match="family_bench_h100_fm_0123abc_run1.json in neither"):
        acc.check_listed(paths, (), tmp_path, pattern=acc.H100_PATTERN, name="H100_RUNS")
    (tmp_path / "family_bench_h100_fm_0123abc_run1.json").unlink()
    acc.check_listed(paths, (), tmp_path, pattern=acc.H100_PATTERN, name="H100_RUNS")


def test_a_geomean_or_a_worst_choice_near_a_bar_prints_on_its_side():
    # a geomean of 1.04981 would print 1.050 at three decimals: it prints the digit that fails
    g = acc.ratio(1.04981, acc.GEOMEAN_BAR, 3)
    assert float(g) < acc.GEOMEAN_BAR and g == "1.0498"
    assert acc.ratio(1.05, acc.GEOMEAN_BAR, 3) == "1.050"
    # the choice over the best is judged against a ceiling: 1.0504 is over it, 1.05 at it
    assert acc.ratio(1.0504, acc.WITHIN, upper=True) == "1.0504"
    assert acc.ratio(1.05, acc.WITHIN, upper=True) == "1.05"
    assert acc.ratio(1.046, acc.WITHIN, upper=True) == "1.05"  # below the ceiling, printed at it: still within


def test_the_worst_choice_over_a_ceiling_prints_above_it_in_the_markdown():
    b = board(run("a.json", NEW, [row("fam", 16, 1.1, regret=1.0504), row("fam", 64, 1.2)]))
    text = acc.to_markdown(b, "cmd")
    assert "the worst 1.0504x" in text and "| 1.0504x (fam h_q=16 B=16" in text


def test_a_ragged_geomean_below_its_bar_never_prints_at_it():
    x = 1.04981
    b = board(run("a.json", NEW, [row("fam", 16, x), row("fam", 64, x)]))
    text = acc.to_markdown(b, "cmd")
    assert "| 1.0498 | 1.05 (B=16) | no |" in text and "geomeans 1.0498-1.0498x, 0 at or above" in text


def test_h16_uniform_lowest_prints_against_its_own_bar():
    keys = [("uniform", "L1024", 16, b) for b in (1, 4)]
    b = board(run("a.json", NEW, uniform=[{**row("L1024", 1, 1.2), "family": "L1024"},
                                          {**row("L1024", 4, 0.9996), "family": "L1024"}]), keys=keys)
    text = acc.to_markdown(b, "cmd")
    assert "| 16 | 1.20 [1.20-1.20] | 1.00 [0.9996-1.00] |" in text  # the glance: not [1.00-1.00]
    big, every = (v for v in acc.verdicts(b) if v[0].startswith("uniform"))
    assert "the lowest 0.9996x (L1024, B=4)" in big[1] and "the lowest 0.9996x (L1024, B=4)" in every[1]


def test_a_ratio_at_older_rules_stays_out_of_the_geomean_and_the_lowest():
    b = board(run("old.json", OLD, [row("fam", 64, 0.5)]), run("new.json", NEW, [row("fam", 16, 1.2)]))
    r = ragged_row(b)
    assert r["geomean"] == pytest.approx(1.2) and r["low"].x == pytest.approx(1.2) and not r["met"]
    text = acc.to_markdown(b, "cmd")
    assert "| 1.20 | 0.50 (older) | 1.200 | 1.20 (B=16) | no |" in text


def test_the_served_choice_is_the_backends_at_its_context_limit():
    """The bench's choice and the served one both ask the triton serving backend's own functions (``auto_schedule``,
    ``auto_splits``); with a table as wide as the longest request they are the choice the split rule and
    ``schedule.prefers_balanced`` (modelled on the longest request) make at every problem of the whole run. At
    DeepSeek-V3's context limit a step reads the narrowest power of two of pages that holds the longest request: the
    same choice at every problem of that run, though the width differs at some; read whole, the table's width takes
    more splits at some."""
    from mla_edu.kernels import schedule
    from mla_edu.kernels.workspace import triton_num_kv_splits

    data = result("family_bench_h200_fm_1699741_run1.json")
    sms = data["info"]["sm_count"]
    assert acc.SERVED_CONTEXT == 163840
    differ = wider = 0
    for r in data["family"] + data["uniform"]:
        s = triton_num_kv_splits(fb.PAGE * fb.table_width(r), r["batch"], r["heads"], fb.PAGE, sms)
        model = "balanced" if schedule.prefers_balanced(r["lens"], fb.PAGE, r["heads"], sms, s) else f"split_{s}"
        assert fb.backend_choice(r, sms) == model == fb.choice_option(r, sms) == acc.served_choice(r, sms)
        width = acc.served_width(r)
        assert width >= fb.table_width(r) > width // 2 and width & (width - 1) == 0  # the next power of two
        wider += width > fb.table_width(r)
        assert acc.served_as_benched(r, sms)
        served = acc.served_choice(r, sms, whole=True)
        wide = triton_num_kv_splits(163840 + fb.PAGE, r["batch"], r["heads"], fb.PAGE, sms)  # (C + 64) // 64 pages
        assert served in ("balanced", f"split_{wide}") and wide >= s
        differ += served != model
    assert differ > 0 and wider > 0
    # read whole, the launch differs only where the bench's table made a problem too small to fill the GPU (16 heads a
    # program)
    other = [(r["family"], r["heads"], r["batch"]) for r in data["uniform"]
             if not acc.served_as_benched(r, sms, whole=True)]
    assert other == [("L1024", h, 1) for h in (32, 64, 128)]
    assert all(acc.served_as_benched(r, sms, whole=True) for r in data["family"])


@pytest.mark.parametrize("served, regret, verdict", [("split_1", 1.0, "met"), ("split_1", 1.05, "met"),
                                                     ("balanced", 1.0504, "not met"),
                                                     ("split_64", None, "not met (2 unmeasured)")])
def test_the_served_choice_has_its_own_line(served, regret, verdict):
    b = board(run("a", RULES, [row("fam", 16, 1.2), row("fam", 64, 1.2)]))
    b["picks"] = {k: dataclasses.replace(p, served=served, served_regret=regret) for k, p in b["picks"].items()}
    (line,) = [v for v in acc.verdicts(b) if v[0].startswith("the same in a server")]
    assert line[2] == verdict
    if regret is None:
        assert "0 of 0 whose choice a run timed (2 more take a split count or a launch no run timed)" in line[1]
        assert "not measured" not in line[1]
    elif regret > acc.WITHIN:
        assert "the worst 1.0504x (fam h_q=16 B=16: balanced, best split_1)" in line[1]


def test_the_served_line_counts_a_missing_problem_as_unmeasured():
    keys = [("family", "fam", 16, b) for b in (16, 64, 128)]
    b = board(run("a", RULES, [row("fam", 16, 1.2), row("fam", 64, 1.2)]), keys=keys)
    b["picks"] = {k: dataclasses.replace(p, served="split_1", served_regret=1.0) for k, p in b["picks"].items()}
    (line,) = [v for v in acc.verdicts(b) if v[0].startswith("the same in a server")]
    assert line[1] == "2 of 2 whose choice a run timed; 1 not measured at current rules"
    assert line[2] == "not met (1 unmeasured)"


def test_choose_schedule_needs_auto_splits():
    from types import SimpleNamespace

    import torch

    from mla_edu.serving.backends.triton import TritonBackend

    pool = SimpleNamespace(req_to_token=torch.zeros((1, 1), dtype=torch.int32))
    fixed = TritonBackend(pool, None, sm_scale=1.0, max_context_len=4096, num_heads=16, num_kv_splits=4,
                          sm_count=SMS)
    with pytest.raises(ValueError, match="chosen with auto splits \\(-1\\), got num_kv_splits=4"):
        fixed.choose_schedule([100, 200], 16)
