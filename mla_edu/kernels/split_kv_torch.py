"""Split-KV MLA decode in plain torch ops: the algorithm of the Triton kernel, graph-capturable.

Stage 1: for every (request, split) attend over the split's pages and keep the normalized
partial output ``o [B, H, S, D]`` and its log-sum-exp ``lse [B, H, S]``. When S > 1 they are
written INTO the workspace bytes (as the real kernel does) and stage 2 reads them back and
merges by LSE. Split ``s`` of request ``b`` covers pages ``[s * c_b, (s + 1) * c_b)`` with
``c_b = ceil(n_pages_b / S)``: lengths come from device tensors, all shapes from the plan,
so there is no host sync and no data-dependent shape.
"""

from __future__ import annotations

import torch

from mla_edu.kernels.contract import DecodePlan, flat_table, workspace_views
from mla_edu.util import cdiv


def mla_decode_torch(q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale: float, plan: DecodePlan,
                     checked: bool = False) -> torch.Tensor:
    b, h, dl = q_nope.shape
    page, s_n = plan.page_size, plan.num_splits
    dev = q_nope.device
    cpp = cdiv(plan.max_pages, s_n)  # static pages per split

    lens = seq_lens.to(torch.int64)  # [B]
    n_pages = (lens + page - 1) // page  # [B]
    too_long = n_pages > plan.max_pages  # [B]
    n_pages = n_pages.clamp(max=plan.max_pages)
    lens = torch.minimum(lens, n_pages * page)
    per_split = (n_pages + s_n - 1) // s_n  # [B] pages per split, c_b

    s_idx = torch.arange(s_n, device=dev)  # [S]
    c_idx = torch.arange(cpp, device=dev)  # [C]
    j = s_idx[None, :, None] * per_split[:, None, None] + c_idx[None, None, :]  # [B, S, C] page index in request
    page_used = (c_idx[None, None, :] < per_split[:, None, None]) & (j < n_pages[:, None, None])  # [B, S, C]

    flat = torch.arange(b, device=dev)[:, None, None] * plan.row_stride + j  # [B, S, C]
    flat_bad = flat >= plan.table_reach
    table = flat_table(page_table, plan)
    pid = table[flat.clamp(max=plan.table_reach - 1)].to(torch.int64)  # [B, S, C]
    pid_bad = (pid < 0) | (pid >= plan.num_pages)
    pid = torch.where(page_used, pid.clamp(0, plan.num_pages - 1), 0)

    kv = cache[pid.reshape(-1)].view(b, s_n, cpp * page, -1).float()  # [B, S, C*PAGE, 576] (a fresh gather)
    pos = j[..., None] * page + torch.arange(page, device=dev)  # [B, S, C, PAGE] token position
    tok_ok = (page_used[..., None] & (pos < lens[:, None, None, None])).view(b, s_n, cpp * page)  # [B, S, T]
    kv.masked_fill_(~tok_ok[..., None], 0.0)  # never let unused (NaN) pages or slots in

    q = torch.cat([q_nope, q_pe], dim=-1).float()  # [B, H, 576]
    scores = torch.einsum("bhd,bstd->bhst", q, kv) * sm_scale  # [B, H, S, T]
    scores = scores.masked_fill(~tok_ok[:, None], float("-inf"))
    m = scores.amax(dim=-1)  # [B, H, S]
    m_safe = torch.where(torch.isinf(m), 0.0, m)
    p = torch.exp(scores - m_safe[..., None])  # [B, H, S, T]
    l = p.sum(dim=-1)  # [B, H, S]
    o = torch.einsum("bhst,bstd->bhsd", p, kv[..., :dl])  # [B, H, S, 512]
    o = o / torch.where(l > 0, l, 1.0)[..., None]
    lse = torch.where(l > 0, m_safe + torch.log(l), float("-inf"))  # [B, H, S]

    if s_n == 1:
        out = o[:, :, 0]  # [B, H, 512]
    else:
        o_acc, lse_acc = workspace_views(workspace, plan)
        o_acc.copy_(o)
        lse_acc.copy_(lse)
        # stage 2: merge the splits by their LSE, reading back from the workspace
        lse_r = lse_acc  # [B, H, S]
        mx = lse_r.amax(dim=-1, keepdim=True)
        mx = torch.where(torch.isinf(mx), 0.0, mx)
        w = torch.exp(lse_r - mx)  # [B, H, S]
        den = w.sum(dim=-1)  # [B, H]
        out = torch.einsum("bhs,bhsd->bhd", w, o_acc) / torch.where(den > 0, den, 1.0)[..., None]

    if checked:
        bad = too_long | (page_used & (flat_bad | pid_bad)).flatten(1).any(dim=1)  # [B]
        out = torch.where(bad[:, None, None], float("nan"), out)
    return out.to(q_nope.dtype)
