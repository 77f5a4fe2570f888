"""Pictures of page tables: the page grid (one drawing, used by notebooks 03, 05, 06 and 08, the panel
and the exercises) and notebook 03's figure."""

from __future__ import annotations

import torch

from mla_edu import palette, plotstyle
from mla_edu.kernels import pages_read
from mla_edu.kvcache.page_table import fill_page_table
from mla_edu.kvcache.pool import PagedAllocator, ReqToTokenPool
from mla_edu.util import cdiv

PAGE = 64
CONTEXT = 512


def page_table_scenario():
    """A small deterministic serving state: 4 live requests whose rows held longer requests before.

    Returns a dict with ``buf`` (the persistent int32 page-table buffer, initialised to 1 as SGLang's; width
    ``(CONTEXT + 128) // PAGE``, SGLang's cutlass ``(max_context_len + 128) // 128`` with this toy's 64-token
    pages in the divisor, so some columns are slack), ``seq_lens``,
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


# ---- the page grid: one drawing for every page table in the notebooks, the panel and the exercises ----
GRID_COLORS = palette.GRID_COLORS  # cell fills by what a cell holds (Okabe-Ito tints; wrong cells also hatched)


_LABEL_BOX = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"}  # text over a hatch


def draw_page_grid(ax, pages, kinds, *, labels=None, text=None, cells=(), fontsize: float = plotstyle.MIN_FONT_PT):
    """An annotated grid of page ids on ``ax``: cell ``(b, j)`` (request row ``b``, page slot ``j``)
    coloured by ``kinds[b][j]`` (a key of ``GRID_COLORS``) and labelled with ``pages[b, j]``.

    pages: ``[rows, cols]`` int tensor. Labels: blank where unused, "P" where poison, "<id> x" where
    stale, ``labels[id]`` for special ids (e.g. a marker for "read past the buffer"), else the id;
    ``text`` (``[rows][cols]`` strings) replaces them all. ``cells``: ``(b, j)`` framed in red.
    Wrong cells are hatched too, so that no distinction rests on colour alone.
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Rectangle

    if pages.dim() != 2:
        raise ValueError(f"pages: expected a [rows, cols] tensor, got shape {tuple(pages.shape)}")
    rows, cols = pages.shape
    if len(kinds) != rows or any(len(k) != cols for k in kinds):
        raise ValueError(f"kinds: expected {rows} rows of {cols} names, got {[len(k) for k in kinds]}")
    names = list(GRID_COLORS)
    unknown = sorted({k for row in kinds for k in row} - set(names))
    if unknown:
        raise ValueError(f"kinds: expected names from {names}, got {unknown}")
    if text is not None and (len(text) != rows or any(len(t) != cols for t in text)):
        raise ValueError(f"text: expected {rows} rows of {cols} strings, got {[len(t) for t in text]}")
    outside = [c for c in cells if not (0 <= c[0] < rows and 0 <= c[1] < cols)]
    if outside:
        raise ValueError(f"cells: expected (b, j) with b < {rows}, j < {cols}, got {outside}")
    index = torch.tensor([[names.index(k) for k in row] for row in kinds])  # [rows, cols]
    ax.imshow(index.numpy(), cmap=ListedColormap(list(GRID_COLORS.values())), vmin=-0.5,
              vmax=len(names) - 0.5, aspect="auto")
    labels = labels or {}
    for b in range(rows):
        for j in range(cols):
            kind, v = kinds[b][j], int(pages[b, j])
            label = {"unused": "", "poison": "P"}.get(kind, labels.get(v, str(v)) + " x" * (kind == "stale"))
            ax.text(j, b, label if text is None else text[b][j], ha="center", va="center", fontsize=fontsize,
                    bbox=_LABEL_BOX if kind == "wrong" else None)
            if kind == "wrong":
                ax.add_patch(Rectangle((j - 0.5, b - 0.5), 1, 1, fill=False, hatch=palette.HATCH["wrong"],
                                       edgecolor=palette.HATCH_COLOR, lw=0))
    for b, j in cells:
        ax.add_patch(Rectangle((j - 0.45, b - 0.45), 0.9, 0.9, fill=False, edgecolor=palette.FRAME_COLOR, lw=1.5))
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))


