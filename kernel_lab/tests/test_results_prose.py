"""The kernel lab's A/B and profiling results read right: each results file's prose (the reading under its run) is
rendered from the runs it records (``kernel_lab.tools.stage1_ab``'s blocks, the bench runs, Nsight Compute's samples),
so that a reading cannot drift from its numbers."""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from functools import cache
from statistics import geometric_mean

from docs_text import missing, one, span

from kernel_lab.tests.results import ab_blocks, assert_results_say, path, result


#: ... and at v11's schedule line, which its v11 section quotes
SCHEDULE_V11 = "kernel_bench_h200_schedule_v11.json"


SCHEDULE_V16 = "kernel_bench_h200_schedule_v16.json"


SCHEDULE_V19 = "kernel_bench_h200_schedule_v19.json"


def ab_runs(name: str) -> list[dict]:
    """Each ``kernel_lab.tools.stage1_ab`` output block of results/``name``, parsed (``stage1_ab.parse``)."""
    from kernel_lab.tools.stage1_ab import parse

    return [parse(block) for block in ab_blocks(name)]


@contextmanager
def capped_everywhere():
    """The balanced schedule's partition as the schedule bench's runs and the overhead runs timed it: the piece cap
    ``schedule.MAX_PIECES`` at every batch (``schedule.max_pieces`` has since lifted it at B >= 16 where stage 2
    loads several partials together)."""
    from mla_edu.kernels import schedule as sc

    keep = sc.max_pieces
    sc.max_pieces = lambda batch, heads, parts: sc.MAX_PIECES
    try:
        yield
    finally:
        sc.max_pieces = keep


@cache
def bench_makespans(sms: int) -> tuple[tuple[int, list[int], float], ...]:
    """(h_q, lengths, modelled makespan) of each ragged problem of the schedule bench, in its order: the balanced
    schedule's slowest part in page-times, from the kernels' own arithmetic (``schedule.part_timeline``: computed
    once), capped as the bench ran (``capped_everywhere``)."""
    from mla_edu.kernels import schedule as sc
    from tools.schedule_bench import PAGE, problems

    with capped_everywhere():
        return tuple((h, lens, sc.part_timeline(lens, PAGE, h, sms)[1]) for _, h, lens in problems(uniform=False))


def makespan_line(run: dict, heads: int, key: str) -> tuple[float, float, float]:
    """(us a page-time, us besides, largest residual): a least-squares line through a schedule bench's ragged rows
    at ``heads``, time (``key``) against the balanced schedule's modelled makespan (``bench_makespans``)."""
    import statistics

    xs, ys = [], []
    for r, (h, lens, span_) in zip(run["ragged"], bench_makespans(run["info"]["sm_count"]), strict=True):
        assert (r["heads"], r["batch"], r["lens_max"]) == (h, len(lens), max(lens))
        if h == heads:
            xs.append(span_)
            ys.append(r[key])
    fit = statistics.linear_regression(xs, ys)
    return fit.slope, fit.intercept, max(abs(y - fit.intercept - fit.slope * x) for x, y in zip(xs, ys))


def pdl_numbers() -> tuple[dict, float, list[float]]:
    """seesaw_ab_h200_pdl.md's A/B (``stage1_ab.parse``: the kept stage 1's time over PDL's), its geomean,
    and its ratios with one split, where a call is one kernel (uniform B=64 and 128 at L=1024)."""
    (pdl,) = ab_runs("seesaw_ab_h200_pdl.md")
    one = [x for (shape, p, _), x in pdl.items() if p == "rule" and shape in ("u B64 1024", "u B128 1024")]
    return pdl, geometric_mean(pdl.values()), one


def pdl_claims() -> list[str]:
    """seesaw_ab_h200_pdl.md's prose under its A/B block, from that block."""
    pdl, geo, one = pdl_numbers()
    worst = min(pdl.items(), key=lambda kv: kv[1])
    assert worst[0][:2] == ("r B128 2048", "balanced")  # "the largest ragged batch on the balanced path"
    return [f"Over the {len(pdl)} timings x runs from {min(pdl.values()):.3f} to {max(pdl.values()):.3f}, geomean "
            f"{geo:.3f}",
            f"it gains {span([100 * (x - 1) for x in one], 1)}%; the largest ragged batch on the balanced path is "
            f"{100 * (1 - worst[1]):.0f}% slower"]


def test_the_pdl_results_quote_their_run():
    assert_results_say("seesaw_ab_h200_pdl.md", pdl_claims())


def out_tma_numbers() -> dict:
    """seesaw_ab_h200_out_tma.md's three A/B runs (``stage1_ab``: each version's time over "new"'s) and the
    times of the first: the one-split shapes, where the final rows are stored."""
    from kernel_lab.tools.stage1_ab import times

    first, staged, kept = ab_runs("seesaw_ab_h200_out_tma.md")
    us = times(ab_blocks("seesaw_ab_h200_out_tma.md")[0])  # us by (shape, path, version)
    one = ("u B64 1024", "u B64 4096", "u B128 1024")  # the rule's one split: final rows
    same = "u B16 1024"  # the rule's 4 splits: float32 partials, where out_tma and the kernel before run alike
    return dict(
        us=us, saved=[us[(s, "rule", "new")] - us[(s, "rule", "out_tma")] for s in one],
        one=[first[(s, "rule", "out_tma")] for s in one],
        rest=[x for (s, p, v), x in first.items() if v == "out_tma" and (s, p) not in {(o, "rule") for o in one}],
        noise=[run[(same, "rule", "out_tma")] for run in (first, staged, kept)],
        both=[x for (_, p, v), x in first.items() if v == "both"],
        both_rule=[x for (_, p, v), x in first.items() if v == "both" and p == "rule"],
        staged=staged, kept=kept,
        # runs 2 and 3 on the balanced path: the ragged batches, and uniform B=64, L=1024 (its parts end on whole
        # requests)
        ragged={k: [x for (s, p, _), x in run.items() if p == "balanced" and s.startswith("r")]
                for k, run in (("staged", staged), ("kept", kept))},
        uniform={k: run[("u B64 1024", "balanced", "out_tma")] for k, run in (("staged", staged), ("kept", kept))})


def out_tma_claims() -> list[str]:
    """seesaw_ab_h200_out_tma.md's prose under its A/B blocks, from those blocks."""
    n = out_tma_numbers()
    ragged, uni = n["ragged"], n["uniform"]
    return [f"with one split the call is {', '.join(f'{s:.1f}' for s in n['saved'][:-1])} and {n['saved'][-1]:.1f} "
            f"us faster", f"x {', '.join(f'{x:.3f}' for x in n['one'])}); everywhere else, where the output is "
            f"float32 partials, {span(n['rest'], 3)}", f"x reads {span(n['noise'], 3)} in all three runs",
            f"slower at every timing, {span(n['both'], 3)}x", f"is {span(n['both_rule'])}x slower",
            f"{uni['staged']:.3f} at uniform B=64, L=1024", f"but {span(ragged['staged'], 3)} on the ragged batches",
            f"{uni['kept']:.3f} at uniform B=64, L=1024, {span(ragged['kept'], 3)} on the ragged batches (geomean "
            f"{geometric_mean(ragged['kept']):.3f})"]


def test_the_out_tma_results_quote_their_runs():
    assert_results_say("seesaw_ab_h200_out_tma.md", out_tma_claims())


