"""Automatic checkers for notebook 08's exercises. Each prints PASS or a one-line hint and returns an
:class:`ExerciseResult`; none raises, whatever it is given (a stub, None, a wrong type, a numpy scalar,
a tensor, NaN, a huge int, a function that raises, never returns, or breaks the backend): "NOT YET" and a hint.

| checker | the learner gives |
|---|---|
| ``check_replay(fn)`` | SGLang's ``init_forward_metadata_replay_cuda_graph`` for the fixed cutlass_mla backend |
| ``check_mystery(k, answer)`` | which option ("a".."d") produced ``mystery_figure(k)`` |
| ``check_row_stride(used, buffer, flat)`` | the row stride the pre-fix kernel used, the buffer's, a flat index |
| ``check_workspace_size(fn)`` | sgl-kernel's ``cutlass_mla_get_workspace_size`` |
| ``check_stale_reads(fn)`` | which (row, page) reads of a captured kernel hit entries not written this step |

Each checker states its domain and runs the cases enumerated from it (``REPLAY_CASES`` at every split count of
``REPLAY_SPLITS``, ``WORKSPACE_CASES``, ``stale_cases()`` and ``stale_domain()``): they alone decide every
classic mistake and every generated mutant (the mutant tests, which read the solutions: not in the attendees'
copy). The workspace and stale-reads checkers then add a few cases drawn at check time, which no table of
answers computed beforehand holds (a right function passes them all; they only stop a lookup). The case sets hold
inputs only: each truth is measured on the mini engine, or computed, inside the check. A learner's function runs
on the CPU, with a time limit, and may not call the library's own implementation of its answer
(``checks.run_learner``); answers are read by ``checks.meaning``, the one rule of every check. Hints name the
concept that is wrong, never the expected value. The solutions are not in this package: they are in the
repository's ``instructor/`` folder (``make instructor`` builds the notebooks with them).
"""

from __future__ import annotations

import json
from os import urandom as _urandom
import time
import zlib
from functools import lru_cache
from pathlib import Path

import torch

from mla_edu import plotstyle
from mla_edu.case_study.diagnose import PageReads, last_launch, record_launches
from mla_edu.case_study.plots import draw_page_reads
from mla_edu.config import MLAConfig
from mla_edu.kernels import get_workspace_size, num_kv_splits_for
from mla_edu.kernels.workspace import BYTES_PER_BATCH_SPLIT, CUTLASS_HEADS, D_LATENT, D_ROPE
from mla_edu.kvcache import fill_page_table
from mla_edu.model import task
from mla_edu.model.tiny import TinyDeepseek, TinyDeepseekConfig
from mla_edu.serving import PRE_FIX, Engine
from mla_edu.serving.backends import BACKEND_CLASSES, AttentionBackend
from mla_edu.serving.backends.cutlass_mla import POISON_PAGE
from mla_edu.util import PAGE_SIZE, cdiv
from mla_edu.workshop.panel import PanelSettings, measure_page_reads
from mla_edu.workshop.checks import ExerciseResult  # shared by every checker
from mla_edu.workshop.checks import SEAL_BROKEN, Refusal, Seal, as_int as _as_int, as_items, describe as _describe
from mla_edu.workshop.checks import option_key, read_only
from mla_edu.workshop.checks import library_globals, library_kind, report as _report, run_learner, show as _show

#: the code no learner's function may run while a checker watches it: the checkers themselves (their truths),
#: the engine and backends (the backend's own replay hook), the kernels' host code (the workspace formula)
_OWN_CODE = ("mla_edu/workshop/", "mla_edu/case_study/")


def _not_callable(fn, signature: str):
    if callable(fn):
        return None
    if fn is None or fn is Ellipsis:
        return _report(False, "not answered yet: write the function and pass it")
    return _report(False, f"expected a function {signature}, got {type(fn).__name__} {_show(fn)}")


class _Draws:
    """The cases drawn at check time, each number read from the operating system's entropy (``os.urandom``, bound
    here at import) with this class's own arithmetic: a table made beforehand misses them, and pinning
    ``time.time_ns``, ``os.urandom`` or ``random.Random``'s methods in the notebook does not make them repeat."""

    @staticmethod
    def randint(lo: int, hi: int) -> int:
        """An int in ``[lo, hi]`` (a bias of at most ``(hi - lo + 1) / 2**64``)."""
        return lo + int.from_bytes(_urandom(8), "little") % (hi - lo + 1)

    def choice(self, options):
        return options[self.randint(0, len(options) - 1)]


