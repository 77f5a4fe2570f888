"""Split-KV MLA decode in plain torch ops: the algorithm of the Triton kernel, graph-capturable.

Stage 1 (the custom op ``torch.ops.mla_edu.mla_decode_torch_stage1``): for every (request,
split) attend over the split's tokens and keep the normalized partial output ``o [B, H, S, D]``
and its log-sum-exp ``lse [B, H, S]``. When S > 1 they are written INTO the workspace bytes (as
the real kernel does) and stage 2 (plain torch ops) reads them back and merges by LSE. Split
``s`` of request ``b`` covers pages ``[s * c_b, (s + 1) * c_b)`` with
``c_b = ceil(n_pages_b / S)``.

Stage 1 is one op, as a kernel is one launch: a graph (real or emulated) records one call with
its arguments, and the gathered keys inside it are transient, as a kernel's registers and
shared memory are. It works through ``ROW_CHUNK`` requests at a time, so the transient memory
is bounded whatever the batch. How many tokens a chunk gathers: on CUDA the static bound
(``ceil(max_pages / S)`` pages per split: no host sync, fixed shapes, so a CUDA graph can
capture it); on CPU, where the op's host code and the "device" are one, the most that a request
of the chunk needs, read from ``seq_lens`` at each call, as the Triton kernel's loop runs to
``seq_lens[b]``. Both give the same output (``tests/test_kernels.py``).
"""

from __future__ import annotations

import torch

from mla_edu.kernels.contract import DecodePlan, flat_table, workspace_views
from mla_edu.util import cdiv

ROW_CHUNK = 16  # requests per chunk of stage 1 (bounds its transient memory)


def stage1_partials(q_nope, q_pe, cache, seq_lens, table_flat, row0: int, sm_scale: float, row_stride: int,
                    max_pages: int, num_splits: int, checked: bool, trim: bool):
    """Stage 1 for requests ``row0 .. row0 + R`` of the batch: ``o [R, H, S, D]`` float32, ``lse [R, H, S]``.

    ``trim=False``: the static bound, with no host sync and shapes fixed by the arguments (what a
    CUDA graph needs); ``trim=True`` reads the chunk's longest split to the host first.
    """
    r, _, dl = q_nope.shape
    page, num_pages, reach = cache.size(1), cache.size(0), table_flat.numel()
    s_n, dev = num_splits, q_nope.device

    lens = seq_lens.to(torch.int64)  # [R]
    n_pages = (lens + page - 1) // page  # [R]
    too_long = n_pages > max_pages  # [R]
    n_pages = n_pages.clamp(0, max_pages)
    lens = torch.minimum(lens, n_pages * page)
    split_tokens = (n_pages + s_n - 1) // s_n * page  # [R] tokens per split, c_b * PAGE
    s_idx = torch.arange(s_n, device=dev)  # [S]
    start = s_idx[None, :] * split_tokens[:, None]  # [R, S] first token of each split
    n_tok = (torch.minimum(start + split_tokens[:, None], lens[:, None]) - start).clamp(min=0)  # [R, S]
    t_max = max(1, int(n_tok.max())) if trim else cdiv(max_pages, s_n) * page  # CPU: what this chunk needs
    t_idx = torch.arange(t_max, device=dev)  # [T]
    tok_ok = t_idx[None, None, :] < n_tok[..., None]  # [R, S, T]
    pos = start[..., None] + t_idx  # [R, S, T] token position in the request

    flat = (row0 + torch.arange(r, device=dev))[:, None, None] * row_stride + pos // page  # [R, S, T]
    flat_bad = flat >= reach
    pid = table_flat[flat.clamp(max=reach - 1)].to(torch.int64)  # [R, S, T] page id of each token
    pid_bad = (pid < 0) | (pid >= num_pages)
    page_id = torch.where(tok_ok, pid.clamp(0, num_pages - 1), 0)  # [R, S, T]
    offset = torch.where(tok_ok, pos % page, 0)  # [R, S, T]

    # indexed by (page, offset), not by a flat slot: a page-strided cache (buf[::2]) has no flat view
    kv = cache[page_id, offset].float()  # [R, S, T, 576]: transient, inside the op
    kv.masked_fill_(~tok_ok[..., None], 0.0)  # never let unused (NaN) pages or slots in
    q = torch.cat([q_nope, q_pe], dim=-1).float()  # [R, H, 576]
    scores = torch.einsum("rhd,rstd->rhst", q, kv) * sm_scale  # [R, H, S, T]
    scores = scores.masked_fill(~tok_ok[:, None], float("-inf"))
    m = scores.amax(dim=-1)  # [R, H, S]
    m_safe = torch.where(torch.isinf(m), 0.0, m)
    p = torch.exp(scores - m_safe[..., None])  # [R, H, S, T]
    l = p.sum(dim=-1)  # [R, H, S]
    o = torch.einsum("rhst,rstd->rhsd", p, kv[..., :dl]) / torch.where(l > 0, l, 1.0)[..., None]  # [R, H, S, D]
    lse = torch.where(l > 0, m_safe + torch.log(l), float("-inf"))  # [R, H, S]
    if checked:  # a request that read a table entry past the storage or an out-of-range page id: NaN
        bad = too_long | (tok_ok & (flat_bad | pid_bad)).flatten(1).any(dim=1)  # [R]
        o = torch.where(bad[:, None, None, None], float("nan"), o)
        lse = torch.where(bad[:, None, None], float("nan"), lse)
    return o, lse


