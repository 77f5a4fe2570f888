"""Automatic checkers for notebook 08's exercises. Each prints PASS or a precise hint and returns an
:class:`ExerciseResult`; none raises on a wrong or unfinished answer (a stub is "not yet solved").

| checker | the learner gives |
|---|---|
| ``check_replay(fn)`` | SGLang's ``init_forward_metadata_replay_cuda_graph`` for the fixed cutlass_mla backend |
| ``check_mystery(k, answer)`` | which option ("a".."d") produced ``mystery_figure(k)`` |
| ``check_row_stride(used, buffer, flat)`` | the row stride the pre-fix kernel used, the buffer's, a flat index |
| ``check_workspace_size(fn)`` | sgl-kernel's ``cutlass_mla_get_workspace_size`` |
| ``check_stale_reads(fn)`` | which (row, page) reads of the pre-fix kernel hit entries not written this step |

The truth is always measured on the real mini engine (a small random model: page geometry and
graph-vs-eager agreement do not depend on the weights) or computed by the library's own code.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

import torch

from mla_edu.serving import DEFECTS, MERGED_FIX, PRE_FIX, Engine
from mla_edu.serving.backends.cutlass_mla import POISON_PAGE
from mla_edu.util import PAGE_SIZE, cdiv



@dataclass
class ExerciseResult:
    passed: bool
    message: str

    def __str__(self) -> str:
        return ("PASS: " if self.passed else "NOT YET: ") + self.message

    def __repr__(self) -> str:
        return f"ExerciseResult(passed={self.passed})"


def _report(passed: bool, message: str) -> ExerciseResult:
    r = ExerciseResult(passed, message)
    print(r)
    return r


def _call(fn, *args):
    """``(value, None)`` or ``(None, a one-line description of what fn raised)``."""
    try:
        return fn(*args), None
    except Exception as e:  # the learner's code: any failure is a hint, not a crash
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


@lru_cache(maxsize=1)
def toy_model():
    """A small random TinyDeepseek over the task's vocabulary (fast on CPU), seeded, eval mode."""
    from mla_edu.config import MLAConfig
    from mla_edu.model import task
    from mla_edu.model.tiny import TinyDeepseek, TinyDeepseekConfig

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
def _rows(mask) -> str:
    return ", ".join(str(i) for i, m in enumerate(mask) if m)


def _replay_diagnosis(buf: torch.Tensor, want: torch.Tensor, n_pages: list) -> str:
    """What a replay hook wrote into the rows ``[:bs]`` of the index buffer, against ``want``."""
    rows = buf[: len(n_pages)].cpu()
    want = want.cpu()
    untouched = [b for b, n in enumerate(n_pages) if bool((rows[b, :n] == POISON_PAGE).all())]
    if len(untouched) == len(n_pages):
        return "nothing"
    if not untouched and all(int(rows[b, 0]) == int(want[b, 0]) and bool((rows[b, 1:n] == POISON_PAGE).all())
                             for b, n in enumerate(n_pages)) and max(n_pages) > 1:
        return "first_column"
    if untouched:
        return "rows:" + ", ".join(map(str, untouched))
    if any(not torch.equal(rows[b, :n], want[b, :n]) for b, n in enumerate(n_pages)):
        return "wrong_pages"
    return "right"


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
    "wrong_pages": "rows {rows} read wrong (but valid) pages: row b belongs to request req_pool_indices[b], "
                   "and its page p holds the cache page of that request's token p * 128",
    "right": "the buffer held the right page ids after your function ran, yet the replay differs from eager: "
             "did your function change something else the graph reads (the workspace, the metadata)?",
}


