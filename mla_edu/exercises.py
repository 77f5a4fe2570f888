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

from mla_edu.serving import DEFECTS, PRE_FIX, Engine
from mla_edu.serving.backends.cutlass_mla import POISON_PAGE

PAGE_SIZE = 128


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


def check_replay(fn, n_trials: int = 4, seed: int = 0) -> ExerciseResult:
    """Run ``fn`` as the fixed cutlass_mla backend's replay hook; graph replay must equal eager.

    ``fn(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)`` is called before every replay,
    after the index buffer ``backend.cuda_graph_kv_indices`` has been filled with a poison page id
    (so rows it does not write give NaN). Graphs are captured for batch sizes 2 and 4 with the full
    width (the fix); batches of 1..4 requests of random lengths (1..3 pages) are replayed.
    """
    if not callable(fn):
        return _report(False, f"expected a function (backend, bs, req_pool_indices, seq_lens, seq_lens_cpu), "
                              f"got {type(fn).__name__}")
    from mla_edu.model import task

    model = toy_model()
    engine = Engine(model, attention_backend="cutlass_mla", defects="none", cuda_graph_bs=(2, 4),
                    max_running_requests=4, context_length=384)
    runner, backend = engine.runner, engine.runner.backend
    buf = backend.cuda_graph_kv_indices
    state = {"error": None, "new_table": False}

    def hook(bs, req_pool_indices, seq_lens, seq_lens_cpu):
        buf.fill_(POISON_PAGE)
        _, err = _call(fn, backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)
        state["error"] = state["error"] or err
        md = backend.forward_metadata.block_kv_indices
        if md.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr():
            state["new_table"] = True

    backend.init_forward_metadata_replay_cuda_graph = hook
    rng = random.Random(seed)
    for trial in range(n_trials):
        bs = rng.randint(1, 4) if trial else 3  # 3: padded to the captured 4
        prompts = [task.sample_question(rng, rng.randint(20, 380)).prompt_ids for _ in range(bs)]
        reqs = [engine._new_req(p) for p in prompts]
        for r in reqs:
            engine.prefill(r)
        batch = engine.make_batch(reqs)
        with torch.no_grad():
            _, bad, logits_g = runner.decode(batch)
            backend.init_forward_metadata(batch)
            _, _, logits_e = runner.decode_forward(batch)
        for r in reqs:
            engine._free(r)
        backend.forward_metadata = backend.forward_metadata.__class__(backend.cuda_graph_mla_workspace, buf[:4])
        where = f"trial {trial} (batch of {bs}, lengths {batch.seq_lens_cpu.tolist()})"
        if state["error"]:
            return _report(False, f"{where}: your function raised {state['error']}")
        nan = bad.cpu().tolist()
        err = (logits_g - logits_e).abs().amax(dim=-1).nan_to_num(float("inf")).cpu()
        wrong = (err > 1e-3).tolist()
        if not any(wrong):
            continue
        if state["new_table"]:
            return _report(False, f"{where}: you handed the metadata a new tensor. The graph was captured "
                                  "reading backend.cuda_graph_kv_indices and never looks at forward_metadata "
                                  "again: write the page ids into that buffer, in place.")
        if any(nan):
            return _report(False, f"{where}: rows {_rows(nan)} read the poison page id: their rows of "
                                  "backend.cuda_graph_kv_indices were not written. Fill the first "
                                  "ceil(seq_lens[row] / 128) entries of each of the bs rows, in place.")
        return _report(False, f"{where}: rows {_rows(wrong)} read wrong (but valid) pages: row b belongs to "
                              "request req_pool_indices[b]; its page p is req_to_token[req, p * 128] // 128.")
    return _report(True, f"graph replay equals eager on {n_trials} batches of random lengths, with the "
                         "index buffer poisoned before every replay.")


