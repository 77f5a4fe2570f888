"""docs/kernel_essay.md's numbers, each recomputed from the results file it names (or from FlashMLA's walk,
``mla_edu.kernels.flashmla_schedule``).

Each claim is a sentence of the essay with ``{}`` where a number stands; the test finds the sentence, reads the
numbers the essay prints there and checks each against the recomputed value to within half a unit of its last
printed digit. Every other number in the essay must be an identifier (a source line, a shape, a commit, a file name):
a number that no claim recomputes fails the test.
"""

from __future__ import annotations

import re
from statistics import median

from docs_text import norm, span

from kernel_lab.tests.results import path, result
from kernel_lab.tests.test_results_prose import stale_max_table, uniform_row, v20_numbers
from mla_edu.kernels import flashmla_schedule as fs
from mla_edu.paths import REPO_ROOT
from mla_edu.serving.backends.base import page_table_width
from mla_edu.util import PAGE_SIZE

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
    package's margin then (stage 1 only), the launch-order model's held out, the best option against FlashMLA, and
    the bar of "within" (a percentage)."""
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
    fm = cf.best_x_flashmla(problems)
    return dict(batches=sum(bool(p.x_flashmla) for p in problems), problems=len(problems), old=old, held=held,
                margin=cf.STAGE1_MARGIN, fm=fm, pct=100 * (cf.WITHIN - 1))


def long_tail_numbers() -> dict:
    """The paragraph on one giant request: the capped giant batches below h_q=128, their pieces and makespans against
    FlashMLA's walk, their measured ratios at h_q=32; the giant batches where the two models are equal; and the piece
    cap's A/B (``long_tail.ab_numbers``): the giant batches where the rule landed lifts it, and its loss at h_q=64."""
    from kernel_lab.tools import long_tail as lt
    from mla_edu.kernels import schedule as sc

    table = lt.rows()
    giant = [r for r in table if r.family == "giant"]
    low = [r for r in giant if r.differ and r.heads < 128]
    assert {(r.heads, r.batch) for r in low} == {(h, b) for h in (16, 32, 64) for b in (16, 64, 128)}
    (pieces,), (ours,) = {r.pieces for r in low}, {r.capped for r in low}
    equal = [r for r in giant if r.fm == r.capped]
    assert {(r.heads, r.batch) for r in equal} == {(128, 128), (128, 256)}  # "at h_q=128 with B=128 and B=256"
    ab = lt.ab_numbers()
    kept = {(r["heads"], r["batch"]): r["x"] for r in ab["kept"]["rows"] if r["family"] == "giant"}
    assert all(r["heads"] >= 64 for r in ab["kept"]["rows"])  # "64 heads or more, few partials a request"
    loss = next(r for r in table if (r.family, r.heads, r.batch) == ("giant", 64, 64))
    assert loss.kept_as_landed and ab["loss"]["kept"]  # "few partials a request": the rule as landed kept the cap

    def span(rows):
        return [min(r.x for r in rows), max(r.x for r in rows)]

    return dict(pieces=pieces, ours=ours, fm_pieces=[min(r.fm_pieces for r in low), max(r.fm_pieces for r in low)],
                fm=[min(r.fm for r in low), max(r.fm for r in low)], x32=span([r for r in low if r.heads == 32]),
                equal=span(equal), lifted=[ab["giant"]["lo"], ab["giant"]["hi"]], loss=kept[64, 64],
                partials=loss.fm_pieces, cap_batch=sc.PIECE_CAP_BATCH)


def half_block_numbers() -> dict:
    """The sentence on ``schedule.HALF_BLOCK_PAGE_COST`` (``kernel_lab.tools.half_block_fit``): the batches the
    16-head programs run at, the package's scale and its score, and the one request missed with its family held out."""
    from kernel_lab.tools import half_block_fit as hb
    from mla_edu.kernels import schedule as sc
    from mla_edu.kernels.workspace import HALF_BLOCK_BATCH

    probs, sms = hb.problems()
    at = hb.score(probs, sc.HALF_BLOCK_PAGE_COST, sms)
    fits = {f: hb.fit([p for p in probs if p.family != f], sms) for f in {p.family for p in probs}}
    missed = [p for p in probs if p.regret(fits[p.family], sms) > hb.WITHIN]  # each family held out
    assert [(p.family, p.lens) for p in missed] == [("L16384", (16384,))]  # "the uniform 16K held out"
    return dict(batch=HALF_BLOCK_BATCH, n=len(probs), cost=sc.HALF_BLOCK_PAGE_COST, at=at,
                held=missed[0].regret(fits["L16384"], sms))


def before_stage2_board() -> dict:
    """Issue 52's scoreboard on every run before stage 2 changed (up to the 4d46283 runs), at the rules then."""
    from kernel_lab.tools import acceptance as acc

    last = acc.RUNS.index(acc.LAB / "family_bench_h200_fm_4d46283_run3.json")
    return acc.scoreboard(acc.load(acc.RUNS[:last + 1]), rules_from="a2e9367")


def stage2_board() -> dict:
    """Issue 52's scoreboard on every run up to the three at 261e2bd (where stage 2 changed), at today's rules: what
    the essay said of the current rules before the whole run at 1699741."""
    from kernel_lab.tools import acceptance as acc

    last = acc.RUNS.index(acc.LAB / "family_bench_h200_fm_261e2bd_run3.json")
    return acc.scoreboard(acc.load(acc.RUNS[:last + 1]))