def check_replay(fn, n_trials: int = 4, seed: int = 0) -> ExerciseResult:
    """Run ``fn`` as the fixed cutlass_mla backend's replay hook; graph replay must equal eager.

    ``fn(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)`` is called before every replay,
    after the index buffer ``backend.cuda_graph_kv_indices`` has been filled with a poison page id
    (so rows it does not write give NaN). Graphs are captured for batch sizes 2 and 4 with the full
    width (the fix); batches of 1..4 requests of random lengths (1..3 pages) are replayed. A wrong
    replay gets the hint of what the buffer held after ``fn`` ran (``REPLAY_HINTS``).
    """
    if not callable(fn):
        return _report(False, f"expected a function (backend, bs, req_pool_indices, seq_lens, seq_lens_cpu), "
                              f"got {type(fn).__name__}")
    from mla_edu.kvcache import fill_page_table
    from mla_edu.model import task

    model = toy_model()
    engine = Engine(model, attention_backend="cutlass_mla", defects="none", poison_fill=True, cuda_graph_bs=(2, 4),
                    max_running_requests=4, context_length=384)  # poison_fill: the kernel runs checked
    runner, backend = engine.runner, engine.runner.backend
    buf = backend.cuda_graph_kv_indices
    state = {"error": None, "mistake": None}

    def hook(bs, req_pool_indices, seq_lens, seq_lens_cpu):
        buf.fill_(POISON_PAGE)
        _, err = _call(fn, backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)
        state["error"] = state["error"] or err
        if backend.cuda_graph_kv_indices is not buf:
            backend.cuda_graph_kv_indices = buf  # the graph reads buf whatever the attribute says
            state["mistake"] = state["mistake"] or "rebound"
        md = backend.forward_metadata.block_kv_indices
        if md.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr():
            state["mistake"] = state["mistake"] or "new_table"
        want = torch.full_like(buf[:bs], POISON_PAGE)
        fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs], want, PAGE_SIZE)
        n_pages = [cdiv(n, PAGE_SIZE) for n in seq_lens[:bs].tolist()]
        state["mistake"] = state["mistake"] or _replay_diagnosis(buf, want, n_pages)
        state["bs"] = bs

    backend.init_forward_metadata_replay_cuda_graph = hook
    rng = random.Random(seed)
    for trial in range(n_trials):
        bs = rng.randint(1, 4) if trial else 3  # 3: padded to the captured 4
        prompts = [task.sample_question(rng, rng.randint(20, 380)).prompt_ids for _ in range(bs)]
        reqs = engine.prefill_requests(prompts)
        rng.shuffle(reqs)  # batch row b is not pool row b: req_pool_indices matters
        batch = engine.make_batch(reqs)
        state["mistake"] = None
        with torch.no_grad():
            _, bad, logits_g = runner.decode(batch)
            backend.init_forward_metadata(batch)
            _, _, logits_e = runner.decode_forward(batch)
        for r in reqs:
            engine.free_req(r)
        backend.forward_metadata = backend.forward_metadata.__class__(backend.cuda_graph_mla_workspace, buf[:4])
        where = f"trial {trial} (batch of {bs}, lengths {batch.seq_lens_cpu.tolist()})"
        if state["error"]:
            return _report(False, f"{where}: your function raised {state['error']}")
        err = (logits_g - logits_e).abs().amax(dim=-1).nan_to_num(float("inf")).cpu()
        wrong = (err > 1e-3).tolist()
        if not any(wrong):
            continue
        mistake = state["mistake"]
        if mistake.startswith("rows:"):
            return _report(False, f"{where}: " + REPLAY_HINTS["rows"].format(rows=mistake[5:], bs=state["bs"]) + ".")
        if mistake == "wrong_pages":
            return _report(False, f"{where}: " + REPLAY_HINTS["wrong_pages"].format(rows=_rows(wrong)) + ".")
        return _report(False, f"{where}: " + REPLAY_HINTS[mistake] + ".")
    return _report(True, f"graph replay equals eager on {n_trials} batches of random lengths, with the "
                         "index buffer poisoned before every replay.")


# ---- 2. which defect produced this plot? ----------------------------------------------------------
OPTIONS = {
    "a": "pre-fix code (width + workspace defects): frozen row stride 1, stale page ids in the buffer",
    "b": "width defect only, with the poison fill: frozen row stride 1, unused entries hold the poison id",
    "c": "SGLang's merged fix (no defect left): full width, stale page ids in the buffer",
    "d": "SGLang's merged fix with the poison fill: full width, unused entries hold the poison id",
}
#: the engine behind each mystery figure: its cutlass_mla defects and whether the poison fill is on
MYSTERIES = {1: dict(defects=frozenset({"width"}), poison_fill=True),
             2: dict(defects=MERGED_FIX, poison_fill=False),
             3: dict(defects=PRE_FIX, poison_fill=False)}


def option_for(defects: frozenset, poison_fill: bool = False) -> str:
    """The option that describes an engine with these cutlass_mla defects and poison fill setting (the
    workspace defect is invisible in a page-read figure)."""
    if "width" in defects:
        return "b" if poison_fill else "a"
    return "d" if poison_fill else "c"


