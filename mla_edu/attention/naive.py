"""MLA exactly as the paper writes it: decompress per-head keys and values, then attend.

    c_kv = RMSNorm(W_DKV h)            [T, r]        (cached)
    k_pe = RoPE(W_KR h)                [T, dr]       (cached, shared by all heads)
    k_i  = [W_UK_i c_kv ; k_pe]        [T, dn + dr]  (per head, rebuilt from the cache)
    v_i  = W_UV_i c_kv                 [T, dv]
    o_i  = softmax(q_i k_i^T / sqrt(dn + dr)) v_i,   u = W_O [o_1 .. o_H]
"""

from __future__ import annotations

import torch
from einops import einsum, rearrange

from mla_edu.attention.common import ContiguousLatentCache, MLAWeights, causal_mask, check_scale, restored_on_error


class NaiveMLA(MLAWeights):
    """Multi-head latent attention, computed the literal way (the paper's equations, no reordering)."""

    def forward(
        self, hidden: torch.Tensor, positions: torch.Tensor, cache: ContiguousLatentCache | None = None
    ) -> torch.Tensor:
        """``hidden [B, T, D]``, ``positions [B, T]`` -> ``[B, T, D]``; causal over the cache plus the new tokens."""
        if hidden.dim() != 3:
            raise ValueError(f"hidden: expected [B, T, hidden_size], got shape {list(hidden.shape)}")
        positions = self._check(hidden, positions)
        self.check_positions(positions)
        check_scale("NaiveMLA: softmax_scale", self.softmax_scale)
        q_nope, q_pe = self.query(hidden, positions)                    # [B, T, H, dn], [B, T, H, dr]
        c_kv, k_pe = self.latent_kv(hidden, positions)                  # [B, T, r], [B, T, dr]
        with restored_on_error(cache):  # an error or interrupt after the update leaves the cache as it was
            if cache is not None:
                c_kv, k_pe = cache.update(c_kv, k_pe, positions)        # [B, L, r], [B, L, dr]
            w_uk, w_uv = self.w_uk_uv()                                 # [H, dn, r], [H, dv, r]
            k_nope = einsum(c_kv, w_uk, "b l r, h d r -> b l h d")      # [B, L, H, dn]
            v = einsum(c_kv, w_uv, "b l r, h d r -> b l h d")           # [B, L, H, dv]
            scores = (einsum(q_nope, k_nope, "b t h d, b l h d -> b h t l")
                      + einsum(q_pe, k_pe, "b t h d, b l d -> b h t l")) * self.softmax_scale
            mask = causal_mask(hidden.shape[1], c_kv.shape[1], hidden.device)
            scores = scores.masked_fill(~mask, float("-inf"))
            p = torch.softmax(scores.float(), dim=-1).to(v.dtype)      # [B, H, T, L]
            o = einsum(p, v, "b h t l, b l h d -> b t h d")             # [B, T, H, dv]
            return self.o_proj(rearrange(o, "b t h d -> b t (h d)"))
