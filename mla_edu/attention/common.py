"""What naive and absorbed MLA share: the weights (with transformers' names), the query and the latent.

Symbols (DeepSeek-V2 paper, section 2.1; DeepSeek-V3 values in brackets):
    D  hidden_size [7168]          H  num_attention_heads [128]
    r  kv_lora_rank [512]          d_c' q_lora_rank [1536, or None]
    dn qk_nope_head_dim [128]      dr qk_rope_head_dim [64]       dv v_head_dim [128]
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
from einops import rearrange
from torch import nn

from mla_edu.config import MLAConfig
from mla_edu.rope import apply_rope, check_positions, cos_sin, inv_freq


class RMSNorm(nn.Module):
    """RMSNorm computed in float32, cast back, then scaled (as transformers' DeepseekV3RMSNorm)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class ContiguousLatentCache:
    """A contiguous latent KV cache for one layer: ``c_kv [B, L, r]`` and ``k_pe [B, L, dr]``.

    This is the whole MLA cache: 576 numbers per token at DeepSeek-V3 dims. Paged serving keeps the
    same numbers in pages (``mla_edu.kvcache``).
    """

    def __init__(self) -> None:
        self.c_kv: torch.Tensor | None = None
        self.k_pe: torch.Tensor | None = None
        self.next_positions: torch.Tensor | None = None  # [B]: where each row goes on, if updates gave positions

    @property
    def seq_len(self) -> int:
        return 0 if self.c_kv is None else self.c_kv.shape[1]

    def update(self, c_kv: torch.Tensor, k_pe: torch.Tensor,
               positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[B, T, r]`` / ``[B, T, dr]``; return everything cached so far. With the tokens' ``positions
        [B, T]``, each row must count up by one and go on where the row's last update ended (the causal mask and
        RoPE's distances assume it). All is checked before anything is stored: a refused update leaves the cache as
        it was."""
        for name, t in (("c_kv", c_kv), ("k_pe", k_pe)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3:
                raise ValueError(f"ContiguousLatentCache.update: expected {name} a 3-D tensor [B, T, "
                                 f"{'r' if name == 'c_kv' else 'dr'}], got "
                                 f"{list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        if k_pe.shape[:2] != c_kv.shape[:2]:
            raise ValueError(f"ContiguousLatentCache.update: expected k_pe [{c_kv.shape[0]}, {c_kv.shape[1]}, dr] "
                             f"(c_kv's B and T), got {list(k_pe.shape)}")
        if positions is not None:
            self._check_positions(positions, c_kv)
        if self.c_kv is not None:
            for name, t, held in (("c_kv", c_kv, self.c_kv), ("k_pe", k_pe, self.k_pe)):
                if t.shape[0] != held.shape[0] or t.shape[2] != held.shape[2] or t.dtype != held.dtype \
                        or t.device != held.device:
                    raise ValueError(f"ContiguousLatentCache.update: expected {name} [{held.shape[0]}, T, "
                                     f"{held.shape[2]}] {held.dtype} on {held.device} (what the cache holds), got "
                                     f"{list(t.shape)} {t.dtype} on {t.device}")
        # all checked: now change state, in one assignment
        if positions is None:
            next_positions = None  # nothing to check the next update against
        else:
            next_positions = positions[:, -1] + 1 if positions.shape[1] else self.next_positions
        if self.c_kv is None:  # copies: a caller reusing its buffers (the static-buffer pattern) must not edit us
            c_all, k_all = c_kv.clone(), k_pe.clone()
        else:
            c_all, k_all = torch.cat((self.c_kv, c_kv), dim=1), torch.cat((self.k_pe, k_pe), dim=1)
        self.c_kv, self.k_pe, self.next_positions = c_all, k_all, next_positions
        return self.c_kv, self.k_pe

    def snapshot(self) -> dict:
        """The cache's state, for :meth:`restore` (``update`` makes new tensors, so these stay intact)."""
        return dict(vars(self))

    def restore(self, state: dict) -> None:
        """Put back a :meth:`snapshot`: the tokens appended since are forgotten."""
        vars(self).update(state)

    def _check_positions(self, positions: torch.Tensor, c_kv: torch.Tensor) -> None:
        if not isinstance(positions, torch.Tensor) or tuple(positions.shape) != tuple(c_kv.shape[:2]):
            got = list(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
            raise ValueError(f"ContiguousLatentCache.update: expected positions [{c_kv.shape[0]}, {c_kv.shape[1]}] "
                             f"(c_kv's B and T), got {got}")
        if positions.shape[1] > 1 and not bool((positions[:, 1:] == positions[:, :-1] + 1).all()):
            raise ValueError("ContiguousLatentCache.update: expected each row's positions to count up by one (the "
                             f"cache appends tokens in order), got rows {positions[:4].tolist()}")
        if self.next_positions is not None and positions.shape[1] \
                and not bool((positions[:, 0] == self.next_positions).all()):
            raise ValueError(f"ContiguousLatentCache.update: expected the rows to go on at positions "
                             f"{self.next_positions.tolist()} (after the {self.seq_len} tokens cached), got "
                             f"{positions[:, 0].tolist()}")


@contextmanager
def restored_on_error(*caches: ContiguousLatentCache | None):
    """A block that an exception or an interrupt (KeyboardInterrupt) leaves with each of ``caches`` as it was before
    it (None: nothing to keep): a layer's step, or a model's pass over its layers, that fails after
    ``cache.update`` can be run again."""
    held = [(c, c.snapshot()) for c in caches if c is not None]
    try:
        yield
    except BaseException:
        for cache, state in held:
            cache.restore(state)
        raise


class MLAWeights(nn.Module):
    """The parameters of one MLA layer, named as transformers names them, and the shared first steps."""

    def __init__(self, config: MLAConfig):
        super().__init__()
        if not isinstance(config, MLAConfig):
            raise TypeError(f"expected an MLAConfig, got {type(config).__name__}")
        self.config = c = config
        H = c.num_attention_heads
        if c.q_lora_rank is None:
            self.q_proj = nn.Linear(c.hidden_size, H * c.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(c.hidden_size, c.q_lora_rank, bias=c.attention_bias)
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, c.rms_norm_eps)
            self.q_b_proj = nn.Linear(c.q_lora_rank, H * c.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(c.hidden_size, c.kv_cache_dim, bias=c.attention_bias)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, c.rms_norm_eps)
        self.kv_b_proj = nn.Linear(c.kv_lora_rank, H * (c.qk_nope_head_dim + c.v_head_dim), bias=False)
        self.o_proj = nn.Linear(H * c.v_head_dim, c.hidden_size, bias=c.attention_bias)
        self.register_buffer("inv_freq", inv_freq(c), persistent=False)
        self.softmax_scale = c.softmax_scale

    # ---- loading --------------------------------------------------------------------------
    @classmethod
    def from_hf(cls, module: nn.Module):
        """Build from a transformers ``DeepseekV3Attention``/``DeepseekV2Attention`` (same weights)."""
        if not hasattr(module, "config") or not hasattr(module, "kv_b_proj"):
            raise TypeError("from_hf expects a transformers DeepseekV2/V3 attention module, "
                            f"got {type(module).__name__}")
        config = MLAConfig.from_hf(module.config)
        # transformers builds q_a_layernorm and kv_a_layernorm with eps 1e-6 whatever config.rms_norm_eps says,
        # SGLang with config.rms_norm_eps (docs/sources.md); DeepSeek's checkpoints say 1e-6, where both agree. The
        # layer built here computes what this module computes: its norms' own eps.
        norms = [m for m in (module.kv_a_layernorm, getattr(module, "q_a_layernorm", None)) if m is not None]
        eps = {float(m.variance_epsilon) for m in norms}
        if len(eps) != 1:
            raise ValueError(f"from_hf: expected one eps in the module's latent norms, got {sorted(eps)}")
        config = config.replace(rms_norm_eps=eps.pop())
        ref = next(module.parameters())
        layer = cls(config).to(device=ref.device, dtype=ref.dtype)
        layer.load_hf_state_dict(module.state_dict())
        return layer

    def load_hf_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load transformers' attention weights; missing, extra, mis-shaped or non-finite entries raise ValueError."""
        own = self.state_dict()
        missing = sorted(set(own) - set(state_dict))
        extra = sorted(set(state_dict) - set(own))
        if missing or extra:
            raise ValueError(f"state dict does not fit this MLAConfig: missing {missing}, unexpected {extra}")
        for name, tensor in state_dict.items():
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"state dict entry {name!r}: expected a tensor, got {type(tensor).__name__}")
            if tuple(tensor.shape) != tuple(own[name].shape):
                raise ValueError(f"state dict entry {name!r}: expected shape {tuple(own[name].shape)}, "
                                 f"got {tuple(tensor.shape)}")
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise ValueError(f"state dict entry {name!r}: expected finite weights, got NaN or inf")
        self.load_state_dict(state_dict)

    # ---- input checks ---------------------------------------------------------------------
    def _check(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        c = self.config
        if not isinstance(hidden, torch.Tensor) or not isinstance(positions, torch.Tensor):
            raise TypeError("hidden and positions must be tensors, "
                            f"got {type(hidden).__name__}, {type(positions).__name__}")
        if hidden.shape[-1] != c.hidden_size:
            raise ValueError(f"hidden: expected last dim hidden_size={c.hidden_size}, got shape {list(hidden.shape)}")
        w = self.kv_a_proj_with_mqa.weight
        if hidden.dtype != w.dtype:
            raise TypeError(f"hidden has dtype {hidden.dtype} but the weights are {w.dtype}")
        if positions.dtype.is_floating_point or positions.dtype == torch.bool:
            raise TypeError(f"positions must be an integer tensor, got {positions.dtype}")
        if positions.shape != hidden.shape[:-1]:
            if positions.dim() == 1 and positions.shape[0] == hidden.shape[-2]:
                positions = positions.expand(hidden.shape[:-1])
            else:
                raise ValueError(f"positions: expected shape {list(hidden.shape[:-1])} (or [T]), "
                                 f"got {list(positions.shape)}")
        return positions

    def check_positions(self, positions: torch.Tensor) -> None:
        """Refuse positions outside ``[0, max_position_embeddings)`` (``rope.check_positions``). A host sync: for
        the whole-sequence paths, not for a captured decode step."""
        check_positions(self.config, positions)

    # ---- the shared first steps -------------------------------------------------------------
    def query(self, hidden: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head ``q_nope [..., H, dn]`` and rotated ``q_pe [..., H, dr]``."""
        c = self.config
        positions = self._check(hidden, positions)
        if c.q_lora_rank is None:
            q = self.q_proj(hidden)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden)))  # c_q = W_DQ h, q = W_UQ c_q
        q = rearrange(q, "... (h d) -> ... h d", h=c.num_attention_heads)  # [..., H, dn + dr]
        q_nope, q_pe = q.split([c.qk_nope_head_dim, c.qk_rope_head_dim], dim=-1)
        cos, sin = cos_sin(c, positions, self.inv_freq)  # [..., dr/2]
        q_pe = apply_rope(q_pe, cos[..., None, :], sin[..., None, :], c.rope_interleave)
        return q_nope, q_pe

    def latent_kv(self, hidden: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What MLA caches per token: ``c_kv [..., r]`` (normalised) and the shared rotated ``k_pe [..., dr]``."""
        c = self.config
        positions = self._check(hidden, positions)
        c_kv, k_pe = self.kv_a_proj_with_mqa(hidden).split([c.kv_lora_rank, c.qk_rope_head_dim], dim=-1)
        c_kv = self.kv_a_layernorm(c_kv)
        cos, sin = cos_sin(c, positions, self.inv_freq)
        return c_kv, apply_rope(k_pe, cos, sin, c.rope_interleave)

    def w_uk_uv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``kv_b_proj`` split per head: ``W_UK [H, dn, r]`` and ``W_UV [H, dv, r]``: views of ``kv_b_proj.weight``
        (an in-place edit of either edits the layer's weights)."""
        c = self.config
        w = rearrange(self.kv_b_proj.weight, "(h d) r -> h d r", h=c.num_attention_heads)
        return w.split([c.qk_nope_head_dim, c.v_head_dim], dim=1)


def check_scale(name: str, scale) -> None:
    """Refuse a softmax scale that is not a positive finite number (0 makes attention uniform, < 0 inverts it)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {scale!r}")


def causal_mask(t_new: int, t_total: int, device: torch.device) -> torch.Tensor:
    """``[t_new, t_total]`` bool: new token i (at index t_total - t_new + i) sees keys 0..its own index."""
    q_idx = torch.arange(t_total - t_new, t_total, device=device)[:, None]
    return torch.arange(t_total, device=device)[None, :] <= q_idx
