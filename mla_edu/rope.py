"""Rotary position embedding for MLA's decoupled ``q_pe``/``k_pe`` (with YaRN).

MLA rotates only the last ``qk_rope_head_dim`` numbers of each query head and one shared
``k_pe`` per token (DeepSeek-V2 paper, section 2.1.3). Two layouts exist in ``transformers``:

- ``interleave=True``: rotate adjacent pairs ``(x0, x1), (x2, x3), ...`` (DeepSeek's own
  checkpoints). DeepSeek's reference code and transformers' DeepseekV2 keep the rotated pairs
  interleaved; transformers' DeepseekV3 writes them de-interleaved. That is one fixed permutation
  applied to q and k alike, so every q.k is the same; we keep them interleaved.
- ``interleave=False``: rotate halves ``(x_i, x_{i+d/2})`` (``rotate_half``, Llama's layout).

YaRN (arXiv 2309.00071) changes the inverse frequencies and multiplies cos/sin by
``MLAConfig.rope_attention_factor``; its temperature on the logits lives in
``MLAConfig.softmax_scale``.
"""

from __future__ import annotations

import math

import torch

from mla_edu.config import MLAConfig
from mla_edu.device import values_readable


def inv_freq(config: MLAConfig) -> torch.Tensor:
    """Inverse frequencies ``[rope_dim // 2]`` (float32), plain or YaRN-blended."""
    dim, base = config.qk_rope_head_dim, config.rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    extrapolation = 1.0 / pos_freqs
    rs = config.rope_scaling
    if rs is None:
        return extrapolation
    factor = float(rs["factor"])
    interpolation = 1.0 / (factor * pos_freqs)
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1
    original = rs["original_max_position_embeddings"]

    def correction_dim(num_rotations: float) -> float:
        # the dimension whose wavelength fits `num_rotations` times into the original context
        return dim * math.log(original / (num_rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: high-frequency dims keep their frequency (extrapolate); 0: interpolate
    return interpolation * (1 - keep) + extrapolation * keep


def cos_sin(
    config: MLAConfig, positions: torch.Tensor, freqs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angles: two tensors ``[*positions.shape, rope_dim // 2]`` (float32).
    Positions outside ``[0, max_position_embeddings)`` are refused where their values can be read without waiting
    for a device (``check_positions``); elsewhere (a GPU, a graph capture) their cos and sin are NaN, so that the
    attention they feed is NaN, never a rotation of another position (cos(-1) is cos(1))."""
    _check_integer(positions)
    readable = values_readable(positions)
    if readable:
        check_positions(config, positions)
    freqs = inv_freq(config) if freqs is None else freqs
    angles = positions.to(torch.float32)[..., None] * freqs.to(positions.device)  # [..., rope/2]
    if not readable:  # device ops only: no host sync, graph-safe
        outside = (positions < 0) | (positions >= config.max_position_embeddings)  # [...]
        angles = angles.masked_fill(outside[..., None], float("nan"))
    a = config.rope_attention_factor
    return angles.cos() * a, angles.sin() * a


def check_positions(config: MLAConfig, positions: torch.Tensor) -> None:
    """Refuse positions outside ``[0, max_position_embeddings)`` with a ValueError. Reads their values: on a GPU a
    host sync, so a captured decode step does not call it."""
    _check_integer(positions)
    if not positions.numel():
        return
    limit = config.max_position_embeddings
    lo, hi = (int(v) for v in torch.aminmax(positions))
    if lo < 0 or hi >= limit:
        raise ValueError(f"positions: expected each in [0, {limit}) (max_position_embeddings), got [{lo}, {hi}]")


def _check_integer(positions) -> None:
    if not isinstance(positions, torch.Tensor) or positions.dtype.is_floating_point or positions.dtype == torch.bool:
        got = f"dtype {positions.dtype}" if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"positions must be an integer tensor, got {got}")


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleave: bool) -> torch.Tensor:
    """Rotate the last dim of ``x [..., rope_dim]`` by ``cos``/``sin [..., rope_dim // 2]``.

    cos and sin have one shape, with as many dims as x, each leading one x's or 1 (``[B, T, 1, dr/2]`` for
    ``q_pe [B, T, H, dr]``): the result has x's shape and dtype. Half precision is computed in float32, float64 in
    float64."""
    _check_rope_args(x, cos, sin, interleave)
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    if interleave:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    else:
        half = x.shape[-1] // 2
        x1, x2 = xf[..., :half], xf[..., half:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.to(x.dtype)


def _check_rope_args(x, cos, sin, interleave) -> None:
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"apply_rope: expected {name} a torch.Tensor, got {type(t).__name__}")
    if not isinstance(interleave, bool):
        raise TypeError(f"apply_rope: expected interleave a bool, got {interleave!r}")
    shapes = f"got x {list(x.shape)}, cos {list(cos.shape)}, sin {list(sin.shape)}"
    if cos.shape != sin.shape or cos.dim() != x.dim() or x.dim() == 0 or x.shape[-1] != 2 * cos.shape[-1] \
            or any(c not in (1, n) for c, n in zip(cos.shape[:-1], x.shape[:-1])):
        raise ValueError(f"apply_rope: expected cos and sin of one shape [..., rope_dim // 2] with x's {x.dim()} dims, "
                         f"each leading one x's or 1 (e.g. [B, T, 1, dr/2] for q_pe [B, T, H, dr]), {shapes}")
    if not (x.is_floating_point() and cos.is_floating_point()) or sin.dtype != cos.dtype \
            or not x.device == cos.device == sin.device:
        raise ValueError("apply_rope: expected a floating x, and cos and sin of one floating dtype, all on one "
                         f"device; got x {x.dtype} on {x.device}, cos {cos.dtype} on {cos.device}, "
                         f"sin {sin.dtype} on {sin.device}")