def pv0early_numbers() -> dict:
    """seesaw_ab_h200_pv0early.md's three A/B runs (``stage1_ab``: each version's time over "new"'s): the
    kept order against the kernel before (run 1), the orders tried on top of it (runs 2 and 3)."""
    first, *later = ab_runs("seesaw_ab_h200_pv0early.md")

    def of(run, name):
        return [x for (_, _, v), x in run.items() if v == name]

    on_top = {v: of(run, v) for run in later for v in {v for _, _, v in run}}
    return dict(kept=of(first, "pv0early"), stagger=of(first, "stagger"), both=of(first, "both"),
                late=of(first, "s1late"), on_top=on_top, kept_slower=[k for k, x in first.items()
                                                                      if k[2] == "pv0early" and x >= 1])


def pv0early_claims() -> list[str]:
    """seesaw_ab_h200_pv0early.md's prose under its A/B blocks, from those blocks."""
    n = pv0early_numbers()
    geo = [geometric_mean(x) for x in n["on_top"].values()]
    every = [x for xs in n["on_top"].values() for x in xs]
    assert {k[:2] for k in n["kept_slower"]} == {("u B64 4096", "rule"), ("u B16 1024", "balanced")}  # as named
    assert min(geo) > 0.99 and min(n["late"]) > 1  # "none gains 1%", "slower at every timing"
    return [f"faster at {len(n['kept']) - len(n['kept_slower'])} of the {len(n['kept'])} timings, x "
            f"{span(n['kept'], 3)}, geomean {geometric_mean(n['kept']):.3f}",
            f"(geomean {geometric_mean(n['stagger']):.3f}, {span(n['stagger'], 3)})",
            f"(**both**,\ngeomean {geometric_mean(n['both']):.3f})", f"slower at every timing, {span(n['late'], 3)}x",
            f"the {len(n['on_top'])} orders on top of pv0early move the geomean by {span(geo, 3)}x, single timings "
            f"{span(every, 3)}x"]


def test_the_pv0early_results_quote_their_runs():
    assert_results_say("seesaw_ab_h200_pv0early.md", pv0early_claims())


def overhead_model(lens: list[int], charged: int, costs: tuple[int, ...], line: tuple[float, float],
                   heads: int = 128) -> list[float]:
    """Modelled times (us) of the balanced path on ``lens`` (``heads``, the H200's 132 SMs) when the partition charges
    ``charged`` page-times a segment (``schedule.FIXED_OVERHEAD_PAGES``) and a segment really costs each of
    ``costs``: the slowest program of ``schedule.part_timeline`` (its pages, plus the cost per segment it walks) on
    ``line`` (us a page-time, us besides: v11's fit), on the partition these runs timed (``capped_everywhere``)."""
    import collections

    from mla_edu.kernels import schedule as sc
    from tools.schedule_bench import PAGE

    keep = sc.FIXED_OVERHEAD_PAGES
    try:
        sc.FIXED_OVERHEAD_PAGES = charged
        with capped_everywhere():
            bars, _ = sc.part_timeline(lens, PAGE, heads, 132, overhead=0)  # a program's clock: its pages alone
    finally:
        sc.FIXED_OVERHEAD_PAGES = keep
    pages, walked = collections.Counter(), collections.Counter()
    for _, end, slot, _ in bars:
        pages[slot] = max(pages[slot], end)
        walked[slot] += 1
    return [line[1] + line[0] * max(pages[p] + c * walked[p] for p in pages) for c in costs]


def overhead_runs(heads: int = 128) -> list[list[tuple]]:
    """schedule_overhead_h200.md's outputs at ``heads``: (batch, median, {setting: us}, {setting: x printed})
    per line; x is a setting's time over the other one's (at 128 heads 5 over 10 in the first run, 3, 2 or 4 over 5
    in the others; at 16, 3 or 8 over 5)."""
    blocks = path("schedule_overhead_h200.md").read_text(encoding="utf-8").split("```")[3::2]
    runs = []
    for block in blocks:
        rows = []
        for b, m, body in re.findall(rf"h{heads} B(\d+) (\d+): (.*) FM", block):
            us = {int(k): float(v) for k, v in re.findall(r"ov(\d+) ([\d.]+)", body)}
            x = {int(k): float(v) for k, v in re.findall(r"ov(\d+) [\d.]+ \(([\d.]+)x\)", body)}
            rows.append((int(b), int(m), us, x))
        if rows:  # (not the scripts' blocks)
            runs.append(rows)
    return runs


@cache
def overhead_models() -> dict:
    """``overhead_model``'s times for the overhead runs' six batches (in their order), charging 2, 3, 4, 5 or 10
    and a true cost of 1-10 page-times: ``{(charged, cost): [us per batch]}``."""
    from mla_edu.kernels import schedule as sc
    from tools.schedule_bench import SEED

    line = makespan_line(result(SCHEDULE_V11), 128, "balanced_us")[:2]
    model = {}
    for b, m, *_ in overhead_runs()[0]:
        lens = sc.lognormal_lengths(b, m, SEED)
        for charged in (2, 3, 4, 5, 10):
            for cost, t in zip(range(1, 11), overhead_model(lens, charged, tuple(range(1, 11)), line)):
                model.setdefault((charged, cost), []).append(t)
    return model


def test_the_overhead_results_quote_their_run():
    """schedule_overhead_h200.md's sentences under its first output, from that output and from the
    schedule's model on the same batches (``overhead_models``)."""
    text = path("schedule_overhead_h200.md").read_text(encoding="utf-8")
    first = overhead_runs()[0]
    # x from the unrounded times; the times printed to 0.1 us
    assert len(first) == 6 and all(abs(us[5] / us[10] - x[10]) < 2e-3 for _, _, us, x in first)
    x = [x[10] for *_, x in first]
    line = makespan_line(result(SCHEDULE_V11), 128, "balanced_us")[:2]
    model = overhead_models()
    ratio = {k: [a / b for a, b in zip(model[(5, k)], model[(10, k)])] for k in (5, 10)}
    three = {k: [a / b for a, b in zip(model[(3, k)], model[(5, k)])] for k in (2, 5)}
    claim = f"the time at 5 is {span(x, 3)}x the time at 10"
    claims = [claim, f"line ({line[0]:.2f} us a page-time plus {line[1]:.1f} us",
              f"a segment costs\n5 page-times, the model predicts {span(ratio[5])}x; if it costs 10, "
              f"{span(ratio[10])}x", f"at a true cost of 5 it predicts 3 slower at every batch ({span(three[5])}x "
              f"the time at 5), at a true cost of 2 {span(three[2])}x"]
    assert max(ratio[5]) < 1 < min(ratio[10]) and min(three[5]) > 1 >= max(three[2])  # what the sentences say
    lost = missing(claims, text)
    assert not lost and max(x) < 1, "schedule_overhead_h200.md does not say:\n" + "\n".join(lost)


def overhead_fit() -> dict:
    """The later overhead runs (3 and 2, then 4, against 5) and the true cost per segment whose modelled ratios fit
    all 18 measured ones best (least squares of the logarithms)."""
    _, low, four = overhead_runs()
    model = overhead_models()
    measured = {10: [1 / x[10] for *_, x in overhead_runs()[0]], 3: [x[3] for *_, x in low],
                2: [x[2] for *_, x in low], 4: [x[4] for *_, x in four]}
    assert all(abs(us[k] / us[5] - x[k]) < 2e-3 for run in (low, four) for *_, us, x in run for k in x)

    def rms(cost, settings=(10, 3, 2)):
        errs = [math.log(model[(k, cost)][i] / model[(5, cost)][i] / m) for k in settings
                for i, m in enumerate(measured[k])]
        return math.sqrt(sum(e * e for e in errs) / len(errs))

    best = min(range(1, 11), key=rms)
    return dict(measured=measured, best=best, rms=rms, four=[a / b for a, b in zip(model[(4, best)],
                                                                                   model[(5, best)])])