@torch.library.custom_op("mla_edu::mla_decode_torch_stage1", mutates_args=("o_acc", "lse_acc", "out"))
def mla_decode_torch_stage1(q_nope: torch.Tensor, q_pe: torch.Tensor, cache: torch.Tensor, seq_lens: torch.Tensor,
                            table_flat: torch.Tensor, o_acc: torch.Tensor, lse_acc: torch.Tensor, out: torch.Tensor,
                            sm_scale: float, row_stride: int, max_pages: int, num_splits: int, checked: bool,
                            final: bool, trim: bool) -> None:
    """Stage 1 into ``out [B, H, D]`` (``final``: one split) or into the workspace views
    ``o_acc [B, H, S, D]`` and ``lse_acc [B, H, S]``; ``ROW_CHUNK`` requests at a time."""
    for r0 in range(0, q_nope.size(0), ROW_CHUNK):
        r1 = min(r0 + ROW_CHUNK, q_nope.size(0))
        o, lse = stage1_partials(q_nope[r0:r1], q_pe[r0:r1], cache, seq_lens[r0:r1], table_flat, r0, sm_scale,
                                 row_stride, max_pages, num_splits, checked, trim)
        if final:
            out[r0:r1] = o[:, :, 0]
        else:
            o_acc[r0:r1] = o
            lse_acc[r0:r1] = lse


@mla_decode_torch_stage1.register_fake
def _(q_nope, q_pe, cache, seq_lens, table_flat, o_acc, lse_acc, out, sm_scale, row_stride, max_pages, num_splits,
      checked, final, trim):
    return None


def mla_decode_torch(q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale: float, plan: DecodePlan,
                     checked: bool = False, trim: bool | None = None) -> torch.Tensor:
    """``trim``: gather only the tokens each chunk needs (None: on CPU only; False: the static bound)."""
    if trim is None:
        trim = not q_nope.is_cuda
    b, h, dl = q_nope.shape
    out = torch.empty((b, h, dl), dtype=q_nope.dtype, device=q_nope.device)
    table = flat_table(page_table, plan)
    if plan.num_splits == 1:
        dummy = out.new_empty((0,), dtype=torch.float32)
        torch.ops.mla_edu.mla_decode_torch_stage1(q_nope, q_pe, cache, seq_lens, table, dummy, dummy.clone(), out,
                                                  sm_scale, plan.row_stride, plan.max_pages, 1, checked, True, trim)
        return out
    o_acc, lse_acc = workspace_views(workspace, plan)  # [B, H, S, D], [B, H, S] in the workspace bytes
    torch.ops.mla_edu.mla_decode_torch_stage1(q_nope, q_pe, cache, seq_lens, table, o_acc, lse_acc, out, sm_scale,
                                              plan.row_stride, plan.max_pages, plan.num_splits, checked, False, trim)
    # stage 2: merge the splits by their LSE, reading back from the workspace (a NaN partial stays NaN)
    mx = lse_acc.amax(dim=-1, keepdim=True)  # [B, H, 1]
    mx = torch.where(torch.isinf(mx), 0.0, mx)
    w = torch.exp(lse_acc - mx)  # [B, H, S]
    den = w.sum(dim=-1)  # [B, H]
    out.copy_((w[..., None] * o_acc).sum(dim=2) / torch.where(den > 0, den, 1.0)[..., None])
    return out
