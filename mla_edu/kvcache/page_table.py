"""Fill a page table from ``req_to_token``: SGLang's ``create_flashmla_kv_indices_triton``.

Semantics (sgl-project/sglang ``python/sglang/srt/layers/attention/utils.py``): one program
per request ``row`` writes

    page_table[row, p] = req_to_token[req_pool_indices[row], p * PAGE] // PAGE
    for p < ceil(seq_lens[row] / PAGE)

and leaves every other entry of the row untouched (stale ids stay). ``page_table`` may be a
row-slice of a larger persistent buffer; both versions write through its real strides, and read
every input through its strides (a strided ``seq_lens`` view, a transposed ``req_to_token``).
Differences from SGLang, whose kernel trusts its inputs: writes stop at ``page_table.size(1)``
(SGLang's kernel writes past the end of a too-narrow row), and a request needing more pages than
the table has columns is refused where its length is read on the host; a page past the context
(``p * PAGE >= max_context_len``), a row of a pool index outside the pool, a negative slot, and a
page id the table's dtype cannot hold get the id -1, which no page has (a checked decode flags
it), never a live page's id (Triton's integer division rounds toward zero, its semantics page's
"Differences with NumPy": slot -1 would be page 0). Where the values can be read without waiting
for a device (CPU tensors, no graph capture), these are refused before any write, with a
ValueError naming the request.
"""

from __future__ import annotations

import torch

import mla_edu.device  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)
from mla_edu.device import TRITON_INTERPRET, require_triton, values_readable
from mla_edu.util import is_int

#: The id written for an entry no page can serve (past the context, a row outside the pool, an id too large).
NO_PAGE = -1


def _check(req_to_token, req_pool_indices, seq_lens, page_table, page_size):
    for name, t in (("req_to_token", req_to_token), ("req_pool_indices", req_pool_indices),
                    ("seq_lens", seq_lens), ("page_table", page_table)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor, got {t.dtype}")
    if not page_table.dtype.is_signed:  # -1 in a uint8 table is 255, a live page's id
        raise TypeError(f"page_table must be a signed integer tensor (its no-page id is {NO_PAGE}), "
                        f"got {page_table.dtype}")
    if req_to_token.dim() != 2 or 0 in req_to_token.shape:
        raise ValueError("req_to_token must be 2-D [pool_size, max_context_len], both at least 1, "
                         f"got shape {tuple(req_to_token.shape)}")
    if page_table.dim() != 2:
        raise ValueError(f"page_table must be 2-D [rows, width], got shape {tuple(page_table.shape)}")
    if req_pool_indices.dim() != 1 or seq_lens.dim() != 1:
        raise ValueError("req_pool_indices and seq_lens must be 1-D, "
                         f"got {tuple(req_pool_indices.shape)} and {tuple(seq_lens.shape)}")
    b = req_pool_indices.numel()
    if seq_lens.numel() != b:
        raise ValueError(f"seq_lens must have one entry per request ({b}), got {seq_lens.numel()}")
    if page_table.size(0) != b:
        raise ValueError(f"page_table must have one row per request ({b}), got {page_table.size(0)} rows")
    if not is_int(page_size) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    devs = {t.device for t in (req_to_token, req_pool_indices, seq_lens, page_table)}
    if len(devs) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(str(d) for d in devs)}")
    if values_readable(req_to_token, req_pool_indices, seq_lens):
        _check_values(req_to_token, req_pool_indices, seq_lens, page_table, page_size)


