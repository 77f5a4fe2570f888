"""GPU benchmark of the balanced split-KV schedule: ``python -m tools.schedule_bench --out DIR``.

One run, page 64, bf16, CUDA-graph replay (``kernel_bench.graph_us``), the same cache bytes for every kernel:

* the ragged set: seeded log-normal lengths (``schedule.lognormal_lengths``: B in ``RAGGED_BATCHES``, medians
  ``RAGGED_MEDIANS``, h_q 16 and 128), as a serving engine's decode batch holds them;
* beside it the uniform grid (``--batches`` x ``--lens``, h_q 16 and 128).

Per problem: mla_edu at the split rule's count (``triton_num_kv_splits``, from the page table's width, the
longest request), at every fixed split of ``SPLIT_CHOICES`` (the best of them), and with the balanced schedule
(``mla_decode(..., -1, schedule="balanced")``: persistent programs, each computing the partition from the
lengths inside the timed call); FlashMLA
(``get_mla_metadata`` outside the timed call); SGLang's Triton kernel at its best fixed split (powers of two)
and with its own per-request split counts (its backend's ``get_num_kv_splits_triton``, computed outside the
timed call). Errors against float64 on the first, last and longest request. Writes ``schedule_bench.json`` /
``.md`` into ``--out`` after every problem (a crash keeps what was measured).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys

import torch

from mla_edu.files import check_out_dir, read_json, write_atomic
from mla_edu.kernels.contract import STAGE1_KINDS
from mla_edu.kernels.stage1 import DEFAULT_GLUON
from mla_edu.kernels.schedule import prefers_balanced
from tools.kernel_bench import (D_LAT, D_ROPE, bench_workspace, ceilings, dist_version, f64_reference, graph_us,
                                make_ragged_problem, rel_err)

RAGGED_BATCHES = (16, 64, 128)
RAGGED_MEDIANS = (1024, 2048)
UNIFORM_BATCHES = (1, 4, 16, 64, 128)
UNIFORM_LENS = (1024, 4096, 16384)
HEADS = (16, 128)
PAGE = 64
SEED = 0


def measure(lens: list[int], heads: int, sms: int, flash_mla, sglang, sglang_rule, quick: bool = False,
            stage1: str | None = None, also: tuple = ()) -> dict:
    """One problem's row (see the module docstring); ``quick``: mla_edu at the rule's split only (no sweep);
    ``stage1``: mla_edu's stage-1 kernel (``contract.STAGE1_KINDS``; None: the device's default); ``also``: other
    stage-1 kinds whose balanced path is timed too, on the same bytes (``balanced_us_by_stage1``)."""
    from mla_edu.kernels import mla_decode, peers
    from mla_edu.kernels import schedule as sc
    from mla_edu.kernels.workspace import SPLIT_CHOICES, triton_num_kv_splits

    q_nope, q_pe, cache, seq_lens, table = make_ragged_problem(lens, heads, PAGE, seed=SEED)
    b, width = table.shape
    scale = 1 / math.sqrt(192)
    rule = triton_num_kv_splits(PAGE * width, b, heads, PAGE, sms)
    splits = [rule] if quick else [s for s in SPLIT_CHOICES if s <= width]
    target = sc.num_parts(heads, sms, b, width)
    ws = bench_workspace(PAGE * width, b, heads, sms, max(splits), sc.workspace_bytes(b, heads, D_LAT, target))
    ours = lambda s: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, s, impl="triton",  # noqa: E731
                                sm_count=sms, stage1=stage1)
    balanced = lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, -1, impl="triton",  # noqa: E731
                                  sm_count=sms, schedule="balanced", stage1=stage1)
    tokens = sum(lens)
    row = {"heads": heads, "batch": b, "lens_min": min(lens), "lens_median": int(statistics.median(lens)),
           "lens_max": max(lens), "tokens": tokens, "bytes": tokens * (D_LAT + D_ROPE) * 2,
           "flops": 2 * tokens * heads * (D_LAT + D_LAT + D_ROPE)}
    check = sorted({0, b - 1, max(range(b), key=lambda i: lens[i])})
    ref = f64_reference(q_nope, q_pe, cache, seq_lens, table, scale, check)
    per = {s: graph_us(lambda: ours(s)) for s in splits}
    best = min(per, key=per.get)
    row.update(split_us=per, rule_splits=rule, rule_us=per[rule], best_splits=best, best_us=per[best],
               balanced_us=graph_us(balanced), units=sc.workspace_rows(b, target),
               rule_err=max(rel_err(ours(s)[check], ref) for s in (1, rule)),
               balanced_err=rel_err(balanced()[check], ref))
    for kind in also:
        other = lambda kind=kind: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, -1,  # noqa: E731
                                             impl="triton", sm_count=sms, schedule="balanced", stage1=kind)
        row.setdefault("balanced_us_by_stage1", {})[kind] = graph_us(other)
        row.setdefault("balanced_err_by_stage1", {})[kind] = rel_err(other()[check], ref)
    if flash_mla is not None:
        peer = peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale)
        row.update(flashmla_us=graph_us(peer.run), flashmla_err=rel_err(peer.run()[check], ref))
        del peer
    if sglang is not None and cache.numel() < 2**31:  # its int32 offsets wrap past 2^31 elements
        peer = peers.SGLangTriton(sglang, q_nope, q_pe, cache, seq_lens, table, scale, 32)
        sg = {s: graph_us(lambda: peer.run(s)) for s in (1, 2, 4, 8, 16, 32) if s <= width}
        row.update(sglang_split_us=sg, sglang_splits=min(sg, key=sg.get), sglang_us=min(sg.values()))
        if sglang_rule is not None:
            own = peer.own_splits(sglang_rule, sms)
            row.update(sglang_own_us=graph_us(lambda: peer.run_splits(own)),
                       sglang_own_splits=sorted(set(own.tolist())),
                       sglang_err=rel_err(peer.run_splits(own)[check], ref))
        del peer
    return row


def problems(batches=UNIFORM_BATCHES, lens=UNIFORM_LENS, ragged: bool = True, uniform: bool = True):
    """(set, h_q, lengths) of each problem, in the bench's order: ragged by h_q, B, median (seeded log-normal
    lengths), then uniform by h_q, B, L."""
    from mla_edu.kernels import schedule as sc

    if ragged:
        for h in HEADS:
            for b in RAGGED_BATCHES:
                for m in RAGGED_MEDIANS:
                    yield "ragged", h, sc.lognormal_lengths(b, m, SEED)
    if uniform:
        for h in HEADS:
            for b in batches:
                for ln in lens:
                    yield "uniform", h, [ln] * b


def run(out_dir: str, batches=UNIFORM_BATCHES, lens=UNIFORM_LENS, ragged: bool = True, uniform: bool = True,
        quick: bool = False, stage1: str | None = None, also: tuple = ()) -> dict:
    import triton

    from mla_edu.kernels import peers

    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    sglang, sglang_why = (None, "not run (--quick)") if quick else peers.load_sglang_decode()
    rule, rule_why = peers.load_sglang_split_rule()
    flash_mla, flash_why = peers.load_flash_mla()
    info = {"gpu": props.name, "sm_count": sms, "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "command": "python -m tools.schedule_bench " + " ".join(sys.argv[1:]),
            "sglang": sglang_why or f"sglang {dist_version('sglang')}", "sglang_rule": rule_why or "its own",
            "flash_mla": flash_why or "flash_mla importable (FlashMLA built from source on this machine)",
            "stage1": stage1 or f"the device's default ({DEFAULT_GLUON!r} where it applies)", "also": list(also)}
    print(json.dumps(info), flush=True)
    data = {"info": info, "ceilings": ceilings(), "ragged": [], "uniform": []}
    for kind, h, lengths in problems(batches, lens, ragged, uniform):
        row = measure(lengths, h, sms, flash_mla, sglang, rule, quick, stage1, also)
        torch.cuda.empty_cache()  # the problem's tensors are gone with measure's frame
        data[kind].append(row)
        print(kind, json.dumps(row), flush=True)
        _write(out_dir, data)
    print(to_markdown(data))
    return data


def _write(out_dir: str, data: dict) -> None:
    write_atomic(os.path.join(out_dir, "schedule_bench.json"), json.dumps(data, indent=1))
    write_atomic(os.path.join(out_dir, "schedule_bench.md"), to_markdown(data))


def n_rows(data) -> int:
    """Measured problems in a run's json (0 for anything that is not one)."""
    if not isinstance(data, dict):
        return 0
    return sum(len(data.get(k) or []) for k in ("ragged", "uniform") if isinstance(data.get(k), list))


