"""A work-balanced split-KV schedule for ragged batches: near-equal work units over the SMs.

The split rule of ``workspace.triton_num_kv_splits`` gives every request of a batch the same split
count, sized from the page table's width (the longest request a graph can see). In a serving batch
the lengths are ragged: a few long requests' programs then run alone while most SMs idle. FlashMLA
(at ``9edee0c``; ``docs/sources.md``) avoids this with ``get_mla_metadata``
(``csrc/kernels/get_mla_metadata.cu`` lines 8-75): one warp, on the device and so inside a CUDA graph,
that cuts the batch's total KV blocks (plus a fixed overhead per request) into one near-equal share per
SM part (``payload``, line 34), cutting long requests into several pieces and packing short ones
together; each persistent CTA then walks its part (``csrc/kernels/splitkv_mla.cu`` lines 1019-1039) and
its combine kernel merges a variable number of partials per request (``csrc/kernels/mla_combine.cu``
lines 25-30).

Here the same idea in one small Triton kernel (``schedule_kernel``, one program: no host sync, fixed shapes,
so a graph captures it and the schedule follows the lengths at every replay; a first version in ~50 torch ops
cost ~130 us of launches on the H200), one program per work unit:

* request ``b`` has ``n_b = ceil(len_b / PAGE)`` pages (clamped to ``[0, max_pages]``);
* ``target`` units fill the GPU once (``units_target``, FlashMLA's ``num_sm_parts``); a unit holds at most
  ``chunk = max(MIN_UNIT_PAGES, ceil((sum n_b + B * FIXED_OVERHEAD_PAGES) / target))`` pages: the overhead
  term, as in FlashMLA, keeps a request that nearly fits one unit from being cut into a big piece and a crumb;
* request ``b`` is cut into ``min(MAX_PIECES, ceil(n_b / chunk))`` near-equal pieces on page boundaries;
  there are at most ``target + B`` units (``max_units``), the grid's static size; units past the real count
  are idle (flag -1) and their programs return at once;
* launch order: the pieces of the requests cut in several first, then the requests of one unit, so the
  GPU's block scheduler, which hands the next program to the first free SM, packs the short ones into the
  gaps (longest-first list scheduling, by two classes: no sort);
* a request with one piece writes its output directly (flag 1); the others write partials (flag 0),
  which the stage 2 merges by log-sum-exp over the request's ``s_b`` units.

``balanced_schedule`` runs on any device; on CPU tensors (Triton's interpreter) it is the host-side version
that the figures and ``simulate`` use (the same function, so the picture is the kernel's schedule).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

import mla_edu.device  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)
from mla_edu.device import TRITON_INTERPRET
from mla_edu.kernels.workspace import PROGRAMS_PER_SM, SPLIT_CHOICES, gpu_block_h
from mla_edu.util import cdiv

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

#: How ``mla_decode`` splits the KV: "splits", the same count for every request (its ``num_kv_splits``, the
#: cutlass contract); "balanced", this module's schedule (impl "triton").
SCHEDULES = ("splits", "balanced")
#: Per-unit fixed cost in pages (q load, the ring's first fill, the partial's write), FlashMLA's
#: ``Config::FIXED_OVERHEAD_NUM_BLOCKS`` (``csrc/kernels/config.h`` line 11 at ``9edee0c``, 64-token blocks).
FIXED_OVERHEAD_PAGES = 5
#: Fewest pages a unit holds (a unit's q load, ring fill and partial cost about FIXED_OVERHEAD_PAGES): a
#: small batch is not cut into crumbs whose merge costs more than their balance gains.
MIN_UNIT_PAGES = 2
#: Most units of one request: its partials' merge is read by few programs, and at B=1 more pieces than the
#: split rule's largest count (32, ``workspace.SPLIT_CHOICES``) ran slower on the H200 (FlashMLA, which cuts
#: one request into ~128, too: results/kernel_bench_h200_schedule.md).
MAX_PIECES = max(SPLIT_CHOICES)
#: Fields of one row of ``Schedule.units``: its request, its tokens [t_start, t_end), its flag, and the
#: workspace row of its partial (its index before the longest-first ordering: a request's rows are adjacent).
UNIT_FIELDS = ("request", "t_start", "t_end", "flag", "row")
#: ``flag`` values: the unit is its request's only one and writes the output; writes a partial; is idle.
DIRECT, PARTIAL, IDLE = 1, 0, -1


@dataclass(frozen=True)
class Schedule:
    """Device tensors a graph can capture: ``units`` int32 ``[max_units, 5]`` (``UNIT_FIELDS``), in launch
    order; ``first`` int32 ``[B + 1]``: request b's partials are workspace rows ``[first[b], first[b + 1])``."""

    units: torch.Tensor
    first: torch.Tensor


