"""Small random models and prompts shared by the serving, diagnosis and panel tests."""

from __future__ import annotations

import random

import torch

from mla_edu.config import MLAConfig
from mla_edu.model.tiny import TinyDeepseek, TinyDeepseekConfig

VOCAB = 40


def random_tiny_model(qk_rope_head_dim: int = 16, seed: int = 0) -> TinyDeepseek:
    """A 2-layer model with weights scaled up, so attention output depends on what it reads.

    rope 16 and latent 32 are the smallest dims Triton's ``tl.dot`` takes on a GPU (K >= 16).
    """
    torch.manual_seed(seed)
    mla = MLAConfig(hidden_size=32, num_attention_heads=2, q_lora_rank=None, kv_lora_rank=32,
                    qk_nope_head_dim=8, qk_rope_head_dim=qk_rope_head_dim, v_head_dim=8, rope_theta=10000.0,
                    rope_scaling=None, rope_interleave=True, max_position_embeddings=512,
                    rms_norm_eps=1e-6, attention_bias=False)
    m = TinyDeepseek(TinyDeepseekConfig(mla=mla, vocab_size=VOCAB, num_hidden_layers=2, intermediate_size=64))
    for p in m.parameters():
        p.data.mul_(8.0)
    return m.eval()


def random_prompts(seed: int, n: int, lo: int, hi: int) -> list[list[int]]:
    """``n`` prompts of random token ids (no special tokens), lengths in ``[lo, hi]``."""
    rng = random.Random(seed)
    return [[rng.randrange(3, VOCAB) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def pools(eng) -> tuple[int, int]:
    """(free req_to_token rows, free pages) of an engine: what a failed or interrupted step must give back."""
    rn = eng.runner
    return rn.req_to_token_pool.available(), rn.allocator.available_pages()