def render(json_path: str, out_dir: str) -> None:
    """Write the markdown (and the json) of the run at ``json_path`` into ``out_dir``. Refused, before any
    write: an input that is missing, not JSON, or holds no measured problem, and an ``out_dir`` whose
    ``schedule_bench.json`` holds more problems than the input (a render never replaces a result with less)."""
    data = read_json(json_path, "--render")
    if n_rows(data) == 0 or not isinstance(data.get("info"), dict):
        raise ValueError(f"--render: expected a schedule_bench run (its 'info' and at least one 'ragged' or "
                         f"'uniform' row), got {json_path}, which holds none")
    check_out_dir(out_dir, "--out")
    old = os.path.join(out_dir, "schedule_bench.json")
    if os.path.exists(old) and not os.path.samefile(old, json_path):
        try:
            had = n_rows(read_json(old, "--out"))
        except ValueError:
            had = 0
        if had > n_rows(data):
            raise ValueError(f"--render: {old} holds {had} problems and {json_path} {n_rows(data)}: a render never "
                             "replaces a result with less; expected another --out folder")
    _write(out_dir, data)


def backend_path(row: dict, sm_count: int) -> str:
    """"balanced" or "rule": what the triton backend runs for a uniform row (auto splits: its choice per batch from
    the lengths, ``schedule.prefers_balanced``). ValueError where the package's split count is not the one the run
    stored (its "rule" time would be of another count)."""
    from mla_edu.kernels.workspace import triton_num_kv_splits

    now = triton_num_kv_splits(PAGE * math.ceil(row["lens_max"] / PAGE), row["batch"], row["heads"], PAGE, sm_count)
    if now != row["rule_splits"]:  # the row's "rule" time is of the count it stored
        raise ValueError(f"expected the split rule's count of the run ({row['rule_splits']}) for h_q={row['heads']}, "
                         f"B={row['batch']}, L={row['lens_max']}, got {now} from the package now: rerun the bench")
    lens = [row["lens_max"]] * row["batch"]
    return "balanced" if prefers_balanced(lens, PAGE, row["heads"], sm_count, now) else "rule"