def units_target(heads: int, sm_count: int, batch: int = 0, n_pages: int = 0) -> int:
    """Units that fill the GPU once: its program slots (``PROGRAMS_PER_SM`` of the head block the kernel
    takes, ``gpu_block_h``) over the head blocks each unit runs as (FlashMLA's ``num_sm_parts``:
    ``sm_count / h_k / ceil(h_q / 64)``, ``csrc/flash_api.cpp`` line 39 at ``9edee0c``)."""
    block_h = gpu_block_h(heads, batch, n_pages)
    return max(1, PROGRAMS_PER_SM[block_h] * sm_count // cdiv(heads, block_h))


def max_units(batch: int, target: int) -> int:
    """The grid's static unit count: ``sum_b max(1, ceil(n_b / chunk)) <= sum n_b / chunk + B <= target + B``
    (``chunk >= sum n_b / target``; the cap of ``MAX_PIECES`` only lowers a count)."""
    return target + batch


def workspace_bytes(batch: int, heads: int, d_latent: int, target: int) -> int:
    """float32 partials ``[max_units, H, d_latent]`` and their log-sum-exps ``[max_units, H]``."""
    return max_units(batch, target) * heads * (d_latent + 1) * 4


@triton.jit
def schedule_kernel(seq_lens_ptr, units_ptr, first_ptr, B, max_pages, target, n_rows, PAGE: tl.constexpr,
                    OVERHEAD: tl.constexpr, MIN_PAGES: tl.constexpr, MAX_PIECES: tl.constexpr, BLOCK_B: tl.constexpr,
                    BLOCK_U: tl.constexpr):
    """One program (FlashMLA's ``get_mla_metadata`` is one warp): the batch's schedule into ``units`` [n_rows, 5]
    and ``first`` [B + 1] (see ``balanced_schedule``)."""
    offs = tl.arange(0, BLOCK_B)
    mask = offs < B
    lens = tl.maximum(tl.load(seq_lens_ptr + offs, mask=mask, other=0), 0)
    n = tl.minimum((lens + PAGE - 1) // PAGE, max_pages)  # [BLOCK_B] pages read
    lens = tl.minimum(lens, n * PAGE)  # tokens read
    chunk = tl.maximum((tl.sum(n, 0) + B * OVERHEAD + target - 1) // target, MIN_PAGES)  # pages a unit, at most
    pieces = tl.minimum(tl.maximum((n + chunk - 1) // chunk, 1), MAX_PIECES)
    per = tl.maximum((n + pieces - 1) // pieces, 1)  # pages a piece: near-equal pieces
    splits = tl.where(mask, tl.maximum((n + per - 1) // per, 1), 0)  # none empty (the cap can leave some)
    incl = tl.cumsum(splits, 0)
    tl.store(first_ptr + 1 + offs, incl, mask=mask)
    tl.store(first_ptr + offs, 0, mask=offs == 0)
    # launch order: the pieces of the requests cut in several (each near chunk pages) first, then the requests
    # of one unit (shorter): the block scheduler gives the next program to the first free SM, so the short
    # ones fill the gaps the long ones leave (longest-first list scheduling, by two classes)
    multi = splits > 1
    cut = tl.where(multi, splits, 0)
    alone = tl.where(mask & (splits == 1), 1, 0)
    base = tl.where(multi, tl.cumsum(cut, 0) - cut, tl.sum(cut, 0) + tl.cumsum(alone, 0) - alone)
    flag = tl.where(multi, 0, 1)  # PARTIAL, DIRECT
    for k in range(0, tl.max(splits, 0)):
        live = mask & (k < splits)
        row = units_ptr + (base + k) * 5
        tl.store(row, offs, mask=live)
        tl.store(row + 1, tl.minimum(k * per * PAGE, lens), mask=live)
        tl.store(row + 2, tl.minimum((k + 1) * per * PAGE, lens), mask=live)
        tl.store(row + 3, flag, mask=live)
        tl.store(row + 4, incl - splits + k, mask=live)  # the partial's workspace row: a request's are adjacent
    n_units = tl.sum(splits, 0)
    for u0 in range(0, n_rows, BLOCK_U):  # the rest idle: (0, 0, 0, IDLE, u)
        u = u0 + tl.arange(0, BLOCK_U)
        idle = (u >= n_units) & (u < n_rows)
        zero = tl.zeros([BLOCK_U], tl.int32)
        tl.store(units_ptr + u * 5, zero, mask=idle)
        tl.store(units_ptr + u * 5 + 1, zero, mask=idle)
        tl.store(units_ptr + u * 5 + 2, zero, mask=idle)
        tl.store(units_ptr + u * 5 + 3, zero - 1, mask=idle)
        tl.store(units_ptr + u * 5 + 4, u, mask=idle)


@torch.library.custom_op("mla_edu::balanced_schedule", mutates_args=("units", "first"))
def _schedule_op(seq_lens: torch.Tensor, units: torch.Tensor, first: torch.Tensor, page_size: int, max_pages: int,
                 target: int) -> None:
    b = seq_lens.numel()
    schedule_kernel[(1,)](seq_lens, units, first, b, max_pages, target, units.size(0), PAGE=page_size,
                          OVERHEAD=FIXED_OVERHEAD_PAGES, MIN_PAGES=MIN_UNIT_PAGES, MAX_PIECES=MAX_PIECES,
                          BLOCK_B=max(16, triton.next_power_of_2(b)), BLOCK_U=256)


@_schedule_op.register_fake
def _(seq_lens, units, first, page_size, max_pages, target):
    return None


def balanced_schedule(seq_lens: torch.Tensor, page_size: int, max_pages: int, target: int) -> Schedule:
    """The schedule of a batch (see the module docstring) from ``seq_lens`` int32 [B] on its own device: one
    small kernel (Triton's interpreter on CPU), no host sync, shapes from ``B`` and ``target`` only."""
    b = seq_lens.numel()
    dev = seq_lens.device if seq_lens.is_cuda or TRITON_INTERPRET else torch.device("cuda")  # CPU lengths on a GPU box
    units = torch.empty((max_units(b, target), len(UNIT_FIELDS)), dtype=torch.int32, device=dev)
    first = torch.empty(b + 1, dtype=torch.int32, device=dev)
    torch.ops.mla_edu.balanced_schedule(seq_lens.to(dev), units, first, page_size, max_pages, target)
    return Schedule(units.to(seq_lens.device), first.to(seq_lens.device))


#: Longest request ``lognormal_lengths`` draws (the bench's and the issue's batches reach 29K tokens).
MAX_LOGNORMAL_LEN = 32768


def lognormal_lengths(batch: int, median: int, seed: int, sigma: float = 1.0) -> list[int]:
    """Seeded ragged lengths, as a serving engine's decode batch holds: ``median * exp(sigma * z)``, z standard
    normal, rounded and clipped to ``[1, MAX_LOGNORMAL_LEN]`` (sigma 1: the longest of 64 is ~10x the median)."""
    z = torch.randn(batch, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return [min(max(1, round(median * float(torch.exp(sigma * x)))), MAX_LOGNORMAL_LEN) for x in z]


def pages_per_program(lens: list[int], page_size: int, heads: int, sm_count: int, max_pages: int | None = None,
                      num_splits: int | None = None) -> list[tuple[int, int]]:
    """Host side, for figures: ``(request, pages)`` of each stage-1 program in launch order, head blocks
    included; by the balanced schedule (``num_splits=None``) or by one split count for every request
    (the rule's grid ``(head blocks, B, splits)``, ``ceil(n_b / splits)`` pages a split)."""
    n_pages = [cdiv(max(x, 0), page_size) for x in lens]
    max_pages = max(n_pages + [1]) if max_pages is None else max_pages
    hb = cdiv(heads, gpu_block_h(heads, len(lens), max_pages))
    if num_splits is None:
        sched = balanced_schedule(torch.tensor(lens, dtype=torch.int32), page_size, max_pages,
                                  units_target(heads, sm_count, len(lens), max_pages))
        units = [(r, cdiv(e - s, page_size)) for r, s, e, f, _ in sched.units.tolist() if f != IDLE]
        return [u for u in units for _ in range(hb)]
    out = []
    for r, n in enumerate(n_pages):
        per = cdiv(n, num_splits)
        for s in range(num_splits):
            out += [(r, max(0, min(per, n - s * per)))] * hb
    return out


def simulate(programs: list[tuple[int, int]], slots: int, overhead: float = FIXED_OVERHEAD_PAGES):
    """Which slot runs which program when: the block scheduler's rule (the next program in launch order to
    the first slot free), a program costing ``overhead + pages`` page-times. Returns ``(start, end, slot,
    request)`` per program and the makespan in page-times."""
    free = [(0.0, s) for s in range(slots)]
    heapq.heapify(free)
    bars = []
    for req, pages in programs:
        t, s = heapq.heappop(free)
        end = t + overhead + pages
        bars.append((t, end, s, req))
        heapq.heappush(free, (end, s))
    return bars, max((e for _, e, _, _ in bars), default=0.0)
