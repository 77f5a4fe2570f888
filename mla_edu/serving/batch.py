"""The decode batch handed to the model and the attention backend (SGLang's ``ForwardBatch``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mla_edu.util import is_int


@dataclass
class ForwardBatch:
    """One decode step: one new token per running request (row).

    ``seq_lens`` counts the new token (its latent is written before attention), so the
    token's position is ``seq_lens - 1``; ``out_cache_loc`` is its slot in the paged cache
    (``page * PAGE + offset``).
    """

    batch_size: int
    input_ids: torch.Tensor  # [B] int64
    positions: torch.Tensor  # [B] int64
    req_pool_indices: torch.Tensor  # [B] int32
    seq_lens: torch.Tensor  # [B] int32
    out_cache_loc: torch.Tensor  # [B] int64
    seq_lens_cpu: torch.Tensor | None = None  # [B] int32, host copy

    def __post_init__(self):
        bs = self.batch_size
        if not is_int(bs) or bs < 0:
            kind = ValueError if is_int(bs) else TypeError
            raise kind(f"ForwardBatch.batch_size: expected an int >= 0, got {bs!r}")
        for name in ("input_ids", "positions", "req_pool_indices", "seq_lens", "out_cache_loc", "seq_lens_cpu"):
            t = getattr(self, name)
            if t is None and name == "seq_lens_cpu":
                continue
            if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype.is_complex \
                    or t.dtype == torch.bool:
                got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
                raise TypeError(f"ForwardBatch.{name}: expected an integer tensor, got {got}")
            # one entry per row: a graph replay copies each field into its buffers, where a shorter one broadcasts
            if tuple(t.shape) != (bs,):
                raise ValueError(f"ForwardBatch.{name}: expected shape ({bs},) (batch_size={bs}), "
                                 f"got {tuple(t.shape)}")