def whole_run_numbers() -> dict:
    """The sentences on the whole run at 1699741: issue 52's acceptance as ``acceptance_h200.md`` scores it now."""
    from kernel_lab.tools import acceptance as acc
    from kernel_lab.tools import family_bench as fb

    board = acc.scoreboard(acc.load())
    assert acc.RUNS[-1].name == "family_bench_h200_fm_1699741_run1.json" and acc.RULES_FROM == "261e2bd"
    got = board["picks"]
    assert not any(p.older for p in got.values()) and len(got) == len(board["keys"])  # "timed all ... problems"
    once = [p for p in got.values() if len(p.pooled) == 1]
    assert {p.pooled[0] for p in once} == {acc.RUNS[-1].name}  # those problems' one run is the new one
    (overall,) = [c for c in board["choice"] if c["heads"] is None]
    assert overall["held"] == overall["current"]  # "every one held out from the fits of the choice's constants"
    fam = [p for k, p in got.items() if k[0] == "family"]
    low = min(fam, key=lambda p: p.x)
    uni = {u["heads"]: u for u in board["uniform"]}
    assert uni[16]["all"]["met"] and not any(uni[h]["big"]["met"] for h in (32, 64, 128))
    assert [uni[h]["big"]["low"].key[1::2] for h in (32, 64, 128)] == [("L1024", 128), ("L1024", 128), ("L1024", 64)]
    assert low.key[1:] == ("normal_16k", 32, 16)  # "the lowest ... (normal_16k, h_q=32, B=16)"
    run = result(acc.RUNS[-1].name)
    r = next(r for r in run["uniform"]
             if (r["family"], r["heads"], r["batch"]) == ("L1024", 128, 128))  # the headline bench's deciding shape
    choice = fb.backend_choice(r, run["info"]["sm_count"])
    ours_us, fm_us = fb.median_us(r, choice), fb.median_us(r, "flashmla")
    v = v20_numbers()  # the spans of the paragraph above: ours' and FlashMLA's times at that shape before
    assert min(v["ours"]) <= ours_us <= max(v["ours"]) and min(v["fm"]) <= fm_us <= max(v["fm"])  # "within the spans"
    assert fm_us > median(v["fm"]) and abs(ours_us - median(v["ours"])) < abs(fm_us - median(v["fm"]))  # "moved"
    return dict(deciding=fb.x_flashmla(r, choice)[0], h16=acc.H16_FLOOR, ours_us=ours_us, fm_us=fm_us,
                n=len(got), within=overall["within"], worst=overall["worst"].regret, pct=round(100 * (acc.WITHIN - 1)),
                met=sum(r["met"] for r in board["ragged"]), pairs=len(board["ragged"]), bar=acc.GEOMEAN_BAR,
                floor=acc.FLOOR, below=sum(not acc.passes(p.x, acc.FLOOR) for p in fam), fam=len(fam), lowest=low.x,
                uni=[uni[h]["big"]["low"].x for h in (32, 64, 128)], once=len(once), runs=acc.MIN_RUNS)


def acc_board_served() -> dict:
    """The choice in a server at DeepSeek-V3's context limit, from the H200's scoreboard (``acceptance.served_choice``):
    the problems whose choice a run timed, those within 5%, the worst; the same with the whole table read
    (``whole``), as the backend read it before ``table_widths``."""
    from kernel_lab.tools import acceptance as acc
    from kernel_lab.tools import family_bench as fb
    from mla_edu.serving.backends.triton import table_widths

    runs = acc.load()
    board = acc.scoreboard(runs)
    now = [p for p in board["picks"].values() if not p.older]
    assert all(p.served == p.choice and acc.within(p.served_regret) for p in now)  # "the choice is the bench's"
    rows = {(r.name, kind, row["family"], row["heads"], row["batch"]): row
            for r in runs for kind in ("family", "uniform") for row in r.data[kind]}
    sms = runs[-1].data["info"]["sm_count"]
    wider = sum(acc.served_width(rows[(p.run, *p.key)]) != fb.table_width(rows[(p.run, *p.key)]) for p in now)
    whole = {}  # the whole table: the pooled runs' median regret where they timed its choice with the bench's launch
    for p in now:
        used = [rows[(name, *p.key)] for name in p.pooled]
        option = acc.served_choice(used[-1], sms, whole=True)
        if acc.served_as_benched(used[-1], sms, whole=True) and all(option in r["us"] for r in used):
            whole[p.key] = (option, acc.median_regret(used, option), p)
    worst_key = max(whole, key=lambda k: whole[k][1])
    option, regret, worst = whole[worst_key]
    assert (worst.key[0], option) == ("uniform", "balanced") and worst.best == worst.choice  # "the count ... gives"
    # "more splits, or the balanced schedule where the bench's table kept fewer splits, and at one problem a split
    # count where it took the balanced schedule"
    served = {p.key: acc.served_choice(rows[(p.run, *p.key)], sms, whole=True) for p in now}
    changed = {(p.choice == "balanced", served[p.key] == "balanced") for p in now if served[p.key] != p.choice}
    assert changed == {(False, False), (False, True), (True, False)}
    assert sum(p.choice == "balanced" and served[p.key] != "balanced" for p in now) == 1
    assert all(int(served[p.key][6:]) > int(p.choice[6:]) for p in now
               if served[p.key] != p.choice and "balanced" not in (served[p.key], p.choice))
    within = sum(acc.within(r) for _, r, _ in whole.values())
    return dict(context=acc.SERVED_CONTEXT, numbers=[round(100 * (acc.WITHIN - 1)), within, len(whole), regret,
                                                    int(worst.key[1][1:]), worst.key[2], worst.key[3],
                                                    int(worst.best.split("_")[1])],
                now=[len(now), wider], graphs=2 * len(table_widths(page_table_width(acc.SERVED_CONTEXT))))


