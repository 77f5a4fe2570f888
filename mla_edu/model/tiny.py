"""A tiny DeepSeek-style causal LM whose attention is mla_edu's MLA (DeepSeek-V3 layout).

Each layer: ``h += attn(attn_norm(h))`` then ``h += mlp(mlp_norm(h))`` (pre-norm, RMSNorm,
dense SwiGLU MLP, no MoE), then a final RMSNorm and ``lm_head``. The attention latent is
``kv_lora_rank + qk_rope_head_dim = 512 + 64 = 576`` numbers per token per layer: exactly
what ``cutlass_mla_decode`` reads from ``kv_c_and_k_pe_cache``.

Three ways to run it:

- ``forward(tokens, positions)``: causal over the whole sequence (training, scoring).
- ``prefill(tokens, positions)``: the same logits plus each layer's latents ``(c_kv, k_pe)``,
  for an engine to write into a paged cache.
- ``decode_step(tokens, positions, attend)``: one new token per request, with attention over the
  cache delegated to ``attend`` (see its docstring: this is the step a serving engine runs).

``generate`` is the reference greedy decoder on a contiguous ``ContiguousLatentCache``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
from torch import nn
from einops import einsum, rearrange
from torch.nn import functional as F

from mla_edu.attention import AbsorbedMLA, ContiguousLatentCache, NaiveMLA, RMSNorm, restored_on_error
from mla_edu.config import MLAConfig
from mla_edu.model import task
from mla_edu.settings import PositiveFloat, PositiveInt, check_fields
from mla_edu.util import is_int


def default_mla_config() -> MLAConfig:
    """hidden 64, 4 heads, no q compression, kv_lora_rank 512 + rope 64 (the 576-wide latent)."""
    return MLAConfig(
        hidden_size=64, num_attention_heads=4, q_lora_rank=None, kv_lora_rank=512,
        qk_nope_head_dim=16, qk_rope_head_dim=64, v_head_dim=16, rope_theta=10000.0,
        rope_scaling=None, rope_interleave=True, max_position_embeddings=task.CONTEXT_LEN,
        rms_norm_eps=1e-6, attention_bias=False, name="tiny-deepseek",
    )


@dataclass(frozen=True)
class TinyDeepseekConfig:
    """The whole model: an ``MLAConfig`` for attention plus vocabulary, depth and MLP width. Frozen, as
    ``MLAConfig`` is."""

    mla: MLAConfig = field(default_factory=default_mla_config)
    # types and bounds checked by pydantic, strict (``mla_edu.settings``), as ``MLAConfig``'s
    vocab_size: PositiveInt = task.VOCAB_SIZE
    num_hidden_layers: PositiveInt = 2
    intermediate_size: PositiveInt = 128
    rms_norm_eps: PositiveFloat = 1e-6

    def __post_init__(self) -> None:
        if isinstance(self.mla, dict):
            object.__setattr__(self, "mla", MLAConfig(**self.mla))  # frozen: set once
        if not isinstance(self.mla, MLAConfig):
            raise TypeError(f"TinyDeepseekConfig.mla must be an MLAConfig, got {type(self.mla).__name__}")
        check_fields(self)

    @property
    def hidden_size(self) -> int:
        return self.mla.hidden_size

    def to_dict(self) -> dict:
        d = asdict(self)
        d["mla"].pop("name", None)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TinyDeepseekConfig":
        return cls(**{**d, "mla": MLAConfig(**d["mla"])})


class SwiGLU(nn.Module):
    """DeepSeek's dense MLP: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def mla_sdpa(attn: AbsorbedMLA | NaiveMLA, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Causal MLA over ``hidden [B, T, D]`` in the paper's order, with PyTorch's fused attention.

    The same numbers as ``NaiveMLA.forward`` (no cache), from the same module's pieces
    (``query``, ``latent_kv``, ``w_uk_uv``, ``o_proj``); ``F.scaled_dot_product_attention``
    replaces the explicit score matrix, which makes training on CPU several times faster.
    """
    H = attn.config.num_attention_heads
    q_nope, q_pe = attn.query(hidden, positions)  # [B, T, H, dn], [B, T, H, dr]
    c_kv, k_pe = attn.latent_kv(hidden, positions)  # [B, T, r], [B, T, dr]
    w_uk, w_uv = attn.w_uk_uv()  # [H, dn, r], [H, dv, r]
    k_nope = einsum(c_kv, w_uk, "b l r, h d r -> b h l d")  # [B, H, T, dn]
    v = einsum(c_kv, w_uv, "b l r, h d r -> b h l d")  # [B, H, T, dv]
    q = rearrange(torch.cat([q_nope, q_pe], dim=-1), "b t h d -> b h t d")  # [B, H, T, dn + dr]
    k = torch.cat([k_nope, k_pe[:, None].expand(-1, H, -1, -1)], dim=-1)  # [B, H, T, dn + dr]
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=attn.softmax_scale)  # [B, H, T, dv]
    return attn.o_proj(rearrange(o, "b h t d -> b t (h d)"))


class DecoderLayer(nn.Module):
    """``h + attn(attn_norm(h))``, then ``h + mlp(mlp_norm(h))``."""

    def __init__(self, config: TinyDeepseekConfig, attn_impl: str = "absorbed"):
        super().__init__()
        self.attn_impl = attn_impl
        self.attn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = (NaiveMLA if attn_impl == "naive" else AbsorbedMLA)(config.mla)
        self.mlp_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(
        self, h: torch.Tensor, positions: torch.Tensor, cache: ContiguousLatentCache | None = None
    ) -> torch.Tensor:
        x = self.attn_norm(h)
        if self.attn_impl == "sdpa" and cache is None:
            h = h + mla_sdpa(self.attn, x, positions)
        else:
            h = h + self.attn(x, positions, cache)
        return h + self.mlp(self.mlp_norm(h))


ATTN_IMPLS = ("absorbed", "naive", "sdpa")

# attend(layer_idx, q_nope [B,H,kv_lora_rank], q_pe [B,H,rope], c_kv [B,kv_lora_rank], k_pe [B,rope])
#   -> o_latent [B,H,kv_lora_rank]
AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class TinyDeepseek(nn.Module):
    """Token embedding -> N x [RMSNorm -> MLA -> residual -> RMSNorm -> SwiGLU -> residual] -> RMSNorm -> lm_head.

    ``attn_impl``: ``"absorbed"`` (default; the serving form), ``"naive"`` (the paper's order) or
    ``"sdpa"`` (the paper's order through ``F.scaled_dot_product_attention`` for whole sequences,
    absorbed with a cache; used for training). All have the same parameter names: one state dict.
    """

    def __init__(self, config: TinyDeepseekConfig | None = None, attn_impl: str = "absorbed"):
        super().__init__()
        config = TinyDeepseekConfig() if config is None else config
        if not isinstance(config, TinyDeepseekConfig):
            raise TypeError(f"TinyDeepseek expects a TinyDeepseekConfig, got {type(config).__name__}")
        if attn_impl not in ATTN_IMPLS:
            raise ValueError(f"attn_impl must be one of {ATTN_IMPLS}, got {attn_impl!r}")
        self.config = config
        self.attn_impl = attn_impl
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, attn_impl) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    # ---- pieces an engine calls ----------------------------------------------------------
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """token ids ``[...]`` (int64) -> hidden ``[..., D]``."""
        if tokens.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"tokens must be int32/int64 ids, got dtype {tokens.dtype}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.config.vocab_size):
            raise ValueError(
                f"token ids must be in [0, {self.config.vocab_size}), got range "
                f"[{int(tokens.min())}, {int(tokens.max())}]"
            )
        return self.embed_tokens(tokens.long())

    def final_logits(self, h: torch.Tensor) -> torch.Tensor:
        """hidden ``[..., D]`` -> logits ``[..., vocab]`` (final norm, then lm_head)."""
        return self.lm_head(self.norm(h))

    def _check(self, tokens: torch.Tensor, positions: torch.Tensor | None,
               start: int | torch.Tensor = 0) -> torch.Tensor:
        """positions ``[B, T]`` (int64), checked; by default each row's go on at ``start`` (an int or ``[B]``)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
            raise ValueError(f"tokens must be [B, T], got "
                             f"{tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__}")
        if positions is None:
            steps = torch.arange(tokens.shape[1], device=tokens.device)
            positions = (start[:, None] if torch.is_tensor(start) else start) + steps.expand(tokens.shape[0], -1)
        if not isinstance(positions, torch.Tensor):
            raise TypeError(f"positions must be a tensor, got {type(positions).__name__}")
        if positions.shape != tokens.shape:
            raise ValueError(f"positions must match tokens' shape {tuple(tokens.shape)}, got {tuple(positions.shape)}")
        if positions.dtype.is_floating_point or positions.dtype == torch.bool:
            raise TypeError(f"positions must be an integer tensor, got dtype {positions.dtype}")
        self.layers[0].attn.check_positions(positions)
        return positions.long()

    def _check_caches(self, caches) -> int | torch.Tensor:
        """Where the rows of ``caches`` go on (one ``ContiguousLatentCache`` per layer, distinct, equally long):
        their ``next_positions [B]``, or the tokens they hold where no update gave positions."""
        if not isinstance(caches, (list, tuple)) or len(caches) != len(self.layers):
            raise ValueError(f"expected one cache per layer ({len(self.layers)}), got "
                             f"{len(caches) if isinstance(caches, (list, tuple)) else type(caches).__name__}")
        bad = [type(c).__name__ for c in caches if not isinstance(c, ContiguousLatentCache)]
        if bad:
            raise TypeError(f"expected ContiguousLatentCache objects, got {bad}")
        if len({id(c) for c in caches}) != len(caches):
            raise ValueError("expected a cache object per layer, got the same object for several layers "
                             "(each layer caches its own latents)")
        lens = [c.seq_len for c in caches]
        if len(set(lens)) != 1:
            raise ValueError(f"expected every layer's cache to hold the same tokens, got lengths {lens}")
        return lens[0] if caches[0].next_positions is None else caches[0].next_positions

    # ---- whole-sequence paths --------------------------------------------------------------
    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        caches: list[ContiguousLatentCache] | None = None,
    ) -> torch.Tensor:
        """tokens ``[B, T]``, positions ``[B, T]`` (default 0..T-1) -> logits ``[B, T, vocab]``.

        Causal. With ``caches`` (one ``ContiguousLatentCache`` per layer, each holding the same L tokens) the
        tokens attend to the cached ones too, and their latents are appended; positions then default to going on
        where the caches' rows end (L..L+T-1 from 0), and must. An exception or an interrupt leaves every cache as
        it was.
        """
        start = 0 if caches is None else self._check_caches(caches)
        positions = self._check(tokens, positions, start)
        h = self.embed(tokens)  # [B, T, D]
        if caches is None:
            for layer in self.layers:
                h = layer(h, positions)
            return self.final_logits(h)  # [B, T, vocab]
        with restored_on_error(*caches):  # each layer puts back its own cache; a later layer's failure, all
            for layer, cache in zip(self.layers, caches):
                h = layer(h, positions, cache)
        return self.final_logits(h)  # [B, T, vocab]

    @torch.no_grad()
    def prefill(
        self, tokens: torch.Tensor, positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Like ``forward`` (no cache), and also returns every layer's latents.

        Returns ``logits [B, T, vocab]`` and ``[(c_kv [B, T, kv_lora_rank], k_pe [B, T, rope]), ...]``
        (one pair per layer; c_kv after kv_a_layernorm, k_pe rotated): what the engine writes into
        its cache for these T tokens.
        """
        positions = self._check(tokens, positions)
        h = self.embed(tokens)  # [B, T, D]
        latents = []
        for layer in self.layers:
            x = layer.attn_norm(h)
            latents.append(layer.attn.latent_kv(x, positions))  # ([B,T,512], [B,T,64])
            h = h + (mla_sdpa(layer.attn, x, positions) if self.attn_impl == "sdpa" else layer.attn(x, positions))
            h = h + layer.mlp(layer.mlp_norm(h))
        return self.final_logits(h), latents

    # ---- the decode step --------------------------------------------------------------------
    @torch.no_grad()
    def decode_step(self, tokens: torch.Tensor, positions: torch.Tensor, attend: AttendFn) -> torch.Tensor:
        """One decode step for B requests, one new token each. Needs ``attn_impl="absorbed"``.

        tokens ``[B]`` (the last token of each request), positions ``[B]`` (its index in its
        request: the number of tokens already cached). For each layer ``i``::

            x               = layers[i].attn_norm(h)                        # [B, D]
            c_kv, k_pe      = layers[i].attn.latent_kv(x, positions)        # [B, 512], [B, 64]
            q_nope, q_pe    = layers[i].attn.absorbed_query(x, positions)   # [B, H, 512], [B, H, 64]
            o_latent        = attend(i, q_nope, q_pe, c_kv, k_pe)           # [B, H, 512]
            h               = h + layers[i].attn.output(o_latent)           # [B, D]
            h               = h + layers[i].mlp(layers[i].mlp_norm(h))

        then ``logits = final_logits(h)`` ``[B, vocab]``; greedy next token = ``argmax``.

        ``attend`` must first store ``(c_kv, k_pe)`` as this token's cache entry at ``positions``
        (so the sequence length seen by the kernel is ``positions + 1``), then return
        ``softmax(scale * (q_nope . c_kv_j + q_pe . k_pe_j)) @ c_kv_j`` over cached tokens
        ``j = 0..positions`` with ``scale = layers[i].attn.softmax_scale`` (= 1/sqrt(32 + 64)):
        exactly ``cutlass_mla_decode(q_nope, q_pe, kv_cache, seq_lens=positions+1, ...)``.
        """
        if self.attn_impl == "naive":
            raise ValueError("decode_step needs the absorbed pieces: attn_impl 'absorbed' or 'sdpa', got 'naive'")
        if not isinstance(tokens, torch.Tensor) or not isinstance(positions, torch.Tensor) or tokens.dim() != 1 \
                or positions.shape != tokens.shape:
            got = [tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in (tokens, positions)]
            raise ValueError(f"decode_step expects tokens [B] and positions [B], got {got[0]} and {got[1]}")
        if positions.dtype.is_floating_point or positions.dtype == torch.bool:
            raise TypeError(f"positions must be an integer tensor, got dtype {positions.dtype}")
        self.layers[0].attn.check_positions(positions)  # a host sync: the engine's runner has its own step
        positions = positions.long()
        h = self.embed(tokens)  # [B, D]
        for i, layer in enumerate(self.layers):
            x = layer.attn_norm(h)
            c_kv, k_pe = layer.attn.latent_kv(x, positions)  # [B, 512], [B, 64]
            q_nope, q_pe = layer.attn.absorbed_query(x, positions)  # [B, H, 512], [B, H, 64]
            o_latent = attend(i, q_nope, q_pe, c_kv, k_pe)  # [B, H, 512]
            if not isinstance(o_latent, torch.Tensor) or o_latent.shape != q_nope.shape:
                raise ValueError(f"attend (layer {i}): expected o_latent {list(q_nope.shape)} [B, H, kv_lora_rank], "
                                 f"got {list(o_latent.shape) if isinstance(o_latent, torch.Tensor) else o_latent!r}")
            h = h + layer.attn.output(o_latent)
            h = h + layer.mlp(layer.mlp_norm(h))
        return self.final_logits(h)  # [B, vocab]

    # ---- reference greedy decoding -----------------------------------------------------------
    @torch.no_grad()
    def generate(
        self, prompt_ids, max_new_tokens: int = task.MAX_NEW_TOKENS, eos_id: int | None = task.EOS
    ) -> list[int]:
        """Greedy decoding of one prompt with a contiguous ``ContiguousLatentCache`` per layer.

        Prefill the prompt, then feed back one token at a time; stops after ``eos_id`` (included
        in the result) or ``max_new_tokens``. Returns the generated ids.
        """
        given = prompt_ids if torch.is_tensor(prompt_ids) else list(prompt_ids)
        if (given.dtype.is_floating_point or given.dtype == torch.bool) if torch.is_tensor(given) \
                else not all(is_int(i) for i in given):
            got = given.dtype if torch.is_tensor(given) else sorted({type(i).__name__ for i in given if not is_int(i)})
            raise TypeError(f"prompt_ids must be integer token ids, got {got}")
        ids = torch.as_tensor(given, dtype=torch.long)
        if ids.dim() != 1 or ids.numel() == 0:
            raise ValueError(f"prompt_ids must be a non-empty 1-D sequence of ids, got shape {tuple(ids.shape)}")
        if not is_int(max_new_tokens) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        if eos_id is not None and (not is_int(eos_id) or not 0 <= eos_id < self.config.vocab_size):
            raise ValueError(f"eos_id must be None or a token id in [0, {self.config.vocab_size}), got {eos_id!r}")
        total = ids.numel() + max_new_tokens
        if total > self.config.mla.max_position_embeddings:
            raise ValueError(
                f"prompt ({ids.numel()}) + max_new_tokens ({max_new_tokens}) exceeds the context "
                f"({self.config.mla.max_position_embeddings})"
            )
        device = self.embed_tokens.weight.device
        caches = [ContiguousLatentCache() for _ in self.layers]
        tokens = ids.to(device)[None]  # [1, T]
        pos = torch.arange(tokens.shape[1], device=device)[None]  # [1, T]
        out: list[int] = []
        for _ in range(max_new_tokens):
            logits = self.forward(tokens, pos, caches)  # [1, t, vocab]
            nxt = int(logits[0, -1].argmax())
            out.append(nxt)
            if eos_id is not None and nxt == eos_id:
                break
            pos = pos[:, -1:] + 1
            tokens = torch.tensor([[nxt]], device=device)
        return out
