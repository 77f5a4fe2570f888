"""Automatic checkers for notebook 08's exercises. Each prints PASS or a one-line hint and returns an
:class:`ExerciseResult`; none raises, whatever it is given (a stub, None, a wrong type, a numpy scalar,
a tensor, NaN, a huge int, a function that raises or breaks the backend): "NOT YET" and a hint.

| checker | the learner gives |
|---|---|
| ``check_replay(fn)`` | SGLang's ``init_forward_metadata_replay_cuda_graph`` for the fixed cutlass_mla backend |
| ``check_mystery(k, answer)`` | which option ("a".."d") produced ``mystery_figure(k)`` |
| ``check_row_stride(used, buffer, flat)`` | the row stride the pre-fix kernel used, the buffer's, a flat index |
| ``check_workspace_size(fn)`` | sgl-kernel's ``cutlass_mla_get_workspace_size`` |
| ``check_stale_reads(fn)`` | which (row, page) reads of a captured kernel hit entries not written this step |

Each checker runs a fixed case set built from the domain's edges (``REPLAY_CASES``, ``WORKSPACE_CASES``,
``stale_cases()``), never random draws. The truth is measured on the real mini engine (a small random
model: page geometry and graph-vs-eager agreement do not depend on the weights) or computed by the
library's own code. No answer is importable from here: the engines behind the mystery figures live in
``mla_edu.workshop.solutions.ex08`` with the solutions, which the notebook does not import.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from mla_edu.case_study.diagnose import last_launch, record_launches
from mla_edu.case_study.plots import draw_page_reads
from mla_edu.config import MLAConfig
from mla_edu.kernels import get_workspace_size, num_kv_splits_for
from mla_edu.kernels.workspace import BYTES_PER_BATCH_SPLIT, CUTLASS_HEADS, D_LATENT, D_ROPE
from mla_edu.kvcache import fill_page_table
from mla_edu.model import task
from mla_edu.model.tiny import TinyDeepseek, TinyDeepseekConfig
from mla_edu.serving import PRE_FIX, Engine
from mla_edu.serving.backends.cutlass_mla import POISON_PAGE
from mla_edu.util import PAGE_SIZE, cdiv
from mla_edu.workshop.panel import PanelSettings, measure_page_reads
from mla_edu.workshop.checks import ExerciseResult  # shared by every checker
from mla_edu.workshop.checks import as_int as _as_int, call as _call, describe as _describe, not_answered, option_key
from mla_edu.workshop.checks import report as _report, show as _show


def _not_callable(fn, signature: str):
    if callable(fn):
        return None
    if not_answered(fn):
        return _report(False, "not answered yet: write the function and pass it")
    return _report(False, f"expected a function {signature}, got {type(fn).__name__} {_show(fn)}")


@lru_cache(maxsize=1)
def toy_model():
    """A small random TinyDeepseek over the task's vocabulary (fast on CPU), seeded, eval mode."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(0)
    mla = MLAConfig(hidden_size=32, num_attention_heads=2, q_lora_rank=None, kv_lora_rank=32,
                    qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, rope_theta=10000.0,
                    rope_scaling=None, rope_interleave=True, max_position_embeddings=task.CONTEXT_LEN,
                    rms_norm_eps=1e-6, attention_bias=False)
    m = TinyDeepseek(TinyDeepseekConfig(mla=mla, vocab_size=task.VOCAB_SIZE, num_hidden_layers=2,
                                        intermediate_size=64))
    for p in m.parameters():  # larger weights: attention output depends on what it reads
        p.data.mul_(8.0)
    torch.random.set_rng_state(gen_state)
    return m.eval()


# ---- 1. write the replay hook -------------------------------------------------------------------
#: the engine exercise 1 captures: graphs for 2 and 4 rows, context 384 (W = (384 + 128) // 128 = 4 columns)
REPLAY_SETUP = dict(cuda_graph_bs=(2, 4), max_running_requests=4, context_length=384)
#: the batches exercise 1 replays, as each row's decode seq_len (its prompt has seq_len - 1 tokens), in batch
#: row order; rows are prefilled in reverse, so batch row b is not pool row b. Every page edge a request of
#: this context can have: 2 (a one-token prompt), 127, 128, 129, 255, 256, 257, 383, 384. Batches of 1 and 3
#: rows replay the graphs of 2 and 4 with a padded row (seq_len 1); batches of 2 and 4 fill them exactly. The
#: first batch has a 3-page row, so that a 1-wide write and a last page missing get different hints.
REPLAY_CASES = ((384, 129), (257,), (128, 256, 127), (255, 383, 2, 129), (2,))


