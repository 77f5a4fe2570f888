"""Figures for notebook 05 (saved as figures/graph_*.png)."""

from __future__ import annotations

import json
import torch

from mla_edu import palette, plotstyle
from mla_edu.graphs import scenarios as sc
from mla_edu.kvcache.plots import draw_intended_and_read
from mla_edu.paths import RESULTS_DIR


def load_launch_results(name: str = "graph_launch_h200.json") -> dict:
    """The committed eager-vs-replay timings (``python -m tools.launch_bench``)."""
    with open(RESULTS_DIR / name) as f:
        return json.load(f)


def launch_overhead(gpu: str = "graph_launch_h200.json", cpu: str = "graph_bench_cpu.json"):
    """Time per decode-like step vs kernels per step: eager and graph replay, H200 and the CPU emulator."""
    fig, axes = plotstyle.subplots(2, 1, figsize=(6.5, 6.8))  # stacked: legible at a book's width
    for ax, name, replay_label in [(axes[0], gpu, "CUDA graph replay"), (axes[1], cpu, "emulator replay")]:
        res = load_launch_results(name)
        k = [r["kernels"] for r in res["rows"]]
        ax.plot(k, [r["eager_ms"] for r in res["rows"]], "o-", color=palette.BASELINE, label="eager")
        ax.plot(k, [r["replay_ms"] for r in res["rows"]], "s--", color=palette.HIGHLIGHT, label=replay_label)
        ax.set_xlabel("kernels per step")
        ax.set_ylabel("ms per step")
        ax.set_title(res["device"], fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Launch overhead: a decode-like step of many small kernels\n(batch 8, hidden 256)", fontsize=11)
    fig.tight_layout()
    return fig


def page_reads(intended: torch.Tensor, read: torch.Tensor, title: str):
    """Two page grids ``[B, W]`` (-1 = unused): the page id each (request row b, page slot j) should read,
    and the one it read (green: its own page, red and hatched: another)."""
    fig, axes = plotstyle.subplots(1, 2, figsize=(6.5, 2.8), sharey=True)  # legible at a book's width (~590 px)
    draw_intended_and_read(axes[0], axes[1], intended, read)
    axes[0].set_ylabel("request row b")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def narrow_view_reads(device="cpu"):
    """figures/graph_narrow_view_reads.png: pitfall 2's pages, intended and read through the 1-wide view."""
    intended, read = sc.narrow_view_pages(device)
    return page_reads(intended, read, "kv_indices[:4, :1] at replay: row stride 1 instead of 8")
