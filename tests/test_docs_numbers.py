"""README's measured numbers, checked against the committed results they come from.

Each claim is README's sentence (or table row) with its numbers rendered from ``results/*.json``, or,
where a number has no JSON, from the ``results/*.md`` file README points at; whitespace is normalised,
so prose may wrap anywhere. A number quoted in two places (README and ``kernels/NOTES.md``, README and
notebook 06) is rendered from the same source in both. Each check names the file to update.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from statistics import geometric_mean, median

import pytest
from docs_text import NOTES, README, SOURCES

from mla_edu.paths import REPO_ROOT, RESULTS_DIR
from mla_edu.util import PAGE_SIZE

#: GSM8K of the five eager runs in PR #6998's description (docs/sources.md); the seed's guess uses their mean
PR_6998_EAGER_RUNS = (0.917, 0.917, 0.910, 0.920, 0.916)
NOTEBOOK_06 = REPO_ROOT / "notebooks" / "06_reproducing_the_zero_accuracy_bug.py"
NOTEBOOK_04 = REPO_ROOT / "notebooks" / "04_decode_kernel.py"
ROW_LABELS = {  # README's Results table: key in repro's JSON -> (run, kernel) cells
    "eager": ("cutlass_mla, `--disable-cuda-graph`", "model's scale"),
    "prefix": ("cutlass_mla, CUDA graph, before the fix (`7059ae16f`)", "bug-era"),
    "fixed": ("cutlass_mla, CUDA graph, the fix (#6998, `e58423b2b`)", "model's scale"),
    "triton": ("triton backend, CUDA graph", "model's scale"),
    "scale": ("cutlass_mla, `--disable-cuda-graph`", "bug-era"),
}


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@cache
def result(name: str) -> dict:
    return json.loads((RESULTS_DIR / name).read_text(encoding="utf-8"))


def md(name: str) -> str:
    return norm((RESULTS_DIR / name).read_text(encoding="utf-8"))


def one(pattern: str, text: str) -> re.Match:
    found = list(re.finditer(pattern, text))
    assert len(found) == 1, f"expected one match of {pattern!r}, got {len(found)}"
    return found[0]


def seed_table_rows() -> list[str]:
    """README's Results table, rendered from repro.SEED and the CPU and H200 runs' JSON."""
    from mla_edu.case_study.repro import SEED

    cpu, gpu = result("repro_cpu.json")["table"], result("repro_h200_bfloat16.json")["table"]
    rows = []
    for key, (run, kernel) in ROW_LABELS.items():
        seed = {"eager": f"{SEED['eager']} *", "fixed": f"{SEED['fixed']} *", "scale": "(* ran this kernel)"}.get(
            key, SEED.get(key))
        cells = [seed, f"{cpu[key]['accuracy']:.3f}", f"{gpu[key]['accuracy']:.3f}"]
        if key == "prefix":
            cells = [f"**{c}**" for c in cells]
        rows.append(f"| {run} | {kernel} | " + " | ".join(cells) + " |")
    return rows


def repro_claims() -> list[str]:
    """README's prose about the seed's configuration, from results/repro_cpu.json."""
    from mla_edu.case_study.repro import SEED

    r = result("repro_cpu.json")
    conf, table = r["configuration"], r["table"]
    rows = conf["max_running_requests"] // conf["dp_size"]
    width = table["prefix"]["page_table_width"]
    model_scale = next(x for x in r["open_question_this"] if "scale" not in x["defects"])
    one_engine = {x["max_running_requests"]: x["accuracy"] for x in r["open_question"]
                  if x["dp_size"] == 1 and x["row_order"] == "append"}
    mean = sum(PR_6998_EAGER_RUNS) / len(PR_6998_EAGER_RUNS)
    return [
        f"`--context-length {conf['context_length']}` (a page table of W = {width} columns)",
        f"`--dp {conf['dp_size']} --enable-dp-attention` ({conf['dp_size']} attention ranks of at most {rows} requests",
        f"{table['prefix']['num_questions']} questions, greedy",
        f"the pre-fix graph's {table['prefix']['accuracy']:.3f} is close to eager's {table['scale']['accuracy']:.3f} "
        f"divided by the {rows} rows of a rank ({table['scale']['accuracy'] / rows:.3f})",
        f"the same guess for the seed gives {mean:.3f} / {rows} = {mean / rows:.3f} against its {SEED['prefix']}",
        f"the same DP run scores {model_scale['accuracy']:.3f}",
        f"W = {width}: pre-fix {model_scale['accuracy']:.3f}, with the scale too {table['prefix']['accuracy']:.3f}",
        f"answered GSM8K at **{SEED['prefix']}** with CUDA graphs on and **{SEED['eager'].replace('-', ' to ')}** "
        f"with them off",
        f"and {model_scale['eager_step']} requests had such a step, "
        f"{model_scale['accuracy_eager_step']:.3f} of them right",
        f"has none ({one_engine[16]:.3f} and {one_engine[128]:.3f} on CPU)",
        f"With W = {width} and at most {rows} rows per DP rank",
        f"(here `b < {rows}` and `n <= {r_pages()}`)",
    ]


def r_pages() -> int:
    from mla_edu.model.task import CONTEXT_LEN

    return CONTEXT_LEN // PAGE_SIZE


def kernel_claims() -> list[str]:
    """README's kernel row and kernels/NOTES.md's headline, from results/kernel_bench_h200.json."""
    k = result("kernel_bench_h200.json")
    mm, cp = k["ceilings"]["matmul_bf16_TFLOPs"], k["ceilings"]["copy_TBps"]
    at = {r["heads"]: r for r in k["results"] if r["batch"] == 64 and r["seq_len"] == 4096}
    h128, h16 = at[128], at[16]
    tl = h128["kernels"]["tl"]["best_us"]
    vs_sglang = [r["sglang_us"] / r["triton_us"] for r in k["results"] if r.get("sglang_us")]
    rule = [r["triton_rule_us"] / r["triton_best_us"] - 1 for r in k["results"]]
    return [
        f"h_q=128 {h128['triton_us']:.0f} us = {100 * h128['frac_matmul']:.0f}% of the measured bf16 matmul rate, "
        f"{h128['flashmla_us'] / h128['triton_us']:.2f}x FlashMLA's speed (the plain-Triton kernel: {tl:.0f} us, "
        f"{100 * h128['flops'] / tl / 1e6 / mm:.0f}%)",
        f"h_q=16 {h16['triton_us']:.0f} us = {100 * h16['TBps'] / cp:.0f}% of the measured copy bandwidth, "
        f"{h16['flashmla_us'] / h16['triton_us']:.2f}x FlashMLA",
        f"Faster than SGLang's Triton kernel at all {len(vs_sglang)} shapes it runs "
        f"({min(vs_sglang):.2f}x-{max(vs_sglang):.1f}x)",
        f"within {100 * max(rule):.1f}% of the best split at all {len(rule)} shapes",
    ]


def notes_claims() -> list[str]:
    k = result("kernel_bench_h200.json")
    h128 = next(r for r in k["results"] if r["heads"] == 128 and r["batch"] == 64 and r["seq_len"] == 4096)
    ratio = {}
    for r in k["results"]:
        cp_async = next((v for name, v in r["kernels"].items() if name.startswith("cp.async")), None)
        if cp_async:
            ratio.setdefault(r["heads"], []).append(cp_async["rule_us"] / r["triton_us"])
    rng = {h: f"{min(v):.2f}-{max(v):.2f}" for h, v in ratio.items()}
    tflops = h128["flops"] / h128["triton_us"] / 1e6
    return [f"{h128['triton_us']:.0f} us, {tflops:.0f} TFLOP/s ({100 * h128['frac_matmul']:.0f}%)",
            f"is {rng[16]} at h_q=16 and {rng[128]} at h_q=128"]


#: The schedule bench's run at the v8 kernel, which kernels/NOTES.md's v7 and v8 sections quote
SCHEDULE_V8 = "kernel_bench_h200_schedule_v8.json"
#: ... and at v9's kernel and schedule, which its v9 and v10 sections quote
SCHEDULE_V9 = "kernel_bench_h200_schedule_v9.json"
#: ... and at v11's schedule line, which its v11 section quotes
SCHEDULE_V11 = "kernel_bench_h200_schedule_v11.json"
#: ... and at v12's output store, which its v12 section quotes
SCHEDULE_V12 = "kernel_bench_h200_schedule_v12.json"
SCHEDULE_V13 = "kernel_bench_h200_schedule_v13.json"
SCHEDULE_V14 = "kernel_bench_h200_schedule_v14.json"
SCHEDULE_V15 = "kernel_bench_h200_schedule_v15.json"
SCHEDULE_V16 = "kernel_bench_h200_schedule_v16.json"
SCHEDULE_V19 = "kernel_bench_h200_schedule_v19.json"


def schedule_numbers(name: str = "kernel_bench_h200_schedule.json") -> tuple[list, dict, dict]:
    """The ragged rows of a schedule bench's run (results/``name``), FlashMLA's time over the schedule's per head
    count, and schedule_bench's summary of the run."""
    from tools.schedule_bench import summary

    k = result(name)
    x = {h: [r["flashmla_us"] / r["balanced_us"] for r in k["ragged"] if r["heads"] == h] for h in (16, 128)}
    return k["ragged"], x, summary(k)


def is_h128(row: dict) -> bool:
    """Whether a schedule bench row has 128 query heads."""
    return row["heads"] == 128


def h128_below(run: dict) -> list[tuple[int, int]]:
    """(batch, length) of the uniform h_q=128, B >= 4 shapes of a schedule bench's run where the rule's path is
    below 0.9x FlashMLA's speed."""
    return sorted((r["batch"], r["lens_max"]) for r in run["uniform"] if h128_b4(r)
                  and r["flashmla_us"] / r["rule_us"] < 0.9)


def h128_b4(row: dict) -> bool:
    """Whether a schedule bench row is one of the uniform shapes issue 25's acceptance bounds: h_q=128, B >= 4."""
    return row["heads"] == 128 and row["batch"] >= 4


def moves(before: list[dict], after: list[dict], key: str, keep=lambda row: True) -> list[float]:
    """Each problem's ``key`` time in run ``after`` over run ``before``, less 1 (the same problems in the same order),
    where ``keep(row)`` holds of ``after``'s row: how a time moved between two bench runs."""
    return [b[key] / a[key] - 1 for a, b in zip(before, after, strict=True) if keep(b)]


def worst_h128_backend(run: dict) -> dict:
    """The uniform h_q=128, B >= 4 row of a schedule bench's run where what the triton backend runs is slowest
    against FlashMLA."""
    from tools.schedule_bench import backend_path

    return min(filter(h128_b4, run["uniform"]),
               key=lambda r: r["flashmla_us"] / r[f"{backend_path(r, run['info']['sm_count'])}_us"])


def bench_pair(after: str, before: str) -> dict:
    """Two schedule bench runs (results/``after``, results/``before``) as NOTES compares them: the runs, their
    summaries, the ragged and uniform h_q=128 lines of the acceptance, the uniform h_q=128 shape where the backend
    is slowest against FlashMLA, and the shapes below 0.9x in ``after``."""
    run, old = result(after), result(before)
    _, x, s = schedule_numbers(after)
    _, _, s_old = schedule_numbers(before)
    return dict(run=run, before=old, x=x, s=s, rg=s["ragged_balanced_x_flashmla"],
                rg_old=s_old["ragged_balanced_x_flashmla"], u=s["uniform_h128_backend_x_flashmla"],
                u_old=s_old["uniform_h128_backend_x_flashmla"], worst=worst_h128_backend(run), below=h128_below(run))


def ragged_cell(pair: dict, label: str) -> str:
    """kernels/NOTES.md's ragged acceptance cell for two bench runs (``bench_pair``), the earlier one ``label``."""
    run, before, rg, old = pair["run"], pair["before"], pair["rg"], pair["rg_old"]
    return (f"| {rg['geomean']:.3f}x ({label} {old['geomean']:.3f}x), min {rg['min']:.3f}x ({label} {old['min']:.3f}x);"
            f" at h_q=128 the balanced path moved by "
            f"{signed(moves(before['ragged'], run['ragged'], 'balanced_us', is_h128))} and FlashMLA by "
            f"{signed(moves(before['ragged'], run['ragged'], 'flashmla_us', is_h128))} between the runs |")


