"""MLAConfig: presets carry the published numbers; from_hf round-trips; bad values fail loudly."""

import pytest
import torch

from mla_edu import MLAConfig
from mla_edu.attention.cost import (attention_core_cost, cached_byte_intensity, decode_cost, decode_intensity,
                                    kv_cache_bytes_per_token, kv_cache_layout, prefill_cost)
from mla_edu.rope import apply_rope, cos_sin


@pytest.mark.parametrize("preset,hidden,heads,q_lora,layers_note", [
    (MLAConfig.deepseek_v3, 7168, 128, 1536, "V3"),
    (MLAConfig.deepseek_v2, 5120, 128, 1536, "V2"),
    (MLAConfig.deepseek_v2_lite, 2048, 16, None, "V2-Lite"),
])
def test_presets(preset, hidden, heads, q_lora, layers_note):
    c = preset()
    assert (c.hidden_size, c.num_attention_heads, c.q_lora_rank) == (hidden, heads, q_lora)
    assert (c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim) == (512, 128, 64, 128)
    assert c.kv_cache_dim == 576


@pytest.mark.parametrize("preset", [MLAConfig.deepseek_v3, MLAConfig.deepseek_v2_lite, MLAConfig.tiny])
@pytest.mark.parametrize("version", [2, 3])
def test_from_hf_round_trip(preset, version):
    c = preset()
    assert MLAConfig.from_hf(c.to_hf(version)) == c


def test_kv_cache_bytes_match_the_brief():
    assert kv_cache_bytes_per_token(MLAConfig.deepseek_v3()) == {"MHA": 81920, "GQA-8": 4096, "MQA": 512, "MLA": 1152}


def test_kv_cache_layout_states_each_key_width():
    # MHA keeps DeepSeek's 192-wide key; GQA/MQA use 128-wide heads; MLA is 2.25 MQA caches (paper, section 2.1.4)
    layout = kv_cache_layout(MLAConfig.deepseek_v3())
    assert layout == {"MHA": (128, 192, 128), "GQA-8": (8, 128, 128), "MQA": (1, 128, 128), "MLA": (1, 576, 0)}
    sizes = kv_cache_bytes_per_token(MLAConfig.deepseek_v3())
    assert sizes["MLA"] / sizes["MQA"] == 2.25


def test_decode_roofline_numbers_match_the_brief():
    core = attention_core_cost(MLAConfig.deepseek_v3(), [4096] * 64)
    assert core.flops / 1e9 == pytest.approx(73.0, abs=0.1)          # 73 GFLOP
    assert 1152 * 4096 * 64 / 1e6 == pytest.approx(302, abs=0.5)      # 302 MB of latent cache
    assert 200 < core.intensity < 2 * 128                              # ~2 * h_q FLOP/byte
    v3 = MLAConfig.deepseek_v3()
    naive, absorbed = decode_cost(v3, 4096, "naive"), decode_cost(v3, 4096, "absorbed")
    assert naive.bytes == absorbed.bytes and naive.flops > 50 * absorbed.flops
    assert prefill_cost(v3, 4096, "naive").flops < prefill_cost(v3, 4096, "absorbed").flops


@pytest.mark.parametrize("heads, quoted, limit", [(128, 228, 242), (16, 30, 30), (64, 117, 121)])
def test_decode_intensity_is_the_one_number_quoted(heads, quoted, limit):
    """Notebooks 02 and 04 print decode_intensity and quote it rounded (228 and 30); the long-context limit is
    cached_byte_intensity (242, 30.2: q and o bytes left out); "about 2 n_h" (256, 32) is neither."""
    config = MLAConfig.deepseek_v3().replace(num_attention_heads=heads)
    assert round(decode_intensity(config)) == quoted and round(cached_byte_intensity(config)) == limit
    assert decode_intensity(config) == attention_core_cost(config, [4096] * 64).intensity
    assert decode_intensity(config) < cached_byte_intensity(config) < 2 * heads
    long = decode_intensity(config, [1 << 24])  # one very long request: q and o bytes vanish
    assert long == pytest.approx(cached_byte_intensity(config), rel=1e-4)