# ---- 2. which defect produced this plot? ----------------------------------------------------------
OPTIONS = {
    "a": "pre-fix code (width + workspace + stale): frozen row stride 1, stale page ids",
    "b": "frozen width only, with the poison fill (stale fixed): row stride 1, unused entries poisoned",
    "c": "SGLang's merged fix (only stale left): full width, stale page ids in the buffer",
    "d": "everything fixed, with the poison fill",
}
MYSTERIES = {1: frozenset({"width"}), 2: frozenset({"stale"}), 3: PRE_FIX}


def option_for(defects: frozenset) -> str:
    """The option that describes an engine with these cutlass_mla defects (workspace is invisible here)."""
    if "width" in defects:
        return "a" if "stale" in defects else "b"
    return "c" if "stale" in defects else "d"


@lru_cache(maxsize=None)
def _mystery_reads(k: int):
    from mla_edu.model import task
    from mla_edu.panel import PanelSettings, measure_page_reads

    settings = PanelSettings(defects=MYSTERIES[k], max_running_requests=6)
    return measure_page_reads(toy_model(), task.default_eval_set()[20:], settings)


def mystery_figure(k: int):
    """The page reads of one decode step of an engine whose defects you must name (``check_mystery``)."""
    if k not in MYSTERIES:
        raise ValueError(f"mystery: expected one of {sorted(MYSTERIES)}, got {k!r}")
    import matplotlib.pyplot as plt

    from mla_edu.panel import draw_page_reads

    reads = _mystery_reads(k)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), gridspec_kw={"width_ratios": [reads.buffer.shape[1], 4, 4]})
    draw_page_reads(*axes, reads, show_stride=False)
    fig.suptitle(f"mystery {k}: one decode step by graph replay", fontsize=9)
    fig.tight_layout()
    return fig


def check_mystery(k: int, answer) -> ExerciseResult:
    if k not in MYSTERIES:
        return _report(False, f"expected a mystery number from {sorted(MYSTERIES)}, got {k!r}")
    if answer is None:
        return _report(False, f"mystery {k}: not answered yet; pick one of {sorted(OPTIONS)}")
    if answer not in OPTIONS:
        return _report(False, f"mystery {k}: expected one of {sorted(OPTIONS)}, got {answer!r}")
    truth = option_for(MYSTERIES[k])
    if answer == truth:
        return _report(True, f"mystery {k} is ({truth}) {OPTIONS[truth]}")
    reads = _mystery_reads(k)
    rows_ok = reads.rows_ok
    stride_hint = ("every row reads its own pages, so the width was not frozen at 1"
                   if all(rows_ok) else "only row 0 reads its own pages: the row stride was frozen at 1")
    stale = bool((~reads.live & (reads.buffer != POISON_PAGE) & (reads.buffer != 1)).any())
    poison = bool((reads.buffer == POISON_PAGE).any())
    fill_hint = ("entries not written this step hold the poison id (grey P)" if poison else
                 "entries not written this step hold old page ids (red)" if stale else
                 "look at the entries not written this step")
    return _report(False, f"mystery {k}: not ({answer}). Look again: {stride_hint}; {fill_hint}.")


# ---- 3. the row stride the kernel used ------------------------------------------------------------
ROW_STRIDE_SETUP = dict(context_length=640, cuda_graph_bs=(4, 8), max_running_requests=8, row=3, page=2)