def summary(data: dict) -> dict:
    """The issue's acceptance numbers: x FlashMLA = FlashMLA's time / mla_edu's (above 1: mla_edu faster)."""
    out = {}
    for kind in ("ragged", "uniform"):
        rows = [r for r in data[kind] if "flashmla_us" in r]
        for key in ("balanced", "rule"):
            x = [r["flashmla_us"] / r[f"{key}_us"] for r in rows]
            if x:
                out[f"{kind}_{key}_x_flashmla"] = {"geomean": statistics.geometric_mean(x), "min": min(x)}
        for k in sorted({k for r in rows for k in r.get("balanced_us_by_stage1", {})}):  # --also's kinds
            x = [r["flashmla_us"] / r["balanced_us_by_stage1"][k] for r in rows if k in r.get("balanced_us_by_stage1",
                                                                                              {})]
            out[f"{kind}_balanced_{k}_x_flashmla"] = {"geomean": statistics.geometric_mean(x), "min": min(x)}
    uni = data["uniform"]
    for h in HEADS:
        x = [r["flashmla_us"] / r["balanced_us"] for r in uni if r["heads"] == h and "flashmla_us" in r
             and (h == 16 or r["batch"] >= 4)]
        if x:
            out[f"uniform_h{h}_balanced_x_flashmla"] = {"geomean": statistics.geometric_mean(x), "min": min(x),
                                                        "below_0.9": sum(v < 0.9 for v in x)}
    ratio = [r["balanced_us"] / r["best_us"] for r in uni]
    if ratio:
        out["uniform_balanced_over_best_split"] = {"max": max(ratio), "within_5pct": sum(v <= 1.05 for v in ratio),
                                                   "shapes": len(ratio)}
        picks = [backend_path(r, data["info"]["sm_count"]) for r in uni]
        choice = [r[f"{pick}_us"] / r["best_us"] for r, pick in zip(uni, picks)]
        out["uniform_backend_over_best_split"] = {"max": max(choice), "within_5pct": sum(v <= 1.05 for v in choice),
                                                  "shapes": len(choice)}
        for h in HEADS:  # what the backend runs against FlashMLA (h_q=128: B >= 4, as the acceptance counts)
            x = [r["flashmla_us"] / r[f"{pick}_us"] for r, pick in zip(uni, picks)
                 if r["heads"] == h and "flashmla_us" in r and (h == 16 or r["batch"] >= 4)]
            if x:
                out[f"uniform_h{h}_backend_x_flashmla"] = {"geomean": statistics.geometric_mean(x), "min": min(x),
                                                           "below_0.9": sum(v < 0.9 for v in x)}
    errs = [r[k] for kind in ("ragged", "uniform") for r in data[kind] for k in r if k.endswith("_err")]
    errs += [e for kind in ("ragged", "uniform") for r in data[kind] for e in r.get("balanced_err_by_stage1",
                                                                                      {}).values()]
    if errs:
        out["max_rel_err"] = max(errs)
    return {k: {a: round(b, 3) for a, b in v.items()} if isinstance(v, dict) else round(v, 4) for k, v in out.items()}


