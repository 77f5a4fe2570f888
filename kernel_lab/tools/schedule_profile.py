"""Per-kernel CUDA time of the balanced schedule and of the split rule, on a GPU:
``python -m kernel_lab.tools.schedule_profile``.

For each shape of ``SHAPES`` (uniform or ragged lengths, B, L or median, h_q; page 64, bf16): 3 warm-up calls, then
20 eager calls of each path under ``torch.profiler``, and the mean CUDA time of each kernel per call (kernels of
0.5 us and more); FlashMLA's too where it is installed (``get_mla_metadata`` outside the calls, as in the benches).
The output behind ``docs/kernel_essay.md``'s tables (v6, v8): ``kernel_lab/results/schedule_profile_h200.txt``.
"""
from __future__ import annotations

import argparse
import collections
import math

SHAPES = [("u", 16, 1024, 128), ("u", 64, 1024, 128), ("u", 64, 4096, 128), ("u", 128, 1024, 128),
          ("u", 16, 1024, 16), ("u", 1, 4096, 16), ("r", 128, 2048, 16), ("r", 64, 1024, 128), ("r", 64, 2048, 128)]


def run() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mla_edu.kernels import peers
    from mla_edu.kernels import schedule as sc
    from tools.kernel_bench import backend_calls

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flash_mla, why = peers.load_flash_mla()
    print(f"FlashMLA: {why or 'installed'}", flush=True)
    scale = 1 / math.sqrt(192)
    for kind, b, size, h in SHAPES:
        lens = sc.lognormal_lengths(b, size, 0) if kind == "r" else [size] * b
        (q_nope, q_pe, cache, seq_lens, table), rule, parts, calls = backend_calls(lens, h, sms, scale)
        paths = tuple(calls.items())
        if flash_mla is not None:
            paths += (("FlashMLA", peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale).run),)
        for name, fn in paths:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
            per_call = collections.defaultdict(float)
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    per_call[e.name[:40]] += e.device_time / 20
            kernels = ", ".join(f"{k} {v:.1f}" for k, v in sorted(per_call.items(), key=lambda kv: -kv[1]) if v >= 0.5)
            print(f"{kind} B{b} L{size} h{h} {name:8s} (rule splits {rule}, parts {parts}): {kernels}", flush=True)


def main(argv=None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    run()


if __name__ == "__main__":
    main()
