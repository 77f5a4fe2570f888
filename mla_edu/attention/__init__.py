"""MLA attention: the paper's literal form and the absorbed form, sharing one set of weights."""

from mla_edu.attention.absorbed import AbsorbedMLA, latent_attention
from mla_edu.attention.common import ContiguousLatentCache, MLAWeights, RMSNorm, restored_on_error
from mla_edu.attention.naive import NaiveMLA

__all__ = ["AbsorbedMLA", "ContiguousLatentCache", "MLAWeights", "NaiveMLA", "RMSNorm", "latent_attention",
           "restored_on_error"]
