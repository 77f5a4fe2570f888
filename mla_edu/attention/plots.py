"""Figures about MLA itself (notebooks 01 and 02). Registered in ``tools.figures``."""

from __future__ import annotations

import numpy as np

from mla_edu import palette, plotstyle
from mla_edu.attention import cost
from mla_edu.config import MLAConfig
from mla_edu.kernels.plots import load_bench


def h200_ceilings() -> tuple[float, float]:
    """``(FLOP/s, bytes/s)``: bf16 matmul and device-to-device copy, as measured on this project's H200
    by ``python -m tools.kernel_bench`` (``results/kernel_bench_h200.json``)."""
    ceil = load_bench()["ceilings"]
    return ceil["matmul_bf16_TFLOPs"] * 1e12, ceil["copy_TBps"] * 1e12


def kv_cache_bytes_per_token():
    """Bar chart: bytes cached per token per layer at DeepSeek-V3 dims (bf16), log scale."""
    sizes = cost.kv_cache_bytes_per_token(MLAConfig.deepseek_v3())
    fig, ax = plotstyle.subplots(figsize=(6, 3.2))
    mla = [scheme == "MLA" for scheme in sizes]  # the highlighted bar: coloured and hatched
    bars = ax.bar(list(sizes), list(sizes.values()), color=[palette.HIGHLIGHT if m else palette.GREY for m in mla],
                  **palette.hatched(mla))
    ax.set_yscale("log")
    ax.set_ylabel("bytes / token / layer (bf16)")
    ax.set_title("KV cache per token at DeepSeek-V3 dims (128 heads)")
    for bar, value in zip(bars, sizes.values()):
        ax.annotate(f"{value:,}", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom",
                    fontsize=plotstyle.MIN_FONT_PT)
    ax.set_ylim(100, 300_000)
    fig.tight_layout()
    return fig


def naive_vs_absorbed_cost():
    """Decode step of one layer at DeepSeek-V3 dims, batch 64: FLOPs and time floor vs context length."""
    v3 = MLAConfig.deepseek_v3()
    flop_per_s, bytes_per_s = h200_ceilings()
    lengths = np.array([256, 512, 1024, 2048, 4096, 8192, 16384, 32768])
    fig, (ax1, ax2) = plotstyle.subplots(2, 1, figsize=(6.5, 6.8))  # stacked: legible at a book's width
    for order, color, marker in (("naive", palette.GREY, "s"), ("absorbed", palette.HIGHLIGHT, "o")):
        costs = [cost.decode_cost(v3, [int(L)] * 64, order) for L in lengths]
        flops = np.array([c.flops for c in costs])
        floor = np.array([max(c.flops / flop_per_s, c.bytes / bytes_per_s) for c in costs])
        ax1.loglog(lengths, flops / 1e9, marker=marker, ls="-", color=color, label=order)
        ax2.loglog(lengths, floor * 1e6, marker=marker, ls="-", color=color, label=order)
    memory_only = [cost.decode_cost(v3, [int(L)] * 64, "absorbed").bytes / bytes_per_s * 1e6 for L in lengths]
    ax2.loglog(lengths, memory_only, "--", color=palette.BASELINE, label="bytes alone (latent cache + kv_b_proj)")
    ax1.set(xlabel="context length L", ylabel="GFLOP per layer per step", title="work (batch 64)")
    ax2.set(xlabel="context length L", ylabel="floor, us per layer",
            title=f"H200 floor: max(FLOPs / {flop_per_s / 1e12:.0f}T, bytes / {bytes_per_s / 1e12:.2f}T)")
    for ax in (ax1, ax2):
        ax.legend(fontsize=plotstyle.MIN_FONT_PT)
        ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return fig
