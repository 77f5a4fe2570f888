"""Choosing between the split rule and the balanced schedule from a batch's lengths, scored on measured times:
``python -m tools.schedule_choice``. No GPU: it reads a ``tools.schedule_bench`` run's json.

The triton serving backend takes the balanced schedule where its page table holds more than
``schedule.BALANCED_ABOVE_TOKENS`` tokens, the rule below: a choice from the table's shape, the same for every
batch a graph replays. This script scores another choice, from the batch's own lengths (which an engine has on
the host at every step, ``seq_lens_cpu``), with a model of each path's makespan in page-times (the time one
program takes for one page; each program or segment also pays ``schedule.FIXED_OVERHEAD_PAGES``):

* the rule: its programs (``ceil(n_b / S)`` pages each, per head block) on ``slots`` program slots, at least the
  longest program and at least their total spread over the slots;
* the balanced schedule: one part's share, ``chunk`` (``schedule.batch_plan``'s), plus one overhead.

It picks the balanced schedule where its model is ``MARGIN`` below the rule's, else the rule, and the bench's
measured time of what it picked is compared with the best fixed split (uniform lengths: the acceptance of issue
25) or with the best of rule, balanced and fixed splits (ragged). No backend uses this choice yet: a graph fixes
its kernels at capture (``kernels/NOTES.md``, v7, says what wiring it in needs). Its output for the committed
run: ``results/schedule_choice_h200.md`` (``tests/test_schedule_choice.py`` regenerates and compares it).
"""

from __future__ import annotations

import argparse
import json
import math
import os

from mla_edu.kernels import schedule as sc
from mla_edu.kernels.workspace import PROGRAMS_PER_SM, gpu_block_h
from mla_edu.util import cdiv
from tools.schedule_bench import HEADS, PAGE, RAGGED_BATCHES, RAGGED_MEDIANS, SEED, UNIFORM_BATCHES, UNIFORM_LENS

SM_COUNT = 132  # the H200 of the committed run
#: The balanced schedule is picked only where its model is this much below the rule's: its merge's launch and the
#: partials of requests cut at a part boundary are not in the model (``kernels/NOTES.md``, v6: 2-26 us).
MARGIN = 0.1


def makespans(lens: list[int], heads: int, num_splits: int, page: int = PAGE, sm_count: int = SM_COUNT,
              max_pages: int | None = None) -> tuple[float, float]:
    """(rule, balanced): the modelled makespans in page-times of the split rule at ``num_splits`` and of the
    balanced schedule, for requests of ``lens`` tokens."""
    n = [cdiv(max(x, 0), page) for x in lens]
    max_pages = max(n + [1]) if max_pages is None else max_pages
    block_h = gpu_block_h(heads, len(lens), max_pages)
    head_blocks, slots = cdiv(heads, block_h), PROGRAMS_PER_SM[block_h] * sm_count
    ov = sc.FIXED_OVERHEAD_PAGES
    programs = [cdiv(k, num_splits) + ov for k in n if k > 0 for _ in range(num_splits)] * head_blocks
    rule = max(max(programs, default=0), sum(programs) / slots)
    w = [k + ov for k in n if k > 0]
    parts = sc.num_parts(heads, sm_count, len(lens), max_pages)
    chunk = max(math.ceil(sum(w) / parts), sc.MIN_PART_PAGES, math.ceil(max(w, default=0) / (sc.MAX_PIECES - 1)))
    return rule, chunk + ov


def problems(data: dict):
    """(set, lengths, row) of each problem of a ``schedule_bench`` run, the lengths rebuilt as the bench drew
    them (its order: ragged by h_q, B, median; uniform by h_q, B, L)."""
    ragged = [sc.lognormal_lengths(b, m, SEED) for _ in HEADS for b in RAGGED_BATCHES for m in RAGGED_MEDIANS]
    uniform = [[ln] * b for _ in HEADS for b in UNIFORM_BATCHES for ln in UNIFORM_LENS]
    for kind, lengths in (("ragged", ragged), ("uniform", uniform)):
        if len(lengths) != len(data[kind]):
            raise ValueError(f"expected the default sets ({len(lengths)} {kind} problems), got {len(data[kind])}")
        for lens, row in zip(lengths, data[kind]):
            if (max(lens), min(lens), len(lens)) != (row["lens_max"], row["lens_min"], row["batch"]):
                raise ValueError(f"a {kind} row does not match the bench's lengths: {row}")
            yield kind, lens, row


