"""Small, runnable CUDA-graph pitfalls, each with its fix; same outcome on the emulator and a GPU.

A toy paged decode: a latent-like cache ``kv_cache [num_pages, PAGE, D]``, SGLang-style
``req_to_token``, a persistent page table ``kv_indices [MAX_BS, W]`` (filled with 1, like
SGLang's ``cuda_graph_kv_indices``) and a "decode kernel" that, per request ``b``, sums the
cached vectors of its ``seq_lens[b]`` tokens, reading page ``j`` at flat index
``b * page_table.size(1) + j`` (the row stride taken from the *size*, as sgl-kernel's cutlass
MLA wrapper does; sources in docs/sources.md).

    python -m mla_edu.graphs.scenarios [--mode auto|cuda|emulated]

prints ``device | backend | scenario | outcome`` for every scenario (the command line: ``__main__.py``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import torch

import mla_edu  # noqa: F401  (TRITON_INTERPRET before triton)
from mla_edu import kernels
from mla_edu.device import default_device
from mla_edu.graphs.capture import Graph, graph
from mla_edu.graphs.check import check, rows_label
from mla_edu.graphs.emulator import GraphCaptureError, host_tensor

PAGE = 4  # tokens per page
W = 8  # page-table width: max pages per request (max context = 32 tokens)
D = 8  # latent dim of the toy cache
MAX_BS = 4  # captured batch size
NUM_REQS = 8  # req_to_token rows
NUM_PAGES = 1 + NUM_REQS * W  # page 0 is a reserved dummy page (SGLang pads out_cache_loc with slot 0)

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except Exception:  # pragma: no cover
    HAS_TRITON = False


# ---- the toy decode kernel: torch and Triton, both with the size-derived row stride ------------
def paged_sum_torch(page_table: torch.Tensor, seq_lens: torch.Tensor, kv_cache: torch.Tensor,
                    max_tokens: int = W * PAGE) -> torch.Tensor:
    """out[b] = sum of the cached vectors of tokens t < min(seq_lens[b], max_tokens).

    Page ``j`` of request ``b`` is read at flat index ``b * page_table.size(1) + j`` from the
    table's first element: right only when the row stride equals the width. Checked: a row
    that meets an out-of-range page id (e.g. poison) comes out NaN instead of reading past
    the cache.
    """
    B, S = page_table.shape  # [B, S]; S is taken as the row stride
    extent = page_table.untyped_storage().nbytes() // page_table.element_size() - page_table.storage_offset()
    flat = page_table.as_strided((extent,), (1,))  # the table's memory from its first element
    t = torch.arange(max_tokens, device=kv_cache.device)  # [T]
    valid = t[None, :] < seq_lens[:, None].long()  # [B, T]
    idx = torch.arange(B, device=kv_cache.device)[:, None] * S + (t // PAGE)[None, :]  # [B, T]
    pages = torch.where(valid, flat[idx.clamp(max=extent - 1)].long(), 0)  # [B, T]
    bad = ((pages < 0) | (pages >= kv_cache.shape[0])).any(dim=1, keepdim=True)  # [B, 1] out-of-range id
    pages = pages.clamp(0, kv_cache.shape[0] - 1)
    tok = kv_cache[pages, (t % PAGE)[None, :].expand_as(pages)]  # [B, T, D]
    out = torch.where(valid[..., None], tok, 0.0).sum(dim=1)  # [B, D] (masked entries never count)
    return torch.where(bad, float("nan"), out)  # checked: a poisoned page id gives NaN, not a crash


if HAS_TRITON:
    @triton.jit
    def _paged_sum_kernel(table_ptr, row_stride, seq_lens_ptr, kv_ptr, out_ptr, num_pages,
                          T: tl.constexpr, PAGE_: tl.constexpr, D_: tl.constexpr):
        b = tl.program_id(0)
        t = tl.arange(0, T)  # [T]
        d = tl.arange(0, D_)  # [D]
        valid = t < tl.load(seq_lens_ptr + b)
        page = tl.load(table_ptr + b * row_stride + t // PAGE_, mask=valid, other=0)  # [T]
        ok = (page >= 0) & (page < num_pages)
        tok = tl.load(kv_ptr + (page * PAGE_ + t % PAGE_)[:, None] * D_ + d[None, :],
                      mask=(valid & ok)[:, None], other=0.0)  # [T, D]
        n_bad = tl.sum((valid & (ok == 0)).to(tl.int32), axis=0)
        acc = tl.sum(tok, axis=0)  # [D]
        tl.store(out_ptr + b * D_ + d, tl.where(n_bad > 0, float("nan"), acc))


@torch.library.custom_op("mla_edu_graphs::paged_sum", mutates_args=())
def paged_sum_triton(page_table: torch.Tensor, seq_lens: torch.Tensor, kv_cache: torch.Tensor) -> torch.Tensor:
    """Triton version of :func:`paged_sum_torch`; the launcher passes ``page_table.size(1)`` as row stride."""
    B = page_table.shape[0]
    out = torch.empty(B, kv_cache.shape[-1], dtype=kv_cache.dtype, device=kv_cache.device)
    _paged_sum_kernel[(B,)](page_table, page_table.size(1), seq_lens, kv_cache, out, kv_cache.shape[0],
                            T=W * PAGE, PAGE_=PAGE, D_=kv_cache.shape[-1])
    return out


@paged_sum_triton.register_fake
def _(page_table, seq_lens, kv_cache):
    return kv_cache.new_empty(page_table.shape[0], kv_cache.shape[-1])


def pages_read(page_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """The page id each (request b, page slot j) reads with the size-derived stride; -1 if unused. [B, W]"""
    n_pages = ((seq_lens.long() + PAGE - 1) // PAGE).clamp(max=W).tolist()
    out = torch.full((page_table.size(0), W), -1, dtype=torch.int64)
    for b, row in enumerate(kernels.pages_read(page_table, n_pages, row_stride=page_table.size(1))):
        out[b, : len(row)] = torch.tensor(row, dtype=torch.int64)
    return out


# ---- the shared state of the toy server ------------------------------------------------------
class ToyServer:
    """Persistent buffers (allocated once, at maximum size) and host helpers."""

    def __init__(self, device, seed: int = 0) -> None:
        self.device = torch.device(device)
        g = torch.Generator().manual_seed(seed)
        self.kv_cache = torch.randn(NUM_PAGES, PAGE, D, generator=g).to(self.device)  # [P, PAGE, D]
        perm = torch.randperm(NUM_PAGES - 1, generator=g)[: NUM_REQS * W] + 1  # never page 0
        pages = perm.view(NUM_REQS, W)  # pages of each request, not contiguous
        slots = pages[:, :, None] * PAGE + torch.arange(PAGE)  # [R, W, PAGE]
        self.req_to_token = slots.reshape(NUM_REQS, W * PAGE).to(torch.int32).to(self.device)  # [R, W*PAGE]
        self.kv_indices = torch.ones(MAX_BS, W, dtype=torch.int32, device=self.device)  # SGLang fills with 1
        self.seq_lens = torch.ones(MAX_BS, dtype=torch.int32, device=self.device)
        self.req_pool_indices = torch.zeros(MAX_BS, dtype=torch.int64, device=self.device)
        self.seq_lens_cpu = host_tensor(torch.ones(MAX_BS, dtype=torch.int32))  # host mirror

    def set_batch(self, reqs: list[int], lens: list[int]) -> None:
        """Copy a batch into the static buffers (the graph runner's replay_prepare)."""
        n = len(reqs)
        self.req_pool_indices[:n].copy_(torch.tensor(reqs, dtype=torch.int64))
        self.seq_lens[:n].copy_(torch.tensor(lens, dtype=torch.int32))
        self.seq_lens_cpu[:n] = torch.tensor(lens, dtype=torch.int32)

    def fill_page_table(self, table: torch.Tensor, bs: int) -> None:
        """SGLang's fill: row b gets its first ceil(len/PAGE) page ids; other entries untouched."""
        reqs = self.req_pool_indices[:bs]
        pages = self.req_to_token[reqs][:, ::PAGE] // PAGE  # [bs, W]
        n_pages = (self.seq_lens[:bs] + PAGE - 1) // PAGE  # [bs]
        need = torch.arange(table.shape[1], device=self.device)[None, :] < n_pages[:, None]
        table[:bs] = torch.where(need, pages[:, : table.shape[1]].to(table.dtype), table[:bs])

    def truth(self, reqs: list[int], lens: list[int]) -> torch.Tensor:
        """Eager float reference: gather each request's tokens through req_to_token."""
        flat = self.kv_cache.reshape(-1, D)  # [P*PAGE, D]
        return torch.stack([flat[self.req_to_token[r, :n].long()].sum(0) for r, n in zip(reqs, lens)])


# ---- scenarios ------------------------------------------------------------------------------
Batch = tuple  # (req ids, lengths)
CAPTURE_BATCH: Batch = ([0, 1, 2, 3], [1, 1, 1, 1])  # SGLang captures with seq_len fill value 1
REPLAY_BATCHES: list[Batch] = [([4, 1, 6, 3], [17, 9, 30, 5]), ([2, 7, 5, 0], [32, 13, 4, 21])]


@dataclass
class Problem:
    """A step to capture, how the host feeds it, and its eager reference."""

    name: str
    server: ToyServer
    step: Callable[[], torch.Tensor]  # captured; reads only the static buffers
    prepare: Callable[[list, list], None]  # host work before a replay: copy inputs, fill metadata
    reference: Callable[[list, list], torch.Tensor]  # eager answer for the real rows
    batches: list = field(default_factory=lambda: [CAPTURE_BATCH, *REPLAY_BATCHES])
    persistent: list = field(default_factory=list)  # scratch buffers a replay must not depend on
    safe: bool = False
    make_batch: Callable | None = None  # (generator, trial) -> (reqs, lens); default: random_batch

    def batch(self, gen: torch.Generator, trial: int):
        if trial < 0:
            return self.batches[0]
        return (self.make_batch or random_batch)(gen, trial)


def random_batch(gen: torch.Generator, trial: int):
    """A random batch between capture buckets: 1..MAX_BS distinct requests, lengths 1..W*PAGE."""
    bs = int(torch.randint(1, MAX_BS + 1, (1,), generator=gen))
    reqs = torch.randperm(NUM_REQS, generator=gen)[:bs].tolist()
    lens = torch.randint(1, W * PAGE + 1, (bs,), generator=gen).tolist()
    return reqs, lens


def _default_prepare(s: ToyServer):
    def prepare(reqs, lens):
        s.set_batch(reqs, lens)
        s.fill_page_table(s.kv_indices, len(reqs))
    return prepare


def frozen_scalar(device="cpu", fixed: bool = False) -> Problem:
    """A host int (the batch's max length, read from seq_lens_cpu) bounds the kernel's token loop."""
    s = ToyServer(device)

    def step():
        max_tokens = W * PAGE if fixed else int(s.seq_lens_cpu.max())  # host value: frozen at capture
        return paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache, max_tokens=max_tokens)

    return Problem("frozen_scalar" + ":fixed" * fixed, s, step, _default_prepare(s), s.truth,
                   persistent=[s.kv_indices], safe=fixed)


