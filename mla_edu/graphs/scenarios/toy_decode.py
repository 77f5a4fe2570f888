"""The toy paged decode every scenario captures: its cache, page table and kernel (torch and Triton).

A latent-like cache ``kv_cache [num_pages, PAGE, D]``, SGLang-style ``req_to_token``, a persistent page
table ``kv_indices [MAX_BS, W]`` (filled with 1, like SGLang's ``cuda_graph_kv_indices``) and a "decode
kernel" that, per request ``b``, sums the cached vectors of its ``seq_lens[b]`` tokens, reading page ``j``
at flat index ``b * page_table.size(1) + j`` (the row stride taken from the *size*, as sgl-kernel's
cutlass MLA wrapper does; sources in docs/sources.md).
"""

from __future__ import annotations

import torch

import mla_edu  # noqa: F401  (TRITON_INTERPRET before triton)
from mla_edu import kernels
from mla_edu.device import require_triton
from mla_edu.graphs.emulator import host_tensor

PAGE = 4  # tokens per page
W = 8  # page-table width: max pages per request (max context = 32 tokens)
D = 8  # latent dim of the toy cache
MAX_BS = 4  # captured batch size
NUM_REQS = 8  # req_to_token rows
NUM_PAGES = 1 + NUM_REQS * W  # page 0 is a reserved dummy page (SGLang pads out_cache_loc with slot 0)

try:  # the kernel below is defined where Triton is here; whether to run it is device.triton_available's answer
    import triton
    import triton.language as tl

    _HAS_TRITON = True
except Exception:  # pragma: no cover
    _HAS_TRITON = False