def toy_model():
    """A small random TinyDeepseek over the task's vocabulary (fast on CPU), seeded, eval mode, built afresh on each
    call (a learner's function that changes one changes no other's: no cache to poison). The notebook's random
    state is as it was after, an interrupt included: the CPU generator alone is seeded (``torch.manual_seed`` would
    reseed every device's), inside ``fork_rng``, which puts its state back."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(0)
        mla = MLAConfig(hidden_size=32, num_attention_heads=2, q_lora_rank=None, kv_lora_rank=32,
                        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, rope_theta=10000.0,
                        rope_scaling=None, rope_interleave=True, max_position_embeddings=task.CONTEXT_LEN,
                        rms_norm_eps=1e-6, attention_bias=False)
        m = TinyDeepseek(TinyDeepseekConfig(mla=mla, vocab_size=task.VOCAB_SIZE, num_hidden_layers=2,
                                            intermediate_size=64))
        for p in m.parameters():  # larger weights: attention output depends on what it reads
            p.data.mul_(8.0)
        return m.eval()


# ---- 1. write the replay hook -------------------------------------------------------------------
#: the engine exercise 1 captures: graphs for 2 and 4 rows, context 386 (W = (386 + 128) // 128 = 4 columns; the
#: longest decode it runs, seq_len 385, is the first token of a 4th page), on the CPU whatever the machine has (a
#: learner's hook never reaches a GPU kernel)
REPLAY_SETUP = read_only(dict(cuda_graph_bs=(2, 4), max_running_requests=4, context_length=386))
#: every split count the fixed kernel takes on this engine: the full-width view gives max_seq_len = 4 * 128, so
#: 1 to 4 splits (automatic splits give 4 here); at more than one split the kernel uses the workspace
REPLAY_SPLITS = (1, 2, 3, 4)
#: the batches exercise 1 replays, in order, as each row's decode seq_len (its prompt has seq_len - 1 tokens), in
#: batch row order; rows are prefilled in a cycle (``_replay_order``), so batch row b is not pool row b. From the
#: largest graph down: 4 rows (exact), 3 (padded to 4), 2 (exact), 1 (padded to 2); every page edge a request of this
#: context can have: 2 (a one-token prompt), 127, 128, 129, 255, 256, 257, 383, 384 and 385 (the 4th column's only
#: token: a hook that writes floor(context / 128) = 3 columns misses it). Each replay follows an eager step of the
#: same batch, as in a running server (the backend's forward_metadata is then the eager step's).
REPLAY_CASES = ((255, 383, 2, 385), (128, 256, 127), (384, 129), (257,), (2,))


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


#: one hint per classic mistake of exercise 1 (what the hook did, found on the host before the graph replays)
REPLAY_HINTS = read_only({
    "rebound": "you bound backend.cuda_graph_kv_indices to a new tensor. The graph holds the address of the "
               "buffer it was captured with and never looks the attribute up again (and with its owner gone, that "
               "memory is freed on a GPU): write into that buffer",
    "reshaped": "you changed the index buffer's shape, dtype or storage in place (resize_, set_, .data): the graph "
                "keeps reading the memory and the shape it captured; write page ids into it, change nothing else",
    "workspace": "you replaced the workspace. The captured kernel keeps writing its split partials into the one "
                 "it was captured with; with no owner left, that memory is freed on a GPU and handed to other "
                 "tensors. Allocate nothing at replay",
    "new_table": "you handed the metadata a new tensor. The graph was captured reading "
                 "backend.cuda_graph_kv_indices and never looks at forward_metadata again: write the page ids "
                 "into that buffer, in place",
    "other_view": "you wrote into backend.forward_metadata.block_kv_indices: after an eager step that is the eager "
                  "step's own table, not the buffer the graph captured (it only looked like it right after "
                  "capture). Write into backend.cuda_graph_kv_indices",
    "inputs": "your function changed {what}, which the engine and the graph read: a replay hook only writes the "
              "index buffer",
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
    "out_of_range": "rows {rows} would read entries that are not pages of the cache (the padded rows read their "
                    "first entry too): on a GPU that read is out of bounds; write each row's own page ids",
    "right": "the buffer held the right page ids after your function ran, yet the replay differs from eager: "
             "did your function change something else the graph reads?",
    "broke": "the replay failed after your function ran ({err}): your function left the backend in a state the "
             "captured step cannot run with; write the page ids, change nothing else",
})


#: the backend methods that fill a page table themselves: a learner's replay hook may call none of them
_HOOKS = ("init_forward_metadata_replay_cuda_graph", "init_forward_metadata_capture_cuda_graph",
          "init_forward_metadata")


def _replay_refusal() -> Refusal:
    """The checkers' own code and every backend's metadata hooks, replay, capture and eager (``_HOOKS``, by their
    code objects; not by a copy: the right answer is two lines, the same bytecode as the Triton backend's replay
    hook, and a learner may write it); the backend's accessors (``graph_index_buffer()``) and the library's helpers
    (``fill_page_table``) are allowed."""
    hooks = {getattr(cls, name) for cls in (AttentionBackend, *BACKEND_CLASSES.values()) for name in _HOOKS}
    return Refusal(files=_OWN_CODE, functions=sorted(hooks, key=lambda f: f.__qualname__),
                   why="one of the backend's own metadata hooks", copies=False)


class _Verdict(Exception):
    """What the host found wrong after the learner's hook ran: the replay is not launched. ``clean``: the hook wrote
    only the index buffer's contents, which the next replay poisons again (the engine can be used again)."""

    def __init__(self, message: str, clean: bool = False):
        super().__init__(message)
        self.clean = clean


#: the engines of ``check_replay``, by split count, kept while no learner's hook changed more than the buffer
_REPLAY_ENGINES: dict = {}


def _tensor_state(t) -> tuple:
    """What a graph freezes about a tensor: its storage address, shape, strides, dtype, device."""
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, t.device)


def _replay_prompts(seq_lens) -> list:
    """One prompt of ``seq_len - 1`` token ids per row (deterministic; the values do not matter)."""
    return [[(3 + 5 * i + 7 * b) % task.VOCAB_SIZE for i in range(n - 1)] for b, n in enumerate(seq_lens)]


def _replay_order(rows: int) -> list:
    """The batch rows in the order they are prefilled, each taking the next free pool row: row 1 first, row 0 last,
    so batch row b sits in pool row (b - 1) mod rows. A cycle, not a reversal: from 3 rows on, a hook that maps
    the rows the wrong way round (scatter for gather) or ignores ``req_pool_indices`` fills the wrong rows."""
    return list(range(1, rows)) + [0][:rows]


def _replay_engine(splits: int) -> Engine:
    """The fixed cutlass_mla engine of ``REPLAY_SETUP`` on the CPU, poison fill on (the kernel runs checked)."""
    return Engine(toy_model(), attention_backend="cutlass_mla", defects="none", poison_fill=True,
                  num_kv_splits=splits, device="cpu", kernel_impl="torch", **REPLAY_SETUP)