def narrow_view(device="cpu", fixed: bool = False, impl: str = "torch") -> Problem:
    """SGLang #6998: kv_indices[:bs, :width], width from capture's dummy lengths, stride from size(1)."""
    if impl not in ("torch", "triton"):
        raise ValueError(f"impl must be 'torch' or 'triton', got {impl!r}")
    s = ToyServer(device)
    kernel = paged_sum_triton if impl == "triton" else paged_sum_torch

    def step():
        width = W if fixed else math.ceil(int(s.seq_lens_cpu.max()) / PAGE)  # capture: 1 page
        return kernel(s.kv_indices[:MAX_BS, :width], s.seq_lens, s.kv_cache)

    return Problem(f"narrow_view/{impl}" + ":fixed" * fixed, s, step, _default_prepare(s), s.truth,
                   persistent=[s.kv_indices], safe=fixed)


def narrow_view_pages(device="cpu") -> tuple:
    """(intended, read), ``[MAX_BS, W]`` page ids each (-1 = unused): the first replay batch's page table
    read through the full table (row stride W) and through the captured 1-wide view (row stride 1)."""
    s = ToyServer(device)
    reqs, lens = REPLAY_BATCHES[0]
    s.set_batch(reqs, lens)
    s.fill_page_table(s.kv_indices, len(reqs))
    return pages_read(s.kv_indices[:, :W], s.seq_lens), pages_read(s.kv_indices[:, :1], s.seq_lens)