def _check_values(req_to_token, req_pool_indices, seq_lens, page_table, page_size) -> None:
    """ValueError for a pool index outside the pool, a length outside ``[0, max_context_len]``, a length needing
    more pages than ``page_table`` has columns (its row would be cut short), a negative slot where a page id is read,
    or a page id the table's dtype cannot hold (host tensors only: reading device values would wait for the
    device)."""
    pool, ctx = req_to_token.shape
    width = page_table.size(1)
    for b, (r, n) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        if not 0 <= r < pool:
            raise ValueError(f"req_pool_indices[{b}] must be a row of req_to_token, in [0, {pool}), got {r}")
        if not 0 <= n <= ctx:
            raise ValueError(f"seq_lens[{b}] must be in [0, max_context_len={ctx}], got {n}")
        if (n + page_size - 1) // page_size > width:
            raise ValueError(f"seq_lens[{b}]: expected at most {width * page_size} tokens (page_table's {width} "
                             f"columns of page_size {page_size}), got {n} ({(n + page_size - 1) // page_size} pages)")
        firsts = req_to_token[r, :n:page_size]  # [pages]: each page's first slot, its page id read from it
        if firsts.numel() and int(firsts.min()) < 0:
            raise ValueError(f"req_to_token[{r}] (request {b}): expected slots >= 0 at the first token of each of "
                             f"its pages, got {int(firsts.min())}")
    if req_to_token.numel() and page_table.numel():
        biggest = int(req_to_token.max()) // page_size
        if biggest > torch.iinfo(page_table.dtype).max:
            raise ValueError(f"req_to_token holds page id {biggest}, past what the {page_table.dtype} page_table "
                             f"holds ({torch.iinfo(page_table.dtype).max}); expected slots that fit its dtype")


def _fill_torch(req_to_token, req_pool_indices, seq_lens, page_table, page_size: int) -> None:
    """Vectorized torch version: no Python loop over rows, no host sync (graph-capturable)."""
    width = page_table.size(1)
    pool, ctx = req_to_token.shape
    dev = page_table.device
    p = torch.arange(width, device=dev)  # [W]
    cols = (p * page_size).clamp_(max=ctx - 1)  # [W] first token of page p (clamped: NO_PAGE past the context)
    req = req_pool_indices.to(torch.int64)  # [B]
    rows = req_to_token.index_select(0, req.clamp(0, pool - 1))  # [B, ctx] (clamped: NO_PAGE outside the pool)
    firsts = rows.index_select(1, cols).to(torch.int64)  # [B, W] each page's first slot
    ids = firsts // page_size  # [B, W]
    n_pages = (seq_lens.to(torch.int64) + page_size - 1) // page_size  # [B]
    write = p[None, :] < n_pages[:, None]  # [B, W]
    bad = ((req < 0) | (req >= pool))[:, None] | (p * page_size >= ctx)[None, :]
    bad = bad | (firsts < 0) | (ids > torch.iinfo(page_table.dtype).max)
    new = torch.where(write, torch.where(bad, NO_PAGE, ids).to(page_table.dtype), page_table)
    page_table.copy_(new)


@torch.library.custom_op("mla_edu::fill_page_table", mutates_args=("page_table",))
def _fill_page_table_op(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                        page_table: torch.Tensor, page_size: int) -> None:
    from mla_edu.kvcache.page_table_triton import launch_fill_page_table  # Triton only when this impl runs

    launch_fill_page_table(req_to_token, req_pool_indices, seq_lens, page_table, page_size)


@_fill_page_table_op.register_fake
def _(req_to_token, req_pool_indices, seq_lens, page_table, page_size):
    return None


def fill_page_table(req_to_token, req_pool_indices, seq_lens, page_table, page_size: int, impl: str = "torch") -> None:
    """Write page ids of each request into its row of ``page_table`` (in place).

    req_to_token: int ``[pool_size, max_context_len]``; req_pool_indices: int ``[B]``;
    seq_lens: int ``[B]``; page_table: int ``[B, W]`` (a view of a persistent buffer is fine).
    impl="torch": a few vectorized torch ops. impl="triton": one Triton launch, registered as
    the custom op ``torch.ops.mla_edu.fill_page_table`` (a graph emulator sees one op).
    """
    _check(req_to_token, req_pool_indices, seq_lens, page_table, page_size)
    if impl == "torch":
        _fill_torch(req_to_token, req_pool_indices, seq_lens, page_table, page_size)
    elif impl == "triton":
        require_triton('fill_page_table(impl="triton")')
        if not page_table.is_cuda and not TRITON_INTERPRET:
            raise RuntimeError('fill_page_table(impl="triton") on CPU tensors needs TRITON_INTERPRET=1 set before '
                               'triton is imported (on a GPU machine, pass CUDA tensors or use impl="torch")')
        torch.ops.mla_edu.fill_page_table(req_to_token, req_pool_indices, seq_lens, page_table, page_size)
    else:
        raise ValueError(f"impl must be 'torch' or 'triton', got {impl!r}")