def test_the_later_overhead_runs_are_read_from_their_output():
    f = overhead_fit()
    m = f["measured"]
    slower4 = sum(x > 1 for x in m[4])
    claims = [f"3 is slower than 5 at every batch ({span(m[3], 3)}x the time at 5), 2 too ({span(m[2], 3)}x), and 4 "
              f"at {slower4} of the {len(m[4])}\n({span(m[4], 3)}x)",
              f"of the true costs 1-10 page-times a\nsegment, {f['best']} predicts the 18 measured ratios best "
              f"(root-mean-square error of their logarithms {f['rms'](f['best']):.3f}; 5: {f['rms'](5):.3f})",
              f"the model predicts charging {f['best']} at {span(f['four'], 3)}x the time at 5, where the timing found "
              f"{span(m[4], 3)}x"]
    assert min(m[3]) > 1 and min(m[2]) > 1 and min(m[4]) >= 1  # "no setting timed beat 5 at any batch"
    assert_results_say("schedule_overhead_h200.md", claims)


OV16_BATCHES = ((64, 1024), (128, 1024), (64, 2048), (128, 2048), (16, 1024), (16, 2048))  # ov16.py's order


@cache
def h16_models() -> dict:
    """``overhead_model`` at 16 heads on v11's 16-head line, for the h_q=16 timing's B=64 and 128 batches (where the
    prediction was made; not B=16's), charging 3, 5 or 8 and a true cost of 1-10 page-times:
    ``{(batch, median, charged): [us per true cost]}``."""
    from mla_edu.kernels import schedule as sc
    from tools.schedule_bench import SEED

    line = makespan_line(result(SCHEDULE_V11), 16, "balanced_us")[:2]
    return {(b, m, charged): overhead_model(sc.lognormal_lengths(b, m, SEED), charged, tuple(range(1, 11)), line,
                                            heads=16)
            for b, m in OV16_BATCHES if b != 16 for charged in (3, 5, 8)}


def h16_prediction() -> dict:
    """The model's time charging 3 over the time charging 5 on the ragged h_q=16 B=64 and 128 batches, per true
    cost of a segment (2, 3 or 5 page-times): the prediction made before the timing."""
    model = h16_models()
    return {cost: [model[(b, m, 3)][cost - 1] / model[(b, m, 5)][cost - 1] for b, m in OV16_BATCHES if b != 16]
            for cost in (2, 3, 5)}


def test_the_h16_prediction_is_the_models():
    """schedule_overhead_h200.md's prediction for h_q=16 (made before the timing), from the schedule's model
    on v11's line at 16 heads: charging 3 against 5 on the bench's ragged B=64 and 128 batches, at a true cost of 2,
    3 or 5."""
    line = makespan_line(result(SCHEDULE_V11), 16, "balanced_us")[:2]
    ratio = h16_prediction()
    low = ratio[2] + ratio[3]
    assert max(low) < 1 < min(ratio[5])  # what the sentence says: faster if the cost is low, slower at 5
    assert_results_say("schedule_overhead_h200.md", [
        f"v11's line at h_q=16 ({line[0]:.2f} us a page-time plus {line[1]:.2f} us",
        f"charging 3 takes {span(low, 3)}x the time at 5 if a segment really costs 2 or 3 page-times, and "
        f"{span(ratio[5], 3)}x if it costs 5"])


def ov16_claims() -> list[str]:
    """The h_q=16 timing's sentences (schedule_overhead_h200.md), from its output and
    the model: the measured ratios, the prediction's, the fit and what charging 3 would be worth."""
    (rows,) = overhead_runs(16)
    assert [(b, m) for b, m, *_ in rows] == list(OV16_BATCHES)
    # x from the unrounded times; the times printed to 0.1 us
    assert all(abs(us[k] / us[5] - x[k]) < 0.1 / us[5] + 5e-4 for *_, us, x in rows for k in (3, 8))
    model = h16_models()
    measured = {(b, m, k): x[k] for b, m, _, x in rows for k in (3, 8)}
    fitted = {key: x for key, x in measured.items() if key[0] != 16}  # the batches the model was run on

    def rms(cost):
        errs = [math.log(model[(b, m, k)][cost - 1] / model[(b, m, 5)][cost - 1] / x)
                for (b, m, k), x in fitted.items()]
        return math.sqrt(sum(e * e for e in errs) / len(errs))

    best = min(range(1, 11), key=rms)
    big3 = [x[3] for b, _, _, x in rows if b != 16]
    small3 = [x[3] for b, _, _, x in rows if b == 16]
    eight = [x[8] for *_, x in rows]
    predicted = [abs(1 - r) for rs in h16_prediction().values() for r in rs]
    ragged = math.exp(sum(math.log(x[3]) for *_, x in rows) / 12)  # the other six batches (h_q=128) unchanged
    assert max(big3) < 1 and max(abs(1 - x) for x in measured.values()) < min(predicted[:4] + predicted[-4:]) * 1.2
    h128 = overhead_fit()
    return [f"3 against 5: {span(big3, 3)}x the time at 5 on the B=64 and 128 batches, {small3[0]:.3f}x and "
            f"{small3[1]:.3f}x at B=16; 8 against 5: {span(eight, 3)}x",
            f"no time moved by more than {100 * max(abs(1 - x) for x in measured.values()):.1f}%, where the model's "
            f"predictions moved it by {span([100 * p for p in predicted], 1)}%",
            f"Fitted over the {len(fitted)} ratios at B=64 and 128, no true cost fits well (root-mean-square error of "
            f"the logarithms at least {rms(best):.3f}, at {best} page-times; 3: {rms(3):.3f}; 5: {rms(5):.3f}), "
            f"against {h128['rms'](h128['best']):.3f} at h_q=128",
            f"Charging 3 would take {span([100 * (1 - x) for x in big3], 1)}% off the B=64 and 128 batches, and "
            f"{100 * (1 - ragged):.1f}% off the ragged geomean"]


def test_the_h16_overhead_run_is_read_from_its_output():
    assert_results_say("schedule_overhead_h200.md", ov16_claims())


def ab_numbers(name: str) -> dict:
    """The A/B runs of results/``name`` (``stage1_ab``: each version's time over "new"'s), numbered from 1:
    ``{(run, version, path): [x]}``, path "all", "rule", "balanced" or "ragged rule"."""
    out = {}
    for i, run in enumerate(ab_runs(name), 1):
        for (shape, on, version), x in run.items():
            out.setdefault((i, version, "all"), []).append(x)
            out.setdefault((i, version, on), []).append(x)
            if on == "rule" and shape.startswith("r "):
                out.setdefault((i, version, "ragged rule"), []).append(x)
    return out


def w1left_numbers() -> dict:
    """seesaw_ab_h200_w1left.md's two A/B runs: w1left against v13's kernel (run 1); v13 and w0right against
    w1left, kept (run 2)."""
    return ab_numbers("seesaw_ab_h200_w1left.md")