def _replay_on(engine: Engine, fn) -> tuple:
    """Every batch of ``REPLAY_CASES`` on ``engine``, an eager step then a replay through ``fn``: ``(the first hint,
    or None when every replay equals eager, whether the engine is as it was)``."""
    runner, backend = engine.runner, engine.runner.backend
    buf, workspace = backend.cuda_graph_kv_indices, backend.cuda_graph_mla_workspace
    frozen = {"buffer": _tensor_state(buf), "workspace": _tensor_state(workspace)}
    num_pages = backend.kv_cache.kv_buffer[0].shape[0]
    refusal = _replay_refusal()
    state = {}

    def hook(bs, req_pool_indices, seq_lens, seq_lens_cpu):
        raw = state["raw_bs"]
        buf.fill_(POISON_PAGE)
        inputs = {"req_pool_indices": req_pool_indices, "seq_lens": seq_lens, "seq_lens_cpu": seq_lens_cpu,
                  "backend.req_to_token": backend.req_to_token}
        before = {k: t.clone() for k, t in inputs.items()}
        attributes = {k: id(v) for k, v in vars(backend).items() if k != "forward_metadata"}
        md = backend.forward_metadata
        md_table = getattr(md, "block_kv_indices", None)
        md_before = None
        if isinstance(md_table, torch.Tensor) and \
                md_table.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr():
            md_table.fill_(POISON_PAGE)  # the eager step's own table, used up: a write into it shows
            md_before = md_table.clone()
        _, err = run_learner(fn, backend, bs, req_pool_indices, seq_lens, seq_lens_cpu, refuse=refusal)
        if err:
            raise _Verdict(f"your function raised {err}" if not err.startswith(("refused", "your function"))
                           else err)
        # the host checks what the hook left, before any launch
        if backend.cuda_graph_kv_indices is not buf:
            raise _Verdict(REPLAY_HINTS["rebound"])
        if backend.cuda_graph_mla_workspace is not workspace:
            raise _Verdict(REPLAY_HINTS["workspace"])
        if _tensor_state(buf) != frozen["buffer"] or _tensor_state(workspace) != frozen["workspace"]:
            raise _Verdict(REPLAY_HINTS["reshaped"] if _tensor_state(buf) != frozen["buffer"]
                           else REPLAY_HINTS["workspace"])
        changed = [k for k, t in inputs.items() if t.shape != before[k].shape or not torch.equal(t, before[k])]
        changed += [f"backend.{k}" for k in sorted(set(attributes) | set(vars(backend)) - {"forward_metadata"})
                    if attributes.get(k) != id(vars(backend).get(k))]
        if changed:
            raise _Verdict(REPLAY_HINTS["inputs"].format(what=" and ".join(changed)))
        want = torch.full_like(buf[:bs], POISON_PAGE)
        fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs], want, PAGE_SIZE)
        lens = seq_lens[:raw].tolist()
        mistake = _replay_diagnosis(buf, want, [cdiv(n, PAGE_SIZE) for n in lens])
        if mistake != "right":
            md_now = getattr(backend.forward_metadata, "block_kv_indices", None)
            if md_now is not md_table:
                mistake = "new_table"
            elif md_before is not None and md_now is not None and md_now.shape == md_before.shape \
                    and not torch.equal(md_now, md_before) and mistake == "nothing":
                mistake = "other_view"
            name, _, rows = mistake.partition(":")
            bad = [lens[int(b)] for b in rows.split(", ")] if rows else []
            raise _Verdict(REPLAY_HINTS[name].format(rows=rows, bs=bs, lens=bad), clean=name != "new_table")
        # every row the graph runs reads its pages, a padded row (seq_len 1) its first entry: each a page of the
        # cache (the poison id too is none: the real rows' poison was diagnosed above, a padded row's is here)
        read = [buf[b, : cdiv(int(n), PAGE_SIZE)] for b, n in enumerate(seq_lens[:bs].tolist())]
        outside = [str(b) for b, ids in enumerate(read) if bool(((ids < 0) | (ids >= num_pages)).any())]
        if outside:
            raise _Verdict(REPLAY_HINTS["out_of_range"].format(rows=", ".join(outside)), clean=True)

    backend.init_forward_metadata_replay_cuda_graph = hook
    for k, seq_lens in enumerate(REPLAY_CASES):
        padded = runner.graph_runner.padded_size(len(seq_lens))
        where = f"batch {k} (seq_lens {list(seq_lens)}, replayed as {padded} rows, {backend.num_kv_splits} split(s))"
        order, prompts = _replay_order(len(seq_lens)), _replay_prompts(seq_lens)
        reqs = engine.prefill_requests([prompts[b] for b in order])
        try:
            batch = engine.make_batch([reqs[order.index(b)] for b in range(len(seq_lens))])
            state["raw_bs"] = len(seq_lens)
            with torch.no_grad():
                _, _, logits_e = runner.decode(batch, eager=True)  # the eager step: forward_metadata is its own
                _, _, logits_g = runner.decode(batch)
        except _Verdict as v:
            return f"{where}: {v}.", v.clean
        except Exception as e:  # the step itself failed: the learner's function broke some state
            return f"{where}: " + REPLAY_HINTS["broke"].format(err=_describe(e, 120)) + ".", False
        finally:
            for r in reqs:
                engine.free_req(r)
        err = (logits_g - logits_e).abs().amax(dim=-1).nan_to_num(float("inf"))
        if bool((err > 1e-3).any()):
            return f"{where}: " + REPLAY_HINTS["right"] + ".", False
    return None, True


def check_replay(fn) -> ExerciseResult:
    """Run ``fn`` as the fixed cutlass_mla backend's replay hook; graph replay must equal eager.

    ``fn(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)`` is called before every replay (``bs``: the
    captured size replayed, padded rows included), after the index buffer ``backend.cuda_graph_kv_indices``
    has been filled with a poison page id (so rows it does not write give NaN). Domain: the engine of
    ``REPLAY_SETUP`` (the fix: the full-width view) at every split count of ``REPLAY_SPLITS``, the batches of
    ``REPLAY_CASES`` from the largest graph down, each replay after an eager step. Before any replay the host
    checks what ``fn`` left (the captured buffer and workspace, their shapes and storage, the engine's inputs, the
    page ids every row, padded ones too, will read); a wrong hook gets the hint of what it did (``REPLAY_HINTS``)
    and nothing is launched. The engine runs on the CPU whatever the machine has, so a learner's hook never
    reaches a GPU kernel.
    """
    bad = _not_callable(fn, "(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)")
    if bad:
        return bad
    for splits in REPLAY_SPLITS:
        engine = _REPLAY_ENGINES.pop(splits, None) or _replay_engine(splits)
        hint, clean = _replay_on(engine, fn)
        if clean:  # a hook that changed more than the buffer's contents leaves this engine behind
            _REPLAY_ENGINES[splits] = engine
        if hint:
            return _report(False, hint)
    return _report(True, f"graph replay equals eager on all {len(REPLAY_CASES)} batches at each of "
                         f"{len(REPLAY_SPLITS)} split counts (seq_lens at every page edge from 2 to 385, padded and "
                         "exact batch sizes from the largest graph down, each after an eager step, batch row != "
                         "pool row), with the index buffer poisoned before every replay.")


