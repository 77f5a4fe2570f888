"""The measured numbers of README and docs/results.md (README's Results in full), checked against the committed
results they come from.

Each claim is a sentence (or table row) of the file it is checked in (``CLAIMS``: README, docs/results.md or
both) with its numbers rendered from ``results/*.json``, or, where a number has no JSON, from the ``results/*.md``
file the text points at; whitespace is normalised, so prose may wrap anywhere. A number quoted in two places
(docs/results.md and notebook 06) is rendered from the same source in both. Each check names the file to update.
The kernel lab's prose (``docs/kernel_essay.md``, the A/B results) is checked by ``kernel_lab/tests``.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache

import pytest
from docs_text import NUMBER_WORDS, README, RESULTS_DOC, SOURCES, missing, norm, one, span

from mla_edu.paths import REPO_ROOT, RESULTS_DIR

INSTRUCTOR_DOC = REPO_ROOT / "docs" / "instructor.md"
from mla_edu.util import PAGE_SIZE


#: GSM8K of the five eager runs in PR #6998's description (docs/sources.md); the seed's guess uses their mean
PR_6998_EAGER_RUNS = (0.917, 0.917, 0.910, 0.920, 0.916)
NOTEBOOK_06 = REPO_ROOT / "notebooks" / "06_reproducing_the_zero_accuracy_bug.py"
NOTEBOOK_09 = REPO_ROOT / "notebooks" / "09_the_kernel_on_the_h200.py"
DECK_09 = REPO_ROOT / "docs" / "slides" / "09_the_kernel_on_the_h200.yaml"
ROW_LABELS = {  # the seed's table (README's Results and docs/results.md): key in repro's JSON -> (run, kernel) cells
    "eager": ("cutlass_mla, `--disable-cuda-graph`", "model's scale"),
    "pre_fix": ("cutlass_mla, CUDA graph, before the fix (`7059ae16f`)", "bug-era"),
    "fixed": ("cutlass_mla, CUDA graph, the fix (#6998, `e58423b2b`)", "model's scale"),
    "triton": ("triton backend, CUDA graph", "model's scale"),
    "scale": ("cutlass_mla, `--disable-cuda-graph`", "bug-era"),
}


@cache
def result(name: str) -> dict:
    return json.loads((RESULTS_DIR / name).read_text(encoding="utf-8"))


def md(name: str) -> str:
    return norm((RESULTS_DIR / name).read_text(encoding="utf-8"))


def seed_table_rows() -> list[str]:
    """The seed's table (README's Results and docs/results.md), rendered from repro.SEED and the CPU and H200 runs'
    JSON."""
    from mla_edu.case_study.repro import SEED

    cpu, gpu = result("repro_cpu.json")["table"], result("repro_h200_bfloat16.json")["table"]
    rows = []
    for key, (run, kernel) in ROW_LABELS.items():
        seed = {"eager": f"{SEED['eager']} *", "fixed": f"{SEED['fixed']} *", "scale": "(* ran this kernel)"}.get(
            key, SEED.get(key))
        cells = [seed, f"{cpu[key]['accuracy']:.3f}", f"{gpu[key]['accuracy']:.3f}"]
        if key == "pre_fix":
            cells = [f"**{c}**" for c in cells]
        rows.append(f"| {run} | {kernel} | " + " | ".join(cells) + " |")
    return rows


def readme_claims() -> list[str]:
    """README's own numbers of the seed's run outside the table (its opening and its Results' first line), from
    repro.SEED and results/repro_cpu.json."""
    from mla_edu.case_study.repro import SEED

    table = result("repro_cpu.json")["table"]
    return [f"answered GSM8K at **{SEED['pre_fix']}** with CUDA graphs on and **{SEED['eager'].replace('-', ' to ')}** "
            f"with them off",
            f"{table['pre_fix']['num_questions']} questions, greedy, in the seed's server flags"]


def repro_claims() -> list[str]:
    """docs/results.md's prose about the seed's configuration, from results/repro_cpu.json."""
    from mla_edu.case_study.repro import SEED
    from mla_edu.model import task

    r = result("repro_cpu.json")
    conf, table = r["configuration"], r["table"]
    rows = conf["max_running_requests"] // conf["dp_size"]
    width = table["pre_fix"]["page_table_width"]
    model_scale = next(x for x in r["open_question_this"] if "scale" not in x["defects"])
    one_engine = {x["max_running_requests"]: x["accuracy"] for x in r["open_question"]
                  if x["dp_size"] == 1 and x["row_order"] == "append"}
    mean = sum(PR_6998_EAGER_RUNS) / len(PR_6998_EAGER_RUNS)
    return [
        f"`--context-length {conf['context_length']}` (a page table of W = {width} columns)",
        f"`--dp {conf['dp_size']} --enable-dp-attention` ({conf['dp_size']} attention ranks of at most {rows} requests",
        f"{table['pre_fix']['num_questions']} questions, greedy",
        f"the pre-fix graph's {table['pre_fix']['accuracy']:.3f} is close to eager's {table['scale']['accuracy']:.3f} "
        f"divided by the {rows} rows of a rank ({table['scale']['accuracy'] / rows:.3f})",
        f"the same guess for the seed gives {mean:.3f} / {rows} = {mean / rows:.3f} against its {SEED['pre_fix']}",
        f"the same DP run scores {model_scale['accuracy']:.3f}",
        f"W = {width}: pre-fix {model_scale['accuracy']:.3f}, with the scale too {table['pre_fix']['accuracy']:.3f}",
        f"and {model_scale['eager_step']} requests had such a step, "
        f"{model_scale['accuracy_eager_step']:.3f} of them right",
        f"has none ({one_engine[16]:.3f} and {one_engine[128]:.3f} on CPU)",
        f"requests live {task.MAX_NEW_TOKENS - 1} decode steps, GSM8K's hundreds",  # the first new token: prefill
        f"With W = {width} and at most {rows} rows per DP rank",
        f"(here `b < {rows}` and `n <= {r_pages()}`)",
    ]


def notebook_output(stem: str, source: str = "") -> str:
    """The text the code cells of the committed ``notebooks/<stem>.ipynb`` printed (what nbval compares), of those
    whose source holds ``source``."""
    cells = json.loads((REPO_ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code"
                     and source in "".join(c["source"]) for o in c["outputs"])


def prefix_number_claims() -> list[str]:
    """docs/results.md's table of every pre-fix accuracy: the seed's, ``make repro``'s (results/repro_cpu.json) and
    the notebooks' (their committed outputs, which nbval compares with a rerun; the question counts from their
    sources)."""
    from mla_edu.case_study.repro import SEED

    r = result("repro_cpu.json")
    conf, table = r["configuration"], r["table"]
    bs, width = conf["cuda_graph_bs"], table["pre_fix"]["page_table_width"]
    rows = conf["max_running_requests"] // conf["dp_size"]
    dp = f"DP {conf['dp_size']} x {rows} rows, graphs {bs[0]} and {bs[1]}, W = {width}"
    model_scale = next(x for x in r["open_question_this"] if "scale" not in x["defects"])
    one16 = next(x for x in r["open_question"] if (x["dp_size"], x["max_running_requests"], x["row_order"])
                 == (1, 16, "append"))
    assert one16["eager_step"] == 0  # the table says so
    n = table["pre_fix"]["num_questions"]
    out06 = notebook_output("06_reproducing_the_zero_accuracy_bug", "t = seed_table(run)")  # section 1's table
    out07 = notebook_output("07_the_fix")
    out08 = notebook_output("08_workshop_exercises")
    q06 = one(r"(?m)^N = (\d+)$", NOTEBOOK_06.read_text()).group(1)
    q07 = one(r"(?m)^N = (\d+)$", (REPO_ROOT / "notebooks" / "07_the_fix.py").read_text()).group(1)
    a06 = one(r"cutlass_mla, graph, pre-fix \(7059ae16f\) +bug-era +(\d\.\d{3})", out06).group(1)
    a07 = one(r"both graph defects, model's scale +(\d\.\d{3})", out07).group(1)
    a08 = one(r"accuracy: eager \d\.\d{3} \| graph (\d\.\d{3})", out08).group(1)
    m08 = one(r"settings: cutlass_mla, defects=width,workspace, splits=1, max running (\d+) \(graphs for (\d+), "
              r"(\d+)\), (\d+) questions", out08).groups()
    return [
        f"| {SEED['pre_fix']} | SGLang PR #6998 (DeepSeek-V3-0324, GSM8K) | bug-era |",
        f"| {table['pre_fix']['accuracy']:.3f} | `make repro`, the seed's table | bug-era | {dp} | {n} |",
        f"| {model_scale['accuracy']:.3f} | `make repro`, the ablation (width and workspace, one split) | model's "
        f"| {dp} | {model_scale['num_questions']} |",
        f"| {one16['accuracy']:.3f} | `make repro`, the open question (one engine, 16 running, append) | model's "
        f"| one engine, graphs 8 and 16, no eager step | {one16['num_questions']} |",
        f"| {a06} | notebook 06, section 1 (the seed's table) | bug-era | {dp} | {q06} |",
        f"| {a07} | notebook 07, section 1 (both graph defects) | model's | {dp} | {q07} |",
        f"| {a08} | notebook 08, the panel's default | model's | one engine, {m08[0]} running, graphs {m08[1]} and "
        f"{m08[2]} | {m08[3]} |",
        f"(at {q06} questions one answer is {1 / int(q06):.3f} of accuracy)",
    ]


def r_pages() -> int:
    from mla_edu.model.task import CONTEXT_LEN

    return CONTEXT_LEN // PAGE_SIZE


def kernel_claims() -> list[str]:
    """docs/results.md's kernel row: uniform lengths, what the triton backend runs, from
    results/kernel_bench_h200_schedule.json (its latest kernel, in one run with FlashMLA and SGLang)."""
    from tools.schedule_bench import backend_path

    k = result("kernel_bench_h200_schedule.json")
    mm, cp, sms = k["ceilings"]["matmul_bf16_TFLOPs"], k["ceilings"]["copy_TBps"], k["info"]["sm_count"]
    rows = [{**r, "us": r[f"{backend_path(r, sms)}_us"]} for r in k["uniform"]]  # us: what the backend runs
    at = {r["heads"]: r for r in rows if r["batch"] == 64 and r["lens_max"] == 4096}
    h128, h16 = at[128], at[16]
    vs_sglang = [r["sglang_us"] / r["us"] for r in rows]
    return [
        f"h_q=128 {h128['us']:.1f} us = {100 * h128['flops'] / h128['us'] / 1e6 / mm:.0f}% of the measured bf16 "
        f"matmul rate, {h128['flashmla_us'] / h128['us']:.2f}x FlashMLA's speed",
        f"h_q=16 {h16['us']:.1f} us = {100 * h16['bytes'] / h16['us'] / 1e6 / cp:.0f}% of the measured copy "
        f"bandwidth, {h16['flashmla_us'] / h16['us']:.2f}x FlashMLA",
        f"{min(vs_sglang):.2f}x-{max(vs_sglang):.1f}x faster than SGLang's Triton kernel at its best split, at all "
        f"{len(vs_sglang)} shapes",
    ]


def schedule_numbers(name: str = "kernel_bench_h200_schedule.json") -> tuple[list, dict, dict]:
    """The ragged rows of a schedule bench's run (results/``name``), FlashMLA's time over the schedule's per head
    count, and schedule_bench's summary of the run."""
    from tools.schedule_bench import summary

    k = result(name)
    x = {h: [r["flashmla_us"] / r["balanced_us"] for r in k["ragged"] if r["heads"] == h] for h in (16, 128)}
    return k["ragged"], x, summary(k)