def stale_buffer(device="cpu", fixed: bool = False) -> Problem:
    """Partial sums accumulated into a buffer zeroed once, eagerly, instead of inside the graph."""
    s = ToyServer(device)
    acc = torch.zeros(MAX_BS, D, device=s.device)  # zeroed once, before capture

    def step():
        if fixed:
            acc.zero_()  # inside the graph: runs at every replay
        half = W * PAGE // 2
        lo = torch.clamp(s.seq_lens, max=half)  # tokens of split 0
        acc.add_(paged_sum_torch(s.kv_indices, lo, s.kv_cache, max_tokens=half))  # split 0
        acc.add_(paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache)
                 - paged_sum_torch(s.kv_indices, lo, s.kv_cache, max_tokens=half))  # split 1
        return acc * 1.0

    return Problem("stale_buffer" + ":fixed" * fixed, s, step, _default_prepare(s), s.truth,
                   persistent=[acc, s.kv_indices], safe=fixed)


def padded_slots(device="cpu", fixed: bool = False) -> Problem:
    """A batch of 3 padded to the captured 4: the padded row keeps last step's out_cache_loc and token.

    Last step, request 7 (row 3) wrote its new token to slot X. It finished; the allocator gave X
    (with its page) to request 0, which wrote its own tokens there. This step the padded row 3 writes request 7's
    stale token into X again, over request 0's. SGLang's graph runner pads with seq_lens 1 and
    out_cache_loc 0 (``replay_prepare``; slot 0 is a dummy no request owns).
    """
    s = ToyServer(device)
    out_cache_loc = torch.zeros(MAX_BS, dtype=torch.int64, device=s.device)
    new_kv = torch.zeros(MAX_BS, D, device=s.device)
    flat = s.kv_cache.view(-1, D)  # [P*PAGE, D]
    gen = torch.Generator().manual_seed(1)
    new_tokens = torch.randn(NUM_REQS, D, generator=gen).to(s.device)  # each request's new latent
    def locs(reqs, lens):
        return [int(s.req_to_token[r, n - 1]) for r, n in zip(reqs, lens)]  # the new token's slot

    def prepare(reqs, lens):
        bs = len(reqs)
        x = int(out_cache_loc[MAX_BS - 1])  # slot X: what row 3 wrote last step (0 = the dummy)
        if bs < MAX_BS and x != 0:  # row 3's request finished; X's page now belongs to request 0,
            page = x // PAGE  # which wrote its own tokens there
            s.req_to_token[0, :PAGE] = torch.arange(page * PAGE, page * PAGE + PAGE, dtype=torch.int32)
            flat[page * PAGE: page * PAGE + PAGE] = new_tokens[0] * 0.5
        s.set_batch(reqs, lens)
        out_cache_loc[:bs].copy_(torch.tensor(locs(reqs, lens)))
        new_kv[:bs].copy_(new_tokens[reqs])
        if bs < MAX_BS and fixed:
            s.seq_lens[bs:].fill_(1)
            out_cache_loc[bs:].zero_()
        s.fill_page_table(s.kv_indices, bs)

    def step():
        flat.index_copy_(0, out_cache_loc, new_kv)  # every captured row writes its new token
        return paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache)

    def reference(reqs, lens):
        for r, loc in zip(reqs, locs(reqs, lens)):  # eager runs the real rows only
            flat[loc] = new_tokens[r]
        return s.truth(reqs, lens)

    def make_batch(gen, trial):  # full batches of requests 4..7, then padded batches of 0..2
        bs = MAX_BS if trial % 2 == 0 else MAX_BS - 1
        pool = [4, 5, 6, 7] if bs == MAX_BS else [0, 1, 2]
        reqs = [pool[i] for i in torch.randperm(len(pool), generator=gen).tolist()]
        return reqs, torch.randint(1, W * PAGE + 1, (bs,), generator=gen).tolist()

    batches = [([0, 1, 2, 3], [1, 1, 1, 1]), ([4, 5, 6, 7], [9, 14, 3, 32]), ([0, 1, 2], [12, 7, 19])]
    return Problem("padded_slots" + ":fixed" * fixed, s, step, prepare, reference, batches=batches,
                   persistent=[new_kv, s.kv_indices], safe=fixed, make_batch=make_batch)


