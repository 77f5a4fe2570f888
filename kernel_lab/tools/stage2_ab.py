"""Launch configs of the balanced schedule's stage 2, timed in one process on a GPU:
``python -m kernel_lab.tools.stage2_ab``.

Stage 2 (``split_kv_triton.stage2_scheduled_kernel``) runs at every balanced call, whether or not a request was
cut: each of its programs computes the batch's partition, and most exit at once (a request whole in one part was
written by stage 1). Per problem (``PROBLEMS``: the schedule bench's 12 ragged batches and uniform shapes), one
balanced call fills the workspace with its partials; then for each config of ``CONFIGS`` (``Stage2Config``: heads,
partials loaded together, latent columns, warps): stage 2 alone and the whole balanced call, each timed by
``kernel_bench.graph_us`` twice, the order of the configs reversed the second time, the best of the two kept;
FlashMLA's whole call beside where it is installed, and the config ``split_kv_triton.stage2_config`` chooses for
the problem (what a balanced call runs). Each config's output is compared with the first's (max abs difference:
the order of the merge's additions follows the partials loaded together). First, per config, the
registers a thread holds (the compiled kernel's ``n_regs``) and the programs of its grid at B=64, h_q=128.
"""
from __future__ import annotations

import argparse
import math

from mla_edu.kernels.split_kv_triton import STAGE2_FEW_NARROW, STAGE2_FEW_WIDE, STAGE2_MANY, Stage2Config

#: (kind, B, median or length, h_q): the schedule bench's ragged batches (seed 0), and uniform shapes: at h_q=128,
#: B=64, L=1024 the balanced path cuts no request (one whole request a part), at B=128 most
PROBLEMS = ([("r", b, m, h) for h in (16, 128) for b in (16, 64, 128) for m in (1024, 2048)]
            + [("u", 64, 1024, 128), ("u", 128, 1024, 128), ("u", 64, 4096, 16), ("u", 128, 1024, 16)])
CONFIGS = [STAGE2_MANY, Stage2Config(16, 1, 128, 4), Stage2Config(16, 1, 256, 4), STAGE2_FEW_WIDE,
           Stage2Config(16, 1, 512, 8), STAGE2_FEW_NARROW]  # the three ``stage2_config`` chooses from among them


def label(cfg: Stage2Config) -> str:
    """[heads, partials, columns]w(warps)."""
    return f"[{cfg.block_h},{cfg.block_s},{cfg.block_d}]w{cfg.num_warps}"


def run(configs=CONFIGS, problems=PROBLEMS) -> None:
    import torch

    from mla_edu.kernels import make_plan, peers
    from mla_edu.kernels import schedule as sc
    from mla_edu.kernels import split_kv_triton as skt
    from mla_edu.kernels.workspace import D_LATENT
    from tools.kernel_bench import bench_workspace, graph_us, make_ragged_problem

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flash_mla, why = peers.load_flash_mla()
    print("FlashMLA:", why or "installed", flush=True)
    scale = 1 / math.sqrt(192)
    for i, (kind, b, size, h) in enumerate(problems):
        lens = sc.lognormal_lengths(b, size, 0) if kind == "r" else [size] * b
        q_nope, q_pe, cache, seq_lens, table = make_ragged_problem(lens, h, 64)
        width = table.size(1)
        parts = sc.num_parts(h, sms, b, width)
        need = sc.workspace_bytes(b, h, D_LATENT, parts)
        ws = bench_workspace(64 * width, b, h, sms, 1, need)
        o_acc, lse = skt.balanced_views(ws, b, h, D_LATENT, parts)

        plan = skt.plan_stage1(q_nope, q_pe, cache, make_plan(q_nope, q_pe, cache, seq_lens, table, ws, 1, "size",
                                                              sms, "balanced"), False)

        def whole(cfg=None):  # mla_decode's balanced call, at stage 2's config cfg (None: the one it chooses)
            return skt.mla_decode_triton_balanced(q_nope, q_pe, cache, seq_lens, table, ws, scale, plan, False,
                                                  stage2=cfg)

        out = whole()  # the workspace now holds this batch's partials
        cut = sum(1 for s in sc.segments(seq_lens, 64, width, parts, h) if s.flag == sc.PARTIAL)
        outs, alone, full = {}, {c: [] for c in configs}, {c: [] for c in configs}
        for rep in range(2):
            for cfg in configs if rep == 0 else configs[::-1]:
                o2 = out.clone()
                kernel = skt.launch_stage2_scheduled(o_acc, lse, seq_lens, o2, 64, width, parts, cfg)
                if i == 0 and rep == 0:
                    grid = 64 * math.ceil(128 / cfg.block_h) * math.ceil(D_LATENT / cfg.block_d)
                    print(f"{label(cfg)}: {kernel.n_regs} registers a thread, {grid} programs at B=64, h_q=128",
                          flush=True)
                outs[cfg] = o2
                alone[cfg].append(graph_us(lambda: skt.launch_stage2_scheduled(o_acc, lse, seq_lens, o2, 64,
                                                                                width, parts, cfg)))
                full[cfg].append(graph_us(lambda cfg=cfg: whole(cfg)))
        fm = (graph_us(peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale).run) if flash_mla
              else float("nan"))
        first = configs[0]
        cols = "  ".join(f"{label(c)} {min(alone[c]):.1f} / {min(full[c]):.1f} "
                         f"(d {(outs[c].float() - outs[first].float()).abs().max().item():.1e})" for c in configs)
        print(f"{kind} h{h} B{b} {size} parts{parts} cut{cut}: stage 2 / whole us  {cols}  FlashMLA {fm:.1f}  "
              f"chosen {label(skt.stage2_config(b, h, parts))}", flush=True)
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.parse_args(argv)
    run()


if __name__ == "__main__":
    main()
