"""The mini serving engine: continuous batching, graph runner, backends in SGLang's protocol.

A randomly initialised small model is enough here: graph replay must equal eager decoding
token for token whatever the weights; accuracy on the task is the repro's business.
"""

import random

import pytest
import torch
from tiny_models import VOCAB, random_prompts, random_tiny_model

from mla_edu.serving import DEFECTS, MERGED_FIX, PRE_FIX, Engine, ServerArgs, parse_defects
from mla_edu.serving.backends.cutlass_mla import POISON_PAGE



@pytest.fixture(scope="module")
def model():
    return random_tiny_model(qk_rope_head_dim=16)


def prompts(seed, n, lo=20, hi=300):
    return random_prompts(seed, n, lo, hi)


def outputs(model, ps, max_new=6, **kw):
    eng = Engine(model, **kw)
    reqs = eng.generate(ps, max_new_tokens=max_new, stop_token_ids=())
    return [r.output_ids for r in reqs], eng, reqs


def test_prefill_matches_model(model):
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=2)
    tokens = torch.tensor(prompts(1, 1, 200, 200)[0], device=eng.runner.device)
    logits, latents = eng.runner.prefill_forward(tokens)
    ref_logits, ref_latents = eng.runner.model.prefill(tokens[None])  # the engine's copy, on its device
    assert torch.allclose(logits, ref_logits[0, -1], rtol=1e-4, atol=1e-3)
    for i, (c_kv, k_pe) in enumerate(ref_latents):
        assert torch.allclose(latents[i], torch.cat([c_kv[0], k_pe[0]], -1), rtol=1e-4, atol=1e-3)


def test_eager_engine_equals_model_generate_and_frees_everything(model):
    ps = prompts(2, 5, 100, 270)  # decode crosses page boundaries (128, 256)
    outs, eng, reqs = outputs(model, ps, max_new=4, disable_cuda_graph=True, max_running_requests=3)
    ref = [model.generate(p, max_new_tokens=4, eos_id=None) for p in ps]
    assert outs == ref
    assert eng.stats["max_running"] == 3  # continuous batching, never above the limit
    rn = eng.runner
    assert rn.allocator.available_pages() == rn.allocator.num_pages - 1  # every page came back
    assert rn.req_to_token_pool.available() == 3  # 5 requests went through 3 rows


@pytest.mark.parametrize("backend,poison_fill,splits", [
    ("cutlass_mla", False, 1),       # SGLang's merged fix
    ("cutlass_mla", True, -1),       # merged fix + poison fill, automatic splits
    ("triton", False, 1),
    ("triton", False, -1),
])
def test_graph_equals_eager_on_random_schedules(model, backend, poison_fill, splits):
    for seed in (3,):
        rng = random.Random(seed + splits)
        ps = prompts(seed, 5, 20, 270)
        kw = dict(attention_backend=backend, defects="none", poison_fill=poison_fill, num_kv_splits=splits,
                  context_length=384, max_running_requests=rng.choice([3, 4]),
                  row_order=rng.choice(["append", "prepend"]))
        eager, _, _ = outputs(model, ps, max_new=5, disable_cuda_graph=True, **kw)
        graph, eng, _ = outputs(model, ps, max_new=5, cuda_graph_bs=(2, 4), **kw)
        assert eng.stats["graph_steps"] == eng.stats["decode_steps"] > 0
        assert eng.stats["padded_rows"] > 0  # batches between capture sizes were padded
        assert graph == eager


def _one_step(model, defects, seed=5, bs=3, poison_fill=False):
    """Prefill ``bs`` requests of different page counts, then one decode step by graph and eagerly."""
    eng = Engine(model, attention_backend="cutlass_mla", defects=defects, poison_fill=poison_fill, cuda_graph_bs=(4,),
                 max_running_requests=4)
    reqs = eng.prefill_requests(prompts(seed, bs, 100, 380))
    batch = eng.make_batch(reqs)
    _, bad_g, logits_g = eng.runner.decode(batch)  # graph replay (padded to 4)
    eng.runner.backend.init_forward_metadata(batch)  # eager: a fresh contiguous table
    _, bad_e, logits_e = eng.runner.decode_forward(batch)
    return logits_g, bad_g, logits_e, bad_e, batch.seq_lens_cpu.tolist(), eng


