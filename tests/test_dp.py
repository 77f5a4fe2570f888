"""The seed's configuration: W from --context-length, the bug-era kernel's scale, DP attention."""

from __future__ import annotations

import math

import pytest
import torch

from mla_edu import kernels
from mla_edu.serving import SEED_PRE_FIX, DPEngine, Engine, ServerArgs, page_table_width, run_dp_multiprocess
from mla_edu.serving.backends import BUG_ERA_SM_SCALE
from mla_edu.serving.graph_runner import GraphRunner
from tiny_models import random_tiny_model, random_prompts


def test_width_from_context_length():
    assert page_table_width(4096) == 33  # the seed's --context-length 4096
    assert ServerArgs(context_length=4096).page_table_width == 33
    engine = Engine(random_tiny_model(), context_length=4096, cuda_graph_bs=(2,), max_running_requests=2,
                    defects=SEED_PRE_FIX)
    assert engine.runner.backend.cuda_graph_kv_indices.shape == (2, 33)


def test_dp_args_checked():
    assert ServerArgs(max_running_requests=128, dp_size=8, enable_dp_attention=True).max_running_requests_per_rank == 16
    with pytest.raises(ValueError, match="dp_size > 1"):
        ServerArgs(dp_size=1, enable_dp_attention=True)
    with pytest.raises(ValueError, match="enable_dp_attention"):
        ServerArgs(dp_size=2)
    with pytest.raises(ValueError, match="split_kv = 1"):
        ServerArgs(defects="scale", num_kv_splits=-1)


def test_scale_defect_uses_bug_era_scale(one_thread):
    """Eager decode with ``scale`` equals the reference with 1/sqrt(192), not the model's scale."""
    model = random_tiny_model()
    assert BUG_ERA_SM_SCALE == 1 / math.sqrt(192)
    assert abs(model.layers[0].attn.softmax_scale - BUG_ERA_SM_SCALE) > 0.05
    prompts = random_prompts(1, 3, 20, 300)
    outs = {}
    for defects in ("scale", "none"):
        engine = Engine(model, disable_cuda_graph=True, max_running_requests=4, defects=defects)
        reqs = engine.prefill_requests(prompts)
        batch = engine.make_batch(reqs)
        be = engine.runner.backend
        be.init_forward_metadata(batch)
        torch.manual_seed(0)
        mla = model.config.mla
        dev = be.kv_cache.kv_buffer[0].device  # the engine's device (cuda on a GPU machine)
        q_nope = torch.randn(3, mla.num_attention_heads, mla.kv_lora_rank).to(dev)
        q_pe = torch.randn(3, mla.num_attention_heads, mla.qk_rope_head_dim).to(dev)
        out = be.forward_decode(q_nope, q_pe, 0, batch)
        table = be.forward_metadata.block_kv_indices
        refs = {s: kernels.mla_decode(q_nope, q_pe, be.kv_cache.kv_buffer[0], batch.seq_lens, table,
                                      be.forward_metadata.workspace, s, impl="reference")
                for s in (BUG_ERA_SM_SCALE, be.sm_scale)}
        outs[defects] = (out, refs)
    out, refs = outs["scale"]
    torch.testing.assert_close(out, refs[BUG_ERA_SM_SCALE], rtol=1e-4, atol=1e-5)
    out_fixed, refs_fixed = outs["none"]
    torch.testing.assert_close(out_fixed, refs_fixed[model.layers[0].attn.softmax_scale], rtol=1e-4, atol=1e-5)
    assert (out - out_fixed).abs().max() > 1e-2  # the scale changes the output


def _dp(model, **kw):
    return {**dict(dp_size=2, enable_dp_attention=True, max_running_requests=4, cuda_graph_bs=(2, 4),
                   defects="none", context_length=512), **kw}


def test_dp_graph_size_agreed_and_rows(monkeypatch, one_thread):
    """Every replay of a step uses the size that fits the SUM of the ranks' tokens; an idle rank
    replays too; no rank runs more than max_running_requests // dp rows."""
    model = random_tiny_model()
    seen = []
    real = GraphRunner.replay

    def spy(self, batch, bs=None):
        seen.append((id(self), batch.batch_size, bs))
        return real(self, batch, bs)

    monkeypatch.setattr(GraphRunner, "replay", spy)
    dp = DPEngine(model, **_dp(model))
    steps_seen = []
    real_run = type(dp.ranks[0]).run

    def run(self, global_num_tokens, can_cuda_graph):
        n = len(seen)
        real_run(self, global_num_tokens, can_cuda_graph)
        steps_seen.append((self.rank, list(global_num_tokens), can_cuda_graph, seen[n:]))

    monkeypatch.setattr(type(dp.ranks[0]), "run", run)
    prompts = random_prompts(3, 5, 20, 300)  # 3 to rank 0 (2 at a time), 2 to rank 1: rank 1 idles at the end
    reqs = dp.generate(prompts, max_new_tokens=6, stop_token_ids=())
    assert all(r.finished_reason == "length" for r in reqs)
    gr = dp.ranks[0].engine.runner.graph_runner
    replays = [(rank, tokens, s) for rank, tokens, can, s in steps_seen if s]
    assert replays, "no graph replay happened"
    idle = 0
    for rank, tokens, s in replays:
        [(_, raw, bs)] = s
        assert bs == gr.padded_size(sum(tokens)) and raw == tokens[rank] <= 4
        idle += raw == 0
    assert idle > 0, "no idle rank joined a graph step"
    # no graph while a rank prefills
    assert all(not s for rank, tokens, can, s in steps_seen if not can)
    # each request's record of its decode steps: every one replayed (no rank decoded while another prefilled)
    assert all(r.replayed == [True] * 5 and len(r.rows) == 5 for r in reqs)
    # one engine, 3 rows and a graph for 2 only: every step eager
    eng = Engine(model, max_running_requests=4, cuda_graph_bs=(2,), defects="none", context_length=512)
    assert all(r.replayed == [False] * 2 for r in eng.generate(prompts[:3], max_new_tokens=3, stop_token_ids=()))
    assert max(max(r.rows) for r in reqs) < 2