def schedule_claims() -> list[str]:
    """README's ragged-batch row, from results/kernel_bench_h200_schedule.json."""
    ragged, x, s = schedule_numbers()
    own = [r["sglang_own_us"] / r["balanced_us"] for r in ragged]
    choice = s["uniform_backend_over_best_split"]
    worst = worst_h128_backend(result("kernel_bench_h200_schedule.json"))
    return [f"{s['ragged_balanced_x_flashmla']['geomean']:.2f}x FlashMLA's speed in geomean (h_q=16 {min(x[16]):.2f}-"
            f"{max(x[16]):.2f}x, h_q=128 {min(x[128]):.2f}-{max(x[128]):.2f}x), against "
            f"{s['ragged_rule_x_flashmla']['geomean']:.2f}x with one split count for every request",
            f"faster than the best single split count at {sum(r['balanced_us'] < r['best_us'] for r in ragged)} of "
            f"{len(ragged)} batches, and {min(own):.2f}x-{max(own):.1f}x faster than SGLang's Triton kernel",
            f"per batch from its lengths: scored on this run, its choice is within 5% of the best split at "
            f"{choice['within_5pct']} of {choice['shapes']} uniform shapes",
            f"what it runs is {s['uniform_h16_backend_x_flashmla']['geomean']:.2f}x FlashMLA's speed in geomean at "
            f"h_q=16 and {s['uniform_h128_backend_x_flashmla']['geomean']:.2f}x at h_q=128 "
            f"({s['uniform_h128_backend_x_flashmla']['min']:.3f}x at B={worst['batch']}, L={worst['lens_max']})",
            f"as with the rule alone ({result('engine_decode_h200.json')['auto_over_rule']:.2f}x",
            spread_claim()]


def spread_claim() -> str:
    """README's sentence on uniform h_q=128, B=128, L=1024 in the run before the committed one (v19's) and in it."""
    before, now = (uniform_row(result(x), 128, 1024) for x in (SCHEDULE_V19, "kernel_bench_h200_schedule.json"))
    return (f"B=128, L=1024 read {before['flashmla_us'] / before['rule_us']:.3f}x: our time there was "
            f"{before['rule_us']:.1f} and {now['rule_us']:.1f} us in the two runs, FlashMLA's "
            f"{before['flashmla_us']:.1f} and {now['flashmla_us']:.1f}")


def stage1_claims() -> list[str]:
    """README's seesaw sentence, from results/kernel_bench_h200_stage1.json."""
    row = kernel_row(128, 64, 4096)
    return [f"at h_q=128, B=64, L=4096 {row['triton_us']:.1f} us against the TMA kernel's "
            f"{row['kernels']['tma, 64 heads']['best_us']:.1f} us in one later run, "
            f"{row['flashmla_us'] / row['triton_us']:.2f}x FlashMLA"]


def schedule_notes_claims() -> list[str]:
    """kernels/NOTES.md's v8 acceptance table, from v8's run."""
    _, x, s = schedule_numbers(SCHEDULE_V8)
    choice, everywhere = s["uniform_backend_over_best_split"], s["uniform_balanced_over_best_split"]
    h128, h16 = s["uniform_h128_backend_x_flashmla"], s["uniform_h16_backend_x_flashmla"]
    n128 = sum(r["heads"] == 128 and r["batch"] >= 4 for r in result(SCHEDULE_V8)["uniform"])
    return [f"{s['ragged_balanced_x_flashmla']['geomean']:.2f}x (v6 0.82x, the rule "
            f"{s['ragged_rule_x_flashmla']['geomean']:.2f}x); h_q=16 {min(x[16]):.2f}-{max(x[16]):.2f}x, h_q=128 "
            f"{min(x[128]):.2f}-{max(x[128]):.2f}x",
            f"what the backend runs: {h128['below_0.9']} of {n128} shapes below, min {h128['min']:.2f}x",
            f"geomean {h128['geomean']:.2f}x",
            f"what the backend runs: {h16['geomean']:.2f}x, min {h16['min']:.2f}x",
            f"{choice['within_5pct']} of {choice['shapes']} (scored); the schedule everywhere: "
            f"{everywhere['within_5pct']} of {everywhere['shapes']}"]


def notes_v8_claims() -> list[str]:
    """kernels/NOTES.md v8's seesaw and engine numbers, from results/kernel_bench_h200_stage1.json and
    results/engine_decode_h200.json."""
    row, h16 = kernel_row(128, 64, 4096), kernel_row(16, 64, 4096)
    tma = row["kernels"]["tma, 64 heads"]["best_us"]
    assert row["stage1"] == "seesaw, 64 heads" and row["kernels"]["tma, 64 heads"]["best_splits"] == \
        row["triton_rule_splits"]
    engine = result("engine_decode_h200.json")
    return [f"seesaw {row['triton_us']:.1f} us against tma {tma:.1f} us ({tma / row['triton_us']:.2f}x) and FlashMLA "
            f"{row['flashmla_us']:.1f} us:\n{row['flashmla_us'] / row['triton_us']:.2f}x FlashMLA",
            f"| v8 | {h16['triton_us']:.1f} us ({100 * h16['frac_copy']:.0f}%) | {row['triton_us']:.1f} us "
            f"({100 * row['frac_matmul']:.0f}%)",
            f"balanced {engine['balanced_over_rule']:.2f}x and auto {engine['auto_over_rule']:.2f}x the\nrule's time",
            f"auto {engine['auto_over_rule']:.2f}x, balanced {engine['balanced_over_rule']:.2f}x the rule's time"]


#: Nsight Compute's source-level stall samples of the seesaw and FlashMLA (kernels/NOTES.md v9)
STALLS = "kernel_stalls_h200_seesaw_sass.csv.gz"


def ab_blocks(name: str) -> list[str]:
    """The ``tools.stage1_ab`` output blocks (fenced) of results/``name``."""
    return (RESULTS_DIR / name).read_text(encoding="utf-8").split("```")[1::2]


def ab_runs(name: str) -> list[dict]:
    """Each ``tools.stage1_ab`` output block of results/``name``, parsed (``stage1_ab.parse``)."""
    from tools.stage1_ab import parse

    return [parse(block) for block in ab_blocks(name)]


def span(values, digits: int = 2) -> str:
    """'lo-hi' of ``values`` as printed, or one number where both ends print alike."""
    lo, hi = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def signed(values, digits: int = 1) -> str:
    """'-a% to +b%' of fractions, as kernels/NOTES.md writes a run-to-run move."""
    lo, hi = 100 * min(values), 100 * max(values)
    return f"{'+' if lo >= 0 else ''}{lo:.{digits}f}% to {'+' if hi >= 0 else ''}{hi:.{digits}f}%"


def notes_v9_claims() -> list[str]:
    """kernels/NOTES.md v9's A/B, stall and bench numbers, from the results files it names."""
    from tools.stall_summary import ALL, kernels, read, samples, short_name, totals

    (q,), (kv,), (pieces, wg1) = (ab_runs(f"seesaw_ab_h200_{n}.md") for n in ("q_ahead", "kv_ahead", "rejected"))
    path = lambda run, p, v: [x for (_, pp, vv), x in run.items() if (pp, vv) == (p, v)]  # noqa: E731
    long = {("u B64 4096", "balanced"), ("r B64 2048", "balanced"), ("r B128 2048", "balanced")}
    kv_long = [x for (shape, p, v), x in kv.items() if v == "q_ahead" and (shape, p) in long]
    kv_rest = [x for (shape, p, v), x in kv.items() if v == "q_ahead" and p == "balanced" and (shape, p) not in long]
    # on the rule's path (one segment a program) q_ahead and rows_early differ by the early rows only
    kv_rows = [x / kv[shape, p, "rows_early"] for (shape, p, v), x in kv.items() if v == "q_ahead" and p == "rule"]
    geo = geometric_mean(pieces.values())
    tables = {short_name(name): rows for name, rows in kernels(read(str(RESULTS_DIR / STALLS)))}
    mine, peer = totals(tables["stage1_seesaw_kernel"]), totals(tables["flash_fwd_splitkv_mla_kernel"])
    top = lambda c: sorted((int(samples(r, c)) for r in tables["stage1_seesaw_kernel"]), reverse=True)  # noqa: E731
    depbar = top("stall_barrier")[:5]
    unit = mine[ALL] / 100
    pair = lambda c: f"{mine[c] / unit:.1f} against {peer[c] / unit:.1f}"  # noqa: E731
    _, x, s = schedule_numbers(SCHEDULE_V9)
    _, x8, s8 = schedule_numbers(SCHEDULE_V8)
    h128, h16 = s["uniform_h128_backend_x_flashmla"], s["uniform_h16_backend_x_flashmla"]
    run, v8 = result(SCHEDULE_V9), result(SCHEDULE_V8)
    uni = [(a, b) for a, b in zip(v8["uniform"], run["uniform"]) if h128_b4(b)]
    worst = worst_h128_backend(run)
    rule, fm = (moves(v8["uniform"], run["uniform"], key, h128_b4) for key in ("rule_us", "flashmla_us"))
    big = next((a, b) for a, b in uni if (b["batch"], b["lens_max"]) == (64, 16384))
    gain = [new - old for new, old in zip(x[128], x8[128])]
    choice = s["uniform_backend_over_best_split"]
    return [f"balanced path {span(path(q, 'balanced', 'old'))}x at the 9 shapes, the rule's path "
            f"{span(path(q, 'rule', 'old'))}x",
            f"{span(kv_long)}x on the balanced path where segments are long",
            f"the rest within the runs' noise ({span(kv_rest)}x; uniform B=16, L=1024, where the backend runs the "
            f"rule, {kv['u B16 1024', 'balanced', 'q_ahead']:.2f}x)",
            f"on the rule's path, where they are all that differs, q_ahead's time over rows_early's is "
            f"{span(kv_rows)}x",
            f"{geo:.2f}x in geomean, slower at every row",
            f"The rule's path {span(path(wg1, 'rule', 'kv_ahead'))}x, the balanced path "
            f"{span(path(wg1, 'balanced', 'kv_ahead'))}x",
            f"FlashMLA's kernel takes {peer[ALL] / unit:.0f}",
            f"long-scoreboard operand {pair('stall_long_sb')}, at a barrier {pair('stall_barrier')}, "
            f"on a fixed latency {pair('stall_wait')}, issuing {pair('stall_selected')}",
            f"| {s['ragged_balanced_x_flashmla']['geomean']:.2f}x "
            f"(v8 {s8['ragged_balanced_x_flashmla']['geomean']:.2f}x, "
            f"the rule {s['ragged_rule_x_flashmla']['geomean']:.2f}x); "
            f"h_q=16 {span(x[16])}x, h_q=128 {span(x[128])}x |",
            f"what the backend runs: {h128['below_0.9']} of {len(uni)} shapes below, min {h128['min']:.2f}x "
            f"(B={worst['batch']}, L={worst['lens_max']}), geomean {h128['geomean']:.2f}x",
            f"what the backend runs: {h16['geomean']:.2f}x, min {h16['min']:.2f}x",
            f"{choice['within_5pct']} of {choice['shapes']} (scored",
            f"{depbar[0]} and {depbar[2]} samples right after P V products",
            f"{depbar[1]} where warpgroup 0 waits out its asynchronous P0 V0_left before rescaling, then the score "
            f"products' final waits ({depbar[3]}, {depbar[4]})",
            f"(our reading of the addresses: LEFT1, {top('stall_long_sb')[0]:,} samples)",
            f"The h_q=128 ragged batches gained {span(gain)} of FlashMLA's speed each ({span(x8[128])}x in v8)",
            f"between the two runs its times moved by {signed(rule, 0)} and "
            f"FlashMLA's by {signed(fm, 0)} (B=64, L=16384: "
            f"{big[0]['flashmla_us']:.0f} then {big[1]['flashmla_us']:.0f} us)"]