def h100_numbers() -> dict:
    """The sentences on the four runs on an H100: their scoreboard (``acceptance_h100.md``), and the clocks the third
    logged (``family_bench.gpu_state``; the fourth rotated its options' order, so its sample follows no one kernel)."""
    from kernel_lab.tools import acceptance as acc

    runs = acc.load(acc.H100_RUNS)
    assert {(r.data["info"]["gpu"], r.data["info"]["sm_count"]) for r in runs} == {("NVIDIA H100 80GB HBM3", 132)}
    board = acc.scoreboard(runs)
    (overall,) = [c for c in board["choice"] if c["heads"] is None]
    missed = sorted(p.key for p in board["picks"].values() if p.regret > acc.WITHIN)
    assert missed == [("uniform", "L1024", h, 64) for h in (16, 32, 64)] and overall["worst"].key[2] == 64
    assert {(p.choice, p.best) for p in board["picks"].values() if p.regret > acc.WITHIN} == {("split_2", "split_1")}
    fam = [p for k, p in board["picks"].items() if k[0] == "family"]
    low = min(fam, key=lambda p: p.x)
    assert low.key[1:] == ("normal_4k", 128, 16)
    third = runs[acc.H100_RUNS.index(acc.LAB / "family_bench_h100_fm_69707eb_run1.json")]
    fourth = runs[acc.H100_RUNS.index(acc.LAB / "family_bench_h100_fm_bd22e84_run1.json")]
    assert "order" in fourth.data["info"]  # "its options' order rotated each round"
    return dict(pct=round(100 * (acc.WITHIN - 1)), within=overall["within"], n=overall["n"],
                worst=overall["worst"].regret, met=sum(r["met"] for r in board["ragged"]), pairs=len(board["ragged"]),
                below=sum(not acc.passes(p.x, acc.FLOOR) for p in fam), fam=len(fam), floor=acc.FLOOR, lowest=low.x,
                always=sum(p.always_below for p in fam), runs=len(runs), **h100_clocks(third.data),
                crossing_passes=sum(p.crosses for p in fam if acc.passes(p.x, acc.FLOOR)),
                small_behind=_h128_small_behind(board), runs_each={p.runs for p in board["picks"].values()},
                fourth=h100_clocks(fourth.data, rotated=True))


def _h128_small_behind(board: dict) -> int:
    """The batch size (16) at which both of h_q=128's glance cells, ragged and uniform, are behind FlashMLA."""
    (row,) = [r for r in board["glance"] if r["heads"] == 128]
    assert row["family"][16]["geomean"] < 1 and row["uniform"][16]["geomean"] < 1
    return 16


def h100_clocks(data: dict, rotated: bool = False) -> dict:
    """Of a family-bench run's problems, those after which a slowdown reason was set: every one the power cap (0x4)
    alone; how many, how many of them at h_q=128, and the most power drawn after any problem."""
    from kernel_lab.tools import family_bench as fb

    rows = data["family"] + data["uniform"]
    capped = fb.slowed(rows)
    assert {r["gpu_after"]["reasons"] & fb.SLOWDOWN for r in capped} == {0x4}
    # the last option timed of a problem is SGLang's, or FlashMLA's where SGLang cannot run: what the sample follows
    # (a run without "order" in its info timed every round in the options' order; later runs rotate it)
    assert rotated or ("order" not in data["info"] and all(list(r["us"])[-1] in ("sglang_own", "flashmla")
                                                            for r in rows))
    sm_max = int(re.search(r"(\d+) MHz", data["info"]["setup"])[1])  # nvidia-smi's clocks.max.sm, the setup line
    return dict(capped=len(capped), problems=len(rows), capped_h128=sum(r["heads"] == 128 for r in capped),
                watts=max(r["gpu_after"]["power_w"] for r in rows), sm_max=sm_max,
                capped_sm_low=min(r["gpu_after"]["sm_mhz"] for r in capped))


def per_gpu_numbers() -> dict:
    """The sentences on the constants refitted on the H100 (``per_gpu_fit``)."""
    from kernel_lab.tools import per_gpu_fit as pg

    x = pg.numbers()
    best = x["best"]
    assert x["package"][0] - x["held_within"] == 1  # "one fewer than the H200's constants"
    return dict(launch=best.split_cost, margin=best.margin, best=x["best_score"][0], n=x["problems"],
                held=x["held_within"],
                h100_on_h200=x["on_h200"][best.name][1], package_on_h200=x["on_h200"][pg.PACKAGE.name][1])


