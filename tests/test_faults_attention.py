"""The attention layers, their cache, RoPE and the cost counts refuse what would give a silent wrong answer (an
audit's findings, each reproduced here first): a refused cache update that still moved the cache's positions, a
cached forward interrupted after the update, cos/sin that broadcast x to another shape, float64 RoPE computed in
float32, queries and caches of different dtypes or devices, an empty cache, a softmax scale <= 0, and cost arguments
checked in some functions but not others."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET before anything imports triton)
from mla_edu.attention import AbsorbedMLA, ContiguousLatentCache, NaiveMLA, latent_attention
from mla_edu.attention import cost
from mla_edu.config import MLAConfig
from mla_edu.model import TinyDeepseek
from mla_edu.rope import apply_rope, cos_sin

CFG = MLAConfig.tiny()


def cached(n: int) -> ContiguousLatentCache:
    cache = ContiguousLatentCache()
    cache.update(torch.randn(1, n, 8), torch.randn(1, n, 4), torch.arange(n)[None])
    return cache


# ---- 1. a refused update changes nothing ------------------------------------------------------------------------
def test_a_cache_update_refused_for_its_dtype_leaves_next_positions():
    cache = cached(5)
    with pytest.raises(ValueError, match="torch.float32"):
        cache.update(torch.randn(1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 4, dtype=torch.float64),
                     torch.tensor([[5]]))
    assert cache.seq_len == 5 and cache.next_positions.tolist() == [5]
    with pytest.raises(ValueError, match=r"go on at positions \[5\].*got \[6\]"):  # no token skipped silently
        cache.update(torch.randn(1, 1, 8), torch.randn(1, 1, 4), torch.tensor([[6]]))
    cache.update(torch.randn(1, 1, 8), torch.randn(1, 1, 4), torch.tensor([[5]]))  # the retry
    assert cache.seq_len == 6 and cache.next_positions.tolist() == [6]


def test_a_layer_cast_between_calls_can_retry_its_step():
    layer, h, pos = NaiveMLA(CFG).eval(), torch.randn(1, 6, CFG.hidden_size), torch.arange(6)[None]
    cache = ContiguousLatentCache()
    with torch.no_grad():
        layer(h[:, :5], pos[:, :5], cache)
        with pytest.raises(ValueError, match="what the cache holds"):
            layer.double()(h[:, 5:].double(), pos[:, 5:], cache)
        layer.float()(h[:, 5:], pos[:, 5:], cache)
    assert cache.seq_len == 6


# ---- 2. an interrupt after the update leaves the cache as it was --------------------------------------------------
@pytest.mark.parametrize("cls", [NaiveMLA, AbsorbedMLA])
@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_a_cached_step_interrupted_after_the_update_can_be_run_again(cls, error):
    torch.manual_seed(0)
    layer, h, pos = cls(CFG).eval(), torch.randn(1, 6, CFG.hidden_size), torch.arange(6)[None]
    cache = ContiguousLatentCache()
    with torch.no_grad():
        full = layer(h, pos)
        layer(h[:, :5], pos[:, :5], cache)

        def boom(*args):
            raise error("stopped while o_proj runs")

        hook = layer.o_proj.register_forward_pre_hook(boom)
        with pytest.raises(error):
            layer(h[:, 5:], pos[:, 5:], cache)
        hook.remove()
        assert cache.seq_len == 5 and cache.next_positions.tolist() == [5]
        out = layer(h[:, 5:], pos[:, 5:], cache)  # the re-run cell
    assert cache.seq_len == 6 and torch.allclose(out, full[:, 5:], atol=1e-5)


def test_a_snapshot_restores_the_cache():
    cache = cached(3)
    held = cache.snapshot()
    cache.update(torch.randn(1, 2, 8), torch.randn(1, 2, 4), torch.tensor([[3, 4]]))
    cache.restore(held)
    assert cache.seq_len == 3 and cache.next_positions.tolist() == [3] and cache.c_kv is held["c_kv"]


# ---- 3. apply_rope keeps x's shape -------------------------------------------------------------------------------
def test_apply_rope_refuses_cos_sin_that_would_change_x():
    B, T, H, dr = 3, 1, 4, CFG.qk_rope_head_dim
    cos, sin = cos_sin(CFG, torch.tensor([[7], [20], [33]]))  # [B, T, dr/2]
    q = torch.randn(B, T, H, dr)
    with pytest.raises(ValueError, match=r"x \[3, 1, 4, 8\], cos \[3, 1, 4\], sin \[3, 1, 4\]"):
        apply_rope(q, cos, sin, True)  # the head axis forgotten: was [B, B, H, dr]
    assert apply_rope(q, cos[:, :, None], sin[:, :, None], True).shape == q.shape
    cos4, sin4 = cos_sin(CFG, torch.arange(4)[None])  # [1, 4, dr/2]
    with pytest.raises(ValueError, match=r"x \[4, 8\], cos \[1, 4, 4\]"):
        apply_rope(torch.randn(4, dr), cos4, sin4, True)  # was a [1, 4, dr] result
    with pytest.raises(ValueError, match=r"x \[1, 4, 4, 8\], cos \[1, 4, 4\]"):
        apply_rope(torch.randn(1, 4, H, dr), cos4, sin4, True)  # T == H: was rotated by the wrong positions
    with pytest.raises(ValueError, match=r"cos \[4, 4\], sin \[1, 4\]"):
        apply_rope(torch.randn(4, dr), cos4[0], sin4[0, :1], True)
    with pytest.raises(ValueError, match=r"x \[4, 6\], cos \[4, 4\]"):
        apply_rope(torch.randn(4, 6), cos4[0], sin4[0], True)


def test_apply_rope_refuses_what_is_not_a_bool_or_a_float():
    cos, sin = cos_sin(CFG, torch.arange(4))
    x = torch.randn(4, CFG.qk_rope_head_dim)
    with pytest.raises(TypeError, match="interleave a bool, got 'False'"):
        apply_rope(x, cos, sin, "False")
    with pytest.raises(ValueError, match="got x torch.int64"):
        apply_rope(x.long(), cos, sin, True)
    with pytest.raises(ValueError, match="sin torch.float64"):
        apply_rope(x, cos, sin.double(), True)


# ---- 4. float64 stays float64 ----------------------------------------------------------------------------------------
def test_apply_rope_computes_float64_in_float64():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100, 8, dtype=torch.float64, generator=g)
    angles = torch.rand(100, 4, dtype=torch.float64, generator=g) * 6
    cos, sin = angles.cos(), angles.sin()
    y = apply_rope(x, cos, sin, True)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    exact = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    assert y.dtype == torch.float64 and (y - exact).abs().max() < 1e-14
    assert (apply_rope(y, cos, -sin, True) - x).abs().max() < 1e-14
    half = x.to(torch.bfloat16)  # half precision: computed in float32, cast back
    want = apply_rope(half.float(), cos.float(), sin.float(), True).to(torch.bfloat16)
    assert torch.equal(apply_rope(half, cos.float(), sin.float(), True), want)


# ---- 5. dtypes and devices are checked with the shapes ------------------------------------------------------------
def latent_args(B=2, T=1, H=4, r=8, dr=4, L=5):
    return torch.randn(B, T, H, r), torch.randn(B, T, H, dr), torch.randn(B, L, r), torch.randn(B, L, dr)


@pytest.mark.parametrize("change", ["float64 queries", "bf16 q_pe", "int cache", "cache on meta"])
def test_latent_attention_refuses_mixed_dtypes_and_devices(change):
    q, qp, c, k = latent_args()
    args = {"float64 queries": (q.double(), qp.double(), c, k), "bf16 q_pe": (q, qp.bfloat16(), c, k),
            "int cache": (q, qp, c.long(), k.long()), "cache on meta": (q, qp, c.to("meta"), k.to("meta"))}[change]
    with pytest.raises(ValueError, match="one floating dtype on one device, got q_nope .* on cpu, q_pe"):
        latent_attention(*args, 0.1)


def test_latent_attention_refuses_a_mask_on_another_device():
    with pytest.raises(ValueError, match=r"mask a bool tensor \[1, 5\] on cpu or None, got .* torch.bool on meta"):
        latent_attention(*latent_args(), 0.1, torch.ones(1, 5, dtype=torch.bool, device="meta"))


def test_output_and_decode_step_name_an_o_latent_of_the_wrong_dtype():
    with pytest.raises(ValueError, match=r"o_latent: expected \[..., 4, 32\] torch.float32 on cpu .* torch.float64"):
        AbsorbedMLA(CFG).output(torch.randn(2, 4, 32, dtype=torch.float64))
    with pytest.raises(TypeError, match="o_latent: expected a torch.Tensor, got list"):
        AbsorbedMLA(CFG).output([0.0])
    model = TinyDeepseek().eval()
    for dtype in (torch.float64, torch.int64):
        with pytest.raises(ValueError, match=f"o_latent: expected .* got \\[2, 4, 512\\] {dtype}"):
            model.decode_step(torch.tensor([5, 6]), torch.tensor([3, 4]),
                              lambda i, q, qp, c, k: torch.zeros_like(q, dtype=dtype))


# ---- 6. no keys, no softmax ------------------------------------------------------------------------------------------
def test_latent_attention_refuses_an_empty_cache():
    with pytest.raises(ValueError, match=r"at least one cached token .* got c_kv \[2, 0, 8\]"):
        latent_attention(*latent_args(L=0), 0.1)
    assert latent_attention(*latent_args(B=0), 0.1).shape == (0, 1, 4, 8)  # no requests is fine


@pytest.mark.parametrize("row", range(3))
def test_latent_attention_refuses_a_mask_row_of_all_false(row, monkeypatch):
    mask = torch.ones(3, 5, dtype=torch.bool).tril(diagonal=2)  # [T=3, L=5], causal: every row attends somewhere
    assert latent_attention(*latent_args(T=3), 0.1, mask).isfinite().all()
    mask[row] = False
    with pytest.raises(ValueError, match=rf"at least one key .* got rows \[{row}\] all False in mask \[3, 5\]"):
        latent_attention(*latent_args(T=3), 0.1, mask)
    monkeypatch.setattr("mla_edu.attention.absorbed.values_readable", lambda *t: False)  # as on a GPU: not read
    assert latent_attention(*latent_args(T=3), 0.1, mask)[:, row].isnan().all()


@pytest.mark.parametrize("lo_hi", [(-1, 3), (0, CFG.max_position_embeddings), (-5, CFG.max_position_embeddings + 2)])
def test_cos_sin_refuses_positions_outside_the_context(lo_hi, monkeypatch):
    limit = CFG.max_position_embeddings
    cos, _ = cos_sin(CFG, torch.tensor([0, limit - 1]))  # both edges inside
    assert cos.shape == (2, CFG.qk_rope_head_dim // 2)
    with pytest.raises(ValueError, match=rf"expected each in \[0, {limit}\) .* got \[{lo_hi[0]}, {lo_hi[1]}\]"):
        cos_sin(CFG, torch.tensor(lo_hi))
    monkeypatch.setattr("mla_edu.rope.values_readable", lambda *t: False)  # as on a GPU or in a capture: not read
    assert cos_sin(CFG, torch.tensor(lo_hi))[0].shape == (2, CFG.qk_rope_head_dim // 2)


# ---- 7. one scale check ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [0.0, -0.2, float("nan"), True])
@pytest.mark.parametrize("cls", [NaiveMLA, AbsorbedMLA])
def test_both_layers_refuse_a_softmax_scale_that_is_not_positive(cls, scale):
    layer = cls(CFG).eval()
    layer.softmax_scale = scale
    cache = ContiguousLatentCache()
    with pytest.raises(ValueError, match=f"must be a positive finite number, got {scale!r}"):
        with torch.no_grad():
            layer(torch.randn(1, 3, CFG.hidden_size), torch.arange(3)[None], cache)
    assert cache.seq_len == 0


# ---- 8. cost: one check for every function -----------------------------------------------------------------------
V3 = MLAConfig.deepseek_v3()
PUBLIC = {
    "decode_cost": lambda config, db: cost.decode_cost(config, [4096] * 2, "absorbed", dtype_bytes=db),
    "attention_core_cost": lambda config, db: cost.attention_core_cost(config, 4096, dtype_bytes=db),
    "decode_intensity": lambda config, db: cost.decode_intensity(config, dtype_bytes=db),
    "prefill_cost": lambda config, db: cost.prefill_cost(config, 4096, "naive", dtype_bytes=db),
    "kv_cache_bytes_per_token": lambda config, db: cost.kv_cache_bytes_per_token(config, dtype_bytes=db),
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
@pytest.mark.parametrize("dtype_bytes", [-2, 3, True, 2.0])
def test_every_cost_function_refuses_a_bad_dtype_bytes(name, dtype_bytes):
    with pytest.raises(ValueError, match=f"dtype_bytes must be the int 1, 2 or 4, got {dtype_bytes!r}"):
        PUBLIC[name](V3, dtype_bytes)


@pytest.mark.parametrize("name", sorted(PUBLIC) + ["cached_byte_intensity", "kv_cache_layout"])
def test_every_cost_function_refuses_what_is_not_an_mla_config(name):
    call = PUBLIC.get(name, lambda config, db: getattr(cost, name)(config))
    for config in (None, TinyDeepseek().config):
        with pytest.raises(TypeError, match=f"config: expected an MLAConfig, got {type(config).__name__}"):
            call(config, 2)


def test_cost_counts_numpy_lengths_as_ints():
    want = cost.decode_cost(V3, [4096, 4096], "absorbed")
    assert cost.decode_cost(V3, np.array([4096, 4096]), "absorbed") == want
    assert cost.decode_cost(V3, np.int64(4096), "absorbed") == cost.decode_cost(V3, 4096, "absorbed")
    big = np.array([2 ** 40] * 2)  # numpy's int64 FLOP count would wrap round; Python's does not
    assert cost.decode_cost(V3, big, "naive").flops == cost.decode_cost(V3, [2 ** 40] * 2, "naive").flops > 0
    for lens in (torch.tensor([4096, 4096]), [4096.0], None):
        with pytest.raises(ValueError, match="context lengths must be a non-empty list of ints >= 1"):
            cost.decode_cost(V3, lens, "absorbed")