# ---- 2. which engine produced this plot? ----------------------------------------------------------
OPTIONS = read_only({
    "a": "pre-fix code (width + workspace defects): frozen row stride 1, stale page ids in the buffer",
    "b": "width defect only, with the poison fill: frozen row stride 1, unused entries hold the poison id",
    "c": "SGLang's merged fix (no defect left): full width, stale page ids in the buffer",
    "d": "SGLang's merged fix with the poison fill: full width, unused entries hold the poison id",
})
MYSTERY_NUMBERS = (1, 2, 3)
#: per option: (only row 0 reads its own pages, entries not written this step hold old page ids)
_OPTION_CLAIMS = read_only({"a": (True, True), "b": (True, False), "c": (False, True), "d": (False, False)})
#: the page reads behind each mystery figure, measured on engines whose settings are in the instructor build
#: (``instructor/ex08.py`` writes this file): the data the figure draws, and nothing else
MYSTERY_FILE = Path(__file__).with_name("mysteries.json")


@lru_cache(maxsize=None)
def _mystery_reads(k: int) -> PageReads:
    data = json.loads(MYSTERY_FILE.read_text())[str(k)]
    t = {name: torch.tensor(data[name]) for name in ("intended", "read", "buffer", "live")}
    return PageReads(seq_lens=data["seq_lens"], intended=t["intended"], read=t["read"], buffer=t["buffer"],
                     live=t["live"].bool(), launch=None, row_err=data["row_err"])


def mystery_figure(k: int):
    """The page reads of one decode step of an engine whose defects you must name (``check_mystery``)."""
    if _as_int(k) not in MYSTERY_NUMBERS:
        raise ValueError(f"mystery: expected one of {list(MYSTERY_NUMBERS)}, got {_show(k)}")
    reads = _mystery_reads(_as_int(k))
    rows = reads.buffer.shape[0]
    # the buffer above, intended and read pages below: ~730 px wide at plotstyle.DPI
    fig, ax = plotstyle.subplot_mosaic([["buffer", "buffer"], ["intended", "read"]], figsize=(6.5, 0.5 * rows + 3.4))
    draw_page_reads(ax["buffer"], ax["intended"], ax["read"], reads, show_stride=False)
    fig.suptitle(f"mystery {k}: one decode step by graph replay", fontsize=plotstyle.MIN_FONT_PT)
    fig.tight_layout()
    return fig


def check_mystery(k, answer) -> ExerciseResult:
    """The option whose two claims the figure's own data bear out: whether only row 0 reads its own pages
    (``rows_ok``), and whether the entries not written this step hold old page ids (not the poison id, not the
    buffer's initial 1). A wrong answer is told that the figure contradicts its claims, not which one: every wrong
    option gets the same hint, so a wrong guess tells nothing about the others."""
    n = _as_int(k)
    if n not in MYSTERY_NUMBERS:
        return _report(False, f"expected a mystery number from {list(MYSTERY_NUMBERS)}, got {_show(k)}")
    if answer is None or answer is Ellipsis:
        return _report(False, f"mystery {n}: not answered yet; pick one of {sorted(OPTIONS)}")
    option = option_key(answer)
    if option not in OPTIONS:
        return _report(False, f"mystery {n}: expected one letter of {sorted(OPTIONS)}, got {_show(answer)}")
    reads = _mystery_reads(n)
    frozen = not all(reads.rows_ok)
    stale = bool((~reads.live & (reads.buffer != POISON_PAGE) & (reads.buffer != 1)).any())
    if _OPTION_CLAIMS[option] == (frozen, stale):
        return _report(True, f"mystery {n} is ({option}) {OPTIONS[option]}")
    return _report(False, f"mystery {n}: not ({option}); the figure contradicts what it claims. Check both claims "
                          "against the panels: does every row read its own pages ('intended page ids' against "
                          "'page ids read under replay', row by row), and what do the entries not written this "
                          "step hold (' x' stale, 'P' poison)?")


# ---- 3. the row stride the kernel used ------------------------------------------------------------
ROW_STRIDE_SETUP = read_only(dict(context_length=640, cuda_graph_bs=(4, 8), max_running_requests=8, row=3, page=2))


#: exercise 3's classic wrong answers, per part: {part: {what the wrong number is: its hint}} (each hint names the
#: concept, never a value; the numbers are the engine's, ``_row_stride_wrong`` computes them at check time); a wrong
#: number none of these gives gets ``ROW_STRIDE_OTHER[part]``
ROW_STRIDE_MISTAKES = read_only({
    "used row stride": {
        "the buffer's own row stride": "that is the buffer's own stride; the wrapper takes the stride from the view "
                                       "it was handed at capture, not from the buffer",
        "the longest context's page count": "that is the page count of the longest context; capture never saw such "
                                            "a request",
        "the first graph's batch size": "that is a batch size, not a row stride",
        "the second graph's batch size": "that is a batch size, not a row stride",
    },
    "buffer row stride": {
        "the longest context's page count": "that rounds the context to pages; SGLang's width formula for the buffer "
                                            "(init_cuda_graph_state) is another one",
        "the row stride the kernel used": "that is the stride the kernel used; the buffer's rows are as wide as "
                                          "init_cuda_graph_state made them",
    },
    "flat index": {
        "the row's page through the buffer's stride": "that is where the row should read, through the buffer's "
                                                      "stride; the kernel steps rows by the stride it was given",
        "the row's page through the context's page count": "that steps rows by the context's page count; the "
                                                           "kernel steps rows by the stride it was given",
    },
})
ROW_STRIDE_OTHER = read_only({
    "used row stride": "what were seq_lens when the graph was captured, and how wide a view did that give?",
    "buffer row stride": "look at how init_cuda_graph_state sizes the buffer's columns",
    "flat index": "count entries from the buffer's first one, moving from row to row by the stride the kernel was "
                  "given",
})