def _replay_diagnosis(buf: torch.Tensor, want: torch.Tensor, n_pages: list) -> str:
    """What a replay hook wrote into the real rows ``[:len(n_pages)]`` of the index buffer, against ``want``."""
    rows, want = buf[: len(n_pages)].cpu(), want.cpu()
    untouched = [b for b, n in enumerate(n_pages) if bool((rows[b, :n] == POISON_PAGE).all())]
    if len(untouched) == len(n_pages):
        return "nothing"
    if not untouched and max(n_pages) > 1 and all(
            int(rows[b, 0]) == int(want[b, 0]) and bool((rows[b, 1:n] == POISON_PAGE).all())
            for b, n in enumerate(n_pages)):
        return "first_column"
    if untouched:
        return "rows:" + ", ".join(map(str, untouched))
    wrong = [b for b, n in enumerate(n_pages) if not torch.equal(rows[b, :n], want[b, :n])]
    if not wrong:
        return "right"
    short = [b for b in wrong if torch.equal(rows[b, : n_pages[b] - 1], want[b, : n_pages[b] - 1])
             and int(rows[b, n_pages[b] - 1]) == POISON_PAGE]
    if short == wrong:
        return "short:" + ", ".join(map(str, short))
    slots = [b for b in wrong if torch.equal(rows[b, : n_pages[b]], want[b, : n_pages[b]] * PAGE_SIZE)]
    if slots == wrong:  # req_to_token's entries at each page's first token, not divided by the page size
        return "token_slots:" + ", ".join(map(str, slots))
    return "wrong_pages:" + ", ".join(map(str, wrong))


#: one hint per classic mistake of exercise 1 (what the buffer held after the learner's hook)
REPLAY_HINTS = {
    "rebound": "you bound backend.cuda_graph_kv_indices to a new tensor. The graph holds the address of the "
               "buffer it was captured with and never looks the attribute up again: write into that buffer",
    "new_table": "you handed the metadata a new tensor. The graph was captured reading "
                 "backend.cuda_graph_kv_indices and never looks at forward_metadata again: write the page ids "
                 "into that buffer, in place",
    "nothing": "backend.cuda_graph_kv_indices still held the poison page id in every entry after your function "
               "ran: the graph takes each row's page ids from this buffer, so the hook has to put them there",
    "first_column": "only the first page id of each row was written, as through a 1-wide view; the graph reads "
                    "as many entries of each row as the request has pages",
    "rows": "rows {rows} of the {bs} the hook was called with still held the poison page id after your "
            "function ran: it wrote nothing into them",
    "short": "rows {rows} (seq_lens {lens}) lack their last page id: the hook wrote one page too few for a "
             "request whose last token begins a new page; count the pages of the tokens the request has now",
    "token_slots": "rows {rows} hold cache slots of tokens (req_to_token's entries), not page ids: a page holds "
                   "128 slots, and the kernel wants the page's number",
    "wrong_pages": "rows {rows} read wrong (but valid) pages: row b belongs to request req_pool_indices[b], "
                   "and its page p holds the cache page of that request's token p * 128",
    "right": "the buffer held the right page ids after your function ran, yet the replay differs from eager: "
             "did your function change something else the graph reads (the workspace, the metadata)?",
    "broke": "the replay failed after your function ran ({err}): your function left the backend in a state the "
             "captured step cannot run with (forward_metadata, the workspace?); write the page ids, change "
             "nothing else",
}


def _replay_prompts(seq_lens) -> list:
    """One prompt of ``seq_len - 1`` token ids per row (deterministic; the values do not matter)."""
    return [[(3 + 5 * i + 7 * b) % task.VOCAB_SIZE for i in range(n - 1)] for b, n in enumerate(seq_lens)]


def _replay_case(engine, fn, seq_lens, state) -> tuple:
    """Replay one batch through ``fn``: ``(logits by graph, logits eager, batch)`` or raise what the step raised."""
    runner, backend = engine.runner, engine.runner.backend
    reqs = engine.prefill_requests(_replay_prompts(seq_lens)[::-1])  # the last row takes the first pool row
    try:
        batch = engine.make_batch(reqs[::-1])  # batch row b is not pool row b: req_pool_indices matters
        state.update(mistake=None, raw_bs=len(seq_lens))
        with torch.no_grad():
            _, _, logits_g = runner.decode(batch)
            if state["error"]:
                return None, None, batch
            backend.init_forward_metadata(batch)
            _, _, logits_e = runner.decode_forward(batch)
        return logits_g, logits_e, batch
    finally:
        for r in reqs:
            engine.free_req(r)


