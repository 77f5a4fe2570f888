"""The split rule or the balanced schedule, chosen from a batch's lengths, scored on measured times:
``python -m tools.schedule_choice``. No GPU: it reads a ``tools.schedule_bench`` run's json.

The triton serving backend chooses per batch with ``schedule.prefers_balanced``: a model of each path's
makespan in page-times (``schedule.makespans``), from the lengths an engine has on the host at every step
(``seq_lens_cpu``), stage 2 included, the schedule only ``schedule.BALANCED_MARGIN`` below the rule. Until v7
(``docs/kernel_essay.md``) it chose from the page table's width (``by_table``), the same for every batch a graph
replays. For every problem of the run this script takes both choices, with the split rule's count as the package
computes it now (the run timed every count), and compares the bench's measured time of what each picked with the
best fixed split (uniform lengths: the acceptance of issue 25) or with the best of rule, balanced and fixed
splits (ragged); and it models the mini engine's batches (``engine_batches``). Its output for the committed run:
``results/schedule_choice_h200.md`` (``tests/test_schedule_choice.py`` regenerates and compares it).
"""

from __future__ import annotations

import argparse
import json

from mla_edu.files import check_out_file, read_json, write_atomic
from mla_edu.kernels import schedule as sc
from mla_edu.paths import RESULTS_DIR
from mla_edu.util import cdiv
from tools import schedule_bench
from tools.schedule_bench import PAGE

SM_COUNT = 132  # the H200 of the committed run
#: The triton backend's choice until v7 (``docs/kernel_essay.md``): the balanced schedule where the page table holds
#: more than this many tokens, the same for every batch a graph replays.
V6_BALANCED_ABOVE_TOKENS = 4096


def by_table(lens: list[int]) -> bool:
    """v6's choice for a batch of ``lens`` tokens at page ``PAGE``, its table as wide as the longest request."""
    return PAGE * cdiv(max(lens), PAGE) > V6_BALANCED_ABOVE_TOKENS


def problems(data: dict):
    """(set, lengths, row) of each problem of a ``schedule_bench`` run of the default sets, the lengths drawn again
    as the bench draws them (``schedule_bench.problems``)."""
    drawn = list(schedule_bench.problems())
    for kind in ("ragged", "uniform"):
        lengths = [lens for k, _, lens in drawn if k == kind]
        if len(lengths) != len(data[kind]):
            raise ValueError(f"expected the default sets ({len(lengths)} {kind} problems), got {len(data[kind])}")
        for lens, row in zip(lengths, data[kind]):
            if (max(lens), min(lens), len(lens)) != (row["lens_max"], row["lens_min"], row["batch"]):
                raise ValueError(f"a {kind} row does not match the bench's lengths: {row}")
            yield kind, lens, row


def score(data: dict) -> dict:
    """Per problem the model's choice and its measured time against the best; and the counts within 5%."""
    from mla_edu.kernels.workspace import triton_num_kv_splits

    rows, within = [], {"table": 0, "lengths": 0}
    for kind, lens, r in problems(data):
        # the split rule as the package has it now; the run timed every split count
        splits = triton_num_kv_splits(PAGE * cdiv(max(lens), PAGE), len(lens), r["heads"], PAGE, SM_COUNT)
        if str(splits) not in r["split_us"]:
            raise ValueError(f"the split rule now takes {splits} splits at h_q={r['heads']}, B={r['batch']}, but the "
                             f"run timed only {sorted(r['split_us'], key=int)}")
        r = r | {"rule_us": r["split_us"][str(splits)]}
        rule, bal = sc.makespans(lens, PAGE, r["heads"], SM_COUNT, splits)
        best = r["best_us"] if kind == "uniform" else min(r["best_us"], r["rule_us"], r["balanced_us"])
        picks = {"table": "balanced" if by_table(lens) else "rule",
                 "lengths": "balanced" if sc.prefers_balanced(lens, PAGE, r["heads"], SM_COUNT, splits) else "rule"}
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
    """The mini engine's decode batches (``tools.engine_decode_bench``: the shipped model, the first 128 questions of
    the eval set, after 1, 32 and 64 generated tokens): what its own triton backend picks for them
    (``choose_schedule``, on an engine built as the bench builds it, its page table and SM count included), and
    the two modelled makespans behind the pick."""
    from mla_edu.model import load_pretrained
    from mla_edu.model.task import default_eval_set
    from mla_edu.serving import Engine
    from mla_edu.util import PAGE_SIZE

    model = load_pretrained(device="cpu")
    prompts = [len(q.prompt_ids) for q in default_eval_set()[:128]]
    backend = Engine(model, attention_backend="triton", num_kv_splits=-1, kernel_impl="triton",
                     max_running_requests=len(prompts), disable_cuda_graph=True).runner.backend
    heads = model.config.mla.num_attention_heads
    out = []
    for t in steps:
        lens = [n + t for n in prompts]
        width, pick = backend.choose_step(lens, heads)  # the columns the step reads, its schedule
        splits = backend.splits(len(prompts), heads, width)
        rule, bal = sc.makespans(lens, PAGE_SIZE, heads, backend.sm_count, splits, width)
        out.append({"tokens": t, "width": width, "model_rule": rule, "model_balanced": bal,
                    "pick": "balanced" if pick == "balanced" else "rule"})
    return out


#: The mini engine's decode measured on the H200 (``tools.engine_decode_bench``).
ENGINE_RESULT = RESULTS_DIR / "engine_decode_h200.json"


def to_markdown(result: dict, source: str) -> str:
    engine_run = json.loads(ENGINE_RESULT.read_text())
    lines = ["# The split rule or the balanced schedule, chosen from the batch's lengths", "",
             f"Command: `python -m tools.schedule_choice --bench {source}` (no GPU: the measured times are that "
             "run's). Model in page-times (`schedule.makespans`; balanced picked where its model is "
             f"{100 * sc.BALANCED_MARGIN:g}% below the rule's, stage 2 included: `schedule.prefers_balanced`; the "
             "rule's count as the package computes it now); 'best' = the best fixed "
             "split (uniform) or "
             "the best of rule, balanced and fixed splits (ragged). 'by table' = the triton backend's choice until v7 "
             f"(the schedule for tables over {V6_BALANCED_ABOVE_TOKENS} tokens).", "",
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
              f"{n_uni}).", "", "The mini engine's decode batches (`tools.engine_decode_bench`; on the H200, settings "
              f"interleaved, the schedule decoded in {engine_run['balanced_over_rule']:.2f}x the rule's time and the "
              f"backend's own choice in {engine_run['auto_over_rule']:.2f}x, `results/{ENGINE_RESULT.name}`):", ""]
    lines += [f"- after {e['tokens']} tokens ({e['width']} columns read): model rule {e['model_rule']:.1f}, balanced "
              f"{e['model_balanced']:.0f}: {e['pick']}" for e in result["engine"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="results/kernel_bench_h200_schedule.json", help="a schedule_bench json")
    ap.add_argument("--out", default=None, help="also write the markdown to this file")
    args = ap.parse_args(argv)
    try:
        if args.out:
            check_out_file(args.out, "--out")
        data = read_json(args.bench, "--bench")
        if not isinstance(data, dict):
            raise ValueError(f"--bench: expected a schedule_bench run (a JSON object), got {type(data).__name__}")
        result = score(data)
    except ValueError as e:
        ap.error(str(e) if str(e).startswith("--") else f"--bench: {e}")
    result["engine"] = engine_batches()
    md = to_markdown(result, args.bench)
    if args.out:
        write_atomic(args.out, md)
    print(md)


if __name__ == "__main__":
    main()