def glance_numbers() -> dict:
    """The paragraph that opens 'Where it stands', from the table 'At a glance' of ``acceptance_h200.md``
    (``acceptance.glance``): the largest batch size up to which every cell is ahead, and from the next one on, every
    cell within 5% at 32 heads and more (some on each side) and level (1.00 at two decimals) or ahead at 16."""
    from kernel_lab.tools import acceptance as acc

    rows = acc.scoreboard(acc.load())["glance"]
    every = [(r["heads"], b, c) for r in rows for kind in ("family", "uniform") for b, c in r[kind].items()]
    sizes = sorted({b for _, b, _ in every})
    up_to = max(b for b in sizes if all(c["geomean"] >= 1 for _, bb, c in every if bb <= b))
    b_from = min(b for b in sizes if b > up_to)
    near = [c["geomean"] for h, b, c in every if b >= b_from and h >= 32]
    assert all(abs(x - 1) <= 0.05 for x in near) and min(near) < 1 < max(near)  # "within 5%, on either side"
    assert all(round(c["geomean"], 2) >= 1 for h, b, c in every if b >= b_from and h == 16)  # "level or ahead"
    assert min(c["low"] for _, b, c in every if b >= b_from) < 1  # "at its worst batches it is behind"
    assert min(c["low"] for h, b, c in every if b <= up_to and h == 16) >= 1  # "from 32 heads up single families"
    cells = [c for _, _, c in every]
    assert sum(c["runs"][1] == 1 for c in cells) > len(cells) / 2  # "most cells rest on one run"
    return dict(up_to=up_to, b_from=b_from, pct=5, h_from=32, h16=16,
                low_small=min(c["low"] for h, b, c in every if b <= up_to and h >= 32))


def latest_runs_numbers() -> dict:
    """The sentences on the three whole runs at 4d46283: issue 52's acceptance as scored on every run up to them, at
    the rules then, and the headline bench's deciding shape in each of them."""
    from kernel_lab.tools import acceptance as acc
    from kernel_lab.tools import family_bench as fb

    board = before_stage2_board()
    got = board["picks"]
    assert all(len(p.pooled) >= acc.MIN_RUNS for p in got.values())  # "each ratio ... the median of at least"
    fam = [p for k, p in got.items() if k[0] == "family"]
    low = [p for p in fam if not acc.passes(p.x, acc.FLOOR)]
    uni = {u["heads"]: u for u in board["uniform"]}
    deciding = []  # the headline bench's deciding shape, h_q=128, B=128, L=1024, in each run at 4d46283
    for name in (f"family_bench_h200_fm_4d46283_run{i}.json" for i in (1, 2, 3)):
        r = next(r for r in result(name)["uniform"] if (r["family"], r["heads"], r["batch"]) == ("L1024", 128, 128))
        deciding.append(fb.x_flashmla(r, fb.backend_choice(r, 132))[0])
    assert all(uni[h]["big"]["low"].key[1::2] == ("L1024", 128) for h in (32, 64, 128))  # "each at B=128, L=1024"
    return dict(runs=acc.MIN_RUNS, met=sum(r["met"] for r in board["ragged"]), pairs=len(board["ragged"]),
                below=len(low), fam=len(fam), bar=acc.GEOMEAN_BAR, floor=acc.FLOOR,
                uni=[uni[h]["big"]["low"].x for h in (32, 64, 128)], deciding=deciding)


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
    reading), and issue 52's acceptance at the current rules (the 261e2bd runs; ``acceptance_h200.md``) against the
    runs before (``before_stage2_board``)."""
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
                         hi=top["x"], ctl_n=len(ctl), ctl=geometric_mean([r["x"] for r in ctl]))
    assert (sp.GEOMEAN, sp.FLOOR) == (1.01, 0.98)
    board = stage2_board()
    now = {k: p for k, p in board["picks"].items() if not p.older}
    then = before_stage2_board()["picks"]
    assert acc.RULES_FROM == "261e2bd" and all(set(p.pooled) <= {f"family_bench_h200_fm_261e2bd_run{i}.json"
                                                                   for i in (1, 2, 3)} for p in now.values())
    lowest = min(now.values(), key=lambda p: p.x)
    assert lowest.key == ("family", "lognormal_0.5", 64, 128)
    assert {k[2:] for k in now} == {(h, b) for h in (64, 128) for b in (128, 256)} and {k[0] for k in now} == {
        "family"}  # "the families at h_q=64 and h_q=128 with B=128 and B=256"
    (overall,) = [c for c in board["choice"] if c["heads"] is None]
    assert not any(r["met"] for r in board["ragged"])  # "the acceptance is not met"
    return dict(**out, giant=[then["family", "giant", 64, 256].x, now["family", "giant", 64, 256].x],
                giant128=[then["family", "giant", 128, 128].x, now["family", "giant", 128, 128].x],
                n=len(now), best=overall["best"], below=sum(not acc.passes(p.x, acc.FLOOR) for p in now.values()),
                floor=acc.FLOOR, lowest=lowest.x, rest=len(board["keys"]) - len(now), gates=[sp.GEOMEAN, sp.FLOOR])


def ab_numbers(name: str, patch: str) -> dict:
    """A committed ``partition_ab`` run (the json ``name``, the patch at ``patch``): base / patched over its batches
    (``partition_ab.table``), and its output against float64 no further off than the kept kernel's, batch by batch
    ("correct against float64"); its ``info`` for the sentence's scope."""
    from statistics import geometric_mean

    from kernel_lab.tools import partition_ab as ab

    run = result(name)
    rows = ab.table(run, REPO_ROOT / patch)
    err = {v: [max(x["err"] for r in run["runs"] if r["variant"] == v for x in r["rows"]
                   if (x["family"], x["heads"], x["batch"]) == (w["family"], w["heads"], w["batch"])) for w in rows]
           for v in ("base", "patched")}
    assert all(p <= b for p, b in zip(err["patched"], err["base"]))
    xs = [r["x"] for r in rows]
    return dict(geomean=geometric_mean(xs), lo=min(xs), hi=max(xs), n=len(rows), info=run["info"])


