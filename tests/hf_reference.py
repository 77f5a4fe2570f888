"""transformers' own MLA modules, run as the ground truth our code is tested against."""

from __future__ import annotations

import torch

from mla_edu.config import MLAConfig


def make_hf_attention(config: MLAConfig, version: int = 3, seed: int = 0, std: float = 0.2):
    """A transformers DeepseekV{2,3}Attention with random weights, and its rotary embedding."""
    if version == 3:
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
            DeepseekV3Attention as Attention, DeepseekV3RotaryEmbedding as Rotary)
    else:
        from transformers.models.deepseek_v2.modeling_deepseek_v2 import (
            DeepseekV2Attention as Attention, DeepseekV2RotaryEmbedding as Rotary)
    hf_config = config.to_hf(version)
    gen = torch.Generator().manual_seed(seed)
    module = Attention(hf_config, layer_idx=0).float().eval()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * std)
            if p.dim() == 1:  # RMSNorm weights: around 1
                p.add_(1.0)
    return module, Rotary(hf_config)


def hf_forward(module, rotary, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Causal self-attention over ``hidden [B, T, D]`` at ``positions [B, T]``, exactly as transformers runs it."""
    T = hidden.shape[1]
    mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        return module(hidden, position_embeddings=rotary(hidden, positions), attention_mask=mask)[0]
