"""Notebook 08's checkers: every solution passes; each classic wrong answer, written the way a learner
would write it, is rejected with its own hint; nothing raises. The solutions come from the instructor build
(``instructor/ex08.py``), which the package does not ship."""

import re
from timeouts import fails_if_hung
import sys
import time

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from mla_edu import kvcache  # noqa: E402
from mla_edu.workshop import checks, exercises as ex  # noqa: E402
from mla_edu.kernels import get_workspace_size  # noqa: E402
from solutions import require_solutions  # noqa: E402

require_solutions()
from instructor import ex08  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_thread")


# ---- 1. the replay hook ---------------------------------------------------------------------------
def _stub(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
    raise NotImplementedError("write me")


def _nothing(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
    pass


def _rebind(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # a fresh table bound to the attribute
    table = backend.cuda_graph_kv_indices.clone()
    kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs], table[:bs], 128)
    backend.cuda_graph_kv_indices = table


def _one_wide(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # the pre-fix view [:bs, :1]: its first ids
    # (fill_page_table refuses a table narrower than the request: write the one column by hand)
    backend.cuda_graph_kv_indices[:bs, 0] = backend.req_to_token[req_pool_indices[:bs], 0] // 128


def _new_table(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # the pre-fix replay's habit
    t = torch.full((bs, 4), -1, dtype=torch.int32, device=backend.device)
    kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs], t, 128)
    backend.forward_metadata.block_kv_indices = t


def _first_row_only(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
    kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:1], seq_lens[:1],
                            backend.cuda_graph_kv_indices[:1], 128)


def _row_as_pool_index(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # batch row b = pool row b
    rows = torch.arange(bs, dtype=req_pool_indices.dtype, device=req_pool_indices.device)
    kvcache.fill_page_table(backend.req_to_token, rows, seq_lens[:bs], backend.cuda_graph_kv_indices[:bs], 128)


def _one_token_less(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # ceil((len - 1) / 128) pages
    kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs] - 1,
                            backend.cuda_graph_kv_indices[:bs], 128)


def _token_slots(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # req_to_token's slots, not // 128
    for b in range(bs):
        n = (int(seq_lens[b]) + 127) // 128
        slots = backend.req_to_token[req_pool_indices[b], ::128][:n]
        backend.cuda_graph_kv_indices[b, :n] = slots.to(torch.int32)


def _other_view(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # issue 47: passed the old checker
    kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs],
                            backend.forward_metadata.block_kv_indices[:bs], 128)