def check_replay(fn) -> ExerciseResult:
    """Run ``fn`` as the fixed cutlass_mla backend's replay hook; graph replay must equal eager.

    ``fn(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)`` is called before every replay (``bs``: the
    captured size replayed, padded rows included), after the index buffer ``backend.cuda_graph_kv_indices``
    has been filled with a poison page id (so rows it does not write give NaN). Every batch of
    ``REPLAY_CASES`` is replayed on the engine of ``REPLAY_SETUP`` (the fix: the full-width view) and
    compared with eager decoding; only the real rows' outputs count. A wrong replay gets the hint of what
    the buffer held after ``fn`` ran (``REPLAY_HINTS``).
    """
    bad = _not_callable(fn, "(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)")
    if bad:
        return bad

    engine = Engine(toy_model(), attention_backend="cutlass_mla", defects="none", poison_fill=True,
                    **REPLAY_SETUP)  # poison_fill: the kernel runs checked
    backend = engine.runner.backend
    buf, workspace = backend.cuda_graph_kv_indices, backend.cuda_graph_mla_workspace
    metadata_class = type(backend.forward_metadata)
    state = {"error": None}

    def hook(bs, req_pool_indices, seq_lens, seq_lens_cpu):
        buf.fill_(POISON_PAGE)
        _, err = _call(fn, backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)
        state["error"] = state["error"] or err
        if backend.cuda_graph_kv_indices is not buf:
            backend.cuda_graph_kv_indices = buf  # the graph reads buf whatever the attribute says
            state["mistake"] = state["mistake"] or "rebound"
        md = getattr(getattr(backend, "forward_metadata", None), "block_kv_indices", None)
        if isinstance(md, torch.Tensor) and md.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr():
            state["mistake"] = state["mistake"] or "new_table"
        want = torch.full_like(buf[:bs], POISON_PAGE)
        fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs], want, PAGE_SIZE)
        raw = state["raw_bs"]
        state["lens"] = seq_lens[:raw].tolist()
        state["mistake"] = state["mistake"] or _replay_diagnosis(buf, want, [cdiv(n, PAGE_SIZE) for n in state["lens"]])
        state["bs"] = bs

    backend.init_forward_metadata_replay_cuda_graph = hook
    for k, seq_lens in enumerate(REPLAY_CASES):
        padded = engine.runner.graph_runner.padded_size(len(seq_lens))
        where = f"batch {k} (seq_lens {list(seq_lens)}, replayed as {padded} rows)"
        try:
            logits_g, logits_e, _ = _replay_case(engine, fn, seq_lens, state)
        except Exception as e:  # the step itself failed: the learner's function broke some state
            return _report(False, f"{where}: " + REPLAY_HINTS["broke"].format(err=_describe(e, 120)) + ".")
        finally:  # whatever fn did: the next batch starts from the captured state
            backend.cuda_graph_kv_indices, backend.cuda_graph_mla_workspace = buf, workspace
            backend.forward_metadata = metadata_class(workspace, buf)
        if state["error"]:
            return _report(False, f"{where}: your function raised {state['error']}")
        err = (logits_g - logits_e).abs().amax(dim=-1).nan_to_num(float("inf")).cpu()
        if not bool((err > 1e-3).any()):
            continue
        mistake = state["mistake"]
        name, _, rows = mistake.partition(":")
        lens = [state["lens"][int(b)] for b in rows.split(", ")] if rows else []
        return _report(False, f"{where}: " + REPLAY_HINTS[name].format(rows=rows, bs=state["bs"], lens=lens) + ".")
    return _report(True, f"graph replay equals eager on all {len(REPLAY_CASES)} batches (seq_lens at every page "
                         "edge from 2 to 384, padded and exact batch sizes, batch row != pool row), with the index "
                         "buffer poisoned before every replay.")


# ---- 2. which engine produced this plot? ----------------------------------------------------------
OPTIONS = {
    "a": "pre-fix code (width + workspace defects): frozen row stride 1, stale page ids in the buffer",
    "b": "width defect only, with the poison fill: frozen row stride 1, unused entries hold the poison id",
    "c": "SGLang's merged fix (no defect left): full width, stale page ids in the buffer",
    "d": "SGLang's merged fix with the poison fill: full width, unused entries hold the poison id",
}
#: the mystery figures; the engine behind each is with the solutions (``solutions.ex08.MYSTERY_ENGINES``)
MYSTERY_NUMBERS = (1, 2, 3)
#: per option: (only row 0 reads its own pages, entries not written this step hold old page ids)
_OPTION_CLAIMS = {"a": (True, True), "b": (True, False), "c": (False, True), "d": (False, False)}


def _mystery_engine(k: int) -> dict:
    from mla_edu.workshop.solutions.ex08 import MYSTERY_ENGINES  # the answers load only when a checker runs

    return MYSTERY_ENGINES[k]


@lru_cache(maxsize=None)
def _mystery_reads(k: int):

    settings = PanelSettings(**_mystery_engine(k), max_running_requests=6)
    return measure_page_reads(toy_model(), task.default_eval_set()[20:], settings)


def mystery_figure(k: int):
    """The page reads of one decode step of an engine whose defects you must name (``check_mystery``)."""
    if _as_int(k) not in MYSTERY_NUMBERS:
        raise ValueError(f"mystery: expected one of {list(MYSTERY_NUMBERS)}, got {_show(k)}")
    import matplotlib.pyplot as plt

    reads = _mystery_reads(_as_int(k))
    rows = reads.buffer.shape[0]
    fig = plt.figure(figsize=(6.5, 0.5 * rows + 3.4))  # the buffer above, intended and read pages below: ~590 px
    grid = fig.add_gridspec(2, 2)
    draw_page_reads(fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1]), reads,
                    show_stride=False)
    fig.suptitle(f"mystery {k}: one decode step by graph replay", fontsize=9)
    fig.tight_layout()
    return fig


