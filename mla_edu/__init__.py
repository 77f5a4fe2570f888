"""mla-edu: DeepSeek's Multi-head Latent Attention, how it is served, and how CUDA graphs break it."""

from mla_edu.device import HAS_CUDA, default_device  # first: sets TRITON_INTERPRET before anything imports triton
from mla_edu.attention import AbsorbedMLA, ContiguousLatentCache, NaiveMLA
from mla_edu.config import MLAConfig

__version__ = "0.1.0"
__all__ = ["AbsorbedMLA", "HAS_CUDA", "ContiguousLatentCache", "MLAConfig", "NaiveMLA", "default_device", "__version__"]