@lru_cache(maxsize=1)
def _row_stride_truth():
    """Capture the pre-fix engine of ``ROW_STRIDE_SETUP`` and read what the bs-8 graph froze."""
    from mla_edu.panel import _record_launches
    from mla_edu.serving.graph_runner import GraphRunner

    s = ROW_STRIDE_SETUP
    engine = Engine(toy_model(), attention_backend="cutlass_mla", defects=PRE_FIX, disable_cuda_graph=True,
                    context_length=s["context_length"], max_running_requests=s["max_running_requests"])
    launches = _record_launches(engine.runner.backend)
    engine.runner.graph_runner = GraphRunner(engine.runner, s["cuda_graph_bs"])
    table, launch = launches[8]
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
                "ceil(640 / 128)." if buffer_row_stride == -(-s["context_length"] // PAGE_SIZE) else
                " The buffer is int32 (max_bs, W) with W = (max_context_len + PAGE) // PAGE.")
        return _report(False, f"buffer row stride: not {buffer_row_stride}.{hint}")
    if used_row_stride != used:
        hint = (" That is the buffer's stride; the cutlass wrapper takes page_table.size(1), and the view was "
                "sliced at capture with max_seqlen_pad = ceil(max(dummy seq_lens) / 128)."
                if used_row_stride == real else
                " The wrapper reads the stride from the view's size(1), frozen at capture (seq_lens filled with 1).")
        return _report(False, f"used row stride: not {used_row_stride}.{hint}")
    if flat_index != flat:
        hint = (" That is where it *should* read (row * buffer stride + j)." if flat_index == s["row"] * real + s["page"]
                else " Flat index = row * (the row stride the kernel used) + j.")
        return _report(False, f"flat index: not {flat_index}.{hint}")
    return _report(True, f"the kernel used row stride {used} on a buffer whose rows are {real} apart; "
                         f"row {s['row']} page {s['page']} read flat entry {flat}, which is row "
                         f"{flat // real}'s page slot {flat % real}.")


# ---- 4. size the workspace ------------------------------------------------------------------------
WORKSPACE_CASES = [  # (max_seq_len, num_batches, sm_count, num_kv_splits)
    (4096, 64, 132, 1), (4096, 128, 132, 1), (128, 64, 132, 1), (4096, 2, 132, 4),
    (4096, 64, 132, -1), (4096, 8, 132, -1), (640, 8, 132, -1), (128, 64, 132, -1), (33 * 128, 1, 148, -1),
]


def check_workspace_size(fn) -> ExerciseResult:
    """``fn(max_seq_len, num_batches, sm_count, num_kv_splits) -> bytes`` against sgl-kernel's formula."""
    from mla_edu.kernels import get_workspace_size, num_kv_splits_for
    from mla_edu.kernels.workspace import BYTES_PER_BATCH_SPLIT, CUTLASS_HEADS, D_LATENT

    if not callable(fn):
        return _report(False, f"expected a function (max_seq_len, num_batches, sm_count, num_kv_splits), "
                              f"got {type(fn).__name__}")
    for case in WORKSPACE_CASES:
        got, err = _call(fn, *case)
        if err:
            return _report(False, f"workspace_size{case} raised {err}")
        want = get_workspace_size(*case)
        if got == want:
            continue
        L, B, sms, ns = case
        split = num_kv_splits_for(L, B, sms, ns)
        if got is None:
            hint = "it returned None: return the number of bytes"
        elif got == 0:
            hint = "it is not 0 at one split: sgl-kernel sizes it for one split anyway"
        elif got == B * split * 4 * D_LATENT * CUTLASS_HEADS:
            hint = "you counted o_acc but not lse_acc (one float32 per (batch, head, split))"
        elif isinstance(got, int) and got % BYTES_PER_BATCH_SPLIT == 0 and got // BYTES_PER_BATCH_SPLIT != B * split:
            hint = (f"{got // BYTES_PER_BATCH_SPLIT} (batch, split) pairs, expected {B} x {split}: "
                    + ("check the automatic split count: max_splits = ceil(L / 128), heur = min(max_splits, "
                       "max(1, sm_count // B)), split = ceil(max_splits / ceil(max_splits / heur))"
                       if ns == -1 else "a fixed num_kv_splits is used as is"))
        else:
            hint = ("per (batch, split): float32 o_acc [128 heads, 512] + float32 lse [128 heads] = "
                    f"{BYTES_PER_BATCH_SPLIT:,} bytes (heads are padded to 128 whatever H is)")
        return _report(False, f"workspace_size{case}: expected {want:,} bytes, got {got!r}; {hint}")
    return _report(True, f"all {len(WORKSPACE_CASES)} cases equal sgl-kernel's cutlass_mla_get_workspace_size "
                         f"(e.g. {WORKSPACE_CASES[4]} -> {get_workspace_size(*WORKSPACE_CASES[4]):,} bytes).")