def _row_stride_wrong(used: int, real: int) -> dict:
    """{part: {what the wrong number is: the number}} of ``ROW_STRIDE_MISTAKES``, for the engine's strides."""
    s = ROW_STRIDE_SETUP
    ctx_pages = cdiv(s["context_length"], PAGE_SIZE)
    return {
        "used row stride": {"the buffer's own row stride": real, "the longest context's page count": ctx_pages,
                            "the first graph's batch size": s["cuda_graph_bs"][0],
                            "the second graph's batch size": s["cuda_graph_bs"][1]},
        "buffer row stride": {"the longest context's page count": ctx_pages, "the row stride the kernel used": used},
        "flat index": {"the row's page through the buffer's stride": s["row"] * real + s["page"],
                       "the row's page through the context's page count": s["row"] * ctx_pages + s["page"]},
    }


#: the mistakes of ``ROW_STRIDE_MISTAKES`` whose number is built from another part's truth, and that part: their hint
#: would tell that part's answer ("that is the buffer's own stride" for a 6 says the buffer's stride is 6), so it is
#: given only where that part is answered right
ROW_STRIDE_DISCLOSES = read_only({"the buffer's own row stride": "buffer row stride",
                                  "the row stride the kernel used": "used row stride",
                                  "the row's page through the buffer's stride": "buffer row stride"})


def _row_stride_hints(used: int, real: int, flat: int, answers: tuple) -> list:
    """One hint per wrong part of exercise 3's answer, naming the concept (never a value): the hint of the last
    mistake of ``ROW_STRIDE_MISTAKES`` whose number it is, unless it would tell a part answered wrong
    (``ROW_STRIDE_DISCLOSES``), else ``ROW_STRIDE_OTHER``'s."""
    hints = []
    wrong = _row_stride_wrong(used, real)
    truths = {"used row stride": used, "buffer row stride": real, "flat index": flat}
    right = {part for (part, truth), answer in zip(truths.items(), answers) if answer == truth}
    for (part, truth), answer in zip(truths.items(), answers):
        if answer != truth:
            by_number = {n: ROW_STRIDE_MISTAKES[part][what] for what, n in wrong[part].items()
                         if ROW_STRIDE_DISCLOSES.get(what, part) in right | {part}}
            hints.append(f"{part}: not {_show(answer)}; " + by_number.get(answer, ROW_STRIDE_OTHER[part]))
    return hints


def check_row_stride(used_row_stride, buffer_row_stride, flat_index) -> ExerciseResult:
    """Pre-fix cutlass_mla, ``--context-length 640 --cuda-graph-bs 4 8``, replay at batch size 8:
    the row stride the kernel indexes the page table with, the index buffer's real row stride, and
    the flat index (from the buffer's first entry) where request row 3 reads its page j = 2.
    Ints, read by ``checks.meaning`` (numpy ints, one-element tensors, ``5.0``). The check captures that engine
    and reads the truth off the launch it recorded, here and nowhere else."""
    given = (used_row_stride, buffer_row_stride, flat_index)
    if all(a is None or a is Ellipsis for a in given):
        return _report(False, "not answered yet: give three ints (used row stride, buffer row stride, flat index)")
    answers = tuple(_as_int(a) for a in given)
    names = ("used row stride", "buffer row stride", "flat index")
    bad = [f"{n} {_show(a)}" for n, a, i in zip(names, given, answers) if i is None]
    if bad:
        return _report(False, f"expected three ints, got {', '.join(bad)}")
    s = ROW_STRIDE_SETUP
    with record_launches() as log:  # the engine captures its graphs here
        engine = Engine(toy_model(), attention_backend="cutlass_mla", defects=PRE_FIX,
                        context_length=s["context_length"], max_running_requests=s["max_running_requests"],
                        cuda_graph_bs=s["cuda_graph_bs"])
    rec = last_launch(log, 8)
    used, real = rec.launch.row_stride, engine.runner.backend.cuda_graph_kv_indices.stride(0)
    flat = rec.page_table.storage_offset() + s["row"] * used + s["page"]
    hints = _row_stride_hints(used, real, flat, answers)
    if hints:
        return _report(False, "; ".join(hints) + ".")
    return _report(True, f"the kernel used row stride {used} on a buffer whose rows are {real} apart; "
                         f"row {s['row']} page {s['page']} read flat entry {flat}, which is row "
                         f"{flat // real}'s page slot {flat % real}.")


# ---- 4. size the workspace ------------------------------------------------------------------------
#: exercise 4's cases: every (max_seq_len, num_batches) of these edges, for each (sm_count, num_kv_splits); past
#: 132 and 264 chunks of 128 tokens (16896, 33792) too, where sm_count // B, not max_splits, caps the split count
WORKSPACE_LENGTHS = (1, 127, 128, 129, 255, 256, 257, 640, 896, 897, 4096, 4097, 4224, 16384, 16896, 16897, 33793,
                     200_000)
#: around sm_count (sm_count // B is 0 past it), divisors of 132 (4, 66) and of 133 = 132 + 1 (7, 19): where
#: sm_count // B steps; 1024 and 8192 take the bytes past 2**31 and 2**32 (a count kept in 32 bits wraps)
WORKSPACE_BATCHES = (1, 2, 3, 4, 7, 8, 16, 19, 64, 66, 131, 132, 133, 200, 1024, 8192)
#: (sm_count, num_kv_splits): the H100 / H200's 132 SMs, the B200's 148, one SM and twice 132; fixed counts above
#: the SM count (1 SM at 2 splits, 8 SMs at 64: a fixed count is used as given, never capped)
WORKSPACE_SPLITS = ((132, 1), (132, 2), (132, 3), (132, -1), (148, -1), (1, -1), (264, -1), (1, 2), (8, 64))
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
WORKSPACE_MISTAKES = read_only({
    "round_up": (False, "max_splits counts 128-token chunks of max_seq_len, and a partial chunk is a chunk too"),
    "last_step": (False, "your automatic split count stops at heur; the formula has one more step, which spreads "
                         "the chunks evenly over the waves of CTAs (it changes the count for some shapes)"),
    "auto": (False, "num_kv_splits = -1 is not a split count: it asks for the automatic one"),
    "fixed": (False, "a num_kv_splits >= 1 is used as is; only -1 asks for the automatic count"),
    "chunks": (False, "max_splits is a count of 128-token chunks, not of tokens"),
})


#: the hint for the workspace of one request (the split count and bytes right, the batch left out)
WORKSPACE_BATCH_HINT = "every request of the batch has its own partials"


