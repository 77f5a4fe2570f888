"""NaiveMLA equals transformers' attention; AbsorbedMLA equals NaiveMLA; bad input fails loudly."""

import pytest
import torch
from hf_reference import hf_forward, make_hf_attention
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_edu import AbsorbedMLA, ContiguousLatentCache, MLAConfig, NaiveMLA

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8}
CASES = {
    "v3-q_lora": (3, MLAConfig.tiny()),
    "v3-no-q_lora": (3, MLAConfig.tiny(q_lora_rank=None)),
    "v3-half-layout": (3, MLAConfig.tiny(rope_interleave=False)),
    "v3-yarn": (3, MLAConfig.tiny(rope_scaling=YARN, max_position_embeddings=256)),
    "v3-yarn-factor-only": (3, MLAConfig.tiny(rope_scaling={"rope_type": "yarn", "factor": 8.0,
                                                            "original_max_position_embeddings": 64})),
    "v2-no-q_lora-yarn": (2, MLAConfig.tiny(q_lora_rank=None,
                                            rope_scaling={**YARN, "mscale": 0.707, "mscale_all_dim": 0.707})),
}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _inputs(config: MLAConfig, B=2, T=9, offset=5, seed=1):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, config.hidden_size, generator=gen)
    positions = (torch.arange(T) + offset).expand(B, T)
    return hidden, positions


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cls", [NaiveMLA, AbsorbedMLA])
def test_prefill_matches_transformers(case, cls):
    version, config = CASES[case]
    module, rotary = make_hf_attention(config, version)
    hidden, positions = _inputs(config)
    ref = hf_forward(module, rotary, hidden, positions)
    ours = cls.from_hf(module)
    assert ours.config == config
    with torch.no_grad():
        assert rel_err(ours(hidden, positions), ref) < 1e-5


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cls", [NaiveMLA, AbsorbedMLA])
def test_step_by_step_decode_matches_transformers(case, cls):
    """Prefill 4 tokens, then decode one token at a time against the latent cache."""
    version, config = CASES[case]
    module, rotary = make_hf_attention(config, version)
    hidden, positions = _inputs(config, T=8)
    ref = hf_forward(module, rotary, hidden, positions)
    ours, cache = cls.from_hf(module), ContiguousLatentCache()
    with torch.no_grad():
        outs = [ours(hidden[:, :4], positions[:, :4], cache)]
        outs += [ours(hidden[:, t:t + 1], positions[:, t:t + 1], cache) for t in range(4, 8)]
    assert cache.seq_len == 8
    assert cache.c_kv.shape == (2, 8, config.kv_lora_rank) and cache.k_pe.shape == (2, 8, config.qk_rope_head_dim)
    assert rel_err(torch.cat(outs, dim=1), ref) < 1e-5


