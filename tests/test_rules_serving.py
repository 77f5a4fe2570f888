"""The serving rules the case study's story depends on, each pinned so that bending it fails a test.

Each test names its rule and, in its docstring, the one-line change (a "mutation") that was applied to a
copy of the package to see it fail (``python /tmp/.../mutate.py``: copy, replace one line, run this file).
The scenario of the DP tests is computed by hand below, step by step; the tiny random model's tokens for
these prompts are part of it (``PROMPTS``, ``OUTPUTS``: checked first, so a change of the model fails loudly
there and not as a puzzling schedule).
"""

from __future__ import annotations

import pytest

from mla_edu.serving import DPEngine, Engine, run_dp_multiprocess
from mla_edu.serving.graph_runner import GraphRunner
from mla_edu.util import PAGE_SIZE, cdiv
from tiny_models import random_prompts, random_tiny_model

# every engine here on the CPU (float32, the graph emulator), where the tokens below were read, on any machine
CPU = dict(defects="none", context_length=512, device="cpu")
# DP attention: 2 ranks of at most 2 requests, graphs for 2 and 4 rows
DP = dict(dp_size=2, enable_dp_attention=True, max_running_requests=4, cuda_graph_bs=(2, 4), **CPU)
PROMPTS = random_prompts(0, 5, 1, 3)  # short prompts: 1 to 3 tokens
STOP = 21
# the 4 tokens each prompt's greedy decode gives without a stop token (eager, one engine)
OUTPUTS = [[24, 21, 36, 35], [37, 30, 30, 30], [37, 37, 37, 37], [7, 11, 21, 21], [6, 7, 3, 32]]
# The schedule with stop token 21 and max_new_tokens 4, by hand. Round robin: rank 0 gets p0, p2, p4; rank 1
# gets p1, p3. Tokens are (n, can_cuda_graph) as the ranks all-gather them.
#   step 1: rank 0 prefills p0, p2; rank 1 prefills p1, p3                 -> both extend, no graph
#   step 2: both decode (2 + 2 rows, can 1 + 1): graph for 4. p0 emits 21 and stops
#   step 3: rank 0 prefills p4 (can 0) while rank 1 decodes p1, p3 (can 1): the minimum is 0, so rank 1's
#           decode runs EAGERLY (SGLang: no graph while any rank prefills). p3 emits 21 and stops
#   step 4: rank 0 decodes p2, p4 (p4 appended: row 1), rank 1 decodes p1: 2 + 1 = 3 rows -> graph for 4;
#           p1 reaches 4 tokens
#   step 5: rank 0 decodes p2, p4 (p2 reaches 4 tokens); rank 1 is idle and joins with an empty batch:
#           2 + 0 rows -> graph for 2, both ranks
#   step 6: rank 0 decodes p4 (row 0), which reaches 4 tokens; rank 1 idle: graph for 2, both
EXPECTED_OUTPUT = [[24, 21], [37, 30, 30, 30], [37, 37, 37, 37], [7, 11, 21], [6, 7, 3, 32]]
EXPECTED_REPLAYED = [[True], [True, False, True], [True, True, True], [True, False], [True, True, True]]
EXPECTED_ROWS = [[0], [0, 0, 0], [1, 0, 0], [1, 1], [1, 1, 0]]
# each rank's engine: decode steps, graph steps, padded rows (the idle batch of steps 5-6 is not an engine
# decode step): rank 0 pads 2 + 2 + 0 + 1 rows in steps 2, 4, 5, 6; rank 1 2 + 3 in steps 2 and 4
EXPECTED_STATS = [(4, 4, 5), (3, 2, 5)]
EXPECTED_STEPS = [dict(extend=2, decode=4, idle=0, graph=4, eager_for_extend=0, too_big=0),
                  dict(extend=1, decode=3, idle=2, graph=4, eager_for_extend=1, too_big=0)]


@pytest.fixture(scope="module")
def model():
    return random_tiny_model()


def test_the_scenarios_tokens(model, one_thread):
    """The hand-computed schedules below rest on these tokens (and on 21 ending p0 and p3 early)."""
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=8, **CPU)
    assert [r.output_ids for r in eng.generate(PROMPTS, max_new_tokens=4, stop_token_ids=())] == OUTPUTS