def w1left_claims() -> list[str]:
    """seesaw_ab_h200_w1left.md's prose under its A/B blocks, from those blocks."""
    n = w1left_numbers()
    kept, v13, right = n[1, "w1left", "all"], n[2, "v13", "all"], n[2, "w0right", "all"]
    assert all(abs(x - 1) < 0.01 for k in ((1, "w1left"), (2, "v13")) for x in n[(*k, "ragged rule")])  # "within 1%"
    assert min(n[2, "v13", "balanced"]) > 1  # "at all 9"
    return [f"faster at {sum(x < 1 for x in kept)} of the {len(kept)} timings, x {span(kept, 3)}, geomean "
            f"{geometric_mean(kept):.3f}; on the balanced path {span(n[1, 'w1left', 'balanced'], 3)} (geomean "
            f"{geometric_mean(n[1, 'w1left', 'balanced']):.3f})",
            f"slower at {sum(x > 1 for x in v13)} of {len(v13)}, x {span(v13, 3)}, geomean {geometric_mean(v13):.3f}; "
            f"on the balanced path at all {len(n[2, 'v13', 'balanced'])}, {span(n[2, 'v13', 'balanced'], 3)}",
            f"slower at {sum(x > 1 for x in right)} of the {len(right)} timings, x {span(right, 3)}, geomean "
            f"{geometric_mean(right):.3f}"]


def test_the_w1left_results_quote_their_runs():
    assert_results_say("seesaw_ab_h200_w1left.md", w1left_claims())


def stall_numbers(version: str) -> dict:
    """kernel_stalls_h200_{version}_sass.csv.gz read: FlashMLA's samples on the seesaw's scale (seesaw = 100),
    each reason on that scale for both kernels, and the seesaw's waits this project's notes name."""
    from kernel_lab.tools.stall_summary import ALL, kernels, read, samples, short_name, totals

    tables = {short_name(name): rows for name, rows in
              kernels(read(str(path(f"kernel_stalls_h200_{version}_sass.csv.gz"))))}
    rows = tables["stage1_seesaw_kernel"]
    mine, peer = totals(rows), totals(tables["flash_fwd_splitkv_mla_kernel"])
    unit = mine[ALL] / 100

    def wait_on(index: int) -> int:
        """Long-scoreboard samples on the branch of the try-wait loop on mbarrier ``index`` (at the base
        0x386e0 + 8 i; where it has several, the largest)."""
        addr = f"0x{0x386e0 + 8 * index:x}"
        return max(int(samples(rows[i + 1], "stall_long_sb")) for i, r in enumerate(rows)
                   if "TRYWAIT" in r["Source"] and addr in r["Source"])

    long_sites = sorted(range(len(rows)), key=lambda i: -samples(rows[i], "stall_long_sb"))
    # the second largest long-scoreboard site: a branch whose nearest try-wait above it is on P1_READY (7)
    second = long_sites[1]
    above = next(rows[i]["Source"] for i in range(second - 1, -1, -1) if "TRYWAIT" in rows[i]["Source"])
    assert "BRA" in rows[second]["Source"] and f"0x{0x386e0 + 8 * 7:x}" in above
    return dict(fm=peer[ALL] / unit, reason={c: (mine[c] / unit, peer[c] / unit) for c in mine if c != ALL},
                total=mine[ALL], top_barrier_src=max(rows, key=lambda r: samples(r, "stall_barrier"))["Source"],
                top_long=int(samples(rows[long_sites[0]], "stall_long_sb")),
                top_long_src=rows[long_sites[0] - 1]["Source"],
                p1=int(samples(rows[second], "stall_long_sb")), wait_on=wait_on,
                barrier=sorted((int(samples(r, "stall_barrier")) for r in rows), reverse=True))


def stall_claims() -> list[str]:
    """kernel_stalls_h200_v14.md's reading, from its two sampling files."""
    v13, v14 = stall_numbers("v13"), stall_numbers("v14")
    assert "0x386f8" in v13["top_long_src"] and "0x386e8" in v14["top_long_src"]  # RIGHT1, then LEFT1 (our reading)
    assert v13["top_long"] == v13["wait_on"](3) and v14["top_long"] == v14["wait_on"](1)

    def pair(n, c):
        return f"{n['reason'][c][0]:.1f} against {n['reason'][c][1]:.1f}"

    return [f"FlashMLA's kernel took {v13['fm']:.1f}", f"on +0x18, RIGHT1 ({v13['top_long']:,} samples)",
            f"(+0x28,\nSCALE1: {v13['wait_on'](5)}) and for P1 ({v13['p1']})",
            f"now on +0x08, LEFT1, took {v14['top_long']} samples;\nwarpgroup 0's for m1 {v14['wait_on'](5)} and for "
            f"P1 {v14['p1']}", f"FlashMLA's kernel takes {v14['fm']:.1f} on the common scale",
            f"operand {pair(v14, 'stall_long_sb')} (v13: {pair(v13, 'stall_long_sb')}), at a barrier "
            f"{pair(v14, 'stall_barrier')}, on a fixed latency {pair(v14, 'stall_wait')}, issuing "
            f"{pair(v14, 'stall_selected')}",
            f"warpgroup 1's P1 V1_right ({v14['barrier'][0]} samples)\nand warpgroup 0's P1 V1_left "
            f"({v14['barrier'][1]})"]


def test_the_stall_reading_is_the_samples():
    assert_results_say("kernel_stalls_h200_v14.md", stall_claims())


def qfirst_numbers() -> dict:
    """seesaw_ab_h200_qfirst.md's three A/B runs: qsplit and qfirst against v14 (run 1); v14 ("v14cur") and
    qsplit against qfirst, kept (run 2); qlr and the file runs 1 and 2 timed against qfirst as committed (run 3)."""
    return ab_numbers("seesaw_ab_h200_qfirst.md")


def qfirst_claims() -> list[str]:
    """seesaw_ab_h200_qfirst.md's reading, from its three runs."""
    n = qfirst_numbers()
    kept, v14 = n[1, "qfirst", "all"], n[2, "v14cur", "all"]
    return [f"qfirst against v14 (run 1) is faster at {sum(x < 1 for x in kept)} of the {len(kept)} timings, x "
            f"{span(kept, 3)}, geomean {geometric_mean(kept):.3f}; v14 against qfirst (run 2) is slower at "
            f"{sum(x > 1 for x in v14)} of the {len(v14)}, geomean {geometric_mean(v14):.3f}",
            f"qsplit against v14: geomean {geometric_mean(n[1, 'qsplit', 'all']):.3f} (run 1); against qfirst: "
            f"{geometric_mean(n[2, 'qsplit', 'all']):.3f} (run 2)",
            f"qlr against qfirst: {geometric_mean(n[3, 'qlr', 'all']):.3f} (run 3)",
            f"against the kernel as committed: {geometric_mean(n[3, 'qfirst', 'all']):.3f}"]


def test_the_qfirst_results_quote_their_runs():
    assert_results_say("seesaw_ab_h200_qfirst.md", qfirst_claims())


STAGE2_NOW, STAGE2_FEW_REGS, STAGE2_ONE_PARTIAL, STAGE2_WALK = "[16,4,128]w4", "[16,2,128]w8", "[8,1,512]w4", \
    "[16,4,128]w4p3"


def stage2_runs() -> list[dict]:
    """stage2_ab_h200.md's runs (``kernel_lab.tools.stage2_ab``): per run ``{"regs": {config: registers}, "chosen":
    {problem: the config stage2_config chose} (run 3 on; else empty),
    "rows": {problem: {config: (stage 2 us, whole call us)}}}``, a problem as printed ("r h128 B64 1024")."""
    runs = []
    for block in re.findall(r"```\n(FlashMLA.*?)```", path("stage2_ab_h200.md").read_text(encoding="utf-8"),
                            re.S):
        cfg = r"\[[\d,]+\]w\d+(?:p\d+)?"
        regs = {c: int(k) for c, k in re.findall(rf"^({cfg}): (\d+) registers", block, re.M)}
        rows = {prob: {c: (float(a), float(w)) for c, a, w in re.findall(rf"({cfg}) ([\d.]+) / ([\d.]+)", body)}
                for prob, body in re.findall(r"^([ur] h\d+ B\d+ \d+) parts\d+ cut\d+: stage 2 / whole us (.*) FlashMLA",
                                             block, re.M)}
        assert len(rows) == 16 and all(len(r) == len(regs) for r in rows.values())
        chosen = dict(re.findall(rf"^([ur] h\d+ B\d+ \d+) parts.* chosen ({cfg})$", block, re.M))
        assert not chosen or sorted(chosen) == sorted(rows)
        runs.append(dict(regs=regs, rows=rows, chosen=chosen))
    return runs