def h128_b4(row: dict) -> bool:
    """Whether a schedule bench row is one of the uniform shapes issue 25's acceptance bounds: h_q=128, B >= 4."""
    return row["heads"] == 128 and row["batch"] >= 4


def worst_h128_backend(run: dict) -> dict:
    """The uniform h_q=128, B >= 4 row of a schedule bench's run where what the triton backend runs is slowest
    against FlashMLA."""
    from tools.schedule_bench import backend_path

    return min(filter(h128_b4, run["uniform"]),
               key=lambda r: r["flashmla_us"] / r[f"{backend_path(r, run['info']['sm_count'])}_us"])


def schedule_claims() -> list[str]:
    """docs/results.md's ragged-batch row, from results/kernel_bench_h200_schedule.json."""
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
            f"as with the rule alone ({result('engine_decode_h200.json')['auto_over_rule']:.2f}x"]


def stage1_claims() -> list[str]:
    """docs/results.md's stage-1 sentence, from results/kernel_bench_h200_stage1.json."""
    row = kernel_row(128, 64, 4096)
    return [f"at h_q=128, B=64, L=4096 it took {row['triton_us']:.1f} us against "
            f"{row['kernels']['tma, 64 heads']['best_us']:.1f} us for the first TMA kernel and "
            f"{row['kernels']['tl']['best_us']:.1f} us for plain Triton"]


