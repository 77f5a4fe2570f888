"""One family batch for Nsight Compute: mla_edu's balanced schedule and FlashMLA, each called once inside the
profiled range. ``ncu --profile-from-start off --section SpeedOfLight ... python -m kernel_lab.tools.family_profile
--family bimodal --heads 128 --batch 256``, on a Hopper GPU with FlashMLA built.

The batch is ``family_bench``'s (same lengths, same cache), so the profile reads next to that bench's times. Each path
runs twice before the range (Triton's build, FlashMLA's metadata) and once in it, eagerly: the kernels are the ones a
CUDA graph replays, one launch each.
"""

from __future__ import annotations

import argparse
import math

import torch

from kernel_lab.tools import family_bench as fb


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=list(fb.FAMILIES), required=True)
    ap.add_argument("--heads", type=int, choices=fb.HEADS, required=True)
    ap.add_argument("--batch", type=int, required=True)
    args = ap.parse_args(argv)
    if args.batch < 1:
        ap.error(f"--batch: expected >= 1, got {args.batch}")
    if not torch.cuda.is_available():
        raise SystemExit("python -m kernel_lab.tools.family_profile needs a CUDA GPU")
    from mla_edu.kernels import mla_decode, peers
    from mla_edu.kernels import schedule as sc
    from tools.kernel_bench import D_LAT, bench_workspace, make_ragged_problem

    flash_mla, why = peers.load_flash_mla()
    if flash_mla is None:
        raise SystemExit(f"FlashMLA is needed beside mla_edu: {why}")
    lens = fb.family_lengths(args.family, args.batch)
    q_nope, q_pe, cache, seq_lens, table = make_ragged_problem(lens, args.heads, fb.PAGE, seed=fb.SEED)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    parts = sc.num_parts(args.heads, sms, args.batch, table.size(1))
    ws = bench_workspace(fb.PAGE * table.size(1), args.batch, args.heads, sms, 1,
                         sc.workspace_bytes(args.batch, args.heads, D_LAT, parts))
    scale = 1 / math.sqrt(192)
    fm = peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale)

    def ours():
        return mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, -1, impl="triton", sm_count=sms,
                          schedule="balanced")

    for _ in range(2):
        ours(), fm.run()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    a, b = ours(), fm.run()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"{args.family} h_q={args.heads} B={args.batch}: {sum(lens)} tokens, {parts} parts; "
          f"max |ours - FlashMLA| = {(a.float() - b.float()).abs().max().item():.1e}")


if __name__ == "__main__":
    main()
