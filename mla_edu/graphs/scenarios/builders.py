"""The scenarios' builders: each returns the ``Problem`` that shows one pitfall (``fixed=True``: its fix).

``freed_pool_reuse`` runs pitfall 3 as it happens in a server: two captures sharing one memory pool.
Which builder shows which pitfall, and what it must do under a graph: ``pitfalls.py``.
"""

from __future__ import annotations

import math

import torch

from mla_edu.graphs.capture import Graph, graph
from mla_edu.graphs.scenarios.problem import REPLAY_BATCHES, Problem, default_prepare
from mla_edu.graphs.scenarios.toy_decode import (D, MAX_BS, NUM_REQS, PAGE, W, ToyServer, pages_through_view,
                                                 paged_sum_torch, paged_sum_triton)


def frozen_scalar(device="cpu", fixed: bool = False) -> Problem:
    """A host int (the batch's max length, read from seq_lens_cpu) bounds the kernel's token loop."""
    s = ToyServer(device)

    def step():
        max_tokens = W * PAGE if fixed else int(s.seq_lens_cpu.max())  # host value: frozen at capture
        return paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache, max_tokens=max_tokens)

    return Problem("frozen_scalar" + ":fixed" * fixed, s, step, default_prepare(s), s.truth,
                   persistent=[s.kv_indices])


def narrow_view(device="cpu", fixed: bool = False, impl: str = "torch") -> Problem:
    """SGLang #6998: kv_indices[:bs, :width], width from capture's dummy lengths, stride from size(1)."""
    if impl not in ("torch", "triton"):
        raise ValueError(f"impl must be 'torch' or 'triton', got {impl!r}")
    s = ToyServer(device)
    kernel = paged_sum_triton if impl == "triton" else paged_sum_torch

    def step():
        width = W if fixed else math.ceil(int(s.seq_lens_cpu.max()) / PAGE)  # capture: 1 page
        return kernel(s.kv_indices[:MAX_BS, :width], s.seq_lens, s.kv_cache)

    return Problem(f"narrow_view/{impl}" + ":fixed" * fixed, s, step, default_prepare(s), s.truth,
                   persistent=[s.kv_indices])


def narrow_view_pages(device="cpu") -> tuple:
    """(intended, read), ``[MAX_BS, W]`` page ids each (-1 = unused): the first replay batch's page table
    read through the full table (row stride W) and through the captured 1-wide view (row stride 1)."""
    s = ToyServer(device)
    reqs, lens = REPLAY_BATCHES[0]
    s.set_batch(reqs, lens)
    s.fill_page_table(s.kv_indices, len(reqs))
    return pages_through_view(s.kv_indices[:, :W], s.seq_lens), pages_through_view(s.kv_indices[:, :1], s.seq_lens)


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

    return Problem("stale_buffer" + ":fixed" * fixed, s, step, default_prepare(s), s.truth,
                   persistent=[acc, s.kv_indices])


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
                   persistent=[new_kv, s.kv_indices], make_batch=make_batch)


def static_buffers(device="cpu") -> Problem:
    """The correct pattern: buffers at max size before capture, full-width table, lengths on device."""
    s = ToyServer(device)
    ws = torch.empty(MAX_BS, D, device=s.device)  # workspace allocated once, before capture

    def step():
        torch.mul(paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache), 1.0, out=ws)
        return ws + 0.0

    return Problem("static_buffers", s, step, default_prepare(s), s.truth, persistent=[ws, s.kv_indices])


def sync_in_capture(device="cpu") -> Problem:
    """.item() inside the captured step (to size the loop on the host)."""
    s = ToyServer(device)

    def step():
        n = int(s.seq_lens.max().item())  # device -> host: refused during capture
        return paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache, max_tokens=max(n, 1))

    return Problem("sync_in_capture", s, step, default_prepare(s), s.truth)


def freed_workspace(device="cpu", fixed: bool = False) -> Problem:
    """A workspace allocated for the capture (here: inside it) and re-allocated at every replay.

    Like the pre-fix cutlass backend: the graph keeps writing the capture-time workspace,
    which the host dropped when it assigned a new one.
    """
    s = ToyServer(device)
    backend = {"workspace": torch.empty(MAX_BS, D, device=s.device) if fixed else None}

    def prepare(reqs, lens):
        default_prepare(s)(reqs, lens)
        if not fixed:
            backend["workspace"] = torch.empty(MAX_BS, D, device=s.device)  # replay: a new one

    def step():
        if not fixed:
            backend["workspace"] = torch.empty(MAX_BS, D, device=s.device)  # capture: allocated here
        torch.mul(paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache), 1.0, out=backend["workspace"])
        return backend["workspace"] + 0.0

    return Problem("freed_pool_reuse" + ":fixed" * fixed, s, step, prepare, s.truth,
                   persistent=[s.kv_indices])


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