# ---- 5. find the stale entries the pre-fix kernel read ------------------------------------------
@lru_cache(maxsize=None)
def stale_case(k: int):
    """``(buffer [rows, W] int64, seq_lens [bs], row_stride)`` of one pre-fix decode step, and the truth."""
    from mla_edu.model import task
    from mla_edu.panel import PanelSettings, measure_page_reads

    bs = (6, 5, 8)[k]
    reads = measure_page_reads(toy_model(), task.default_eval_set()[40 * k:],
                               PanelSettings(defects=PRE_FIX, max_running_requests=bs))
    rs, width = reads.launch.row_stride, reads.buffer.shape[1]
    live = reads.live.reshape(-1)
    truth = set()
    for b, n in enumerate(reads.seq_lens):
        for j in range(-(-n // PAGE_SIZE)):
            i = b * rs + j
            if i >= live.numel() or not bool(live[i]):
                truth.add((b, j))
    return (reads.buffer.clone(), list(reads.seq_lens), rs), truth, reads


def check_stale_reads(fn) -> ExerciseResult:
    """``fn(buffer, seq_lens, row_stride) -> set of (row, j)``: the reads that hit an entry not written
    this step. ``buffer`` is the index buffer's rows ``[padded bs, W]`` (padded rows have seq_len 1
    and own one page, also written this step); row ``b`` reads page ``j`` at flat index
    ``b * row_stride + j`` for ``j < ceil(seq_lens[b] / 128)``."""
    if not callable(fn):
        return _report(False, f"expected a function (buffer, seq_lens, row_stride), got {type(fn).__name__}")
    for k in range(3):
        (buffer, seq_lens, rs), truth, reads = stale_case(k)
        got, err = _call(fn, buffer.clone(), list(seq_lens), rs)
        if err:
            return _report(False, f"case {k}: your function raised {err}")
        try:
            got = {(int(b), int(j)) for b, j in got}
        except Exception:
            return _report(False, f"case {k}: expected a set of (row, j) pairs, got {type(got).__name__}")
        if got == truth:
            continue
        wrong = {(b, j) for b in range(len(seq_lens)) for j in range(-(-seq_lens[b] // PAGE_SIZE))
                 if int(reads.read[b, j]) != int(reads.intended[b, j])}
        missing, extra = sorted(truth - got), sorted(got - truth)
        if got == wrong:
            hint = ("those are the *wrong* reads; a wrong read can land on an entry another row wrote this "
                    "step (fresh, just not its own). Stale = past ceil(len/128) of the row it lands in")
        elif extra and all(j >= -(-seq_lens[b] // PAGE_SIZE) for b, j in extra):
            hint = "a request reads only j < ceil(seq_len / 128) pages"
        else:
            hint = ("entry at flat index i sits in buffer row i // W, slot i % W; it was written this step "
                    "iff slot < ceil(seq_len of that row / 128) (padded rows: seq_len 1)")
        return _report(False, f"case {k} (seq_lens {seq_lens}, row stride {rs}, W {buffer.shape[1]}): "
                              f"missing {missing[:4]}, extra {extra[:4]}; {hint}")
    n = sum(len(stale_case(k)[1]) for k in range(3))
    return _report(True, f"all 3 steps right ({n} stale reads in all): these entries are what the "
                         "pre-fix kernel attended over instead of the request's own pages.")


__all__ = ["ExerciseResult", "OPTIONS", "MYSTERIES", "check_mystery", "check_replay", "check_row_stride",
           "check_stale_reads", "check_workspace_size", "mystery_figure", "option_for", "stale_case", "toy_model",
           "DEFECTS"]