def bytes_mistakes() -> dict:
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
        (4 * D + 4) * 16: "16 heads: the kernel pads the heads to its tile of 128, whatever H is",
        # the same number two ways: elements instead of bytes, or bytes for 32 heads
        (D + 1) * H: "count bytes, not elements (float32: 4 bytes each), and every head of the kernel's tile "
                     "of 128, whatever H is",
    }


#: cases drawn at check time, beyond the enumerated ones: (how many, the most tokens, batches, SMs, fixed splits)
WORKSPACE_DRAWN = (64, 200_000, 512, 264, 16)
#: seconds a learner's workspace_size may take over all cases together
WORKSPACE_SECONDS = 20.0


def _workspace_drawn() -> tuple:
    n, most_len, most_b, most_sms, most_ns = WORKSPACE_DRAWN
    rng = _Draws()
    return tuple((rng.randint(1, most_len), rng.randint(1, most_b), rng.randint(1, most_sms),
                  rng.choice([-1, rng.randint(1, most_ns)])) for _ in range(n))


def _workspace_answers(fn, cases) -> tuple:
    """``(bytes per case, None)`` or ``(None, a one-line hint)``: the learner's function on every case, refusing
    the library's own formula and stopping at ``WORKSPACE_SECONDS``."""
    refusal = Refusal(files=_OWN_CODE + ("mla_edu/kernels/", "mla_edu/serving/"),
                      functions=(get_workspace_size, num_kv_splits_for), why="the library's own formula")
    deadline = time.monotonic() + WORKSPACE_SECONDS
    got, saved = [], library_globals()
    for case in cases:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, f"your function took more than {WORKSPACE_SECONDS:g} s over the cases (an endless loop?)"
        value, err = run_learner(fn, *case, refuse=refusal, seconds=left, saved=saved)
        if err:
            if err.startswith(("refused", "your function")):
                return None, err
            L, B, sms, ns = case
            hint = ""
            if err.startswith("ZeroDivisionError") and ns == -1:
                hint = (": with more requests than SMs, sm_count // B is 0, and heur has a floor" if sms // B == 0
                        else f": max_splits is 0 here; {WORKSPACE_MISTAKES['round_up'][1]}" if L < PAGE_SIZE else "")
            return None, f"workspace_size{case} raised {err}{hint}"
        n = _as_int(value)
        if n is None:
            what = ("it returned None: return the number of bytes" if value is None else
                    f"expected an int number of bytes, got {type(value).__name__} {_show(value)}")
            return None, f"workspace_size{case}: {what}"
        got.append(n)
    return got, None


def check_workspace_size(fn) -> ExerciseResult:
    """``fn(max_seq_len, num_batches, sm_count, num_kv_splits) -> bytes`` against sgl-kernel's formula.

    Domain: max_seq_len >= 1, num_batches >= 1, sm_count >= 1, num_kv_splits = -1 (automatic) or >= 1; the
    cases (``WORKSPACE_CASES``) are its edges, and ``WORKSPACE_DRAWN`` more are drawn at check time. Every case is
    run first; an answer that one classic mistake explains on all of them gets that mistake's hint, any other the
    first case it gets wrong and what to look at (never the expected bytes). ``fn`` may not call the library's
    ``get_workspace_size`` or ``num_kv_splits_for``.
    """
    bad = _not_callable(fn, "(max_seq_len, num_batches, sm_count, num_kv_splits)")
    if bad:
        return bad
    cases = WORKSPACE_CASES + _workspace_drawn()
    seal = Seal(get_workspace_size(*case) for case in cases)  # the truths, sealed before the learner's function runs
    got, err = _workspace_answers(fn, cases)
    if err:
        return _report(False, err)
    want = [get_workspace_size(*case) for case in cases]  # again, now that the learner's function is done
    if not seal.matches(want):
        return _report(False, SEAL_BROKEN)
    if got == want:
        return _report(True, f"all {len(WORKSPACE_CASES)} cases (and {len(cases) - len(WORKSPACE_CASES)} drawn "
                             "now) equal sgl-kernel's cutlass_mla_get_workspace_size (e.g. "
                             f"{(4224, 8, 132, -1)} -> {get_workspace_size(4224, 8, 132, -1):,} bytes).")
    per_split = {g // (num_kv_splits_for(*c) * c[1]) if g % (num_kv_splits_for(*c) * c[1]) == 0 else None
                 for g, c in zip(got, cases)}
    if len(per_split) == 1 and not per_split & {None, 0}:  # the split count is right everywhere, the bytes are not
        hint = bytes_mistakes().get(per_split.pop(), "the bytes per (batch, split) are off on every case: count "
                                                      "the elements of o_acc and lse_acc and their size")
        return _report(False, f"every case is off by one mistake: {hint}.")
    if got == [BYTES_PER_BATCH_SPLIT * _split_variant(*c) for c in cases]:
        return _report(False, f"every case is off by one mistake: {WORKSPACE_BATCH_HINT}.")
    for name, (wrong, hint) in WORKSPACE_MISTAKES.items():
        if got == [BYTES_PER_BATCH_SPLIT * _split_variant(*c, **{name: wrong}) * c[1] for c in cases]:
            return _report(False, f"every case is off by one mistake: {hint}.")
    i = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    L, B, sms, ns = cases[i]
    if got[i] == 0:
        hint = ("with more requests than SMs, sm_count // B is 0, and heur has a floor" if ns == -1 and sms // B == 0
                else "it is not 0 at one split: sgl-kernel sizes it for one split anyway")
    else:
        hint = "find which factor is wrong there: the bytes per (batch, split), the split count, or the batch"
    return _report(False, f"workspace_size{cases[i]}: your function returned {_show(got[i])}, which is wrong; {hint}.")