def to_markdown(data: dict) -> str:
    info, ceil = data["info"], data["ceilings"]

    def us(r, k, s=None):
        return f"{r[k]:.1f}" + (f" ({r[s]})" if s else "") if k in r else ""

    def x(r, k):
        return f"{r['flashmla_us'] / r[k]:.2f}" if "flashmla_us" in r else ""

    lines = [f"# The balanced split-KV schedule on {info['gpu']} ({info['sm_count']} SMs)", "",
             f"Command: `{info['command']}`; torch {info['torch']}, triton {info['triton']}, Python {info['python']}. "
             f"FlashMLA: {info['flash_mla']}. SGLang: {info['sglang']}, split rule: {info['sglang_rule']}.", "",
             *([f"Setup: {info['setup']}", ""] if info.get("setup") else []),
             f"Ceilings of the same run: copy {ceil['copy_TBps']:.2f} TB/s, bf16 matmul "
             f"{ceil['matmul_bf16_TFLOPs']:.0f} TFLOP/s.", "",
             "bf16, page 64, median CUDA-graph replay, the same cache bytes for every kernel. 'rule' = mla_edu at the "
             "split count of `triton_num_kv_splits` (from the table's width: the longest request); 'best fixed' = "
             "the fastest of its split counts 1-32; 'balanced' = `schedule=\"balanced\"` (persistent programs, each "
             "computing the partition from the lengths inside the timed call); "
             "FlashMLA with `get_mla_metadata` outside the timed call; SGLang = its Triton "
             "decode kernel at its best power-of-two split and with its own per-request split counts "
             "(`get_num_kv_splits_triton`, computed outside the timed call). 'x FM' = FlashMLA's time / mla_edu's "
             "(above 1: mla_edu is faster). err = max |out - float64| / max |float64| over the first, last and "
             "longest request.", ""]
    head = ("| h_q | B | {} | rule us (split) | best fixed us (split) | balanced us | balanced / best | FlashMLA us "
            "| x FM rule | x FM balanced | SGLang best us (split) | SGLang own splits us | err rule / balanced "
            "/ FlashMLA / SGLang |")
    for kind, col in (("ragged", "lengths min / median / max"), ("uniform", "L")):
        if not data[kind]:
            continue
        lines += [f"## {kind.capitalize()} lengths", "", head.format(col), "|---" * 13 + "|"]
        for r in data[kind]:
            size = (f"{r['lens_min']} / {r['lens_median']} / {r['lens_max']}" if kind == "ragged"
                    else str(r["lens_max"]))
            errs = " / ".join(f"{r[k]:.1e}" if k in r else "-" for k in ("rule_err", "balanced_err", "flashmla_err",
                                                                         "sglang_err"))
            lines.append(f"| {r['heads']} | {r['batch']} | {size} | {us(r, 'rule_us', 'rule_splits')} "
                         f"| {us(r, 'best_us', 'best_splits')} | {us(r, 'balanced_us')} "
                         f"| {r['balanced_us'] / r['best_us']:.2f} | {us(r, 'flashmla_us')} | {x(r, 'rule_us')} "
                         f"| {x(r, 'balanced_us')} | {us(r, 'sglang_us', 'sglang_splits')} | {us(r, 'sglang_own_us')} "
                         f"| {errs} |")
        lines.append("")
    also = sorted({k for kind in ("ragged", "uniform") for r in data[kind] for k in r.get("balanced_us_by_stage1", {})})
    if also:  # --also: the balanced path with other stage-1 kernels, same bytes, same run
        lines += ["## The balanced path by stage-1 kernel", "",
                  "| set | h_q | B | size | balanced us | " + " | ".join(f"{k} us | x FM {k}" for k in also) + " |",
                  "|---" * (5 + 2 * len(also)) + "|"]
        for kind in ("ragged", "uniform"):
            for r in data[kind]:
                by = r.get("balanced_us_by_stage1", {})
                cells = " | ".join(f"{by[k]:.1f} | {r['flashmla_us'] / by[k]:.2f}" if k in by and "flashmla_us" in r
                                   else (f"{by[k]:.1f} | " if k in by else " | ") for k in also)
                lines.append(f"| {kind} | {r['heads']} | {r['batch']} | {r['lens_median']} / {r['lens_max']} "
                             f"| {r['balanced_us']:.1f} | {cells} |")
        lines.append("")
    lines.append("Summary: " + json.dumps(summary(data)))
    return "\n".join(lines) + "\n"