def stage2_numbers() -> dict:
    """What stage2_ab_h200.md's reading takes from its first two runs: registers,
    stage 2's time saved (us) by some configs at some problems, and each problem's fastest config's saving
    (fractions)."""
    runs = stage2_runs()[:2]
    regs = runs[0]["regs"]

    def saved(cfg, pick):
        return [r["rows"][p][STAGE2_NOW][0] - r["rows"][p][cfg][0] for r in runs for p in r["rows"] if pick(p)
                and cfg in r["rows"][p]]

    walk_pick = ("r h128 B64 ", "r h128 B128 ")
    out = dict(regs=regs, per_sm=65536 // (-(-regs[STAGE2_NOW] // 8) * 8 * 128),  # 8 registers at a time, 128 threads
               few=saved(STAGE2_FEW_REGS, lambda p: p.startswith("r h16 B64 ")),
               one=saved(STAGE2_ONE_PARTIAL, lambda p: p.startswith("r h128 B128 ")),
               slow=[r["rows"][p][STAGE2_ONE_PARTIAL][0] / r["rows"][p][STAGE2_NOW][0] for r in runs
                     for p in r["rows"] if " B16 " in p],
               walk=saved(STAGE2_WALK, lambda p: p.startswith(walk_pick)),
               walk_else=saved(STAGE2_WALK, lambda p: not p.startswith(walk_pick)),
               best=[1 - min(w for _, w in row.values()) / row[STAGE2_NOW][1] for r in runs
                     for row in r["rows"].values()])
    assert min(out["walk"]) > 0 and all(r["regs"][STAGE2_NOW] == regs[STAGE2_NOW] for r in runs)
    return out


def stage2_claims() -> list[str]:
    """stage2_ab_h200.md's reading, from its two runs."""
    n = stage2_numbers()
    regs = n["regs"]
    return [f"holds {regs[STAGE2_NOW]} registers a thread on this machine's compiler, so {n['per_sm']} of its "
            f"programs fit an SM",
            f"at 8 warps ({regs[STAGE2_FEW_REGS]} registers) takes {span(n['few'], 1)} us off stage 2 at h_q=16, B=64",
            f"at 4 warps ({regs[STAGE2_ONE_PARTIAL]} registers) takes {span(n['one'], 1)} us off at h_q=128, B=128, "
            f"and makes stage 2 {span(n['slow'], 1)}x as long at B=16",
            f"Each problem's fastest config would take {span([100 * b for b in n['best']], 1)}% off the whole call"]


def test_the_stage2_results_quote_their_runs():
    assert_results_say("stage2_ab_h200.md", stage2_claims())


def stage2_choice_numbers() -> dict:
    """stage2_ab_h200.md's run 3, which prints the config ``stage2_config`` chose per problem: stage 2's
    time over the fastest config's (us, as printed) per problem, and against the old config ([16, 4, 128] at 4
    warps) stage 2's time saved (us) and the whole call's (fraction)."""
    run = stage2_runs()[2]
    rows, chosen = run["rows"], run["chosen"]
    over = {p: round(rows[p][c][0] - min(a for a, _ in rows[p].values()), 1) for p, c in chosen.items()}
    saved = {p: round(rows[p][STAGE2_NOW][0] - rows[p][c][0], 1) for p, c in chosen.items()}
    whole = {p: 1 - rows[p][c][1] / rows[p][STAGE2_NOW][1] for p, c in chosen.items()}
    return dict(over=over, saved=saved, whole=whole)


def stage2_choice_claims() -> list[str]:
    """stage2_ab_h200.md's reading of run 3."""
    n = stage2_choice_numbers()
    off = {p: v for p, v in n["over"].items() if v > 0.1}
    assert sorted(off) == ["r h128 B64 2048", "u h16 B128 1024"]  # as the reading names them
    assert n["saved"]["r h128 B64 2048"] == 0  # "as fast as the old config"
    return [f"the chosen config's stage 2 is the fastest, or within its printed 0.1 us, at {16 - len(off)} of the 16 "
            f"problems",
            f"it is {off['r h128 B64 2048']:.1f} us slower than [16, 2, 128] at 8 warps and as fast as the old config",
            f"{off['u h16 B128 1024']:.1f} us slower than the fastest and {-n['saved']['u h16 B128 1024']:.1f} us "
            f"slower than the old config",
            f"Against the old config the whole call, timed separately, is {slower_to_faster(n['whole'])}"]


def slower_to_faster(saved: dict) -> str:
    """'a% slower to b% faster' of the fractions of a call's time ``saved`` (negative: slower), as
    stage2_ab_h200.md writes them."""
    lo, hi = min(saved.values()), max(saved.values())
    assert lo < 0 < hi
    return f"{-100 * lo:.1f}% slower to {100 * hi:.1f}% faster"


def test_the_stage2_choice_run_is_read_right():
    assert_results_say("stage2_ab_h200.md", stage2_choice_claims())


def uniform_row(run: dict, batch: int, length: int) -> dict:
    """The uniform h_q=128 row of a schedule bench's run at B=``batch``, L=``length``."""
    return one_of([r for r in run["uniform"] if r["heads"] == 128 and (r["batch"], r["lens_max"]) == (batch, length)])


def one_of(rows: list[dict]) -> dict:
    assert len(rows) == 1, f"expected one row, got {len(rows)}"
    return rows[0]


def uniform_1024(shape: str) -> bool:
    """Whether a ``stage1_ab`` shape ("u B64 1024") is a uniform one at L=1024."""
    return shape.startswith("u ") and shape.endswith(" 1024")


def rule(run: dict, version: str, pick) -> list[float]:
    """A ``stage1_ab`` run's ratios of ``version`` on the split rule's path at the shapes ``pick(shape)`` keeps."""
    return [x for (shape, path, v), x in run.items() if path == "rule" and v == version and pick(shape)]


def prefetch_numbers() -> dict:
    """seesaw_ab_h200_prefetch.md's two A/B runs (pf_w0 and pf2 against pf_w1, v15 too, run 1; pf_w0,
    pf_first and pf_start against v15, run 2), and run 2's times at uniform B=64, L=1024 (us)."""
    n = ab_numbers("seesaw_ab_h200_prefetch.md")
    block = ab_blocks("seesaw_ab_h200_prefetch.md")[1]
    line = one(r"u B64 1024 h128 rule1 .*", block).group(0)
    t = {v: float(one(rf" {v} ([\d.]+)", line.split("balanced:")[0]).group(1)) for v in ("pf_w0", "new")}
    t["FlashMLA"] = float(one(r"FlashMLA ([\d.]+)", line).group(1))
    return dict(n=n, runs=ab_runs("seesaw_ab_h200_prefetch.md"), t=t)


