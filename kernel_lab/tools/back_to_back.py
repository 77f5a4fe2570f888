"""How much of a kernel's time in the bench comes from overlapping the call before it: ``python -m
kernel_lab.tools.back_to_back``, on a GPU.

The schedule bench (``kernel_bench.graph_us``) replays many calls back to back in one CUDA graph. FlashMLA launches
its kernels with programmatic dependent launch (``docs/kernel_essay.md``), so there each call's blocks may start
while the call before ends. Here, per problem of ``PROBLEMS`` (h_q=128, page 64, uniform lengths), mla_edu's call
at the triton backend's split rule (what the backend runs at these shapes) and FlashMLA's are each timed by
``graph_us`` back to back, and with a small kernel between calls (one element incremented, which lets no call start
before the one ahead has ended); the small kernel alone too. Printed per problem, in us: back to back, separated,
and their difference; the small kernel's own time once, first. ``--flush``: the kernel between calls writes 256 MB
instead, more than the L2 cache holds, so no call finds the one before's bytes there.
"""
from __future__ import annotations

import argparse
import math
import re

PROBLEMS = [(64, 1024), (128, 1024), (64, 4096)]  # (B, L): the uniform h_q=128 shapes below 0.9x in v16's runs
HEADS = 128


def run(problems=PROBLEMS, flush: bool = False) -> None:
    import torch

    from mla_edu.kernels import mla_decode, peers
    from mla_edu.kernels.workspace import triton_num_kv_splits
    from tools.kernel_bench import bench_workspace, graph_us, make_ragged_problem

    if not torch.cuda.is_available():
        raise SystemExit("kernel_lab.tools.back_to_back times CUDA graphs: it needs a CUDA GPU")
    flash_mla, why = peers.load_flash_mla()
    print("FlashMLA:", why or "installed", flush=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    one = torch.zeros(256 * 2**20 // 4 if flush else 1, device="cuda")
    sep = lambda: one.add_(1)  # noqa: E731  (a kernel of its own between two calls)
    print(f"separator: {'256 MB written' if flush else 'one element incremented'}", flush=True)
    print(f"separator alone {graph_us(sep):.1f}", flush=True)
    scale = 1 / math.sqrt(192)
    for b, length in problems:
        q_nope, q_pe, cache, seq_lens, table = make_ragged_problem([length] * b, HEADS, 64)
        splits = triton_num_kv_splits(64 * table.size(1), b, HEADS, 64, sms)
        ws = bench_workspace(64 * table.size(1), b, HEADS, sms, splits)
        calls = {"mla_edu": lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, splits,
                                               impl="triton", sm_count=sms)}  # the rule: what the backend runs here
        if flash_mla is not None:
            calls["FlashMLA"] = peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale).run
        cols = []
        for name, fn in calls.items():
            both = [], []
            for rep in range(2):  # each way twice, the order reversed the second time; the best kept
                for way in (0, 1) if rep == 0 else (1, 0):
                    both[way].append(graph_us(fn if way == 0 else lambda fn=fn: (fn(), sep())))
            b2b, apart = min(both[0]), min(both[1])
            cols.append(f"{name} {b2b:.1f} / {apart:.1f} ({apart - b2b:+.1f})")
        print(f"u B{b} {length} h{HEADS} rule{splits}: back to back / separated us  " + "  ".join(cols), flush=True)
        del calls
        torch.cuda.empty_cache()


def parse(text: str) -> dict:
    """``{"separator": us, (shape, name): (back to back, separated, their difference as printed)}`` from one run of
    this tool's output (shape as printed, e.g. ``"u B64 1024"``)."""
    out = {"separator": float(re.search(r"separator alone ([\d.]+)", text).group(1))}
    for line in re.findall(r"^u B\d+ \d+ .*$", text, re.M):
        shape = " ".join(line.split()[:3])
        for name, b2b, apart, diff in re.findall(r"(\w+) ([\d.]+) / ([\d.]+) \(([+-][\d.]+)\)", line):
            out[shape, name] = (float(b2b), float(apart), float(diff))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flush", action="store_true", help="between calls, write 256 MB (the L2 cache flushed)")
    args = ap.parse_args(argv)
    run(flush=args.flush)


if __name__ == "__main__":
    main()
