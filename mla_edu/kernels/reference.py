"""Ground truth: float32, one request at a time, pages gathered through the table, dense softmax.

Not graph-safe (it reads lengths and page ids on the host); use it to check the others.
"""

from __future__ import annotations

import math

import torch

from mla_edu.kernels.contract import DecodePlan, flat_table


def mla_decode_reference(q_nope, q_pe, cache, seq_lens, page_table, sm_scale: float, plan: DecodePlan,
                         checked: bool = False) -> torch.Tensor:
    b, h, dl = q_nope.shape
    page = plan.page_size
    table = flat_table(page_table, plan).tolist()
    lens = seq_lens.tolist()
    q = torch.cat([q_nope, q_pe], dim=-1).float()  # [B, H, 576]
    rows = cache.reshape(-1, cache.size(-1))  # [num_slots, 576]
    out = torch.zeros((b, h, dl), dtype=torch.float32, device=q_nope.device)
    for i in range(b):
        length = lens[i]
        n_pages = math.ceil(length / page) if length > 0 else 0
        bad = n_pages > plan.max_pages
        n_pages = min(n_pages, plan.max_pages)
        length = min(length, n_pages * page)
        if length <= 0:
            continue
        pages = []
        for j in range(n_pages):
            flat = i * plan.row_stride + j
            if flat >= plan.table_reach:
                bad = True
                flat = plan.table_reach - 1
            pid = table[flat]
            if not 0 <= pid < plan.num_pages:
                bad = True
                pid = min(max(pid, 0), plan.num_pages - 1)
            pages.append(pid)
        if bad and checked:
            out[i] = float("nan")
            continue
        slots = (torch.tensor(pages, device=rows.device)[:, None] * page
                 + torch.arange(page, device=rows.device)[None, :]).reshape(-1)[:length]  # [L]
        kv = rows[slots].float()  # [L, 576]
        scores = q[i] @ kv.T * sm_scale  # [H, L]
        out[i] = torch.softmax(scores, dim=-1) @ kv[:, :dl]  # [H, 512]
    return out
