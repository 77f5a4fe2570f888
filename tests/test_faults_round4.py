"""Faults, round four (the fault-injection review): one test per fault, named after it.

Bad input gets a clear error naming what was expected and what came, before any page, row or slot is taken; an
exception or an interrupt leaves the objects usable, their bookkeeping as it was and no page leaked.
"""

import dataclasses

import pytest
import torch
from tiny_models import pools, random_prompts, random_tiny_model

from mla_edu.graphs import check
from mla_edu.kvcache import LatentKVCache, PagedAllocator, fill_page_table
from mla_edu.kvcache.pool import slots_for
from mla_edu.serving import Engine, ServerArgs
from mla_edu.serving.batch import ForwardBatch
from mla_edu.serving.dp import DPEngine, run_dp_multiprocess

KW = dict(cuda_graph_bs=(2, 4), max_running_requests=4, defects="none", context_length=64)


@pytest.fixture(scope="module")
def model():
    return random_tiny_model()


# 1. stop_token_ids: DPEngine and run_dp_multiprocess check them as Engine does (a str never matched a token)
@pytest.mark.parametrize("stop", ["7", 5, [2.0]])
def test_dp_generate_checks_stop_token_ids(model, stop):
    dp = DPEngine(model, dp_size=2, enable_dp_attention=True, **KW)
    with pytest.raises(TypeError, match="stop_token_ids: expected a list of ints"):
        dp.generate([[3, 4, 5]], 3, stop_token_ids=stop)
    with pytest.raises(TypeError, match="stop_token_ids: expected a list of ints"):  # before any process starts
        run_dp_multiprocess(model, [[3, 4, 5]], stop_token_ids=stop, dp_size=2, enable_dp_attention=True, **KW)


# 2. prefill_requests runs the requests' check: a float token was prefilled as its int, others hit torch internals
@pytest.mark.parametrize("prompt,msg", [
    ([1.5], "expected int token ids, got float 1.5 at position 0"),
    ([], "expected at least one token, got an empty prompt"),
    ([-1], r"expected token ids in \[0, "),
    ([5] * 64, "prompt too long: 64 prompt tokens \\+ new tokens 1 exceed the context length 64"),
    ("abc", "expected a list of int token ids, got str"),
])
def test_prefill_requests_checks_each_prompt(model, prompt, msg):
    eng = Engine(model, **KW)
    before = pools(eng)
    with pytest.raises(ValueError, match=r"prefill_requests: prompts\[1\]: .*" + msg):
        eng.prefill_requests([[3, 4], prompt])
    assert pools(eng) == before
    reqs = eng.prefill_requests([[5] * 63])  # room for the one decode step a by-hand batch needs
    eng.decode_step(reqs, set())
    assert reqs[0].seq_len == 64


# 3. the prefill cache: an engine of another model or dtype sharing it computed nothing and read the other's logits
def test_prefill_cache_keyed_by_model_and_dtype(model):
    ps = random_prompts(1, 5, 5, 40)
    other = random_tiny_model(seed=1)
    cache = {}
    Engine(model, prefill_cache=cache, **KW).generate(ps, 6, ())
    for m, extra in ((other, {}), (model, {"dtype": "bfloat16"})):
        shared = [r.output_ids for r in Engine(m, prefill_cache=cache, **KW, **extra).generate(ps, 6, ())]
        fresh = [r.output_ids for r in Engine(m, **KW, **extra).generate(ps, 6, ())]
        assert shared == fresh
    hits = len(cache)
    Engine(model, prefill_cache=cache, **KW).generate(ps, 6, ())  # the same model and dtype: hits only
    assert len(cache) == hits


# 4. slots_for takes pages only after every check, and gives them back on any exception or interrupt
def test_slots_for_leaks_no_page_on_a_bad_row():
    a = PagedAllocator(8, 4)
    free = list(a._free)
    with pytest.raises(ValueError, match="req_to_token_row: expected a writable row, got an expanded view"):
        a.slots_for(torch.zeros(1, dtype=torch.int32).expand(16), 0, 9)
    assert a._free == free