def _naive_and_absorbed(config, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    naive = NaiveMLA(config)
    with torch.no_grad():
        for p in naive.parameters():
            p.normal_(0, 0.2).add_(1.0 if p.dim() == 1 else 0.0)
    absorbed = AbsorbedMLA(config)
    absorbed.load_state_dict(naive.state_dict())
    return naive.to(dtype), absorbed.to(dtype)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_absorbed_equals_naive(dtype, tol):
    config = MLAConfig.tiny(rope_scaling=YARN)
    naive, absorbed = _naive_and_absorbed(config, dtype)
    hidden, positions = _inputs(config, T=12)
    ref_naive, _ = _naive_and_absorbed(config, torch.float64)
    with torch.no_grad():
        exact = ref_naive(hidden.double(), positions)
        a, n = absorbed(hidden.to(dtype), positions), naive(hidden.to(dtype), positions)
    assert rel_err(a, n) < tol
    assert rel_err(a, exact) < tol


@settings(max_examples=25, deadline=None)
@given(heads=st.integers(1, 4), kv_lora_rank=st.sampled_from([8, 16, 32]), nope=st.sampled_from([4, 8]),
       rope=st.sampled_from([2, 4, 8]), v=st.sampled_from([4, 8]), q_lora=st.sampled_from([None, 12]),
       interleave=st.booleans(), T=st.integers(1, 10), prefix=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_property_absorbed_equals_naive_and_decode_equals_prefill(heads, kv_lora_rank, nope, rope, v, q_lora,
                                                                   interleave, T, prefix, seed):
    config = MLAConfig(hidden_size=16, num_attention_heads=heads, q_lora_rank=q_lora, kv_lora_rank=kv_lora_rank,
                       qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v, rope_interleave=interleave,
                       max_position_embeddings=64)
    naive, absorbed = _naive_and_absorbed(config, seed=seed)
    prefix = min(prefix, T)
    hidden, positions = _inputs(config, B=2, T=T, offset=seed % 7, seed=seed)
    with torch.no_grad():
        full = naive(hidden, positions)
        assert rel_err(absorbed(hidden, positions), full) < 1e-5
        cache = ContiguousLatentCache()
        steps = [absorbed(hidden[:, :prefix], positions[:, :prefix], cache)]
        steps += [absorbed(hidden[:, t:t + 1], positions[:, t:t + 1], cache) for t in range(prefix, T)]
    assert rel_err(torch.cat(steps, dim=1), full) < 1e-5


def test_softmax_scale_is_not_one_over_sqrt_576():
    v3 = MLAConfig.deepseek_v3()
    assert v3.kv_cache_dim == 576 and v3.qk_head_dim == 192
    mscale = 0.1 * 1.0 * torch.log(torch.tensor(40.0)).item() + 1
    assert v3.softmax_scale == pytest.approx(192 ** -0.5 * mscale ** 2)
    assert v3.replace(rope_scaling=None).softmax_scale == pytest.approx(192 ** -0.5)
    assert AbsorbedMLA(MLAConfig.tiny()).softmax_scale == pytest.approx((16 + 8) ** -0.5)


# ---- bad input ---------------------------------------------------------------------------------

def test_wrong_hidden_size_names_expected_and_got():
    layer = AbsorbedMLA(MLAConfig.tiny())
    with pytest.raises(ValueError, match=r"hidden_size=64.*\[2, 3, 32\]"):
        layer(torch.randn(2, 3, 32), torch.arange(3))


def test_wrong_dtype_and_positions():
    layer = NaiveMLA(MLAConfig.tiny())
    with pytest.raises(TypeError, match="bfloat16.*float32"):
        layer(torch.randn(1, 3, 64, dtype=torch.bfloat16), torch.arange(3))
    with pytest.raises(TypeError, match="integer"):
        layer(torch.randn(1, 3, 64), torch.arange(3.0))
    with pytest.raises(ValueError, match="positions"):
        layer(torch.randn(1, 3, 64), torch.arange(4))
    with pytest.raises(ValueError, match=r"\[B, T, hidden_size\]"):
        layer(torch.randn(3, 64), torch.arange(3))


def test_mismatched_weights_and_configs():
    module, _ = make_hf_attention(MLAConfig.tiny())
    wrong = NaiveMLA(MLAConfig.tiny(kv_lora_rank=16))
    with pytest.raises(ValueError, match="kv_a_proj_with_mqa.weight.*expected shape"):
        wrong.load_hf_state_dict(module.state_dict())
    no_lora = NaiveMLA(MLAConfig.tiny(q_lora_rank=None))
    with pytest.raises(ValueError, match="missing.*q_proj.weight.*unexpected.*q_a_proj"):
        no_lora.load_hf_state_dict(module.state_dict())
    with pytest.raises(TypeError, match="transformers DeepseekV2/V3 attention"):
        NaiveMLA.from_hf(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="MLAConfig"):
        NaiveMLA({"hidden_size": 64})
    with pytest.raises(ValueError, match=r"o_latent: expected \[..., 4, 32\]"):
        AbsorbedMLA(MLAConfig.tiny()).output(torch.randn(2, 4, 16))


def test_latent_attention_refuses_shapes_einsum_would_broadcast():
    """An audit's find: a cache of batch 1 against queries of batch 4 was broadcast, a NaN scale gave NaN."""
    from mla_edu.attention import latent_attention

    q_nope, q_pe = torch.randn(4, 1, 2, 8), torch.randn(4, 1, 2, 3)
    c_kv, k_pe = torch.randn(4, 5, 8), torch.randn(4, 5, 3)
    assert latent_attention(q_nope, q_pe, c_kv, k_pe, 0.5).shape == (4, 1, 2, 8)
    for args, what in [((q_nope, q_pe, c_kv[:1], k_pe[:1], 0.5), "expected c_kv \\[4, 5, 8\\]"),
                       ((q_nope, q_pe[..., :2], c_kv, k_pe, 0.5), "expected q_pe \\[4, 1, 2, 3\\]"),
                       ((q_nope, q_pe, c_kv, k_pe[:, :4], 0.5), "expected k_pe \\[4, 5, 3\\]"),
                       ((q_nope[0], q_pe, c_kv, k_pe, 0.5), "expected q_nope \\[B, T, H, r\\]"),
                       ((q_nope, q_pe, c_kv, k_pe, float("nan")), "positive finite number, got nan"),
                       ((q_nope, q_pe, c_kv, k_pe, 0.0), "positive finite number, got 0.0")]:
        with pytest.raises(ValueError, match=what):
            latent_attention(*args)
    with pytest.raises(ValueError, match="expected mask a bool tensor \\[1, 5\\]"):
        latent_attention(q_nope, q_pe, c_kv, k_pe, 0.5, torch.ones(1, 4, dtype=torch.bool))


def test_a_refused_cache_update_leaves_the_cache_as_it_was():
    """An audit's find: c_kv was appended before k_pe's cat failed, and k_pe's shape was never checked."""
    from mla_edu import ContiguousLatentCache

    cache = ContiguousLatentCache()
    with pytest.raises(ValueError, match="expected k_pe \\[1, 2, dr\\]"):
        cache.update(torch.zeros(1, 2, 8), torch.zeros(1, 3, 4))
    assert cache.c_kv is None and cache.k_pe is None
    cache.update(torch.zeros(1, 2, 8), torch.zeros(1, 2, 4))
    for c_kv, k_pe, what in [(torch.zeros(1, 1, 8), torch.zeros(1, 1, 5), "expected k_pe \\[1, T, 4\\]"),
                             (torch.zeros(2, 1, 8), torch.zeros(2, 1, 4), "expected c_kv \\[1, T, 8\\]"),
                             (torch.zeros(1, 1, 8, dtype=torch.float64), torch.zeros(1, 1, 4), "torch.float32")]:
        with pytest.raises(ValueError, match=what):
            cache.update(c_kv, k_pe)
        assert cache.c_kv.shape == (1, 2, 8) and cache.k_pe.shape == (1, 2, 4)
    cache.update(torch.ones(1, 1, 8), torch.ones(1, 1, 4))
    assert cache.seq_len == 3 and cache.k_pe.shape == (1, 3, 4)
