"""Launch-config sweep of the Triton decode kernel's tl stage 1 at one point (GPU only).

    python -m tools.kernel_sweep --heads 128 --batch 64 --len 4096 --out DIR

In one run: the bf16 matmul ceiling (as in ``bench``), then for each launch config
(BLOCK_H, BLOCK_N, num_warps, num_stages) and split count the median CUDA-graph replay time,
TFLOP/s (``2 * B * L * h_q * (576 + 512)``) as a fraction of the ceiling, and the largest
relative error against the torch impl (float32 math on the same bf16 inputs). Writes
``kernel_sweep.json`` and ``kernel_sweep.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys

import torch

from mla_edu import cli
from mla_edu.files import check_out_dir, write_atomic

#: (BLOCK_H, BLOCK_N, num_warps, num_stages); the first is the current default for 128 heads.
CONFIGS = [
    (64, 64, 8, 2), (64, 64, 8, 1), (64, 64, 8, 3), (64, 32, 8, 2), (64, 32, 4, 3), (64, 128, 8, 1),
    (64, 64, 16, 2), (64, 32, 16, 2),
    (128, 64, 16, 2), (128, 32, 16, 2), (128, 32, 8, 2), (128, 64, 8, 1),
    (32, 64, 4, 2), (32, 64, 8, 2), (32, 32, 4, 2), (32, 128, 8, 2),
]


def _split_list(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4], each a split count the contract accepts."""
    return [cli.kv_splits(s) for s in text.split(",")]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=cli.positive_int, default=128)
    ap.add_argument("--batch", type=cli.positive_int, default=64)
    ap.add_argument("--len", type=cli.positive_int, default=4096, dest="length")
    ap.add_argument("--page", type=cli.positive_int, default=64)
    ap.add_argument("--splits", type=_split_list, default=[1, 2, 4], help="split counts to try, comma-separated")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("the sweep times GPU kernels: it needs a CUDA GPU")
    try:
        check_out_dir(args.out, "--out")
    except ValueError as e:
        ap.error(str(e))
    import triton

    from mla_edu.kernels import get_workspace_size, mla_decode
    from tools.kernel_bench import D_LAT, D_ROPE, graph_us, ceilings, make_problem

    ceil = ceilings()
    b, h, length = args.batch, args.heads, args.length
    q_nope, q_pe, cache, seq_lens, table = make_problem(b, h, args.page, length)
    scale = 1 / math.sqrt(192)
    flops = 2 * b * length * h * (D_LAT + D_ROPE + D_LAT)
    ws1 = torch.empty(get_workspace_size(args.page * table.size(1), b, 0, 1), dtype=torch.uint8, device="cuda")
    ref = mla_decode(q_nope, q_pe, cache, seq_lens, table, ws1, scale, 1, impl="torch").float()
    rows = []
    for cfg in CONFIGS:  # the tl kernel with each config, passed with the call (the plan carries it)
        for splits in args.splits:
            ws = torch.empty(get_workspace_size(args.page * table.size(1), b, 0, splits), dtype=torch.uint8,
                             device="cuda")
            fn = lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, splits,  # noqa: E731
                                    impl="triton", launch=cfg)
            row = {"BLOCK_H": cfg[0], "BLOCK_N": cfg[1], "num_warps": cfg[2], "num_stages": cfg[3], "splits": splits,
                   "programs": b * triton.cdiv(h, cfg[0]) * splits}
            try:
                err = ((fn().float() - ref).abs().max() / ref.abs().max()).item()
                us = graph_us(fn)
                row.update(us=us, TFLOPs=flops / (us * 1e-6) / 1e12, rel_err=err)
                row["pct_matmul"] = 100 * row["TFLOPs"] / ceil["matmul_bf16_TFLOPs"]
            except Exception as e:  # a config that does not compile (shared memory, registers)
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "batch": b, "heads": h, "len": length, "page": args.page,
            "command": "python -m tools.kernel_sweep " + " ".join(sys.argv[1:] if argv is None else argv)}
    write_atomic(os.path.join(args.out, "kernel_sweep.json"),
                 json.dumps({"info": info, "ceilings": ceil, "rows": rows}, indent=1))
    ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
    lines = [f"# Launch-config sweep, {info['gpu']}: bf16, B={b}, h_q={h}, L={length}, page {args.page}", "",
             f"Command: `{info['command']}`; torch {info['torch']}, triton {info['triton']}.", "",
             f"bf16 matmul ceiling measured in the same run: {ceil['matmul_bf16_TFLOPs']:.0f} TFLOP/s. "
             "Time: median CUDA-graph replay. Error: max |triton - torch impl| / max |torch impl|.", "",
             "| BLOCK_H | BLOCK_N | warps | stages | splits | programs | us | TFLOP/s | % matmul | rel. err |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        lines.append(f"| {r['BLOCK_H']} | {r['BLOCK_N']} | {r['num_warps']} | {r['num_stages']} | {r['splits']} | "
                     f"{r['programs']} | {r['us']:.1f} | {r['TFLOPs']:.0f} | {r['pct_matmul']:.0f}% | "
                     f"{r['rel_err']:.1e} |")
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['BLOCK_H']} | {r['BLOCK_N']} | {r['num_warps']} | {r['num_stages']} | {r['splits']} | "
                         f"{r['programs']} | failed: {r['error']} | | | |")
    write_atomic(os.path.join(args.out, "kernel_sweep.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
