"""The balanced schedule's partition (``kernels.schedule``) as Triton functions: every stage-1 program of the
balanced schedule computes it from ``seq_lens`` (``batch_plan``) and walks its part (``part_requests``,
``segment``); stage 2 finds each request's partials with ``request_parts``. ``segments_kernel`` runs the walk
alone, for ``schedule.segments``. The host side (constants, sizes, the model of makespans) is ``kernels.schedule``,
which imports without Triton.
"""

from __future__ import annotations

import mla_edu.device  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)
from mla_edu.kernels import schedule

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _cost(len_b, max_pages, PAGE: tl.constexpr, OVERHEAD: tl.constexpr):
    """(tokens, pages read, cost) of requests of ``len_b`` tokens (scalars or vectors, int32; a negative length is
    0, a request longer than its table row reads the row's ``max_pages`` pages). The length is clamped to the
    row's tokens first, so ``2**31 - 1`` does not overflow the page count."""
    len_b = tl.minimum(tl.maximum(len_b, 0), max_pages * PAGE)
    n = (len_b + PAGE - 1) // PAGE
    return len_b, n, tl.where(n > 0, n + OVERHEAD, 0)


@triton.jit
def _parts_of(start, n, chunk, OVERHEAD: tl.constexpr):
    """(p_first, p_last): the parts holding a request's first and last page (``p_last < p_first`` when it has
    none), from its place on the line (its pages at ``start + OVERHEAD`` on); scalars or vectors."""
    p_first = (start + OVERHEAD) // chunk
    return p_first, tl.where(n > 0, (start + OVERHEAD + n - 1) // chunk, p_first - 1)


@triton.jit
def batch_plan(seq_lens_ptr, offs, B, max_pages, parts, PAGE: tl.constexpr, OVERHEAD: tl.constexpr,
               MIN_PAGES: tl.constexpr, MAX_PIECES: tl.constexpr):
    """The partition of the batch, for the requests ``offs`` (a vector of ``>= B`` indices, in the caller's
    layout). Returns per request (int32 vectors): ``n`` (pages), ``start`` (``W_b``), ``p_first``, ``p_last``
    (its parts; ``p_last < p_first`` for an empty request), and the scalar ``chunk``."""
    _, n, w = _cost(tl.load(seq_lens_ptr + offs, mask=offs < B, other=0), max_pages, PAGE, OVERHEAD)
    start = tl.cumsum(w, 0) - w
    chunk = tl.maximum((tl.sum(w, 0) + parts - 1) // parts, MIN_PAGES)
    if MAX_PIECES > 0:  # the piece cap (schedule.max_pieces; 0: none)
        chunk = tl.maximum(chunk, (tl.max(w, 0) + MAX_PIECES - 2) // (MAX_PIECES - 1))
    p_first, p_last = _parts_of(start, n, chunk, OVERHEAD)
    return n, start, p_first, p_last, chunk


@triton.jit
def part_requests(seq_lens_ptr, offs, B, max_pages, parts, p, PAGE: tl.constexpr, OVERHEAD: tl.constexpr,
                  MIN_PAGES: tl.constexpr, MAX_PIECES: tl.constexpr):
    """``(b_lo, b_hi, start, chunk)``: part ``p`` holds pages of requests in ``[b_lo, b_hi]`` only (walk them with
    ``segment``; b_hi < b_lo for a part past the batch's end), ``start`` is b_lo's place on the line. The vectors
    die here: the walk carries scalars only (a persistent program's registers are for its tiles)."""
    n, start, p_first, p_last, chunk = batch_plan(seq_lens_ptr, offs, B, max_pages, parts, PAGE, OVERHEAD,
                                                  MIN_PAGES, MAX_PIECES)
    live = (n > 0) & (p_first <= p) & (p_last >= p)
    b_lo = tl.min(tl.where(live, offs, 1 << 30), 0)
    return b_lo, tl.max(tl.where(live, offs, -1), 0), _pick(start, offs, b_lo), chunk


@triton.jit
def request_parts(seq_lens_ptr, offs, b, B, max_pages, parts, PAGE: tl.constexpr, OVERHEAD: tl.constexpr,
                  MIN_PAGES: tl.constexpr, MAX_PIECES: tl.constexpr):
    """``(n_b, p_first, p_last)`` of request b: its pages and the parts holding its first and last page (stage 2
    merges workspace rows ``p_first + b .. p_last + b``)."""
    n, _, p_first, p_last, _ = batch_plan(seq_lens_ptr, offs, B, max_pages, parts, PAGE, OVERHEAD, MIN_PAGES,
                                          MAX_PIECES)
    return _pick(n, offs, b), _pick(p_first, offs, b), _pick(p_last, offs, b)


@triton.jit
def _pick(vec, offs, b):
    """``vec[b]`` of a per-request vector, a scalar."""
    return tl.sum(tl.where(offs == b, vec, 0), 0)


@triton.jit
def segment(seq_lens_ptr, b, p, start, chunk, max_pages, PAGE: tl.constexpr, OVERHEAD: tl.constexpr):
    """Request b's segment in part p, b at ``start`` on the line: ``(t_start, t_end, live, flag, row, next)``,
    tokens ``[t_start, t_end)`` (perhaps none), ``live`` whether part p holds any of b's pages, ``flag`` DIRECT
    or PARTIAL, ``row`` ``p + b`` (its workspace row) and ``next`` request b + 1's place on the line."""
    len_b, n_b, w_b = _cost(tl.load(seq_lens_ptr + b), max_pages, PAGE, OVERHEAD)
    pf, pl = _parts_of(start, n_b, chunk, OVERHEAD)
    k_lo = tl.minimum(tl.maximum(p * chunk - start - OVERHEAD, 0), n_b)  # first page k with x_k >= p * chunk
    k_hi = tl.minimum(tl.maximum((p + 1) * chunk - start - OVERHEAD, 0), n_b)  # ... >= (p + 1) * chunk
    live = (n_b > 0) & (pf <= p) & (p <= pl)
    flag = tl.where(pf == pl, schedule.DIRECT, schedule.PARTIAL)
    return k_lo * PAGE, tl.minimum(k_hi * PAGE, len_b), live, flag, p + b, start + w_b  # k_hi <= n_b: in the row


@triton.jit
def segments_kernel(seq_lens_ptr, out_ptr, B, max_pages, parts, PAGE: tl.constexpr, OVERHEAD: tl.constexpr,
                    MIN_PAGES: tl.constexpr, MAX_PIECES: tl.constexpr, BLOCK_B: tl.constexpr):
    """Program p writes its segments (``SEGMENT_FIELDS``) into rows ``p + b`` of out [rows, 5]: the walk every
    stage-1 program makes, without the attention."""
    p = tl.program_id(0)
    b_lo, b_hi, start, chunk = part_requests(seq_lens_ptr, tl.arange(0, BLOCK_B), B, max_pages, parts, p, PAGE,
                                             OVERHEAD, MIN_PAGES, MAX_PIECES)
    for b in range(b_lo, b_hi + 1):
        t_start, t_end, live, flag, row, start = segment(seq_lens_ptr, b, p, start, chunk, max_pages, PAGE, OVERHEAD)
        if live:
            dst = out_ptr + row * 5
            tl.store(dst, p)
            tl.store(dst + 1, b)
            tl.store(dst + 2, t_start)
            tl.store(dst + 3, t_end)
            tl.store(dst + 4, flag)
