"""Pictures of page tables (used by notebook 03 and figures/)."""

from __future__ import annotations

import torch

from mla_edu.kernels import pages_read  # noqa: F401  (re-exported for notebook 03)
from mla_edu.kvcache.page_table import fill_page_table
from mla_edu.kvcache.pool import PagedAllocator, ReqToTokenPool
from mla_edu.util import cdiv

PAGE = 64
CONTEXT = 512


def page_table_scenario():
    """A small deterministic serving state: 4 live requests whose rows held longer requests before.

    Returns a dict with ``buf`` (the persistent int32 page-table buffer, width
    ``(CONTEXT + 128) // PAGE`` like SGLang's, initialised to 1), ``seq_lens``,
    ``req_pool_indices``, ``req_to_token`` and ``n_pages`` (pages each live request owns).
    """
    pool = ReqToTokenPool(6, CONTEXT)
    alloc = PagedAllocator(48, PAGE, seed=0)
    width = (CONTEXT + 128) // PAGE
    buf = torch.ones((6, width), dtype=torch.int32)  # SGLang fills its index buffer with 1
    # step 1: four long requests fill rows 0-3 (4-7 pages each)
    old = pool.alloc(4)
    old_lens = [400, 260, 450, 300]
    for r, n in zip(old, old_lens):
        alloc.slots_for(pool.req_to_token[r], 0, n)
    idx = torch.tensor(old, dtype=torch.int32)
    fill_page_table(pool.req_to_token, idx, torch.tensor(old_lens, dtype=torch.int32), buf[:4], PAGE)
    # they finish; their rows and pages are freed and reused by shorter requests
    for r, n in zip(old, old_lens):
        alloc.free_pages(alloc.pages_of(pool.req_to_token[r], n))
    pool.free(old)
    new = pool.alloc(4)
    lens = [130, 64, 300, 1]
    for r, n in zip(new, lens):
        alloc.slots_for(pool.req_to_token[r], 0, n)
    idx = torch.tensor(new, dtype=torch.int32)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    fill_page_table(pool.req_to_token, idx, seq_lens, buf[:4], PAGE)
    n_pages = [cdiv(n, PAGE) for n in lens]
    return {"buf": buf, "seq_lens": seq_lens, "req_pool_indices": idx, "req_to_token": pool.req_to_token,
            "n_pages": n_pages, "page_size": PAGE}


def page_table_figure():
    """Left: the persistent buffer (live entries vs stale ones). Right: what a width-1 view read
    with the ``"size"`` policy (row stride 1) hands the kernel, versus the right pages."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    sc = page_table_scenario()
    buf, n_pages = sc["buf"][:4], sc["n_pages"]
    width = buf.size(1)
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.4), gridspec_kw={"width_ratios": [width, 5]})
    live = torch.zeros_like(buf, dtype=torch.float32)
    for b, n in enumerate(n_pages):
        live[b, :n] = 1
    ax = axes[0]
    ax.imshow(live, cmap=ListedColormap(["#f4d6d6", "#cfe8cf"]), vmin=0, vmax=1, aspect="auto")
    for b in range(buf.size(0)):
        for j in range(width):
            ax.text(j, b, int(buf[b, j]), ha="center", va="center", fontsize=9,
                    color="black" if live[b, j] else "#a03030")
    ax.set_xticks(range(width))
    ax.set_yticks(range(buf.size(0)), [f"row {b}: len {int(n)}" for b, n in enumerate(sc["seq_lens"])])
    ax.set_xlabel("page slot p (green: written this step; red: stale ids from earlier requests, or the initial 1)")
    ax.set_title(f"persistent page-table buffer, width {width} = (context {CONTEXT} + 128) // page {PAGE}")

    right = pages_read(sc["buf"], n_pages, row_stride=width)
    wrong = pages_read(sc["buf"], n_pages, row_stride=1)
    ax = axes[1]
    cols = max(n_pages)
    ok = torch.full((4, cols), float("nan"))
    for b, n in enumerate(n_pages):
        for j in range(n):
            ok[b, j] = float(right[b][j] == wrong[b][j])
    ax.imshow(ok, cmap=ListedColormap(["#e07070", "#70b070"]), vmin=0, vmax=1, aspect="auto")
    for b, n in enumerate(n_pages):
        for j in range(n):
            ax.text(j, b, f"{wrong[b][j]}" + ("" if right[b][j] == wrong[b][j] else f"\n(not {right[b][j]})"),
                    ha="center", va="center", fontsize=8)
    ax.set_xticks(range(cols))
    ax.set_yticks(range(4), [f"request {b}" for b in range(4)])
    ax.set_xlabel("page j of the request")
    ax.set_title("pages read from a width-1 view, row stride = size(1) = 1")
    fig.tight_layout()
    return fig