def static_buffers(device="cpu") -> Problem:
    """The correct pattern: buffers at max size before capture, full-width table, lengths on device."""
    s = ToyServer(device)
    ws = torch.empty(MAX_BS, D, device=s.device)  # workspace allocated once, before capture

    def step():
        torch.mul(paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache), 1.0, out=ws)
        return ws + 0.0

    return Problem("static_buffers", s, step, _default_prepare(s), s.truth, persistent=[ws, s.kv_indices],
                   safe=True)


def sync_in_capture(device="cpu") -> Problem:
    """.item() inside the captured step (to size the loop on the host)."""
    s = ToyServer(device)

    def step():
        n = int(s.seq_lens.max().item())  # device -> host: refused during capture
        return paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache, max_tokens=max(n, 1))

    return Problem("sync_in_capture", s, step, _default_prepare(s), s.truth)


def freed_workspace(device="cpu", fixed: bool = False) -> Problem:
    """A workspace allocated for the capture (here: inside it) and re-allocated at every replay.

    Like the pre-fix cutlass backend: the graph keeps writing the capture-time workspace,
    which the host dropped when it assigned a new one.
    """
    s = ToyServer(device)
    backend = {"workspace": torch.empty(MAX_BS, D, device=s.device) if fixed else None}

    def prepare(reqs, lens):
        _default_prepare(s)(reqs, lens)
        if not fixed:
            backend["workspace"] = torch.empty(MAX_BS, D, device=s.device)  # replay: a new one

    def step():
        if not fixed:
            backend["workspace"] = torch.empty(MAX_BS, D, device=s.device)  # capture: allocated here
        torch.mul(paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache), 1.0, out=backend["workspace"])
        return backend["workspace"] + 0.0

    return Problem("freed_pool_reuse" + ":fixed" * fixed, s, step, prepare, s.truth,
                   persistent=[s.kv_indices], safe=fixed)