def test_slots_for_gives_pages_back_on_interrupt(monkeypatch):
    a = PagedAllocator(8, 4)
    free = list(a._free)
    row = torch.zeros(16, dtype=torch.int32)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch.Tensor, "to", interrupt)
    with pytest.raises(KeyboardInterrupt):
        a.slots_for(row, 0, 9)
    monkeypatch.undo()
    assert a._free == free and not a._used  # the free list as it was, order too
    assert a.slots_for(row, 0, 9).tolist() == slots_for(torch.zeros(16, dtype=torch.int32), 0, 9,
                                                        PagedAllocator(8, 4)).tolist()


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.float32])
def test_slots_for_refuses_a_narrow_row(dtype):
    a = PagedAllocator(300, 1)
    a.alloc_pages(250)
    with pytest.raises(TypeError, match=f"req_to_token_row: expected an int32 or int64 tensor .*got {dtype}"):
        a.slots_for(torch.zeros(400, dtype=dtype), 0, 3)  # int8 wrapped slot 251 to -5
    assert a.available_pages() == 49


def test_slots_for_refuses_to_continue_a_row_never_filled():
    a = PagedAllocator(8, 4)
    row = torch.zeros(16, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"req_to_token_row\[0:2\]: .*got page 0, the reserved padding page"):
        a.slots_for(row, 2, 6)  # handed out slots 2, 3 on the padding page
    assert a.available_pages() == 7 and row.tolist() == [0] * 16


def test_pages_of_bounded_by_the_row():
    a = PagedAllocator(8, 4)
    row = torch.zeros(16, dtype=torch.int32)
    with pytest.raises(ValueError, match="length: expected at most the row's 16 positions .*got 1000"):
        a.pages_of(row, 1000)
    assert a.pages_of(row, 16).tolist() == [0, 0, 0, 0]


# 5. decode_step records a step only once the decode returned, and checks its arguments before any slot
@pytest.mark.parametrize("graph_bs,eager,msg", [
    (2, False, r"replay: expected a captured size >= 3 from \[2, 4\], got 2"),
    (4, True, "decode: pass graph_bs or eager=True, not both"),
])
def test_decode_step_checks_before_slots(model, graph_bs, eager, msg):
    eng = Engine(model, **KW)
    reqs = eng.prefill_requests([[5, 6], [7, 8], [9, 10]])
    before = pools(eng), eng.runner.req_to_token_pool.req_to_token.clone(), [list(r.pages) for r in reqs]
    with pytest.raises(ValueError, match=msg):
        eng.decode_step(reqs, set(), graph_bs=graph_bs, eager=eager)
    assert pools(eng) == before[0] and [r.pages for r in reqs] == before[2]
    assert torch.equal(eng.runner.req_to_token_pool.req_to_token, before[1])  # no slot assigned
    assert [r.rows for r in reqs] == [[], [], []] and [r.replayed for r in reqs] == [[], [], []]
    assert eng.stats["graph_steps"] == eng.stats["decode_steps"] == 0


def test_decode_step_interrupted_records_nothing(model, monkeypatch):
    eng = Engine(model, **KW)
    reqs = eng.prefill_requests([[5, 6], [7, 8]])

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(eng.runner, "decode", interrupt)
    with pytest.raises(KeyboardInterrupt):
        eng.decode_step(reqs, set())
    monkeypatch.undo()
    assert [r.rows for r in reqs] == [[], []] and [r.replayed for r in reqs] == [[], []]
    assert eng.stats == {"decode_steps": 0, "max_running": 0, "graph_steps": 0, "padded_rows": 0}
    eng.decode_step(reqs, set())
    assert [r.rows for r in reqs] == [[0], [1]] and [r.replayed for r in reqs] == [[True], [True]]
    assert eng.stats["graph_steps"] == eng.stats["decode_steps"] == 1