def draw_index_buffer(ax, buffer, written, *, poison: int | None = None, reads=(),
                      fontsize: float = plotstyle.MIN_FONT_PT):
    """The persistent index buffer ``[rows, W]``: entries ``written`` for this step (green), stale ones
    (orange, x: old ids or the initial 1), entries equal to ``poison`` (grey, P); ``reads``: flat
    indices into the buffer (as a kernel indexes it) framed in red."""
    if tuple(written.shape) != tuple(buffer.shape):
        raise ValueError(f"written: expected the buffer's shape {tuple(buffer.shape)}, got {tuple(written.shape)}")
    rows, w = buffer.shape
    kinds = [["written" if written[b, j] else "poison" if int(buffer[b, j]) == poison else "stale"
              for j in range(w)] for b in range(rows)]
    cells = [divmod(flat, w) for flat in reads if flat < rows * w]
    draw_page_grid(ax, buffer, kinds, cells=cells, fontsize=fontsize)


def _read_kind(intended: int, read: int) -> str:
    return "right" if read == intended else "wrong"


def draw_intended_and_read(ax_intended, ax_read, intended, read, *, unused: int = -1, labels=None):
    """Two grids ``[rows, pages]``: the page ids each request owns (blue) and those it read (green: its
    own page, red and hatched: another); ``unused`` marks slots past a request's pages (blank in both)."""
    if intended.shape != read.shape:
        raise ValueError(f"intended and read: expected one shape, got {tuple(intended.shape)} and "
                         f"{tuple(read.shape)}")
    rows, cols = intended.shape
    used = (intended != unused).tolist()
    draw_page_grid(ax_intended, intended, [["owned" if u else "unused" for u in row] for row in used],
                   labels=labels)
    kinds = [[_read_kind(int(intended[b, j]), int(read[b, j])) if used[b][j] else "unused" for j in range(cols)]
             for b in range(rows)]
    draw_page_grid(ax_read, read, kinds, labels=labels)
    ax_intended.set_title("intended page ids", fontsize=plotstyle.MIN_FONT_PT)
    ax_read.set_title("page ids read under replay", fontsize=plotstyle.MIN_FONT_PT)
    for ax in (ax_intended, ax_read):
        ax.set_xlabel("page j of the request")


def page_table_figure():
    """Above: the persistent buffer (entries written this step vs stale ones). Below: what a width-1 view
    read with the ``"size"`` policy (row stride 1) hands the kernel, versus the right pages."""

    sc = page_table_scenario()
    buf, n_pages = sc["buf"][:4], sc["n_pages"]
    width = buf.size(1)
    fig, axes = plotstyle.subplots(2, 1, figsize=(7, 6.4))  # stacked: legible at a book's width
    written = torch.arange(width)[None, :] < torch.tensor(n_pages)[:, None]  # [4, width]
    draw_index_buffer(axes[0], buf, written, fontsize=plotstyle.MIN_FONT_PT)
    axes[0].set_yticks(range(4), [f"row {b}: len {int(n)}" for b, n in enumerate(sc["seq_lens"])])
    axes[0].set_xlabel("page slot p (plain: written this step; x: stale, ids of earlier requests\n"
                       "or the initial 1)")
    axes[0].set_title(f"persistent page-table buffer, width {width} = (context {CONTEXT} + 128) // page {PAGE}")

    right = pages_read(sc["buf"], n_pages, row_stride=width)
    wrong = pages_read(sc["buf"], n_pages, row_stride=1)
    cols = max(n_pages)
    read = torch.tensor([row + [-1] * (cols - len(row)) for row in wrong])  # [4, cols], -1 past the pages
    kinds = [[_read_kind(right[b][j], wrong[b][j]) if j < n else "unused" for j in range(cols)]
             for b, n in enumerate(n_pages)]
    text = [[f"{wrong[b][j]}" + ("" if right[b][j] == wrong[b][j] else f"\n(not {right[b][j]})") if j < n else ""
             for j in range(cols)] for b, n in enumerate(n_pages)]
    draw_page_grid(axes[1], read, kinds, text=text, fontsize=plotstyle.MIN_FONT_PT)
    axes[1].set_yticks(range(4), [f"request {b}" for b in range(4)])
    axes[1].set_xlabel("page j of the request")
    axes[1].set_title("pages read from a width-1 view, row stride = size(1) = 1")
    fig.tight_layout()
    return fig