def spread_makespan(lens: list[int], page: int, parts: int) -> int:
    """The slowest part's page-times (pages plus one overhead per segment) of v5-v10's line, which spread each
    request's overhead over its pages (page k of request b at ``W_b + k w_b / n_b``): a model of the old
    ``schedule.segment``, for docs/kernel_essay.md's prediction (beside ``schedule.flashmla_makespan``)."""
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


def kernel_row(heads: int, batch: int, length: int, which: str = "stage1") -> dict:
    """One row of kernel_lab/results/kernel_bench_h200_{which}.json (page 64)."""
    return next(r for r in result(f"kernel_bench_h200_{which}.json")["results"]
                if (r["page"], r["heads"], r["batch"], r["seq_len"]) == (64, heads, batch, length))


def schedule_uniform_row(heads: int, batch: int, length: int) -> dict:
    """One uniform row of results/kernel_bench_h200_schedule.json."""
    return next(r for r in result("kernel_bench_h200_schedule.json")["uniform"]
                if (r["heads"], r["batch"], r["lens_max"]) == (heads, batch, length))


def graph_claims() -> list[str]:
    launch = {r["kernels"]: r["speedup"] for r in result("graph_launch_h200.json")["rows"]}
    emulated = [r["replay_over_eager"] for r in result("graph_bench_cpu.json")["rows"]]
    return [f"a 117-kernel step replays {launch[117]:.1f}x faster than eager",
            f"replay {min(emulated):.1f}x-{max(emulated):.1f}x an eager run"]