def test_the_bench_counts_flops_and_bytes_as_the_cost_model():
    """results/kernel_bench_h200.json's flops and bytes (the roofline's x) are attention_core_cost's."""
    from mla_edu.kernels.plots import load_bench

    rows = load_bench()["results"]
    assert rows
    for r in rows:
        c = attention_core_cost(MLAConfig.deepseek_v3().replace(num_attention_heads=r["heads"]),
                                [r["seq_len"]] * r["batch"])
        assert (r["flops"], r["bytes"]) == (c.flops, c.bytes), r


YARN = {"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 64}


@pytest.mark.parametrize("bad,match", [
    (dict(hidden_size=0), "hidden_size: expected an int >= 1, got 0"),
    (dict(q_lora_rank=-1), "q_lora_rank: expected an int >= 1 or None, got -1"),
    (dict(qk_rope_head_dim=7), "qk_rope_head_dim must be even"),
    (dict(rope_scaling={"rope_type": "ntk"}), "rope_type must be one of"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "needs 'original_max_position_embeddings'"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 0.5, "original_max_position_embeddings": 8}),
     "'factor'\\]: expected a float >= 1, got 0.5"),
    # floats are finite: nan and inf passed the old `> 0` checks (nan made softmax_scale nan)
    (dict(rope_theta=float("nan")), "rope_theta: expected a float > 0, got nan"),
    (dict(rope_theta=float("inf")), "rope_theta: expected a float > 0, got inf"),
    (dict(rms_norm_eps=float("inf")), "rms_norm_eps: expected a float > 0, got inf"),
    (dict(rope_scaling={**YARN, "factor": float("inf")}), "'factor'\\]: expected a float >= 1, got inf"),
    (dict(rope_scaling={**YARN, "mscale_all_dim": float("nan")}), "'mscale_all_dim'\\]: expected a float >= 0"),
    (dict(rope_scaling={**YARN, "original_max_position_embeddings": -5}),
     "'original_max_position_embeddings'\\]: expected an int >= 1, got -5"),
    # a misspelt key was dropped without a word (beta_fast stayed 32)
    (dict(rope_scaling={**YARN, "beta_fsat": 64}), "unknown key\\(s\\) \\['beta_fsat'\\] for rope_type 'yarn'"),
    (dict(rope_scaling={"rope_type": "default", "factor": 4.0}), "unknown key\\(s\\) \\['factor'\\]"),
    (dict(rope_scaling={**YARN, "type": "default"}), "'rope_type' and its old name 'type' differ"),
    (dict(rope_scaling={**YARN, "rope_theta": 5e5}), "differs from rope_theta"),
])
def test_bad_config_values(bad, match):
    with pytest.raises(ValueError, match=match):
        MLAConfig.tiny(**bad)


@pytest.mark.parametrize("bad,match", [
    # each was accepted: "no" is truthy (interleaved RoPE), 1 and True pass as bool and float, "1e4" hit a comparison
    (dict(rope_interleave="no"), "rope_interleave: expected a bool, got 'no'"),
    (dict(attention_bias=1), "attention_bias: expected a bool, got 1"),
    (dict(rope_theta=True), "rope_theta: expected a float > 0, got True"),
    (dict(rope_theta="1e4"), "rope_theta: expected a float > 0, got '1e4'"),
    (dict(num_attention_heads=2.5), "num_attention_heads: expected an int >= 1, got 2.5"),
    (dict(kv_lora_rank=True), "kv_lora_rank: expected an int >= 1, got True"),
    (dict(rope_scaling={**YARN, "mscale": "1"}), "'mscale'\\]: expected a float >= 0 or None, got '1'"),
    (dict(rope_scaling={**YARN, "factor": True}), "'factor'\\]: expected a float >= 1, got True"),
    (dict(rope_scaling={**YARN, "truncate": "no"}), "'truncate'\\]: expected a bool, got 'no'"),
    (dict(rope_scaling=[("rope_type", "yarn")]), "rope_scaling: expected None or a dict, got list"),
])
def test_config_types_are_strict(bad, match):
    with pytest.raises(TypeError, match=match):
        MLAConfig.tiny(**bad)