# 6. ServerArgs is checked once: a field set afterwards ran unchecked (row_order="sideways" ran as prepend)
def test_server_args_frozen_after_validation():
    args = ServerArgs(**KW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.row_order = "sideways"
    with pytest.raises(ValueError, match="row_order: expected one of"):
        dataclasses.replace(args, row_order="sideways")
    assert dataclasses.replace(args, cuda_graph_bs=[4, 2]).cuda_graph_bs == (2, 4)


# 7. check() puts the caller's buffers back (replays poisoned them with NaN) and reports a NaN output as NaN
def test_check_restores_buffers_and_says_nan():
    x, t2 = torch.zeros(4), torch.arange(4.0)

    def make(gen, trial):
        return {"x": torch.rand(4, generator=gen)}

    rep = check(lambda: x * 2 + t2, make, static_inputs={"x": x}, persistent=[t2], mode="emulated", n_trials=2)
    assert not rep.ok and "max abs err nan" in rep.failure
    assert t2.tolist() == [0.0, 1.0, 2.0, 3.0] and x.tolist() == [0.0] * 4


def test_check_restores_buffers_on_interrupt():
    x, t2 = torch.zeros(4), torch.arange(4.0)
    n = [0]

    def make(gen, trial):
        n[0] += 1
        if n[0] == 3:  # trial 1, after trial 0's replays poisoned t2
            raise KeyboardInterrupt
        return {"x": torch.rand(4, generator=gen)}

    with pytest.raises(KeyboardInterrupt):
        check(lambda: x * 2, make, static_inputs={"x": x}, persistent=[t2], mode="emulated", n_trials=3)
    assert t2.tolist() == [0.0, 1.0, 2.0, 3.0] and x.tolist() == [0.0] * 4


# 8. clear errors instead of torch internals
def test_replay_past_the_largest_graph_names_the_sizes(model):
    eng = Engine(model, **KW)
    b = eng.make_batch(eng.prefill_requests([[5, 6], [7, 8], [9, 10]]))
    big = ForwardBatch(5, *(torch.cat([t, t])[:5] for t in (b.input_ids, b.positions, b.req_pool_indices,
                                                               b.seq_lens, b.out_cache_loc, b.seq_lens_cpu)))
    with pytest.raises(ValueError, match=r"at most max_bs=4 rows \(cuda_graph_bs \(2, 4\)\), got 5"):
        eng.runner.graph_runner.replay(big)


def test_decode_step_empty_batch(model):
    with pytest.raises(ValueError, match="running: expected at least one request, got an empty batch"):
        Engine(model, **KW).decode_step([], set())


@pytest.mark.parametrize("graphs", [True, False])
def test_decode_past_the_context_names_the_request(model, graphs):
    eng = Engine(model, **{**KW, "disable_cuda_graph": not graphs})
    reqs = eng.prefill_requests([[5] * 61])
    reqs[0].max_new_tokens = 100
    for _ in range(3):
        eng.decode_step(reqs, set())
    before = pools(eng), list(reqs[0].pages), list(reqs[0].rows)
    with pytest.raises(ValueError, match=r"running\[0\]: .*got request \d+ with seq_len=64 = context_length 64"):
        eng.decode_step(reqs, set())
    assert (pools(eng), reqs[0].pages, reqs[0].rows) == before


@pytest.mark.parametrize("name", ["seq_lens", "positions", "out_cache_loc"])
def test_forward_batch_refuses_float_tensors(name):
    ints = dict(input_ids=torch.zeros(2, dtype=torch.int64), positions=torch.zeros(2, dtype=torch.int64),
                req_pool_indices=torch.zeros(2, dtype=torch.int32), seq_lens=torch.ones(2, dtype=torch.int32),
                out_cache_loc=torch.zeros(2, dtype=torch.int64))
    ForwardBatch(2, **ints)
    with pytest.raises(TypeError, match=f"ForwardBatch.{name}: expected an integer tensor, got torch.float32"):
        ForwardBatch(2, **{**ints, name: ints[name].float()})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_latent_cache_on_cuda_without_cuda():
    with pytest.raises(ValueError, match="device: expected cpu \\(CUDA is not available here.*got 'cuda'"):
        LatentKVCache(1, 4, 4, kv_lora_rank=8, qk_rope_head_dim=4, device="cuda")


# 9. fill_page_table cut a request needing more pages than the table has columns
@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_fill_page_table_refuses_a_too_narrow_table(impl):
    if impl == "triton":
        from mla_edu.device import TRITON_INTERPRET, triton_available
        if not (triton_available() and TRITON_INTERPRET):
            pytest.skip("Triton's interpreter runs the CPU tensors")
    req_to_token = torch.arange(16, dtype=torch.int32).view(2, 8)
    table = torch.full((2, 1), 7, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"seq_lens\[1\]: expected at most 4 tokens .*got 5 \(2 pages\)"):
        fill_page_table(req_to_token, torch.tensor([0, 1]), torch.tensor([3, 5]), table, 4, impl=impl)
    assert table.tolist() == [[7], [7]]  # refused before any write


def test_prefill_refuses_a_request_it_cannot_take_and_gives_back_what_a_failed_forward_took(model, monkeypatch):
    """``Engine.prefill`` (public): a request prefilled twice took a second row and lost the first for good, and a
    bad token id raised from the embedding with the row and page still held, until the engine served no more."""
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=2, context_length=64)
    free, want = pools(eng), eng.generate([[5, 6]], 2)[0].output_ids
    req = eng.new_req([5, 6, 7])
    eng.prefill(req)
    held = pools(eng)
    with pytest.raises(ValueError, match="expected a new request .* req_pool_idx=0, 1 pages, 1 output tokens"):
        eng.prefill(req)
    assert pools(eng) == held
    eng.free_req(req)
    with pytest.raises(ValueError, match=r"prompt: expected token ids in \[0, "):
        eng.prefill(eng.new_req([5, 10**6]))
    with pytest.raises(TypeError, match="expected a Req, got list"):
        eng.prefill([5, 6])
    assert pools(eng) == free

    def fail(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(eng.runner, "prefill", fail)
    again = eng.new_req([5, 6])
    with pytest.raises(KeyboardInterrupt):
        eng.prefill(again)
    assert pools(eng) == free and again.req_pool_idx is None and again.pages == []
    monkeypatch.undo()
    eng.prefill(again)  # the same request, prefilled once the forward works
    assert again.output_ids == want[:1]
    eng.free_req(again)
    assert pools(eng) == free and eng.generate([[5, 6]], 2)[0].output_ids == want


def test_an_engine_refuses_another_engines_request_even_where_its_row_number_is_in_use(model):
    """Two engines each hand out row 0 and page 1: engine B decoded A's request into B's own row and page
    (overwriting B's request's cache), then freed them under B's request, whose row the next prefill took again."""
    a, b = (Engine(model, disable_cuda_graph=True, max_running_requests=2, context_length=64) for _ in range(2))
    ra, rb = a.prefill_requests([[5, 6]])[0], b.prefill_requests([[7, 8, 9]])[0]
    assert (ra.req_pool_idx, ra.pages) == (rb.req_pool_idx, rb.pages)  # the same numbers, two engines
    before = pools(b), b.runner.req_to_token_pool.req_to_token.clone()
    with pytest.raises(ValueError, match="expected a request prefilled by this engine"):
        b.decode_step([ra], set())
    with pytest.raises(ValueError, match="another engine"):
        b.free_req(ra)
    assert pools(b) == before[0] and torch.equal(b.runner.req_to_token_pool.req_to_token, before[1])
    a.decode_step([ra], set())  # its own engine still decodes it
    assert len(ra.output_ids) == 2


def test_assign_slots_refuses_a_row_not_allocated(model):
    """``ModelRunner.assign_slots`` wrote row -1 (the pool's last row, another request's or none) and took
    page 2.7 as page 2; it now refuses both, and writes nothing."""
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=2, context_length=64)
    table = eng.runner.req_to_token_pool.req_to_token.clone()
    for row in (-1, 0, True):
        with pytest.raises(ValueError, match="expected an allocated req_to_token row"):
            eng.runner.assign_slots(row, [2], 0, 2)
    row = eng.runner.req_to_token_pool.alloc(1)[0]
    with pytest.raises(TypeError, match="must hold ints"):
        eng.runner.assign_slots(row, [2.7], 0, 2)
    assert torch.equal(eng.runner.req_to_token_pool.req_to_token, table)
    page = eng.runner.page_size
    assert eng.runner.assign_slots(row, [2], 0, 2).tolist() == [2 * page, 2 * page + 1]


def test_a_request_past_the_models_positions_is_refused_whatever_the_context_length(model):
    """A context length above the model's ``max_position_embeddings`` is accepted (the seed's 4096 on a
    512-position model, for the page table's width), but a request that would reach past the model's positions is
    refused, by ``generate`` and by a hand-driven decode, as ``model.generate`` refuses it."""
    limit = model.config.mla.max_position_embeddings
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=2, context_length=4 * limit)
    free = pools(eng)
    long = eng.generate([[5] * (limit - 1)], max_new_tokens=2)[0]
    assert long.finished_reason == "error" and f"max_position_embeddings {limit}" in long.error
    assert eng.generate([[5] * (limit - 2)], max_new_tokens=2, stop_token_ids=())[0].error is None
    req = eng.prefill_requests([[5] * (limit - 1)])[0]  # room for one decode step: position limit - 1
    eng.decode_step([req], set())
    with pytest.raises(ValueError, match=f"max_position_embeddings {limit}"):
        eng.decode_step([req], set())
    eng.free_req(req)
    assert pools(eng) == free
    with pytest.raises(ValueError, match="exceeds the context"):
        model.generate([5] * limit, 1)
