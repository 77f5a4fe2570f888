"""Figures for notebook 05 (saved as figures/graph_*.png)."""

from __future__ import annotations

import json
import matplotlib.pyplot as plt
import torch

from mla_edu.paths import RESULTS_DIR



def load_launch_results(name: str = "graph_launch_h200.json") -> dict:
    """The committed eager-vs-replay timings (``python -m tools.launch_bench``)."""
    with open(RESULTS_DIR / name) as f:
        return json.load(f)


def launch_overhead(gpu: str = "graph_launch_h200.json", cpu: str = "graph_bench_cpu.json"):
    """Time per decode-like step vs kernels per step: eager and graph replay, H200 and the CPU emulator."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, name, replay_label in [(axes[0], gpu, "CUDA graph replay"), (axes[1], cpu, "emulator replay")]:
        res = load_launch_results(name)
        k = [r["kernels"] for r in res["rows"]]
        ax.plot(k, [r["eager_ms"] for r in res["rows"]], "o-", label="eager")
        ax.plot(k, [r["replay_ms"] for r in res["rows"]], "s-", label=replay_label)
        ax.set_xlabel("kernels per step")
        ax.set_ylabel("ms per step")
        ax.set_title(res["device"], fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Launch overhead: a decode-like step of many small kernels (batch 8, hidden 256)", fontsize=11)
    fig.tight_layout()
    return fig


def page_reads(intended: torch.Tensor, read: torch.Tensor, title: str):
    """Two heatmaps: the page id each (request, page slot) should read, and what it read."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 2.8))
    vmax = float(max(intended.max(), read.max()))
    for ax, data, name in [(axes[0], intended, "intended page"), (axes[1], read, "page read under replay")]:
        im = ax.imshow(data.numpy(), cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
        ax.set_xlabel("page slot j")
        ax.set_ylabel("request row b")
        ax.set_title(name, fontsize=10)
        for (b, j), v in _ndenumerate(data):
            ax.text(j, b, str(int(v)), ha="center", va="center", fontsize=7,
                    color="white" if v < vmax / 2 else "black")
    fig.colorbar(im, ax=axes, shrink=0.8)
    fig.suptitle(title, fontsize=10, y=1.06)
    return fig


def _ndenumerate(t: torch.Tensor):
    for b in range(t.shape[0]):
        for j in range(t.shape[1]):
            yield (b, j), t[b, j].item()


def narrow_view_reads():
    """figures/graph_narrow_view_reads.png without arguments (for ``python -m tools.figures``)."""
    from mla_edu.graphs import scenarios as sc

    srv = sc.ToyServer("cpu")
    reqs, lens = sc.REPLAY_BATCHES[0]
    srv.set_batch(reqs, lens)
    srv.fill_page_table(srv.kv_indices, len(reqs))
    intended = sc.pages_read(srv.kv_indices[:, : sc.W], srv.seq_lens)
    read = sc.pages_read(srv.kv_indices[:, :1], srv.seq_lens)
    return page_reads(intended, read, "kv_indices[:4, :1] at replay: row stride 1 instead of 8")
