"""docs/kernel_essay.md's numbers, each recomputed from the results file it names (or from FlashMLA's walk,
``mla_edu.kernels.flashmla_schedule``).

Each claim is a sentence of the essay with ``{}`` where a number stands; the test finds the sentence, reads the
numbers the essay prints there and checks each against the recomputed value to within half a unit of its last
printed digit. Every other number in the essay must be an identifier (a source line, a shape, a commit, a file name):
a number that no claim recomputes fails the test.
"""

from __future__ import annotations

import re
import statistics
from statistics import median

from docs_text import norm, span

from kernel_lab.tests.results import path, result
from kernel_lab.tests.test_results_prose import stale_max_table, uniform_row, v20_numbers
from mla_edu.kernels import flashmla_schedule as fs
from mla_edu.paths import REPO_ROOT

ESSAY = REPO_ROOT / "docs" / "kernel_essay.md"
NUMBER = r"(\d+(?:\.\d+)?)"
TILES = (4096 - 1024) // 64  # the tiles a request gains between L=1024 and 4096


def kernel_row(name: str, heads: int, batch: int, length: int) -> dict:
    return next(r for r in result(name)["results"]
                if (r["page"], r["heads"], r["batch"], r["seq_len"]) == (64, heads, batch, length))


def tile_costs(name: str, sms: int = 132) -> dict:
    """What a 64-token tile adds at uniform h_q=128, B=64 between L=1024 and 4096 in a schedule bench's run: to each
    of our programs (one request each) and to each of FlashMLA's working CTAs (their tiles from its walk), and what
    is left at L=1024 on that line."""
    run = result(name)
    a, b = uniform_row(run, 64, 1024), uniform_row(run, 64, 4096)
    parts = fs.num_sm_parts(128, sms)
    busiest = [max(fs.part_loads([n] * 64, parts)) - fs.FIXED_OVERHEAD_NUM_BLOCKS for n in (1024, 4096)]
    assert busiest == [1024 // 64, 4096 // 64]  # each working CTA walks one whole request
    ours = (b["rule_us"] - a["rule_us"]) / TILES
    fm = (b["flashmla_us"] - a["flashmla_us"]) / (busiest[1] - busiest[0])
    return dict(ours=ours, fm=fm, x=ours / fm, fixed=a["rule_us"] - 16 * ours, fm_fixed=a["flashmla_us"] - 16 * fm)


#: The metrics ``ncu_launches`` reads: key -> the metric's name and unit as Nsight Compute prints them.
NCU_FIELDS = {"ghz": r"SM Frequency\s+Ghz", "us": r"Duration\s+us", "dram": r"DRAM Throughput\s+%",
              "cycles": r"Warp Cycles Per Issued Instruction\s+cycle", "elapsed": r"Elapsed Cycles\s+cycle",
              "grid": r"Grid Size", "block": r"Block Size", "occupancy": r"Theoretical Occupancy\s+%"}


def ncu_launches(name: str) -> list[tuple[str, dict]]:
    """``(kernel, {key: value})`` per profiled launch of an Nsight Compute report, in its order (``NCU_FIELDS``)."""
    out = []
    for line in path(name).read_text(encoding="utf-8").splitlines():
        head = re.match(r"  (?:void )?(\w+)[<( ].*Context \d+", line)
        if head:
            out.append((head[1], {}))
        for key, pattern in NCU_FIELDS.items():
            m = re.match(rf"\s+{pattern}\s+([\d.,]+)$", line)
            if m:
                out[-1][1][key] = float(m[1].replace(",", ""))
    return out


def ncu_clocks(name: str) -> dict:
    """``{kernel: [SM frequency in GHz]}`` of an Nsight Compute report, per profiled launch that reports one."""
    out = {}
    for kernel, metrics in ncu_launches(name):
        if "ghz" in metrics:
            out.setdefault(kernel, []).append(metrics["ghz"])
    return out


def profile_b64_l1024() -> tuple[float, float]:
    """The eager profile's stage-1 times at uniform h_q=128, B=64, L=1024: (seesaw on the rule's path, FlashMLA)."""
    text = path("schedule_profile_h200_v13.txt").read_text(encoding="utf-8")
    ours = float(re.search(r"^u B64 L1024 h128 rule .*stage1_seesaw_kernel ([\d.]+)", text, re.M)[1])
    fm = float(re.search(r"^u B64 L1024 h128 FlashMLA .*flash_fwd_splitkv_mla_kernel<Traits ([\d.]+)", text, re.M)[1])
    return ours, fm


def choice_fit_numbers() -> dict:
    """The section on the choice fitted on families: the family bench's batches, the lower bound's score at the
    package's margin then (stage 1 only), the launch-order model's held out, the three left, and the best option
    against FlashMLA."""
    from kernel_lab.tools import choice_fit as cf

    fit = cf.run()
    problems = fit["problems"]
    old = fit["grid"]["lower bound"][cf.STAGE1_MARGIN]
    held = cf.score([p.regret(c) for p, c in zip(problems, fit["held_out"]["launch order"])])
    margins = {m for m, _ in fit["lofo"]["launch order"].values()}
    assert margins == {cf.STAGE1_MARGIN}  # "every family gets the margin ..., the package's then"
    spans = cf.modelled(problems, fit["sms"])
    # "at large batches of long ragged requests ... it kept the rule where the balanced schedule was faster"
    for p, s in zip(problems, spans["lower bound"]):
        c = cf.choose(p, s, cf.STAGE1_MARGIN)
        if len(p.lens) >= 64 and p.regret(c) > cf.WITHIN:
            assert c == p.rule and p.best_of_two() == "balanced"
    left = [p for p, c in zip(problems, fit["held_out"]["launch order"]) if p.regret(c) > cf.WITHIN]
    assert len(left) == 3 and {(p.heads, len(p.lens), p.rule) for p in left} == {(32, 16, p.best) for p in left}
    for p in left:  # the same page-times at h_q=32 and 64 as benched; the balanced schedule measured slower at 32
        twin = next(q for q in problems if (q.family, q.lens, q.heads) == (p.family, p.lens, 64))
        assert cf.launch_order_makespans(p.lens, cf.PAGE, 32, fit["sms"], p.rule_splits) == cf.launch_order_makespans(
            twin.lens, cf.PAGE, 64, fit["sms"], twin.rule_splits)
        assert p.us["balanced"] > twin.us["balanced"] and twin.best == "balanced"
    fm = cf.best_x_flashmla(problems)
    return dict(batches=sum(bool(p.x_flashmla) for p in problems), problems=len(problems), old=old, held=held,
                margin=cf.STAGE1_MARGIN, fm=fm)


def long_tail_numbers() -> dict:
    """The paragraphs on one giant request: the capped giant batches below h_q=128, their pieces and makespans
    against FlashMLA's walk, their measured ratios by head count; the other batches that differ; the giant batches
    where the two models are equal; and the piece cap's A/B (``long_tail.ab_numbers``) and the rule landed."""
    from kernel_lab.tools import long_tail as lt
    from mla_edu.kernels import schedule as sc

    table = lt.rows()
    giant = [r for r in table if r.family == "giant"]
    low = [r for r in giant if r.differ and r.heads < 128]
    assert {(r.heads, r.batch) for r in low} == {(h, b) for h in (16, 32, 64) for b in (16, 64, 128)}
    (pieces,), (ours,) = {r.pieces for r in low}, {r.capped for r in low}
    equal = [r for r in giant if r.fm == r.capped]
    assert {(r.heads, r.batch) for r in equal} == {(128, 128), (128, 256)}  # "at h_q=128 with B=128 and B=256"
    others = [r.x for r in table if r.differ and r.family != "giant"]
    assert {(r.family, r.batch) for r in table if r.differ and r.family != "giant"} <= {
        ("lognormal_1.5", 16), ("bimodal", 16), ("L16384", 1)}  # "a few long requests at B=16, one alone at B=1"
    ab = lt.ab_numbers()
    kept = {(r["heads"], r["batch"]): r["x"] for r in ab["kept"]["rows"] if r["family"] == "giant"}
    assert {hb for hb in kept if hb[1] <= 128} == {(64, 64), (64, 128), (128, 64)}  # "At h_q=64 ... also at h_q=128"
    assert all(r["heads"] >= 64 for r in ab["kept"]["rows"])  # "with 64 heads or more and few partials"
    loss = next(r for r in table if (r.family, r.heads, r.batch) == ("giant", 64, 64))
    assert loss.kept_as_landed and ab["loss"]["kept"]  # "few partials per request": the rule as landed kept the cap

    def span(rows):
        return [min(r.x for r in rows), max(r.x for r in rows)]

    return dict(pieces=pieces, ours=ours, fm_pieces=[min(r.fm_pieces for r in low), max(r.fm_pieces for r in low)],
                fm=[min(r.fm for r in low), max(r.fm for r in low)],
                x={h: span([r for r in low if r.heads == h]) for h in (16, 32, 64)},
                others=[min(others), max(others)], equal=span(equal), ab=ab, kept=kept, partials=loss.fm_pieces,
                cap_batch=sc.PIECE_CAP_BATCH)


def _group(rows: list[dict]) -> dict:
    from statistics import geometric_mean

    xs = [r["x"] for r in rows]
    return dict(n=len(xs), lo=min(xs), hi=max(xs), geomean=geometric_mean(xs))


def variant_numbers() -> dict:
    """The paragraph on many_uncapped.patch (``partition_ab.table`` of its committed run): its giant batches; at 64
    heads or more, the batches where the package took it (a2e9367: the cap kept as landed at e79b3dc, lifted since,
    ``long_tail.cap_kept_as_landed``) and those where it did not; below 64 heads, the batches from B=64 up, where
    only stage 2 changes."""
    from kernel_lab.tools import long_tail as lt
    from kernel_lab.tools import partition_ab as ab

    run = result("partition_ab_h200_many_uncapped.json")
    info, sms = run["info"], run["info"]["sm_count"]
    rows = ab.table(run, REPO_ROOT / "kernel_lab/results/partition_variants/many_uncapped.patch")
    assert len(run["runs"]) == 4 and info["heads"] == [16, 32, 64, 128]  # "two pairs", "every head count"
    assert len(info["families"]) == 3  # "three families"
    changed = [r for r in rows if r["changed"]]
    assert {r["family"] for r in changed} == {"giant"} and all(r["heads"] >= 64 for r in changed)

    def kept(r, commit):
        return lt.cap_kept_as_landed(r["batch"], r["heads"], sms, commit)

    big = [r for r in rows if r["heads"] >= 64 and r["batch"] >= 16]
    taken = [r for r in big if kept(r, "e79b3dc") and not kept(r, "a2e9367")]
    left = [r for r in big if kept(r, "a2e9367")]
    below = [r for r in rows if r["heads"] < 64 and r["batch"] >= 64]
    # below 64 heads and at B=16 the patch changes nothing of the package's then: the taken and left are its batches
    assert {(r["heads"], r["batch"]) for r in taken + left} == {(h, b) for h in (64, 128) for b in (64, 128, 256)}
    return dict(changed=_group(changed), taken=_group(taken), left=_group(left), below=_group(below),
                few=lt.FEW_AS_LANDED["a2e9367"])


def h32_numbers() -> dict:
    """The paragraph on h32_block16.patch (``partition_ab.table`` of its committed run): B=16, B=64 up, and the
    batches where the package takes it."""
    from kernel_lab.tools import partition_ab as ab
    from mla_edu.kernels.workspace import HALF_BLOCK_BATCH

    run = result("partition_ab_h200_h32.json")
    rows = ab.table(run, REPO_ROOT / "kernel_lab/results/partition_variants/h32_block16.patch")
    assert len(run["runs"]) == 4 and run["info"]["heads"] == [32]  # "two pairs", "at h_q=32"
    assert sorted({r["batch"] for r in rows}) == [16, 64, 128, 256]  # "at B=16 and ... at B=64, B=128 and B=256"
    return dict(b16=_group([r for r in rows if r["batch"] == 16]), big=_group([r for r in rows if r["batch"] >= 64]),
                batch=HALF_BLOCK_BATCH)


def half_block_numbers() -> dict:
    """The paragraph on ``schedule.HALF_BLOCK_PAGE_COST``: the h32 A/B's cost of a 16-head page-time (time over
    modelled makespan, patched over base), and the fit (``kernel_lab.tools.half_block_fit``)."""
    from kernel_lab.tools import half_block_fit as hb
    from kernel_lab.tools import partition_ab as ab
    from mla_edu.kernels import schedule as sc

    run = result("partition_ab_h200_h32.json")
    rows = ab.table(run, REPO_ROOT / "kernel_lab/results/partition_variants/h32_block16.patch")
    cost = {(r["family"], r["batch"]): (r["patched_us"] / r["model"][1]) / (r["base_us"] / r["model"][0])
            for r in rows}
    big, b16 = [c for (_, b), c in cost.items() if b >= 64], [c for (_, b), c in cost.items() if b == 16]
    probs, sms = hb.problems()
    score = {c: hb.score(probs, c, sms) for c in (0.65, 0.78, sc.HALF_BLOCK_PAGE_COST, 0.84)}
    worst65 = max(probs, key=lambda p: p.regret(0.65, sms))
    assert (len(worst65.lens), max(worst65.lens)) == (1, 4096)  # "one request, L=4096"
    fits = {f: hb.fit([p for p in probs if p.family != f], sms) for f in {p.family for p in probs}}
    missed = [p for p in probs if p.regret(fits[p.family], sms) > hb.WITHIN]  # each family held out
    assert [(p.family, p.lens) for p in missed] == [("L16384", (16384,))]  # "leaves its one request"
    return dict(big=[min(big), max(big)], b16=statistics.median(b16),
                n=len(probs), batches=len({(p.family, p.lens) for p in probs}),
                cost=sc.HALF_BLOCK_PAGE_COST, at=score[sc.HALF_BLOCK_PAGE_COST], at65=score[0.65],
                lost=[score[sc.HALF_BLOCK_PAGE_COST][0] - score[c][0] for c in (0.78, 0.84)],
                held=[fits["L16384"], missed[0].regret(fits["L16384"], sms)])


def rerun_numbers() -> dict:
    """The paragraph on the family bench at a2e9367: with FlashMLA (B=16 and 64, h_q 32-128) against the first run's
    best option on the same batches, and ours alone on every batch (the choice against the best option)."""
    from kernel_lab.tools import family_bench as fb
    from mla_edu.kernels import schedule as sc

    new, old = result("family_bench_h200_fm_a2e9367.json"), result("family_bench_h200.json")
    keys = {(r["family"], r["heads"], r["batch"]) for r in new["family"]}
    assert {(h, b) for _, h, b in keys} == {(h, b) for h in (32, 64, 128) for b in (16, 64)} and not new["uniform"]
    now = fb.summary(new)
    then = fb.summary({"info": old["info"], "uniform": [],
                       "family": [r for r in old["family"] if (r["family"], r["heads"], r["batch"]) in keys]})
    from kernel_lab.tools import choice_fit as cf
    from kernel_lab.tools import split_model_fit as smf

    ours = result("family_bench_h200_ours_a2e9367.json")
    sms = ours["info"]["sm_count"]
    today = [fb.median_us(r, fb.backend_choice(r, sms)) / fb.median_us(r, fb.best_option(r))
             for r in ours["family"] + ours["uniform"]]
    # before stage 2 entered the choice: the scale fitted (0.8), stage 1 only
    before = [p for p in smf.load(smf.FIT_SETS) if p.set == "family ours a2e9367"]
    assert [p.lens for p in before] == [tuple(r["lens"]) for r in ours["family"] + ours["uniform"]]
    regret = {(r["family"], r["heads"], r["batch"]): p.regret(smf.choice(p, smf.BEFORE))
              for r, p in zip(ours["family"] + ours["uniform"], before, strict=True)}
    out = sorted(k for k, x in regret.items() if x > 1.05)

    def as_run(r):  # the choice as the run made it: stage 1 only, the scale at 0.65
        rule, balanced = sc.stage1_makespans(r["lens"], fb.PAGE, r["heads"], sms, r["rule_splits"],
                                             half_block_cost=0.65)
        option = "balanced" if balanced < (1 - cf.STAGE1_MARGIN) * rule else f"split_{r['rule_splits']}"
        return fb.median_us(r, option) / fb.median_us(r, fb.best_option(r)) <= 1.05

    assert len(ours["family"]) == 128 and "deadline" in ours["cut"]  # "every family batch ... before its deadline"
    assert out == [("L1024", 64, 4), ("L1024", 64, 16), ("L16384", 32, 1)]  # "two of them ... at h_q=64"
    assert all(x <= 1.05 for x in today)  # "at all ..."
    h = (32, 64, 128)
    return dict(now=[now[f"family_h{x}"]["choice_geomean"] for x in h],
                low=[now[f"family_h{x}"]["choice_min"] for x in h],
                within=sum(now[f"family_h{x}"]["choice_within_5pct"] for x in h),
                n=sum(now[f"family_h{x}"]["problems"] for x in h),
                then=[then[f"family_h{x}"]["best_geomean"] for x in h],
                ours=[len(regret) - len(out), len(regret)], uniform=len(ours["uniform"]),
                as_run=sum(as_run(r) for r in ours["family"] + ours["uniform"]),
                today=sum(x <= 1.05 for x in today),
                split=[regret["L1024", 64, 4], regret["L1024", 64, 16]])


def new_runs_numbers() -> dict:
    """The paragraph on the family bench at 8acf73a (its four runs with FlashMLA) and on issue 52's acceptance as
    scored on every run (``kernel_lab.tools.acceptance``)."""
    from statistics import geometric_mean

    from kernel_lab.tools import acceptance as acc
    from kernel_lab.tools import family_bench as fb

    names = [f"family_bench_h200_fm_8acf73a_{n}.json" for n in ("h16", "h16_uniform", "b128", "b256")]
    rows = [(r, result(n)["info"]["sm_count"]) for n in names for k in ("family", "uniform") for r in result(n)[k]]
    assert all("flashmla" in r["us"] for r, _ in rows)  # "timed FlashMLA in the same run"
    assert all(fb.backend_choice(r, sms) == fb.best_option(r) for r, sms in rows)  # "the best option at each"
    last = acc.RUNS.index(acc.LAB / "family_bench_h200_fm_8acf73a_h16_uniform.json")
    board = acc.scoreboard(acc.load(acc.RUNS[:last + 1]), rules_from="a2e9367")  # the runs up to 8acf73a, rules then
    got = board["picks"]
    new = {k: p for k, p in got.items() if p.run in names}
    assert len({(r["family"], r["heads"], r["batch"]) for r, _ in rows}) == len(new)  # each problem of theirs taken
    # "every family batch at h_q=16 and its uniform grid, and every family at h_q 32-128 with B=128 and B=256"
    assert set(new) == {k for k in board["keys"] if k[2] == 16 or (k[0] == "family" and k[3] >= 128)}

    def x(kind, heads):
        sel = [p.x for k, p in new.items() if k[0] == kind and k[2] == heads]
        return geometric_mean(sel), min(sel)

    h16, uni = x("family", 16), x("uniform", 16)
    big = {h: x("family", h) for h in (32, 64, 128)}
    fam = [p for k, p in got.items() if k[0] == "family"]
    low = [p for p in fam if not acc.passes(p.x, acc.FLOOR)]
    gap = [p for p in fam if p.key[2] >= 64 and p.key[3] >= 128]
    rest = [p for p in low if p not in gap]
    assert all(p.key[3] <= 64 and p.commit == "a2e9367" for p in rest)  # "the other ... at B=16 and B=64"
    assert all(not p.older for p in fam)  # every family batch from a run at current rules
    assert all(u["big"]["current"] == 0 for u in board["uniform"] if u["heads"] > 16)  # "no run with FlashMLA"
    return dict(h16=h16, uni=uni, geo=[big[h][0] for h in (32, 64, 128)], low=[big[h][1] for h in (32, 64, 128)],
                n=len(new), met=sum(r["met"] for r in board["ragged"]), pairs=len(board["ragged"]),
                bars=[acc.GEOMEAN_BAR, acc.FLOOR], fam=len(fam), below=len(low),
                gap=[sum(p in low for p in gap), len(gap)], rest=len(rest))


def before_stage2_board() -> dict:
    """Issue 52's scoreboard on every run before stage 2 changed (up to the 4d46283 runs), at the rules then."""
    from kernel_lab.tools import acceptance as acc

    last = acc.RUNS.index(acc.LAB / "family_bench_h200_fm_4d46283_run3.json")
    return acc.scoreboard(acc.load(acc.RUNS[:last + 1]), rules_from="a2e9367")


def latest_runs_numbers() -> dict:
    """The paragraph on the three whole runs at 4d46283: issue 52's acceptance as scored on every run up to them, at
    the rules then."""
    from kernel_lab.tools import acceptance as acc
    from kernel_lab.tools import family_bench as fb

    board = before_stage2_board()
    got = board["picks"]
    assert all(len(p.pooled) >= acc.MIN_RUNS for p in got.values())  # "each ratio ... the median of at least"
    fam = [p for k, p in got.items() if k[0] == "family"]
    low = [p for p in fam if not acc.passes(p.x, acc.FLOOR)]
    lowest = min(fam, key=lambda p: p.x)
    assert lowest.key == ("family", "giant", 64, 256)
    uni = {u["heads"]: u for u in board["uniform"]}
    deciding = []  # the headline bench's deciding shape, h_q=128, B=128, L=1024, in each run at 4d46283
    for name in (f"family_bench_h200_fm_4d46283_run{i}.json" for i in (1, 2, 3)):
        r = next(r for r in result(name)["uniform"] if (r["family"], r["heads"], r["batch"]) == ("L1024", 128, 128))
        deciding.append(fb.x_flashmla(r, fb.backend_choice(r, 132))[0])
    small = next(r for r in result("family_bench_h200_ours_df92c31_small.json")["uniform"]
                 if (r["family"], r["heads"], r["batch"]) == ("L2048", 128, 1))
    assert fb.backend_choice(small, 132) == "split_16"  # the package's count there now
    s16, s32 = fb.median_us(small, "split_16"), fb.median_us(small, "split_32")
    assert all(uni[h]["big"]["low"].key[1::2] == ("L1024", 128) for h in (32, 64, 128))  # "each at B=128, L=1024"
    return dict(runs=acc.MIN_RUNS, met=sum(r["met"] for r in board["ragged"]), pairs=len(board["ragged"]),
                below=len(low), fam=len(fam), floor=acc.FLOOR, lowest=lowest.x,
                uni=[uni[h]["big"]["low"].x for h in (32, 64, 128)], h16=uni[16]["all"]["low"].x,
                deciding=deciding, l2048=[s16, 16, s32, 32, s16 / s32])


def ncu_kernels(name: str) -> dict:
    """``{kernel: {key: value}}`` of an Nsight Compute report of one launch per kernel (``ncu_launches``)."""
    launches = ncu_launches(name)
    kernels = [k for k, _ in launches]
    assert len(set(kernels)) == len(kernels), f"{name}: a kernel profiled twice: {kernels}"
    return dict(launches)


def profile_numbers() -> dict:
    """The bullet on the Nsight Compute profiles of bimodal h_q=128, B=256 and giant h_q=64, B=256."""
    bi = ncu_kernels("family_profile_h200_bimodal_h128_b256_ncu.txt")
    gi = ncu_kernels("family_profile_h200_giant_h64_b256_ncu.txt")
    ours, fm, s2, comb = ("stage1_seesaw_kernel", "flash_fwd_splitkv_mla_kernel", "stage2_scheduled_kernel",
                          "flash_fwd_mla_combine_kernel")
    for k in (ours, fm):  # "at the same occupancy (one CTA of eight warps an SM)": 132 CTAs of 256 threads, 1 an SM
        assert (bi[k]["grid"], bi[k]["block"], bi[k]["occupancy"]) == (132, 256, 12.5), (k, bi[k])
    from kernel_lab.tools import family_bench as fb
    from mla_edu.kernels import schedule as sc

    lens = fb.family_lengths("giant", 256)
    width = max(-(-x // fb.PAGE) for x in lens)
    segs = sc.host_segments(lens, fb.PAGE, width, sc.num_parts(64, 132, 256, width), 64)
    pieces = max(sum(s.request == b for s in segs) for b in range(256))
    assert pieces == sum(s.request == lens.index(max(lens)) for s in segs)  # the giant request's, the most
    return dict(cycles=100 * (bi[ours]["elapsed"] / bi[fm]["elapsed"] - 1), pieces=pieces,
                bi=[bi[ours]["us"], bi[fm]["us"], bi[ours]["dram"], bi[fm]["dram"], bi[ours]["cycles"],
                    bi[fm]["cycles"]], bi2=[bi[s2]["us"], bi[comb]["us"]],
                gi=[gi[s2]["us"], gi[comb]["us"], gi[ours]["us"], gi[fm]["us"]])


def stage2_variant_numbers() -> dict:
    """The paragraph on the two stage-2 patches: base / patched over all their batches, and the pipelined loop where
    stage 2 merges one partial at a time (64 heads or more with ``schedule.few_partials``: ``STAGE2_FEW_WIDE``)."""
    from statistics import geometric_mean

    from kernel_lab.tools import partition_ab as ab
    from kernel_lab.tools import stage2_pick as sp

    out = {}
    for name in ("pipelined", "few_wide_two"):
        rows = ab.table(result(f"partition_ab_h200_stage2_{name}.json"),
                        REPO_ROOT / f"kernel_lab/results/stage2_variants/{name}.patch")
        xs = [r["x"] for r in rows]
        hb = {(r["heads"], r["batch"]) for r in rows}
        wide_at = {(h, b) for h, b in hb if sp.few_wide(h, b)}
        wide = [r for r in rows if (r["heads"], r["batch"]) in wide_at]
        giant = next(r["x"] for r in rows if (r["family"], r["heads"], r["batch"]) == ("giant", 64, 256))
        rest = [r["x"] for r in rows if r not in wide]
        out[name] = dict(geomean=geometric_mean(xs), lo=min(xs), hi=max(xs), n=len(rows), giant=giant,
                         wide=geometric_mean([r["x"] for r in wide]), n_wide=len(wide), rest=rest,
                         won=sum(r["x"] > 1 for r in wide), wide_lo=min(r["x"] for r in wide),
                         wide_hi=max(r["x"] for r in wide), wide_top=max(wide, key=lambda r: r["x"]))
    return out


def pipelined_landed_numbers() -> dict:
    """The paragraph on stage 2's pipelined loop at 261e2bd: its A/B and the rejected one's (``stage2_pick``'s
    reading), and the acceptance on the 261e2bd runs against the runs before (``before_stage2_board``)."""
    from statistics import geometric_mean

    from kernel_lab.tools import acceptance as acc
    from kernel_lab.tools import partition_ab as ab
    from kernel_lab.tools import stage2_pick as sp

    out = {}
    for name in ("few_wide_pipelined", "long_pipelined"):
        rows = ab.table(result(f"partition_ab_h200_stage2_{name}.json"),
                        REPO_ROOT / f"kernel_lab/results/stage2_variants/{name}.patch")
        few = [r for r in rows if sp.few_wide(r["heads"], r["batch"])]
        ctl = [r for r in rows if r not in few]
        assert {(r["heads"], r["batch"]) for r in few} == {(64, 256), (128, 128), (128, 256)}  # "h_q=64 with B=256"
        assert {(r["heads"], r["batch"]) for r in ctl} == {(64, 128)} and len({r["family"] for r in rows}) == 4
        top = max(few, key=lambda r: r["x"])
        assert (top["family"], top["heads"], top["batch"]) == ("giant", 64, 256)  # "the most on giant"
        out[name] = dict(n=len(few), geomean=geometric_mean([r["x"] for r in few]), lo=min(r["x"] for r in few),
                         hi=top["x"], ctl_n=len(ctl), ctl=geometric_mean([r["x"] for r in ctl]),
                         ctl_giant=next(r["x"] for r in ctl if r["family"] == "giant"))
    assert (sp.GEOMEAN, sp.FLOOR) == (1.01, 0.98)
    board = acc.scoreboard(acc.load())
    now = {k: p for k, p in board["picks"].items() if not p.older}
    then = before_stage2_board()["picks"]
    assert acc.RULES_FROM == "261e2bd" and all(set(p.pooled) <= {f"family_bench_h200_fm_261e2bd_run{i}.json"
                                                                   for i in (1, 2, 3)} for p in now.values())
    lowest = min(now.values(), key=lambda p: p.x)
    assert lowest.key == ("family", "lognormal_0.5", 64, 128)
    below = [sum(not acc.passes(b[k].x, acc.FLOOR) for k in now) for b in (then, now)]
    return dict(**out, giant=[then["family", "giant", 64, 256].x, now["family", "giant", 64, 256].x],
                giant128=[then["family", "giant", 128, 128].x, now["family", "giant", 128, 128].x],
                n=len(now), below=below[::-1], lowest=lowest.x, rest=len(board["keys"]) - len(now),
                gates=[sp.GEOMEAN, sp.FLOOR])


def segment_ahead_numbers() -> dict:
    """The sentence on segment_ahead.patch (``partition_ab.table`` of its committed run): base / patched over its
    batches, and its output against float64 no further off than the kept kernel's, batch by batch."""
    from statistics import geometric_mean

    from kernel_lab.tools import partition_ab as ab

    run = result("partition_ab_h200_segment_ahead.json")
    rows = ab.table(run, REPO_ROOT / "kernel_lab/results/tma_variants/segment_ahead.patch")
    assert run["info"]["heads"] == [16, 32]  # "h_q=16 and h_q=32"
    err = {v: [max(x["err"] for r in run["runs"] if r["variant"] == v for x in r["rows"]
                   if (x["family"], x["heads"], x["batch"]) == (w["family"], w["heads"], w["batch"])) for w in rows]
           for v in ("base", "patched")}
    assert all(p <= b for p, b in zip(err["patched"], err["base"]))  # "correct against float64"
    xs = [r["x"] for r in rows]
    return dict(geomean=geometric_mean(xs), lo=min(xs), hi=max(xs), n=len(rows))


def roofline_numbers() -> dict:
    """The paragraph on the ceilings (``kernel_lab.tools.roofline``)."""
    from statistics import geometric_mean

    from kernel_lab.tools import roofline as rf

    table = rf.rows()
    top = max(table, key=lambda r: r.fm)
    assert (top.family, top.heads, top.batch) == ("normal_16k", 16, 256)  # "normal lengths, mean 16K, B=256"
    over = [r for r in table if r.needs > 1]
    assert {r.heads for r in over} == {16}  # "at h_q=16"
    big = [[r for r in table if r.heads == h and r.batch == b] for h in (64, 128) for b in (64, 128, 256)]
    fm = [geometric_mean(r.fm for r in sel) for sel in big]
    return dict(top=top.fm, best=max(r.best for r in table), over=len(over), n=len(table), fm=[min(fm), max(fm)],
                needs=max(r.needs for sel in big for r in sel))


def cost_fit_numbers() -> dict:
    """The section on the cost model (``kernel_lab.tools.cost_fit``): fit quality at h_q=64 and 128, and per head
    count the gap at B >= 128 split by term, with the claims the prose makes about ranges and directions."""
    from kernel_lab.tools import cost_fit as cf
    from mla_edu.kernels import schedule as sc
    from mla_edu.kernels import split_kv_triton as skt
    from mla_edu.util import cdiv

    res = cf.run()
    h64, h128 = res["heads"][64], res["heads"][128]
    fits = [r["fits"] for r in (h64, h128)]
    o128, f128 = h128["fits"]["balanced"], h128["fits"]["flashmla"]
    o64, f64 = h64["fits"]["balanced"], h64["fits"]["flashmla"]
    (alo, ahi), (flo, fhi) = o128.ranges[0], f128.ranges[0]
    assert alo <= fhi and flo <= ahi  # "the two ranges overlap"
    assert o128.ranges[1][0] > f128.ranges[1][1]  # "the ranges apart"
    assert o64.coefs[0] < f64.coefs[0] and o64.coefs[1] > f64.coefs[1] and o64.coefs[2] > f64.coefs[2]
    assert {p.batch for r in (h64, h128) for p in r["points"] if p.batch >= cf.BIG_BATCH} == {128, 256}
    w128, w64 = h128["worst"], h64["worst"]
    assert (w128.family, w128.batch) == ("bimodal", 256) and (w64.family, w64.batch) == ("giant", 256)
    sms = res["sms"]
    parts = sc.num_parts(64, sms, w64.batch, max(cdiv(x, cf.PAGE) for x in w64.lens))
    assert skt.stage2_config(w64.batch, 64, parts) == skt.STAGE2_FEW_WIDE  # "one at a time"
    g128, g64 = h128["big"], h64["big"]
    return dict(
        max_rel=[100 * max(f["balanced"].max_rel for f in fits), 100 * max(f["flashmla"].max_rel for f in fits)],
        lofo=[100 * max(f["balanced"].lofo_max for f in fits), 100 * max(f["flashmla"].lofo_max for f in fits)],
        n128=g128.n, gap128=g128.measured, part128=sum(g128.partition), a128=[o128.coefs[0], f128.coefs[0]],
        page128=-g128.kernel[0], seg128=[o128.coefs[1], o128.segment_pages, f128.coefs[1], f128.segment_pages],
        segterm128=g128.kernel[1], worst128=[h128["worst_gap"].measured, h128["worst_gap"].kernel[1],
                                             h128["worst_gap"].residual],
        n64=g64.n, gap64=g64.measured, a64=[o64.coefs[0], f64.coefs[0]], page64=-g64.kernel[0],
        seg64=[o64.segment_pages, f64.segment_pages], segterm64=g64.kernel[1], c64=[o64.coefs[2], f64.coefs[2]],
        partterm64=g64.kernel[2], fixed64=o64.ranges[4][1] - o64.ranges[4][0],
        worst64=h64["worst_gap"].measured,
        pieces64=[w64.features("balanced", sms).max_partials, w64.features("flashmla", sms).max_partials],
        merge64=h64["worst_gap"].kernel[3])


def split_model_numbers() -> dict:
    """The paragraph on stage 2's cost in the split count and the choice (``kernel_lab.tools.split_model_fit``)."""
    from kernel_lab.tools import split_model_fit as smf

    problems = smf.load(smf.FIT_SETS)  # the paragraph's ten files; the runs after it: held_out_numbers
    package, count_only, rule_side, _, _, fixed = smf.MODELS  # the package before and now
    assert package == smf.BEFORE and fixed == smf.PACKAGE and fixed.in_makespans == "both"
    within = {m.name: sum(map(smf.right, smf.regrets(problems, m))) for m in smf.MODELS}

    def regret(label: str, model) -> float:
        p = next(p for p in problems if p.label == label)
        return p.regret(smf.choice(p, model))

    assert smf.choice(next(p for p in problems if p.label == "L4096 h64 B4"), count_only) == "balanced"
    (kb_set, kb, _), (fb_set, fb, _) = smf.PAIR
    fastest = [min(p.us, key=p.us.get) for key in ((kb_set, kb), (fb_set, fb)) for p in problems
               if (p.set, p.label) == key]
    return dict(n=len(problems), package=within[package.name], count_only=regret("L4096 h64 B4", count_only),
                rule_lost=within[package.name] - within[rule_side.name], launch=fixed.split_cost,
                merge=fixed.merge_weight, margin=fixed.margin, fixed=within[fixed.name],
                kernel=regret(kb, fixed), fastest=[int(f.removeprefix("split_")) for f in fastest])


def held_out_numbers() -> dict:
    """The paragraph on the runs timed after the split models were written (``split_model_fit.NEW_SETS``): the
    package before and now on them."""
    from kernel_lab.tools import split_model_fit as smf

    new = smf.load(smf.NEW_SETS)
    base, now = smf.regrets(new, smf.BEFORE), smf.regrets(new, smf.PACKAGE)
    gained, lost = smf.against(new, smf.PACKAGE, base)
    (p,) = lost
    assert (p.set, p.label) == ("family ours df92c31 small", "L2048 h32 B4")  # "h_q=32, B=4, L=2048"
    runs = {n: [r for q, r in zip(new, now) if q.set == n] for n, _, _ in smf.NEW_SETS[:3]}
    assert all(q.set in runs or q.set == "family ours df92c31 small" for q in new)
    (per_run,), (within,) = {len(rs) for rs in runs.values()}, {sum(map(smf.right, rs)) for rs in runs.values()}
    splits = [int(smf.choice(p, m).removeprefix("split_")) for m in (smf.PACKAGE, smf.BEFORE)]
    return dict(n=len(new), missed=sum(not smf.right(r) for r in base), gained=len(gained), splits=splits,
                x=p.regret(smf.choice(p, smf.PACKAGE)), within=[within, per_run],
                constants=[smf.PACKAGE.split_cost, smf.PACKAGE.merge_weight, smf.PACKAGE.margin])


def claims() -> list[tuple[str, list[float]]]:
    """(sentence with ``{}`` for each number, the numbers recomputed) for every number the essay states."""
    from tools.schedule_bench import backend_path, summary

    row, h16 = kernel_row("kernel_bench_h200_stage1.json", 128, 64, 4096), kernel_row(
        "kernel_bench_h200_stage1.json", 16, 64, 4096)
    assert row["stage1"] == "seesaw, 64 heads"
    s = summary(result("kernel_bench_h200_schedule.json"))
    rg, u = s["ragged_balanced_x_flashmla"], s["uniform_h128_backend_x_flashmla"]
    choice = s["uniform_backend_over_best_split"]
    run = result("kernel_bench_h200_schedule.json")
    worst = min((r for r in run["uniform"] if r["heads"] == 128 and r["batch"] >= 4),
                key=lambda r: r["flashmla_us"] / r[f"{backend_path(r, run['info']['sm_count'])}_us"])
    assert (worst["batch"], worst["lens_max"]) == (64, 1024)  # "the lowest ... at B=64, L=1024"
    v = v20_numbers()
    fm, ours = v["fm"], v["ours"]
    parts, parts16 = fs.num_sm_parts(128, 132), fs.num_sm_parts(16, 132)
    b64 = fs.flashmla_parts([1024] * 64, parts)
    working = sum(1 for m in b64 if m)
    assert all(len(m) == 2 for m in fs.flashmla_parts([1024] * 128, parts) if m)  # "two whole requests"
    pieces = [fs.pieces_per_request([n], parts)[0] for n in (1024, 4096, 16384)]
    now, v16, v19 = (tile_costs(f"kernel_bench_h200_schedule{x}.json") for x in ("", "_v16", "_v19"))
    clocks = ncu_clocks("kernel_profile_h200_seesaw_ncu.txt")
    seesaw, flash = profile_b64_l1024()
    errs, _ = stale_max_table()
    cf = choice_fit_numbers()
    lt = long_tail_numbers()
    var, roof, h32 = variant_numbers(), roofline_numbers(), h32_numbers()
    hb, rr = half_block_numbers(), rerun_numbers()
    cm = cost_fit_numbers()
    nr, sa = new_runs_numbers(), segment_ahead_numbers()
    sm, ho = split_model_numbers(), held_out_numbers()
    lr, pf, s2 = latest_runs_numbers(), profile_numbers(), stage2_variant_numbers()
    pl = pipelined_landed_numbers()
    fw, lp = pl["few_wide_pipelined"], pl["long_pipelined"]
    pipe, two = s2["pipelined"], s2["few_wide_two"]
    assert all(x < 1 for x in pipe["rest"])  # "It lost at every batch where stage 2 loads several partials"
    top = two["wide_top"]
    assert (top["family"], top["heads"], top["batch"]) == ("giant", 64, 256)  # "the most on giant"
    return [
        ("it ran {}x faster in geomean over the {} batches whose stage 2 takes that config", [fw["geomean"], fw["n"]]),
        ("four families), from {}x to {}x, the most on giant", [fw["lo"], fw["hi"]]),
        ("(geomean at least {}, no batch below {}; the device ran it", pl["gates"]),
        ("ran at {}x on the {} batches, its lowest {}x,", [lp["geomean"], lp["n"], lp["lo"]]),
        ("The {} batches at h_q=64, B=128", [fw["ctl_n"]]),
        ("four partials together, ran {}x faster too (giant {}x)", [fw["ctl"], fw["ctl_giant"]]),
        ("giant h_q=64, B=256 went from {}x FlashMLA's speed to {}x and giant h_q=128, B=128 from {}x to {}x; of those "
         "{} batches, {} run below {}x where {} did, the lowest {}x", [*pl["giant"], *pl["giant128"], pl["n"],
                                                                      pl["below"][0], 0.95, pl["below"][1],
                                                                      pl["lowest"]]),
        ("The other {} problems of the bench", [pl["rest"]]),
        ("({} of its {} problems have no run there)", [pl["rest"], pl["rest"] + pl["n"]]),
        ("put that shape at {}x, {}x and {}x", lr["deciding"]),
        ("takes {} us with {} splits against {} with {}, {}x", lr["l2048"]),
        ("({}% more cycles, the two clocks differing)", [pf["cycles"]]),
        ("its longest merge walks the giant request's {} partials", [pf["pieces"]]),
        ("so that each ratio was then the median of at least {} runs. Scored so, {} of the {} pairs of family and head "
         "count reach the ragged bar, and {} of the {} family batches run below {}x, the lowest at {}x",
         [lr["runs"], lr["met"], lr["pairs"], lr["below"], lr["fam"], lr["floor"], lr["lowest"]]),
        ("the lowest shape runs at {}x at h_q=32, {}x at h_q=64 and {}x at h_q=128", lr["uni"]),
        ("h_q=16 the lowest runs at {}x", [lr["h16"]]),
        ("takes {} us against FlashMLA's attention kernel's {}", pf["bi"][:2]),
        ("same occupancy (one CTA of eight warps an SM) and {}% of the DRAM bandwidth against {}%; its warps issue an "
         "instruction every {} cycles against {}", pf["bi"][2:]),
        ("Stage 2 takes {} us against FlashMLA's combine kernel's {}", pf["bi2"]),
        ("holds most of the gap, {} us against {}, the attention kernels {} against {}", pf["gi"]),
        ("ran at {}x the kept kernel's speed over {} batches, from {}x to {}x",
         [pipe["geomean"], pipe["n"], pipe["lo"], pipe["hi"]]),
        ("it won at {} of the {} batches, {}x in geomean, {}x on giant",
         [pipe["won"], pipe["n_wide"], pipe["wide"], pipe["giant"]]),
        ("ran at {}x over the {} batches it changes ({}-{}x", [two["wide"], two["n_wide"], two["wide_lo"],
                                                               two["wide_hi"]]),
        ("the seesaw stage 1 takes {} us, {}% of the measured bf16 matmul rate, against {} us for the TMA kernel; "
         "FlashMLA takes {} us, so the kernel runs at {}x its speed",
         [row["triton_us"], 100 * row["frac_matmul"], row["kernels"]["tma, 64 heads"]["best_us"], row["flashmla_us"],
          row["flashmla_us"] / row["triton_us"]]),
        ("memory-bound: {} us, {}% of the measured copy rate, {}x FlashMLA",
         [h16["triton_us"], 100 * h16["frac_copy"], h16["flashmla_us"] / h16["triton_us"]]),
        ("at threshold {} the rms error is {}x the exact max's in bf16, {}x in fp16",
         [8, errs["bfloat16", 8.0][1], errs["float16", 8.0][1]]),
        ("the balanced schedule runs at {}x FlashMLA's speed in geomean, the lowest batch at {}x, against {}x with "
         "one split count", [rg["geomean"], rg["min"], s["ragged_rule_x_flashmla"]["geomean"]]),
        ("what the triton backend runs is {}x FlashMLA's speed in geomean at h_q=16 and {}x at h_q=128, the lowest "
         "{}x at B=64, L=1024; its choice is within {}% of the best split at {} of {} uniform shapes",
         [s["uniform_h16_backend_x_flashmla"]["geomean"], u["geomean"], u["min"], 5, choice["within_5pct"],
          choice["shapes"]]),
        ("Over {} timings of FlashMLA at that shape (two bench runs, five A/B runs) its time spans {}-{} us; over {} "
         "of ours, {}-{} us: the ratio lies between {}x and {}x depending on the run, and the medians, {} and {} us, "
         "give {}x", [len(fm), min(fm), max(fm), len(ours), min(ours), max(ours), min(fm) / max(ours),
                      max(fm) / min(ours), median(fm), median(ours), median(fm) / median(ours)]),
        ("that is {} parts ({} at h_q=16). At B=64 and L=1024 or 4096, {} of the {} parts take one whole request "
         "each and {} stay idle: {} CTAs work, as our {} programs do",
         [parts, parts16, working, parts, parts - working, 2 * working, 2 * 64]),
        ("One request alone (B=1) is cut into {}, {} and {} pieces", pieces),
        ("each 64-token tile adds {} us to each of our {} programs and {} us to each of FlashMLA's {} working CTAs, "
         "{}x", [now["ours"], 2 * 64, now["fm"], 2 * working, now["x"]]),
        ("before the stale max, {} against {} us, {}x", [v16["ours"], v16["fm"], v16["x"]]),
        ("in the run that measured it, {} against {} us, {}x", [v19["ours"], v19["fm"], v19["x"]]),
        ("FlashMLA's kernel ran at {}-{} GHz, the seesaw at {}-{}",
         [min(clocks["flash_fwd_splitkv_mla_kernel"]), max(clocks["flash_fwd_splitkv_mla_kernel"]),
          min(clocks["stage1_seesaw_kernel"]), max(clocks["stage1_seesaw_kernel"])]),
        ("On the same line at L=1024 it is {} us for ours and {} for FlashMLA", [now["fixed"], now["fm_fixed"]]),
        ("both kernels give each working CTA {} tiles, FlashMLA's attention kernel took {} us against the seesaw's {}, "
         "{}% less time", [1024 // 64, flash, seesaw, 100 * (1 - flash / seesaw)]),
        ("timed {} batches: eight families", [cf["batches"]]),
        ("the headline bench's uniform grid, {} problems, the backend's choice between the split rule and the "
         "balanced schedule was within {}% of the best option at {} of them, the worst {}x",
         [cf["problems"], 5, cf["old"]["within"], cf["old"]["max"]]),
        ("every family gets the margin {}, the package's then, and the choice is within that {}% at {} of {} problems "
         "held out, the worst {}x", [cf["margin"], 5, cf["held"]["within"], cf["held"]["problems"], cf["held"]["max"]]),
        ("it runs at {}x FlashMLA's speed in geomean at h_q=16, {}x at h_q=32, {}x at h_q=64 and {}x at h_q=128",
         [cf["fm"][16], cf["fm"][32], cf["fm"][64], cf["fm"][128]]),
        ("kept the giant request to {} pieces, so a part held {} page-times, where FlashMLA's walk cuts it into "
         "{}-{} pieces and gives {}-{}", [lt["pieces"], lt["ours"], *lt["fm_pieces"], *lt["fm"]]),
        ("ran at {}-{}x FlashMLA's speed at h_q=32 and {}-{}x at h_q=64; at h_q=16 it stayed ahead, {}-{}x",
         [*lt["x"][32], *lt["x"][64], *lt["x"][16]]),
        ("one alone at B=1) run at {}-{}x", lt["others"]),
        ("the giant batches run at {}-{}x", lt["equal"]),
        ("The {} batches whose model it changed ran {}x faster in geomean, the {} it left alone at {}x",
         [lt["ab"]["changed"]["n"], lt["ab"]["changed"]["geomean"], lt["ab"]["control"]["n"],
          lt["ab"]["control"]["geomean"]]),
        ("where the rule as landed lifted the cap ran {}-{}x faster",
         [lt["ab"]["giant"]["lo"], lt["ab"]["giant"]["hi"]]),
        ("the patch lost, {}x with B=64 and {}x with B=128", [lt["kept"][64, 64], lt["kept"][64, 128]]),
        ("the giant request's {} partials cost more", [lt["partials"]]),
        ("the cap stayed below {} requests", [lt["cap_batch"]]),
        ("where the patch ran at {}x)", [lt["kept"][128, 64]]),
        ("Over the {} batches the patch changed, that rule comes to {}x the capped schedule's speed",
         [lt["ab"]["changed"]["n"], lt["ab"]["landed"]]),
        ("The {} giant batches whose partition it changes ran {}-{}x faster",
         [var["changed"]["n"], var["changed"]["lo"], var["changed"]["hi"]]),
        ("the package took it where a request has more than {} partials on average (`schedule.FEW_PARTIALS`): the {} "
         "batches there from B=64 up ran {}-{}x faster, {}x in geomean, and the {} with fewer partials ran at {}-{}x",
         [var["few"], var["taken"]["n"], var["taken"]["lo"], var["taken"]["hi"], var["taken"]["geomean"],
          var["left"]["n"], var["left"]["lo"], var["left"]["hi"]]),
        ("from B=64 up, {}-{}x over {} batches, {}x in geomean",
         [var["below"]["lo"], var["below"]["hi"], var["below"]["n"], var["below"]["geomean"]]),
        ("it ran {}-{}x faster at B=16 and {}-{}x at B=64, B=128 and B=256. The package takes it in batches of at most "
         "{} requests", [h32["b16"]["lo"], h32["b16"]["hi"], h32["big"]["lo"], h32["big"]["hi"], h32["batch"]]),
        ("a page-time of 16 heads costs {}-{} of one of 32 heads (time over modelled makespan) from B=64 up and {} at "
         "B=16",
         [*hb["big"], hb["b16"]]),
        ("Fitted there on {} problems of two runs, {} batches", [hb["n"], hb["batches"]]),
        ("{} puts the choice within {}% of the best option at {} of them, the worst {}x; {} puts it there at {}, the "
         "worst {}x", [hb["cost"], 5, hb["at"][0], hb["at"][1], 0.65, hb["at65"][0], hb["at65"][1]]),
        ("The fit is narrow: {} and {} already lose {} and {}", [0.78, 0.84, *hb["lost"]]),
        ("held out the cost fitted on the others, {}, leaves its one request at {}x", hb["held"]),
        ("choice runs at {}x FlashMLA's speed in geomean at h_q=32, {}x at h_q=64 and {}x at h_q=128, the lowest "
         "batches at {}x, {}x and {}x; it is within {}% of the best option at {} of the {} batches",
         [*rr["now"], *rr["low"], 5, rr["within"], rr["n"]]),
        ("the first run's best option gave {}x, {}x and {}x", rr["then"]),
        ("timed every family batch and {} uniform shapes before its deadline, {} problems. As it ran (the scale at "
         "{}), its choice is within {}% of the best option at {} of them; with the scale fitted on these same "
         "timings, at {} (in sample)", [rr["uniform"], rr["ours"][1], 0.65, 5, rr["as_run"], rr["ours"][0]]),
        ("h_q=64, L=1024 (B=4 and B=16, {}x and {}x)", rr["split"]),
        ("With stage 2 in the split count and the choice (below), at all {}", [rr["today"]]),
        ("the model predicts every batch at h_q=64 and h_q=128 within {}% for ours and {}% for FlashMLA, and each "
         "family left out of the fit within {}% and {}%", [*cm["max_rel"], *cm["lofo"]]),
        ("over the {} batches of B=128 and B=256, ours is {} us slower than FlashMLA in mean, and the partition "
         "accounts for {} us of it", [cm["n128"], cm["gap128"], cm["part128"]]),
        ("A page costs ours {} us and FlashMLA {}, and the two ranges overlap", cm["a128"]),
        ("over these batches the page term is {} us in our favour at the fitted costs", [cm["page128"]]),
        ("A segment costs ours {} us, {} page-times, and FlashMLA {} us, {} page-times, the ranges apart: that term "
         "is {} us of the gap", [*cm["seg128"], cm["segterm128"]]),
        ("(bimodal, B=256, {} us) it is {} us, and the fit leaves {} us unexplained", cm["worst128"]),
        ("the gap over the {} batches of B=128 and B=256 is {} us in mean", [cm["n64"], cm["gap64"]]),
        ("A page costs ours less ({} us against {}, {} us in our favour), a segment more ({} page-times against {}, "
         "{} us) and a partial more ({} us against {}, {} us)",
         [*cm["a64"], cm["page64"], *cm["seg64"], cm["segterm64"], *cm["c64"], cm["partterm64"]]),
        ("ours' fixed term moves over {} us as families are left out", [cm["fixed64"]]),
        ("At the giant batch of B=256, {} us behind, stage 2 merges the giant request's {} partials one at a time "
         "(`STAGE2_FEW_WIDE`; FlashMLA's walk makes {}): the merge term is {} us",
         [cm["worst64"], *cm["pieces64"], cm["merge64"]]),
        ("{} timings in ten files, one batch timed twice), the backend's choice is within {}% of the best option at {}",
         [sm["n"], 5, sm["package"]]),
        ("to the balanced schedule, {}x slower; counted on the rule's side of `makespans` only, stage 2 loses {} "
         "problems", [sm["count_only"], sm["rule_lost"]]),
        ("With a launch of {} page-times, the merge at {} times the byte model and a margin of {}, the three problems "
         "of the ours-alone run come within {}% ({} in all)", [sm["launch"], sm["merge"], sm["margin"], 5,
                                                                sm["fixed"]]),
        ("h_q=128, B=1, L=2048 falls out, {}x", [sm["kernel"]]),
        ("yet one runs fastest at {} splits and the other at {}", sm["fastest"]),
        ("(B=1 to B=16, L=1024 and 2048, h_q=32 to h_q=128; {} timings in all). There the model of stage 1 alone "
         "misses {} problems; the model with stage 2 brings {} of them within {}% and loses one (h_q=32, B=4, "
         "L=2048: {} splits where {} run {}x faster)",
         [ho["n"], ho["missed"], ho["gained"], 5, *ho["splits"], ho["x"]]),
        ("It is now the package's: a launch of {} page-times, the merge at {} and a margin of {}", ho["constants"]),
        ("on each of the three family benches its choice is within {}% of the best option at {} of {} problems",
         [5, *ho["within"]]),
        ("At h_q=16 the backend's choice runs at {}x FlashMLA's speed in geomean over the families, the lowest batch "
         "at {}x, and at {}x over the uniform shapes, the lowest at {}x", [*nr["h16"], *nr["uni"]]),
        ("With B=128 and B=256 it runs at {}x at h_q=32, {}x at h_q=64 and {}x at h_q=128, the lowest batches at {}x, "
         "{}x and {}x. The choice was the best option at each of their {} problems", [*nr["geo"], *nr["low"], nr["n"]]),
        ("{} of the {} pairs of family and head count reach {}x in geomean with no batch below {}x",
         [nr["met"], nr["pairs"], *nr["bars"]]),
        ("Of the {} family batches, {} run below {}x: {} of the {} at h_q=64 and h_q=128 from B=128 up, the other {}",
         [nr["fam"], nr["below"], nr["bars"][1], *nr["gap"], nr["rest"]]),
        ("ran at {}x the kept kernel's speed in geomean ({}-{}x over {} batches",
         [sa["geomean"], sa["lo"], sa["hi"], sa["n"]]),
        ("FlashMLA reaches {} of that floor at h_q=16", [roof["top"]]),
        ("where the best option of ours reaches {}. So at h_q=16 the bar of {}x FlashMLA asks for more than the "
         "measured copy rate at {} of the {} family batches", [roof["best"], 1.05, roof["over"], roof["n"]]),
        ("FlashMLA runs at {}-{} of the floor in geomean over the families (B=64, B=128 and B=256), and the bar "
         "asks at most {} of it", [*roof["fm"], roof["needs"]]),
    ]


def read(template: str, text: str) -> list[tuple[str, int]]:
    """The numbers ``text`` prints where ``template`` has ``{}``, as strings, and where the match starts."""
    pattern = NUMBER.join(re.escape(norm(part)) for part in template.split("{}"))
    found = list(re.finditer(pattern, text))
    assert len(found) == 1, f"the essay should say once: {template!r} (found {len(found)})"
    return [(found[0][i], found[0].start(i)) for i in range(1, found[0].re.groups + 1)]


def close(printed: str, value: float) -> bool:
    """Whether ``value`` rounds to ``printed``: within half a unit of its last digit."""
    digits = len(printed.split(".")[1]) if "." in printed else 0
    return abs(float(printed) - value) <= 0.5 * 10 ** -digits + 1e-9


def test_every_number_of_the_essay_is_recomputed():
    text = norm(ESSAY.read_text(encoding="utf-8"))
    wrong, covered = [], set()
    for template, values in claims():
        got = read(template, text)
        assert len(got) == len(values), template
        for (printed, at), value in zip(got, values, strict=True):
            covered.add(at)
            if not close(printed, value):
                wrong.append(f"{template!r}: prints {printed}, the results give {value:.4g}")
    assert not wrong, "docs/kernel_essay.md differs from its results files:\n" + "\n".join(wrong)
    stray = [m[0] for m in re.finditer(NUMBER, identifiers_blanked(text)) if m.start() not in covered]
    assert not stray, f"numbers in docs/kernel_essay.md that no claim recomputes: {stray}"


def identifiers_blanked(text: str) -> str:
    """``text`` with identifiers (code spans, source lines, shapes, commits, counts of heads) blanked to the same
    length, so that only measured numbers remain where they were."""
    patterns = [r"`[^`]*`", r"\bL=\d+ (?:or|and) \d+\b", r"\*\*\d+ or \d+ heads",
                r"\blines? \d+(?:-\d+)?(?:, \d+(?:-\d+)?)*(?: and \d+(?:-\d+)?)?",
                r"\b(?:h_q|B|L|h_k)=\d+", r"\b[LB]=\d+K?(?:, \d+K?)*(?: and \d+K?)?", r"\b\d+K\b",
                r"\b\d+-token\b", r"\b\d+ heads\b", r"\b\d+ (?:or \d+ )?heads a program\b", r"Triton \d+\.\d+\.\d+",
                r"\b\d+ output columns\b", r"\b\d+ in log2 units\b", r"2\^8", r"\bthe value \d+\b",
                r"\bthe H200's \d+ SMs\b", r"\bFlashAttention-\d\b", r"\bsection \d+\b", r"\bnotebook \d+\b",
                r"\bnine \d+-column\b", r"\b\d+ output\b", r"\bexactly 1\b", r"\bof \d+\b(?= \()",
                r"\boverhead of \d+\b",
                r"\b[Ss]tage \d\b", r"\bpair's tile-\d\b", r"\bP\d V\d_\w+\b", r"\bP\d\b", r"\bat \d+\.(?= What)",
                r"\bof two CTAs\b", r"\bat 2, 3, 4 or 10 instead of 5\b", r"\bwarpgroup \d\b", r"\b0\.9x\b",
                r"\bsm_90a\b", r"\bthe \d+ SMs\b", r"\bH200\b", r"\b(?:bf|fp)16\b", r"\b\d+-bit\b", r"\bL2\b",
                r"\bfloat64\b", r"\b\*\*\d+ or \d+ heads", r"\bL=1024 (?:or|and) 4096\b"]
    for pattern in patterns:
        text = re.sub(pattern, lambda m: "_" * len(m[0]), text)
    return text


def test_a_drifted_number_is_caught():
    text = norm(ESSAY.read_text(encoding="utf-8"))
    template, values = claims()[0]
    printed, at = read(template, text)[0]
    drifted = text[:at] + str(int(printed[0]) % 9 + 1) + text[at + 1:]
    (again, _), *_ = read(template, drifted)
    assert not close(again, values[0])


def test_span_and_close_agree_at_the_printed_step():
    assert close("0.907", 0.90749) and not close("0.907", 0.9076) and close("14.6", 14.59)
    assert span([1.0, 1.004], 2) == "1.00"