# ---- 5. find the stale entries a captured kernel read -------------------------------------------
#: measured steps of the pre-fix engine: (max running requests = largest captured size, requests in the step)
STALE_ENGINE_CASES = ((6, 6), (5, 5), (8, 8), (8, 6), (6, 5))
#: built steps at the domain's edges: (W, buffer rows, row stride, seq_lens of the real rows). Row stride 1 (the
#: pre-fix kernel), W (the fix) and between; no padded row and up to three; seq_lens 1 and every page edge;
#: padded rows whose reads land on a slot a real row did not write, on their own first entry, and on another
#: padded row's slot past its first (the last case: a padded row writes one entry, not its whole row).
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
    (4, 4, 3, (129, 200)),
)
#: the whole domain, enumerated: every W 2..6, buffer rows 1..7, real rows 1..rows, row stride 1..W, and three
#: choices of seq_lens from the page edges of a W-wide row (``stale_domain()``)
STALE_LENGTH_EDGES = (1, 2, 127, 128, 129, 255, 256, 257, 383, 384, 385, 511, 512, 513, 639, 640, 641, 767, 768)
#: steps drawn at check time beyond the domain: (how many, the widest W, the most buffer rows)
STALE_DRAWN = (40, 9, 10)


def _padded(seq_lens, rows: int) -> list:
    """Every buffer row's seq_len: the real rows' ``seq_lens``, then 1 for each padded row."""
    return list(seq_lens) + [1] * (rows - len(seq_lens))


def _built_step(width: int, rows: int, rs: int, seq_lens) -> tuple:
    """A step's inputs: page ids 1 .. rows * W shuffled over the whole buffer, fresh and stale entries alike, so
    that an id tells nothing of whether the step wrote it (the answer is in the shapes, lengths and stride)."""
    g = torch.Generator().manual_seed(zlib.crc32(repr((width, rows, rs, tuple(seq_lens))).encode()))  # any platform
    buffer = (torch.randperm(rows * width, generator=g) + 1).reshape(rows, width)
    return buffer, tuple(seq_lens), rs


@lru_cache(maxsize=None)
def _stale_engine_step(k: int) -> tuple:
    """The k-th measured step as nested tuples (nothing in the cache can be changed in place)."""
    mr, bs = STALE_ENGINE_CASES[k]
    reads = measure_page_reads(toy_model(), task.default_eval_set()[40 * k:],
                               PanelSettings(defects=PRE_FIX, max_running_requests=mr), batch_size=bs)
    return tuple(map(tuple, reads.buffer.cpu().tolist())), tuple(reads.seq_lens), reads.launch.row_stride


def stale_cases() -> tuple:
    """Exercise 5's named steps, inputs only: ``(buffer [rows, W] int64, seq_lens, row_stride)``, five measured on
    the pre-fix engine, then ``STALE_EDGE_CASES``; new tensors on each call. The truths are computed inside
    ``check_stale_reads``."""
    measured = (_stale_engine_step(k) for k in range(len(STALE_ENGINE_CASES)))
    return tuple((torch.tensor(rows, dtype=torch.int64), lens, rs) for rows, lens, rs in measured) + \
        tuple(_built_step(*case) for case in STALE_EDGE_CASES)


def stale_domain() -> tuple:
    """Every step of the stated domain (see ``STALE_LENGTH_EDGES``), inputs only, as ``stale_cases`` (built on each
    call)."""
    steps = []
    for width in range(2, 7):
        for rows in range(1, 8):
            edges = [n for n in STALE_LENGTH_EDGES if cdiv(n, PAGE_SIZE) <= width]
            for bs in range(1, rows + 1):
                for rs in range(1, width + 1):
                    for shift in range(3):
                        lens = [edges[(shift * 5 + 7 * b + rs + width) % len(edges)] for b in range(bs)]
                        steps.append(_built_step(width, rows, rs, lens))
    return tuple(steps)


def _stale_drawn() -> tuple:
    n, most_w, most_rows = STALE_DRAWN
    rng = _Draws()
    steps = []
    for _ in range(n):
        width, rows = rng.randint(1, most_w), rng.randint(1, most_rows)
        lens = [rng.randint(1, width * PAGE_SIZE) for _ in range(rng.randint(1, rows))]
        steps.append(_built_step(width, rows, rng.randint(1, width), lens))
    return tuple(steps)


def _stale_variant(buffer, seq_lens, row_stride, *, landing_row=True, frozen_stride=True, buffer_rows=True,
                   slot_past_end=True, padded_readers=True, padded_writes=True, round_up=True, pages=True) -> set:
    """The stale reads, with one step optionally done wrong (each keyword: one classic mistake; ``round_up="writes"``:
    the floor only in the count of entries a row writes; ``pages=False``: that count in tokens;
    ``padded_writes="all"``: padded rows write their whole row)."""
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
    padded_write = {True: None, False: 0, "all": width}[padded_writes]
    written = [written_pages(n) if padded_write is None or r < len(seq_lens) else padded_write
               for r, n in enumerate(lens)]
    out = set()
    for b, n in enumerate(lens if padded_readers else seq_lens):
        for j in range(read_pages(n)):
            r, slot = divmod(b * (row_stride if frozen_stride else width) + j, width)
            limit = written[r] if landing_row and r < rows else written[min(b, rows - 1)]
            if r >= rows or (slot >= limit if slot_past_end else slot > limit):
                out.add((b, j))
    return out


#: the classic mistakes: the ``_stale_variant`` keyword and value that make each, and its hint
STALE_MISTAKES = read_only({
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
    "padded_writes_all": "you took the padded rows as writing their whole row; a padded row has seq_len 1, so the "
                         "replay writes its first entry only, and the rest of its row keeps what it held",
    "round_up": "a request's pages are its 128-token pages begun, not only the full ones: a partial page is "
                "read and written too",
    "pages": "you compared a page slot with a count of tokens: a row writes one entry per page",
})
_STALE_VARIANTS = read_only({
    "landing_row": ("landing_row", (False,)), "frozen_stride": ("frozen_stride", (False,)),
    "buffer_rows": ("buffer_rows", (False,)), "slot_past_end": ("slot_past_end", (False,)),
    "padded_readers": ("padded_readers", (False,)), "padded_writes": ("padded_writes", (False,)),
    "padded_writes_all": ("padded_writes", ("all",)), "round_up": ("round_up", (False, "writes")),
    "pages": ("pages", (False,))})
#: seconds a learner's stale_reads may take over all steps together
STALE_SECONDS = 30.0


