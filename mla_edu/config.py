"""MLA hyper-parameters, named as Hugging Face ``transformers`` names them.

Presets carry the published values (DeepSeek-V2 paper arXiv 2405.04434, and the models'
``config.json`` files). ``MLAConfig.from_hf`` reads a ``DeepseekV2Config``/``DeepseekV3Config``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from mla_edu.settings import PositiveFloat, PositiveInt, check_fields, check_value
from mla_edu.util import is_int

ROPE_TYPES = ("default", "yarn")
# rope_scaling's keys for each rope_type with their types: the keys transformers' DeepseekV3 reads and accepts
# (modeling_rope_utils: _compute_yarn_parameters and _validate_yarn_rope_parameters); "type" is the old name of
# "rope_type" and "rope_theta" sits there in transformers v5's rope_parameters (it must equal MLAConfig.rope_theta).
ROPE_SCALING_KEYS: dict[str, dict[str, Any]] = {
    "default": {"rope_theta": PositiveFloat},
    "yarn": {
        "factor": Annotated[float, Field(ge=1)],
        "original_max_position_embeddings": PositiveInt,
        "rope_theta": PositiveFloat,
        "attention_factor": PositiveFloat | None,
        "beta_fast": PositiveFloat | None,
        "beta_slow": PositiveFloat | None,
        "mscale": Annotated[float, Field(ge=0)] | None,
        "mscale_all_dim": Annotated[float, Field(ge=0)] | None,
        "truncate": bool,
    },
}


class RopeScaling(dict):
    """``MLAConfig.rope_scaling`` as kept: a dict (json, ``asdict`` and transformers read it as one) that cannot be
    edited in place, so that the frozen config stays frozen (a layer reads ``factor`` once when it is built); hashable,
    as the config is."""

    def _read_only(self, *args, **kwargs):
        raise TypeError("MLAConfig.rope_scaling is read-only (the config is frozen): make a new config with "
                        "config.replace(rope_scaling={...})")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.items())))

    def __reduce__(self):  # copy, deepcopy and pickle build it from a plain dict, not item by item
        return type(self), (dict(self),)


def yarn_get_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature: ``0.1 * mscale * ln(factor) + 1`` (1 when factor <= 1)."""
    if factor <= 1:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0