def score(data: dict) -> dict:
    """Per problem the model's choice and its measured time against the best; and the counts within 5%."""
    rows, within = [], {"table": 0, "lengths": 0}
    for kind, lens, r in problems(data):
        rule, bal = makespans(lens, r["heads"], r["rule_splits"])
        best = r["best_us"] if kind == "uniform" else min(r["best_us"], r["rule_us"], r["balanced_us"])
        picks = {"table": "balanced" if sc.uses_balanced(PAGE * cdiv(max(lens), PAGE)) else "rule",
                 "lengths": "balanced" if bal < (1 - MARGIN) * rule else "rule"}
        ratios = {k: r[f"{v}_us"] / best for k, v in picks.items()}
        for k, x in ratios.items():
            within[k] += x <= 1.05
        rows.append({"set": kind, "heads": r["heads"], "batch": r["batch"], "lens_median": r["lens_median"],
                     "lens_max": r["lens_max"], "model_rule": rule, "model_balanced": bal, "pick": picks["lengths"],
                     "rule_us": r["rule_us"], "balanced_us": r["balanced_us"], "best_us": r["best_us"],
                     "over_best": ratios["lengths"], "table_over_best": ratios["table"]})
    return {"rows": rows, "within_5pct": within, "problems": len(rows),
            "uniform_within_5pct": {k: sum(r[f"{'table_' if k == 'table' else ''}over_best"] <= 1.05
                                           for r in rows if r["set"] == "uniform") for k in within}}


def engine_batches(steps=(1, 32, 64)) -> list[dict]:
    """The mini engine's decode batches (``tools.engine_decode_bench``: the first 128 questions of the eval set,
    after 1, 32 and 64 generated tokens; page 128, 4 heads, a table of 6 pages): their modelled makespans at the
    rule's split count for that table, and the choice."""
    from mla_edu.kernels.workspace import triton_num_kv_splits
    from mla_edu.model.task import default_eval_set
    from mla_edu.serving.backends.base import page_table_width
    from mla_edu.util import PAGE_SIZE

    prompts = [len(q.prompt_ids) for q in default_eval_set()[:128]]
    width = page_table_width(640)  # the engine's context length: its table holds 768 tokens
    splits = triton_num_kv_splits(width * PAGE_SIZE, len(prompts), 4, PAGE_SIZE, SM_COUNT)
    out = []
    for t in steps:
        rule, bal = makespans([n + t for n in prompts], 4, splits, PAGE_SIZE, SM_COUNT, width)
        out.append({"tokens": t, "model_rule": rule, "model_balanced": bal,
                    "pick": "balanced" if bal < (1 - MARGIN) * rule else "rule"})
    return out


def to_markdown(result: dict, source: str) -> str:
    lines = ["# The split rule or the balanced schedule, chosen from the batch's lengths", "",
             f"Command: `python -m tools.schedule_choice --bench {source}` (no GPU: the measured times are that "
             "run's). Model in page-times (see the script's docstring; balanced picked where its model is "
             f"{MARGIN:.0%} below the rule's); 'best' = the best fixed split (uniform) or "
             "the best of rule, balanced and fixed splits (ragged). 'by table' = today's triton backend "
             "(`schedule.uses_balanced`: the table's width).", "",
             "| set | h_q | B | median / max | model rule | model balanced | pick | rule us | balanced us | best us "
             "| pick / best | by table / best |", "|---" * 12 + "|"]
    for r in result["rows"]:
        lines.append(f"| {r['set']} | {r['heads']} | {r['batch']} | {r['lens_median']} / {r['lens_max']} "
                     f"| {r['model_rule']:.1f} | {r['model_balanced']:.0f} | {r['pick']} | {r['rule_us']:.1f} "
                     f"| {r['balanced_us']:.1f} | {r['best_us']:.1f} | {r['over_best']:.2f} "
                     f"| {r['table_over_best']:.2f} |")
    w, u = result["within_5pct"], result["uniform_within_5pct"]
    n_uni = sum(r["set"] == "uniform" for r in result["rows"])
    lines += ["", f"Within 5% of the best: chosen from the lengths {w['lengths']} of {result['problems']} problems "
              f"(uniform {u['lengths']} of {n_uni}); by the table's width {w['table']} (uniform {u['table']} of "
              f"{n_uni}).", "", "The mini engine's decode batches (`tools.engine_decode_bench`, where the schedule "
              "decoded 1.26x slower than the rule on the H200, `results/engine_decode_h200.json`):", ""]
    lines += [f"- after {e['tokens']} tokens: model rule {e['model_rule']:.1f}, balanced {e['model_balanced']:.0f}: "
              f"{e['pick']}" for e in result["engine"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="results/kernel_bench_h200_schedule.json", help="a schedule_bench json")
    ap.add_argument("--out", default=None, help="also write the markdown to this file")
    args = ap.parse_args(argv)
    with open(args.bench) as f:
        data = json.load(f)
    try:
        result = score(data)
    except ValueError as e:
        ap.error(f"--bench: {e}")
    result["engine"] = engine_batches()
    md = to_markdown(result, args.bench)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            f.write(md)
    print(md)


if __name__ == "__main__":
    main()