def segment_ahead_numbers() -> dict:
    """The sentence on segment_ahead.patch."""
    got = ab_numbers("partition_ab_h200_segment_ahead.json", "kernel_lab/results/tma_variants/segment_ahead.patch")
    assert got["info"]["heads"] == [16, 32]  # "h_q=16 and h_q=32"
    return got


def pdl_stage2_numbers() -> dict:
    """The sentence on pdl_partition_first.patch, timed on an H100."""
    got = ab_numbers("partition_ab_h100_stage2_pdl_partition_first.json",
                     "kernel_lab/results/stage2_variants/pdl_partition_first.patch")
    info = got["info"]
    assert info["gpu"].startswith("NVIDIA H100") and info["heads"] == [32, 64, 128] and info["batches"] == [64, 128]
    return got


def roofline_numbers() -> dict:
    """The paragraph on the ceilings (``kernel_lab.tools.roofline``)."""
    from statistics import geometric_mean

    from kernel_lab.tools import roofline as rf

    table = rf.rows()
    top = max(table, key=lambda r: r.fm)
    assert (top.family, top.heads, top.batch) == ("normal_16k", 16, 256)  # "normal lengths, mean 16K, B=256"
    assert max(table, key=lambda r: r.best).heads == 16  # "at h_q=16 the best batches"
    over = [r for r in table if r.needs > 1]
    assert {r.heads for r in over} == {16}  # "at h_q=16"
    big = [[r for r in table if r.heads == h and r.batch == b] for h in (64, 128) for b in (64, 128, 256)]
    fm = [geometric_mean(r.fm for r in sel) for sel in big]
    return dict(top=top.fm, best=max(r.best for r in table), over=len(over), n=len(table), fm=[min(fm), max(fm)],
                needs=max(r.needs for sel in big for r in sel))


