"""Random paged decode problems for tests, notebooks and benchmarks.

Each case is built the way FlashMLA's tests build theirs: pages handed out in a random
permutation, every page and token slot no request uses filled with NaN, and every unused
page-table entry set to an out-of-range id. Any read a kernel should not make shows up.
``token_slots[b]`` is the ground truth (which cache rows request ``b`` owns, in order), kept
apart from the table so a checker need not trust the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from mla_edu.kernels.workspace import get_workspace_size, num_kv_splits_for
from mla_edu.util import cdiv

POISON_IDS = (-1, -(2**20), 2**30)


@dataclass
class DecodeCase:
    q_nope: torch.Tensor  # [B, H, D_latent]
    q_pe: torch.Tensor  # [B, H, D_rope]
    cache: torch.Tensor  # [num_pages, PAGE, D_latent + D_rope]
    seq_lens: torch.Tensor  # int32 [B]
    page_table: torch.Tensor  # int32 [B, W]
    sm_scale: float
    token_slots: list = field(default_factory=list)  # per request: int64 [len] flat cache rows

    @property
    def page_size(self) -> int:
        return self.cache.size(1)

    def dense_f64(self) -> torch.Tensor:
        """The float64 answer ``out[b] = softmax(scale * q_b K_b^T) V_b`` over request b's own slots
        (``token_slots``, not the page table): ``[B, H, D_latent]``."""
        d_lat = self.q_nope.size(-1)
        rows = self.cache.reshape(-1, self.cache.size(-1)).double()
        outs = []
        for b, slots in enumerate(self.token_slots):
            q = torch.cat([self.q_nope[b], self.q_pe[b]], -1).double()  # [H, 576]
            k = rows[slots]  # [L, 576]
            outs.append(torch.softmax(q @ k.T * self.sm_scale, -1) @ k[:, :d_lat])  # [H, 512]
        return torch.stack(outs)

    def q_views(self, layout: str = "contiguous") -> tuple[torch.Tensor, torch.Tensor]:
        """(q_nope, q_pe) with this case's values, laid out as a caller may hand them: "contiguous" (as built);
        "slice", both views of one [B, H, 576] tensor (heads 576 apart); "transposed", q_nope [H, B, 512]
        transposed (requests 512 apart)."""
        if layout == "slice":
            q = torch.cat([self.q_nope, self.q_pe], dim=-1)
            return q[..., :self.q_nope.size(-1)], q[..., self.q_nope.size(-1):]
        if layout == "transposed":
            return self.q_nope.transpose(0, 1).contiguous().transpose(0, 1), self.q_pe
        if layout != "contiguous":
            raise ValueError(f"layout: expected 'contiguous', 'slice' or 'transposed', got {layout!r}")
        return self.q_nope, self.q_pe

    def workspace(self, num_kv_splits: int = -1, sm_count: int = 0) -> torch.Tensor:
        """A workspace big enough for ``num_kv_splits``, filled with 0xFF bytes (NaN as float32)."""
        b, h, d = self.q_nope.shape
        max_seq_len = self.page_size * self.page_table.size(1)
        splits = num_kv_splits_for(max_seq_len, b, sm_count, num_kv_splits)
        size = max(get_workspace_size(max_seq_len, b, sm_count, num_kv_splits), b * h * splits * (d + 1) * 4)
        return torch.full((size,), 0xFF, dtype=torch.uint8, device=self.q_nope.device)


def random_lens(gen: torch.Generator, batch: int, page_size: int, max_len: int) -> list[int]:
    """Ragged lengths mixing 1, exact page multiples and random values in [1, max_len]."""
    out = []
    for _ in range(batch):
        kind = int(torch.randint(0, 4, (1,), generator=gen))
        if kind == 0:
            out.append(1)
        elif kind == 1 and max_len >= page_size:
            out.append(page_size * int(torch.randint(1, max_len // page_size + 1, (1,), generator=gen)))
        else:
            out.append(int(torch.randint(1, max_len + 1, (1,), generator=gen)))
    return out


def random_decode_case(seed: int, batch: int = 4, heads: int = 4, page_size: int = 16, max_len: int = 100,
                       d_latent: int = 512, d_rope: int = 64, dtype=torch.float32, lens=None, extra_pages: int = 3,
                       extra_cols: int = 1, width_multiple: int = 1, device="cpu") -> DecodeCase:
    gen = torch.Generator().manual_seed(seed)
    lens = list(lens) if lens is not None else random_lens(gen, batch, page_size, max_len)
    batch = len(lens)
    n_pages_req = [math.ceil(n / page_size) for n in lens]
    num_pages = sum(n_pages_req) + extra_pages
    perm = torch.randperm(num_pages, generator=gen)
    width = max(n_pages_req) + extra_cols
    width = cdiv(width, width_multiple) * width_multiple
    d = d_latent + d_rope
    cache = torch.full((num_pages, page_size, d), float("nan"), dtype=torch.float32)
    table = torch.empty((batch, width), dtype=torch.int32)
    for b in range(batch):
        for j in range(width):
            if j >= n_pages_req[b]:
                table[b, j] = POISON_IDS[int(torch.randint(0, len(POISON_IDS), (1,), generator=gen))]
            else:
                table[b, j] = num_pages + 7
    token_slots = []
    k = 0
    for b, n in enumerate(lens):
        pages = perm[k : k + n_pages_req[b]]
        k += n_pages_req[b]
        table[b, : len(pages)] = pages.to(torch.int32)
        slots = (pages[:, None] * page_size + torch.arange(page_size)[None, :]).reshape(-1)[:n]  # [len]
        token_slots.append(slots)
        rows = cache.view(-1, d)
        rows[slots] = torch.randn(n, d, generator=gen)
    q_nope = torch.randn(batch, heads, d_latent, generator=gen)
    q_pe = torch.randn(batch, heads, d_rope, generator=gen)
    sm_scale = 1.0 / math.sqrt(128 + 64)
    return DecodeCase(
        q_nope.to(dtype).to(device), q_pe.to(dtype).to(device), cache.to(dtype).to(device),
        torch.tensor(lens, dtype=torch.int32, device=device), table.to(device), sm_scale,
        [s.to(device) for s in token_slots],
    )