def prefetch_claims() -> list[str]:
    """seesaw_ab_h200_prefetch.md's reading under its A/B blocks."""
    p = prefetch_numbers()
    n, (_, run2), t = p["n"], p["runs"], p["t"]
    v15 = n[1, "v15", "rule"]
    bal = [geometric_mean(x) for (_, v, path), x in n.items() if path == "balanced"]
    assert all(x < 1 for x in v15)
    return [f"geomean {span(bal, 3)} there",
            f"faster than pf_w1 at all {len(v15)} timings, x {span(v15, 3)}, geomean {geometric_mean(v15):.3f} (run 1)",
            f"pf_w0 against pf_w1: {geometric_mean(n[1, 'pf_w0', 'rule']):.3f}; pf2 against pf_w1: "
            f"{geometric_mean(n[1, 'pf2', 'rule']):.3f}",
            f"three uniform L=1024 shapes (x {span(rule(run2, 'pf_w0', uniform_1024), 3)}) and slower at B=64, L=4096 "
            f"({rule(run2, 'pf_w0', lambda s: s == 'u B64 4096')[0]:.3f}) and at the five ragged batches "
            f"({span(rule(run2, 'pf_w0', lambda s: s[0] == 'r'), 3)}), geomean "
            f"{geometric_mean(n[2, 'pf_w0', 'rule']):.3f}",
            f"(pf_first) {span(rule(run2, 'pf_first', lambda s: s in ('u B64 1024', 'u B128 1024')), 3)} at B=64 and "
            f"128, L=1024, {rule(run2, 'pf_first', lambda s: s == 'u B64 4096')[0]:.3f} at B=64, L=4096, geomean "
            f"{geometric_mean(n[2, 'pf_first', 'rule']):.3f}; pf_start {geometric_mean(n[2, 'pf_start', 'rule']):.3f}",
            f"it takes B=64 from {t['FlashMLA'] / t['new']:.3f}x to {t['FlashMLA'] / t['pf_w0']:.3f}x FlashMLA"]


def test_the_prefetch_ab_is_read_right():
    assert_results_say("seesaw_ab_h200_prefetch.md", prefetch_claims())


def v17_numbers() -> dict:
    """seesaw_ab_h200_v17.md's three A/B runs, by what they time: v16 against s0_ahead_whole (run 1), against
    fm_order (run 2) and against own_barriers (run 3); fm_order's two variants against it (run 2); and v12's
    s0_ahead against its kept kernel, which both files quote again."""
    n = ab_numbers("seesaw_ab_h200_v17.md")
    v = dict(s0=n[1, "v16", "all"], fm=n[2, "v16", "all"], own=n[3, "v16", "all"], left=n[2, "fmorder_l", "all"],
             both=n[2, "fmorder_s0", "all"], v12=span(out_tma_numbers()["both"]))
    assert min(v["left"] + v["both"]) > 1  # "fm_order is faster than both its variants at every timing"
    assert max(abs(x - 1) for x in v["own"]) < 0.04  # "within one run's noise"
    assert max(v["s0"]) < 1  # "faster at all"
    return v


def test_the_v17_ab_is_read_right():
    v = v17_numbers()
    s0, fm, own, left, both = (v[k] for k in ("s0", "fm", "own", "left", "both"))
    assert_results_say("seesaw_ab_h200_v17.md", [
        f"v16 is faster at all {len(s0)} timings, x {span(s0, 3)}, geomean {geometric_mean(s0):.3f} (run 1)",
        f"v16 is faster at {sum(x < 1 for x in fm)} of {len(fm)}, geomean {geometric_mean(fm):.3f} (run 2)",
        f"(fmorder_l geomean {geometric_mean(left):.3f}, fmorder_s0 {geometric_mean(both):.3f})",
        f"v16 against it x {span(own, 3)}, geomean {geometric_mean(own):.3f} (run 3)",
        f"found it {v['v12']}x slower", f"the likely cause of its {v['v12']}x"])


def back_to_back_runs(flush: bool = False) -> list[dict]:
    """back_to_back_h200.md's runs (``kernel_lab.tools.back_to_back.parse``), in order: with a one-element kernel
    between calls, or (``flush``) 256 MB written."""
    from kernel_lab.tools.back_to_back import parse

    return [parse(run) for block in ab_blocks("back_to_back_h200.md") for run in re.split(r"run \d+\n", block)
            if "separator alone" in run and ("256 MB written" in run) == flush]


def b2b_shapes() -> tuple[str, ...]:
    """``kernel_lab.tools.back_to_back``'s problems as its output names them ("u B64 1024"), in its order."""
    from kernel_lab.tools.back_to_back import PROBLEMS

    return tuple(f"u B{b} {length}" for b, length in PROBLEMS)


def back_to_back_flush_numbers() -> tuple[dict, dict, dict]:
    """Per shape of back_to_back_h200.md's two runs with the L2 flushed between calls: FlashMLA's time over
    mla_edu's, each less the flush's own time; the same back to back; and how much more the flush cost FlashMLA
    (us, as printed; L=1024 only)."""
    runs = back_to_back_runs(flush=True)
    assert len(runs) == 2
    shapes = b2b_shapes()
    apart = {s: [(r[s, "FlashMLA"][1] - r["separator"]) / (r[s, "mla_edu"][1] - r["separator"]) for r in runs]
             for s in shapes}
    b2b = {s: [r[s, "FlashMLA"][0] / r[s, "mla_edu"][0] for r in runs] for s in shapes}
    extra = {s: [r[s, "FlashMLA"][2] - r[s, "mla_edu"][2] for r in runs] for s in shapes[:2]}
    return apart, b2b, extra


def back_to_back_flush_claims() -> list[str]:
    """The reading of back_to_back_h200.md's runs with the L2 flushed between calls."""
    apart, b2b, extra = back_to_back_flush_numbers()
    shapes = b2b_shapes()
    return [f"FlashMLA's time over mla_edu's is {span(apart[shapes[0]])}x at B=64, L=1024, "
            f"{span(apart[shapes[1]])}x at B=128, L=1024, and {span(apart[shapes[2]])}x at B=64, L=4096; back to back "
            f"in these runs "
            f"{span(b2b[shapes[0]])}x, {span(b2b[shapes[1]])}x and {span(b2b[shapes[2]])}x",
            f"at L=1024 by {span(extra[shapes[0]], 1)} us at B=64 and by {span(extra[shapes[1]], 1)} us at B=128"]


def back_to_back_claims() -> list[str]:
    """back_to_back_h200.md's reading (and docs/kernel_essay.md's), from its three runs."""
    runs = back_to_back_runs()
    assert len(runs) == 3

    def diffs(shape, name):
        return [r[shape, name][2] for r in runs]

    def ratios(shape, way):  # FlashMLA's time over mla_edu's: way 0 back to back, 1 apart
        return [r[shape, "FlashMLA"][way] / r[shape, "mla_edu"][way] for r in runs]

    def pm(values):
        return f"{min(values):+.1f} to {max(values):+.1f}"

    u64, u128, l4096 = b2b_shapes()
    assert max(ratios(u64, 1)) < 0.9  # "still below 0.9x apart"
    return [f"mla_edu {pm(diffs(u64, 'mla_edu'))} us, FlashMLA {pm(diffs(u64, 'FlashMLA'))} us",
            f"Apart, FlashMLA's time is {span(ratios(u64, 1), 3)}x mla_edu's, as back to back "
            f"({span(ratios(u64, 0), 3)}x)",
            f"({pm(diffs(u128, 'FlashMLA'))} us against {pm(diffs(u128, 'mla_edu'))})",
            f"the runs disagree ({pm(diffs(l4096, 'FlashMLA'))} us)"]


def test_the_back_to_back_reading_is_its_runs():
    assert_results_say("back_to_back_h200.md", back_to_back_claims() + back_to_back_flush_claims())


