"""TinyDeepseek: shapes, prefill + decode == full forward, naive == absorbed, training run, weights."""

import json
import shutil

import pytest
import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET before anything imports triton)
from mla_edu.attention import latent_attention
from mla_edu.model import WEIGHTS_DIR, load_manifest, load_pretrained, task
from mla_edu.model.train import __main__ as train_cli
from mla_edu.model.tiny import TinyDeepseek, TinyDeepseekConfig


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = TinyDeepseek(TinyDeepseekConfig()).eval()
    with torch.no_grad():  # random init is near-uniform: sharpen it so the comparisons mean something
        for p in m.parameters():
            if p.dim() >= 2:
                p.mul_(5.0)
    return m


def test_latent_is_the_cutlass_contract(model):
    c = model.config.mla
    assert (c.kv_lora_rank, c.qk_rope_head_dim, c.kv_cache_dim) == (512, 64, 576)
    assert c.q_lora_rank is None and c.rope_scaling is None
    assert model.layers[0].attn.softmax_scale == pytest.approx((c.qk_nope_head_dim + c.qk_rope_head_dim) ** -0.5)


def test_forward_and_prefill_shapes(model):
    tokens = torch.randint(3, task.VOCAB_SIZE, (2, 9))
    logits = model(tokens)
    assert logits.shape == (2, 9, task.VOCAB_SIZE)
    logits2, latents = model.prefill(tokens)
    assert torch.equal(logits, logits2)
    assert len(latents) == model.config.num_hidden_layers
    for c_kv, k_pe in latents:
        assert c_kv.shape == (2, 9, 512) and k_pe.shape == (2, 9, 64)
    assert model.embed(tokens).shape == (2, 9, model.config.hidden_size)


def test_forward_is_causal(model):
    tokens = torch.randint(3, task.VOCAB_SIZE, (1, 12))
    changed = tokens.clone()
    changed[0, 8:] = (changed[0, 8:] + 1 - 3) % (task.VOCAB_SIZE - 3) + 3
    a, b = model(tokens), model(changed)
    assert torch.equal(a[:, :8], b[:, :8]) and not torch.allclose(a[:, 8:], b[:, 8:])


def test_prefill_then_decode_steps_equal_full_forward(model):
    """An engine's path (prefill latents, then decode_step with attention over the cache) == forward."""
    B, T, P = 3, 20, 11  # P prompt tokens prefilled, then T - P decode steps
    tokens = torch.randint(3, task.VOCAB_SIZE, (B, T))
    full = model(tokens)  # [B, T, vocab]
    _, latents = model.prefill(tokens[:, :P])
    cache = [[c_kv, k_pe] for c_kv, k_pe in latents]  # contiguous per layer: [B, L, 512], [B, L, 64]

    def attend(i, q_nope, q_pe, c_kv, k_pe):
        cache[i][0] = torch.cat([cache[i][0], c_kv[:, None]], 1)
        cache[i][1] = torch.cat([cache[i][1], k_pe[:, None]], 1)
        o = latent_attention(q_nope[:, None], q_pe[:, None], cache[i][0], cache[i][1],
                             model.layers[i].attn.softmax_scale)  # [B, 1, H, 512]
        return o[:, 0]

    for t in range(P, T):
        logits = model.decode_step(tokens[:, t], torch.full((B,), t), attend)  # [B, vocab]
        assert rel_err(logits, full[:, t]) < 1e-5


def test_generate_equals_greedy_on_full_forward(model):
    prompt = task.make_dataset(1, seed=3, max_len=140)[0].prompt_ids
    out = model.generate(prompt, max_new_tokens=6, eos_id=None)
    seq = list(prompt)
    for _ in range(6):
        seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    assert out == seq[len(prompt):]


@pytest.mark.parametrize("impl", ["naive", "sdpa"])
def test_attention_forms_agree(model, impl):
    """naive (paper order), sdpa (fused attention, used for training) and absorbed: one state dict, same logits."""
    other = TinyDeepseek(model.config, attn_impl=impl).eval()
    other.load_state_dict(model.state_dict())
    tokens = torch.randint(3, task.VOCAB_SIZE, (2, 30))
    ref = model(tokens)
    assert rel_err(other(tokens), ref) < 1e-5
    assert rel_err(other.prefill(tokens)[0], ref) < 1e-5


def test_bad_inputs(model):
    with pytest.raises(ValueError, match=r"tokens must be \[B, T\]"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(TypeError, match="int32/int64"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="token ids must be in"):
        model(torch.full((1, 4), task.VOCAB_SIZE))
    with pytest.raises(ValueError, match="positions must match"):
        model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="exceeds the context"):
        model.generate([task.BOS] * 510, max_new_tokens=3)
    with pytest.raises(ValueError, match="attn_impl"):
        TinyDeepseek(attn_impl="flash")
    with pytest.raises(TypeError, match="TinyDeepseekConfig"):
        TinyDeepseek(model.config.mla)
    with pytest.raises(ValueError, match="intermediate_size"):
        TinyDeepseekConfig(intermediate_size=0)
    naive = TinyDeepseek(model.config, attn_impl="naive")
    with pytest.raises(ValueError, match="absorbed"):
        naive.decode_step(torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long), None)


def test_config_round_trips_through_dict():
    cfg = TinyDeepseekConfig()
    again = TinyDeepseekConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again.to_dict() == cfg.to_dict()


def test_train_cli_writes_loadable_weights(tmp_path):
    out = tmp_path / "w"
    manifest = train_cli.main(["--steps", "3", "--batch", "4", "--hidden", "32", "--heads", "2",
                               "--head-dim", "8", "--intermediate", "32", "--curriculum", "64@0,eval@0.5",
                               "--eval-questions", "2", "--out", str(out)])
    assert manifest["training"]["steps"] == 3 and 0.0 <= manifest["eval"]["accuracy"] <= 1.0
    m = load_pretrained(out)
    assert not m.training and m.config.hidden_size == 32
    assert load_manifest(out)["sha256"] == manifest["sha256"]


def test_load_pretrained_rejects_a_corrupt_copy(tmp_path):
    shutil.copytree(WEIGHTS_DIR, tmp_path / "w")
    path = tmp_path / "w" / load_manifest()["weights"]
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_pretrained(tmp_path / "w")
    with pytest.raises(FileNotFoundError, match="no manifest"):
        load_pretrained(tmp_path / "nowhere")


def test_shipped_weights_are_accurate():
    """Greedy decoding of 48 questions of the default eval set (all page counts) with the shipped weights."""
    manifest = load_manifest()
    assert manifest["eval"]["questions"] == task.EVAL_SIZE and manifest["eval"]["accuracy"] >= 0.95
    model = load_pretrained()
    qs = task.default_eval_set()[:48]
    outs = [task.decode(model.generate(q.prompt_ids)) for q in qs]
    acc, invalid = task.score(outs, [q.answer for q in qs])
    assert acc >= 0.9 and invalid <= 0.05
