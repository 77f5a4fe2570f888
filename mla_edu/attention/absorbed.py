"""MLA with the up-projections absorbed: attention runs in the 512-wide latent space.

    q_i . k_i = (W_UK_i^T q_nope_i) . c_kv + q_pe_i . k_pe      (W_UK folds into the query)
    o_i       = W_UV_i (sum_l p_il c_kv_l)                       (W_UV folds into the output)

Decode becomes multi-query attention over the latent cache: key dim r + dr (576), value dim r
(512, the first r numbers of each key). The softmax scale is unchanged: 1/sqrt(dn + dr).
"""

from __future__ import annotations

import torch
from einops import einsum, rearrange

from mla_edu.attention.common import ContiguousLatentCache, MLAWeights, causal_mask, check_scale, restored_on_error
from mla_edu.device import values_readable


def latent_attention(q_nope: torch.Tensor, q_pe: torch.Tensor, c_kv: torch.Tensor, k_pe: torch.Tensor,
                     scale: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """MQA over the latent cache: ``q_nope [B,T,H,r]``, ``q_pe [B,T,H,dr]``, ``c_kv [B,L,r]``, ``k_pe [B,L,dr]``
    -> ``o_latent [B,T,H,r]``. ``mask [T, L]`` (True = attend) or None. Shapes that disagree (which einsum would
    broadcast: a cache of batch 1 against queries of batch 4), an empty cache (L = 0), dtypes or devices that differ
    and a scale that is not a positive finite number are refused with a ValueError (a TypeError for an argument that
    is not a tensor), and so is a mask row of all False where the mask's values can be read without waiting for a
    device (``device.values_readable``)."""
    _check_args(q_nope, q_pe, c_kv, k_pe, scale, mask)
    scores = (einsum(q_nope, c_kv, "b t h r, b l r -> b h t l")
              + einsum(q_pe, k_pe, "b t h d, b l d -> b h t l")) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores.float(), dim=-1).to(c_kv.dtype)
    return einsum(p, c_kv, "b h t l, b l r -> b t h r")


def _check_args(q_nope, q_pe, c_kv, k_pe, scale, mask) -> None:
    got = {n: t for n, t in (("q_nope", q_nope), ("q_pe", q_pe), ("c_kv", c_kv), ("k_pe", k_pe))}
    for name, t in got.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"latent_attention: {name} must be a torch.Tensor, got {type(t).__name__}")
    if q_nope.dim() != 4 or q_pe.dim() != 4 or c_kv.dim() != 3 or k_pe.dim() != 3:
        raise ValueError("latent_attention: expected q_nope [B, T, H, r], q_pe [B, T, H, dr], c_kv [B, L, r], "
                         f"k_pe [B, L, dr], got {', '.join(f'{n} {list(t.shape)}' for n, t in got.items())}")
    B, T, H, r = q_nope.shape
    L, dr = c_kv.shape[1], k_pe.shape[2]
    want = {"q_pe": (B, T, H, dr), "c_kv": (B, L, r), "k_pe": (B, L, dr)}
    for name, shape in want.items():
        if tuple(got[name].shape) != shape:
            raise ValueError(f"latent_attention: expected {name} {list(shape)} (from q_nope {list(q_nope.shape)}, "
                             f"c_kv's L and k_pe's dr), got {list(got[name].shape)}")
    if L == 0:
        raise ValueError(f"latent_attention: expected at least one cached token (c_kv [B, L >= 1, r]: a softmax over "
                         f"no keys has no answer), got c_kv {list(c_kv.shape)}")
    if len({(t.dtype, t.device) for t in got.values()}) != 1 or not c_kv.is_floating_point():
        raise ValueError("latent_attention: expected q_nope, q_pe, c_kv and k_pe of one floating dtype on one device, "
                         f"got {', '.join(f'{n} {t.dtype} on {t.device}' for n, t in got.items())}")
    check_scale("latent_attention: scale", scale)
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool
                             or tuple(mask.shape) != (T, L) or mask.device != c_kv.device):
        got_mask = f"{list(mask.shape)} {mask.dtype} on {mask.device}" if isinstance(mask, torch.Tensor) else repr(mask)
        raise ValueError(f"latent_attention: expected mask a bool tensor [{T}, {L}] on {c_kv.device} or None, "
                         f"got {got_mask}")
    if mask is not None and values_readable(mask) and not bool(mask.any(dim=1).all()):
        rows = (~mask.any(dim=1)).nonzero().flatten().tolist()
        raise ValueError(f"latent_attention: expected every query row of mask to attend to at least one key (a "
                         f"softmax over no keys is NaN), got rows {rows[:8]}{' ...' if len(rows) > 8 else ''} "
                         f"all False in mask [{T}, {L}]")


