"""Reproduce SGLang PR #6998's accuracy table in miniature, in the seed's configuration, then take the bug apart.

    python -m mla_edu.case_study.repro            # the README's main job (< 3 min on 2 CPU cores)

The seed ran DeepSeek-V3 with ``--context-length 4096 --dp 8 --enable-dp-attention --cuda-graph-bs 64 128
--max-running-requests 128``, and so does this by default: a page table of W = 33 columns, 8
DP-attention ranks each running at most 16 requests, padded to the graph that fits the ranks' sum
(64 or 128). The ranks run in lockstep in one process (``mla_edu.serving.DPEngine``;
``tests/test_dp.py`` checks it against one process per rank over torch.distributed). Every number
is measured by running the shipped tiny model on the whole default eval set: real CUDA graphs on a
GPU, the CPU graph emulator otherwise. Three parts:

1. the seed's table: eager, pre-fix graph (with the bug-era kernel, sgl-kernel 0.1.7: softmax scale
   hard-coded to 1/sqrt(192), one split), fixed graph (SGLang's merged fix, e58423b2b), Triton
   backend graph; and eager with the bug-era kernel's scale;
2. the ablation: each graph defect alone, all together, and none, in two kernel worlds: the
   bug-era kernel (split fixed at 1) and a later one (automatic split count); the mechanism of
   each row in a table, beside what was measured;
3. the open question (why 0.060 and not 0?): the pre-fix graph's accuracy split by which requests
   decoded only in row 0, and which had a decode step run eagerly (under DP attention, every rank
   decodes eagerly while one rank prefills), against DP and running requests per engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from mla_edu import cli
from mla_edu.files import check_out_file, write_atomic
from mla_edu.case_study.accuracy import AccuracyRuns
from mla_edu.case_study.seed import SEED, SEED_CONFIG
from mla_edu.model import load_pretrained, task
from mla_edu.serving import MERGED_FIX, PRE_FIX, SEED_PRE_FIX, ServerArgs, SettingsError

CUTLASS = dict(attention_backend="cutlass_mla", num_kv_splits=1)  # the split given, so AccuracyRuns memoizes
# (label, defects, poison_fill): each graph defect alone, both (pre-fix), none (merged fix), width with the poison fill
ABLATION = [("width", frozenset({"width"}), False), ("width + poison fill", frozenset({"width"}), True),
            ("workspace", frozenset({"workspace"}), False), ("width+workspace (pre-fix)", PRE_FIX, False),
            ("none (merged fix)", MERGED_FIX, False)]
HARMLESS, HARMFUL, HARMLESS_OR_CRASH = "harmless", "harmful", "harmless, or a crash on a GPU"  # MECHANISM's predictions
#: label -> (what the row is predicted to do to the accuracy, its mechanism), in the seed's configuration
#: (W = 33, <= 16 rows per DP rank)
MECHANISM = {
    "width": (HARMFUL,
              "capture froze size(1)=1 -> row stride 1: row b reads flat entries b..b+n-1 (W = 33, b < 16: "
              "row 0's): row 0's pages, then its stale ids or the initial 1, silently; an eager step dodges it"),
    "width + poison fill": (HARMFUL,
                            "as width; past row 0's entries written for the step, the poison id -> NaN (loud)"),
    # harmless to the answers; but on a GPU the allocator may unmap the dropped memory, and then a replay dies
    # (illegal address): run_bench runs it in a child process (accuracy.may_crash_the_gpu)
    "workspace": (HARMLESS_OR_CRASH,
                  "graphs keep capture-time workspaces that were dropped; the kernel writes partials there "
                  "before it reads them, and only with > 1 split"),
    "width+workspace (pre-fix)": (HARMFUL,
                                  "as width; in a replay, max_seq_len 128 frozen at capture makes even the auto "
                                  "split 1, so the workspace is never touched (more splits: eager steps)"),
    "none (merged fix)": (HARMLESS,
                          "SGLang's fix: full width, one workspace; stale entries stay, but the kernel reads "
                          "only the ceil(len/128) entries written for the step"),
}
WORLDS = ((1, "bug-era (split 1)"), (-1, "later (auto split)"))


def verdict(prediction: str, r: dict, eager: float) -> str:
    """The measurement against the prediction (``MECHANISM``): harmless = within 0.02 of eager; a crash (a
    configuration run in a child process, ``accuracy.may_crash_the_gpu``, that died) only where predicted."""
    if r.get("crashed"):
        return "crashed: " + r["crashed"] + ("" if prediction == HARMLESS_OR_CRASH else " (NOT as predicted)")
    same = abs(r["accuracy"] - eager) <= 0.02
    seen = "= eager" if same else f"{r['accuracy'] - eager:+.3f} vs eager" + (
        f", {r['errors']} NaN" if r["errors"] else "")
    return seen + ("" if same == (prediction != HARMFUL) else " (NOT as predicted)")


def seed_table(run: AccuracyRuns) -> dict:
    """The seed's four rows and the eager scale row, each a ``run_bench`` result (in ``run``'s configuration):
    ``eager``, ``pre_fix`` (``SEED_PRE_FIX``: the graph defects and the bug-era kernel), ``fixed``
    (``MERGED_FIX``), ``triton``, ``scale`` (eager with the bug-era kernel)."""
    return {"eager": run(**CUTLASS, disable_cuda_graph=True, defects=PRE_FIX),
            "pre_fix": run(**CUTLASS, defects=SEED_PRE_FIX),
            "fixed": run(**CUTLASS, defects=MERGED_FIX),
            "triton": run(attention_backend="triton"),
            "scale": run(**CUTLASS, disable_cuda_graph=True, defects=SEED_PRE_FIX)}


def _row(name: str, kernel: str, r: dict, seed: str = "") -> str:
    return (f"| {name:<44} | {kernel:<24} | {r['accuracy']:.3f} | {r['invalid']:.3f} | {seed:>12} "
            f"| {r['latency']:6.2f} |")


def _group(n: int, acc: float) -> str:
    return f"{n:>3} ({acc:.3f})" if n else "  0 (  -  )"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mla_edu.case_study.repro", description=__doc__.split("\n\n")[0])
    p.add_argument("--num-questions", type=cli.positive_int, default=None, help="default: the whole eval set")
    p.add_argument("--context-length", type=cli.int_at_least(2), default=SEED_CONFIG["context_length"],
                   help="W = (context + 128) // 128 page-table columns (default: the seed's 4096, W = 33)")
    p.add_argument("--dp", type=cli.positive_int, default=None,
                   help="DP-attention ranks (default: the seed's 8 with DP attention, else 1)")
    p.add_argument("--enable-dp-attention", action=argparse.BooleanOptionalAction, default=True,
                   help="DP attention, as the seed ran (default on)")
    p.add_argument("--cuda-graph-bs", type=cli.positive_int, nargs="+", default=list(SEED_CONFIG["cuda_graph_bs"]))
    p.add_argument("--max-running-requests", type=cli.positive_int, default=SEED_CONFIG["max_running_requests"])
    p.add_argument("--device", type=cli.device, default=None)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--json-out", default=None, help="also write every measured result as JSON here")
    p.add_argument("--progress", action="store_true", help="tqdm bar per run on stderr")
    p.add_argument("--threads", type=cli.positive_int, default=1,
                   help="torch CPU threads (default 1: the ops are small, and one thread avoids OpenMP "
                        "synchronisation, which dominates on a busy 2-core machine)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if a.dp is None:
        a.dp = SEED_CONFIG["dp_size"] if a.enable_dp_attention else 1
    if a.num_questions is not None and a.num_questions > task.EVAL_SIZE:
        p.error(f"argument --num-questions: expected at most {task.EVAL_SIZE} (the eval set), got {a.num_questions}")
    if a.json_out is not None:  # "" too: refused (an empty file name), not skipped
        try:
            check_out_file(a.json_out, "--json-out")
        except ValueError as e:
            p.error(str(e))
    questions = task.default_eval_set()
    if a.num_questions is not None:
        questions = questions[: a.num_questions]
    cli.check_context_length(p, a.context_length, questions)
    dp = a.dp
    common = dict(context_length=a.context_length, dp_size=dp, enable_dp_attention=a.enable_dp_attention,
                  cuda_graph_bs=tuple(a.cuda_graph_bs), max_running_requests=a.max_running_requests,
                  dtype=a.dtype, device=a.device)
    try:
        config = ServerArgs(**common)
    except (ValueError, TypeError) as e:
        p.error(str(e))
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(a.threads)
    try:  # main(argv) called from Python (a test, a notebook) gets its thread count back
        return _report(a, config, common, questions)
    except SettingsError as e:  # valid settings this machine cannot hold: a usage error, not a crash
        p.error(str(e))
    finally:
        torch.set_num_threads(threads)


def _report(a: argparse.Namespace, config: ServerArgs, common: dict, questions: list) -> int:
    """Run and print the three parts; 1 if a request ended in an error where none should (``unexpected_errors``)."""
    dp = a.dp
    t_start = time.perf_counter()
    model = load_pretrained()
    run = AccuracyRuns(model, questions, common, a.progress)

    table = seed_table(run)
    eager, e = table["eager"], table["eager"]["accuracy"]
    per_rank = config.max_running_requests_per_rank
    graphs = "real CUDA graphs" if eager["device"].startswith("cuda") else "CPU graph emulator"
    dp_flags = f"--dp {dp} --enable-dp-attention (lockstep) " if a.enable_dp_attention else ""
    print(f"# SGLang PR #6998 in miniature: {len(questions)} questions, {eager['device']} {a.dtype}, {graphs}")
    print(f"# --context-length {a.context_length} (W = {config.page_table_width}) {dp_flags}--cuda-graph-bs "
          f"{' '.join(map(str, config.cuda_graph_bs))} --max-running-requests {a.max_running_requests} "
          f"({per_rank} per rank), greedy, scored like bench_sglang.py\n")
    print(f"| {'run':<44} | {'kernel':<24} | acc   | inv   | seed (V3)    | time s |")
    print(f"|{'-' * 46}|{'-' * 26}|-------|-------|--------------|--------|")
    bug_era, later = "bug-era (scale, split 1)", "model's scale"
    print(_row("cutlass_mla --disable-cuda-graph", later, eager, SEED["eager"] + "*"))
    print(_row("cutlass_mla, graph, pre-fix (7059ae16f)", bug_era, table["pre_fix"], SEED["pre_fix"]))
    print(_row("cutlass_mla, graph, fixed (#6998, e58423b2b)", later, table["fixed"], SEED["fixed"] + "*"))
    print(_row("triton, graph", later, table["triton"], SEED["triton"]))
    print(_row("cutlass_mla --disable-cuda-graph", bug_era, table["scale"]))
    print("(time: generation only; the first run also prefills every prompt, which the others reuse)")
    print("* the seed's eager and fixed rows ran the bug-era kernel too (e58423b2b still pins sgl-kernel==0.1.7 and "
          "passes no sm_scale): "
          "on V3 its 1/sqrt(192) lacked YaRN's mscale^2 = 1.87 (0.91 vs triton's 0.93); the tiny model's "
          "q_head_dim is 80, so here the kernel's scale is off by sqrt(192/80) = 1.55 (last row)")

    print("\n## Ablation: cutlass_mla with graphs, each graph defect alone, both, and none")
    print("(a defect not listed is fixed; stale entries stay, as in SGLang, unless the poison fill is on; the scale "
          "is left out: it acts in eager and graph runs alike; splits: the most any step used)\n")
    print(f"| {'defects':<25} | {'kernel':<18} | splits | acc   | inv   | {'measured':<24} | mechanism")
    print(f"|{'-' * 27}|{'-' * 20}|--------|-------|-------|{'-' * 26}|----------")
    ablation = []
    for label, defects, poison_fill in ABLATION:
        prediction, why = MECHANISM[label]
        for splits, world in WORLDS:
            r = run(**dict(CUTLASS, num_kv_splits=splits), defects=defects, poison_fill=poison_fill)
            ablation.append(r)
            splits = "-" if r["max_splits_used"] is None else r["max_splits_used"]  # None: the child crashed
            print(f"| {label:<25} | {world:<18} | {splits:>6} | {r['accuracy']:.3f} | {r['invalid']:.3f} "
                  f"| {verdict(prediction, r, e):<24} | {why}")

    print("\n## Why 0.060 and not 0? The pre-fix graph, request by request")
    print("(n (accuracy) of each group. Only row 0 reads its own pages; 'eager step': a decode step ran eagerly, "
          "because a DP rank was prefilling or no graph fitted; "
          "guess: eager accuracy with the same kernel / rows per rank)\n")
    print("| configuration                  | kernel      | acc   | only row 0  | eager step  | no eager    | guess |")
    print("|--------------------------------|-------------|-------|-------------|-------------|-------------|-------|")
    this = (f"DP {dp} x {per_rank}" if a.enable_dp_attention else f"one engine, {per_rank} running") + ", append"
    cases = [(this, SEED_PRE_FIX, {}), (this, PRE_FIX, {})]
    for mr in dict.fromkeys((16, a.max_running_requests)):
        for order in ("append", "prepend"):
            cases.append((f"one engine, {mr} running, {order}", PRE_FIX,
                          dict(dp_size=1, enable_dp_attention=False, max_running_requests=mr, row_order=order)))
    open_q = []
    for label, defects, kw in cases:
        r = run(**CUTLASS, defects=defects, **kw)
        open_q.append(r)
        base = table["scale"]["accuracy"] if "scale" in defects else e  # eager with the same kernel
        print(f"| {label:<30} | {'bug-era' if 'scale' in defects else 'model scale':<11} | {r['accuracy']:.3f} "
              f"| {_group(r['only_row0'], r['accuracy_only_row0'])} "
              f"| {_group(r['eager_step'], r['accuracy_eager_step'])} "
              f"| {_group(r['num_questions'] - r['eager_step'], r['accuracy_no_eager_step'])} "
              f"| {base * r['dp_size'] / r['max_running_requests']:.3f} |")
    elapsed = time.perf_counter() - t_start
    print(f"\n{len(run.results)} engine runs, {elapsed:.0f} s in all (prefill computed once per prompt and shared).")
    if a.json_out is not None:
        write_atomic(a.json_out, json.dumps(
            {"configuration": common,  # json writes the tuple (cuda_graph_bs) as a list
             "table": table, "ablation": ablation,
             # the runs in this configuration, then one engine's: (16, max) running x (append, prepend)
             "open_question_this": open_q[:2], "open_question": open_q[2:], "seconds": elapsed}, indent=1))
    errors = unexpected_errors(run.results.values())
    if errors:
        print(f"error: {errors} requests ended in an error (rejected, or non-finite logits) in runs without the "
              "poison fill: the accuracies above count them as wrong answers", file=sys.stderr)
        return 1
    return 0


def unexpected_errors(results) -> int:
    """Requests that ended in an error, summed over ``run_bench`` results, except where errors are the point: a run
    with the poison fill (its NaNs) and a configuration whose child process crashed (``verdict`` names it)."""
    return sum(r["errors"] for r in results if not r["poison_fill"] and not r["crashed"])


if __name__ == "__main__":
    sys.exit(main())