def _option(answer):
    """"b", "B", "(b)", " b. " -> "b"; anything else None."""
    a = option_key(answer) if isinstance(answer, str) else None
    return a if a in OPTIONS else None


def check_mystery(k, answer) -> ExerciseResult:
    """A wrong answer is told which of its two claims the figure contradicts, and where to look; not the answer."""
    from mla_edu.workshop.solutions.ex08 import option_for  # the answers load only when a checker runs

    n = _as_int(k)
    if n not in MYSTERY_NUMBERS:
        return _report(False, f"expected a mystery number from {list(MYSTERY_NUMBERS)}, got {_show(k)}")
    if not_answered(answer):
        return _report(False, f"mystery {n}: not answered yet; pick one of {sorted(OPTIONS)}")
    option = _option(answer)
    if option is None:
        return _report(False, f"mystery {n}: expected one letter of {sorted(OPTIONS)}, got {_show(answer)}")
    truth = option_for(**_mystery_engine(n))
    if option == truth:
        return _report(True, f"mystery {n} is ({truth}) {OPTIONS[truth]}")
    reads = _mystery_reads(n)
    frozen = not all(reads.rows_ok)  # measured, not read off the answer key
    stale = bool((~reads.live & (reads.buffer != POISON_PAGE) & (reads.buffer != 1)).any())
    claim_frozen, claim_stale = _OPTION_CLAIMS[option]
    hints = []
    if claim_frozen != frozen:
        hints.append(f"({option}) says {'only row 0 reads' if claim_frozen else 'every row reads'} its own pages: "
                     "compare the 'page ids read under replay' panel with 'intended page ids', row by row")
    if claim_stale != stale:
        hints.append(f"({option}) says the entries not written this step hold "
                     f"{'old page ids' if claim_stale else 'the poison id'}: look at the index buffer's entries "
                     "not written this step (' x' stale, 'P' poison)")
    return _report(False, f"mystery {n}: not ({option}). " + "; ".join(hints) + ".")


# ---- 3. the row stride the kernel used ------------------------------------------------------------
ROW_STRIDE_SETUP = dict(context_length=640, cuda_graph_bs=(4, 8), max_running_requests=8, row=3, page=2)


@lru_cache(maxsize=1)
def _row_stride_truth():
    """Capture the pre-fix engine of ``ROW_STRIDE_SETUP`` and read what the bs-8 graph froze."""
    s = ROW_STRIDE_SETUP
    with record_launches() as log:  # the engine captures its graphs here
        engine = Engine(toy_model(), attention_backend="cutlass_mla", defects=PRE_FIX,
                        context_length=s["context_length"], max_running_requests=s["max_running_requests"],
                        cuda_graph_bs=s["cuda_graph_bs"])
    rec = last_launch(log, 8)
    table, launch = rec.page_table, rec.launch
    return launch.row_stride, engine.runner.backend.cuda_graph_kv_indices.stride(0), \
        table.storage_offset() + s["row"] * launch.row_stride + s["page"]


def _row_stride_hints(used: int, real: int, flat: int, answers: tuple) -> list:
    """One hint per wrong part of exercise 3's answer, naming the mistake (never the value)."""
    s = ROW_STRIDE_SETUP
    ctx_pages, (a_used, a_real, a_flat) = cdiv(s["context_length"], PAGE_SIZE), answers
    hints = []
    if a_used != used:
        why = {real: "that is the buffer's own stride; the wrapper takes the stride from the view it was "
                     "handed at capture (its size(1)), not from the buffer",
               ctx_pages: "that is the page count of the longest context; capture never saw such a request",
               s["cuda_graph_bs"][0]: "that is a batch size, not a row stride",
               s["cuda_graph_bs"][1]: "that is a batch size, not a row stride"}
        hints.append(f"used row stride: not {_show(a_used)}; " + why.get(
            a_used, "what were seq_lens when the graph was captured, and how wide a view did that give?"))
    if a_real != real:
        why = {ctx_pages: "that is ceil(640 / 128); SGLang's width formula for the buffer "
                          "(init_cuda_graph_state) does not round the same way",
               used: "that is the stride the kernel used; the buffer's rows are as wide as init_cuda_graph_state "
                     "made them"}
        hints.append(f"buffer row stride: not {_show(a_real)}; " + why.get(
            a_real, "look at how init_cuda_graph_state sizes the buffer's columns"))
    if a_flat != flat:
        why = {s["row"] * real + s["page"]: "that is where the row should read, through the buffer's stride; "
                                            "the kernel steps rows by the stride it was given",
               s["row"] * ctx_pages + s["page"]: "that steps rows by the context's page count; the kernel "
                                                 "steps rows by the stride it was given"}
        hints.append(f"flat index: not {_show(a_flat)}; " + why.get(
            a_flat, "count entries from the buffer's first one, moving from row to row by the stride the "
                    "kernel was given"))
    return hints