def _check_schedule(reqs, steps):
    assert [r.output_ids for r in reqs] == EXPECTED_OUTPUT
    assert [r.finished_reason for r in reqs] == ["stop", "length", "length", "stop", "length"]
    assert [r.replayed for r in reqs] == EXPECTED_REPLAYED
    assert [r.rows for r in reqs] == EXPECTED_ROWS
    assert steps == EXPECTED_STEPS


def test_dp_replays_a_graph_only_if_every_rank_can_lockstep(model, one_thread):
    """Rule 1 (lockstep loop, ``DPEngine.generate``): the step's ``can_cuda_graph`` is the MINIMUM of the ranks'
    flags, so rank 1's decode in step 3 runs eagerly while rank 0 prefills.

    Bent in a copy, each fails here: ``can_cuda_graph = max(c for _, c in info)`` (rank 1 replays in step 3:
    p1's ``replayed`` reads [True, True, True]); ``rank.run(global_num_tokens, info[i][1])``, a rank's own
    flag (the same); ``schedule`` returning ``can_cuda_graph`` 1 for an extend (the same). Also the graph's
    size from the SUM of the ranks' tokens: ``total = max(global_num_tokens)`` fails the padded rows; an idle
    rank's step counted as an eager decode (``eager_for_extend += 1``) fails the second schedule.
    """
    dp = DPEngine(model, **DP)
    reqs = dp.generate(PROMPTS, max_new_tokens=4, stop_token_ids=(STOP,))
    _check_schedule(reqs, [r.steps for r in dp.ranks])
    assert [tuple(r.engine.stats[k] for k in ("decode_steps", "graph_steps", "padded_rows"))
            for r in dp.ranks] == EXPECTED_STATS
    # an IDLE rank while another prefills: 2 tokens each, no stop. Step 1 both ranks prefill 2; step 2 both
    # decode (graph for 4) and all 4 finish; step 3 rank 0 prefills p4 (1 token: it would fit a graph) while
    # rank 1 is idle: no graph, and nothing counted as an eager decode; step 4 rank 0 decodes p4, rank 1 idle:
    # the graph for 2, both
    dp = DPEngine(model, **DP)
    reqs = dp.generate(PROMPTS, max_new_tokens=2, stop_token_ids=())
    assert [r.replayed for r in reqs] == [[True]] * 5 and len(PROMPTS[4]) == 1
    assert [r.steps for r in dp.ranks] == [dict(extend=2, decode=2, idle=0, graph=2, eager_for_extend=0, too_big=0),
                                           dict(extend=1, decode=1, idle=2, graph=2, eager_for_extend=0, too_big=0)]


def test_dp_replays_a_graph_only_if_every_rank_can_multiprocess(model, one_thread):
    """Rule 1 (one process per rank, ``run_dp_multiprocess``): the minimum of the all-gathered flags. The same
    hand-computed schedule as the lockstep loop's, over torch.distributed (gloo, 2 processes; ~5 s).

    Bent in a copy, fails here: ``dp.run([g[0] for g in info], max(g[1] for g in info))`` and
    ``dp.run(..., can)`` (the rank's own flag): rank 1 replays in step 3.
    """
    reqs, steps = run_dp_multiprocess(model, PROMPTS, max_new_tokens=4, stop_token_ids=(STOP,), **DP)
    _check_schedule(reqs, steps)


def test_engine_eager_flag_wins_over_an_available_graph(model, one_thread, monkeypatch):
    """Rule 2 (``Engine.decode_step``): ``eager=True`` runs the step eagerly and records it so, although a graph
    that fits was captured; ``replayed`` and ``stats`` count graph steps the runner really replayed.

    Bent in a copy, fails here: the ``replay = ...`` line without ``not eager`` (the step is recorded as
    replayed, the stats count a graph step the runner never ran).
    """
    replays = []
    real = GraphRunner.replay
    monkeypatch.setattr(GraphRunner, "replay", lambda self, batch, bs=None: replays.append(bs) or real(self, batch, bs))
    eng = Engine(model, max_running_requests=4, cuda_graph_bs=(2, 4), **CPU)
    reqs = [eng.new_req(p, 8) for p in PROMPTS[:3]]
    for req in reqs:
        eng.prefill(req)
    assert eng.runner.graph_runner.can_run(3)
    eng.decode_step(reqs, set(), eager=True)
    assert replays == [] and [r.replayed for r in reqs] == [[False]] * 3
    assert (eng.stats["graph_steps"], eng.stats["padded_rows"], eng.stats["decode_steps"]) == (0, 0, 1)
    eng.decode_step(reqs, set())  # the same batch without the flag: the graph for 4, one padded row
    assert replays == [None] and [r.replayed for r in reqs] == [[False, True]] * 3
    assert (eng.stats["graph_steps"], eng.stats["padded_rows"], eng.stats["decode_steps"]) == (1, 1, 2)
    eng.decode_step(reqs, set(), graph_bs=4)  # DP attention's agreed size
    assert replays == [None, 4] and [r.replayed for r in reqs] == [[False, True, True]] * 3