def pair_line(times: dict, path: str, version: str) -> tuple[float, float]:
    """(us a pair, us besides) of a line through uniform B=64 at L=1024 and L=4096 (8 and 32 pairs of tiles)."""
    short, long = times["u B64 1024", path, version], times["u B64 4096", path, version]
    per_pair = (long - short) / 24
    return per_pair, short - 8 * per_pair


def notes_v10_claims() -> list[str]:
    """kernels/NOTES.md v10's A/B numbers of the hand-off variants and its engine rerun, from their files."""
    p0_scaled, p0_async = ab_runs("seesaw_ab_h200_handoff.md")
    pick = lambda kind, p: [x for (shape, pp, _), x in p0_async.items() if shape[0] == kind and pp == p]  # noqa: E731
    big = [x for (shape, p, _), x in p0_async.items() if shape[0] == "u" and p == "rule" and shape != "u B16 1024"]
    engine = result("engine_decode_h200_v10.json")
    same = engine["rule"]["replays_by_path"] == engine["auto"]["replays_by_path"]
    spread = lambda k: f"{min(engine[k]['times_s']):.2f}-{max(engine[k]['times_s']):.2f} s ({k})"  # noqa: E731
    geo, geo_async = geometric_mean(p0_scaled.values()), geometric_mean(p0_async.values())
    return [f"{geo:.3f}x the kept kernel's speed in geomean over the {len(p0_scaled)} rows "
            f"({span(p0_scaled.values())}x)",
            f"Correct; {geo_async:.3f}x in geomean:\nuniform B=64 and 128 on the rule's path {span(big)}x, "
            f"uniform B=16 {p0_async['u B16 1024', 'rule', 'kv_ahead']:.2f}x, the ragged batches on the rule's path "
            f"{span(pick('r', 'rule'))}x",
            f"balanced path {span(pick('u', 'balanced') + pick('r', 'balanced'))}x",
            f"auto's best time is {engine['auto_over_rule']:.2f}x the rule's",
            f"{spread('rule')}, {spread('balanced')}, {spread('auto')}",
            f"rule and auto replayed {'the same graph' if same else 'different graphs'} at every step"]


def parts_runs() -> tuple[dict, dict, dict]:
    """results/seesaw_parts_h200.md's two runs, tensor-core work left out then tiles left out: the first's
    ratios (``stage1_ab.parse``), then each one's times (``stage1_ab.times``)."""
    from tools.stage1_ab import parse, times

    mma, tiles = ab_blocks("seesaw_parts_h200.md")
    return parse(mma), times(mma), times(tiles)


def parts_lines(times: dict) -> tuple[tuple[float, float], tuple[float, float]]:
    """``pair_line`` of the kept seesaw and of FlashMLA in one run of ``parts_runs``."""
    return pair_line(times, "rule", "new"), pair_line(times, "FlashMLA", "FlashMLA")


def notes_summary_claims() -> list[str]:
    """kernels/NOTES.md's opening "Where it stands": README's schedule numbers and v10's two ratios."""
    (mine, fixed), (peer, peer_fixed) = parts_lines(parts_runs()[2])
    readme = schedule_claims()
    return [readme[0], readme[3],
            f"a pair costs the seesaw {mine / peer:.2f}x what it costs FlashMLA, and the rest of a call "
            f"{fixed / peer_fixed:.1f}x"]


def notes_v10_parts_claims() -> list[str]:
    """kernels/NOTES.md v10's numbers from the seesaw with parts left out (results/seesaw_parts_h200.md)."""
    x, t, f = parts_runs()  # tensor-core work left out (ratios, times); tiles left out (times)
    (mine, fixed), (peer, peer_fixed) = parts_lines(f)
    (mine0, fixed0), (peer0, peer_fixed0) = parts_lines(t)
    ring, _ = pair_line(t, "rule", "no_mma")
    cut = [r for (_, _, v), r in x.items() if v in ("no_pv", "no_qk")]
    ragged = sorted({shape for shape, _, _ in f if shape[0] == "r"})
    empty = [f[r, "balanced", "empty"] for r in ragged]
    share = [f[r, "balanced", "empty"] / f[r, "balanced", "new"] for r in ragged]
    rest = [(f[r, "balanced", "new"] - f[r, "balanced", "empty"]) / f[r, "FlashMLA", "FlashMLA"] for r in ragged]
    u64, u128, fm = "u B64 1024", "u B128 1024", ("FlashMLA", "FlashMLA")
    return [f"{t[u64, 'rule', 'no_mma']:.1f} us at uniform h_q=128, B=64, L=1024, where FlashMLA's whole kernel "
            f"takes {t[(u64, *fm)]:.1f} us (B=128: {t[u128, 'rule', 'no_mma']:.1f} against\n{t[(u128, *fm)]:.1f})",
            f"saves {100 * (1 - max(cut)):.0f}-{100 * (1 - min(cut)):.0f}% of the time",
            f"the seesaw costs {mine:.2f} us a pair and {fixed:.1f} us besides, FlashMLA {peer:.2f} us a pair and "
            f"{peer_fixed:.1f} us besides (the other run:\n{mine0:.2f} and {fixed0:.1f}, FlashMLA {peer0:.2f} and "
            f"{peer_fixed0:.1f})",
            f"Without tensor-core work the seesaw's pair costs {ring:.2f} us",
            f"({f[u64, 'rule', 'new']:.1f} against {f[(u64, *fm)]:.1f} us in this run)",
            f"the output writes take {f[u64, 'rule', 'empty']:.1f} us at B=64, L=1024, and the first pair "
            f"{f[u64, 'rule', 'one_pair'] - f[u64, 'rule', 'empty']:.1f} us more",
            f"the call takes {min(empty):.1f}-{max(empty):.1f} us, {100 * min(share):.0f}-{100 * max(share):.0f}% of",
            f"is\n{span(rest)}x FlashMLA's whole time",
            f"a pair costs the seesaw {mine / peer:.2f}x what it costs FlashMLA",
            f"(per program, per\nsegment and in stage 2) {fixed / peer_fixed:.1f}x",
            f"({fixed:.1f} us against FlashMLA's {peer_fixed:.1f} at B=64)",
            f"**The pairs** ({mine:.2f} against {peer:.2f} us)"]