# ---- running a scenario ---------------------------------------------------------------------
def classify(out: torch.Tensor, ref: torch.Tensor, atol: float = 1e-3) -> str:
    """'matches eager', 'wrong: rows>0' (row 0 right), 'NaN', 'wrong: all rows' or 'wrong: some rows'."""
    return rows_label(out, ref, atol=atol, rtol=1e-4)


def run_problem(build: Callable[[], Problem], mode: str = "auto") -> str:
    """Capture on the first batch, replay each later batch twice; the first divergence's label.

    A throwaway instance runs the step eagerly first (compiles Triton kernels before capture).
    """
    warm = build()
    warm.prepare(*warm.batches[0])
    try:
        warm.step()
    except GraphCaptureError:
        pass
    problem = build()
    s = problem.server
    problem.prepare(*problem.batches[0])
    g = Graph(device=s.device, mode=mode)
    try:
        with graph(g):
            out = problem.step()
    except (GraphCaptureError, RuntimeError) as e:
        if isinstance(e, GraphCaptureError) or "capturing" in str(e) or "capture" in str(e):
            return "capture refused: sync"
        raise
    for reqs, lens in problem.batches[1:]:
        problem.prepare(reqs, lens)
        saved = s.kv_cache.clone()
        ref = problem.reference(reqs, lens)
        s.kv_cache.copy_(saved)
        for rep in range(2):
            g.replay()
            label = classify(out[: len(reqs)], ref)
            if label != "matches eager":
                return label if rep == 0 else "wrong: stale state (2nd replay)"
    return "matches eager"


def freed_pool_reuse(device="cpu", mode: str = "auto", fixed: bool = False) -> str:
    """Two captures share a pool (as SGLang's batch sizes do); the first one's workspace is dropped.

    Graph 1 allocates its workspace while capturing; the host then drops it (the next batch
    size's capture replaces the attribute). Graph 2, captured into the same pool, is handed
    that memory for its output. Every replay of graph 1 writes its workspace, i.e. graph 2's
    output. Sizes are 3 MB so that the CUDA caching allocator's best fit is that block.
    """
    dev = torch.device(device)
    n = 3 * 2**20 // 4  # 3 MB of float32
    x1 = torch.full((n,), 1.0, device=dev)
    x2 = torch.full((n,), 2.0, device=dev)
    out1 = torch.zeros(1, device=dev)
    holder = {"ws": torch.empty(n, device=dev) if fixed else None}

    def step1():
        if not fixed:
            holder["ws"] = torch.empty(n, device=dev)  # allocated while capturing
        torch.mul(x1, 3.0, out=holder["ws"])  # split partials
        torch.sum(holder["ws"][:4], dim=0, keepdim=True, out=out1)  # merge

    g1 = Graph(device=dev, mode=mode)
    with graph(g1):
        step1()
    if not fixed:
        holder["ws"] = None  # the next capture replaces the attribute: freed
    g2 = Graph(device=dev, mode=mode)
    with graph(g2, pool=g1.pool()):
        out2 = x2 + 5.0  # graph 2's output, allocated while capturing
    g2.replay()
    g1.replay()  # e.g. the next step used the other batch size before out2 was read
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    ok1 = bool(out1.item() == 12.0)
    ok2 = bool((out2 == 7.0).all())
    if ok1 and ok2:
        return "matches eager"
    return "wrong: freed memory reused" if ok1 else "wrong: all rows"