class AbsorbedMLA(MLAWeights):
    """Multi-head latent attention with W_UK and W_UV absorbed (the order decode kernels use).

    The pieces a serving engine calls per decode step, in order:
    ``latent_kv`` (write to the cache) -> ``absorbed_query`` -> attention over the cache
    (``mla_edu.kernels.mla_decode``) -> ``output``.
    """

    def absorbed_query(self, hidden: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``q_nope [..., H, r]`` (W_UK folded in) and rotated ``q_pe [..., H, dr]``."""
        q_nope, q_pe = self.query(hidden, positions)                    # [..., H, dn], [..., H, dr]
        w_uk, _ = self.w_uk_uv()                                        # [H, dn, r]
        return einsum(q_nope, w_uk, "... h d, h d r -> ... h r"), q_pe

    def output(self, o_latent: torch.Tensor) -> torch.Tensor:
        """``o_latent [..., H, r]`` -> ``[..., D]``: apply W_UV per head, then o_proj."""
        c, w = self.config, self.kv_b_proj.weight
        if not isinstance(o_latent, torch.Tensor):
            raise TypeError(f"o_latent: expected a torch.Tensor, got {type(o_latent).__name__}")
        if o_latent.shape[-2:] != (c.num_attention_heads, c.kv_lora_rank) or o_latent.dtype != w.dtype \
                or o_latent.device != w.device:
            raise ValueError(f"o_latent: expected [..., {c.num_attention_heads}, {c.kv_lora_rank}] {w.dtype} on "
                             f"{w.device} (the layer's weights), got {list(o_latent.shape)} {o_latent.dtype} on "
                             f"{o_latent.device}")
        _, w_uv = self.w_uk_uv()                                        # [H, dv, r]
        o = einsum(o_latent, w_uv, "... h r, h d r -> ... h d")         # [..., H, dv]
        return self.o_proj(rearrange(o, "... h d -> ... (h d)"))

    def forward(
        self, hidden: torch.Tensor, positions: torch.Tensor, cache: ContiguousLatentCache | None = None
    ) -> torch.Tensor:
        """``hidden [B, T, D]``, ``positions [B, T]`` -> ``[B, T, D]``; causal over the cache plus the new tokens."""
        if hidden.dim() != 3:
            raise ValueError(f"hidden: expected [B, T, hidden_size], got shape {list(hidden.shape)}")
        positions = self._check(hidden, positions)
        self.check_positions(positions)
        q_nope, q_pe = self.absorbed_query(hidden, positions)           # [B, T, H, r], [B, T, H, dr]
        c_kv, k_pe = self.latent_kv(hidden, positions)                  # [B, T, r], [B, T, dr]
        with restored_on_error(cache):  # an error or interrupt after the update leaves the cache as it was
            if cache is not None:
                c_kv, k_pe = cache.update(c_kv, k_pe, positions)        # [B, L, r], [B, L, dr]
            mask = causal_mask(hidden.shape[1], c_kv.shape[1], hidden.device)
            o_latent = latent_attention(q_nope, q_pe, c_kv, k_pe, self.softmax_scale, mask)  # [B, T, H, r]
            return self.output(o_latent)