def check_row_stride(used_row_stride, buffer_row_stride, flat_index) -> ExerciseResult:
    """Pre-fix cutlass_mla, ``--context-length 640 --cuda-graph-bs 4 8``, replay at batch size 8:
    the row stride the kernel indexes the page table with, the index buffer's real row stride, and
    the flat index (from the buffer's first entry) where request row 3 reads its page j = 2.
    Ints or integer-likes (numpy's int64, a one-element integer tensor)."""
    given = (used_row_stride, buffer_row_stride, flat_index)
    if all(map(not_answered, given)):
        return _report(False, "not answered yet: give three ints (used row stride, buffer row stride, flat index)")
    answers = tuple(_as_int(a) for a in given)
    names = ("used row stride", "buffer row stride", "flat index")
    bad = [f"{n} {_show(a)}" for n, a, i in zip(names, given, answers) if i is None]
    if bad:
        return _report(False, f"expected three ints, got {', '.join(bad)}")
    used, real, flat = _row_stride_truth()
    hints = _row_stride_hints(used, real, flat, answers)
    if hints:
        return _report(False, "; ".join(hints) + ".")
    s = ROW_STRIDE_SETUP
    return _report(True, f"the kernel used row stride {used} on a buffer whose rows are {real} apart; "
                         f"row {s['row']} page {s['page']} read flat entry {flat}, which is row "
                         f"{flat // real}'s page slot {flat % real}.")


# ---- 4. size the workspace ------------------------------------------------------------------------
#: exercise 4's cases: every (max_seq_len, num_batches) of these edges, for each (sm_count, num_kv_splits)
WORKSPACE_LENGTHS = (1, 127, 128, 129, 255, 256, 257, 640, 896, 897, 4096, 4097, 4224)
#: around sm_count (sm_count // B is 0 past it), divisors of 132 (4, 66) and of 133 = 132 + 1 (7, 19): where
#: sm_count // B steps
WORKSPACE_BATCHES = (1, 2, 3, 4, 7, 8, 16, 19, 64, 66, 131, 132, 133, 200)
WORKSPACE_SPLITS = ((132, 1), (132, 2), (132, 3), (132, -1), (148, -1))
WORKSPACE_CASES = tuple((L, B, sms, ns) for sms, ns in WORKSPACE_SPLITS
                        for L in WORKSPACE_LENGTHS for B in WORKSPACE_BATCHES)