def _stale_answer(got) -> tuple:
    """``(set of (int, int), None)`` or ``(None, what is wrong with its type)``, by ``checks.as_items``."""
    if got is None:
        return None, "it returned None: return a set of (row, j) pairs"
    items, err = as_items(got)
    if err and err.startswith("expected ints"):  # the set's items are not pairs
        mask = library_kind(got) is not None and str(got.dtype) in ("torch.bool", "bool")  # torch's or numpy's
        return None, (f"expected a set of (row, j) pairs of ints, got {_show(got)}"
                      + ("; a boolean mask? torch.nonzero(mask) lists its (row, j) pairs" if mask else ""))
    if err:
        return None, err
    if not all(isinstance(p, tuple) and len(p) == 2 and all(type(i) is int for i in p) for p in items):
        return None, f"expected a set of (row, j) pairs of ints, got {_show(got)}"
    return set(items), None


def _stale_hint(buffer, seq_lens, got, truth) -> str:
    """A hint on one step's wrong answer: the concept to check, never the pairs that are missing or extra."""
    rows, width = buffer.shape
    reads = {(b, j) for b, n in enumerate(_padded(seq_lens, rows)) for j in range(cdiv(n, PAGE_SIZE))}
    if got - reads:
        return "some of your pairs are not reads at all: row b (padded rows included) reads its pages j < " \
               "ceil(seq_len / 128) only"
    return ("for each read (b, j), padded rows included: which buffer row and slot does flat index b * row_stride + "
            "j land on, and did that row write that slot this step?")


def check_stale_reads(fn) -> ExerciseResult:
    """``fn(buffer, seq_lens, row_stride) -> set of (row, j)``: the reads that hit an entry not written
    this step. ``buffer`` is the index buffer ``[rows, W]``; ``seq_lens`` lists the real rows; the rows past
    them are padded rows (seq_len 1). Every row, padded ones included, writes its first
    ``ceil(seq_len / 128)`` entries and reads page ``j < ceil(seq_len / 128)`` at flat index
    ``row * row_stride + j``. Steps: the named ones of ``stale_cases()`` (five measured on the pre-fix engine,
    then ``STALE_EDGE_CASES``), the whole enumerated domain (``stale_domain()``) and ``STALE_DRAWN`` steps drawn
    at check time.

    Every named step is run first; an answer that one classic mistake explains on all of them gets that
    mistake's hint (``STALE_MISTAKES``), any other the first step it gets wrong and the concept to check.
    """
    bad = _not_callable(fn, "(buffer, seq_lens, row_stride)")
    if bad:
        return bad
    named = stale_cases()
    # the checker's files, and its truth by an exact copy of its code too (exec of its source elsewhere)
    refusal = Refusal(files=_OWN_CODE, functions=(_stale_variant, _padded, _stale_answer),
                      why="the checker's own code")
    deadline, saved = time.monotonic() + STALE_SECONDS, library_globals()

    def answer(k, step):
        """``(the learner's set, None)`` or ``(None, the NOT YET result)`` for one step."""
        buffer, seq_lens, rs = step
        where = f"step {k}" if k < len(named) else f"a step of the domain (buffer {list(buffer.shape)}, seq_lens " \
                                                   f"{list(seq_lens)}, row stride {rs})"
        left = deadline - time.monotonic()
        if left <= 0:
            return None, _report(False, f"your function took more than {STALE_SECONDS:g} s over the steps")
        got, err = run_learner(fn, buffer.clone(), list(seq_lens), rs, refuse=refusal, seconds=left, items=True,
                               saved=saved)
        if err:
            return None, _report(False, f"{where}: {err}" if err.startswith(("refused", "your function"))
                                 else f"{where}: your function raised {err}")
        got, err = _stale_answer(got)
        return (None, _report(False, f"{where}: {err}")) if err else (got, None)

    domain = stale_domain() + _stale_drawn()
    # every truth sealed before the learner's function runs; each computed again once the learner has answered it
    seal = Seal(_stale_variant(*step) for step in named + domain)
    got_named = []
    for k, step in enumerate(named):
        got, result = answer(k, step)
        if result:
            return result
        got_named.append(got)
    truths = [_stale_variant(*step) for step in named]
    if got_named != truths:
        for name, hint in STALE_MISTAKES.items():
            keyword, values = _STALE_VARIANTS[name]
            for wrong in values:
                if got_named == [_stale_variant(*step, **{keyword: wrong}) for step in named]:
                    return _report(False, f"the named steps are off by one mistake: {hint}.")
        k = next(k for k, (g, t) in enumerate(zip(got_named, truths)) if g != t)
        return _wrong_step(f"step {k}", named[k], got_named[k], truths[k])
    done = list(truths)
    for step in domain:  # the first step that differs ends the check
        got, result = answer(len(named), step)
        if result:
            return result
        done.append(_stale_variant(*step))
        if got != done[-1]:
            return _wrong_step("a step of the domain", step, got, done[-1])
    if not seal.matches(done):
        return _report(False, SEAL_BROKEN)
    n = sum(len(t) for t in truths)
    return _report(True, f"all {len(named)} named steps right ({n} stale reads in all), and all {len(domain)} steps "
                         "of the domain: these entries are what the captured kernel attended over instead of the "
                         "request's own pages.")


def _wrong_step(where: str, step, got: set, truth: set) -> ExerciseResult:
    buffer, seq_lens, rs = step
    if got == {(b, j) for b, n in enumerate(_padded(seq_lens, buffer.shape[0]))
               for j in range(cdiv(n, PAGE_SIZE)) if b * rs + j != b * buffer.shape[1] + j} != truth:
        return _report(False, f"{where} (seq_lens {list(seq_lens)}, row stride {rs}, buffer {list(buffer.shape)}): "
                              "those are the *wrong* reads; a wrong read can land on an entry another row wrote "
                              "this step (fresh, just not its own). Stale = not written this step, by any row.")
    return _report(False, f"{where} (seq_lens {list(seq_lens)}, row stride {rs}, buffer {list(buffer.shape)}) is "
                          "wrong; " + _stale_hint(buffer, seq_lens, got, truth))


__all__ = ["ExerciseResult", "MYSTERY_NUMBERS", "OPTIONS", "check_mystery", "check_replay", "check_row_stride",
           "check_stale_reads", "check_workspace_size", "mystery_figure", "stale_cases", "stale_domain", "toy_model"]