def family_claims() -> list[str]:
    """docs/results.md's sentence on the kernel lab's family bench (``kernel_lab.tools.choice_fit``; the essay quotes
    it too)."""
    from kernel_lab.tools import choice_fit

    x = choice_fit.best_x_flashmla(choice_fit.load()[0])
    from kernel_lab.tests.results import result as lab_result
    from kernel_lab.tools import family_bench

    after = family_bench.summary(lab_result("family_bench_h200_fm_a2e9367.json"))
    now = [after[f"family_h{h}"]["choice_geomean"] for h in (32, 64, 128)]
    keys = {(r["family"], r["heads"], r["batch"]) for r in lab_result("family_bench_h200_fm_a2e9367.json")["family"]}
    first = lab_result("family_bench_h200.json")
    then = family_bench.summary({"info": first["info"], "uniform": [], "family": [
        r for r in first["family"] if (r["family"], r["heads"], r["batch"]) in keys]})
    was = [then[f"family_h{h}"]["best_geomean"] for h in (32, 64, 128)]
    return [f"{x[16]:.2f}x its speed in geomean at h_q=16, {x[32]:.2f}x at 32, {x[64]:.2f}x at 64, "
            f"{x[128]:.2f}x at 128",
            f"puts the backend's choice at {now[0]:.2f}x, {now[1]:.2f}x and {now[2]:.2f}x its speed in geomean, where "
            f"the first run's best option gave {was[0]:.2f}x, {was[1]:.2f}x and {was[2]:.2f}x on the same batches"]