def cost_fit_numbers() -> dict:
    """The section on the cost model (``kernel_lab.tools.cost_fit``): fit quality at h_q=64 and 128, and per head
    count the gap over the families at B >= 128 split by term, with the claims the prose makes about ranges, signs
    and directions."""
    from kernel_lab.tools import cost_fit as cf
    from mla_edu.kernels import schedule as sc
    from mla_edu.kernels import split_kv_triton as skt
    from mla_edu.util import cdiv

    res = cf.run()
    assert [p.name for p in cf.RUNS] == ["family_bench_h200_fm_1699741_run1.json"]  # "the whole family bench at"
    h64, h128 = res["heads"][64], res["heads"][128]
    fits = [r["fits"] for r in (h64, h128)]
    o128, f128 = h128["fits"]["balanced"], h128["fits"]["flashmla"]
    o64, f64 = h64["fits"]["balanced"], h64["fits"]["flashmla"]
    (alo, ahi), (flo, fhi) = o128.ranges[0], f128.ranges[0]
    assert alo <= fhi and flo <= ahi  # "the two ranges overlap"
    def apart(o, f) -> tuple[set, set]:  # the terms whose leave-one-family-out ranges are apart: ours higher, lower
        return ({cf.TERMS[i] for i in range(len(cf.TERMS)) if o.ranges[i][0] > f.ranges[i][1]},
                {cf.TERMS[i] for i in range(len(cf.TERMS)) if o.ranges[i][1] < f.ranges[i][0]})

    # "three costs are higher for ours ...: a segment, the fixed cost of a call and, at h_q=64, a merge step"; "a page
    # costs ours as much at h_q=128 (the ranges overlap) and less at h_q=64"; a partial's ranges overlap at h_q=64
    assert apart(o128, f128) == ({"segments", "fixed"}, set())
    assert apart(o64, f64) == ({"segments", "fixed", "merge"}, {"pages"})
    g128, g64 = h128["big"], h64["big"]
    assert g128.n == g64.n == 16 and {p.batch for r in (h64, h128) for p in r["points"] if p.batch >= cf.BIG_BATCH
                                      and cf.is_family(p)} == {128, 256}  # "the 16 family batches of B=128 and B=256"
    assert sum(g128.partition) < 0 and g128.residual < 0 and g128.kernel[1] > g128.measured > 0  # "in our favour"
    assert g64.measured < 0 and g128.kernel[0] < 0 and g64.kernel[0] < 0  # "faster", pages "in our favour"
    w128, w64 = h128["worst"], h64["worst"]
    assert (w128.family, w128.batch) == ("normal_4k", 128) and (w64.family, w64.batch) == ("bimodal", 256)
    sms = res["sms"]
    (giant,) = [p for p in h64["points"] if (p.family, p.batch) == cf.GIANT]
    g_gap = h64["giant_gap"]
    parts = sc.num_parts(64, sms, giant.batch, max(cdiv(x, cf.PAGE) for x in giant.lens))
    assert skt.stage2_config(giant.batch, 64, parts) == skt.STAGE2_FEW_WIDE  # "one at a time"
    checked = [r["check"][k] for r in (h64, h128) for k in cf.KERNELS]
    assert all(c and c[0] == 48 for c in checked)  # the 16 batches at each head count in each of the three runs
    return dict(
        max_rel=[100 * max(f["balanced"].max_rel for f in fits), 100 * max(f["flashmla"].max_rel for f in fits)],
        lofo=[100 * max(f["balanced"].lofo_max for f in fits), 100 * max(f["flashmla"].lofo_max for f in fits)],
        check_batches=sum(r["check"]["balanced"][0] // len(cf.CHECK_RUNS) for r in (h64, h128)),
        check=[100 * max(r["check"]["balanced"][1] for r in (h64, h128)),
               100 * max(r["check"]["flashmla"][1] for r in (h64, h128))],
        n128=g128.n, gap128=g128.measured, part128=-sum(g128.partition), a128=[o128.coefs[0], f128.coefs[0]],
        seg128=[o128.coefs[1], o128.segment_pages, f128.coefs[1], f128.segment_pages],
        segterm128=g128.kernel[1], left128=-g128.residual,
        worst128=[h128["worst_gap"].measured, h128["worst_gap"].kernel[1], h128["worst_gap"].residual],
        gap64=-g64.measured, a64=[o64.coefs[0], f64.coefs[0]], page64=-g64.kernel[0],
        seg64=[o64.segment_pages, f64.segment_pages], segterm64=g64.kernel[1], c64=[o64.coefs[2], f64.coefs[2]],
        worst64=[h64["worst_gap"].measured, h64["worst_gap"].kernel[1]],
        more=[o128.coefs[1] - f128.coefs[1], o64.coefs[1] - f64.coefs[1], o128.coefs[4] - f128.coefs[4],
              o64.coefs[4] - f64.coefs[4], o64.coefs[3], f64.coefs[3]],
        giant64=[g_gap.measured, giant.features("balanced", sms).max_partials,
                 giant.features("flashmla", sms).max_partials, g_gap.kernel[3]])


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
    roof, hb = roofline_numbers(), half_block_numbers()
    cm, sa, ho, pdl = cost_fit_numbers(), segment_ahead_numbers(), held_out_numbers(), pdl_stage2_numbers()
    lr, pf, s2 = latest_runs_numbers(), profile_numbers(), stage2_variant_numbers()
    pl, wr, h1, pg = pipelined_landed_numbers(), whole_run_numbers(), h100_numbers(), per_gpu_numbers()
    gl, sv = glance_numbers(), acc_board_served()
    assert h1["runs"] == 4 and h1["runs_each"] == {4}  # "Every problem ran there 4 times"
    assert h1["always"] == h1["below"]  # "so those misses repeat"
    fw, lp, pct = pl["few_wide_pipelined"], pl["long_pipelined"], cf["pct"]
    pipe, two = s2["pipelined"], s2["few_wide_two"]
    assert all(x < 1 for x in pipe["rest"])  # "It lost at every batch where stage 2 loads several partials"
    top = two["wide_top"]
    assert (top["family"], top["heads"], top["batch"]) == ("giant", 64, 256)  # "the most on giant"
    return [
        # Where it stands
        ("on batches of up to {} requests, ragged or uniform, though from {} heads up single families there run as "
         "low as {}x. From {} requests on its geomean is within {}% of FlashMLA, on either side, at {} heads and more, "
         "and level or ahead at {} heads",
         [gl["up_to"], gl["h_from"], gl["low_small"], gl["b_from"], gl["pct"], gl["h_from"], gl["h16"]]),
        ("On the H100 (below) the {}-head cells of {} requests are behind too", [128, h1["small_behind"]]),
        # The choice, fitted on families
        ("a launch of {} page-times, the merge at {} times the byte model), the balanced schedule taken only where its "
         "makespan is shorter than the rule's by more than {} of it", ho["constants"]),
        ("{} batches of eight families of lengths", [cf["batches"]]),
        ("every family got the margin {}, and the choice came within {}% of the best option at {} of {} problems held "
         "out, the worst {}x", [cf["margin"], pct, cf["held"]["within"], cf["held"]["problems"], cf["held"]["max"]]),
        ("it was within {}% at {} of the {}, the worst {}x",
         [pct, cf["old"]["within"], cf["problems"], cf["old"]["max"]]),
        ("scored on {} timings no fit had read, three whole family benches at `4d46283` and small uniform batches at "
         "`df92c31`: stage 1 alone missed {} problems; with stage 2, {} of them came within {}% and one fell out, at "
         "{}x", [ho["n"], ho["missed"], ho["gained"], pct, ho["x"]]),
        ("On each of those three family benches the choice is within {}% of the best option at {} of {} problems",
         [pct, *ho["within"]]),
        ("At h_q=32 and at most {} requests the balanced schedule runs programs of 16 heads", [hb["batch"]]),
        ("at {} the choice is within {}% at {} of its {} problems; fitted with the uniform 16K held out, the cost "
         "leaves that problem at {}x",
         [hb["cost"], pct, hb["at"][0], hb["n"], hb["held"]]),
        ("the median of at least {} runs at the current rules", [lr["runs"]]),
        ("with B=128 and B=256, {} problems: the choice is the best option at all {}, and {} run below {}x FlashMLA's "
         "speed, the lowest {}x", [pl["n"], pl["best"], pl["below"], pl["floor"], pl["lowest"]]),
        ("The other {} of the bench's {} problems had no run at the current rules",
         [pl["rest"], pl["rest"] + pl["n"]]),
        ("timed all {}, so that each problem now has a ratio", [wr["n"]]),
        ("The choice, its constants fitted on the H200, is within {}% of the best option at {} of {} problems",
         [h1["pct"], h1["within"], h1["n"]]),
        ("the worst {}x (h_q=64). Refitting", [h1["worst"]]),
        ("the grid's best, a launch of {} page-times and the margin {}, takes {} of the {}, but fitted with each "
         "family held out the choice comes within {}% at {} of {}, one fewer than the H200's constants",
         [pg["launch"], pg["margin"], pg["best"], pg["n"], h1["pct"], pg["held"], pg["n"]]),
        ("(the worst {}x against {}x)", [pg["h100_on_h200"], pg["package_on_h200"]]),
        ("The speed bars are missed there as on the H200: only {} of the {} pairs of family and head count meet both "
         "bars, {} of the {} family batches run below {}x, the lowest {}x",
         [h1["met"], h1["pairs"], h1["below"], h1["fam"], h1["floor"], h1["lowest"]]),
        ("Every problem ran there {} times, and each of those {} batches ran below {}x in every run",
         [h1["runs"], h1["always"], h1["floor"]]),
        ("rather than come from one slow run; {} batches that pass had a run below the bar",
         [h1["crossing_passes"]]),
        ("after {} of its {} problems nvidia-smi reported the software power cap active ({} of them at h_q=128), "
         "the SM clock then as low as {} MHz against its {} maximum, the draw (a one-second average) up to {} W",
         [h1["capped"], h1["problems"], h1["capped_h128"], h1["capped_sm_low"], h1["sm_max"], h1["watts"]]),
        ("reported the cap after {} of its {} problems too, the SM clock as low as {} MHz, the draw up to {} W",
         [h1["fourth"][k] for k in ("capped", "problems", "capped_sm_low", "watts")]),
        ("The choice is within {}% of the best option at {} of {} problems, the worst {}x",
         [wr["pct"], wr["within"], wr["n"], wr["worst"]]),
        ("(every shape, B=1 too, at {}x or more)", [wr["h16"]]),
        ("The speed is not: {} of the {} pairs of family and head count reach {}x in geomean with no batch below "
         "{}x, {} of the {} family batches run below {}x, the lowest {}x",
         [wr["met"], wr["pairs"], wr["bar"], wr["floor"], wr["below"], wr["fam"], wr["floor"], wr["lowest"]]),
        ("lowest uniform shapes run at {}x (just under the bar) at h_q=32 and {}x at h_q=64 (both B=128, L=1024) and "
         "{}x at h_q=128", wr["uni"]),
        ("And {} of the {} ratios rest on that one run, where the issue asks for the median of {}",
         [wr["once"], wr["n"], wr["runs"]]),
        ("put {} of the {} pairs of family and head count at {}x or more in geomean with no batch below {}x, and {} of "
         "the {} family batches below {}x",
         [lr["met"], lr["pairs"], lr["bar"], lr["floor"], lr["below"], lr["fam"], lr["floor"]]),
        ("at B=128, L=1024, ran at {}x at h_q=32, {}x at h_q=64 and {}x at h_q=128", lr["uni"]),
        ("it ran at {}x FlashMLA's speed in geomean at h_q=16, {}x at h_q=32, {}x at h_q=64 and {}x at h_q=128",
         [cf["fm"][16], cf["fm"][32], cf["fm"][64], cf["fm"][128]]),
        ("at h_q=16 the best batches reach {} of that floor with FlashMLA (`normal_16k`, B=256) and {} with the best "
         "option of ours, so there the bar of {}x asks for "
         "more than the copy rate at {} of the {} family batches",
         [roof["top"], roof["best"], lr["bar"], roof["over"], roof["n"]]),
        ("kept the giant request to {} pieces (h_q=16 to h_q=64, B=16 to B=128), so a part held {} page-times where "
         "FlashMLA's walk cuts it into {}-{} "
         "pieces and gives {}-{}", [lt["pieces"], lt["ours"], *lt["fm_pieces"], *lt["fm"]]),
        ("the balanced schedule ran at {}-{}x FlashMLA's speed at h_q=32", lt["x32"]),
        ("Without the cap the giant batches up to B=128 ran {}-{}x faster", lt["lifted"]),
        ("the giant request's {} partials cost more than the shorter pieces save, {}x at h_q=64, B=64",
         [lt["partials"], lt["loss"]]),
        ("keeps the cap below {} requests", [lt["cap_batch"]]),
        ("the giant batches ran at {}-{}x of FlashMLA's speed", lt["equal"]),
        ("it ran {}x faster in geomean over the {} batches whose stage 2 takes that config, from {}x to {}x",
         [fw["geomean"], fw["n"], fw["lo"], fw["hi"]]),
        ("(geomean at least {}, no batch below {}:", pl["gates"]),
        ("the {} batches at h_q=64, B=128, outside that config, ran {}x faster too",
         [fw["ctl_n"], fw["ctl"]]),
        ("ran at {}x on the {} batches and was not taken", [lp["geomean"], lp["n"]]),
        ("giant h_q=64, B=256 went from {}x FlashMLA's speed to {}x and giant h_q=128, B=128 from {}x to {}x",
         [*pl["giant"], *pl["giant128"]]),
        # the other sections
        ("twice more on the H200 at the current rules ({} of its {} problems have one run there, not three; the H100 "
         "has four at every problem)", [wr["once"], wr["n"]]),
        ("put that shape at {}x, {}x and {}x", lr["deciding"]),
        ("One whole run at `1699741` put it at {}x", [wr["deciding"]]),
        ("ours {} us and FlashMLA {} in medians, both within the spans above", [wr["ours_us"], wr["fm_us"]]),
        ("({}% more cycles, the two clocks differing)", [pf["cycles"]]),
        ("its longest merge walks the giant request's {} partials", [pf["pieces"]]),
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
        ("before the changes below) took {} us, {}% of the measured bf16 matmul rate, against {} us for the TMA "
         "kernel; FlashMLA took {} us, so the kernel ran at {}x its speed",
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
        ("that is {} parts ({} at h_q=16, where B=64 cuts requests into pieces). At h_q=128, B=64 and L=1024 or 4096, "
         "{} of the {} parts take one whole request each and {} stay idle: {} CTAs work, as our {} programs do",
         [parts, parts16, working, parts, parts - working, 2 * working, 2 * 64]),
        ("the kernel kept since runs {} us against {} at that shape",
         [worst[f"{backend_path(worst, run['info']['sm_count'])}_us"], worst["flashmla_us"]]),
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
        ("the model predicts every batch\nat h_q=64 and h_q=128 within {}% for ours and {}% for FlashMLA, and each "
         "family left out of the fit within {}% and {}%", [*cm["max_rel"], *cm["lofo"]]),
        ("on the same {} batches timed again in the three runs at `261e2bd` (today's kernels; not fitted, but not new "
         "batches), within {}% and {}%", [cm["check_batches"], *cm["check"]]),
        ("over the {} family batches of B=128 and B=256, ours is {} us slower than FlashMLA in mean, and the "
         "partition's share is {} us, in our favour", [cm["n128"], cm["gap128"], cm["part128"]]),
        ("A page costs ours {} us and FlashMLA {}, and the two ranges overlap", cm["a128"]),
        ("A segment costs ours {} us, {} page-times, and FlashMLA {} us, {} page-times, the ranges apart: at the "
         "fitted costs that term is {} us, more than the whole gap, and the fits leave {} us in our favour unexplained",
         [*cm["seg128"], cm["segterm128"], cm["left128"]]),
        ("(`normal_4k`, B=128, {} us) the segment term is {} us and the fits leave {}", cm["worst128"]),
        ("At h_q=64 ours is {} us faster than FlashMLA in mean", [cm["gap64"]]),
        ("A page costs ours less ({} us against {}, {} us in our favour), a segment more ({} page-times against {}, "
         "{} us); a partial costs the two about the same ({} us against {}",
         [*cm["a64"], cm["page64"], *cm["seg64"], cm["segterm64"], *cm["c64"]]),
        ("(`bimodal`, B=256, {} us) the segment term is {} us", cm["worst64"]),
        ("at DeepSeek-V3's {} tokens the backend would take more splits", [sv["context"]]),
        ("within {}% of the best option at {} of the {} problems whose choice a run timed, the worst {}x (uniform "
         "L={}, h_q={}, B={}: the balanced schedule where {} splits are best", sv["numbers"]),
        ("the choice is the bench's at all {} problems, though the width differs from the bench's at {} of them",
         sv["now"]),
        ("two per width, {} a batch size at {} tokens in its {}-token pages", [sv["graphs"], sv["context"], PAGE_SIZE]),
        ("a segment ({} us more at h_q=128 and {} at h_q=64), the fixed cost of a call ({} us more at h_q=128 and {} "
         "at h_q=64) and, at h_q=64, a merge step ({} us against {})", cm["more"]),
        ("The giant batch at h_q=64, B=256, {} us behind, shows the merge step: stage 2 merges the giant request's {} "
         "partials one at a time (`STAGE2_FEW_WIDE`; FlashMLA's walk makes {}), a merge term of {} us", cm["giant64"]),
        ("ran at {}x the kept kernel's speed in geomean ({}-{}x over {} batches",
         [sa["geomean"], sa["lo"], sa["hi"], sa["n"]]),
        ("ran {}x faster than the kept kernel in geomean, from {}x to {}x over its {} batches",
         [pdl["geomean"], pdl["lo"], pdl["hi"], pdl["n"]]),
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
    """``text`` with identifiers (code spans, source lines, shapes, commits, counts of heads, issues) blanked to the
    same length, so that only measured numbers remain where they were."""
    patterns = [r"`[^`]*`", r"\bL=\d+ (?:or|and) \d+\b", r"\*\*\d+ or \d+ heads",
                r"\blines? \d+(?:-\d+)?(?:, \d+(?:-\d+)?)*(?: and \d+(?:-\d+)?)?",
                r"\b(?:h_q|B|L|h_k)=\d+", r"\b[LB]=\d+K?(?:, \d+K?)*(?: and \d+K?)?", r"\b\d+K\b",
                r"\b\d+-token\b", r"\b\d+ heads\b", r"\b\d+ (?:or \d+ )?heads a program\b", r"Triton \d+\.\d+\.\d+",
                r"\bsglang \d+\.\d+\.\d+",
                r"\b\d+ output columns\b", r"\b\d+ in log2 units\b", r"2\^8", r"\bthe value \d+\b",
                r"\bthe H200's \d+ SMs\b", r"\bFlashAttention-\d\b", r"\bDeepSeek-V\d\b", r"\bsection \d+\b",
                r"\bnotebook \d+\b",
                r"\bnine \d+-column\b", r"\b\d+ output\b", r"\bexactly 1\b", r"\bof \d+\b(?= \()",
                r"\boverhead of \d+\b",
                r"\b[Ss]tage \d\b", r"\bpair's tile-\d\b", r"\bP\d V\d_\w+\b", r"\bP\d\b", r"\bat \d+\.(?= What)",
                r"\bof two CTAs\b", r"\bat 2, 3, 4 or 10 instead of 5\b", r"\bwarpgroup \d\b", r"\b0\.9x\b",
                r"\bsm_90a\b", r"\bthe \d+ SMs\b", r"\bH[12]00\b", r"\b(?:bf|fp)16\b", r"\b\d+-bit\b", r"\bL2\b",
                r"\bfloat64\b", r"\b[Ii]ssue \d+\b", r"\b\*\*\d+ or \d+ heads", r"\bL=1024 (?:or|and) 4096\b"]
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