@lru_cache(maxsize=None)
def _mystery_reads(k: int):
    from mla_edu.model import task
    from mla_edu.workshop.panel import PanelSettings, measure_page_reads

    settings = PanelSettings(**MYSTERIES[k], max_running_requests=6)
    return measure_page_reads(toy_model(), task.default_eval_set()[20:], settings)


def mystery_figure(k: int):
    """The page reads of one decode step of an engine whose defects you must name (``check_mystery``)."""
    if k not in MYSTERIES:
        raise ValueError(f"mystery: expected one of {sorted(MYSTERIES)}, got {k!r}")
    import matplotlib.pyplot as plt

    from mla_edu.case_study.diagnose import draw_page_reads

    reads = _mystery_reads(k)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), gridspec_kw={"width_ratios": [reads.buffer.shape[1], 4, 4]})
    draw_page_reads(*axes, reads, show_stride=False)
    fig.suptitle(f"mystery {k}: one decode step by graph replay", fontsize=9)
    fig.tight_layout()
    return fig


#: per option: (only row 0 reads its own pages, entries not written this step hold old page ids)
_OPTION_CLAIMS = {"a": (True, True), "b": (True, False), "c": (False, True), "d": (False, False)}


def check_mystery(k: int, answer) -> ExerciseResult:
    """A wrong answer is told which of its two claims the figure contradicts, and where to look; not the answer."""
    if k not in MYSTERIES:
        return _report(False, f"expected a mystery number from {sorted(MYSTERIES)}, got {k!r}")
    if answer is None:
        return _report(False, f"mystery {k}: not answered yet; pick one of {sorted(OPTIONS)}")
    if answer not in OPTIONS:
        return _report(False, f"mystery {k}: expected one of {sorted(OPTIONS)}, got {answer!r}")
    truth = option_for(**MYSTERIES[k])
    if answer == truth:
        return _report(True, f"mystery {k} is ({truth}) {OPTIONS[truth]}")
    reads = _mystery_reads(k)
    frozen = not all(reads.rows_ok)  # measured, not read off the answer key
    stale = bool((~reads.live & (reads.buffer != POISON_PAGE) & (reads.buffer != 1)).any())
    claim_frozen, claim_stale = _OPTION_CLAIMS[answer]
    hints = []
    if claim_frozen != frozen:
        hints.append(f"({answer}) says {'only row 0 reads' if claim_frozen else 'every row reads'} its own pages: "
                     "compare the 'page ids read under replay' panel with 'intended page ids', row by row")
    if claim_stale != stale:
        hints.append(f"({answer}) says the entries not written this step hold "
                     f"{'old page ids' if claim_stale else 'the poison id'}: look at the index buffer's entries "
                     "that are not green")
    return _report(False, f"mystery {k}: not ({answer}). " + "; ".join(hints) + ".")


# ---- 3. the row stride the kernel used ------------------------------------------------------------
ROW_STRIDE_SETUP = dict(context_length=640, cuda_graph_bs=(4, 8), max_running_requests=8, row=3, page=2)


@lru_cache(maxsize=1)
def _row_stride_truth():
    """Capture the pre-fix engine of ``ROW_STRIDE_SETUP`` and read what the bs-8 graph froze."""
    from mla_edu.case_study.diagnose import last_launch, record_launches

    s = ROW_STRIDE_SETUP
    with record_launches() as log:  # the engine captures its graphs here
        engine = Engine(toy_model(), attention_backend="cutlass_mla", defects=PRE_FIX,
                        context_length=s["context_length"], max_running_requests=s["max_running_requests"],
                        cuda_graph_bs=s["cuda_graph_bs"])
    rec = last_launch(log, 8)
    table, launch = rec.page_table, rec.launch
    return launch.row_stride, engine.runner.backend.cuda_graph_kv_indices.stride(0), \
        table.storage_offset() + s["row"] * launch.row_stride + s["page"]