def md_claims() -> list[str]:
    """Numbers docs/results.md takes from results/*.md (no JSON behind them)."""
    reuse = md("workspace_reuse_h200.md")
    changed, owned = (int(x) for x in one(r"overwrote (\d+) of (\d+) of the new owner's bytes", reuse).groups())
    seed = md("seed_config_cpu.md")
    tiny = one(r"\| `tiny` \(shipped\) \|[^|]*\|[^|]*\| ([\d.]+) \| ([\d.]+) \|", seed).groups()
    yarn = one(r"\| `tiny-yarn` \(YaRN factor 40\) \|[^|]*\|[^|]*\| ([\d.]+) \| ([\d.]+) \|", seed).groups()
    rss = float(one(r"\| RSS after building the engine \| [\d.]+ GB \| ([\d.]+) GB \|", seed).group(1))
    gpu_wall = float(one(r"; (\d+) s wall for the whole run", md("repro_h200_bfloat16.md")).group(1))
    gpu = md("gpu_suite_h200.md")
    unit_gpu = one(r"\| unit \| `[^`]*` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", gpu).groups()
    nbval_gpu = one(r"\| nbval \| `[^`]*` \| (\d+) \| 0 \| 0 \| 0 \|", gpu).group(1)
    commit = one(r"from the repository root at `(\w+)`", gpu).group(1)
    earlier = one(r"(\d+) failed, \d+ skipped; nbval", gpu.split("## Earlier runs")[1]).group(1)
    h100 = md("gpu_suite_h100.md")
    unit_h100 = one(r"\| unit \| `[^`]*` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", h100).groups()
    nbval_h100 = one(r"\| nbval \| `[^`]*` \| (\d+) \| 0 \| 0 \| 0 \|", h100).group(1)
    commit_h100 = one(r"from the repository root at `(\w+)`", h100).group(1)
    return [
        f"one replay overwrote {100 * changed / owned:.1f}% of its bytes",
        f"eager cutlass_mla with sgl-kernel 0.1.7's hard-coded `1/sqrt(192)`: {tiny[1]} (tiny) and {yarn[1]} "
        f"(`tiny-yarn`, YaRN factor 40) vs {tiny[0]} / {yarn[0]} without",
        f"one DP rank's engine at W = 33 holds {rss:.1f} GB",
        f"(`make repro`: {cpu_wall():.0f} s on the 2-core CPU machine)",
        f"on the H200: {gpu_wall:.0f} s;",
        f"`make test-gpu` at `{commit}`, one pytest process per part: {unit_gpu[0]} unit tests",
        f"passed, {unit_gpu[1]} failed, {unit_gpu[2]} errors, {unit_gpu[3]} skipped",
        f"all {nbval_gpu} notebook cells passed under `--nbval-lax`",
        f"Earlier runs had {earlier} failures, tests that assumed a CPU machine",
        f"On an H100 at `{commit_h100}` (no H200 would start",
        f"{unit_h100[0]} unit tests passed, {unit_h100[1]} failed, {unit_h100[3]} skipped; {nbval_h100} notebook "
        "cells passed",
    ]


def cpu_wall() -> float:
    """``make repro``'s wall time on the CPU machine, from results/repro_cpu.md."""
    return float(one(r"([\d.]+) s wall, [\d.]+ s user", md("repro_cpu.md")).group(1))


def ci_claims() -> list[str]:
    """README's "Environment and CI": the fresh clone's times and counts, from results/ci_fresh_clone.md, and
    ``make repro``'s, from results/repro_cpu.md."""
    ci = md("ci_fresh_clone.md")
    total = one(r"\| `bash \.ci/run`, in all \| \| ([\d:]+) \|", ci).group(1)
    unit = one(r"\| unit tests \| (\d+) \| (\d+) s \|", ci).groups()
    nb = one(r"\| notebook cells, strict nbval \| (\d+) \| ([\d:]+) \|", ci).groups()
    lab = one(r"\| `make test-lab`: the book and the browser tests \| (\d+) \| ([\d:]+) \|", ci).groups()
    fresh_repro = one(r"including the creation of `\.venv`: ([\d:]+)", ci).group(1)
    no_triton_unit = one(r"\| `make test-no-triton`: unit tests without Triton \| (\d+) \| (\d+) s \|", ci).groups()
    no_triton_nb = one(r"\| `make test-no-triton`: notebook cells, strict nbval \| (\d+) \| ([\d:]+) \|", ci).groups()
    return [
        f"with `.venv` made, {cpu_wall():.0f} s (`results/repro_cpu.md`)",
        f"`bash .ci/run` {total} in all (creating `.venv` from the lock, ruff, {unit[0]} unit tests in {unit[1]} s, "
        f"{nb[0]} notebook cells under strict nbval in {nb[1]}, then `make test-lab`: the book and {lab[0]} browser "
        f"tests in {lab[1]}; then without Triton the {no_triton_unit[0]} unit",
        f"tests that ask whether Triton is here (`tests/triton_record.py`) in {no_triton_unit[1]} s and the "
        f"{no_triton_nb[0]} cells in {no_triton_nb[1]}, and the platform",
        f"`make repro` {fresh_repro} in an earlier fresh clone",
    ]