def _fresh_workspace(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # the pre-fix replay's workspace
    ex08.replay(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)
    backend.cuda_graph_mla_workspace = torch.empty_like(backend.cuda_graph_mla_workspace)
    backend.forward_metadata.workspace = backend.cuda_graph_mla_workspace


def _backends_own(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # the library's answer
    type(backend).init_forward_metadata_replay_cuda_graph(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)


def _moved_storage(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
    ex08.replay(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)
    backend.cuda_graph_kv_indices.set_(backend.cuda_graph_kv_indices.clone())


def _writes_seq_lens(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
    ex08.replay(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)
    seq_lens[:bs] += 1


def _backends_capture_hook(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # the capture hook fills it too
    backend.init_forward_metadata_capture_cuda_graph(bs, req_pool_indices[:bs], seq_lens[:bs])


REPLAY_MISTAKES = [
    (_other_view, ex.REPLAY_HINTS["other_view"]),
    (_backends_capture_hook, "refused: your function runs init_forward_metadata_capture_cuda_graph"),
    (_fresh_workspace, ex.REPLAY_HINTS["workspace"]),
    (_backends_own, "refused: your function runs init_forward_metadata_replay_cuda_graph"),
    (_moved_storage, ex.REPLAY_HINTS["reshaped"]),
    (_writes_seq_lens, "your function changed seq_lens"),
    (_stub, "raised NotImplementedError"),
    (_nothing, ex.REPLAY_HINTS["nothing"]),
    (_rebind, ex.REPLAY_HINTS["rebound"]),
    (_one_wide, ex.REPLAY_HINTS["first_column"]),
    (_new_table, ex.REPLAY_HINTS["new_table"]),
    (_first_row_only, "rows 1, 2, 3 of the 4 the hook was called with still held the poison page id"),
    (_row_as_pool_index, "read wrong (but valid) pages: row b belongs to request req_pool_indices[b]"),
    (_one_token_less, "rows 3 (seq_lens [385]) lack their last page id"),
    (_token_slots, "hold cache slots of tokens (req_to_token's entries), not page ids"),
    ("replay", "expected a function"),
]


def test_replay_solution_passes(capsys):
    assert ex.check_replay(ex08.replay).passed
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("fn, hint", REPLAY_MISTAKES, ids=[getattr(f, "__name__", "str") for f, _ in REPLAY_MISTAKES])
def test_replay_mistake_gets_its_own_hint(fn, hint, capsys):
    r = ex.check_replay(fn)
    assert not r.passed and hint in r.message, r.message
    others = [h for f, h in REPLAY_MISTAKES if f is not fn]
    assert not any(h in r.message for h in others), r.message
    assert capsys.readouterr().out.startswith("NOT YET")


# ---- 2. mysteries ---------------------------------------------------------------------------------
def test_mysteries():
    assert tuple(ex08.MYSTERY_ENGINES) == ex.MYSTERY_NUMBERS
    for k, answer in ex08.MYSTERY_ANSWERS.items():
        assert answer == ex08.option_for(**ex08.MYSTERY_ENGINES[k])
        assert ex.check_mystery(k, answer).passed
        for other in set(ex.OPTIONS) - {answer}:
            assert not ex.check_mystery(k, other).passed
        assert not ex.check_mystery(k, ...).passed and not ex.check_mystery(k, None).passed
        assert not ex.check_mystery(k, "e").passed
    assert not ex.check_mystery(7, "a").passed
    assert len(ex.mystery_figure(1).axes) == 3
    with pytest.raises(ValueError, match="expected one of"):
        ex.mystery_figure(7)


def test_the_mystery_data_are_what_the_instructors_engines_measure():
    """The package ships the page reads, not the engines: they must be what those engines measure now."""
    import json

    stored, measured = json.loads(ex.MYSTERY_FILE.read_text()), json.loads(json.dumps(ex08.measure_mysteries()))
    assert stored.keys() == measured.keys()
    for k in stored:  # the grids exactly; a row's error (float32, summed in the device's order) to 1e-4
        s, m = stored[k], measured[k]
        grids = [{key: v for key, v in d.items() if key != "row_err"} for d in (s, m)]
        assert grids[0] == grids[1], k
        assert m["row_err"] == pytest.approx(s["row_err"], rel=1e-3, abs=1e-4), k


def test_mystery_hints_do_not_partition_the_options():
    """Issue 47: four options made of two yes/no claims, and a hint naming the false claim, gave the answer after one
    wrong guess. Every wrong option of a figure now gets the same words, so a wrong guess rules out itself only."""
    for k, answer in ex08.MYSTERY_ANSWERS.items():
        messages = {ex.check_mystery(k, other).message.replace(f"({other})", "(?)")
                    for other in set(ex.OPTIONS) - {answer}}
        assert len(messages) == 1, messages
        msg = messages.pop()
        assert f"({answer})" not in msg and ex.OPTIONS[answer] not in msg, msg


# ---- 3. row stride --------------------------------------------------------------------------------
def test_row_stride():
    assert ex.check_row_stride(*ex08.ROW_STRIDE_ANSWERS).passed
    for answers, hint in [((None, None, None), "not answered"), ((..., ..., ...), "not answered"),
                          ((6, 6, 20), "that is the buffer's own stride"),
                          ((1, 5, 5), "width formula for the buffer"), ((1, 6, 20), "where the row should read"),
                          ((1.5, 6, 5), "expected three ints"), ((True, 6, 5), "expected three ints")]:
        r = ex.check_row_stride(*answers)
        assert not r.passed and hint in r.message, r.message


def test_each_row_stride_mistake_gets_its_hint():
    """Every classic wrong number of ``ROW_STRIDE_MISTAKES`` (computed here from the setup: 640 tokens are 5 pages
    of 128; graphs of 4 and 8; row 3, page 2), alone in its part, gets that mistake's hint; another number the
    part's ``ROW_STRIDE_OTHER`` hint."""
    used, real, flat = ex08.ROW_STRIDE_ANSWERS
    wrong = {"used row stride": {"the buffer's own row stride": real, "the longest context's page count": 5,
                                 "the first graph's batch size": 4, "the second graph's batch size": 8},
             "buffer row stride": {"the longest context's page count": 5, "the row stride the kernel used": used},
             "flat index": {"the row's page through the buffer's stride": 3 * real + 2,
                            "the row's page through the context's page count": 3 * 5 + 2}}
    assert {p: set(m) for p, m in wrong.items()} == {p: set(m) for p, m in ex.ROW_STRIDE_MISTAKES.items()}
    parts = list(wrong)
    for i, part in enumerate(parts):
        for what, number in [*wrong[part].items(), ("another number", 1000)]:
            answers = list(ex08.ROW_STRIDE_ANSWERS)
            answers[i] = number
            r = ex.check_row_stride(*answers)
            hint = ex.ROW_STRIDE_MISTAKES[part].get(what, ex.ROW_STRIDE_OTHER[part])
            assert not r.passed and r.message.startswith(f"{part}: not {number}; {hint}"), (part, what, r.message)


def test_a_row_stride_hint_never_tells_another_parts_answer():
    """An audit's find: 'used row stride 6' got "that is the buffer's own stride", part 2's answer in one try. A hint
    built from another part's truth is given only where that part is right; else the part's general question."""
    used, real, flat = ex08.ROW_STRIDE_ANSWERS
    for answers, part in [((real, 1000, flat), "used row stride"), ((1000, used, flat), "buffer row stride"),
                          ((used, 1000, 3 * real + 2), "flat index")]:
        r = ex.check_row_stride(*answers)
        assert not r.passed and f"{part}: not {answers[list(ex.ROW_STRIDE_OTHER).index(part)]}; " \
            f"{ex.ROW_STRIDE_OTHER[part]}" in r.message, r.message
        assert not any(h in r.message for m in ex.ROW_STRIDE_MISTAKES.values() for h in m.values()), r.message


# ---- 4. workspace size ----------------------------------------------------------------------------
def _auto_split(L, B, sms, n, *, last_step=True, round_up=True):
    if n != -1:
        return n
    max_splits = -(-L // 128) if round_up else L // 128
    heur = min(max_splits, max(1, sms // B))
    return -(-max_splits // -(-max_splits // heur)) if last_step else heur


WORKSPACE_MISTAKES = [  # (a learner's answer, the hint it must get)
    (lambda L, B, s, n: B * (4 * 512 + 4) * 128 * _auto_split(L, B, s, n, last_step=False), "one more step"),
    (lambda L, B, s, n: B * (4 * 512 + 4) * 128 * _auto_split(L, B, s, n, round_up=False), "a partial chunk"),
    (lambda L, B, s, n: B * (2 * 512 + 2) * 128 * _auto_split(L, B, s, n), "bf16 partials"),
    (lambda L, B, s, n: B * (2 * 512 + 4) * 128 * _auto_split(L, B, s, n), "o_acc in bf16"),
    (lambda L, B, s, n: B * (4 * 576 + 4) * 128 * _auto_split(L, B, s, n), "o_acc 576 wide"),
    (lambda L, B, s, n: B * (4 * 512 + 4) * 16 * _auto_split(L, B, s, n), "16 heads"),
    (lambda L, B, s, n: B * 4 * 512 * 128 * _auto_split(L, B, s, n), "but not lse_acc"),
    (lambda L, B, s, n: (4 * 512 + 4) * 128 * _auto_split(L, B, s, n), "its own partials"),
    (lambda L, B, s, n: B * (4 * 512 + 4) * 128 * max(n, 1), "asks for the automatic one"),
    (lambda L, B, s, n: B * (4 * 512 + 4) * 128 * _auto_split(L, B, s, -1), "used as is"),
]


def test_workspace_solution_passes_and_the_cases_hit_every_mistake():
    assert ex.check_workspace_size(ex08.workspace_size).passed
    assert (4224, 8, 132, -1) in ex.WORKSPACE_CASES
    assert _auto_split(4224, 8, 132, -1) == 11 and _auto_split(4224, 8, 132, -1, last_step=False) == 16
    def values(fn):
        try:
            return tuple(fn(*c) for c in ex.WORKSPACE_CASES)
        except ZeroDivisionError:  # the floor mistake: max_splits 0 below 128 tokens
            return None

    answers = [values(fn) for fn, _ in WORKSPACE_MISTAKES]
    want = tuple(get_workspace_size(*c) for c in ex.WORKSPACE_CASES)
    assert want not in answers and len(set(answers)) == len(answers)  # no two mistakes look alike on these cases


@pytest.mark.parametrize("fn, hint", WORKSPACE_MISTAKES, ids=[h for _, h in WORKSPACE_MISTAKES])
def test_workspace_mistake_gets_its_own_hint(fn, hint):
    r = ex.check_workspace_size(fn)
    assert not r.passed and hint in r.message, r.message
    assert not any(h in r.message for _, h in WORKSPACE_MISTAKES if h != hint), r.message


def test_workspace_other_failures():
    def no_floor(L, B, s, n):  # heur = min(max_splits, s // B): 0 with more requests than SMs
        if n != -1:
            return B * (4 * 512 + 4) * 128 * n
        ms = -(-L // 128)
        heur = min(ms, s // B)
        return B * (4 * 512 + 4) * 128 * -(-ms // -(-ms // heur))

    for fn, hint in [(lambda *a: 0, "returned 0, which is wrong"), (lambda *a: None, "returned None"),
                     (lambda *a: 1 / 0, "ZeroDivisionError"), (no_floor, "heur has a floor"),
                     (lambda L, B, s, n: ex08.workspace_size(L, B, s, n) + 1, "which factor is wrong"),
                     (3, "expected a function"), (None, "not answered yet"), (..., "not answered yet")]:
        r = ex.check_workspace_size(fn)
        assert not r.passed and hint in r.message, r.message
    # a right value as a float or a numpy int is right
    assert ex.check_workspace_size(lambda *a: float(ex08.workspace_size(*a))).passed
    assert ex.check_workspace_size(lambda *a: torch.tensor(ex08.workspace_size(*a))).passed


# ---- 5. stale reads -------------------------------------------------------------------------------
def _stale(buffer, seq_lens, row_stride, *, reader_len=False, own_stride=False, one_row_per_request=False,
           off_by_one=False, real_readers_only=False, padded_write_nothing=False, padded_write_all=False,
           floor=False):
    """A learner's stale_reads, with one classic mistake switched on."""
    rows, width = buffer.shape
    if one_row_per_request:
        rows, width = len(seq_lens), buffer.numel() // len(seq_lens)
    lens = list(seq_lens) + [1] * (rows - len(seq_lens))
    pages = [n // 128 if floor else -(-n // 128) for n in lens]
    written = [0 if padded_write_nothing and r >= len(seq_lens) else width if padded_write_all and r >= len(seq_lens)
               else p for r, p in enumerate(pages)]
    out = set()
    for b in range(len(seq_lens) if real_readers_only else rows):
        for j in range(pages[b]):
            r, slot = divmod(b * (width if own_stride else row_stride) + j, width)
            limit = written[b] if reader_len else written[r]
            if r >= rows or (slot > limit if off_by_one else slot >= limit):
                out.add((b, j))
    return out


STALE_MISTAKES = [("reader_len", "landing_row"), ("own_stride", "frozen_stride"),
                  ("one_row_per_request", "buffer_rows"), ("off_by_one", "slot_past_end"),
                  ("real_readers_only", "padded_readers"), ("padded_write_nothing", "padded_writes"),
                  ("padded_write_all", "padded_writes_all"), ("floor", "round_up")]


def test_stale_solution_passes_and_cases_have_padded_rows():
    assert ex.check_stale_reads(ex08.stale_reads).passed
    cases = ex.stale_cases()
    assert all(len(case) == 3 for case in cases)  # inputs only: no truth
    assert sum(b.shape[0] > len(s) for b, s, _ in cases) >= 4
    assert {1} < {rs for _, _, rs in cases}  # row stride 1 and others
    assert any(rs == b.shape[1] for b, _, rs in cases)  # row stride W
    for buffer, seq_lens, rs in cases + ex.stale_domain():
        assert ex._stale_variant(buffer, seq_lens, rs) == _stale(buffer, seq_lens, rs) == \
            ex08.stale_reads(buffer, seq_lens, rs)
    assert all(ex._stale_variant(*case) for case in cases[: len(ex.STALE_ENGINE_CASES)])  # the pre-fix kernel


@pytest.mark.parametrize("mistake, name", STALE_MISTAKES, ids=[m for m, _ in STALE_MISTAKES])
def test_stale_mistake_gets_its_own_hint(mistake, name):
    r = ex.check_stale_reads(lambda buffer, seq_lens, rs: _stale(buffer, seq_lens, rs, **{mistake: True}))
    assert not r.passed and ex.STALE_MISTAKES[name] in r.message, r.message
    assert not any(h in r.message for n, h in ex.STALE_MISTAKES.items() if n != name)


def test_stale_other_failures():
    def wrong_reads(buffer, seq_lens, row_stride):  # a plausible mistake: every misdirected read
        rows, width = buffer.shape
        lens = list(seq_lens) + [1] * (rows - len(seq_lens))
        return {(b, j) for b, n in enumerate(lens) for j in range(-(-n // 128)) if row_stride != width and b > 0}

    r = ex.check_stale_reads(wrong_reads)
    assert not r.passed and "wrong* reads" in r.message, r.message
    for fn, hint in [(lambda *a: 5, "expected a set"), (lambda *a: None, "returned None"),
                     (lambda *a: 1 / 0, "raised"), (lambda b, s, r: ex08.stale_reads(b, s, r) | {(0, 9)}, "not reads"),
                     (lambda b, s, r: ex08.stale_reads(b, s, r) | {(99, 0)}, "not reads"),
                     (lambda b, s, r: set(sorted(ex08.stale_reads(b, s, r))[1:]), "which buffer row and slot"),
                     ("stale", "expected a function")]:
        r = ex.check_stale_reads(fn)
        assert not r.passed and hint in r.message, r.message


# ---- issue 47: answers a learner wrote, judged as a strict teacher would -------------------------------
def test_the_right_hook_passes_at_every_split_count_and_after_a_wrong_one(capsys):
    """The engines are kept between checks only while no hook changed more than the buffer's contents."""
    assert not ex.check_replay(_fresh_workspace).passed and not ex.check_replay(_nothing).passed
    r = ex.check_replay(ex08.replay)
    assert r.passed and f"at each of {len(ex.REPLAY_SPLITS)} split counts" in r.message
    assert set(ex.REPLAY_SPLITS) == {1, 2, 3, 4}  # W = 4: every split count the fixed kernel takes


def test_the_replay_domain_starts_at_the_largest_graph_after_an_eager_step():
    sizes = [len(c) for c in ex.REPLAY_CASES]
    assert sizes[0] == max(ex.REPLAY_SETUP["cuda_graph_bs"]) and sizes == sorted(sizes, reverse=True)


def test_the_library_workspace_formula_is_refused_however_it_is_called():
    import functools
    import inspect

    copy_ns: dict = {}
    exec(inspect.getsource(get_workspace_size), get_workspace_size.__globals__ | {"__name__": "copy"}, copy_ns)
    for fn in [get_workspace_size, lambda *a: get_workspace_size(*a), functools.partial(get_workspace_size),
               copy_ns["get_workspace_size"], _tracer_off, _tracer_off_and_on, _in_a_thread, _empties_the_refusal,
               _edits_the_tracer, _patches_the_truth]:
        r = ex.check_workspace_size(fn)
        assert not r.passed and "refused" in r.message, (fn, r.message)
    assert ex.get_workspace_size is get_workspace_size and sys.gettrace() is None  # put back
    assert ex.check_workspace_size(ex08.workspace_size).passed


def test_the_cases_drawn_at_check_time_do_not_follow_a_pinned_clock(monkeypatch):
    # an audit pinned time.time_ns (the draws' old seed), made a table of every case beforehand, and passed
    monkeypatch.setattr(time, "time_ns", lambda: 12345)
    def stale():
        return [(tuple(buffer.shape), seq_lens, rs) for buffer, seq_lens, rs in ex._stale_drawn()]

    assert ex._workspace_drawn() != ex._workspace_drawn() and stale() != stale()


def test_a_copy_of_the_stale_checkers_code_is_refused():
    # an audit exec'd the source of the checker's own truth elsewhere (a copy, another file name): it passed
    import inspect

    def copied(buffer, seq_lens, row_stride):
        ns = dict(vars(ex))  # the copies call each other, not the checker's functions
        exec(inspect.getsource(ex._padded) + inspect.getsource(ex._stale_variant), ns)
        return ns["_stale_variant"](buffer, seq_lens, row_stride)

    r = ex.check_stale_reads(copied)
    assert not r.passed and "refused" in r.message, r.message


# ways round the refusal an audit found (each passed before): what they do is in the function's name
def _tracer_off(*case):
    sys.settrace(None)
    return get_workspace_size(*case)


def _tracer_off_and_on(*case):
    tracer = sys.gettrace()
    try:
        sys.settrace(None)
    except BaseException:
        pass
    value = get_workspace_size(*case)
    sys.settrace(tracer)
    return value


def _in_a_thread(*case):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(get_workspace_size, *case).result()


def _empties_the_refusal(*case):  # walks up to the checker's Refusal and empties it
    frame = sys._getframe(1)
    while "refuse" not in frame.f_locals:
        frame = frame.f_back
    refusal = frame.f_locals["refuse"]
    for field in ("files", "codes", "copies"):
        try:
            setattr(refusal, field, ())
        except AttributeError:
            pass
    return get_workspace_size(*case)


def _edits_the_tracer(*case):  # replaces the Refusal the tracer holds
    for cell in sys.gettrace().__closure__:
        if isinstance(cell.cell_contents, tuple) and hasattr(cell.cell_contents, "refuses"):
            cell.cell_contents = None
    return get_workspace_size(*case)


def _patches_the_truth(*case):  # makes the checker's truth agree with it, for every later check too
    ex.get_workspace_size = lambda *a: 0
    return 0


def _swaps_the_verdicts_code(*case):  # the same function object, another code: every later report a PASS
    checks.report.__code__ = (lambda passed, message: checks.ExerciseResult(True, message)).__code__
    return 0


def _swaps_the_truths_code(*case):  # the truth itself answers 7 from now on
    get_workspace_size.__code__ = (lambda *a: 7).__code__
    return 7


def _patches_a_class(*case):  # the refusal refuses nothing from now on
    checks.Refusal.refuses = lambda self, code: False
    return get_workspace_size(*case)


def test_a_changed_code_or_class_attribute_is_put_back_and_refused():
    # an audit swapped a library function's __code__ (the same object, so the globals' identity check missed it)
    # or patched a class: every checker then passed for the rest of the session
    saved = {f: f.__code__ for f in (checks.report, get_workspace_size)}
    refuses = checks.Refusal.refuses
    for fn in (_swaps_the_verdicts_code, _swaps_the_truths_code, _patches_a_class):
        r = ex.check_workspace_size(fn)
        assert not r.passed and "refused" in r.message, (fn.__name__, r.message)
        assert all(f.__code__ is c for f, c in saved.items()) and checks.Refusal.refuses is refuses
    assert ex.check_workspace_size(ex08.workspace_size).passed


def _from_the_checkers_frames(name):
    """What a learner's function finds under ``name`` walking up the stack from its caller's caller to the checker's
    locals (an audit read exercise 4's ``want`` and exercise 5's ``truths`` so: both passed), or None."""
    frame = sys._getframe(2)
    while frame is not None and name not in frame.f_locals:
        frame = frame.f_back
    return None if frame is None else frame.f_locals[name]


def test_no_truth_sits_in_a_frame_while_the_learners_function_runs():
    find = _from_the_checkers_frames
    seen = []

    def workspace(*case):
        seen.append([find(n) for n in ("want", "truth", "truths")])
        return 0

    def stale(buffer, seq_lens, row_stride):
        seen.append([find(n) for n in ("want", "truth", "truths")])
        return set()

    assert not ex.check_workspace_size(workspace).passed
    assert not ex.check_stale_reads(stale).passed
    assert len(seen) > 2 and all(v is None for row in seen for v in row), seen[:3]


def _heap_hunter():
    """A learner's workspace_size that, at its first call, looks among the objects gc tracks for a list or tuple
    of more than 1000 workspace sizes (ints over 10,000) and answers each case with the next of them."""
    import gc

    state = {"calls": 0, "found": ()}

    def hunts_the_heap(*case):
        if state["calls"] == 0:
            found = [o for o in gc.get_objects() if type(o) in (list, tuple) and len(o) > 1000
                     and all(type(x) is int and x > 10_000 for x in o)]
            state["found"] = found[0] if found else ()
        state["calls"] += 1
        return state["found"][state["calls"] - 1] if state["calls"] <= len(state["found"]) else 0

    return hunts_the_heap


def test_no_truth_sits_among_the_objects_gc_tracks(monkeypatch):
    # the sealed truths are a digest, not a list of them: the hunter finds nothing and gets a case wrong (not a
    # timeout: it hunts once)
    result = ex.check_workspace_size(_heap_hunter())
    assert not result.passed and "your function returned 0, which is wrong" in result.message, result.message
    # where the truths sat in a list while the learner's function runs, the same hunter passes

    class KeptSeal(checks.Seal):
        __slots__ = ("kept",)

        def __init__(self, truths):
            self.kept = list(truths)
            super().__init__(self.kept)

    monkeypatch.setattr(ex, "Seal", KeptSeal)
    assert ex.check_workspace_size(_heap_hunter()).passed


def test_a_patched_builtin_is_put_back_and_refused():
    # what every truth is computed with: a function that rebinds builtins.min (so that the automatic split is always
    # max_splits) would make the truths computed after it agree with its wrong answer; run_learner puts builtins back
    # as it puts back mla_edu's globals, and refuses the function
    import builtins

    from mla_edu.kernels.workspace import BYTES_PER_BATCH_SPLIT
    from mla_edu.util import cdiv

    original = builtins.min

    def first_of_two_ints(*a, **k):
        return a[0] if len(a) == 2 and not k and all(type(x) is int for x in a) else original(*a, **k)

    def patches_min(max_seq_len, num_batches, sm_count, num_kv_splits):
        builtins.min = first_of_two_ints
        split = num_kv_splits if num_kv_splits >= 1 else cdiv(max_seq_len, 128)
        return BYTES_PER_BATCH_SPLIT * split * num_batches

    try:
        r = ex.check_workspace_size(patches_min)
        after = builtins.min
    finally:
        builtins.min = original
    assert after is original
    assert not r.passed and r.message.startswith(
        "refused: your function rebound builtins.min (put back)"), r.message
    assert ex.check_workspace_size(ex08.workspace_size).passed


def test_the_seal_cannot_be_switched_off_through_an_instance_attribute():
    from mla_edu.workshop import checks

    seal = checks.Seal([{1, 2}, 3])
    with pytest.raises(AttributeError):
        seal.matches = lambda truths: True
    assert seal.matches([{2, 1}, 3]) and not seal.matches([{1, 2}, 4])


def test_an_interrupt_inside_the_learners_function_puts_the_library_back():
    """The stop button (KeyboardInterrupt) in a learner's function that rebound a library global: the check stops,
    and the global is put back (it stayed rebound, and every later check answered 'refused')."""
    class Boom(BaseException):
        pass

    original = ex.get_workspace_size

    def rebinds_then_interrupted(*case):
        ex.get_workspace_size = lambda *a: 0
        raise KeyboardInterrupt

    def rebinds_then_raises_its_own(*case):
        ex.get_workspace_size = lambda *a: 0
        raise Boom()

    with pytest.raises(KeyboardInterrupt):
        ex.check_workspace_size(rebinds_then_interrupted)
    assert ex.get_workspace_size is original
    r = ex.check_workspace_size(rebinds_then_raises_its_own)  # a BaseException of its own: a NOT YET, not a raise
    assert not r.passed and "refused" in r.message, r.message
    assert ex.get_workspace_size is original
    assert ex.check_workspace_size(ex08.workspace_size).passed


def test_an_exceptions_own_str_cannot_rebind_the_library_either():
    """A review's find: the put-back ran before the error's __str__ (the learner's code), which could rebind a
    global that then stayed rebound."""
    original = ex.get_workspace_size

    class Sneaky(Exception):
        def __str__(self):
            ex.get_workspace_size = lambda *a: 0
            return "boom"

    def raises_sneaky(*case):
        raise Sneaky()

    r = ex.check_workspace_size(raises_sneaky)
    assert not r.passed and ex.get_workspace_size is original, r.message
    assert ex.check_workspace_size(ex08.workspace_size).passed


def test_elements_for_bytes_gets_a_hint_that_names_both_readings():
    """Issue 47: float32 elements instead of bytes got a hint about 32 heads (the numbers happen to match)."""
    r = ex.check_workspace_size(lambda L, B, s, n: ex08.workspace_size(L, B, s, n) // 4)
    assert not r.passed and "bytes, not elements" in r.message and "32 heads" not in r.message, r.message


def test_a_function_that_never_returns_is_stopped_with_a_hint(monkeypatch):
    from mla_edu.workshop import checks

    def forever(*args):
        while True:
            pass

    monkeypatch.setattr(checks, "LEARNER_SECONDS", 0.5)
    r = ex.check_workspace_size(forever)
    assert not r.passed and "did not finish" in r.message, r.message


def test_a_hook_through_the_backend_accessor_passes_and_one_that_skips_padded_rows_does_not():
    """The replay refuses the backends' replay hooks, not their accessors (``graph_index_buffer()`` was refused with
    all of mla_edu/serving/); a padded row left holding the poison id reads out of range on a GPU (it passed)."""
    def via_accessor(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
        kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs],
                                backend.graph_index_buffer()[:bs], 128)

    def real_rows_only(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
        real = int((seq_lens[:bs] > 1).sum())
        kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:real], seq_lens[:real],
                                backend.cuda_graph_kv_indices[:real], 128)

    r = ex.check_replay(via_accessor)
    assert r.passed, r.message
    r = ex.check_replay(real_rows_only)
    assert not r.passed and "the padded rows read their first entry too" in r.message, r.message


def test_a_generator_that_never_ends_is_stopped_with_a_hint(monkeypatch):
    """A generator's body runs when its items are read: the checker reads them inside the time limit (it hung)."""
    from mla_edu.workshop import checks

    def endless(buffer, seq_lens, row_stride):  # a mis-indented j += 1
        j = 0
        while j < 1:
            if j > 5:
                yield (0, j)

    monkeypatch.setattr(checks, "LEARNER_SECONDS", 0.5)
    with fails_if_hung(60, "check_stale_reads hung on a generator"):
        r = ex.check_stale_reads(endless)
    assert not r.passed and "did not finish" in r.message, r.message


def test_padded_rows_that_write_their_whole_row_are_rejected():
    """Issue 47's counter-case: W = 4, 4 rows, seq_lens [129, 200], row stride 3."""
    buffer = torch.zeros(4, 4, dtype=torch.int64)
    assert ex08.stale_reads(buffer, [129, 200], 3) == {(1, 0), (2, 0), (3, 0)}
    assert _stale(buffer, [129, 200], 3, padded_write_all=True) == {(1, 0), (2, 0)}
    r = ex.check_stale_reads(lambda b, s, rs: _stale(b, s, rs, padded_write_all=True))
    assert not r.passed and ex.STALE_MISTAKES["padded_writes_all"] in r.message, r.message


def test_a_lookup_of_the_public_cases_does_not_pass():
    """The case sets hold inputs; a table of truths computed from them beforehand misses the steps drawn at check
    time (and the checker's own code is refused inside the function)."""
    table = {(tuple(b.shape), tuple(s), rs): ex._stale_variant(b, s, rs)
             for b, s, rs in ex.stale_cases() + ex.stale_domain()}
    r = ex.check_stale_reads(lambda b, s, rs: table[(tuple(b.shape), tuple(s), rs)])
    assert not r.passed and "KeyError" in r.message, r.message
    r = ex.check_stale_reads(lambda b, s, rs: ex._stale_variant(b, s, rs))
    assert not r.passed and "refused" in r.message, r.message


def test_integer_likes_are_ints_in_exercise_3():
    import numpy as np

    used, real, flat = ex08.ROW_STRIDE_ANSWERS
    assert ex.check_row_stride(torch.tensor(float(used)), np.array([real]), float(flat)).passed  # 08 ex3's tensor(5.)
    assert not ex.check_row_stride(True, real, flat).passed


def test_stale_steps_keep_the_513_token_edge_and_the_measured_padded_rows():
    """Issue 49, through the public checker: an answer wrong only at 513 tokens (a page begun by one token) is
    rejected, and so is one wrong only on padded rows of the measured steps. Bends that fail it: 513 -> 512 in
    ``STALE_EDGE_CASES``; every ``STALE_ENGINE_CASES`` step full (no padded row)."""
    def wrong_at_513(buffer, seq_lens, row_stride):
        return ex08.stale_reads(buffer, [512 if n == 513 else n for n in seq_lens], row_stride)

    assert not ex.check_stale_reads(wrong_at_513).passed
    assert any(513 in s for _, s, _ in ex.stale_cases())  # the named steps alone hold the edge
    measured = ex.stale_cases()[: len(ex.STALE_ENGINE_CASES)]
    assert any(b.shape[0] > len(s) for b, s, _ in measured)  # padded rows in the measured steps

    def padded_only_in_built_steps(buffer, seq_lens, row_stride):
        keys = {(tuple(b.shape), tuple(s), rs) for b, s, rs in measured}
        got = ex08.stale_reads(buffer, seq_lens, row_stride)
        if (tuple(buffer.shape), tuple(seq_lens), row_stride) in keys:
            return {(b, j) for b, j in got if b < len(seq_lens)}
        return got

    assert not ex.check_stale_reads(padded_only_in_built_steps).passed


def test_no_row_stride_message_names_an_expected_value():
    used, real, flat = ex08.ROW_STRIDE_ANSWERS
    for answers in [(2, real, flat), (used, real + 1, flat), (used, real, flat + 1), (8, 6, 26), (6, 5, 20)]:
        r = ex.check_row_stride(*answers)
        assert not r.passed
        for field, want in (("used row stride", used), ("buffer row stride", real), ("flat index", flat)):
            chunk = r.message.split(f"{field}: ")[1].split("; ", 2)[1] if f"{field}: " in r.message else ""  # the why
            assert not re.search(rf"(?<![\w.]){want}(?![\w.])", chunk), (field, r.message)
