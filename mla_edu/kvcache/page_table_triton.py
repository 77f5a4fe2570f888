"""Triton kernel behind ``torch.ops.mla_edu.fill_page_table`` (one program per request)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _fill_page_table_kernel(
    req_to_token_ptr, req_pool_indices_ptr, seq_lens_ptr, page_table_ptr,
    stride_rt0, stride_rt1, pool, ctx_len, stride_idx, stride_len, stride_pt0, stride_pt1, width, id_max,
    PAGE: tl.constexpr, BLOCK_P: tl.constexpr,
):
    row = tl.program_id(0)
    req = tl.load(req_pool_indices_ptr + row * stride_idx).to(tl.int64)
    seq_len = tl.load(seq_lens_ptr + row * stride_len).to(tl.int64)
    n_pages = tl.minimum((seq_len + PAGE - 1) // PAGE, width)
    in_pool = (req >= 0) & (req < pool)
    req = tl.minimum(tl.maximum(req, 0), pool - 1)  # never read outside req_to_token
    for start in range(0, n_pages, BLOCK_P):
        p = start + tl.arange(0, BLOCK_P).to(tl.int64)
        mask = p < n_pages
        col = tl.minimum(p * PAGE, ctx_len - 1)
        first = tl.load(req_to_token_ptr + req * stride_rt0 + col * stride_rt1, mask=mask, other=0).to(tl.int64)
        page = first // PAGE
        page = tl.where(in_pool & (p * PAGE < ctx_len) & (first >= 0) & (page <= id_max), page, -1)  # NO_PAGE
        tl.store(page_table_ptr + row * stride_pt0 + p * stride_pt1, page, mask=mask)


def launch_fill_page_table(req_to_token, req_pool_indices, seq_lens, page_table, page_size: int) -> None:
    b = page_table.size(0)
    if b == 0 or page_table.size(1) == 0:
        return
    _fill_page_table_kernel[(b,)](
        req_to_token, req_pool_indices, seq_lens, page_table,
        req_to_token.stride(0), req_to_token.stride(1), req_to_token.size(0), req_to_token.size(1),
        req_pool_indices.stride(0), seq_lens.stride(0), page_table.stride(0), page_table.stride(1), page_table.size(1),
        torch.iinfo(page_table.dtype).max, PAGE=page_size, BLOCK_P=64,
    )