def scale_claims() -> list[str]:
    """The scale factors README's footnote and docs/results.md quote, from the presets and the shipped model's
    manifest."""
    from mla_edu.config import MLAConfig

    v3 = MLAConfig.deepseek_v3()
    mla = json.loads((REPO_ROOT / "mla_edu" / "model" / "weights" / "manifest.json").read_text())["config"]["mla"]
    tiny_q = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    return [f"YaRN's `mscale^2` = {v3.softmax_scale * math.sqrt(v3.qk_head_dim):.2f}",
            f"the tiny model's `q_head_dim` is {tiny_q}, not {v3.qk_head_dim}",
            f"`sqrt({v3.qk_head_dim}/{tiny_q})` = {math.sqrt(v3.qk_head_dim / tiny_q):.2f}"]


def instructor_claims() -> list[str]:
    """The seed's numbers the instructor guide tells the 90-minute track to say, from the seed and
    results/repro_cpu.json."""
    from mla_edu.case_study.repro import SEED

    t = result("repro_cpu.json")["table"]
    return [f"SGLang {SEED['eager']} without graphs and {SEED['pre_fix']} with them, here {t['eager']['accuracy']:.3f} "
            f"and {t['pre_fix']['accuracy']:.3f}; the {t['pre_fix']['accuracy']:.3f} carries the bug-era kernel's "
            f"softmax scale too, which alone, without graphs, scores {t['scale']['accuracy']:.3f}"]


#: each group of claims -> the files that must say every claim of it (README's Results keeps the seed's table and
#: its footnote; docs/results.md has the table again and everything README's Results moved there)
CLAIMS = {"seed table": (seed_table_rows, (README, RESULTS_DOC)), "readme": (readme_claims, (README,)),
          "ci": (ci_claims, (README,)), "repro": (repro_claims, (RESULTS_DOC,)),
          "kernel bench": (kernel_claims, (RESULTS_DOC,)), "schedule bench": (schedule_claims, (RESULTS_DOC,)),
          "stage-1 kernels": (stage1_claims, (RESULTS_DOC,)), "graph bench": (graph_claims, (RESULTS_DOC,)),
          "results/*.md": (md_claims, (RESULTS_DOC,)), "scales": (scale_claims, (README, RESULTS_DOC)),
          "families": (family_claims, (RESULTS_DOC,)), "instructor": (instructor_claims, (INSTRUCTOR_DOC,)),
          "pre-fix numbers": (prefix_number_claims, (RESULTS_DOC,))}
CHECKED = [(group, path) for group, (_, paths) in CLAIMS.items() for path in paths]


@pytest.mark.parametrize("group, path", CHECKED, ids=[f"{g}-{p.name}" for g, p in CHECKED])
def test_docs_quote_the_committed_results(group, path):
    lost = missing(CLAIMS[group][0](), path.read_text(encoding="utf-8"))
    assert not lost, f"{path.name} does not say (update it or the results it quotes):\n" + "\n".join(lost)


def notebook_09_claims() -> list[str]:
    """Notebook 09's prose after its schedule-bench and engine cells, from the results files those cells print;
    and its batch's makespan on v5-v10's line (``spread_makespan``), which it quotes beside the one it prints."""
    from mla_edu.kernels import schedule as sc
    from mla_edu.util import cdiv

    ragged = sc.lognormal_lengths(64, 2048, seed=0)  # the notebook's batch: 16 heads, page 64, 132 SMs
    spread = spread_makespan(ragged, 64, sc.num_parts(16, 132, 64, cdiv(max(ragged), 64)))
    _, x, s = schedule_numbers()
    small = [r["balanced_us"] / r["best_us"] for r in result("kernel_bench_h200_schedule.json")["uniform"]
             if r["batch"] <= 4]
    engine = result("engine_decode_h200.json")
    uniform, first = schedule_uniform_row(128, 64, 4096), kernel_row(128, 64, 4096)
    apart = max(abs(engine[k] - 1) for k in ("auto_over_rule", "balanced_over_rule"))
    floor16 = math.floor(100 * min(x[16])) / 100  # "at ... or faster": rounded down
    ahead16 = sum(v > 1 for v in x[16])
    return [f"the schedule takes the rule's {s['ragged_rule_x_flashmla']['geomean']:.2f}x of FlashMLA on ragged "
            f"batches to {s['ragged_balanced_x_flashmla']['geomean']:.2f}x",
            f"it runs at {floor16:.2f}x FlashMLA or faster at every batch, ahead at {NUMBER_WORDS[ahead16]} "
            f"of {NUMBER_WORDS[len(x[16])]}",
            f"At 128 heads it reaches {span(x[128])}x of FlashMLA",
            f"small uniform batches ({span(small, 1)}x the best split at B = 1 and 4)",
            f"All three within {math.ceil(100 * apart)}%, the same tokens",  # an upper bound: rounded up
            f"a part cut on both ends pays nearly two: {spread} here",
            f"the rule, the kernel runs at {uniform['flashmla_us'] / uniform['rule_us']:.2f}x FlashMLA's speed",
            f"(its first was {first['flashmla_us'] / first['triton_us']:.2f}x in section 2",
            f"({first['flashmla_us'] / first['triton_us']:.2f}x FlashMLA; its later versions",
            f"{uniform['flashmla_us'] / uniform['rule_us']:.2f}x at B = 64, L = 4096)"]