def check_row_stride(used_row_stride, buffer_row_stride, flat_index) -> ExerciseResult:
    """Pre-fix cutlass_mla, ``--context-length 640 --cuda-graph-bs 4 8``, replay at batch size 8:
    the row stride the kernel indexes the page table with, the index buffer's real row stride, and
    the flat index (from the buffer's first entry) where request row 3 reads its page j = 2."""
    answers = (used_row_stride, buffer_row_stride, flat_index)
    if any(a is None for a in answers):
        return _report(False, "not answered yet: give three ints (used row stride, buffer row stride, flat index)")
    if not all(isinstance(a, int) and not isinstance(a, bool) for a in answers):
        return _report(False, f"expected three ints, got {[type(a).__name__ for a in answers]}")
    used, real, flat = _row_stride_truth()
    s = ROW_STRIDE_SETUP
    if buffer_row_stride != real:
        hint = (" SGLang sizes the buffer with (max_context_len + 128) // 128: one page more than "
                "ceil(640 / 128)." if buffer_row_stride == cdiv(s["context_length"], PAGE_SIZE) else
                " The buffer is int32 (max_bs, W) with W = (max_context_len + PAGE) // PAGE.")
        return _report(False, f"buffer row stride: not {buffer_row_stride}.{hint}")
    if used_row_stride != used:
        hint = (" That is the buffer's stride; the cutlass wrapper takes page_table.size(1), and the view was "
                "sliced at capture with max_seqlen_pad = ceil(max(dummy seq_lens) / 128)."
                if used_row_stride == real else
                " The wrapper reads the stride from the view's size(1), frozen at capture (seq_lens filled with 1).")
        return _report(False, f"used row stride: not {used_row_stride}.{hint}")
    if flat_index != flat:
        hint = (" That is where it *should* read (row * buffer stride + j)."
                if flat_index == s["row"] * real + s["page"]
                else " Flat index = row * (the row stride the kernel used) + j.")
        return _report(False, f"flat index: not {flat_index}.{hint}")
    return _report(True, f"the kernel used row stride {used} on a buffer whose rows are {real} apart; "
                         f"row {s['row']} page {s['page']} read flat entry {flat}, which is row "
                         f"{flat // real}'s page slot {flat % real}.")


# ---- 4. size the workspace ------------------------------------------------------------------------
WORKSPACE_CASES = [  # (max_seq_len, num_batches, sm_count, num_kv_splits)
    (4096, 64, 132, 1), (4096, 128, 132, 1), (128, 64, 132, 1), (4096, 2, 132, 4),
    (4096, 64, 132, -1), (4096, 8, 132, -1), (640, 8, 132, -1), (128, 64, 132, -1), (33 * 128, 1, 148, -1),
    (4224, 8, 132, -1),    # the last step matters: heur 16, split 11
    (4224, 16, 132, -1),   # heur 8, split 7
    (200, 1, 132, -1),     # max_seq_len not a multiple of 128
    (4096, 200, 132, -1),  # more requests than SMs: sm_count // B is 0
]