def test_prefix_graph_wrong_for_rows_after_the_first(model):
    logits_g, bad_g, logits_e, _, _, eng = _one_step(model, "width,workspace")
    # decode_forward called outside no_grad (as here) is inference all the same: the pool it wrote to is not chained
    # into an autograd graph (it was, step after step, and the decode kernel then refused it)
    assert torch.is_grad_enabled() and not any(buf.requires_grad for buf in eng.runner.kv_cache.kv_buffer)
    assert not logits_e.requires_grad
    assert not bad_g.any()  # silent: no NaN, just wrong pages
    err = (logits_g - logits_e).abs().amax(dim=-1)  # [B]
    assert err[0] < 1e-4  # row 0 reads its own row of the table
    assert (err[1:] > 1e-2).all()  # every other row reads someone else's pages


def test_width_alone_is_loud_with_the_poison_fill(model):
    """Row b reads flat entries b .. b+n_b-1 of the poison-filled buffer (frozen row stride 1):
    NaN exactly when one of them lies past the pages of the row it falls in."""
    seen_nan = False
    for seed in (5, 9):
        logits_g, bad_g, logits_e, bad_e, lens, eng = _one_step(model, "width", seed, poison_fill=True)
        width = eng.runner.backend.cuda_graph_kv_indices.shape[1]
        n_pages = [-(-n // 128) for n in lens] + [1]  # the padded row (seq_len 1) has one page
        expect = []
        for b, n in enumerate(n_pages[:-1]):
            flat = range(b, b + n)
            expect.append(any(f // width >= len(n_pages) or f % width >= n_pages[f // width] for f in flat))
        assert bad_g.tolist() == expect and not bad_e.any()
        seen_nan |= any(expect)
        assert torch.allclose(logits_g[0], logits_e[0], rtol=1e-4, atol=1e-3)
    assert seen_nan  # the poison made stray reads loud


def test_fixed_graph_one_step_equals_eager(model):
    for poison_fill in (False, True):  # the merged fix, without and with the poison fill
        logits_g, bad_g, logits_e, *_ = _one_step(model, "none", poison_fill=poison_fill)
        assert not bad_g.any()
        assert torch.allclose(logits_g, logits_e, rtol=1e-4, atol=1e-3)


def test_poison_fill_and_stale_rows(model):
    eng = Engine(model, attention_backend="cutlass_mla", defects="none", poison_fill=True, cuda_graph_bs=(4,),
                 max_running_requests=4)
    assert eng.runner.backend.poison_fill
    table = eng.runner.backend.cuda_graph_kv_indices
    eng.generate(prompts(7, 2, 300, 310), max_new_tokens=2, stop_token_ids=())  # 3 pages
    eng.generate(prompts(6, 3, 130, 140), max_new_tokens=2, stop_token_ids=())  # 2 pages
    assert (table[:, 2:] == POISON_PAGE).all()  # past every request's pages: poison, not stale ids


def test_merged_fix_has_no_defect_and_leaves_stale_rows(model):
    """SGLang's merged fix (e58423b2b) fixes width and workspace and never resets the index rows:
    no defect is left, stale page ids stay in the buffer, and decoding is right anyway."""
    assert MERGED_FIX == frozenset() and PRE_FIX == {"width", "workspace"} and DEFECTS == ("width", "workspace")
    kw = dict(attention_backend="cutlass_mla", defects=MERGED_FIX, cuda_graph_bs=(4,), max_running_requests=4)
    eng = Engine(model, **kw)
    assert not eng.args.poison_fill and not eng.runner.backend.poison_fill  # off unless asked for
    long_ps, short_ps = prompts(7, 2, 300, 310), prompts(6, 3, 130, 140)  # 3 pages, then 2 pages
    eng.generate(long_ps, max_new_tokens=2, stop_token_ids=())
    got = [r.output_ids for r in eng.generate(short_ps, max_new_tokens=3, stop_token_ids=())]
    t = eng.runner.backend.cuda_graph_kv_indices
    assert (t[:2, 2] > 1).all()  # stale page ids of the earlier, longer requests stay
    assert not (t == POISON_PAGE).any()
    eager = Engine(model, disable_cuda_graph=True, **kw)
    assert got == [r.output_ids for r in eager.generate(short_ps, max_new_tokens=3, stop_token_ids=())]


@pytest.mark.parametrize("spec", ["stale", "width,stale", ("width", "workspace", "stale")])
def test_stale_is_no_longer_a_defect(spec):
    with pytest.raises(ValueError, match="'stale' is no longer a defect: SGLang's merged fix .*poison_fill=True"):
        ServerArgs(defects=spec)


def test_poison_fill_checked():
    with pytest.raises(TypeError, match="poison_fill: expected a bool, got 'yes'"):
        ServerArgs(poison_fill="yes")
    with pytest.raises(ValueError, match="poison_fill: applies to the cutlass_mla backend only"):
        ServerArgs(attention_backend="triton", poison_fill=True)
    assert ServerArgs(defects="none", poison_fill=True).poison_fill


def test_bad_requests_fail_alone(model):
    good = prompts(8, 4, 30, 60)
    bad = [[], list(range(3, 3 + 5)) * 200, [VOCAB + 5, 3], [3, -1]]
    mixed = [bad[0], good[0], bad[1], good[1], bad[2], good[2], bad[3], good[3]]
    eng = Engine(model, cuda_graph_bs=(2, 4), max_running_requests=2)
    reqs = eng.generate(mixed, max_new_tokens=4, stop_token_ids=())
    errs = [r.error for r in reqs]
    assert "empty prompt" in errs[0]
    assert "prompt too long" in errs[2] and "512" in errs[2]
    assert "token ids in [0, 40)" in errs[4] and "token ids" in errs[6]
    ok = [r.output_ids for r in reqs if r.error is None]
    alone, _, _ = outputs(model, good, max_new=4, cuda_graph_bs=(2, 4), max_running_requests=2)
    assert ok == alone
    assert eng.stats["max_running"] <= 2


@pytest.mark.parametrize("kw,msg", [
    (dict(attention_backend="flashinfer"), "attention_backend: expected one of"),
    (dict(defects="width,bogus"), "defects: expected names from"),
    (dict(max_running_requests=0), "max_running_requests: expected an int >= 1"),
    (dict(num_kv_splits=0), "num_kv_splits"),
    (dict(cuda_graph_bs=(0, 4)), "cuda_graph_bs"),
    (dict(row_order="random"), "row_order"),
])
def test_bad_server_args(kw, msg):
    with pytest.raises(ValueError, match=msg):
        ServerArgs(**kw)


def test_too_many_running_requests_for_the_pool(model):
    with pytest.raises(ValueError, match="too many running requests: max_running_requests=64 x 4 pages"):
        Engine(model, max_running_requests=64, max_total_pages=100, disable_cuda_graph=True)
    eng = Engine(model, max_running_requests=24, max_total_pages=100, disable_cuda_graph=True)  # 97 pages: fits
    assert eng.runner.allocator.num_pages == 97


def test_parse_defects():
    assert parse_defects("none") == frozenset()
    assert parse_defects("width, scale") == {"width", "scale"}
    assert parse_defects(None) == {"width", "workspace"}


def _record_logits(eng):
    """Wrap ``eng.runner.decode`` so each step's logits ``[B, vocab]`` are kept."""
    seen, decode = [], eng.runner.decode

    def record(*args, **kw):
        out = decode(*args, **kw)
        seen.append(out[2])
        return out

    eng.runner.decode = record
    return seen


@pytest.mark.parametrize("graph", [False, True])
def test_decode_steps_equal_the_model_on_the_full_prefix(model, graph):
    # each decode step's logits and greedy token are the model's on the whole prefix (prompt + tokens fed back):
    # the step attends over seq_len = position + 1 tokens, the fed-back one included. Short prompts, where one
    # token of the prefix moves the logits (over hundreds of tokens this random model hardly sees one), and one
    # of 127 tokens, whose 2nd step starts a page
    kw = dict(cuda_graph_bs=(4,)) if graph else dict(disable_cuda_graph=True)
    eng = Engine(model, defects="none", max_running_requests=4, **kw)
    seen = _record_logits(eng)
    reqs = eng.prefill_requests(prompts(12, 3, 1, 8) + prompts(13, 1, 127, 127))
    for _ in range(2):
        prefixes = [r.prompt_ids + r.output_ids for r in reqs]
        eng.decode_step(reqs, stop=set())
        for req, prefix, logits in zip(reqs, prefixes, seen[-1]):
            ref = eng.runner.model.prefill(torch.tensor(prefix, device=eng.runner.device)[None])[0][0, -1]
            assert torch.allclose(logits, ref, rtol=1e-4, atol=1e-3)
            assert req.output_ids[-1] == int(ref.argmax())
    assert eng.stats["graph_steps"] == (2 if graph else 0)


def test_padded_rows_write_to_the_pad_slot(model):
    """A replay with fewer requests than the captured size refills the padded rows: ``seq_lens`` with the backend's
    fill value, ``out_cache_loc`` with the reserved pad slot. Stale values would write the padded row's latent into
    the slot of a request that left, whose pages another request may own by now."""
    eng = Engine(model, defects="none", cuda_graph_bs=(4,), max_running_requests=4)
    gr, rn = eng.runner.graph_runner, eng.runner
    fill = rn.backend.get_cuda_graph_seq_len_fill_value()
    reqs = eng.prefill_requests(prompts(13, 4, 130, 200))  # 2 pages each
    for r in reqs:
        r.max_new_tokens = 10
    eng.decode_step(reqs, stop=set())  # 4 rows: no padding
    old_loc = int(gr.out_cache_loc[3])  # where request 3 wrote its fed-back token's latent
    assert old_loc != rn.pad_loc and int(gr.seq_lens[3]) != fill
    eng.free_req(reqs[3])
    new = eng.prefill_requests(prompts(14, 1, 250, 250))[0]  # takes request 3's pages (LIFO) and row
    slots = rn.req_to_token_pool.req_to_token[new.req_pool_idx, :new.seq_len].to(torch.int64)  # [250]
    assert old_loc in slots.tolist()  # the new request owns the slot the stale row would write
    before = [rn.kv_cache.kv_buffer[i].view(-1, rn.kv_cache.kv_buffer[i].size(-1))[slots].clone()
              for i in range(rn.num_layers)]
    eng.decode_step(reqs[:3], stop=set())  # 3 rows, padded to 4
    assert eng.stats["padded_rows"] == 1
    assert int(gr.out_cache_loc[3]) == rn.pad_loc
    assert int(gr.seq_lens[3]) == int(gr.seq_lens_cpu[3]) == fill
    for i in range(rn.num_layers):
        after = rn.kv_cache.kv_buffer[i].view(-1, rn.kv_cache.kv_buffer[i].size(-1))[slots]
        assert torch.equal(after, before[i]), f"layer {i}: the padded row overwrote the new request's latents"


def test_splits_captured_are_what_the_graphs_froze_not_the_eager_steps(model):
    # the pre-fix capture freezes max_seq_len = 128 (one page): one split in every graph, whatever eager steps take
    # later; without the width defect a graph for few requests on the full width takes more
    kw = dict(attention_backend="cutlass_mla", num_kv_splits=-1, cuda_graph_bs=(1, 4), max_running_requests=4,
              context_length=1024)
    pre = Engine(model, defects="width,workspace", **kw)
    assert pre.runner.backend.splits_captured == {1}
    reqs = pre.prefill_requests(prompts(7, 1, 300, 380))
    pre.runner.backend.init_forward_metadata(pre.make_batch(reqs))
    pre.runner.decode_forward(pre.make_batch(reqs))  # an eager step at the real width: more splits
    assert max(pre.runner.backend.splits_used) > 1 and pre.runner.backend.splits_captured == {1}
    fixed = Engine(model, defects="none", **kw)
    assert max(fixed.runner.backend.splits_captured) > 1
    assert Engine(model, disable_cuda_graph=True, max_running_requests=2).runner.backend.splits_captured == frozenset()