def _kinds(text: str) -> tuple:
    kinds = tuple(k for k in text.split(",") if k)
    bad = [k for k in kinds if k not in STAGE1_KINDS]
    if bad:
        raise argparse.ArgumentTypeError(f"expected stage-1 kinds of {STAGE1_KINDS}, got {', '.join(bad)}")
    return kinds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for schedule_bench.json / .md")
    ap.add_argument("--batches", default=",".join(map(str, UNIFORM_BATCHES)), help="uniform grid's batch sizes")
    ap.add_argument("--lens", default=",".join(map(str, UNIFORM_LENS)), help="uniform grid's lengths")
    ap.add_argument("--only", choices=("ragged", "uniform"), help="run one of the two sets")
    ap.add_argument("--quick", action="store_true", help="exploring: no split sweep ('best fixed' is the rule's "
                    "split), no SGLang")
    ap.add_argument("--stage1", choices=STAGE1_KINDS, help="mla_edu's stage-1 kernel (default: the device's)")
    ap.add_argument("--also", type=_kinds, default=(), help="other stage-1 kinds (comma-separated) whose balanced "
                    "path is timed too, in the same run (a column each)")
    ap.add_argument("--render", metavar="JSON", help="no GPU: write the markdown of a run's json into --out")
    args = ap.parse_args(argv)
    if args.render:
        try:
            render(args.render, args.out)
        except ValueError as e:
            ap.error(str(e))
        return
    if not torch.cuda.is_available():
        raise SystemExit("python -m tools.schedule_bench needs a CUDA GPU; the committed results are in "
                         "results/kernel_bench_h200_schedule.md")
    try:
        check_out_dir(args.out, "--out")
    except ValueError as e:
        ap.error(str(e))
    run(args.out, tuple(map(int, args.batches.split(","))), tuple(map(int, args.lens.split(","))),
        ragged=args.only != "uniform", uniform=args.only != "ragged", quick=args.quick, stage1=args.stage1,
        also=args.also)


if __name__ == "__main__":
    main()