def stall_v17_claims() -> list[str]:
    """kernel_stalls_h200_v17.md's reading (and docs/kernel_essay.md's), from its sampling file."""
    n = stall_numbers("v17")
    assert "0x386e8" in n["top_long_src"] and n["top_long"] == n["wait_on"](1)  # LEFT1 (our reading)
    assert "USETMAXREG.DEALLOC" in n["top_barrier_src"]

    def pair(c):
        return f"{n['reason'][c][0]:.1f} against {n['reason'][c][1]:.1f}"

    return [f"FlashMLA's kernel takes {n['fm']:.1f} here",
            f"LEFT1: {n['top_long']} samples, {n['top_long'] / n['total'] * 100:.1f}% of all the seesaw's",
            f"warpgroup 0 waits for P1 ({n['p1']}) and for m1 (+0x28, SCALE1: {n['wait_on'](5)})",
            f"q's left half at a segment's start takes {n['wait_on'](8)} (+0x40, Q_LEFT)",
            f"a long-scoreboard operand {pair('stall_long_sb')}, a barrier {pair('stall_barrier')}, a fixed latency "
            f"{pair('stall_wait')}, issuing {pair('stall_selected')}",
            f"largest site ({n['barrier'][0]} samples) is `USETMAXREG.DEALLOC`"]


def test_the_v17_stall_reading_is_the_samples():
    assert_results_say("kernel_stalls_h200_v17.md", stall_v17_claims())


ONE_SPLIT = ("u B64 1024", "u B64 4096", "u B128 1024")  # the A/B shapes the rule runs with one split


def v18_numbers() -> dict:
    """seesaw_ab_h200_v18.md: its three PDL A/B runs (``x`` of the kept kernel "head" and "exit_trigger"
    at the one-split timings, where the variants differ, and at every other timing, where they run the same code),
    the evict_first timings (``tools.l2_policy_ab``'s lines) and the two-requests-a-program timings."""
    from kernel_lab.tools.stage1_ab import parse

    # three A/B runs, tools.l2_policy_ab's, a script, its output, two A/A runs, two of p1_first
    blocks = ab_blocks("seesaw_ab_h200_v18.md")
    parsed = [parse(block) for block in blocks]
    assert len(parsed) == 10 and all(parsed[:3] + parsed[6:]) and not any(parsed[3:6])
    runs, same, p1 = parsed[:3], parsed[6:8], parsed[8:]

    def xs(version, one_split: bool, only=None):  # only: one (shape, path)
        return [x for run in runs for (shape, path, v), x in run.items() if v == version
                and (path == "rule" and shape in ONE_SPLIT) == one_split and only in (None, (shape, path))]

    l2 = {}
    for line in re.findall(r"^[ur] B\d+ \d+ .*$", blocks[3], re.M):
        shape = " ".join(line.split()[:3])
        pattern = r"(plain|evict_first|FlashMLA) ([\d.]+) / ([\d.]+)"
        l2[shape] = {n: (float(a), float(b)) for n, a, b in re.findall(pattern, line.split("x FM")[0])}
        assert line.endswith("same=True"), line
    chain = {shape: {k: float(x) for k, x in re.findall(r"(\w+) ([\d.e+-]+)", row)}
             for shape, row in re.findall(r"^(B\d+ L\d+) (.*)$", blocks[5], re.M)}
    by_rule = {v: {shape: [run[shape, "rule", v] for run in runs if (shape, "rule", v) in run] for shape in ONE_SPLIT}
               for v in ("head", "exit_trigger")}
    return dict(pdl=xs("head", True), exit=xs("exit_trigger", True), same_head=xs("head", False),
                same_exit=xs("exit_trigger", False), b16=xs("head", False, ("u B16 1024", "rule")), by_rule=by_rule,
                hint=[v["evict_first"][0] / v["plain"][0] for v in l2.values()], chain=chain,
                aa=[x for run in same for k, x in run.items() if k[2] == "aa"],
                aa_b16=[run["u B16 1024", "rule", v] for run in same for v in ("aa", "same")],
                same=[x for run in same for k, x in run.items() if k[2] == "same"],
                p1=[x for run in p1 for k, x in run.items() if k[2] == "head2"],
                p1_one=[run[shape, "rule", "head2"] for run in p1 for shape in ONE_SPLIT],
                p1_aa=[x for run in p1 for k, x in run.items() if k[2] == "aa"])