# ---- the kernel: torch and Triton, both with the size-derived row stride ---------------------
def paged_sum_torch(page_table: torch.Tensor, seq_lens: torch.Tensor, kv_cache: torch.Tensor,
                    max_tokens: int = W * PAGE) -> torch.Tensor:
    """out[b] = sum of the cached vectors of tokens t < min(seq_lens[b], max_tokens).

    Page ``j`` of request ``b`` is read at flat index ``b * page_table.size(1) + j`` from the
    table's first element: right only when the row stride equals the width. Checked: a row
    that meets an out-of-range page id (e.g. poison) comes out NaN instead of reading past
    the cache.
    """
    B, S = page_table.shape  # [B, S]; S is taken as the row stride
    extent = page_table.untyped_storage().nbytes() // page_table.element_size() - page_table.storage_offset()
    flat = page_table.as_strided((extent,), (1,))  # the table's memory from its first element
    t = torch.arange(max_tokens, device=kv_cache.device)  # [T]
    valid = t[None, :] < seq_lens[:, None].long()  # [B, T]
    idx = torch.arange(B, device=kv_cache.device)[:, None] * S + (t // PAGE)[None, :]  # [B, T]
    pages = torch.where(valid, flat[idx.clamp(max=extent - 1)].long(), 0)  # [B, T]
    bad = ((pages < 0) | (pages >= kv_cache.shape[0])).any(dim=1, keepdim=True)  # [B, 1] out-of-range id
    pages = pages.clamp(0, kv_cache.shape[0] - 1)
    tok = kv_cache[pages, (t % PAGE)[None, :].expand_as(pages)]  # [B, T, D]
    out = torch.where(valid[..., None], tok, 0.0).sum(dim=1)  # [B, D] (masked entries never count)
    return torch.where(bad, float("nan"), out)  # checked: a poisoned page id gives NaN, not a crash


if _HAS_TRITON:
    @triton.jit
    def _paged_sum_kernel(table_ptr, row_stride, seq_lens_ptr, kv_ptr, out_ptr, num_pages,
                          T: tl.constexpr, PAGE_: tl.constexpr, D_: tl.constexpr):
        b = tl.program_id(0)
        t = tl.arange(0, T)  # [T]
        d = tl.arange(0, D_)  # [D]
        valid = t < tl.load(seq_lens_ptr + b)
        page = tl.load(table_ptr + b * row_stride + t // PAGE_, mask=valid, other=0)  # [T]
        ok = (page >= 0) & (page < num_pages)
        tok = tl.load(kv_ptr + (page * PAGE_ + t % PAGE_)[:, None] * D_ + d[None, :],
                      mask=(valid & ok)[:, None], other=0.0)  # [T, D]
        n_bad = tl.sum((valid & (ok == 0)).to(tl.int32), axis=0)
        acc = tl.sum(tok, axis=0)  # [D]
        tl.store(out_ptr + b * D_ + d, tl.where(n_bad > 0, float("nan"), acc))


@torch.library.custom_op("mla_edu_graphs::paged_sum", mutates_args=())
def paged_sum_triton(page_table: torch.Tensor, seq_lens: torch.Tensor, kv_cache: torch.Tensor) -> torch.Tensor:
    """Triton version of :func:`paged_sum_torch`; the launcher passes ``page_table.size(1)`` as row stride."""
    require_triton("paged_sum_triton (the toy server's Triton kernel)")
    B = page_table.shape[0]
    out = torch.empty(B, kv_cache.shape[-1], dtype=kv_cache.dtype, device=kv_cache.device)
    _paged_sum_kernel[(B,)](page_table, page_table.size(1), seq_lens, kv_cache, out, kv_cache.shape[0],
                            T=W * PAGE, PAGE_=PAGE, D_=kv_cache.shape[-1])
    return out


@paged_sum_triton.register_fake
def _(page_table, seq_lens, kv_cache):
    return kv_cache.new_empty(page_table.shape[0], kv_cache.shape[-1])


def pages_through_view(page_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """The page id each (request b, page slot j) reads through the view ``page_table``, its row stride
    taken from its size(1) as sgl-kernel's host code does; -1 if unused. [B, W]"""
    n_pages = ((seq_lens.long() + PAGE - 1) // PAGE).clamp(max=W).tolist()
    out = torch.full((page_table.size(0), W), -1, dtype=torch.int64)
    for b, row in enumerate(kernels.pages_read(page_table, n_pages, row_stride=page_table.size(1))):
        out[b, : len(row)] = torch.tensor(row, dtype=torch.int64)
    return out


# ---- the shared state of the toy server ------------------------------------------------------
class ToyServer:
    """Persistent buffers (allocated once, at maximum size) and host helpers."""

    def __init__(self, device, seed: int = 0) -> None:
        self.device = torch.device(device)
        g = torch.Generator().manual_seed(seed)
        self.kv_cache = torch.randn(NUM_PAGES, PAGE, D, generator=g).to(self.device)  # [P, PAGE, D]
        perm = torch.randperm(NUM_PAGES - 1, generator=g)[: NUM_REQS * W] + 1  # never page 0
        pages = perm.view(NUM_REQS, W)  # pages of each request, not contiguous
        slots = pages[:, :, None] * PAGE + torch.arange(PAGE)  # [R, W, PAGE]
        self.req_to_token = slots.reshape(NUM_REQS, W * PAGE).to(torch.int32).to(self.device)  # [R, W*PAGE]
        self.kv_indices = torch.ones(MAX_BS, W, dtype=torch.int32, device=self.device)  # SGLang fills with 1
        self.seq_lens = torch.ones(MAX_BS, dtype=torch.int32, device=self.device)
        self.req_pool_indices = torch.zeros(MAX_BS, dtype=torch.int64, device=self.device)
        self.seq_lens_cpu = host_tensor(torch.ones(MAX_BS, dtype=torch.int32))  # host mirror

    def set_batch(self, reqs: list[int], lens: list[int]) -> None:
        """Copy a batch into the static buffers (the graph runner's replay_prepare)."""
        n = len(reqs)
        self.req_pool_indices[:n].copy_(torch.tensor(reqs, dtype=torch.int64))
        self.seq_lens[:n].copy_(torch.tensor(lens, dtype=torch.int32))
        self.seq_lens_cpu[:n] = torch.tensor(lens, dtype=torch.int32)

    def fill_page_table(self, table: torch.Tensor, bs: int) -> None:
        """SGLang's fill: row b gets its first ceil(len/PAGE) page ids; other entries untouched."""
        reqs = self.req_pool_indices[:bs]
        pages = self.req_to_token[reqs][:, ::PAGE] // PAGE  # [bs, W]
        n_pages = (self.seq_lens[:bs] + PAGE - 1) // PAGE  # [bs]
        need = torch.arange(table.shape[1], device=self.device)[None, :] < n_pages[:, None]
        table[:bs] = torch.where(need, pages[:, : table.shape[1]].to(table.dtype), table[:bs])

    def truth(self, reqs: list[int], lens: list[int]) -> torch.Tensor:
        """Eager float reference: gather each request's tokens through req_to_token."""
        flat = self.kv_cache.reshape(-1, D)  # [P*PAGE, D]
        return torch.stack([flat[self.req_to_token[r, :n].long()].sum(0) for r, n in zip(reqs, lens)])