def spread_makespan(lens: list[int], page: int, parts: int) -> int:
    """The slowest part's page-times (pages plus one overhead per segment) of v5-v10's line, which spread each
    request's overhead over its pages (page k of request b at ``W_b + k w_b / n_b``): a model of the old
    ``schedule.segment``, for kernels/NOTES.md v11's prediction (beside ``schedule.flashmla_makespan``)."""
    from collections import Counter

    from mla_edu.kernels import schedule as sc
    from mla_edu.util import cdiv

    o = sc.FIXED_OVERHEAD_PAGES
    n = [cdiv(max(x, 0), page) for x in lens]
    w = [k + o if k else 0 for k in n]
    chunk = max(cdiv(sum(w), parts), sc.MIN_PART_PAGES, cdiv(max(w), sc.MAX_PIECES - 1))
    load, start = [0] * parts, 0
    for k_b, w_b in zip(n, w):
        for p, pages in Counter((start * k_b + k * w_b) // (k_b * chunk) for k in range(k_b)).items():
            load[p] += pages + o
        start += w_b
    return max(load)


@cache
def bench_makespans(sms: int) -> tuple[tuple[int, list[int], float], ...]:
    """(h_q, lengths, modelled makespan) of each ragged problem of the schedule bench, in its order: the balanced
    schedule's slowest part in page-times, from the kernels' own arithmetic (``schedule.part_timeline``, ~1 s each
    in Triton's interpreter: computed once)."""
    from mla_edu.kernels import schedule as sc
    from tools.schedule_bench import PAGE, problems

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
    """results/seesaw_ab_h200_pdl.md's A/B (``stage1_ab.parse``: the kept stage 1's time over PDL's), its geomean,
    and its ratios with one split, where a call is one kernel (uniform B=64 and 128 at L=1024)."""
    (pdl,) = ab_runs("seesaw_ab_h200_pdl.md")
    one = [x for (shape, p, _), x in pdl.items() if p == "rule" and shape in ("u B64 1024", "u B128 1024")]
    return pdl, geometric_mean(pdl.values()), one


def notes_v11_claims() -> list[str]:
    """kernels/NOTES.md v11's PDL A/B, the schedule's modelled makespans and the bench's outcome."""
    from mla_edu.kernels import schedule as sc
    from mla_edu.util import cdiv
    from tools.schedule_bench import PAGE

    pdl, geo, one = pdl_numbers()
    run, v9 = result(SCHEDULE_V11), result(SCHEDULE_V9)
    model = []  # (row, spread, now, FlashMLA's) per ragged batch, the bench's lengths in its order
    sms = run["info"]["sm_count"]
    for r, (heads, lens, now) in zip(run["ragged"], bench_makespans(sms), strict=True):
        assert (r["heads"], r["batch"], r["lens_max"]) == (heads, len(lens), max(lens))
        parts = sc.num_parts(heads, sms, len(lens), cdiv(max(lens), PAGE))
        model.append((r, spread_makespan(lens, PAGE, parts), now, sc.flashmla_makespan(lens, PAGE, parts)))
    gain = {round(old - now) for _, old, now, _ in model}
    equal = [m for m in model if m[2] == m[3]]
    (odd,) = [m for m in model if m[2] != m[3]]
    rel = [(old - now) / old for _, old, now, _ in model]
    most, least = max(model, key=lambda m: (m[1] - m[2]) / m[1]), min(model, key=lambda m: (m[1] - m[2]) / m[1])
    faster = [-x for x in moves(v9["ragged"], run["ragged"], "balanced_us")]
    fm = moves(v9["ragged"], run["ragged"], "flashmla_us")
    small = [(f, m) for f, m in zip(faster, model) if m[0]["heads"] == 128 and m[0]["batch"] == 16]
    uni_gain = [-x for x in moves(v9["uniform"], run["uniform"], "balanced_us", h128_b4)]
    uni_rule = moves(v9["uniform"], run["uniform"], "rule_us", h128_b4)
    _, x, s = schedule_numbers(SCHEDULE_V11)
    _, x9, s9 = schedule_numbers(SCHEDULE_V9)
    h128, h16 = s["uniform_h128_backend_x_flashmla"], s["uniform_h16_backend_x_flashmla"]
    h128_9 = s9["uniform_h128_backend_x_flashmla"]
    worst = worst_h128_backend(run)
    n128 = sum(r["heads"] == 128 and r["batch"] >= 4 for r in run["uniform"])
    return [f"geomean {geo:.3f}x over the {len(pdl)} timings ({span(pdl.values(), 3)}x)",
            f"one kernel right behind the last, {span([100 * (x - 1) for x in one], 1)}%",
            f"finishes\n{gain.pop()} page-times earlier at every batch",
            f"equals FlashMLA's at {len(equal)} of {len(model)} batches ({odd[2] - odd[3]:.0f} page-time more\nat "
            f"h_q={odd[0]['heads']}, B={odd[0]['batch']}, median {odd[0]['lens_median']})",
            f"Relative to the makespan, {span([100 * r for r in rel], 0)}%: the most at h_q={most[0]['heads']}, "
            f"B={most[0]['batch']} ({most[1]} -> {most[2]:.0f}), the least at the largest "
            f"({least[1]} -> {least[2]:.0f})",
            f"the balanced path is {span([100 * f for f in faster], 1)}% faster at every ragged batch, while\n"
            f"FlashMLA's own times moved by {signed(fm)}",
            f"Most at h_q=128, B=16 ({' and '.join(f'{100 * f:.1f}' for f, _ in small)}%), where the\nmodel "
            f"predicted {' and '.join(f'{100 * (m[1] - m[2]) / m[1]:.0f}' for _, m in small)}%",
            f"The ragged geomean goes from {s9['ragged_balanced_x_flashmla']['geomean']:.2f}x to "
            f"{s['ragged_balanced_x_flashmla']['geomean']:.2f}x FlashMLA; h_q=128 from\n{span(x9[128])}x to "
            f"{span(x[128])}x",
            f"the balanced path gained too, {span([100 * g for g in uni_gain], 1)}% at h_q=128, B >= 4 (the\n"
            f"rule's path, unchanged, moved by {signed(uni_rule)}",
            f"| {s['ragged_balanced_x_flashmla']['geomean']:.2f}x "
            f"(v9 {s9['ragged_balanced_x_flashmla']['geomean']:.2f}x, "
            f"the rule {s['ragged_rule_x_flashmla']['geomean']:.2f}x); "
            f"h_q=16 {span(x[16])}x, h_q=128 {span(x[128])}x |",
            f"what the backend runs: {h128['below_0.9']} of {n128} shapes below, min {h128['min']:.2f}x "
            f"(B={worst['batch']}, L={worst['lens_max']}), geomean {h128['geomean']:.2f}x",
            f"what the backend runs: {h16['geomean']:.2f}x, min {h16['min']:.2f}x",
            f"(v9: {h128_9['below_0.9']} of 12\nbelow 0.9x, min {h128_9['min']:.2f}x)",
            *makespan_line_claims(run)]


def makespan_line_claims(run: dict) -> list[str]:
    """kernels/NOTES.md v11's lines through the ragged rows (``makespan_line``), and v10's pair ratio beside."""
    (mine, mine0, res), (peer, peer0, res_fm) = (makespan_line(run, 128, k) for k in ("balanced_us", "flashmla_us"))
    (m16, a16, _), (f16, b16, _) = (makespan_line(run, 16, k) for k in ("balanced_us", "flashmla_us"))
    (pair, _), (peer_pair, _) = parts_lines(parts_runs()[2])
    return [f"gives the seesaw's balanced path {mine:.2f} us a\npage-time plus {mine0:.1f} us, and FlashMLA "
            f"{peer:.2f} us a page-time plus {peer0:.1f} us (largest residuals {res:.1f} and {res_fm:.1f} us)",
            f"a page-time costs {mine / peer:.2f}x FlashMLA's: v10's pair of\ntiles ({pair / peer_pair:.2f}x)",
            f"At h_q=16: {m16:.2f} plus {a16:.1f} against {f16:.2f} plus {b16:.1f}",
            f"({mine / peer:.2f}x FlashMLA's at h_q=128)"]


def kernel_row(heads: int, batch: int, length: int, which: str = "stage1") -> dict:
    """One row of results/kernel_bench_h200_{which}.json (page 64)."""
    return next(r for r in result(f"kernel_bench_h200_{which}.json")["results"]
                if (r["page"], r["heads"], r["batch"], r["seq_len"]) == (64, heads, batch, length))


def schedule_choice_claims() -> list[str]:
    """kernels/NOTES.md v7's scores of a choice from the lengths, from tools.schedule_choice on the same run."""
    from mla_edu.kernels.schedule import BALANCED_MARGIN
    from tools import schedule_choice

    r = schedule_choice.score(result(SCHEDULE_V8))
    w, u = r["within_5pct"], r["uniform_within_5pct"]
    engine = schedule_choice.engine_batches()
    rules = sorted({round(e["model_rule"]) for e in engine})
    return [f"within 5% of the best split\nat {u['table']} of the 30 uniform shapes",
            f"Within 5% of the best at {w['lengths']} of {r['problems']} problems (uniform {u['lengths']} of 30",
            f"(model\n{rules[0]}-{rules[-1]} against {round(engine[0]['model_balanced'])} page-times)",
            f"the schedule only where its model is {BALANCED_MARGIN:.0%} below"]


def graph_claims() -> list[str]:
    launch = {r["kernels"]: r["speedup"] for r in result("graph_launch_h200.json")["rows"]}
    emulated = [r["replay_over_eager"] for r in result("graph_bench_cpu.json")["rows"]]
    return [f"a 117-kernel step replays {launch[117]:.1f}x faster than eager",
            f"replay {min(emulated):.1f}x-{max(emulated):.1f}x an eager run"]


def md_claims() -> list[str]:
    """Numbers README takes from results/*.md (no JSON behind them)."""
    reuse = md("workspace_reuse_h200.md")
    changed, owned = (int(x) for x in one(r"overwrote (\d+) of (\d+) of the new owner's bytes", reuse).groups())
    seed = md("seed_config_cpu.md")
    tiny = one(r"\| `tiny` \(shipped\) \|[^|]*\|[^|]*\| ([\d.]+) \| ([\d.]+) \|", seed).groups()
    yarn = one(r"\| `tiny-yarn` \(YaRN factor 40\) \|[^|]*\|[^|]*\| ([\d.]+) \| ([\d.]+) \|", seed).groups()
    rss = float(one(r"\| RSS after building the engine \| [\d.]+ GB \| ([\d.]+) GB \|", seed).group(1))
    cpu_wall = float(one(r"([\d.]+) s wall, [\d.]+ s user", md("repro_cpu.md")).group(1))
    gpu_wall = float(one(r"; (\d+) s wall for the whole run", md("repro_h200_bfloat16.md")).group(1))
    tests = md("tests_h200.md")
    latest = one(r"At commit `(\w+)` \([^)]*\): (\d+) passed, (\d+) skipped, (\d+) failed", tests).groups()
    earlier = one(r"Unit tests, [\d-]+ \(commit (\w+)\) .*?(\d+) passed, (\d+) skipped", tests).groups()
    cells = one(r"--nbval-lax notebooks/\*\.ipynb .*?(\d+) passed in", tests).group(1)
    strict = one(r"failed (\d+) of the (\d+) cells", tests).groups()
    ci = md("ci_fresh_clone.md")
    total = one(r"\| `bash \.ci/run`, in all \| \| ([\d:]+) \|", ci).group(1)
    unit = one(r"\| unit tests \| (\d+) \| (\d+) s \|", ci).groups()
    nb = one(r"\| notebook cells, strict nbval \| (\d+) \| ([\d:]+) \|", ci).groups()
    lab = one(r"\| `make test-lab`: the book and the browser tests \| (\d+) \| ([\d:]+) \|", ci).groups()
    fresh_repro = one(r"including the creation of `\.venv`: ([\d:]+)", ci).group(1)
    return [
        f"one replay overwrote {100 * changed / owned:.1f}% of its bytes",
        f"eager cutlass_mla with sgl-kernel 0.1.7's hard-coded `1/sqrt(192)`: {tiny[1]} (tiny) and {yarn[1]} "
        f"(`tiny-yarn`, YaRN factor 40) vs {tiny[0]} / {yarn[0]} without",
        f"one DP rank's engine at W = 33 holds {rss:.1f} GB",
        f"with `.venv` made, {cpu_wall:.0f} s (`results/repro_cpu.md`)",
        f"(`make repro`: {cpu_wall:.0f} s on the 2-core CPU machine)",
        f"on the H200: {gpu_wall:.0f} s;",
        f"at `{latest[0]}`: {latest[1]} unit tests passed, {latest[2]} skipped, {latest[3]} failed",
        f"earlier, at `{earlier[0]}`: {earlier[1]} passed ({earlier[2]} skips: CPU-only checks), all {cells} notebook "
        f"cells of then ran under `--nbval-lax`",
        f"({strict[0]} of the {strict[1]} cells the notebooks then had",
        f"`bash .ci/run` {total} in all (creating `.venv` from the lock, ruff, {unit[0]} unit tests in {unit[1]} s, "
        f"{nb[0]} notebook cells under strict nbval in {nb[1]}, then `make test-lab`: the book and {lab[0]} browser "
        f"tests in {lab[1]}). `make repro` {fresh_repro} in an earlier fresh clone",
    ]


def scale_claims() -> list[str]:
    """The scale factors README quotes, from the presets and the shipped model's manifest."""
    from mla_edu.config import MLAConfig

    v3 = MLAConfig.deepseek_v3()
    mla = json.loads((REPO_ROOT / "mla_edu" / "model" / "weights" / "manifest.json").read_text())["config"]["mla"]
    tiny_q = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    return [f"YaRN's `mscale^2` = {v3.softmax_scale * math.sqrt(v3.qk_head_dim):.2f}",
            f"the tiny model's `q_head_dim` is {tiny_q}, not {v3.qk_head_dim}",
            f"`sqrt({v3.qk_head_dim}/{tiny_q})` = {math.sqrt(v3.qk_head_dim / tiny_q):.2f}"]


CLAIMS = {"seed table": seed_table_rows, "repro": repro_claims, "kernel bench": kernel_claims,
          "schedule bench": schedule_claims, "stage-1 kernels": stage1_claims,
          "graph bench": graph_claims, "results/*.md": md_claims, "scales": scale_claims}


def missing(claims: list[str], text: str) -> list[str]:
    body = norm(text)
    return [c for c in claims if norm(c) not in body]


def assert_results_say(name: str, claims: list[str]) -> None:
    """Every claim is in results/``name`` (whitespace aside); else the ones it lacks."""
    lost = missing(claims, (RESULTS_DIR / name).read_text(encoding="utf-8"))
    assert not lost, f"results/{name} does not say:\n" + "\n".join(lost)


@pytest.mark.parametrize("group", CLAIMS)
def test_readme_quotes_the_committed_results(group):
    lost = missing(CLAIMS[group](), README.read_text(encoding="utf-8"))
    assert not lost, "README does not say (update README or the results it quotes):\n" + "\n".join(lost)


def test_notes_quote_the_kernel_bench():
    lost = missing(notes_claims() + schedule_notes_claims() + schedule_choice_claims() + notes_v8_claims()
                   + notes_v9_claims() + notes_v10_claims()
                   + notes_v10_parts_claims() + notes_summary_claims() + notes_v11_claims() + notes_v12_claims()
                   + notes_v13_claims() + notes_v14_claims() + notes_v15_claims() + notes_v16_claims()
                   + notes_v17_claims(),
                   NOTES.read_text(encoding="utf-8"))
    assert not lost, "kernels/NOTES.md does not say:\n" + "\n".join(lost)


def notebook_04_claims() -> list[str]:
    """Notebook 04's prose after its schedule-bench and engine cells, from the results files those cells print;
    and its batch's makespan on v5-v10's line (``spread_makespan``), which it quotes beside the one it prints."""
    from mla_edu.kernels import schedule as sc
    from mla_edu.util import cdiv

    ragged = sc.lognormal_lengths(64, 2048, seed=0)  # the notebook's batch: 16 heads, page 64, 132 SMs
    spread = spread_makespan(ragged, 64, sc.num_parts(16, 132, 64, cdiv(max(ragged), 64)))
    _, x, s = schedule_numbers()
    small = [r["balanced_us"] / r["best_us"] for r in result("kernel_bench_h200_schedule.json")["uniform"]
             if r["batch"] <= 4]
    engine = result("engine_decode_h200.json")
    apart = max(abs(engine[k] - 1) for k in ("auto_over_rule", "balanced_over_rule"))
    return [f"The schedule takes the rule's {s['ragged_rule_x_flashmla']['geomean']:.2f}x of FlashMLA on ragged "
            f"batches to {s['ragged_balanced_x_flashmla']['geomean']:.2f}x",
            f"within {100 * (1 - min(x[16])):.0f}% of FlashMLA or faster at every batch",
            f"At 128 heads it reaches {span(x[128])}x of FlashMLA",
            f"small uniform batches ({span(small, 1)}x the best split there)",
            f"All three within {100 * apart:.0f}%, the same tokens",
            f"a part cut on both ends pays nearly two: {spread} here"]


def test_notebook_04_quotes_the_schedule_bench():
    lost = missing(notebook_04_claims(), NOTEBOOK_04.read_text(encoding="utf-8"))
    assert not lost, "notebooks/04_decode_kernel.py does not say:\n" + "\n".join(lost)


def pdl_claims() -> list[str]:
    """results/seesaw_ab_h200_pdl.md's prose under its A/B block, from that block."""
    pdl, geo, one = pdl_numbers()
    worst = min(pdl.items(), key=lambda kv: kv[1])
    assert worst[0][:2] == ("r B128 2048", "balanced")  # "the largest ragged batch on the balanced path"
    return [f"Over the {len(pdl)} timings x runs from {min(pdl.values()):.3f} to {max(pdl.values()):.3f}, geomean "
            f"{geo:.3f}",
            f"it gains {span([100 * (x - 1) for x in one], 1)}%; the largest ragged batch on the balanced path is "
            f"{100 * (1 - worst[1]):.0f}% slower"]


def test_the_pdl_results_quote_their_run():
    assert_results_say("seesaw_ab_h200_pdl.md", pdl_claims())


def test_the_seed_numbers_have_one_source():
    from mla_edu.case_study.repro import SEED

    runs = PR_6998_EAGER_RUNS
    assert SEED["eager"] == f"{min(runs):.3f}-{max(runs):.3f}"
    sources = norm(SOURCES.read_text(encoding="utf-8"))
    assert "without CUDA graphs " + ", ".join(f"{x:.3f}" for x in runs) in sources
    mean = sum(runs) / len(runs)
    guess = f"{mean:.3f} / 16 = {mean / 16:.3f}"
    for path in (README, NOTEBOOK_06):
        text = norm(path.read_text(encoding="utf-8"))
        assert guess in text, f"{path.name}: the seed's guess should read {guess!r}"
        others = {m for m in re.findall(r"0\.9\d\d / 16", text)} - {f"{mean:.3f} / 16"}
        assert not others, f"{path.name} quotes another mean: {others}"


def test_a_drifted_number_is_caught():
    # each claim, with one digit of it changed in README, is reported
    body = norm(README.read_text(encoding="utf-8"))
    for make in CLAIMS.values():
        for claim in map(norm, make()):
            d = re.search(r"\d", claim).start()
            drifted = body.replace(claim, f"{claim[:d]}{(int(claim[d]) + 1) % 10}{claim[d + 1:]}")
            assert missing([claim], drifted) == [claim], claim


def test_readme_run_all_column_is_the_timings_file():
    """README's 'Run All, s' column is results/notebook_timings.json's run_all_s, rounded: the numbers the
    instructor guide's tracks are built from (one file, two places)."""
    timings = result("notebook_timings.json")["notebooks"]
    rows = re.findall(r"^\| \d\d \| \[[^\]]+\]\(notebooks/(\d\d_\w+\.ipynb)\) \|.*\| (\d+) \|$", README.read_text(),
                      re.M)
    assert sorted(name for name, _ in rows) == sorted(timings), "README's notebook table and the timings file list " \
        "different notebooks"
    wrong = [(name, int(s), round(timings[name]["run_all_s"])) for name, s in rows
             if int(s) != round(timings[name]["run_all_s"])]
    assert not wrong, f"README's Run All column (quoted, measured): {wrong}; run python -m tools.notebook_timings"


def out_tma_numbers() -> dict:
    """results/seesaw_ab_h200_out_tma.md's three A/B runs (``stage1_ab``: each version's time over "new"'s) and the
    times of the first: the one-split shapes, where the final rows are stored."""
    from tools.stage1_ab import times

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
    """results/seesaw_ab_h200_out_tma.md's prose under its A/B blocks, from those blocks."""
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
    """results/seesaw_ab_h200_pv0early.md's three A/B runs (``stage1_ab``: each version's time over "new"'s): the
    kept order against the kernel before (run 1), the orders tried on top of it (runs 2 and 3)."""
    first, *later = ab_runs("seesaw_ab_h200_pv0early.md")

    def of(run, name):
        return [x for (_, _, v), x in run.items() if v == name]

    on_top = {v: of(run, v) for run in later for v in {v for _, _, v in run}}
    return dict(kept=of(first, "pv0early"), stagger=of(first, "stagger"), both=of(first, "both"),
                late=of(first, "s1late"), on_top=on_top, kept_slower=[k for k, x in first.items()
                                                                      if k[2] == "pv0early" and x >= 1])


def pv0early_claims() -> list[str]:
    """results/seesaw_ab_h200_pv0early.md's prose under its A/B blocks, from those blocks."""
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


def notes_v12_claims() -> list[str]:
    """kernels/NOTES.md v12's A/B numbers (results/seesaw_ab_h200_out_tma.md) and the bench against v11's run."""
    n = out_tma_numbers()
    ragged, uni, us = n["ragged"], n["uniform"], n["us"]
    run, v11 = result(SCHEDULE_V12), result(SCHEDULE_V11)
    _, _, s = schedule_numbers(SCHEDULE_V12)
    _, _, s11 = schedule_numbers(SCHEDULE_V11)
    moved, fm = (moves(v11["ragged"], run["ragged"], key) for key in ("balanced_us", "flashmla_us"))
    one = {(b["batch"], b["lens_max"]): 1 - b["rule_us"] / a["rule_us"] for a, b in zip(v11["uniform"], run["uniform"])
           if b["heads"] == 128 and b["rule_splits"] == 1}
    first = one.pop((64, 1024))
    h128, h128_11 = s["uniform_h128_backend_x_flashmla"], s11["uniform_h128_backend_x_flashmla"]
    h16 = s["uniform_h16_backend_x_flashmla"]
    rg, rg11 = s["ragged_balanced_x_flashmla"], s11["ragged_balanced_x_flashmla"]
    out_bytes, copy = 64 * 128 * 512 * 2, run["ceilings"]["copy_TBps"] * 1e12  # B=64's output in bf16
    worst, worst11 = worst_h128_backend(run), worst_h128_backend(v11)
    assert (worst["batch"], worst["lens_max"]) == (worst11["batch"], worst11["lens_max"]) == (64, 1024)
    return [f"With one split the call is {n['saved'][0]:.1f} us faster at uniform B=64, L=1024 "
            f"({us[('u B64 1024', 'rule', 'new')]:.1f} ->\n{us[('u B64 1024', 'rule', 'out_tma')]:.1f} us), "
            f"{n['saved'][1]:.1f} at B=64, L=4096 and {n['saved'][2]:.1f} at B=128, L=1024",
            f"{100 * (uni['staged'] - 1):.0f}% faster at uniform B=64, L=1024",
            f"{span([100 * (1 - x) for x in ragged['staged']], 1)}% slower on the\nragged batches",
            f"balanced path {100 * (uni['kept'] - 1):.1f}% faster; the ragged batches within one run's noise (geomean "
            f"{geometric_mean(ragged['kept']):.3f}x",
            f"{span(n['both'])}x slower at every timing",
            f"which does not spill, is {span(n['both_rule'])}x slower",
            f"| {rg['geomean']:.3f}x (v11 {rg11['geomean']:.3f}x), min {rg['min']:.3f}x; "
            f"the balanced path moved by {signed(moved)} and "
            f"FlashMLA by {signed(fm)} between the runs |",
            f"what the backend runs: {h128['below_0.9']} of 12 shapes below (v11: {h128_11['below_0.9']}), min "
            f"{h128['min']:.2f}x (B=64, L=1024; v11 {h128_11['min']:.2f}x), geomean {h128['geomean']:.2f}x "
            f"(v11 {h128_11['geomean']:.2f}x)",
            f"what the backend runs: {h16['geomean']:.2f}x, min {h16['min']:.2f}x |",
            f"the rule's path is {100 * first:.1f}% faster than in v11's run at B=64, L=1024 and\n"
            f"{signed(list(one.values()))} at the other {len(one)} shapes",
            f"(B=64: 64 x 128 x 512 bf16 values, {out_bytes / 1e6:.1f} MB, {out_bytes / copy * 1e6:.1f} us at the "
            f"bench run's {copy / 1e12:.2f} TB/s)"]


def notes_v13_claims() -> list[str]:
    """kernels/NOTES.md v13's A/B numbers (results/seesaw_ab_h200_pv0early.md), its overhead timings
    (results/schedule_overhead_h200.md) and the bench against v12's run."""
    n = pv0early_numbers()
    (first, *_) = ab_runs("seesaw_ab_h200_pv0early.md")
    geo = geometric_mean(n["kept"])
    f = overhead_fit()
    m = f["measured"]
    pair = bench_pair(SCHEDULE_V13, SCHEDULE_V12)
    run, v12, x, s, worst = pair["run"], pair["before"], pair["x"], pair["s"], pair["worst"]

    def h16(r):
        return r["heads"] == 16

    from tools.schedule_bench import backend_path

    assert {backend_path(r, run["info"]["sm_count"]) for r in run["uniform"] + v12["uniform"] if h128_b4(r)} == {"rule"}
    rg, u, u12 = pair["rg"], pair["u"], pair["u_old"]
    assert (worst["batch"], worst["lens_max"]) == (64, 1024)
    short = first[("u B64 1024", "rule", "pv0early")]
    assert f"{short:.3f}" == f"{first[('u B128 1024', 'rule', 'pv0early')]:.3f}"
    return [f"v13 took {100 * (1 - geo):.1f}% off a call's time in geomean",
            f"faster at {len(n['kept']) - len(n['kept_slower'])} of the {len(n['kept'])} timings, x "
            f"{span(n['kept'], 3)}, geomean {geo:.3f}",
            f"alone (geomean {geometric_mean(n['stagger']):.3f}) or with item 1 ({geometric_mean(n['both']):.3f}, "
            f"against item 1's {geo:.3f} in the same run)", f"{span(n['late'], 3)}x slower at every timing",
            f"geomean {span([geometric_mean(v) for v in n['on_top'].values()], 3)}x each",
            f"3 is slower than 5 at every ragged h_q=128 batch ({span(m[3], 3)}x the time at 5), 2 too "
            f"({span(m[2], 3)}x), and 4 at {sum(v > 1 for v in m[4])} of the {len(m[4])} ({span(m[4], 3)}x)",
            f"best at a true cost of {f['best']} page-times a segment, yet predicted charging {f['best']} at "
            f"{span(f['four'], 3)}x the time at 5",
            ragged_cell(pair, "v12"),
            f"what the backend runs: {u['below_0.9']} of 12 shapes below (v12: {u12['below_0.9']}), min "
            f"{u['min']:.2f}x (B=64, L=1024; v12 {u12['min']:.2f}x), geomean {u['geomean']:.2f}x "
            f"(v12 {u12['geomean']:.2f}x)",
            f"what the backend runs: {s['uniform_h16_backend_x_flashmla']['geomean']:.2f}x, min "
            f"{s['uniform_h16_backend_x_flashmla']['min']:.2f}x |",
            f"the balanced path moved by {signed(moves(v12['ragged'], run['ragged'], 'balanced_us', h16))} and "
            f"FlashMLA by {signed(moves(v12['ragged'], run['ragged'], 'flashmla_us', h16))} between the two runs",
            f"The uniform h_q=128 shapes moved by {signed(moves(v12['uniform'], run['uniform'], 'rule_us', h128_b4))} "
            f"and FlashMLA by {signed(moves(v12['uniform'], run['uniform'], 'flashmla_us', h128_b4))}",
            f"(item 1: x {short:.3f} at B=64 and 128, L=1024 on the rule's path, "
            f"{first[('u B64 4096', 'rule', 'pv0early')]:.3f} at B=64, L=4096)",
            f"**The ragged geomean**, {100 * (1 - rg['geomean']):.1f}% short of 1.0x.",
            f"Then its h_q=128 batches, at {span(x[128])}x"]


def overhead_model(lens: list[int], charged: int, costs: tuple[int, ...], line: tuple[float, float],
                   heads: int = 128) -> list[float]:
    """Modelled times (us) of the balanced path on ``lens`` (``heads``, the H200's 132 SMs) when the partition charges
    ``charged`` page-times a segment (``schedule.FIXED_OVERHEAD_PAGES``) and a segment really costs each of
    ``costs``: the slowest program of ``schedule.part_timeline`` (its pages, plus the cost per segment it walks) on
    ``line`` (us a page-time, us besides: v11's fit)."""
    import collections

    from mla_edu.kernels import schedule as sc
    from tools.schedule_bench import PAGE

    keep = sc.FIXED_OVERHEAD_PAGES
    try:
        sc.FIXED_OVERHEAD_PAGES = charged
        bars, _ = sc.part_timeline(lens, PAGE, heads, 132, overhead=0)  # a program's clock: its pages alone
    finally:
        sc.FIXED_OVERHEAD_PAGES = keep
    pages, walked = collections.Counter(), collections.Counter()
    for _, end, slot, _ in bars:
        pages[slot] = max(pages[slot], end)
        walked[slot] += 1
    return [line[1] + line[0] * max(pages[p] + c * walked[p] for p in pages) for c in costs]


def overhead_runs(heads: int = 128) -> list[list[tuple]]:
    """results/schedule_overhead_h200.md's outputs at ``heads``: (batch, median, {setting: us}, {setting: x printed})
    per line; x is a setting's time over the other one's (at 128 heads 5 over 10 in the first run, 3, 2 or 4 over 5
    in the others; at 16, 3 or 8 over 5)."""
    blocks = (RESULTS_DIR / "schedule_overhead_h200.md").read_text(encoding="utf-8").split("```")[3::2]
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
    and a true cost of 1-10 page-times: ``{(charged, cost): [us per batch]}`` (~30 s in Triton's interpreter)."""
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
    """results/schedule_overhead_h200.md's sentences under its first output, from that output and from the
    schedule's model on the same batches (``overhead_models``)."""
    text = (RESULTS_DIR / "schedule_overhead_h200.md").read_text(encoding="utf-8")
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
    lost = missing(claims, text) + missing([claim], NOTES.read_text(encoding="utf-8"))
    assert not lost and max(x) < 1, "the overhead results or kernels/NOTES.md does not say:\n" + "\n".join(lost)


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
    prediction was made; each call is ~4 s of Triton's interpreter, so not B=16's), charging 3, 5 or 8 and a true
    cost of 1-10 page-times: ``{(batch, median, charged): [us per true cost]}``."""
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
    """results/schedule_overhead_h200.md's prediction for h_q=16 (made before the timing), from the schedule's model
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
    """The h_q=16 timing's sentences (results/schedule_overhead_h200.md, kernels/NOTES.md v14), from its output and
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
        for (shape, path, version), x in run.items():
            out.setdefault((i, version, "all"), []).append(x)
            out.setdefault((i, version, path), []).append(x)
            if path == "rule" and shape.startswith("r "):
                out.setdefault((i, version, "ragged rule"), []).append(x)
    return out


def w1left_numbers() -> dict:
    """results/seesaw_ab_h200_w1left.md's two A/B runs: w1left against v13's kernel (run 1); v13 and w0right against
    w1left, kept (run 2)."""
    return ab_numbers("seesaw_ab_h200_w1left.md")


def w1left_claims() -> list[str]:
    """results/seesaw_ab_h200_w1left.md's prose under its A/B blocks, from those blocks."""
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
    """results/kernel_stalls_h200_{version}_sass.csv.gz read: FlashMLA's samples on the seesaw's scale (seesaw = 100),
    each reason on that scale for both kernels, and the seesaw's waits this project's notes name."""
    from tools.stall_summary import ALL, kernels, read, samples, short_name, totals

    tables = {short_name(name): rows for name, rows in
              kernels(read(str(RESULTS_DIR / f"kernel_stalls_h200_{version}_sass.csv.gz")))}
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
    """results/kernel_stalls_h200_v14.md's reading, from its two sampling files."""
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


def notes_v14_claims() -> list[str]:
    """kernels/NOTES.md v14 and its 'Where it stands': the stall sampling, the A/B, the h_q=16 overhead timing
    (results/schedule_overhead_h200.md) and the bench against v13's run."""
    v13s, v14s = stall_numbers("v13"), stall_numbers("v14")
    n = w1left_numbers()
    kept, v13 = n[1, "w1left", "all"], n[2, "v13", "all"]
    right = n[2, "w0right", "all"]
    (rows,) = overhead_runs(16)
    big3 = [x[3] for b, _, _, x in rows if b != 16]
    predicted = h16_prediction()
    low = predicted[2] + predicted[3]
    pair = bench_pair(SCHEDULE_V14, SCHEDULE_V13)
    x, s, worst = pair["x"], pair["s"], pair["worst"]
    rg, u, u13 = pair["rg"], pair["u"], pair["u_old"]
    assert pair["below"] == [(64, 1024), (64, 4096), (128, 1024)]  # as NOTES names them

    gains = [1 - geometric_mean(kept), geometric_mean(v13) - 1]
    return [f"took {v13s['fm']:.1f} (v9: 81)", f"on slot 1's right half ({v13s['top_long']:,} samples)",
            f"faster at {sum(x < 1 for x in kept)} of the {len(kept)} timings, x {span(kept, 3)}, geomean "
            f"{geometric_mean(kept):.3f}; v13 against it (run 2): geomean {geometric_mean(v13):.3f}, slower at all "
            f"{len(n[2, 'v13', 'balanced'])} timings of the balanced path",
            f"slower at {sum(x > 1 for x in right)} of {len(right)}, geomean {geometric_mean(right):.3f}",
            f"FlashMLA's kernel takes {v14s['fm']:.1f} on the common scale",
            f"now on slot 1's left half, took {v14s['top_long']} samples; warpgroup 0's for m1 {v14s['wait_on'](5)} "
            f"(v13: {v13s['wait_on'](5)})",
            f"(its tiles) {v14s['reason']['stall_long_sb'][0]:.1f} against FlashMLA's "
            f"{v14s['reason']['stall_long_sb'][1]:.1f}, and at a barrier {v14s['reason']['stall_barrier'][0]:.1f} "
            f"against {v14s['reason']['stall_barrier'][1]:.1f}",
            f"P1 V1_right ({v14s['barrier'][0]} samples) and warpgroup 0's P1 V1_left ({v14s['barrier'][1]})",
            f"3 against 5 took {span(big3, 3)}x the time at 5 on the ragged B=64 and 128 batches, not the "
            f"{span(low, 3)}x v13's model predicted", f"8 took {span([x[8] for *_, x in rows], 3)}x",
            ragged_cell(pair, "v13"),
            f"what the backend runs: {u['below_0.9']} of 12 shapes below (v13: {u13['below_0.9']}), min "
            f"{u['min']:.2f}x (B={worst['batch']}, L={worst['lens_max']}; v13 {u13['min']:.2f}x), geomean "
            f"{u['geomean']:.2f}x (v13 {u13['geomean']:.2f}x)",
            f"what the backend runs: {s['uniform_h16_backend_x_flashmla']['geomean']:.2f}x, min "
            f"{s['uniform_h16_backend_x_flashmla']['min']:.2f}x |",
            f"**The ragged geomean**, {100 * (1 - rg['geomean']):.1f}% short of 1.0x, at h_q=128 {span(x[128])}x",
            f"v14 a further {span([100 * g for g in gains], 1)}% (two runs) by having warpgroup 1 score the half "
            f"of its tile that lands first", profile_v13_claim()]


def profile_v13_claim() -> str:
    """kernels/NOTES.md v14's reading of results/schedule_profile_h200_v13.txt: on its ragged h_q=128 lines, the
    balanced path's stage 2 and stage 1 against FlashMLA's combine and attention kernels (us per call)."""
    text = (RESULTS_DIR / "schedule_profile_h200_v13.txt").read_text(encoding="utf-8")
    times = {}
    for shape, path, body in re.findall(r"^(r B\d+ L\d+ h128) (balanced|FlashMLA) .*?\): (.*)$", text, re.M):
        times[shape, path] = [float(v) for v in re.findall(r" ([\d.]+)(?:,|$)", body)]
    shapes = sorted({shape for shape, _ in times})
    assert len(shapes) == 2 and all(len(v) == 2 for v in times.values())
    stage2 = [times[s, "balanced"][1] - times[s, "FlashMLA"][1] for s in shapes]
    stage1 = [times[s, "balanced"][0] - times[s, "FlashMLA"][0] for s in shapes]
    return (f"has it {span(stage2, 1)} us slower than FlashMLA's combine on the ragged h_q=128 batches it times, where "
            f"stage 1 is {span(stage1, 1)} us slower")


def qfirst_numbers() -> dict:
    """results/seesaw_ab_h200_qfirst.md's three A/B runs: qsplit and qfirst against v14 (run 1); v14 ("v14cur") and
    qsplit against qfirst, kept (run 2); qlr and the file runs 1 and 2 timed against qfirst as committed (run 3)."""
    return ab_numbers("seesaw_ab_h200_qfirst.md")


def qfirst_claims() -> list[str]:
    """results/seesaw_ab_h200_qfirst.md's reading, from its three runs."""
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
    """results/stage2_ab_h200.md's runs (``tools.stage2_ab``): per run ``{"regs": {config: registers}, "chosen":
    {problem: the config stage2_config chose} (run 3 on; else empty),
    "rows": {problem: {config: (stage 2 us, whole call us)}}}``, a problem as printed ("r h128 B64 1024")."""
    runs = []
    for block in re.findall(r"```\n(FlashMLA.*?)```", (RESULTS_DIR / "stage2_ab_h200.md").read_text(encoding="utf-8"),
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
    """What results/stage2_ab_h200.md's reading and kernels/NOTES.md v15 take from its first two runs: registers,
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
    """results/stage2_ab_h200.md's reading, from its two runs."""
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


def notes_v15_claims() -> list[str]:
    """kernels/NOTES.md v15 and its 'Where it stands': the A/B of q's order, stage 2's configs and the bench
    against v14's run."""
    n = qfirst_numbers()
    kept, v14 = n[1, "qfirst", "all"], n[2, "v14cur", "all"]
    s2 = stage2_numbers()
    regs = s2["regs"]
    pair = bench_pair(SCHEDULE_V15, SCHEDULE_V14)
    run, before, s, worst = pair["run"], pair["before"], pair["s"], pair["worst"]
    u, u14 = pair["u"], pair["u_old"]
    assert pair["below"] == [(64, 1024), (128, 1024)]  # as NOTES names them ("at B=64 and 128, L=1024")
    gains = [1 - geometric_mean(kept), geometric_mean(v14) - 1]

    return [f"faster at {sum(x < 1 for x in kept)} of the {len(kept)} timings, x {span(kept, 3)}, geomean "
            f"{geometric_mean(kept):.3f}; v14 against it (run 2): slower at {sum(x > 1 for x in v14)} of "
            f"{len(v14)}, geomean {geometric_mean(v14):.3f}",
            f"geomean {geometric_mean(n[1, 'qsplit', 'all']):.3f} against v14 (run 1) and "
            f"{geometric_mean(n[2, 'qsplit', 'all']):.3f} against qfirst (run 2)",
            f"geomean {geometric_mean(n[3, 'qlr', 'all']):.3f} against qfirst (run 3)",
            f"against the kernel as committed: {geometric_mean(n[3, 'qfirst', 'all']):.3f}",
            f"at {regs[STAGE2_NOW]} registers a thread only {s2['per_sm']} fit an SM",
            f"Fewer registers ([16, 2, 128] at 8 warps: {regs[STAGE2_FEW_REGS]}) take {span(s2['few'], 1)} us off "
            f"stage 2 at h_q=16, B=64",
            f"([8, 1, 512] at 4 warps: {regs[STAGE2_ONE_PARTIAL]}) takes {span(s2['one'], 1)} us off at h_q=128, B=128",
            f"stage 2 then takes {span(s2['slow'], 1)}x as long",
            f"at 3 programs an SM, took {span(s2['walk'], 1)} us off at the ragged h_q=128 batches of B=64 and 128, "
            f"and added up to {-min(s2['walk_else']):.1f} us at others",
            f"Each batch's fastest config would take {span([100 * b for b in s2['best']], 1)}% off the whole call",
            ragged_cell(pair, "v14"),
            f"what the backend runs: {u['below_0.9']} of 12 shapes below (v14: {u14['below_0.9']}), min "
            f"{u['min']:.2f}x (B={worst['batch']}, L={worst['lens_max']}; v14 {u14['min']:.2f}x), geomean "
            f"{u['geomean']:.2f}x (v14 {u14['geomean']:.2f}x); FlashMLA's own times moved by "
            f"{signed(moves(before['uniform'], run['uniform'], 'flashmla_us', h128_b4))} between the runs |",
            f"what the backend runs: {s['uniform_h16_backend_x_flashmla']['geomean']:.2f}x, min "
            f"{s['uniform_h16_backend_x_flashmla']['min']:.2f}x |",
            f"**Uniform h_q=128 at B=64 and 128, L=1024** ({u['min']:.2f}x)",
            f"and v15 {span([100 * g for g in gains], 1)}% by issuing q before the first pair, in two halves",
            run2_claim()]


def second_run_claim(name: str, below: list[tuple[int, int]], named: str) -> str:
    """kernels/NOTES.md's sentence on a second bench run (results/``name``) at the same code: the ragged
    acceptance, met, and the uniform h_q=128 shapes below 0.9x, ``below``, which NOTES names as ``named``."""
    _, _, s = schedule_numbers(name)
    rg, u = s["ragged_balanced_x_flashmla"], s["uniform_h128_backend_x_flashmla"]
    assert h128_below(result(name)) == below and rg["geomean"] >= 1 and rg["min"] >= 0.8
    return (f"ragged {rg['geomean']:.3f}x in geomean, min {rg['min']:.3f}x; uniform h_q=128 {u['below_0.9']} of 12 "
            f"shapes below 0.9x ({named}), min {u['min']:.2f}x, geomean {u['geomean']:.2f}x")


def run2_claim() -> str:
    """kernels/NOTES.md v15's sentence on the second bench run at v15's kernel."""
    return second_run_claim("kernel_bench_h200_schedule_v15_run2.json", [(64, 1024), (64, 4096), (128, 1024)],
                            "B=64, L=1024 and 4096; B=128, L=1024")



def stage2_choice_numbers() -> dict:
    """results/stage2_ab_h200.md's run 3, which prints the config ``stage2_config`` chose per problem: stage 2's
    time over the fastest config's (us, as printed) per problem, and against the old config ([16, 4, 128] at 4
    warps) stage 2's time saved (us) and the whole call's (fraction)."""
    run = stage2_runs()[2]
    rows, chosen = run["rows"], run["chosen"]
    over = {p: round(rows[p][c][0] - min(a for a, _ in rows[p].values()), 1) for p, c in chosen.items()}
    saved = {p: round(rows[p][STAGE2_NOW][0] - rows[p][c][0], 1) for p, c in chosen.items()}
    whole = {p: 1 - rows[p][c][1] / rows[p][STAGE2_NOW][1] for p, c in chosen.items()}
    return dict(over=over, saved=saved, whole=whole)


def stage2_choice_claims() -> list[str]:
    """results/stage2_ab_h200.md's reading of run 3 (NOTES v16 says the same)."""
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
    """'a% slower to b% faster' of the fractions of a call's time ``saved`` (negative: slower), as NOTES v16 and
    results/stage2_ab_h200.md write them."""
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
    """results/seesaw_ab_h200_prefetch.md's two A/B runs (pf_w0 and pf2 against pf_w1, v15 too, run 1; pf_w0,
    pf_first and pf_start against v15, run 2), and run 2's times at uniform B=64, L=1024 (us)."""
    n = ab_numbers("seesaw_ab_h200_prefetch.md")
    block = ab_blocks("seesaw_ab_h200_prefetch.md")[1]
    line = one(r"u B64 1024 h128 rule1 .*", block).group(0)
    t = {v: float(one(rf" {v} ([\d.]+)", line.split("balanced:")[0]).group(1)) for v in ("pf_w0", "new")}
    t["FlashMLA"] = float(one(r"FlashMLA ([\d.]+)", line).group(1))
    return dict(n=n, runs=ab_runs("seesaw_ab_h200_prefetch.md"), t=t)


def prefetch_claims() -> list[str]:
    """results/seesaw_ab_h200_prefetch.md's reading under its A/B blocks."""
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


def notes_v16_claims() -> list[str]:
    """kernels/NOTES.md v16 and its 'Where it stands': stage 2's choice scored, the prefetch A/B, the bench against
    v15's first run, and v13's eager profile at uniform B=64, L=1024."""
    c = stage2_choice_numbers()
    p = prefetch_numbers()
    n, t = p["n"], p["t"]
    run2 = p["runs"][1]
    pair = bench_pair(SCHEDULE_V16, SCHEDULE_V15)
    run, before, s, worst, u, u15 = (pair[k] for k in ("run", "before", "s", "worst", "u", "u_old"))
    assert pair["below"] == [(64, 1024), (128, 1024), (128, 4096)]
    b128 = [uniform_row(x, 128, 4096)["rule_us"]
            for x in (run, before, result("kernel_bench_h200_schedule_v15_run2.json"))]
    l1024 = [uniform_row(run, b, 1024)["flashmla_us"] / uniform_row(run, b, 1024)["rule_us"] for b in (64, 128)]
    text = (RESULTS_DIR / "schedule_profile_h200_v13.txt").read_text(encoding="utf-8")
    fm = float(one(r"u B64 L1024 h128 FlashMLA .*?<Traits ([\d.]+),", text).group(1))
    mine = float(one(r"u B64 L1024 h128 rule .*?stage1_seesaw_kernel ([\d.]+)", text).group(1))
    tiles, parts = 64 * 1024 // 64, 132 // 2  # a head block's tiles at B=64, L=1024; FlashMLA's programs a head block
    off = sum(v > 0.1 for v in c["over"].values())
    h16 = moves(before["ragged"], run["ragged"], "balanced_us", lambda r: not is_h128(r))
    return [f"at {16 - off} of the 16 problems, and at most {max(c['over'].values()):.1f} us slower at the other two",
            f"Against the old config the whole call, timed apart, is {slower_to_faster(c['whole'])}",
            f"v15 is faster at all 9 timings of the rule's path, geomean {geometric_mean(n[1, 'v15', 'rule']):.3f}",
            f"against v15, {span(rule(run2, 'pf_w0', uniform_1024), 3)} "
            f"at the three uniform L=1024 shapes",
            f"took B=64 from {t['FlashMLA'] / t['new']:.3f}x to {t['FlashMLA'] / t['pf_w0']:.3f}x FlashMLA in its "
            f"run",
            ragged_cell(pair, "v15"),
            f"what the backend runs: {u['below_0.9']} of 12 shapes below (v15: {u15['below_0.9']}), min "
            f"{u['min']:.2f}x (B={worst['batch']}, L={worst['lens_max']}; v15 {u15['min']:.2f}x), geomean "
            f"{u['geomean']:.2f}x (v15 {u15['geomean']:.2f}x). The rule's path runs v15's code; its times moved by "
            f"{signed(moves(before['uniform'], run['uniform'], 'rule_us', h128_b4))} and FlashMLA's by "
            f"{signed(moves(before['uniform'], run['uniform'], 'flashmla_us', h128_b4))} between the runs |",
            f"what the backend runs: {s['uniform_h16_backend_x_flashmla']['geomean']:.2f}x, min "
            f"{s['uniform_h16_backend_x_flashmla']['min']:.2f}x |",
            f"at h_q=16 moved by {signed(h16)}",
            f"it took {b128[0]:.1f} us in this run, and {b128[1]:.1f} and {b128[2]:.1f} us in v15's two runs",
            f"**Uniform h_q=128 at B=64 and 128, L=1024** ({l1024[0]:.2f}x and {l1024[1]:.2f}x)",
            f"FlashMLA's stage 1 took {fm:.1f} us against the seesaw's {mine:.1f}. It spreads a head block's "
            f"{tiles:,} tiles over {parts} programs ({tiles / parts:.1f} each), where the seesaw gives 64 programs "
            f"{tiles // 64} each: for the same work, about {100 * (1 - fm * 16 / (tiles / parts) / mine):.0f}% less "
            f"time",
            run2_v16_claim()]


def v17_numbers() -> dict:
    """results/seesaw_ab_h200_v17.md's three A/B runs, by what they time: v16 against s0_ahead_whole (run 1), against
    fm_order (run 2) and against own_barriers (run 3); fm_order's two variants against it (run 2); and v12's
    s0_ahead against its kept kernel, which both files quote again."""
    n = ab_numbers("seesaw_ab_h200_v17.md")
    v = dict(s0=n[1, "v16", "all"], fm=n[2, "v16", "all"], own=n[3, "v16", "all"], left=n[2, "fmorder_l", "all"],
             both=n[2, "fmorder_s0", "all"], v12=span(out_tma_numbers()["both"]))
    assert min(v["left"] + v["both"]) > 1  # "fm_order is faster than both its variants at every timing"
    assert max(abs(x - 1) for x in v["own"]) < 0.04  # "within one run's noise"
    assert max(v["s0"]) < 1  # "faster at all"
    return v


def v17_claims() -> list[str]:
    """The numbers kernels/NOTES.md v17 takes from results/seesaw_ab_h200_v17.md, and v16's ratios at L=1024."""
    v = v17_numbers()
    s0, fm, own, left, both = (v[k] for k in ("s0", "fm", "own", "left", "both"))
    run = result(SCHEDULE_V16)
    l1024 = [uniform_row(run, b, 1024)["flashmla_us"] / uniform_row(run, b, 1024)["rule_us"] for b in (64, 128)]
    return [f"L=1024** ({l1024[0]:.2f}x and {l1024[1]:.2f}x in v16's run;",
            f"**Why v12's version of item 1 was {v['v12']}x slower.**",
            f"all {len(s0)} timings, x {span(s0, 3)}, geomean {geometric_mean(s0):.3f}",
            f"faster at {sum(x < 1 for x in fm)} of {len(fm)}, geomean {geometric_mean(fm):.3f}",
            f"geomean {geometric_mean(left):.3f} and {geometric_mean(both):.3f}",
            f"geomean {geometric_mean(own):.3f}, x {span(own, 3)}"]


def notes_v17_claims() -> list[str]:
    """kernels/NOTES.md v17: the A/B runs, the sampling at B=64, L=1024 and the back-to-back timing."""
    n = stall_numbers("v17")
    flushed = span(back_to_back_flush_numbers()[0][b2b_shapes()[0]])
    return [f"in v16's run; {flushed}x with the L2 flushed between calls)"] + v17_claims() + stall_v17_claims()[1:2] \
        + back_to_back_claims()[:2] + back_to_back_flush_claims()[:1] + [
        f"Warpgroup 0 then\nwaits for P1 ({n['p1']}) and m1 ({n['wait_on'](5)})",
        f"FlashMLA's kernel takes {n['fm']:.1f} here on the seesaw's scale"]


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
    """results/back_to_back_h200.md's runs (``tools.back_to_back.parse``), in order: with a one-element kernel
    between calls, or (``flush``) 256 MB written."""
    from tools.back_to_back import parse

    return [parse(run) for block in ab_blocks("back_to_back_h200.md") for run in re.split(r"run \d+\n", block)
            if "separator alone" in run and ("256 MB written" in run) == flush]


def b2b_shapes() -> tuple[str, ...]:
    """``tools.back_to_back``'s problems as its output names them ("u B64 1024"), in its order."""
    from tools.back_to_back import PROBLEMS

    return tuple(f"u B{b} {length}" for b, length in PROBLEMS)


def back_to_back_flush_numbers() -> tuple[dict, dict, dict]:
    """Per shape of results/back_to_back_h200.md's two runs with the L2 flushed between calls: FlashMLA's time over
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
    """The reading of results/back_to_back_h200.md's runs with the L2 flushed between calls."""
    apart, b2b, extra = back_to_back_flush_numbers()
    shapes = b2b_shapes()
    return [f"FlashMLA's time over mla_edu's is {span(apart[shapes[0]])}x at B=64, L=1024, "
            f"{span(apart[shapes[1]])}x at B=128, L=1024, and {span(apart[shapes[2]])}x at B=64, L=4096; back to back "
            f"in these runs "
            f"{span(b2b[shapes[0]])}x, {span(b2b[shapes[1]])}x and {span(b2b[shapes[2]])}x",
            f"at L=1024 by {span(extra[shapes[0]], 1)} us at B=64 and by {span(extra[shapes[1]], 1)} us at B=128"]


def back_to_back_claims() -> list[str]:
    """results/back_to_back_h200.md's reading (and kernels/NOTES.md v17's), from its three runs."""
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
    """results/kernel_stalls_h200_v17.md's reading (and kernels/NOTES.md v17's), from its sampling file."""
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


def run2_v16_claim() -> str:
    """kernels/NOTES.md v16's sentence on the second bench run at v16's code."""
    name = "kernel_bench_h200_schedule_v16_run2.json"
    b128 = uniform_row(result(name), 128, 4096)["rule_us"]
    return (second_run_claim(name, [(64, 1024), (64, 4096), (128, 1024), (128, 4096)],
                             "B=64, L=1024 and 4096; B=128, L=1024 and 4096") + f"; B=128, L=4096 took {b128:.1f} us")


ONE_SPLIT = ("u B64 1024", "u B64 4096", "u B128 1024")  # the A/B shapes the rule runs with one split


def v18_numbers() -> dict:
    """results/seesaw_ab_h200_v18.md: its three PDL A/B runs (``x`` of the kept kernel "head" and "exit_trigger"
    at the one-split timings, where the variants differ, and at every other timing, where they run the same code),
    the evict_first timings (``tools.l2_policy_ab``'s lines) and the two-requests-a-program timings."""
    from tools.stage1_ab import parse

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


def ncu_clocks(name: str) -> dict:
    """``{kernel: [SM frequency in GHz]}`` of an Nsight Compute report in results/``name``, per profiled launch
    (the kernel named by the first word of its header line, FlashMLA's without its template)."""
    out, kernel = {}, None
    for line in (RESULTS_DIR / name).read_text(encoding="utf-8").splitlines():
        head = re.match(r"  (?:void )?(\w+)[<( ].*Context \d+", line)
        if head:
            kernel = head[1]
        freq = re.match(r"\s+SM Frequency\s+Ghz\s+([\d.]+)", line)
        if freq:
            out.setdefault(kernel, []).append(float(freq[1]))
    return out


def v18_claims() -> list[str]:
    v, t = v18_numbers(), steady_tile_numbers()
    clocks = ncu_clocks("kernel_profile_h200_seesaw_ncu.txt")
    fm, ours = clocks["flash_fwd_splitkv_mla_kernel"], clocks["stage1_seesaw_kernel"]
    assert max(fm) < min(ours)  # "not the clock": FlashMLA's kernel ran slower clocked
    c = v["chain"]
    return [f"the kept kernel reads x {span(v['pdl'], 3)} against it over\nthree runs",
            f"x reads {span(v['same_head'] + v['same_exit'], 3)}",
            f"read {span(v['b16'], 3)} in all three runs", f"Hinted over plain: {span(v['hint'], 3)} back to back",
            f"Slower: {c['B128 L1024']['parts64_ef']:.2f} against\n{c['B128 L1024']['rule_ef']:.2f} us "
            f"at L=1024, {c['B128 L4096']['parts64_ef']:.1f} against {c['B128 L4096']['rule_ef']:.1f}",
            f"adds {t['ours']:.2f} us\nto each of our 128 programs and {t['fm']:.2f} us to each of FlashMLA's 132",
            f"runs there at {100 * t['fm_rate']:.0f}% of the\nrun's matmul rate, ours at {100 * t['ours_rate']:.0f}%",
            f"the copy timed first reads {span(v['aa_b16'][0::2], 3)} at the rule's 4 splits at uniform B=16, the\n"
            f"middle one {span(v['aa_b16'][1::2], 3)}", f"the copies read {span(v['aa'] + v['same'], 3)}",
            f"FlashMLA's kernel ran at {span(fm)} GHz, the seesaw at {span(ours)}",
            f"faster at all {len(v['p1'])} timings, x {span(v['p1'], 3)}, geomean {geometric_mean(v['p1']):.3f}",
            f"its own copy\nreads {span(v['p1_aa'], 3)}"]



def stale_max_table() -> tuple[dict, dict]:
    """results/stale_max_error_cpu.md's tables (``tests/test_stale_max_error.py`` checks them against a fresh run):
    ``{(P dtype, threshold): (rms, x threshold 0, max)}`` and ``{offset: (rms, x offset 0)}``."""
    text = (RESULTS_DIR / "stale_max_error_cpu.md").read_text(encoding="utf-8")
    num = r"([\d.]+(?:e[+-]\d+)?)"
    errs = {(dt, float(th)): tuple(map(float, rest)) for dt, th, *rest in
            re.findall(rf"^\| (\w+) \| {num} \| {num} \| {num} \| {num} \|$", text, re.M)}
    offs = {float(off): tuple(map(float, rest)) for off, *rest in
            re.findall(rf"^\| {num} \| {num} \| {num} \|$", text, re.M)}
    return errs, offs


def v19_numbers() -> dict:
    """results/seesaw_ab_h200_v19.md's four A/B runs (the variants against v18's kernel, then v18's against the kept
    one), results/stale_max_error_cpu.md's table, and the v19 bench run against v16's."""
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


def v19_claims() -> list[str]:
    v = v19_numbers()
    s, run, v16, t, t16 = (v[k] for k in ("s", "run", "v16", "tile", "tile16"))
    rg, u = s["ragged_balanced_x_flashmla"], s["uniform_h128_backend_x_flashmla"]
    below = h128_below(run)
    ratio = {shape: uniform_row(run, *shape)["flashmla_us"] / uniform_row(run, *shape)["rule_us"]
             for shape in ((128, 1024), (64, 1024), (128, 4096))}
    old = uniform_row(v16, 128, 4096)["flashmla_us"] / uniform_row(v16, 128, 4096)["rule_us"]
    fm = [uniform_row(x, 64, 16384)["flashmla_us"] for x in (v16, run)]
    choice = s["uniform_backend_over_best_split"]
    assert below == [(128, 1024)] and u["below_0.9"] == 1
    return [f"v18 left a 64-token tile at {t16['ours'] / t16['fm']:.2f}x FlashMLA's cost",
            f"{100 * (1 - max(v['bound_rule'])):.1f}-{100 * (1 - min(v['bound_rule'])):.1f}%\n"
            f"   of a call on the rule's path, {100 * (1 - max(v['bound_bal'])):.1f}-"
            f"{100 * (1 - min(v['bound_bal'])):.1f}% on the balanced one",
            f"x {span(v['cond'], 3)}: the\n   reductions cost",
            f"at all {len(v['warp'])} timings of two runs: x\n   {span(v['warp_rule'], 3)} on the rule's path, "
            f"{span(v['warp_bal'], 3)} on the balanced one",
            f"v18's is {span(v['v18_rule'], 3)}x slower on the rule's path, {span(v['v18_bal'], 3)}x on the "
            f"balanced one",
            f"gives {v['bf16']:.2f}x the rms error of the exact max, in\nfp16 {v['fp16']:.2f}x",
            f"costs nothing ({v['off3']:.2f}x: the top entry is a power of two), 0.25 below\ncosts {v['off025']:.2f}x",
            f"rose from {v['err16']:.4f} (v16's run) to {v['err']:.4f}",
            f"| {rg['geomean']:.3f}x, min {rg['min']:.3f}x | yes |",
            f"| {u['below_0.9']} below: B=128, L=1024 at {ratio[128, 1024]:.3f}x; B=64, L=1024 {ratio[64, 1024]:.3f}x; "
            f"B=128, L=4096 {ratio[128, 4096]:.3f}x ({old:.3f}x in v16's run) | no |",
            f"| {s['uniform_h16_backend_x_flashmla']['geomean']:.2f}x | yes |",
            f"| {choice['within_5pct']} of {choice['shapes']} | yes |",
            f"a tile now adds {t['ours']:.2f} us to each of our 128 programs and {t['fm']:.2f} us to each of\n"
            f"FlashMLA's 132 (v16's run: {t16['ours']:.2f} and {t16['fm']:.2f}): {t['ours'] / t['fm']:.2f}x",
            f"on the same line {t['fixed']:.1f} us for the seesaw and {t['fm_fixed']:.1f} for FlashMLA",
            f"**Uniform h_q=128 at B=128, L=1024** ({ratio[128, 1024]:.3f}x)",
            f"{fm[0]:.1f} us in v16's run, {fm[1]:.1f} in v19's, {100 * (fm[1] / fm[0] - 1):.1f}% apart"]


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


def test_notes_v19_quote_its_runs():
    lost = missing(v19_claims(), NOTES.read_text(encoding="utf-8"))
    assert not lost, "kernels/NOTES.md v19 does not say:\n" + "\n".join(lost)


def v20_numbers() -> dict:
    """results/seesaw_ab_h200_v20.md's A/B run, the v20 bench against v19's, and every timing this session made of
    uniform h_q=128, B=128, L=1024 on the rule's path: FlashMLA's, and ours with v19's or v20's kernel."""
    from tools.schedule_bench import summary
    from tools.stage1_ab import parse, times

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


def v20_claims() -> list[str]:
    v = v20_numbers()
    s, bench, v19, ours, fm = (v[k] for k in ("s", "bench", "v19", "ours", "fm"))
    rg, u = s["ragged_balanced_x_flashmla"], s["uniform_h128_backend_x_flashmla"]
    worst = worst_h128_backend(bench)
    b128 = [uniform_row(x, 128, 1024) for x in (v19, bench)]
    assert h128_below(bench) == [] and u["below_0.9"] == 0 and (worst["batch"], worst["lens_max"]) == (64, 1024)
    return [f"reads v19's slower at {len(v['rule']) + (v['b16'] > 1)} of {len(v['rule']) + 1} timings on the rule's "
            f"path (x {span(v['rule'], 3)}) and {span(v['bal'], 3)} on the balanced one",
            f"| {rg['geomean']:.3f}x, min {rg['min']:.3f}x | yes |",
            f"| none below; the lowest B=64, L=1024 at {u['min']:.3f}x, B=128, L=1024 at "
            f"{b128[1]['flashmla_us'] / b128[1]['rule_us']:.3f}x | yes |",
            f"| {s['uniform_h16_backend_x_flashmla']['geomean']:.2f}x | yes |",
            f"| {s['uniform_backend_over_best_split']['within_5pct']} of 30 | yes |",
            f"our time went from {b128[0]['rule_us']:.1f} to {b128[1]['rule_us']:.1f} us\nand FlashMLA's from "
            f"{b128[0]['flashmla_us']:.1f} to {b128[1]['flashmla_us']:.1f}",
            f"by {100 * (b128[1]['flashmla_us'] / b128[0]['flashmla_us'] - 1):.1f}%",
            f"session's {len(fm)} timings of FlashMLA at that shape (two benches, five A/B runs) its time spans "
            f"{min(fm):.1f}-{max(fm):.1f} us; over the\n{len(ours)} of v19's and v20's kernels, ours spans "
            f"{min(ours):.1f}-{max(ours):.1f}",
            f"between {min(fm) / max(ours):.3f}x and {max(fm) / min(ours):.3f}x",
            f"The medians of those timings, {median(fm):.1f} and\n{median(ours):.1f} us, give "
            f"{median(fm) / median(ours):.3f}x: above the line"]


def test_the_v20_run_is_read_right():
    v = v20_numbers()
    assert min(v["rule"]) > 1 and v["b16"] < 1  # v19's slower on the rule's path but where it was timed first
    assert min(v["fm"]) / max(v["ours"]) < 0.9 < max(v["fm"]) / min(v["ours"])  # either side of 0.9x by the run
    assert_results_say("seesaw_ab_h200_v20.md", [
        f"slower at {len(v['rule'])} of {len(v['rule']) + 1} timings (x {span(v['rule'], 3)})",
        f"On the balanced path x is {span(v['bal'], 3)}", f"those of v19's {span(v['aa19'], 3)}"])


def test_notes_v20_quote_its_runs():
    lost = missing(v20_claims(), NOTES.read_text(encoding="utf-8"))
    assert not lost, "kernels/NOTES.md v20 does not say:\n" + "\n".join(lost)

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


def test_notes_v18_quote_its_runs():
    lost = missing(v18_claims(), NOTES.read_text(encoding="utf-8"))
    assert not lost, "kernels/NOTES.md v18 does not say:\n" + "\n".join(lost)