def test_yarn_keys_of_real_configs_load():
    """DeepSeek-V3's config.json (the old "type" key, int factor and theta), transformers v5's rope_parameters
    (rope_theta inside) and every key transformers' YaRN reads are accepted; "type" and "rope_theta" are not kept."""
    config_json = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"}
    v3 = MLAConfig.deepseek_v3()
    assert v3.replace(rope_scaling=config_json, rope_theta=10000) == v3
    assert v3.replace(rope_scaling={**config_json, "rope_type": "yarn", "rope_theta": 10000.0}) == v3
    assert v3.replace(rope_scaling={**config_json, "attention_factor": 1.0, "truncate": False,
                                    "beta_fast": None}).rope_scaling["truncate"] is False
    assert v3.replace(rope_scaling={"type": "default", "rope_theta": 10000}).rope_scaling is None
    hf = v3.to_hf(3)
    hf.rope_parameters = {**config_json, "rope_theta": 10000}  # as transformers reads DeepSeek-V3's config.json
    assert MLAConfig.from_hf(hf) == v3 and isinstance(MLAConfig.from_hf(hf).rope_theta, float)


def test_from_hf_rejects_other_configs():
    with pytest.raises(TypeError, match="lacks"):
        MLAConfig.from_hf(object())


def test_cost_bad_input():
    with pytest.raises(ValueError, match="order must be one of"):
        decode_cost(MLAConfig.tiny(), 8, "fast")
    with pytest.raises(ValueError, match=">= 1"):
        decode_cost(MLAConfig.tiny(), [8, 0], "naive")


@pytest.mark.parametrize("interleave", [True, False])
def test_rope_is_a_rotation_and_relative(interleave):
    """|RoPE(x)| = |x|, and q.k depends only on the position difference."""
    c = MLAConfig.tiny(rope_interleave=interleave)
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(c.qk_rope_head_dim, dtype=torch.float64, generator=g) for _ in range(2))

    def rot(x, p):
        cos, sin = cos_sin(c, torch.tensor([p]))
        return apply_rope(x[None], cos.double(), sin.double(), interleave)[0]

    assert rot(q, 11).norm().item() == pytest.approx(q.norm().item(), rel=1e-6)
    # cos and sin are float32: each product's error is a few float32 steps of |q||k|, not of the dot product, which
    # can sit near 0 (a tolerance relative to it failed on one draw of unseeded q, k)
    scale = (q.norm() * k.norm()).item()
    for shift in (0, 16, 100):
        assert (rot(q, 11) @ rot(k, 4)).item() == pytest.approx((rot(q, 11 + shift) @ rot(k, 4 + shift)).item(),
                                                                abs=1e-6 * scale)
    with pytest.raises(TypeError, match="integer"):
        cos_sin(c, torch.tensor([1.0]))


def test_h200_ceilings_come_from_the_committed_bench():
    from mla_edu.kernels.plots import load_bench
    from mla_edu.attention.plots import h200_ceilings

    flop_per_s, bytes_per_s = h200_ceilings()
    ceil = load_bench()["ceilings"]
    assert (flop_per_s, bytes_per_s) == (ceil["matmul_bf16_TFLOPs"] * 1e12, ceil["copy_TBps"] * 1e12)
    # measured rates (695-708 TFLOP/s, 4.25-4.27 TB/s in the committed runs), below the datasheet's 990 / 4.8
    assert 600e12 < flop_per_s < 790e12 and 4.0e12 < bytes_per_s < 4.8e12
    core = attention_core_cost(MLAConfig.deepseek_v3(), [4096] * 64)
    assert core.intensity > flop_per_s / bytes_per_s  # 128 heads: compute-bound on the H200


def test_rope_scaling_is_read_only_as_the_frozen_config_is():
    import copy
    import json
    import pickle
    from dataclasses import asdict

    config = MLAConfig.deepseek_v3()
    for edit in (lambda rs: rs.__setitem__("factor", 80.0), lambda rs: rs.update(factor=80.0),
                 lambda rs: rs.pop("factor"), lambda rs: rs.clear(), lambda rs: rs.__delitem__("factor"),
                 lambda rs: rs.setdefault("beta_fast", 1.0), lambda rs: rs.popitem()):
        with pytest.raises(TypeError, match=r"rope_scaling is read-only .*config.replace\(rope_scaling="):
            edit(config.rope_scaling)
    assert config.rope_scaling["factor"] == 40.0 and hash(config) == hash(MLAConfig.deepseek_v3())
    assert copy.deepcopy(config) == config == pickle.loads(pickle.dumps(config))
    assert json.loads(json.dumps(asdict(config)))["rope_scaling"]["factor"] == 40.0
    assert config.replace(rope_scaling={**config.rope_scaling, "factor": 80.0}).rope_scaling["factor"] == 80.0