def _workspace_variant(max_seq_len, num_batches, sm_count, num_kv_splits, *, round_up=True, last_step=True,
                       float_bytes=4, with_lse=True, per_request=True, auto=True, fixed=True):
    """sgl-kernel's workspace size, with one step optionally done wrong (each keyword: one classic mistake)."""
    from mla_edu.kernels.workspace import CUTLASS_HEADS, D_LATENT

    if (num_kv_splits == -1 and auto) or not fixed:
        max_splits = cdiv(max_seq_len, 128) if round_up else max_seq_len // 128
        heur = min(max_splits, max(1, sm_count // num_batches))
        split = cdiv(max_splits, cdiv(max_splits, heur)) if last_step else heur
    else:
        split = max(num_kv_splits, 1)
    per_split = (float_bytes * D_LATENT + (float_bytes if with_lse else 0)) * CUTLASS_HEADS
    return per_split * split * (num_batches if per_request else 1)


#: the classic mistakes: the ``_workspace_variant`` keyword that makes each, and its hint
WORKSPACE_MISTAKES = {
    "round_up": (False, "max_splits counts 128-token chunks of max_seq_len, and a partial chunk is a chunk too"),
    "last_step": (False, "your automatic split count stops at heur; the formula has one more step, which spreads "
                         "the chunks evenly over the waves of CTAs (it changes the count for some shapes)"),
    "float_bytes": (2, "the partials are float32 (4 bytes each) whatever the dtype of q and the cache: the kernel "
                       "accumulates in fp32"),
    "with_lse": (False, "you counted o_acc but not lse_acc (one float32 per (batch, head, split))"),
    "per_request": (False, "every request of the batch has its own partials"),
    "auto": (False, "num_kv_splits = -1 is not a split count: it asks for the automatic one"),
    "fixed": (False, "a num_kv_splits >= 1 is used as is; only -1 asks for the automatic count"),
}


def check_workspace_size(fn) -> ExerciseResult:
    """``fn(max_seq_len, num_batches, sm_count, num_kv_splits) -> bytes`` against sgl-kernel's formula.

    Every case is run first; an answer that one classic mistake explains on all of them gets that
    mistake's hint (``WORKSPACE_MISTAKES``), any other the first case it gets wrong.
    """
    from mla_edu.kernels import get_workspace_size

    if not callable(fn):
        return _report(False, f"expected a function (max_seq_len, num_batches, sm_count, num_kv_splits), "
                              f"got {type(fn).__name__}")
    got = []
    for case in WORKSPACE_CASES:
        value, err = _call(fn, *case)
        if err:
            L, B, sms, ns = case
            hint = (": with more requests than SMs, sm_count // B is 0, and heur has a floor"
                    if err.startswith("ZeroDivisionError") and ns == -1 and sms // B == 0 else "")
            return _report(False, f"workspace_size{case} raised {err}{hint}")
        got.append(value)
    want = [get_workspace_size(*case) for case in WORKSPACE_CASES]
    if got == want:
        return _report(True, f"all {len(WORKSPACE_CASES)} cases equal sgl-kernel's cutlass_mla_get_workspace_size "
                             f"(e.g. {WORKSPACE_CASES[9]} -> {want[9]:,} bytes).")
    for name, (wrong, hint) in WORKSPACE_MISTAKES.items():
        if got == [_workspace_variant(*case, **{name: wrong}) for case in WORKSPACE_CASES]:
            n_wrong = sum(g != w for g, w in zip(got, want))
            return _report(False, f"{n_wrong} of {len(want)} cases wrong, all by one mistake: {hint}.")
    i = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    if got[i] is None:
        hint = "it returned None: return the number of bytes"
    elif got[i] == 0:
        hint = "it is not 0 at one split: sgl-kernel sizes it for one split anyway"
    else:
        hint = ("per (batch, split): float32 o_acc [128 heads, 512] + float32 lse [128 heads] (heads are padded "
                "to 128 whatever H is), times the split count (the automatic one for -1)")
    return _report(False, f"workspace_size{WORKSPACE_CASES[i]}: expected {want[i]:,} bytes, got {got[i]!r}; {hint}")


# ---- 5. find the stale entries the pre-fix kernel read ------------------------------------------
#: (max running requests, requests in the measured step): the last two are padded to the captured size
STALE_CASES = ((6, 6), (5, 5), (8, 8), (8, 6), (6, 5))


@lru_cache(maxsize=None)
def stale_case(k: int):
    """``(buffer [rows, W] int64, seq_lens [bs], row_stride)`` of one pre-fix decode step, the truth (read
    off the entries the step wrote, ``PageReads.live``) and the ``PageReads``."""
    from mla_edu.model import task
    from mla_edu.workshop.panel import PanelSettings, measure_page_reads

    mr, bs = STALE_CASES[k]
    reads = measure_page_reads(toy_model(), task.default_eval_set()[40 * k:],
                               PanelSettings(defects=PRE_FIX, max_running_requests=mr), batch_size=bs)
    rs = reads.launch.row_stride
    live = reads.live.reshape(-1)
    truth = set()
    for b, n in enumerate(reads.seq_lens):
        for j in range(cdiv(n, PAGE_SIZE)):
            i = b * rs + j
            if i >= live.numel() or not bool(live[i]):
                truth.add((b, j))
    return (reads.buffer.clone(), list(reads.seq_lens), rs), truth, reads


def _stale_variant(buffer, seq_lens, row_stride, *, landing_row=True, frozen_stride=True, buffer_rows=True,
                   slot_past_end=True):
    """The stale reads, with one step optionally done wrong (each keyword: one classic mistake)."""
    rows, width = buffer.shape
    if not buffer_rows:  # one buffer row per request: the padded rows forgotten
        rows, width = len(seq_lens), buffer.numel() // len(seq_lens)
    lens = list(seq_lens) + [1] * (rows - len(seq_lens))
    written = [cdiv(n, PAGE_SIZE) for n in lens]
    out = set()
    for b, n in enumerate(seq_lens):
        for j in range(cdiv(n, PAGE_SIZE)):
            r, slot = divmod(b * (row_stride if frozen_stride else width) + j, width)
            limit = written[r] if landing_row else written[b]
            if r >= rows or (slot >= limit if slot_past_end else slot > limit):
                out.add((b, j))
    return out


#: the classic mistakes: the ``_stale_variant`` keyword that makes each, and its hint
STALE_MISTAKES = {
    "landing_row": "you compared the slot with the page count of the request that reads; an entry belongs to "
                   "the buffer row it sits in, and that row's request decides whether it was written",
    "frozen_stride": "you found no stale read, which is what reads through the buffer's own row stride give "
                     "(each row reads its own row); the captured kernel uses the row stride it was given "
                     "(row_stride), so a read can land in another row",
    "buffer_rows": "you took one buffer row per request; the buffer has a row per captured slot, padded rows "
                   "included, so it can have more rows than seq_lens has entries",
    "slot_past_end": "a row that writes n entries writes slots 0 .. n-1: slot n is not written",
}


def check_stale_reads(fn) -> ExerciseResult:
    """``fn(buffer, seq_lens, row_stride) -> set of (row, j)``: the reads that hit an entry not written
    this step. ``buffer`` is the index buffer's rows ``[padded bs, W]`` (padded rows have seq_len 1
    and own one page, also written this step); row ``b`` reads page ``j`` at flat index
    ``b * row_stride + j`` for ``j < ceil(seq_lens[b] / 128)``. Steps 3 and 4 have padded rows.

    Every step is run first; an answer that one classic mistake explains on all of them gets that
    mistake's hint (``STALE_MISTAKES``), any other a hint on the first step it gets wrong.
    """
    if not callable(fn):
        return _report(False, f"expected a function (buffer, seq_lens, row_stride), got {type(fn).__name__}")
    cases = [stale_case(k) for k in range(len(STALE_CASES))]
    got_all = []
    for k, ((buffer, seq_lens, rs), _, _) in enumerate(cases):
        got, err = _call(fn, buffer.clone(), list(seq_lens), rs)
        if err:
            return _report(False, f"case {k}: your function raised {err}")
        try:
            got_all.append({(int(b), int(j)) for b, j in got})
        except Exception:
            return _report(False, f"case {k}: expected a set of (row, j) pairs, got {type(got).__name__}")
    truths = [truth for _, truth, _ in cases]
    if got_all == truths:
        n = sum(len(t) for t in truths)
        return _report(True, f"all {len(cases)} steps right ({n} stale reads in all): these entries are what the "
                             "pre-fix kernel attended over instead of the request's own pages.")
    n_wrong = sum(g != t for g, t in zip(got_all, truths))
    for name, hint in STALE_MISTAKES.items():
        if got_all == [_stale_variant(*args, **{name: False}) for args, _, _ in cases]:
            return _report(False, f"{n_wrong} of {len(cases)} steps wrong, all by one mistake: {hint}.")
    k = next(k for k, (g, t) in enumerate(zip(got_all, truths)) if g != t)
    (buffer, seq_lens, rs), truth, reads = cases[k]
    got = got_all[k]
    wrong = {(b, j) for b in range(len(seq_lens)) for j in range(cdiv(seq_lens[b], PAGE_SIZE))
             if int(reads.read[b, j]) != int(reads.intended[b, j])}
    missing, extra = sorted(truth - got), sorted(got - truth)
    if got == wrong:
        hint = ("those are the *wrong* reads; a wrong read can land on an entry another row wrote this "
                "step (fresh, just not its own). Stale = not written this step, by any row")
    elif extra and all(j >= cdiv(seq_lens[b], PAGE_SIZE) for b, j in extra):
        hint = "a request reads only j < ceil(seq_len / 128) pages"
    else:
        hint = ("entry at flat index i sits in buffer row i // W, slot i % W; it was written this step "
                "iff slot < ceil(seq_len of that row / 128) (padded rows: seq_len 1)")
    return _report(False, f"case {k} (seq_lens {seq_lens}, row stride {rs}, buffer {list(buffer.shape)}): "
                          f"missing {missing[:4]}, extra {extra[:4]}; {hint}")


__all__ = ["ExerciseResult", "OPTIONS", "MYSTERIES", "check_mystery", "check_replay", "check_row_stride",
           "check_stale_reads", "check_workspace_size", "mystery_figure", "option_for", "stale_case", "toy_model",
           "DEFECTS"]