def deck_09_claims() -> list[str]:
    """The numbers of notebook 09's slide deck: the schedule bench, the kernel bench and the stage-1 bench at
    h_q=128, B=64, L=4096 (the Gluon kernel, its seesaw, its later versions), and the tensor-work ratio that
    notebook 09's compile cell printed."""
    _, _, s = schedule_numbers()
    from mla_edu.workshop.stored import stored_outputs

    gluon = next(r for r in result("kernel_bench_h200.json")["results"]
                 if (r["heads"], r["batch"], r["seq_len"]) == (128, 64, 4096))
    first, later = kernel_row(128, 64, 4096), schedule_uniform_row(128, 64, 4096)
    tl = gluon["kernels"]["tl"]["best_us"] / gluon["triton_us"]
    printed = "".join("".join(o.get("text", "")) for o in stored_outputs(NOTEBOOK_09.stem, "sm90-compile"))
    less = one(r"Gluon [\d.]+ M \(([\d.]+)x less\)", printed).group(1)
    return [f"{s['ragged_rule_x_flashmla']['geomean']:.2f}x FlashMLA with the rule, "
            f"{s['ragged_balanced_x_flashmla']['geomean']:.2f}x with the schedule",
            f"from {first['flashmla_us'] / first['kernels']['tma, 64 heads']['best_us']:.2f}x (the TMA kind) to "
            f"{first['flashmla_us'] / first['triton_us']:.2f}x FlashMLA's speed; "
            f"{later['flashmla_us'] / later['rule_us']:.2f}x in its later versions",
            f"{less}x the tensor work, {tl:.1f}x the time"]


def test_notebook_09s_deck_quotes_the_results():
    lost = missing(deck_09_claims(), DECK_09.read_text(encoding="utf-8"))
    assert not lost, "docs/slides/09_the_kernel_on_the_h200.yaml does not say:\n" + "\n".join(lost)


def test_notebook_09_quotes_the_schedule_bench():
    lost = missing(notebook_09_claims(), NOTEBOOK_09.read_text(encoding="utf-8"))
    assert not lost, "notebooks/09_the_kernel_on_the_h200.py does not say:\n" + "\n".join(lost)


def test_the_seed_numbers_have_one_source():
    from mla_edu.case_study.repro import SEED

    runs = PR_6998_EAGER_RUNS
    assert SEED["eager"] == f"{min(runs):.3f}-{max(runs):.3f}"
    sources = norm(SOURCES.read_text(encoding="utf-8"))
    assert "without CUDA graphs " + ", ".join(f"{x:.3f}" for x in runs) in sources
    mean = sum(runs) / len(runs)
    guess = f"{mean:.3f} / 16 = {mean / 16:.3f}"
    for path in (README, RESULTS_DOC, NOTEBOOK_06):
        text = norm(path.read_text(encoding="utf-8"))
        assert path == README or guess in text, f"{path.name}: the seed's guess should read {guess!r}"
        others = {m for m in re.findall(r"0\.9\d\d / 16", text)} - {f"{mean:.3f} / 16"}
        assert not others, f"{path.name} quotes another mean: {others}"


def test_a_drifted_number_is_caught():
    # each claim, with one digit of it changed in the file it is checked in, is reported
    for make, paths in CLAIMS.values():
        for path in paths:
            body = norm(path.read_text(encoding="utf-8"))
            for claim in map(norm, make()):
                d = re.search(r"\d", claim).start()
                drifted = body.replace(claim, f"{claim[:d]}{(int(claim[d]) + 1) % 10}{claim[d + 1:]}")
                assert missing([claim], drifted) == [claim], (path.name, claim)


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