def steady_tile_numbers(name: str = SCHEDULE_V16) -> dict:
    """A schedule bench's run (v16's unless named) between L=1024 and 4096 at uniform h_q=128, B=64: what a 64-token
    tile adds to each program's time (ours: one request a program, 2 * B = 128 programs; FlashMLA: the batch's tiles
    over its 132 CTAs), each as a share of the run's matmul rate (2 * 64 heads * 64 tokens * (576 + 512) flops a
    tile), and what is left at L=1024 on that line (``fixed``, ``fm_fixed``)."""
    run = result(name)
    a, b = uniform_row(run, 64, 1024), uniform_row(run, 64, 4096)
    sms, tiles = run["info"]["sm_count"], (4096 - 1024) // 64
    ours = (b["rule_us"] - a["rule_us"]) / tiles
    fm = (b["flashmla_us"] - a["flashmla_us"]) / (2 * 64 * tiles / sms)
    flops, ceiling = 2 * 64 * 64 * (576 + 512), run["ceilings"]["matmul_bf16_TFLOPs"] * 1e12
    return dict(ours=ours, fm=fm, ours_rate=flops * 2 * 64 / (ours * 1e-6) / ceiling,
                fm_rate=flops * sms / (fm * 1e-6) / ceiling, fixed=a["rule_us"] - 1024 // 64 * ours,
                fm_fixed=a["flashmla_us"] - 2 * 64 * (1024 // 64) / sms * fm)


def stale_max_table() -> tuple[dict, dict]:
    """stale_max_error_cpu.md's tables (``tests/test_stale_max_error.py`` checks them against a fresh run):
    ``{(P dtype, threshold): (rms, x threshold 0, max)}`` and ``{offset: (rms, x offset 0)}``."""
    text = path("stale_max_error_cpu.md").read_text(encoding="utf-8")
    num = r"([\d.]+(?:e[+-]\d+)?)"
    errs = {(dt, float(th)): tuple(map(float, rest)) for dt, th, *rest in
            re.findall(rf"^\| (\w+) \| {num} \| {num} \| {num} \| {num} \|$", text, re.M)}
    offs = {float(off): tuple(map(float, rest)) for off, *rest in
            re.findall(rf"^\| {num} \| {num} \| {num} \|$", text, re.M)}
    return errs, offs


def v19_numbers() -> dict:
    """seesaw_ab_h200_v19.md's four A/B runs (the variants against v18's kernel, then v18's against the kept
    one), stale_max_error_cpu.md's table, and the v19 bench run against v16's."""
    from tools.schedule_bench import summary

    runs = ab_runs("seesaw_ab_h200_v19.md")
    assert len(runs) == 4 and all(runs)

    def pick(which, version, path=None, shapes=None):
        return [x for i in which for (shape, p, v), x in runs[i].items()
                if v == version and path in (None, p) and (shapes is None or shape in shapes)]

    errs, offs = stale_max_table()
    assert len(errs) == 15 and len(offs) == 5  # 3 P dtypes x 5 thresholds; 5 offsets
    run, v16 = result(SCHEDULE_V19), result(SCHEDULE_V16)
    s, s16 = summary(run), summary(v16)
    return dict(
        bound_rule=pick([0], "no_rescale", "rule"), bound_bal=pick([0], "no_rescale", "balanced"),
        cond=pick([0], "cond_rescale"), warp_rule=pick([1, 2], "warp_rescale", "rule"),
        warp_bal=pick([1, 2], "warp_rescale", "balanced"), warp=pick([1, 2], "warp_rescale"),
        warp_b16=pick([1, 2], "warp_rescale", "rule", ("u B16 1024",)),
        aa_b16=pick([1, 2], "aa", "rule", ("u B16 1024",)),
        warp_one=pick([1, 2], "warp_rescale", "rule", ONE_SPLIT),
        v18_rule=pick([3], "v18", "rule"), v18_bal=pick([3], "v18", "balanced"), aa4=pick([3], "aa"),
        bf16=errs["bfloat16", 8.0][1], fp16=errs["float16", 8.0][1],
        exact=max(max(v[0], v[2]) for (dt, _), v in errs.items() if dt == "float64"),
        off3=offs[3.0][1], off025=offs[0.25][1],
        err=s["max_rel_err"], err16=s16["max_rel_err"], s=s, run=run, v16=v16,
        tile=steady_tile_numbers(SCHEDULE_V19), tile16=steady_tile_numbers())


def test_the_v19_runs_are_read_right():
    v = v19_numbers()
    assert max(v["bound_rule"] + v["bound_bal"]) < 1  # leaving the multiplies out is faster everywhere
    assert max(v["warp"]) < 1 and min(v["v18_rule"] + v["v18_bal"]) > 1  # kept: faster at every timing, twice
    assert max(v["aa_b16"]) < 0.98 and min(v["warp_b16"]) > max(v["aa_b16"])  # B=16's first-timed copy, as in v18
    assert v["exact"] < 1e-13 and v["bf16"] > 1.3 and v["off3"] < 1.01
    assert v["tile"]["ours"] < v["tile16"]["ours"]
    assert_results_say("seesaw_ab_h200_v19.md", [
        f"saves {100 * (1 - max(v['bound_rule'])):.1f}-{100 * (1 - min(v['bound_rule'])):.1f}% on the\nrule's "
        f"path and {100 * (1 - max(v['bound_bal'])):.1f}-{100 * (1 - min(v['bound_bal'])):.1f}% on the balanced one",
        f"(x {span(v['cond'], 3)})",
        f"at all {len(v['warp'])} timings: x {span(v['warp_rule'], 3)} on the rule's path, {span(v['warp_bal'], 3)} "
        f"on the\nbalanced one",
        f"timed first reads {span(v['aa_b16'], 3)}", f"warp_rescale reads {span(v['warp_b16'], 3)}",
        f"it reads {span(v['warp_one'], 3)}",
        f"x {span(v['v18_rule'], 3)} on the rule's path, {span(v['v18_bal'], 3)} on the balanced one",
        f"copy of the kept kernel timed first reads {span(v['aa4'], 3)}"])


def v20_numbers() -> dict:
    """seesaw_ab_h200_v20.md's A/B run, the v20 bench against v19's, and every timing this session made of
    uniform h_q=128, B=128, L=1024 on the rule's path: FlashMLA's, and ours with v19's or v20's kernel."""
    from tools.schedule_bench import summary
    from kernel_lab.tools.stage1_ab import parse, times

    blocks19, (block20,) = ab_blocks("seesaw_ab_h200_v19.md"), ab_blocks("seesaw_ab_h200_v20.md")
    run = parse(block20)
    bench, v19 = result("kernel_bench_h200_schedule.json"), result(SCHEDULE_V19)
    shape = "u B128 1024"
    t19, t20 = [times(block) for block in blocks19], times(block20)
    ours = ([t19[i][shape, "rule", "warp_rescale"] for i in (1, 2)] + [t19[3][shape, "rule", v] for v in ("new", "aa")]
            + [t20[shape, "rule", v] for v in ("v19", "new")]
            + [uniform_row(x, 128, 1024)["rule_us"] for x in (v19, bench)])
    fm = [t[shape, "FlashMLA", "FlashMLA"] for t in t19 + [t20]] + [
        uniform_row(x, 128, 1024)["flashmla_us"] for x in (v19, bench)]
    aa = [x for block in blocks19[1:] for k, x in parse(block).items() if k[2] == "aa"]
    return dict(rule=[x for (s, p, v), x in run.items() if p == "rule" and s != "u B16 1024"],
                b16=run["u B16 1024", "rule", "v19"], bal=[x for (s, p, v), x in run.items() if p == "balanced"],
                s=summary(bench), bench=bench, v19=v19, ours=ours, fm=fm, aa19=aa)


def test_the_v20_run_is_read_right():
    v = v20_numbers()
    assert min(v["rule"]) > 1 and v["b16"] < 1  # v19's slower on the rule's path but where it was timed first
    assert min(v["fm"]) / max(v["ours"]) < 0.9 < max(v["fm"]) / min(v["ours"])  # either side of 0.9x by the run
    assert_results_say("seesaw_ab_h200_v20.md", [
        f"slower at {len(v['rule'])} of {len(v['rule']) + 1} timings (x {span(v['rule'], 3)})",
        f"On the balanced path x is {span(v['bal'], 3)}", f"those of v19's {span(v['aa19'], 3)}"])


def test_the_v18_runs_are_read_right():
    v = v18_numbers()
    for shape in ("u B64 1024", "u B128 1024"):  # "faster at L=1024 ... in every run"
        assert min(v["by_rule"]["head"][shape]) > 1
    assert max(v["by_rule"]["head"]["u B64 4096"]) < 1  # "slower at B=64, L=4096"
    assert min(v["b16"]) < 0.98 and max(v["b16"]) < 1  # the same code reads apart at uniform B=16, in every run
    assert max(abs(x - 1) for x in v["hint"]) < 0.02
    c = v["chain"]
    for shape in ("B128 L1024", "B128 L4096"):  # two requests a program: slower, and the same output
        assert c[shape]["parts64_ef"] > c[shape]["rule_ef"]
        assert c[shape]["parts64_err"] == 0
    assert_results_say("seesaw_ab_h200_v18.md", [
        f"the kept kernel (\"head\") reads x {span(v['pdl'], 3)}\nagainst the PDL variant",
        f"\"exit_trigger\" reads {span(v['exit'], 3)}",
        f"x reads {span(v['same_head'], 3)} (head) and {span(v['same_exit'], 3)}\n(exit_trigger)",
        f"read {span(v['b16'], 3)} in all three runs", f"evict_first's time over plain's is {span(v['hint'], 3)}",
        f"take {c['B128 L1024']['parts64_ef']:.2f} us against the rule's {c['B128 L1024']['rule_ef']:.2f}",
        f"{c['B128 L4096']['parts64_ef']:.1f}\nagainst {c['B128 L4096']['rule_ef']:.1f} at L=4096",
        f"(\"aa\") reads {span(v['aa_b16'][0::2], 3)} at the rule's 4 splits",
        f"(\"same\") {span(v['aa_b16'][1::2], 3)}",
        f"\"aa\" reads {span(v['aa'], 3)} and \"same\" {span(v['same'], 3)}"])
    assert max(v["aa_b16"][0::2]) < 0.98 < min(v["aa_b16"][1::2])  # the first-timed copy, in both runs
    assert max(v["p1"]) < 1 and max(v["p1_one"]) < min(v["p1_aa"])  # slower everywhere; at one split beyond its copy
    assert_results_say("seesaw_ab_h200_v18.md", [
        f"faster at all {len(v['p1'])} timings, x {span(v['p1'], 3)} (uniform one-split shapes {span(v['p1_one'], 3)})",
        f"the\nvariant's own copy reads {span(v['p1_aa'], 3)}"])
