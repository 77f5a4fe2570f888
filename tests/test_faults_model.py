"""The model, its attention and its cache refuse what would give a silent wrong answer (an audit's findings,
each reproduced here first): a cached forward whose positions restart at 0, caches shared or out of step, an
interrupted cached forward, a caller's reused buffer, positions past the model's, a wrong ``attend``, configs
edited after a layer is built, and the small tools around them (``write_atomic``, ``task``, ``cost``)."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET before anything imports triton)
from hf_reference import hf_forward, make_hf_attention
from mla_edu.attention import AbsorbedMLA, ContiguousLatentCache, NaiveMLA
from mla_edu.attention.cost import decode_cost, prefill_cost
from mla_edu.config import MLAConfig
from mla_edu.files import write_atomic
from mla_edu.model import task
from mla_edu.model.tiny import TinyDeepseekConfig
from tiny_models import random_tiny_model


@pytest.fixture(scope="module")
def model():
    return random_tiny_model().eval()


def caches_of(model):
    return [ContiguousLatentCache() for _ in model.layers]


def test_a_cached_forward_goes_on_where_the_caches_end(model):
    tokens = torch.randint(0, model.config.vocab_size, (2, 9))
    full = model(tokens)  # [2, 9, vocab]
    caches = caches_of(model)
    model(tokens[:, :6], caches=caches)
    assert torch.allclose(model(tokens[:, 6:], caches=caches), full[:, 6:], atol=1e-5)  # default positions 6..8
    with pytest.raises(ValueError, match=r"expected the rows to go on at positions \[9, 9\].*got \[0, 0\]"):
        model(tokens[:, :1], torch.zeros(2, 1, dtype=torch.long), caches)
    assert [c.seq_len for c in caches] == [9, 9]  # the refused call left them as they were


def test_caches_shared_or_out_of_step_are_refused(model):
    tokens = torch.randint(0, model.config.vocab_size, (1, 4))
    one = ContiguousLatentCache()
    with pytest.raises(ValueError, match="the same object for several layers"):
        model(tokens, caches=[one] * len(model.layers))
    caches = caches_of(model)
    model.layers[0].attn(model.embed(tokens), torch.arange(4)[None], caches[0])  # layer 0 alone
    with pytest.raises(ValueError, match=r"the same tokens, got lengths \[4, 0\]"):
        model(tokens, caches=caches)
    with pytest.raises(TypeError, match="ContiguousLatentCache"):
        model(tokens, caches=[None, None])


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_cached_forward_leaves_every_cache_as_it_was(model, exc):
    tokens = torch.randint(0, model.config.vocab_size, (1, 7))
    want = model(tokens)[:, 4:]
    caches = caches_of(model)
    model(tokens[:, :4], caches=caches)
    before = [(c.c_kv, c.k_pe, c.next_positions) for c in caches]

    def boom(*_):
        raise exc("in layer 1")

    hook = model.layers[1].mlp.register_forward_hook(boom)
    try:
        with pytest.raises(exc):
            model(tokens[:, 4:], caches=caches)
    finally:
        hook.remove()
    assert all(c.c_kv is a and c.k_pe is b and c.next_positions is n for c, (a, b, n) in zip(caches, before))
    assert torch.allclose(model(tokens[:, 4:], caches=caches), want, atol=1e-5)  # the retry is right


def test_the_cache_copies_the_first_update_and_checks_positions():
    cache, c_buf, k_buf = ContiguousLatentCache(), torch.zeros(1, 1, 4), torch.zeros(1, 1, 2)
    for step in range(3):  # one buffer reused each step: the static-buffer pattern
        c_buf.fill_(step)
        cache.update(c_buf, k_buf, torch.tensor([[step]]))
    assert cache.c_kv[0, :, 0].tolist() == [0.0, 1.0, 2.0]
    for bad, match in ((torch.tensor([[5]]), r"go on at positions \[3\]"), (torch.tensor([[3, 5]]), "count up by one"),
                       (torch.tensor([3]), r"expected positions \[1, 1\]")):
        t = bad.shape[-1] if bad.dim() == 2 else 1
        with pytest.raises(ValueError, match=match):
            cache.update(torch.zeros(1, t, 4), torch.zeros(1, t, 2), bad)
        assert cache.seq_len == 3 and cache.next_positions.tolist() == [3]


@pytest.mark.parametrize("cls", [NaiveMLA, AbsorbedMLA])
def test_positions_past_the_model_or_negative_are_refused(cls):
    layer = cls(MLAConfig.tiny())  # max_position_embeddings 512
    hidden = torch.randn(1, 3, layer.config.hidden_size)
    for pos in ([[510, 511, 512]], [[-3, -2, -1]]):
        with pytest.raises(ValueError, match=r"expected each in \[0, 512\)"):
            layer(hidden, torch.tensor(pos))


def test_decode_step_refuses_float_positions_positions_past_the_model_and_a_wrong_attend(model):
    tokens, H, r = torch.tensor([1, 2]), model.config.mla.num_attention_heads, model.config.mla.kv_lora_rank

    def attend(i, q_nope, q_pe, c_kv, k_pe):
        return torch.zeros(q_nope.shape)

    with pytest.raises(TypeError, match="integer tensor"):
        model.decode_step(tokens, torch.tensor([3.7, 3.2]), attend)
    with pytest.raises(ValueError, match=r"expected each in \[0, "):
        model.decode_step(tokens, torch.tensor([3, 10**6]), attend)
    with pytest.raises(ValueError, match=rf"attend \(layer 0\): expected o_latent \[2, {H}, {r}\].*"
                                         rf"got \[1, {H}, {r}\]"):
        model.decode_step(tokens, torch.tensor([3, 4]), lambda i, q, *_: torch.zeros(1, H, r))
    assert model.decode_step(tokens, torch.tensor([3, 4]), attend).shape == (2, model.config.vocab_size)


def test_generate_refuses_ids_that_are_not_ints_and_an_eos_outside_the_vocabulary(model):
    for ids, match in ((torch.tensor([1.9, 2.0]), "integer token ids"), ([True, 2], "integer token ids"),
                       ([1, 2.5], "integer token ids")):
        with pytest.raises(TypeError, match=match):
            model.generate(ids, 2)
    for eos in ("2", True, model.config.vocab_size):
        with pytest.raises(ValueError, match="eos_id must be None or a token id"):
            model.generate([1, 2], 2, eos_id=eos)


def test_configs_are_frozen_and_checked():
    cfg = MLAConfig.tiny()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_attention_heads = 0
    assert cfg.replace(num_attention_heads=2).num_attention_heads == 2
    for eps in (float("nan"), float("inf"), -1.0, 0.0):
        with pytest.raises(ValueError, match=r"rms_norm_eps: expected a float > 0, got"):
            TinyDeepseekConfig(rms_norm_eps=eps)
    for eps in ("1e-6", True):
        with pytest.raises(TypeError, match=r"rms_norm_eps: expected a float > 0, got"):
            TinyDeepseekConfig(rms_norm_eps=eps)
    for key in ("vocab_size", "num_hidden_layers", "intermediate_size"):
        with pytest.raises(ValueError, match=rf"{key}: expected an int >= 1, got 0"):
            TinyDeepseekConfig(**{key: 0})
        with pytest.raises(TypeError, match=rf"{key}: expected an int >= 1, got 2.0"):
            TinyDeepseekConfig(**{key: 2.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        TinyDeepseekConfig().num_hidden_layers = 3
    with pytest.raises(ValueError, match=r"YaRN divides by log\(rope_theta\), so it must be > 1, got 1.0"):
        MLAConfig.tiny(rope_theta=1.0, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 64})


@pytest.mark.parametrize("cls", [NaiveMLA, AbsorbedMLA])
def test_from_hf_computes_what_the_module_computes_whatever_the_configs_eps(cls):
    # transformers' latent norms keep eps 1e-6 whatever config.rms_norm_eps says (docs/sources.md)
    config = MLAConfig.tiny(rms_norm_eps=0.1)
    module, rotary = make_hf_attention(config, 3)
    assert module.kv_a_layernorm.variance_epsilon == 1e-6
    hidden, positions = torch.randn(2, 5, config.hidden_size), torch.arange(5)[None].expand(2, -1)
    ours = cls.from_hf(module)
    assert ours.config.rms_norm_eps == 1e-6
    with torch.no_grad():
        got, want = ours(hidden, positions), hf_forward(module, rotary, hidden, positions)
    assert (got - want).norm() / want.norm() < 1e-5


def test_load_hf_state_dict_refuses_what_is_not_a_finite_tensor():
    layer = AbsorbedMLA(MLAConfig.tiny())
    sd = layer.state_dict()
    with pytest.raises(TypeError, match="'o_proj.weight': expected a tensor, got list"):
        layer.load_hf_state_dict({**sd, "o_proj.weight": sd["o_proj.weight"].tolist()})
    with pytest.raises(ValueError, match="'o_proj.weight': expected finite weights"):
        layer.load_hf_state_dict({**sd, "o_proj.weight": torch.full_like(sd["o_proj.weight"], float("nan"))})


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc (Linux)")
def test_write_atomic_closes_its_file_and_removes_it_when_a_step_fails(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    before = _open_fds()

    def refuse(*_):
        raise PermissionError("chmod refused")

    monkeypatch.setattr(os, "chmod", refuse)
    with pytest.raises(PermissionError):
        write_atomic(target, "text")
    assert _open_fds() == before and list(tmp_path.iterdir()) == []


def test_task_and_cost_refuse_what_they_cannot_count():
    for facts in ((1, 12), (4, 2), (0, 0), [1, 3]):
        with pytest.raises(ValueError, match=r"facts: expected \(min, max\) ints with 1 <= min <= max <= 9"):
            task.make_dataset(4, 0, facts=facts)
    cfg = MLAConfig.deepseek_v3()
    for lens in ([4096.7], "4096", [True]):
        with pytest.raises(ValueError, match="context lengths must be a non-empty list of ints >= 1"):
            decode_cost(cfg, lens, "absorbed")
    with pytest.raises(ValueError, match="context lengths"):
        prefill_cost(cfg, 1.5, "naive")

