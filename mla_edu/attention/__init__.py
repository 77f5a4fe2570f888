"""MLA attention: the paper's literal form and the absorbed form, sharing one set of weights."""

from mla_edu.attention.absorbed import AbsorbedMLA, latent_attention
from mla_edu.attention.common import LatentCache, MLAWeights, RMSNorm
from mla_edu.attention.naive import NaiveMLA

__all__ = ["AbsorbedMLA", "LatentCache", "MLAWeights", "NaiveMLA", "RMSNorm", "latent_attention"]