@dataclass(frozen=True)
class MLAConfig:
    """Everything the attention layer needs; names follow ``transformers``' DeepseekV3Config. Frozen: a layer reads
    some values once (``softmax_scale``, ``inv_freq``) and others at each call, so a config edited after a layer is
    built would leave it half old, half new; ``replace`` makes a new, checked one.

    ``rope_scaling`` is ``None`` (plain RoPE) or a dict with ``rope_type="yarn"`` and YaRN's keys
    (``factor``, ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``, ``mscale``,
    ``mscale_all_dim``), kept as a read-only dict (``RopeScaling``).
    """

    # types and bounds checked by pydantic, strict (``mla_edu.settings``); rope_scaling by ``_check_rope_scaling``
    hidden_size: PositiveInt = 7168
    num_attention_heads: PositiveInt = 128
    q_lora_rank: PositiveInt | None = 1536
    kv_lora_rank: PositiveInt = 512
    qk_nope_head_dim: PositiveInt = 128
    qk_rope_head_dim: PositiveInt = 64
    v_head_dim: PositiveInt = 128
    rope_theta: PositiveFloat = 10000.0
    rope_scaling: Any = None  # None or a dict, see ROPE_SCALING_KEYS
    rope_interleave: bool = True
    max_position_embeddings: PositiveInt = 4096
    rms_norm_eps: PositiveFloat = 1e-6
    attention_bias: bool = False
    name: str = field(default="custom", compare=False)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.qk_rope_head_dim % 2:
            raise ValueError("MLAConfig.qk_rope_head_dim must be even (RoPE rotates pairs), "
                             f"got {self.qk_rope_head_dim}")
        object.__setattr__(self, "rope_scaling", self._check_rope_scaling(self.rope_scaling))  # frozen: set once

    def _check_rope_scaling(self, rs: Any) -> dict[str, Any] | None:
        """``rs`` as kept: None for plain RoPE, else a copy with ``rope_type="yarn"`` and no ``type``/``rope_theta``;
        TypeError or ValueError naming the key for a missing, unknown or ill-typed one."""
        if rs is None:
            return None
        if not isinstance(rs, dict):
            raise TypeError(f"MLAConfig.rope_scaling: expected None or a dict, got {type(rs).__name__}")
        rs = dict(rs)
        rope_type, old_name = rs.pop("rope_type", None), rs.pop("type", None)
        if rope_type is not None and old_name is not None and rope_type != old_name:
            raise ValueError(f"MLAConfig.rope_scaling: 'rope_type' and its old name 'type' differ: "
                             f"{rope_type!r} and {old_name!r}")
        rope_type = old_name if rope_type is None else rope_type
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"MLAConfig.rope_scaling: rope_type must be one of {ROPE_TYPES}, got {rope_type!r}")
        known = ROPE_SCALING_KEYS[rope_type]
        unknown = sorted(set(rs) - set(known), key=str)
        if unknown:
            raise ValueError(f"MLAConfig.rope_scaling: unknown key(s) {unknown} for rope_type {rope_type!r}; "
                             f"expected keys among {['rope_type', *known]}")
        if rope_type == "yarn":
            for key in ("factor", "original_max_position_embeddings"):
                if key not in rs:
                    raise ValueError(f"MLAConfig.rope_scaling (yarn) needs {key!r}; got keys {sorted(rs)}")
        for key, value in rs.items():
            check_value(f"MLAConfig.rope_scaling[{key!r}]", value, known[key])
        theta = rs.pop("rope_theta", self.rope_theta)
        if theta != self.rope_theta:
            raise ValueError(f"MLAConfig.rope_scaling['rope_theta'] ({theta!r}) differs from rope_theta "
                             f"({self.rope_theta!r}): give it once, as rope_theta")
        if rope_type == "yarn" and self.rope_theta <= 1:
            raise ValueError(f"MLAConfig.rope_theta: YaRN divides by log(rope_theta), so it must be > 1, got "
                             f"{self.rope_theta!r}")
        return None if rope_type == "default" else RopeScaling({"rope_type": "yarn", **rs})

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: nope + rope (192 for DeepSeek-V3)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kv_cache_dim(self) -> int:
        """Numbers cached per token per layer: c_kv + k_pe (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def rope_attention_factor(self) -> float:
        """YaRN's factor on cos/sin (transformers' ``attention_factor``).

        1 for DeepSeek-V3 (mscale == mscale_all_dim).
        """
        rs = self.rope_scaling
        if rs is None:
            return 1.0
        if rs.get("attention_factor") is not None:
            return float(rs["attention_factor"])
        mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            return yarn_get_mscale(rs["factor"], mscale) / yarn_get_mscale(rs["factor"], mscale_all_dim)
        return yarn_get_mscale(rs["factor"])

    @property
    def softmax_scale(self) -> float:
        """``1/sqrt(qk_nope + qk_rope)`` times YaRN's ``mscale_all_dim`` temperature squared.

        Absorption does NOT change it: the dot product is the same number, computed in another order,
        so it is never ``1/sqrt(kv_lora_rank + rope)`` = ``1/sqrt(576)``.
        """
        scale = self.qk_head_dim ** -0.5
        rs = self.rope_scaling
        if rs is not None and rs.get("mscale_all_dim"):
            m = yarn_get_mscale(rs["factor"], rs["mscale_all_dim"])
            scale = scale * m * m
        return scale

    def replace(self, **changes: Any) -> "MLAConfig":
        return dataclasses.replace(self, **changes)

    # ---- presets -------------------------------------------------------------------------
    @classmethod
    def deepseek_v3(cls) -> "MLAConfig":
        """DeepSeek-V3 / V3-0324 / R1 (config.json): 128 heads, YaRN factor 40 from 4K to 160K."""
        return cls(
            hidden_size=7168, num_attention_heads=128, q_lora_rank=1536, kv_lora_rank=512,
            qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, rope_theta=10000.0,
            rope_scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                          "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
            rope_interleave=True, max_position_embeddings=163840, name="DeepSeek-V3",
        )

    @classmethod
    def deepseek_v2(cls) -> "MLAConfig":
        """DeepSeek-V2 (config.json): 128 heads, hidden 5120, YaRN factor 40 (mscale 0.707)."""
        return cls(
            hidden_size=5120, num_attention_heads=128, q_lora_rank=1536, kv_lora_rank=512,
            qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, rope_theta=10000.0,
            rope_scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                          "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
            rope_interleave=True, max_position_embeddings=163840, name="DeepSeek-V2",
        )

    @classmethod
    def deepseek_v2_lite(cls) -> "MLAConfig":
        """DeepSeek-V2-Lite (config.json): 16 heads, no query compression (q_lora_rank=None)."""
        return cls(
            hidden_size=2048, num_attention_heads=16, q_lora_rank=None, kv_lora_rank=512,
            qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, rope_theta=10000.0,
            rope_scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                          "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
            rope_interleave=True, max_position_embeddings=163840, name="DeepSeek-V2-Lite",
        )

    @classmethod
    def tiny(cls, **overrides: Any) -> "MLAConfig":
        """A V3-shaped config small enough for tests on a laptop CPU."""
        base = dict(
            hidden_size=64, num_attention_heads=4, q_lora_rank=24, kv_lora_rank=32,
            qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, rope_theta=10000.0,
            rope_scaling=None, rope_interleave=True, max_position_embeddings=512, name="tiny",
        )
        base.update(overrides)
        return cls(**base)

    # ---- transformers interop -------------------------------------------------------------
    @classmethod
    def from_hf(cls, hf_config: Any) -> "MLAConfig":
        """Read a transformers ``DeepseekV2Config``/``DeepseekV3Config`` (v4 or v5 rope fields)."""
        missing = [k for k in ("hidden_size", "num_attention_heads", "kv_lora_rank", "qk_nope_head_dim",
                               "qk_rope_head_dim", "v_head_dim") if not hasattr(hf_config, k)]
        if missing:
            raise TypeError(f"from_hf expects a DeepSeek-V2/V3 config; {type(hf_config).__name__} lacks {missing}")
        rope = getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {}
        rope = dict(rope)
        theta = rope.pop("rope_theta", None) or getattr(hf_config, "rope_theta", 10000.0)
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        scaling = None if rope_type == "default" else rope
        if scaling is not None and "original_max_position_embeddings" not in scaling:
            scaling["original_max_position_embeddings"] = hf_config.max_position_embeddings
        interleave = getattr(hf_config, "rope_interleave", None)
        if interleave is None:  # DeepseekV2Config (transformers) always uses the interleaved layout
            interleave = True
        return cls(
            hidden_size=hf_config.hidden_size,
            num_attention_heads=hf_config.num_attention_heads,
            q_lora_rank=hf_config.q_lora_rank,
            kv_lora_rank=hf_config.kv_lora_rank,
            qk_nope_head_dim=hf_config.qk_nope_head_dim,
            qk_rope_head_dim=hf_config.qk_rope_head_dim,
            v_head_dim=hf_config.v_head_dim,
            rope_theta=float(theta) if is_int(theta) else theta,  # config.json's 10000; anything else checked
            rope_scaling=scaling,
            rope_interleave=interleave,
            max_position_embeddings=hf_config.max_position_embeddings,
            rms_norm_eps=getattr(hf_config, "rms_norm_eps", 1e-6),
            attention_bias=getattr(hf_config, "attention_bias", False),
            name=type(hf_config).__name__,
        )

    def to_hf(self, version: int = 3) -> Any:
        """A transformers DeepseekV{2,3}Config with these attention settings (for tests and the notebooks)."""
        if version not in (2, 3):
            raise ValueError(f"to_hf: version must be 2 or 3, got {version!r}")
        import transformers

        rope_parameters = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_scaling is not None:
            rope_parameters = {**self.rope_scaling, "rope_theta": self.rope_theta}
        kwargs = dict(
            hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_attention_heads, q_lora_rank=self.q_lora_rank,
            kv_lora_rank=self.kv_lora_rank, qk_nope_head_dim=self.qk_nope_head_dim,
            qk_rope_head_dim=self.qk_rope_head_dim, v_head_dim=self.v_head_dim,
            max_position_embeddings=self.max_position_embeddings, rms_norm_eps=self.rms_norm_eps,
            attention_bias=self.attention_bias, rope_parameters=rope_parameters,
            num_hidden_layers=1, vocab_size=32, intermediate_size=4 * self.hidden_size,
            attn_implementation="eager",
        )
        if version == 3:
            return transformers.DeepseekV3Config(rope_interleave=self.rope_interleave, **kwargs)
        if not self.rope_interleave:
            raise ValueError("transformers' DeepseekV2 attention always uses interleaved RoPE; "
                             "got rope_interleave=False")
        return transformers.DeepseekV2Config(**kwargs)
