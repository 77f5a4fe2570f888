"""FLOPs and bytes of one attention layer, for both computation orders.

Counted per layer; a multiply-add is 2 FLOPs. Projections both orders share (q, kv_a, o_proj)
are left out, so the numbers isolate what the order changes. Bytes are the fewest a kernel must
move through memory: the latent cache read once, the weights it needs read once.

decode (one new token per request, L cached tokens, H heads):
    naive     rebuild k_nope and v for every cached token, then attend per head
              2*L*r*H*(dn+dv)  +  2*L*H*(dn+dr)  +  2*L*H*dv
    absorbed  fold W_UK into q, attend over the latent (key r+dr, value r), apply W_UV
              2*H*dn*r  +  2*L*H*(r+dr)  +  2*L*H*r  +  2*H*r*dv
prefill (T new tokens, causal, no cache before):
    naive     2*T*r*H*(dn+dv)  +  causal attention on (dn+dr, dv) heads
    absorbed  2*T*H*dn*r  +  causal attention on (r+dr, r) heads  +  2*T*H*r*dv
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral

from mla_edu.config import MLAConfig
from mla_edu.util import is_int

ORDERS = ("naive", "absorbed")


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOP per byte."""
        return self.flops / self.bytes


def _check(config: MLAConfig, dtype_bytes: int = 2, order: str = "absorbed", lengths=(1,)) -> list[int]:
    """The checks every function here makes; returns ``lengths`` as a list of Python ints (one int, a numpy int or a
    numpy array of them is fine)."""
    if not isinstance(config, MLAConfig):
        raise TypeError(f"config: expected an MLAConfig, got {type(config).__name__}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if not is_int(dtype_bytes) or dtype_bytes not in (1, 2, 4):
        raise ValueError(f"dtype_bytes must be the int 1, 2 or 4, got {dtype_bytes!r}")
    many = isinstance(lengths, Iterable) and not isinstance(lengths, str) and getattr(lengths, "ndim", 1) != 0
    lens = list(lengths) if many else [lengths]
    if not lens or any(not isinstance(n, Integral) or isinstance(n, bool) or n < 1 for n in lens):
        raise ValueError(f"context lengths must be a non-empty list of ints >= 1, got {lengths!r}")
    return [int(n) for n in lens]  # Python ints: numpy's int64 would overflow silently in the FLOP counts


def decode_cost(config: MLAConfig, context_lens: list[int] | int, order: str, dtype_bytes: int = 2) -> Cost:
    """One decode step of a batch: one new token per request, ``context_lens[b]`` tokens attended (incl. itself)."""
    lens = _check(config, dtype_bytes, order, context_lens)
    c = config
    H, r, dn, dr, dv = c.num_attention_heads, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
    B, L = len(lens), sum(lens)
    w_ukv = r * H * (dn + dv)                                    # kv_b_proj's numbers
    cache_bytes = L * (r + dr) * dtype_bytes
    if order == "naive":
        flops = 2 * L * r * H * (dn + dv) + 2 * L * H * (dn + dr) + 2 * L * H * dv
        io = B * H * (dn + dr) + B * H * dv                     # q in, o out
    else:
        flops = 2 * B * H * dn * r + 2 * L * H * (r + dr) + 2 * L * H * r + 2 * B * H * r * dv
        io = B * H * (dn + dr) + B * H * dv
    return Cost(flops=float(flops), bytes=float(cache_bytes + (w_ukv + io) * dtype_bytes))


def attention_core_cost(config: MLAConfig, context_lens: list[int] | int, dtype_bytes: int = 2) -> Cost:
    """The absorbed decode kernel alone (what ``mla_decode`` does): scores over 576, values over 512.

    FLOPs ``2 * sum(L) * H * (r + dr + r)``; bytes ``(r + dr) * sum(L)`` of cache plus q in and o out.
    """
    lens = _check(config, dtype_bytes, "absorbed", context_lens)
    c = config
    H, r, dr = c.num_attention_heads, c.kv_lora_rank, c.qk_rope_head_dim
    B, L = len(lens), sum(lens)
    flops = 2 * L * H * (r + dr + r)
    nbytes = (L * (r + dr) + B * H * (r + dr) + B * H * r) * dtype_bytes
    return Cost(flops=float(flops), bytes=float(nbytes))


#: The decode shape the notebooks and the H200 bench quote an intensity at: 64 requests of 4096 tokens.
QUOTED_BATCH, QUOTED_LEN = 64, 4096


def decode_intensity(config: MLAConfig, context_lens: list[int] | int | None = None, dtype_bytes: int = 2) -> float:
    """FLOP per byte of the absorbed decode kernel (:func:`attention_core_cost`): the one number notebooks 02
    and 04 print and quote. Default ``context_lens``: ``QUOTED_BATCH`` requests of ``QUOTED_LEN`` tokens.

    At DeepSeek-V3's dims it is 228 at 128 heads and 30 at 16 (rounded to integers, as the prose quotes it). It is
    below :func:`cached_byte_intensity` (242 and 30.2) because q in and o out are bytes too, and it was often
    rounded further to "about 2 n_h" (256 and 32), which takes (2 r + d_r) / (r + d_r) = 1088 / 576 for 2.
    """
    lens = [QUOTED_LEN] * QUOTED_BATCH if context_lens is None else context_lens
    return attention_core_cost(config, lens, dtype_bytes).intensity


def cached_byte_intensity(config: MLAConfig) -> float:
    """The limit of :func:`decode_intensity` for long contexts: FLOPs per byte of cache read,
    ``n_h (2 r + d_r) / (r + d_r)`` (each cached row of ``r + d_r`` numbers is used by every head, for a score
    over ``r + d_r`` and a value over ``r``), in bf16: 2 FLOPs a multiply-add, 2 bytes a number."""
    _check(config)
    c = config
    r, dr = c.kv_lora_rank, c.qk_rope_head_dim
    return c.num_attention_heads * (2 * r + dr) / (r + dr)


def prefill_cost(config: MLAConfig, num_tokens: int, order: str, dtype_bytes: int = 2) -> Cost:
    """Prefill of ``num_tokens`` tokens with causal attention and an empty cache."""
    (T,) = _check(config, dtype_bytes, order, [num_tokens])
    c = config
    H, r, dn, dr, dv = c.num_attention_heads, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
    pairs = T * (T + 1) // 2                                    # (query, key) pairs under the causal mask
    w_ukv = r * H * (dn + dv)
    if order == "naive":
        flops = 2 * T * r * H * (dn + dv) + 2 * pairs * H * (dn + dr) + 2 * pairs * H * dv
    else:
        flops = 2 * T * H * dn * r + 2 * pairs * H * (r + dr) + 2 * pairs * H * r + 2 * T * H * r * dv
    nbytes = (T * (r + dr) + w_ukv + T * H * (dn + dr + dv)) * dtype_bytes
    return Cost(flops=float(flops), bytes=float(nbytes))


def kv_cache_layout(config: MLAConfig) -> dict[str, tuple[int, int, int]]:
    """``scheme -> (kv_heads, key_width, value_width)``: what MHA, GQA-8, MQA and MLA cache per token and layer.

    MHA caches every head's full key (``qk_nope_head_dim + qk_rope_head_dim`` = 192 wide at DeepSeek dims,
    RoPE part included) and value. GQA-8 and MQA are the usual 128-wide heads (``v_head_dim``) for keys
    and values, with 8 and 1 KV heads. MLA caches one row ``[c_kv; k_pe]`` shared by every head, whose
    first ``kv_lora_rank`` numbers are also the value (value width 0: nothing more is stored).
    """
    _check(config)
    c = config
    d = c.v_head_dim
    return {
        "MHA": (c.num_attention_heads, c.qk_head_dim, c.v_head_dim),
        "GQA-8": (8, d, d),
        "MQA": (1, d, d),
        "MLA": (1, c.kv_cache_dim, 0),
    }


def kv_cache_bytes_per_token(config: MLAConfig, dtype_bytes: int = 2) -> dict[str, int]:
    """Bytes cached per token per layer for each scheme of :func:`kv_cache_layout`."""
    _check(config, dtype_bytes)
    return {scheme: heads * (k + v) * dtype_bytes for scheme, (heads, k, v) in kv_cache_layout(config).items()}