def test_dp_multiprocess_matches_lockstep(one_thread):
    model = random_tiny_model()
    prompts = random_prompts(4, 5, 20, 300)
    lock = DPEngine(model, **_dp(model, defects=SEED_PRE_FIX, poison_fill=True)).generate(prompts, max_new_tokens=4,
                                                                                   stop_token_ids=())
    multi, steps = run_dp_multiprocess(model, prompts, max_new_tokens=4, stop_token_ids=(),
                                       **_dp(model, defects=SEED_PRE_FIX, poison_fill=True))
    assert [r.output_ids for r in multi] == [r.output_ids for r in lock]
    assert [r.rows for r in multi] == [r.rows for r in lock]
    assert [r.replayed for r in multi] == [r.replayed for r in lock]  # which decode steps replayed a graph
    assert sum(s["graph"] for s in steps) > 0 and any(any(r.replayed) for r in lock)


def test_tiny_yarn_variant_needs_the_scale():
    from mla_edu.config import yarn_get_mscale
    from mla_edu.model import load_pretrained, load_manifest, VARIANTS

    model = load_pretrained("tiny-yarn")  # checks the weights' and the config's sha256
    mla = model.config.mla
    assert mla.rope_scaling["factor"] == 40 and load_manifest(VARIANTS["tiny-yarn"])["eval"]["accuracy"] >= 0.95
    mscale = yarn_get_mscale(40.0, 1.0)
    assert abs(mscale - 1.3689) < 1e-4
    assert math.isclose(model.layers[0].attn.softmax_scale, mscale ** 2 / math.sqrt(mla.qk_head_dim))
    assert model.layers[0].attn.softmax_scale / BUG_ERA_SM_SCALE > 2.8


def test_dp_decode_runs_eagerly_while_a_rank_prefills(one_thread):
    """SGLang's ranks take the minimum of can_cuda_graph: a prefill anywhere makes every decode eager."""
    dp = DPEngine(random_tiny_model(), **_dp(None))
    reqs, good = dp.ranks[0].engine.new_requests(random_prompts(5, 3, 20, 100), 8)
    r0, r1 = dp.ranks

    def step():
        info = [r.schedule() for r in dp.ranks]
        for r in dp.ranks:
            r.run([n for n, _ in info], min(c for _, c in info))
        return info

    r0.waiting.extend(good[:2])
    assert step() == [(sum(len(r.prompt_ids) for r in good[:2]), 0), (0, 1)]  # rank 0 prefills, rank 1 idle
    r1.waiting.append(good[2])
    info = step()  # rank 0 decodes while rank 1 prefills
    assert info[0] == (2, 1) and info[1] == (len(good[2].prompt_ids), 0)
    assert r0.steps["eager_for_extend"] == 1 and r0.steps["graph"] == 0
    assert step() == [(2, 1), (1, 1)]  # both decode: each replays the graph for 2 + 1 tokens
    assert r0.steps["graph"] == r1.steps["graph"] == 1
    assert all(len(r.output_ids) == n for r, n in zip(good, (3, 3, 2)))


def test_at_w33_a_wrong_row_reads_row_0s_own_entries(one_thread):
    """The repro's mechanism line for the width defect at the seed's W = 33: under the frozen narrow view
    (size(1) = 1, so row stride 1) row b reads flat entries b..b+n-1: row 0's own entries, past its pages
    its unwritten tail (the initial 1 here), never another row's."""
    from mla_edu.serving import PRE_FIX

    engine = Engine(random_tiny_model(), context_length=4096, cuda_graph_bs=(4,), max_running_requests=4,
                    defects=PRE_FIX)
    reqs = engine.prefill_requests(random_prompts(7, 3, 200, 500))  # 2 to 4 pages each
    batch = engine.make_batch(reqs)
    engine.runner.decode(batch)  # a graph replay: the replay hook refilled the buffer's rows
    assert engine.runner.graph_runner.can_run(batch.batch_size)  # it was a replay, of the graph for 4
    full = engine.runner.backend.cuda_graph_kv_indices  # [4, 33]
    view = full[:4, :1]  # what capture froze: max_seqlen_pad from the dummy lengths (1 page)
    n_pages = [-(-int(n) // 128) for n in batch.seq_lens.tolist()]
    read = kernels.pages_read(view, n_pages, row_stride=view.size(1))
    row0 = full[0].tolist()
    for b, n in enumerate(n_pages):
        assert read[b] == row0[b:b + n]  # inside row 0's 33 entries
    assert read[0] == reqs[0].pages and any(r != q.pages for r, q in zip(read[1:], reqs[1:]))
    assert row0[n_pages[0]:] == [1] * (33 - n_pages[0])  # row 0's tail: the buffer's initial 1
    assert any(b + n > n_pages[0] for b, n in enumerate(n_pages))  # some row reads into that tail