def _all_free(engines):
    return all(e.runner.req_to_token_pool.available() == e.args.max_running_requests
               and e.runner.allocator.available_pages() == e.runner.allocator.num_pages - 1 for e in engines)


def _fail_on(engine, name, k, exc):
    """Make ``engine.<name>`` raise ``exc`` on its k-th call (0-based), on this engine only."""
    orig, calls = getattr(engine, name), []

    def wrapper(*a, **kw):
        calls.append(1)
        if len(calls) - 1 == k:
            raise exc
        return orig(*a, **kw)

    setattr(engine, name, wrapper)


def _record_requests(engine) -> list:
    """The list that ``engine.new_requests`` (what ``generate`` makes its requests with) fills: a failed
    ``generate`` returns nothing, so the test keeps its own hold on the requests."""
    reqs, real = [], engine.new_requests

    def new_requests(*a, **kw):
        out = real(*a, **kw)
        reqs.extend(out[0])
        return out

    engine.new_requests = new_requests
    return reqs


@pytest.mark.parametrize("where,k,interrupted", [("prefill", 1, 5), ("decode_step", 1, 3)])
def test_dp_failure_abandons_every_request_it_holds(model, one_thread, where, k, interrupted):
    """Rule 3 (``DPEngine.generate``'s ``except``): an exception in any rank's step ends every request still
    held, waiting, running or JOINING (popped from the queue for a prefill, not yet running), with status
    "error" and ``interrupted: RuntimeError``, and gives back all their rows and pages, on every rank.

    ``prefill`` k=1: rank 0 fails while prefilling its second joining request (step 1 of the schedule
    above): its first joining request already holds a row and a page, and rank 1's two joining requests
    have not run yet; no request has finished, so all 5 are interrupted. ``decode_step`` k=1: rank 0's
    second decode step (step 4) fails; p0 and p3 had stopped, the other 3 are interrupted.
    Bent in a copy, fails here: the ``except`` path without ``or r in rank.joining`` (at the prefill
    failure 4 requests stay unfinished, one keeps its row and page); ``rank.waiting.clear()`` dropped
    (the reuse below schedules a dead request).
    """
    dp = DPEngine(model, **DP)
    reqs = _record_requests(dp.ranks[0].engine)
    _fail_on(dp.ranks[0].engine, where, k, RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        dp.generate(PROMPTS, max_new_tokens=4, stop_token_ids=(STOP,))
    assert len(reqs) == 5 and all(r.finished for r in reqs)
    assert [r.error for r in reqs].count("interrupted: RuntimeError") == interrupted
    assert all(r.finished_reason == "error" for r in reqs if r.error)
    assert _all_free([r.engine for r in dp.ranks]) and not any(r.busy or r.joining for r in dp.ranks)
    del dp.ranks[0].engine.__dict__[where]  # the engine's own method again: the DP engine stays usable
    again = dp.generate(PROMPTS, max_new_tokens=4, stop_token_ids=(STOP,))
    assert [r.output_ids for r in again] == EXPECTED_OUTPUT and [r.replayed for r in again] == EXPECTED_REPLAYED


@pytest.mark.parametrize("k", [0, 1, 2])
def test_interrupted_request_ends_with_error_and_its_reason(model, one_thread, k):
    """Rule 4 (``Engine.abandon``): ``generate`` interrupted at its k-th decode step leaves no request
    unfinished: the ones that had not finished end with ``finished_reason == "error"`` and
    ``error == "interrupted: KeyboardInterrupt"``, the others keep their own reason; all rows and pages are back.

    Bent in a copy, fails here: ``abandon`` calling ``self.free_req(req)`` instead of ``self._finish(...)``
    (freed, never finished: ``finished_reason`` stays None); the reason's text changed.
    """
    eng = Engine(model, max_running_requests=2, cuda_graph_bs=(2,), **CPU)
    reqs = _record_requests(eng)
    _fail_on(eng, "decode_step", k, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        eng.generate(PROMPTS, max_new_tokens=4, stop_token_ids=(STOP,))
    assert len(reqs) == 5 and all(r.finished for r in reqs)
    # two running at a time: p0 and p1 decode first; p0 stops at its first decode step (step 0), so at
    # k=0 nothing has finished, at k=1 p0 has, at k=2 p0 has and p2 has joined
    done = [r for r in reqs if r.finished_reason != "error"]
    assert [r.output_ids[-1] for r in done] == [STOP] * (k > 0)
    assert all(r.error == "interrupted: KeyboardInterrupt" for r in reqs if r.finished_reason == "error")
    assert _all_free([eng])


@pytest.mark.parametrize("prompt_len", [1, 127, 128, 129, 255, 256, 257, 384, 385])
def test_pages_allocated_are_exactly_ceil_tokens_over_page(model, one_thread, prompt_len):
    """Rule 5 (``Engine._alloc`` through ``prefill`` and ``make_batch``): a request owns exactly
    ``ceil(tokens / PAGE_SIZE)`` pages after its prefill and after each decode step's new slot, on both
    sides of every page boundary (127 | 128 | 129 tokens ...).

    Bent in a copy, fails here: ``need = n_tokens // page + 1 - len(req.pages)`` (a page too many at
    every boundary: 128 tokens get 2 pages); ``cdiv(n_tokens - 1, ...)`` (a page too few after 129).
    """
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=1, **CPU)
    alloc = eng.runner.allocator
    free0 = alloc.available_pages()
    [req] = eng.prefill_requests([[5] * prompt_len])
    assert len(req.pages) == cdiv(prompt_len, PAGE_SIZE) == free0 - alloc.available_pages()
    assert len(set(req.pages)) == len(req.pages) and 0 not in req.pages  # page 0: the padding page
    for step in range(2):  # each decode step writes the fed-back token at position prompt_len + step
        eng.make_batch([req])
        req.seq_len += 1
        assert len(req.pages) == cdiv(prompt_len + step + 1, PAGE_SIZE) == free0 - alloc.available_pages()
    eng.free_req(req)
    assert alloc.available_pages() == free0


@pytest.mark.parametrize("backend", ["triton", "cutlass_mla"])
def test_an_eager_batch_larger_than_every_graph_leaves_the_graphs_buffers(model, one_thread, backend):
    """Rule: a step too big for every captured graph runs eagerly on buffers of its own; what a captured graph
    reads (its page table, its workspace) is never replaced, so the next replays stay right.

    Bent in a copy, fails here: the Triton backend's ``init_forward_metadata`` growing one shared page table and
    workspace (as it did: the graphs then read the dropped ones, freed memory, and decoded wrong tokens).
    """
    kw = dict(CPU, attention_backend=backend, max_running_requests=4)
    eager = Engine(model, disable_cuda_graph=True, **kw)
    want = eager.generate([PROMPTS[0]], max_new_tokens=6, stop_token_ids=())[0].output_ids
    eng = Engine(model, cuda_graph_bs=(1, 2), **kw)
    buffers = eng.runner.backend.graph_index_buffer()
    assert eng.generate([PROMPTS[0]], max_new_tokens=6, stop_token_ids=())[0].output_ids == want
    big = eng.generate(PROMPTS[:3], max_new_tokens=2, stop_token_ids=())  # 3 rows: no graph fits, eager
    assert not any(any(r.replayed) for r in big)
    again = eng.generate([PROMPTS[0]], max_new_tokens=6, stop_token_ids=())[0]
    assert again.output_ids == want and all(again.replayed[1:]) and again.error is None
    assert eng.runner.backend.graph_index_buffer() is buffers