def _split_variant(max_seq_len, num_batches, sm_count, num_kv_splits, *, round_up=True, last_step=True,
                   auto=True, fixed=True, chunks=True) -> int:
    """The split count, with one step optionally done wrong (each keyword: one classic mistake)."""
    if (num_kv_splits == -1 and auto) or not fixed:
        max_splits = (cdiv(max_seq_len, PAGE_SIZE) if round_up else max_seq_len // PAGE_SIZE) if chunks else max_seq_len
        heur = min(max_splits, max(1, sm_count // num_batches))
        if heur < 1:
            return 0
        return cdiv(max_splits, cdiv(max_splits, heur)) if last_step else heur
    return max(num_kv_splits, 1)


#: the split-count mistakes: the ``_split_variant`` keyword that makes each, and its hint
WORKSPACE_MISTAKES = {
    "round_up": (False, "max_splits counts 128-token chunks of max_seq_len, and a partial chunk is a chunk too"),
    "last_step": (False, "your automatic split count stops at heur; the formula has one more step, which spreads "
                         "the chunks evenly over the waves of CTAs (it changes the count for some shapes)"),
    "auto": (False, "num_kv_splits = -1 is not a split count: it asks for the automatic one"),
    "fixed": (False, "a num_kv_splits >= 1 is used as is; only -1 asks for the automatic count"),
    "chunks": (False, "max_splits is a count of 128-token chunks, not of tokens"),
}


def _bytes_mistakes() -> dict:
    """Bytes per (batch, split) a classic mistake gives instead of the right count, and its hint."""
    H, D = CUTLASS_HEADS, D_LATENT
    fp32 = ("the partials are float32 (4 bytes each) whatever the dtype of q and the cache: the kernel "
            "accumulates in fp32")
    return {
        (2 * D + 4) * H: "o_acc in bf16: " + fp32,
        (2 * D + 2) * H: "bf16 partials: " + fp32,
        4 * D * H: "you counted o_acc but not lse_acc (one float32 per (batch, head, split))",
        4 * H: "you counted lse_acc but not o_acc",
        (4 * (D + D_ROPE) + 4) * H: "o_acc 576 wide: a partial output is as wide as the latent it attends over "
                                    "(kv_lora_rank), without the rope part of the cached row",
        **{(4 * D + 4) * h: f"{h} heads: the kernel pads the heads to its tile of 128, whatever H is"
           for h in (16, 32)},  # (not 64: the same bytes as bf16 partials at 128)
    }


def _workspace_answers(fn) -> tuple:
    """``(bytes per case, None)`` or ``(None, a one-line hint)``: the learner's function on every case."""
    got = []
    for case in WORKSPACE_CASES:
        value, err = _call(fn, *case)
        if err:
            L, B, sms, ns = case
            hint = ""
            if err.startswith("ZeroDivisionError") and ns == -1:
                hint = (": with more requests than SMs, sm_count // B is 0, and heur has a floor" if sms // B == 0
                        else f": max_splits is 0 here; {WORKSPACE_MISTAKES['round_up'][1]}" if L < PAGE_SIZE else "")
            return None, f"workspace_size{case} raised {err}{hint}"
        n = _as_int(value, allow_float=True)
        if n is None:
            what = ("it returned None: return the number of bytes" if value is None else
                    f"expected an int number of bytes, got {type(value).__name__} {_show(value)}")
            return None, f"workspace_size{case}: {what}"
        got.append(n)
    return got, None


def check_workspace_size(fn) -> ExerciseResult:
    """``fn(max_seq_len, num_batches, sm_count, num_kv_splits) -> bytes`` against sgl-kernel's formula.

    Domain: max_seq_len >= 1, num_batches >= 1, sm_count >= 1, num_kv_splits = -1 (automatic) or >= 1; the
    cases (``WORKSPACE_CASES``) are its edges. Every case is run first; an answer that one classic mistake
    explains on all of them gets that mistake's hint, any other the first case it gets wrong.
    """
    bad = _not_callable(fn, "(max_seq_len, num_batches, sm_count, num_kv_splits)")
    if bad:
        return bad
    got, err = _workspace_answers(fn)
    if err:
        return _report(False, err)
    want = [get_workspace_size(*case) for case in WORKSPACE_CASES]
    if got == want:
        return _report(True, f"all {len(WORKSPACE_CASES)} cases equal sgl-kernel's cutlass_mla_get_workspace_size "
                             f"(e.g. {(4224, 8, 132, -1)} -> {get_workspace_size(4224, 8, 132, -1):,} bytes).")
    n_wrong = sum(g != w for g, w in zip(got, want))
    per_split = {g // (num_kv_splits_for(*c) * c[1]) if g % (num_kv_splits_for(*c) * c[1]) == 0 else None
                 for g, c in zip(got, WORKSPACE_CASES)}
    if len(per_split) == 1 and not per_split & {None, 0}:  # the split count is right everywhere, the bytes are not
        hint = _bytes_mistakes().get(per_split.pop(), "the bytes per (batch, split) are off on every case: count "
                                                      "the elements of o_acc and lse_acc and their size")
        return _report(False, f"{n_wrong} of {len(want)} cases wrong, all by one mistake: {hint}.")

    if got == [BYTES_PER_BATCH_SPLIT * _split_variant(*c) for c in WORKSPACE_CASES]:
        return _report(False, f"{n_wrong} of {len(want)} cases wrong, all by one mistake: every request of the "
                              "batch has its own partials.")
    for name, (wrong, hint) in WORKSPACE_MISTAKES.items():
        if got == [BYTES_PER_BATCH_SPLIT * _split_variant(*c, **{name: wrong}) * c[1] for c in WORKSPACE_CASES]:
            return _report(False, f"{n_wrong} of {len(want)} cases wrong, all by one mistake: {hint}.")
    i = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    L, B, sms, ns = WORKSPACE_CASES[i]
    if got[i] == 0:
        hint = ("with more requests than SMs, sm_count // B is 0, and heur has a floor" if ns == -1 and sms // B == 0
                else "it is not 0 at one split: sgl-kernel sizes it for one split anyway")
    else:
        hint = "find which factor differs: the bytes per (batch, split), the split count, or the batch"
    return _report(False, f"{n_wrong} of {len(want)} cases wrong; the first, workspace_size{WORKSPACE_CASES[i]}: "
                          f"expected {want[i]:,} bytes, got {_show(got[i])}; {hint}")


# ---- 5. find the stale entries a captured kernel read -------------------------------------------
#: measured steps of the pre-fix engine: (max running requests = largest captured size, requests in the step)
STALE_ENGINE_CASES = ((6, 6), (5, 5), (8, 8), (8, 6), (6, 5))
#: built steps at the domain's edges: (W, buffer rows, row stride, seq_lens of the real rows). Row stride 1 (the
#: pre-fix kernel), W (the fix) and one between; no padded row and up to three; seq_lens 1 and every page edge;
#: padded rows whose reads land on a slot a real row did not write, and on their own first entry.
STALE_EDGE_CASES = (
    (4, 4, 1, (129, 127, 1, 257)),
    (4, 6, 1, (255, 1, 128, 384)),
    (4, 7, 1, (1, 2, 300, 512)),
    (5, 5, 1, (256, 129, 385, 1)),
    (5, 3, 2, (513, 128)),
    (3, 4, 2, (257, 129)),
    (4, 3, 4, (128, 129)),
    (2, 4, 2, (256,)),
    (3, 2, 1, (384,)),
)


def _padded(seq_lens, rows: int) -> list:
    """Every buffer row's seq_len: the real rows' ``seq_lens``, then 1 for each padded row."""
    return list(seq_lens) + [1] * (rows - len(seq_lens))


def _live(rows: int, width: int, seq_lens) -> torch.Tensor:
    """``[rows * W]`` bool: the entries a step writes (row r its first ceil(seq_len / 128); padded rows seq_len 1)."""
    live = torch.zeros(rows * width, dtype=torch.bool)
    for r, n in enumerate(_padded(seq_lens, rows)):
        live[r * width: r * width + cdiv(n, PAGE_SIZE)] = True
    return live


def _stale_from_live(live: torch.Tensor, rows: int, seq_lens, row_stride: int) -> set:
    """The reads ``(b, j)`` of every row, padded ones included, that hit an entry ``live`` marks unwritten."""
    out = set()
    for b, n in enumerate(_padded(seq_lens, rows)):
        for j in range(cdiv(n, PAGE_SIZE)):
            i = b * row_stride + j
            if i >= live.numel() or not bool(live[i]):
                out.add((b, j))
    return out


@lru_cache(maxsize=None)
def _stale_engine_case(k: int):

    mr, bs = STALE_ENGINE_CASES[k]
    reads = measure_page_reads(toy_model(), task.default_eval_set()[40 * k:],
                               PanelSettings(defects=PRE_FIX, max_running_requests=mr), batch_size=bs)
    rows = reads.buffer.shape[0]
    truth = _stale_from_live(reads.live.reshape(-1), rows, reads.seq_lens, reads.launch.row_stride)
    return (reads.buffer.clone(), tuple(reads.seq_lens), reads.launch.row_stride), truth


def _stale_edge_case(k: int):
    width, rows, rs, seq_lens = STALE_EDGE_CASES[k]
    live = _live(rows, width, seq_lens)
    ids = torch.arange(rows * width, dtype=torch.int64)
    buffer = torch.where(live, 2 + ids, 1000 + (7 * ids) % 97).reshape(rows, width)  # fresh ids, old ids elsewhere
    return (buffer, seq_lens, rs), _stale_from_live(live, rows, seq_lens, rs)


@lru_cache(maxsize=1)
def stale_cases() -> tuple:
    """Exercise 5's steps: ``((buffer [rows, W] int64, seq_lens, row_stride), truth)``, measured then built."""
    return tuple(_stale_engine_case(k) for k in range(len(STALE_ENGINE_CASES))) + \
        tuple(_stale_edge_case(k) for k in range(len(STALE_EDGE_CASES)))


def _stale_variant(buffer, seq_lens, row_stride, *, landing_row=True, frozen_stride=True, buffer_rows=True,
                   slot_past_end=True, padded_readers=True, padded_writes=True, round_up=True, pages=True) -> set:
    """The stale reads, with one step optionally done wrong (each keyword: one classic mistake; ``round_up="writes"``:
    the floor only in the count of entries a row writes; ``pages=False``: that count in tokens)."""
    rows, width = buffer.shape
    if not buffer_rows:  # one buffer row per request: the padded rows forgotten
        rows, width = len(seq_lens), buffer.numel() // len(seq_lens)
    def ceil(n):
        return cdiv(n, PAGE_SIZE)

    def floor(n):
        return n // PAGE_SIZE

    read_pages = floor if round_up is False else ceil
    written_pages = (lambda n: n) if not pages else ceil if round_up is True else floor  # pages False: tokens
    lens = _padded(seq_lens, rows)
    written = [written_pages(n) if padded_writes or r < len(seq_lens) else 0 for r, n in enumerate(lens)]
    out = set()
    for b, n in enumerate(lens if padded_readers else seq_lens):
        for j in range(read_pages(n)):
            r, slot = divmod(b * (row_stride if frozen_stride else width) + j, width)
            limit = written[r] if landing_row and r < rows else written[min(b, rows - 1)]
            if r >= rows or (slot >= limit if slot_past_end else slot > limit):
                out.add((b, j))
    return out


#: the classic mistakes: the ``_stale_variant`` keyword that makes each, and its hint
STALE_MISTAKES = {
    "landing_row": "you compared the slot with the page count of the request that reads; an entry belongs to "
                   "the buffer row it sits in, and that row's request decides whether it was written",
    "frozen_stride": "your reads go through the buffer's own row stride (each row reads its own row); the "
                     "captured kernel uses the row stride it was given (row_stride), so a read can land in "
                     "another row",
    "buffer_rows": "you took one buffer row per request; the buffer has a row per captured slot, padded rows "
                   "included, so it can have more rows than seq_lens has entries",
    "slot_past_end": "a row that writes n entries writes slots 0 .. n-1: slot n is not written",
    "padded_readers": "you left out the reads of the padded rows; the captured kernel runs every row of the "
                      "graph, padded ones too (seq_len 1: they read one page each)",
    "padded_writes": "you took the padded rows as writing nothing; the replay fills their first entry too "
                     "(seq_len 1: one page)",
    "round_up": "a request's pages are its 128-token pages begun, not only the full ones: a partial page is "
                "read and written too",
    "pages": "you compared a page slot with a count of tokens: a row writes one entry per page",
}


def _stale_answer(got) -> tuple:
    """``(set of (int, int), None)`` or ``(None, what is wrong with its type)``."""
    if got is None:
        return None, "it returned None: return a set of (row, j) pairs"
    if isinstance(got, (str, bytes, dict)) or not hasattr(got, "__iter__"):
        return None, f"expected a set of (row, j) pairs, got {type(got).__name__} {_show(got)}"
    out = set()
    try:
        for item in got:
            pair = tuple(item) if hasattr(item, "__iter__") and not isinstance(item, (str, bytes)) else None
            ints = None if pair is None or len(pair) != 2 else tuple(_as_int(x) for x in pair)
            if ints is None or None in ints:
                return None, f"expected a set of (row, j) pairs of ints, got an element {_show(item)}"
            out.add(ints)
    except Exception as e:
        return None, f"iterating over your answer raised {type(e).__name__}"
    return out, None


def _stale_hint(buffer, seq_lens, rs, got, truth) -> str:
    """A hint on one step's wrong answer: what is missing and extra, and the mistake it looks like."""
    rows, width = buffer.shape
    lens = _padded(seq_lens, rows)
    reads = {(b, j) for b, n in enumerate(lens) for j in range(cdiv(n, PAGE_SIZE))}
    missing, extra = sorted(truth - got), sorted(got - truth)
    wrong = {(b, j) for b, j in reads if b * rs + j != b * width + j}
    where = f"missing {[_show(p) for p in missing[:4]]}, extra {[_show(p) for p in extra[:4]]}".replace("'", "")
    if got == wrong and wrong != truth:
        hint = ("those are the *wrong* reads; a wrong read can land on an entry another row wrote this "
                "step (fresh, just not its own). Stale = not written this step, by any row")
    elif extra and not set(extra) & reads:
        hint = "some of your pairs are not reads at all: row b reads its pages j < ceil(seq_len / 128) only"
    else:
        b, j = (missing or extra)[0]
        hint = (f"follow read ({b}, {j}): which buffer row and slot does it land on, and did that row write "
                "that slot this step?")
    return f"{where}; {hint}"


def check_stale_reads(fn) -> ExerciseResult:
    """``fn(buffer, seq_lens, row_stride) -> set of (row, j)``: the reads that hit an entry not written
    this step. ``buffer`` is the index buffer ``[rows, W]``; ``seq_lens`` lists the real rows; the rows past
    them are padded rows (seq_len 1). Every row, padded ones included, writes its first
    ``ceil(seq_len / 128)`` entries and reads page ``j < ceil(seq_len / 128)`` at flat index
    ``row * row_stride + j``. Steps: five measured on the pre-fix engine, then ``STALE_EDGE_CASES``.

    Every step is run first; an answer that one classic mistake explains on all of them gets that
    mistake's hint (``STALE_MISTAKES``), any other a hint on the first step it gets wrong.
    """
    bad = _not_callable(fn, "(buffer, seq_lens, row_stride)")
    if bad:
        return bad
    cases = stale_cases()
    got_all = []
    for k, ((buffer, seq_lens, rs), _) in enumerate(cases):
        got, err = _call(fn, buffer.clone(), list(seq_lens), rs)
        if err:
            return _report(False, f"step {k}: your function raised {err}")
        got, err = _stale_answer(got)
        if err:
            return _report(False, f"step {k}: {err}")
        got_all.append(got)
    truths = [truth for _, truth in cases]
    if got_all == truths:
        n = sum(len(t) for t in truths)
        return _report(True, f"all {len(cases)} steps right ({n} stale reads in all): these entries are what the "
                             "captured kernel attended over instead of the request's own pages.")
    n_wrong = sum(g != t for g, t in zip(got_all, truths))
    for name, hint in STALE_MISTAKES.items():
        for wrong in (False, "writes") if name == "round_up" else (False,):
            if got_all == [_stale_variant(*args, **{name: wrong}) for args, _ in cases]:
                return _report(False, f"{n_wrong} of {len(cases)} steps wrong, all by one mistake: {hint}.")
    k = next(k for k, (g, t) in enumerate(zip(got_all, truths)) if g != t)
    (buffer, seq_lens, rs), truth = cases[k]
    return _report(False, f"step {k} (seq_lens {list(seq_lens)}, row stride {rs}, buffer {list(buffer.shape)}): "
                          + _stale_hint(buffer, seq_lens, rs, got_all[k], truth))


__all__ = ["ExerciseResult", "MYSTERY_NUMBERS", "OPTIONS", "check_mystery", "check_replay", "check_row_stride",
           "check_stale_reads", "check_workspace_size", "mystery_figure", "stale_cases", "toy_model"]