# What each scenario does under a CUDA graph (the GPU log in results/ is the evidence).
EXPECTED = {
    "frozen_scalar": "wrong: all rows",
    "narrow_view/torch": "wrong: rows>0",
    "narrow_view/triton": "wrong: rows>0",
    "freed_pool_reuse": "wrong: freed memory reused",
    "stale_buffer": "wrong: stale state (2nd replay)",
    "padded_slots": "wrong: some rows",
    "sync_in_capture": "capture refused: sync",
}


# Problems for the checker: (builder(device) -> Problem); `safe` says what it must conclude.
PROBLEMS: dict[str, Callable] = {
    "frozen_scalar": lambda dev: frozen_scalar(dev),
    "frozen_scalar:fixed": lambda dev: frozen_scalar(dev, fixed=True),
    "narrow_view/torch": lambda dev: narrow_view(dev, impl="torch"),
    "narrow_view/triton": lambda dev: narrow_view(dev, impl="triton"),
    "narrow_view/torch:fixed": lambda dev: narrow_view(dev, True, "torch"),
    "narrow_view/triton:fixed": lambda dev: narrow_view(dev, True, "triton"),
    "freed_pool_reuse": lambda dev: freed_workspace(dev),  # pitfall 3, as scenario freed_pool_reuse
    "freed_pool_reuse:fixed": lambda dev: freed_workspace(dev, fixed=True),
    "stale_buffer": lambda dev: stale_buffer(dev),
    "stale_buffer:fixed": lambda dev: stale_buffer(dev, fixed=True),
    "padded_slots": lambda dev: padded_slots(dev),
    "padded_slots:fixed": lambda dev: padded_slots(dev, fixed=True),
    "static_buffers": lambda dev: static_buffers(dev),
    "sync_in_capture": lambda dev: sync_in_capture(dev),
}


def run_scenario(name: str, device="cpu", mode: str = "auto") -> str:
    """What problem ``name`` does when captured once and replayed on later batches (``run_problem``);
    pitfall 3 runs as ``freed_pool_reuse``: two captures sharing one memory pool."""
    if name not in PROBLEMS:
        raise ValueError(f"scenario: expected one of {sorted(PROBLEMS)}, got {name!r}")
    if name.startswith("freed_pool_reuse"):
        return freed_pool_reuse(device, mode, fixed=name.endswith(":fixed"))
    return run_problem(lambda: PROBLEMS[name](device), mode)


# name -> (device, mode) -> outcome, in the notebook's order
SCENARIOS: dict[str, Callable] = {name: functools.partial(run_scenario, name) for name in PROBLEMS}


def check_problem(problem: Problem, n_trials: int = 6, seed: int = 0, mode: str = "auto", poison: bool = True):
    """Run :func:`mla_edu.graphs.check` on a scenario's step over random batches."""
    s = problem.server

    def make_inputs(gen, trial):
        reqs, lens = problem.batch(gen, trial)
        return {"reqs": reqs, "lens": lens}

    return check(problem.step, make_inputs,
                 static_inputs={"seq_lens": s.seq_lens, "req_pool_indices": s.req_pool_indices},
                 prepare=lambda inp: problem.prepare(inp["reqs"], inp["lens"]),
                 reference=lambda inp: problem.reference(inp["reqs"], inp["lens"]),
                 persistent=problem.persistent, model_state=[s.kv_cache, s.req_to_token],
                 n_trials=n_trials, poison=poison, seed=seed, device=s.device, mode=mode)


def run_all(device=None, mode: str = "auto", names=None) -> list[tuple[str, str, str, str]]:
    """Rows (device, backend, scenario, outcome); the sync scenario runs last."""
    dev = torch.device(device) if device is not None else default_device()
    backend = Graph(device=dev, mode=mode).backend
    rows = []
    for name in names or SCENARIOS:
        if name.endswith("/triton") or name.endswith("/triton:fixed"):
            if not HAS_TRITON:
                rows.append((str(dev), backend, name, "skipped: no triton"))
                continue
        rows.append((str(dev), backend, name, SCENARIOS[name](dev, mode)))
    return rows


def format_table(rows) -> str:
    head = ("device", "backend", "scenario", "outcome")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(4)]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])
