"""Issue 25's crash, replayed: ``python -m kernel_lab.tools.crash_repro [--no-flashmla] [--stage1 KIND]`` (a CUDA GPU).

The sequence the issue reports ``cudaErrorIllegalAddress`` in (3 of 3 runs, at the first call of h_q=128,
B=64, L=16384): the uniform grid, h_q 16 then 128, B 1, 4, 16, 64, 128, L 1024, 4096, 16384 (page 64,
bf16); per shape ``mla_decode(impl="triton")`` at ``num_kv_splits=-1`` (sgl-kernel's rule), then at fixed
splits 1, 2, 4, .. 64, then FlashMLA, each through ``triton.testing.do_bench_cudagraph``, in one process.
Prints one line per shape as it starts (``flush``), so a crash names the shape it surfaced at; exits 0 when
the whole grid ran.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

SPLITS = (-1, 1, 2, 4, 8, 16, 32, 64)


def main(argv=None) -> int:
    import triton.testing

    from mla_edu.kernels import mla_decode, num_kv_splits_for, peers
    from tools.kernel_bench import bench_workspace, make_problem

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-flashmla", action="store_true", help="leave FlashMLA out of the sequence")
    ap.add_argument("--stage1", default=None, help="stage-1 kernel (contract.STAGE1_KINDS; default: the device's)")
    args = ap.parse_args(argv)
    flash_mla, why = (None, "left out") if args.no_flashmla else peers.load_flash_mla()
    print(f"FlashMLA: {why or 'in the sequence'}; stage 1: {args.stage1 or 'default'}", flush=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    scale = 1 / math.sqrt(192)
    for heads in (16, 128):
        for b in (1, 4, 16, 64, 128):
            for length in (1024, 4096, 16384):
                print(f"shape h_q={heads} B={b} L={length}", flush=True)
                q_nope, q_pe, cache, seq_lens, table = make_problem(b, heads, 64, length)
                most = max(*SPLITS, num_kv_splits_for(64 * table.size(1), b, sms, -1))  # the auto split: up to 128
                ws = bench_workspace(64 * table.size(1), b, heads, sms, most)
                for s in SPLITS:
                    triton.testing.do_bench_cudagraph(lambda s=s: mla_decode(
                        q_nope, q_pe, cache, seq_lens, table, ws, scale, s, impl="triton", stage1=args.stage1))
                if flash_mla is not None:
                    peer = peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale)
                    triton.testing.do_bench_cudagraph(peer.run)
                torch.cuda.synchronize()  # the next shape's tensors replace these (the caching allocator reuses them)
    print("the whole grid ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
