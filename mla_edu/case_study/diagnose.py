"""Taking the zero-accuracy bug apart: one decode step under a graph, what it froze, what it read.

Used by notebooks 06 (the bug) and 07 (the fix).

    with record_launches() as log:              # launch parameters of every mla_decode call
        ...
    d = diagnose_step(model, prompts, earlier=older_prompts)   # one decode step, graph vs eager
    d.row_err, d.read, d.intended, d.captured, d.needed, d.check_err
    plots.page_reads_figure(d); plots.page_table_figure(d)   # mla_edu.case_study.plots draws them

Everything is measured on the mini engine (``mla_edu.serving``): real CUDA graphs on a GPU,
the CPU graph emulator otherwise. Nothing here re-derives what the graph "should" do from
the backend's code: launch parameters are recorded from the kernel's own plan while the
graph is captured, and the predicted page reads are checked by re-running the reference
kernel on them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from mla_edu import default_device, kernels
from mla_edu.case_study.accuracy import AccuracyRuns, run_bench
from mla_edu.case_study.seed import SEED_CONFIG
from mla_edu.model import load_pretrained, task
from mla_edu.serving import MERGED_FIX, PRE_FIX, Engine, ServerArgs
from mla_edu.serving.backends.cutlass_mla import POISON_PAGE
from mla_edu.util import PAGE_SIZE, cdiv, is_int

DEFAULT_GRAPH_BS = (4, 8)
# grid codes of PageReads (page ids are >= 0)
UNUSED = -1  # page slot past the request's pages: not read
POISON = -2  # the kernel read the poison id (poison_fill on): NaN, a loud failure
OUTSIDE = -3  # the kernel read past the end of the index buffer


# ---- launch parameters, recorded from the kernel's own plan ---------------------------------------
@dataclass(frozen=True)
class Launch:
    """Host-side launch parameters of one ``mla_decode`` call (what a CUDA graph freezes)."""

    bs: int
    width: int  # page_table.size(1)
    row_stride: int  # the row stride the kernel indexes the table with
    buffer_row_stride: int  # page_table.stride(0): the real one
    max_seq_len: int  # PAGE * size(1), as the cutlass wrapper computes it
    num_splits: int
    workspace_ptr: int
    workspace_bytes: int


@dataclass
class LaunchRecord:
    launch: Launch
    page_table: torch.Tensor  # the very view the kernel got (keeps no copy: it is the persistent buffer)
    workspace: torch.Tensor | None = None  # kept only with keep_workspace=True


@contextlib.contextmanager
def record_launches(keep_workspace: bool = False):
    """Record the plan of every ``mla_decode`` call made inside the block (a list of ``LaunchRecord``).

    Under capture the host code runs once per graph, so the last record of a batch size is
    what every replay of that graph uses; a replay adds no record (no host code runs).
    ``keep_workspace``: also hold the workspace tensor (so that it is never freed).
    """
    log: list = []

    def record(plan, page_table, workspace):
        launch = Launch(plan.batch, page_table.size(1), plan.row_stride, page_table.stride(0), plan.max_seq_len,
                        plan.num_splits, workspace.data_ptr(), workspace.numel())
        log.append(LaunchRecord(launch, page_table, workspace if keep_workspace else None))

    with kernels.observe_plans(record):
        yield log


def last_launch(log: list, bs: int) -> LaunchRecord:
    """The last record with batch size ``bs``."""
    for rec in reversed(log):
        if rec.launch.bs == bs:
            return rec
    raise ValueError(f"no mla_decode launch with batch size {bs} was recorded (sizes seen: "
                     f"{sorted({r.launch.bs for r in log})})")


# ---- one decode step, taken apart ----------------------------------------------------------------
@dataclass
class StepDiagnosis:
    """One decode step of ``bs`` real rows by graph replay, next to the same step done eagerly."""

    defects: frozenset
    seq_lens: list  # [bs]
    padded_bs: int
    logits_graph: torch.Tensor  # [bs, vocab] float32, cpu
    logits_eager: torch.Tensor  # [bs, vocab]
    intended: list  # per padded row: the page ids it owns (req_to_token), in order
    read: list  # per padded row: the page ids the captured launch read
    buffer: torch.Tensor  # [padded_bs, W] int64: the persistent index buffer as the replay read it
    fresh: torch.Tensor  # [padded_bs, W] bool: entries the replay hook wrote for this step
    captured: Launch  # frozen at capture, used by the replay
    needed: Launch  # what the eager path launched for the same batch
    launches_during_replay: int  # host-side kernel plans made while the graph replayed
    check_err: list | None  # [bs] |replay logits - reference kernel on the predicted reads| (cutlass_mla only)
    captured_table: torch.Tensor | None = None  # the page-table view the captured launch got
    poison_fill: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def row_err(self) -> list:
        """[bs] max |graph - eager| logits per row (inf where the graph gave NaN)."""
        err = (self.logits_graph - self.logits_eager).abs().amax(dim=-1)
        return err.nan_to_num(float("inf")).tolist()

    @property
    def rows_reading_own_pages(self) -> list:
        return [self.read[b] == self.intended[b] for b in range(len(self.seq_lens))]

    @property
    def nan_rows(self) -> list:
        return torch.isnan(self.logits_graph).any(dim=-1).tolist()


@dataclass
class PageReads:
    """One decode step of ``bs`` real rows, by graph replay. Page ids as ints; see ``UNUSED/POISON/OUTSIDE``."""

    seq_lens: list  # [bs]
    intended: torch.Tensor  # [bs, max_pages] int64: fresh table from req_to_token
    read: torch.Tensor  # [bs, max_pages] int64: what the captured kernel read
    buffer: torch.Tensor  # [padded bs, W] int64: the persistent index buffer at this step
    live: torch.Tensor  # [padded bs, W] bool: entries written this step
    launch: Launch  # frozen at capture for the padded batch size
    row_err: list  # [bs] max |graph logits - eager logits| (inf where the graph gave NaN)

    @property
    def rows_ok(self) -> list:
        return (self.read == self.intended).all(dim=1).tolist()

    @property
    def wrong_reads(self) -> int:
        return int((self.read != self.intended).sum())


def _owned_pages(req_to_token: torch.Tensor, req_pool_indices: list, seq_lens: list) -> list:
    rows = req_to_token.cpu()
    return [[int(rows[r, j * PAGE_SIZE]) // PAGE_SIZE for j in range(cdiv(n, PAGE_SIZE))]
            for r, n in zip(req_pool_indices, seq_lens)]


def default_dtype(device=None) -> str:
    """bf16 on a GPU, float32 on CPU (the emulator's reference runs)."""
    dev = torch.device(device) if device is not None else default_device()
    return "bfloat16" if dev.type == "cuda" else "float32"


def make_engine(model, defects=PRE_FIX, *, num_kv_splits: int = 1, cuda_graph_bs=DEFAULT_GRAPH_BS,
                dtype: str | None = None, device=None, prefill_cache: dict | None = None,
                attention_backend: str = "cutlass_mla", context_length: int | None = None, **kw) -> Engine:
    """An engine (cutlass_mla unless told) with graphs captured for ``cuda_graph_bs`` (call inside
    ``record_launches`` to record what each capture froze). ``context_length``: SGLang's
    ``--context-length``, which sets the index buffer's width W; None = the model's own context."""
    if context_length is None:
        context_length = model.config.mla.max_position_embeddings
    args = ServerArgs(attention_backend=attention_backend, defects=defects, num_kv_splits=num_kv_splits,
                      cuda_graph_bs=tuple(cuda_graph_bs), max_running_requests=max(cuda_graph_bs),
                      context_length=context_length,
                      dtype=dtype or default_dtype(device), device=device, **kw)
    return Engine(model, args, prefill_cache=prefill_cache)


@torch.no_grad()
def diagnose_step(model, prompts, *, defects=PRE_FIX, poison_fill: bool = False, earlier=None,
                  num_kv_splits: int = 1, cuda_graph_bs=DEFAULT_GRAPH_BS, dtype: str | None = None, device=None,
                  attention_backend: str = "cutlass_mla", context_length: int | None = None) -> StepDiagnosis:
    """Prefill ``prompts`` (token-id lists), decode one step by graph replay and eagerly, and take it apart.

    ``earlier``: prompts decoded (one step) and finished first, so that their page ids stay in the
    rows of the persistent index buffer, as on a running server. ``poison_fill``: see ``ServerArgs``.
    ``context_length``: sets the buffer's width W (see ``make_engine``; the seed ran 4096: W = 33).
    The predicted reads are checked against the kernel: the same step is re-run eagerly with
    the reference kernel on a contiguous table holding exactly the predicted page ids;
    ``check_err`` is its distance to the replay's logits (a backend that ``freezes_a_view``, cutlass_mla;
    None for triton, whose launch reads the buffer with its real row stride).
    """
    if not prompts or len(prompts) > max(cuda_graph_bs):
        raise ValueError(f"prompts: expected 1..{max(cuda_graph_bs)} prompts (the largest captured size), "
                         f"got {len(prompts) if prompts is not None else None}")
    with record_launches() as log:
        engine = make_engine(model, defects, num_kv_splits=num_kv_splits, cuda_graph_bs=cuda_graph_bs,
                             dtype=dtype, device=device, attention_backend=attention_backend, poison_fill=poison_fill,
                             context_length=context_length)
        runner, backend = engine.runner, engine.runner.backend
        gr = runner.graph_runner

        if earlier:
            old = engine.prefill_requests(earlier)
            runner.decode(engine.make_batch(old))
            for r in old:
                engine.free_req(r)
        reqs = engine.prefill_requests(prompts)
        batch = engine.make_batch(reqs)
        bs, padded = batch.batch_size, gr.padded_size(batch.batch_size)
        captured = last_launch(log, padded)  # recorded while this graph was captured
        n_before = len(log)
        _, _, logits_g = runner.decode(batch)  # graph replay
        during = len(log) - n_before
        extra = backend.metadata_after_replay()  # what the replay hook left where the graph never reads
        # the persistent index buffer: (max_bs, W) int32, cutlass_mla's cuda_graph_kv_indices, triton's page_table
        buffer = backend.graph_index_buffer()[:padded].cpu().long()
        # what each (padded) row owns and what the frozen launch reads
        lens = gr.seq_lens_cpu[:padded].tolist()
        rpi = gr.req_pool_indices[:padded].tolist()
        n_pages = [cdiv(n, PAGE_SIZE) for n in lens]
        intended = _owned_pages(runner.req_to_token_pool.req_to_token, rpi, lens)
        read = kernels.pages_read(captured.page_table, n_pages, captured.launch.row_stride)
        fresh = torch.zeros_like(buffer, dtype=torch.bool)
        for b, n in enumerate(n_pages):
            fresh[b, :n] = True
        # check against the kernel: reference kernel, contiguous table of the predicted page ids
        logits_ref = None
        if backend.freezes_a_view:
            table = torch.zeros((padded, max(n_pages)), dtype=torch.int32)
            for b, pages in enumerate(read):
                table[b, :len(pages)] = torch.tensor(pages, dtype=torch.int32)
            with backend.reading(table, "reference"):
                _, _, logits_ref = runner.decode_forward(gr.static_batch(padded))
        # the same step eagerly: a fresh contiguous table (what eager mode always did)
        backend.init_forward_metadata(batch)
        _, _, logits_e = runner.decode_forward(batch)
        needed = log[-1].launch
    lg, le = logits_g.float().cpu(), logits_e.float().cpu()
    check = None
    if logits_ref is not None:
        lr = logits_ref[:bs].float().cpu()
        both_nan = torch.isnan(lg).all(dim=-1) & torch.isnan(lr).all(dim=-1)  # [bs]
        check = torch.where(both_nan, 0.0, (lg - lr).abs().amax(dim=-1).nan_to_num(float("inf"))).tolist()  # [bs]
    for r in reqs:
        engine.free_req(r)
    return StepDiagnosis(frozenset(engine.args.defects), batch.seq_lens_cpu.tolist(), padded, lg, le,
                         intended, read, buffer, fresh, captured.launch, needed, during, check,
                         captured_table=captured.page_table, poison_fill=engine.args.poison_fill, extra=extra)


def stale_entries(d: StepDiagnosis) -> torch.Tensor:
    """[padded_bs, W] bool: entries of the index buffer not written for this step and not poison."""
    return stale_mask(d.buffer, d.fresh)


def stale_mask(buffer: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
    """[rows, W] bool: entries of ``buffer`` not written for this step (``fresh``) and not poison."""
    return ~fresh & (buffer != POISON_PAGE)


def _read_through(table: torch.Tensor, row_stride: int, n_pages: list, max_pages: int) -> torch.Tensor:
    """Page ids a kernel reads indexing ``table``'s storage from its first element with ``row_stride``,
    as ``[B, max_pages]``: ``OUTSIDE`` past the storage, ``POISON`` for a poisoned entry, ``UNUSED`` after."""
    out = torch.full((len(n_pages), max_pages), UNUSED, dtype=torch.int64)
    for b, row in enumerate(kernels.pages_read(table, n_pages, row_stride, clamp=False)):
        for j, page in enumerate(row):
            out[b, j] = OUTSIDE if page is None else (POISON if page == POISON_PAGE else page)
    return out


def page_reads(d: StepDiagnosis) -> PageReads:
    """``d``'s real rows laid out as grids: the pages each row owns, the pages the captured launch read
    (from the very view it got, ``OUTSIDE`` past the buffer's end, ``POISON`` for the poison id)."""
    bs = len(d.seq_lens)
    n_pages = [cdiv(n, PAGE_SIZE) for n in d.seq_lens]
    max_pages = max(n_pages)
    read = _read_through(d.captured_table, d.captured.row_stride, n_pages, max_pages)
    intended = torch.full((bs, max_pages), UNUSED, dtype=torch.int64)  # what a fresh table holds
    for b, pages in enumerate(d.intended[:bs]):
        intended[b, :len(pages)] = torch.tensor(pages, dtype=torch.int64)
    return PageReads(d.seq_lens, intended, read, d.buffer, d.fresh, d.captured, d.row_err)


def launch_table(captured: Launch, needed: Launch) -> list:
    """Rows (parameter, frozen at capture, what this batch needed) for printing."""
    rows = [("page_table width  size(1)", captured.width, needed.width),
            ("row stride the kernel used", captured.row_stride, needed.row_stride),
            ("row stride of the table  stride(0)", captured.buffer_row_stride, needed.buffer_row_stride),
            ("max_seq_len = 128 * size(1)", captured.max_seq_len, needed.max_seq_len),
            ("KV splits", captured.num_splits, needed.num_splits),
            ("batch rows launched", captured.bs, needed.bs)]
    return rows


# ---- the workspace hazard -------------------------------------------------------------------------
@dataclass
class WorkspaceHazard:
    defects: frozenset
    splits: int  # the split count frozen into the largest graph
    graph_workspace_held: bool  # does the backend still hold the workspace the graph writes?
    freed_uses: list  # what the emulator reports the replay touched after it was freed ([] on CUDA)
    owner_bytes_changed: float  # fraction of the new owner's bytes one replay overwrote
    row_err: list  # [bs] max |graph - eager| logits


@torch.no_grad()
def workspace_hazard(model, prompts, *, defects=frozenset({"workspace"}), num_kv_splits: int = -1,
                     cuda_graph_bs=DEFAULT_GRAPH_BS, dtype: str | None = None, device=None) -> WorkspaceHazard:
    """The capture-time workspace, dropped by the host, written by every replay.

    Graphs are captured largest first; with the ``workspace`` defect each capture allocates a
    workspace and stores it on the backend, dropping the previous one, which the graph captured
    before still writes. Two engines, one decode step each (a batch only the largest graph runs):

    1. nothing else holds the workspace: the emulator reports the replay touching freed memory
       (``freed_uses``; a real CUDA graph does not report anything);
    2. the bytes of the largest graph's workspace are handed to a new owner (on a GPU the caching
       allocator does that with a later allocation of that size; here we do it explicitly, so that
       it happens every time): the owner writes its data, one step is replayed, and we measure
       how much of the owner's data the replay overwrote.
    """
    sizes = sorted(set(int(b) for b in cuda_graph_bs))
    lo = sizes[-2] if len(sizes) > 1 else 0
    if not lo < len(prompts) <= sizes[-1]:
        raise ValueError(f"prompts: expected {lo + 1}..{sizes[-1]} prompts (a batch only the largest graph runs), "
                         f"got {len(prompts)}")
    big, cache = sizes[-1], {}

    def one_step(engine):
        reqs = engine.prefill_requests(prompts)
        batch = engine.make_batch(reqs)
        _, _, logits_g = engine.runner.decode(batch)  # graph replay
        return reqs, batch, logits_g

    # 1. the emulator's view of the freed workspace
    with record_launches() as log:
        engine = make_engine(model, defects, num_kv_splits=num_kv_splits, cuda_graph_bs=sizes, dtype=dtype,
                             device=device, prefill_cache=cache)
    launch = last_launch(log, big).launch
    held = engine.runner.backend.cuda_graph_mla_workspace.data_ptr() == launch.workspace_ptr
    del log
    reqs, batch, logits_g = one_step(engine)
    freed = engine.runner.graph_runner.graphs[big, None].freed_uses()  # the cutlass backend: one variant
    runner = engine.runner
    runner.backend.init_forward_metadata(batch)
    _, _, logits_e = runner.decode_forward(batch)
    err = (logits_g.float() - logits_e.float()).abs().amax(dim=-1).nan_to_num(float("inf")).cpu().tolist()
    # 2. a new owner for those bytes
    with record_launches(keep_workspace=True) as log:
        engine = make_engine(model, defects, num_kv_splits=num_kv_splits, cuda_graph_bs=sizes, dtype=dtype,
                             device=device, prefill_cache=cache)
    owner = last_launch(log, big).workspace  # [bytes] uint8: the largest graph's workspace
    log.clear()
    owner.fill_(0x5A)  # the new owner's data
    one_step(engine)
    changed = float((owner != 0x5A).float().mean())
    return WorkspaceHazard(frozenset(engine.args.defects), launch.num_splits, held, freed, changed, err)


# ---- the runs notebooks 06-07 show, and the figures figures/ holds ----------------------------------
# (label, server arguments): SGLang's merged fix one piece at a time, then the poison fill on top
# The first has the pre-fix graph defects with the model's scale; "pre-fix (7059ae16f)" names only the seed's
# configuration (``SEED_PRE_FIX``: the bug-era kernel too), in notebook 06 and ``repro``
MERGED_FIX_STEPS = (("both graph defects, model's scale", dict(defects=PRE_FIX)),
                    ("+ width fixed", dict(defects=frozenset({"workspace"}))),
                    ("+ workspace fixed = merged fix (e58423b2b)", dict(defects=MERGED_FIX)),
                    ("+ poison fill (not in SGLang)", dict(defects=MERGED_FIX, poison_fill=True)))


def example_batch(questions=None) -> tuple:
    """(prompts, earlier): the eval set's first 6 questions, decoded after 8 longer ones (6..13) finished."""
    questions = task.default_eval_set() if questions is None else questions
    if len(questions) < 14:
        raise ValueError(f"questions: expected at least 14, got {len(questions)}")
    prompts = [q.prompt_ids for q in questions[:6]]
    earlier = [q.prompt_ids for q in sorted(questions[6:14], key=lambda q: -q.prompt_len)]
    return prompts, earlier


def accuracy_runs(model, questions, n: int = 64, dtype: str | None = None):
    """``AccuracyRuns`` over the first ``n`` questions in the seed's configuration (``seed.SEED_CONFIG``:
    --context-length 4096, DP attention 8 x 16 rows in lockstep, graphs for 64 and 128)."""
    if not is_int(n) or n < 1:
        raise ValueError(f"n: expected an int >= 1 (questions to run), got {n!r}")
    if n > len(questions):
        raise ValueError(f"n: expected at most the {len(questions)} questions given, got {n}")
    common = dict(SEED_CONFIG, dtype=dtype or default_dtype(), device=None)
    return AccuracyRuns(model, questions[:n], common, progress=False)


def example_diagnosis(model=None, questions=None, defects=PRE_FIX) -> StepDiagnosis:
    """Notebook 06's step (``example_batch``, graphs for 4 and 8, the seed's ``--context-length 4096``) on the
    shipped model and eval set unless given: what ``figures/bug_page_reads.png`` and ``bug_page_table.png`` show."""
    model = load_pretrained() if model is None else model
    prompts, earlier = example_batch(task.default_eval_set() if questions is None else questions)
    return diagnose_step(model, prompts, earlier=earlier, defects=defects, cuda_graph_bs=(4, 8), context_length=4096)


# ---- why 0.060 and not 0: which requests are right under the bug -------------------------------------
def row0_study(model, questions, *, max_running_requests: int, row_order: str = "append", defects=PRE_FIX,
               prefill_cache: dict | None = None, dtype: str | None = None, device=None) -> dict:
    """Run ``questions`` through the pre-fix graph engine (one engine, ``max_running_requests`` rows, graphs for
    half and all of them) and score each request against the rows it decoded in: ``accuracy.run_bench``'s
    result, whose ``row_groups`` (``only_row0``, ``first_row0``, ``rest``) are the study, as ``repro`` reads
    them. The first decode step produces the answer's second digit (the first comes from the prefill)."""
    mr = max_running_requests
    if not is_int(mr) or mr < 1:
        raise ValueError(f"max_running_requests: expected an int >= 1, got {mr!r}")
    r = run_bench(model, questions, parallel=mr, prefill_cache=prefill_cache, attention_backend="cutlass_mla",
                  defects=defects, cuda_graph_bs=(max(1, mr // 2), mr), max_running_requests=mr, row_order=row_order,
                  context_length=model.config.mla.max_position_embeddings, dtype=dtype or default_dtype(device),
                  device=device)
    return {**r, "n": r["num_questions"]}
