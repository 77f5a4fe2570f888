"""A work-balanced split-KV schedule for ragged batches: one equal share of the batch for each SM.

The split rule of ``workspace.triton_num_kv_splits`` gives every request of a batch the same split
count, sized from the page table's width (the longest request a graph can see). In a serving batch
the lengths are ragged: a few long requests' programs then run alone while most SMs idle. FlashMLA
(at ``9edee0c``; ``docs/sources.md``) avoids this with ``get_mla_metadata``
(``csrc/kernels/get_mla_metadata.cu`` lines 8-75): one warp, on the device and so inside a CUDA graph,
cuts the batch's total KV blocks (plus a fixed overhead per request) into one near-equal share per SM
part (``payload``, line 34, at least two overheads; ``flashmla_schedule`` replays the walk); each persistent CTA
then walks its part (``csrc/kernels/splitkv_mla.cu``
lines 1019-1039), and its combine kernel merges a variable number of partials per request
(``csrc/kernels/mla_combine.cu`` lines 25-30).

Here the same partition, in closed form, so that no kernel has to run first: every stage-1 program
computes it from ``seq_lens`` (one vector of B lengths, a prefix sum: ``batch_plan``) and then walks its
own part (``part_requests``, ``segment``); stage 2 computes it again to find each request's partials.
Those are Triton functions, kept in ``kernels.partition`` and reached here by name (``schedule.segment``) at
their first use, so that this module, the host side, imports without Triton.
No host sync, no table, fixed shapes: a graph captures it and the partition follows the lengths at
every replay.

* request ``b`` has ``n_b = ceil(len_b / PAGE)`` pages (clamped to ``[0, max_pages]``) and costs
  ``w_b = n_b + FIXED_OVERHEAD_PAGES`` page-times (0 for an empty request): FlashMLA's constant, which this
  project reads as a request's q load, the ring's first fill and its partial (FlashMLA's source gives the number
  only);
* the requests' costs are laid end to end on one line, request ``b`` at ``[W_b, W_b + w_b)``: first its
  overhead, then its pages, page ``k`` at ``x = W_b + FIXED_OVERHEAD_PAGES + k``;
* part ``p`` (one persistent program per head block, ``num_parts`` of them fill the GPU once) takes the
  pages with ``x`` in ``[p * chunk, (p + 1) * chunk)``, ``chunk = ceil(sum w_b / num_parts)`` (at least
  ``MIN_PART_PAGES``; in small batches and where stage 2 merges one partial at a time, large enough that no
  request is cut into more than ``MAX_PIECES``: ``max_pieces``);
* a part pays for its pages and one overhead per request it holds. Every such overhead lies on its stretch of
  the line except, perhaps, its first request's (begun in an earlier part): no part costs more than
  ``chunk + FIXED_OVERHEAD_PAGES`` page-times, FlashMLA's bound (its ``payload``, line 34, is a part's share plus
  one overhead, and each piece pays its own, lines 44-62). Spread over the request's pages instead (page ``k``
  at ``W_b + k * w_b / n_b``), the overheads let a part cost nearly two beyond its share;
* so a long request is cut across several parts and a part holds several short requests, walked in order;
  a request whose pages all fall in one part is written to the output there, the others leave one
  partial per part, in workspace row ``p + b`` (unique: both indices grow along the line), which stage 2
  merges by log-sum-exp over parts ``[p_first(b), p_last(b)]``.

``segments`` runs the same arithmetic in a small kernel (``segments_kernel``; Triton's interpreter on CPU) and
returns every part's segments: what the tests check. ``host_segments`` returns the same rows in plain Python, checked
equal to the kernel's: what the figures draw and the kernel lab's cost fit replays.

The host side takes one ``max_pages`` for two jobs: the clamp above and the width ``num_parts`` counts on. A launch
separates them (``DecodePlan.width`` sizes the parts, ``DecodePlan.max_pages`` clamps, and a column-sliced view has
``max_pages > width``), so to mirror a launch here pass its width, and requests it holds.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from mla_edu.device import TRITON_INTERPRET, require_triton
from mla_edu.kernels.workspace import PROGRAMS_PER_SM, SPLIT_CHOICES, gpu_block_h, stage2_pages
from mla_edu.util import INT32_MAX, cdiv, check_finite, check_int

#: How ``mla_decode`` splits the KV: "splits", the same count for every request (its ``num_kv_splits``, the
#: cutlass contract); "balanced", this module's partition (impl "triton").
SCHEDULES = ("splits", "balanced")
#: Per-request fixed cost in pages, FlashMLA's ``Config::FIXED_OVERHEAD_NUM_BLOCKS``
#: (``flashmla_schedule.FIXED_OVERHEAD_NUM_BLOCKS``, 64-token blocks); read here as a request's q load, the ring's
#: first fill and its partial's write. Other values, timed on the H200: kernel_lab/results/schedule_overhead_h200.md.
FIXED_OVERHEAD_PAGES = 5
#: Fewest page-times a part holds: a small batch is not cut into crumbs whose merge costs more than their
#: balance gains.
MIN_PART_PAGES = 2
#: Most parts one request is cut across where ``max_pieces`` caps it: the split rule's largest count
#: (``workspace.SPLIT_CHOICES``); more pieces ran slower at B=1 on the H200 (results/kernel_bench_h200_schedule.md).
#: FlashMLA cuts one request of 1K, 4K and 16K tokens at h_q=128 on 132 SMs into 4, 13 and 52 pieces
#: (``flashmla_schedule.pieces_per_request``) and never caps.
MAX_PIECES = max(SPLIT_CHOICES)
#: Batches of fewer requests than this keep the piece cap at every head count (``max_pieces``).
PIECE_CAP_BATCH = 16
#: Partials a request has on average, at most, where ``few_partials`` holds: [below 64 heads, 64 heads or more].
#: Where it holds, stage 2 merges a request's partials one or two at a time (``split_kv_triton.stage2_config``); at
#: 64 heads or more that is one at a time over 512 columns, and on the H200 it lost to four at a time above 2 partials
#: a request (``kernel_lab/results/partition_ab_h200_many_uncapped.md``).
FEW_PARTIALS = (4, 2)
#: A page-time of a 16-head program as a fraction of a 32-head program's, for ``makespans`` where the balanced
#: schedule runs 16 heads a program and the split rule 32 (32 heads, ``workspace.HALF_BLOCK_BATCH``). Each side's
#: time over its modelled makespan gives 0.58-0.67 from B=64 up and 0.46 at B=16
#: (``kernel_lab/results/partition_ab_h200_h32.md``); but the scale serves the comparison with the split rule's model
#: (``prefers_balanced``), where 0.65 took the balanced schedule at one request or four of uniform length, up to
#: 1.32x slower than the rule; so it is fitted on the choice at B <= 16
#: (``kernel_lab/results/half_block_fit_h200.md``, ``python -m kernel_lab.tools.half_block_fit``).
HALF_BLOCK_PAGE_COST = 0.8
#: ``prefers_balanced`` takes the balanced schedule only where its modelled makespan, stage 2 included, is this much
#: below the split rule's. Fitted with the split count's stage 2 constants on every H200 timing of the choice
#: (``kernel_lab/results/split_model_fit_h200.md``).
BALANCED_MARGIN = 0.125
#: Fields of a row of ``segments``: its part, its request, its tokens [t_start, t_end), its flag.
SEGMENT_FIELDS = ("part", "request", "t_start", "t_end", "flag")
#: The Triton functions of ``kernels.partition``, which the kernels call as ``schedule.<name>`` (``__getattr__``).
PARTITION_FUNCTIONS = ("batch_plan", "part_requests", "request_parts", "segment", "segments_kernel")
#: ``flag`` values: the request's only part, which writes the output; one of several, which writes a
#: partial; no segment in this workspace row.
DIRECT, PARTIAL, IDLE = 1, 0, -1


def _check_sizes(**sizes) -> None:
    """TypeError/ValueError naming the first size that is not an int >= 1 (a page size, part or SM count of 0
    would make an empty schedule or divide by zero)."""
    for name, value in sizes.items():
        check_int(name, value, 1)


def makespans(lens, page_size: int, heads: int, sm_count: int, num_splits: int,
              max_pages: int | None = None, half_block_cost: float = HALF_BLOCK_PAGE_COST) -> tuple[float, float]:
    """(rule, balanced): modelled makespans in page-times (one program's time for one page) of the split rule at
    ``num_splits`` and of the balanced schedule, for requests of ``lens`` tokens (host ints): stage 1
    (``stage1_makespans``) plus stage 2 (``workspace.stage2_pages``) where it runs. The rule's stage 2 runs at
    ``num_splits`` > 1 and merges ``B * num_splits`` partial rows; the balanced schedule's always runs and merges
    its ``balanced_partials`` rows."""
    _check_sizes(page_size=page_size, heads=heads, sm_count=sm_count, num_splits=num_splits,
                 **({} if max_pages is None else {"max_pages": max_pages}))
    check_finite("half_block_cost", half_block_cost, "a page-time's cost in the balanced schedule's model")
    line = _balanced_line(lens, page_size, heads, sm_count, max_pages)
    rule, balanced = _stage1(lens, page_size, heads, sm_count, num_splits, half_block_cost, line)
    if num_splits > 1:
        rule += stage2_pages(len(lens) * num_splits, heads, sm_count, page_size)
    balanced += stage2_pages(partial_rows(line[0], line[3]), heads, sm_count, page_size)
    return rule, balanced


def stage1_makespans(lens, page_size: int, heads: int, sm_count: int, num_splits: int, max_pages: int | None = None,
                     half_block_cost: float = HALF_BLOCK_PAGE_COST) -> tuple[float, float]:
    """``makespans``' stage 1 (each program or segment also pays ``FIXED_OVERHEAD_PAGES``). The rule: its programs
    (``ceil(n_b / S)`` pages, per head block, ``pages_per_program``) handed to the GPU's program slots in launch order
    (``simulate``), so that a long request's programs launched last run alone at the end. The schedule: one part's
    share (``batch_plan``'s chunk) and one overhead, in the rule's page-times (times ``half_block_cost`` where its
    programs take half the rule's heads). The rule's term was a lower bound until the family bench (the longest
    program, or the total spread evenly over the slots), which misses that tail:
    ``kernel_lab/results/choice_fit_h200.md`` scores both on the H200's measured times."""
    _check_sizes(page_size=page_size, heads=heads, sm_count=sm_count, num_splits=num_splits,
                 **({} if max_pages is None else {"max_pages": max_pages}))
    check_finite("half_block_cost", half_block_cost, "a page-time's cost in the balanced schedule's model")
    return _stage1(lens, page_size, heads, sm_count, num_splits, half_block_cost,
                   _balanced_line(lens, page_size, heads, sm_count, max_pages))


def _stage1(lens, page_size: int, heads: int, sm_count: int, num_splits: int, half_block_cost: float,
            line: tuple) -> tuple[float, float]:
    """``stage1_makespans`` on the balanced schedule's ``line`` (``_balanced_line``), its sizes checked."""
    n, max_pages, _, chunk = line
    slots = PROGRAMS_PER_SM[gpu_block_h(heads, len(n), max_pages)] * sm_count
    rule = simulate(pages_per_program(lens, page_size, heads, sm_count, num_splits, max_pages), slots)[1]
    balanced = chunk + FIXED_OVERHEAD_PAGES
    return rule, half_block_cost * balanced if half_block(heads, len(n), max_pages) else balanced


def _balanced_line(lens, page_size: int, heads: int, sm_count: int, max_pages: int | None):
    """(pages of each request clamped to ``max_pages`` [B], ``max_pages`` (the longest request's pages where None),
    parts, ``batch_plan``'s chunk) of the balanced schedule, on the host."""
    n = [cdiv(max(int(x), 0), page_size) for x in lens]
    max_pages = max(n + [1]) if max_pages is None else max_pages
    n = [min(k, max_pages) for k in n]
    parts = num_parts(heads, sm_count, len(n), max_pages)
    return n, max_pages, parts, line_chunk(n, parts, heads)


def line_chunk(n_pages: list[int], parts: int, heads: int) -> int:
    """``batch_plan``'s chunk on the host for requests of ``n_pages`` pages (clamped) over ``parts`` parts: each
    request costs its pages plus ``FIXED_OVERHEAD_PAGES`` (empty ones nothing), with ``max_pieces``' cap."""
    return balanced_chunk([k + FIXED_OVERHEAD_PAGES for k in n_pages if k > 0], parts,
                          max_pieces(len(n_pages), heads, parts))


def partial_rows(n_pages: list[int], chunk: int) -> int:
    """Workspace rows written as partials on the line at ``chunk`` (``line_parts``): a request cut across parts
    leaves one row a part it spans, a request in one part none."""
    return sum(last - first + 1 for _, first, last in line_parts(n_pages, chunk) if last > first)


def balanced_partials(lens, page_size: int, heads: int, sm_count: int, max_pages: int | None = None) -> int:
    """Workspace rows the balanced schedule writes as partials for requests of ``lens`` tokens (host ints):
    ``partial_rows`` of its line."""
    _check_sizes(page_size=page_size, heads=heads, sm_count=sm_count,
                 **({} if max_pages is None else {"max_pages": max_pages}))
    n, _, _, chunk = _balanced_line(lens, page_size, heads, sm_count, max_pages)
    return partial_rows(n, chunk)


def half_block(heads: int, batch: int, n_pages: int) -> bool:
    """Whether the balanced schedule's programs take fewer heads than the split rule's (``workspace.gpu_block_h``:
    16 where the rule takes 32, ``workspace.HALF_BLOCK_BATCH``)."""
    return gpu_block_h(heads, batch, n_pages, balanced=True) < gpu_block_h(heads, batch, n_pages)


def balanced_chunk(w: list[int], parts: int, pieces: int) -> int:
    """``batch_plan``'s chunk on the host: the page-times a part holds, for requests costing ``w`` (pages plus the
    overhead; empty ones left out): the share of ``parts``, at least ``MIN_PART_PAGES``, and with ``pieces`` > 0
    (``max_pieces``) large enough that no request is cut into more than ``pieces``."""
    chunk = max(cdiv(sum(w), parts), MIN_PART_PAGES)
    return max(chunk, cdiv(max(w, default=0), pieces - 1)) if pieces > 0 else chunk


def few_partials(batch: int, parts: int, heads: int) -> bool:
    """Whether the balanced schedule leaves a request few partials on average: its segments number at most
    ``parts + batch - 1`` (``workspace_rows``), and "few" is at most ``FEW_PARTIALS[heads >= 64]`` a request. Stage
    2's config turns on it (``split_kv_triton.stage2_config``), and so does the piece cap (``max_pieces``)."""
    return parts + batch - 1 <= FEW_PARTIALS[heads >= 64] * batch


def max_pieces(batch: int, heads: int, parts: int) -> int:
    """The most parts the balanced schedule cuts one request across, 0 for no cap (a request is cut as the parts'
    share falls, as FlashMLA cuts it). The cap ``MAX_PIECES`` stays in batches of fewer than ``PIECE_CAP_BATCH``
    requests (more pieces ran slower at B=1) and where stage 2 merges a request's partials one at a time (64 heads
    or more with ``few_partials``: ``split_kv_triton.STAGE2_FEW_WIDE``). Measured on the H200 on one 64K-token
    request among 512-token ones, without the cap: 1.17-1.54x faster at h_q 16 and 32 (B=16-128) and at h_q 64 and
    128 (B=16, where stage 2 loads 4 partials at a time), but 0.89x at h_q=64, B=64, where the 512-column merge
    walks ~74 partials one by one (``kernel_lab/results/partition_ab_h200.md``). With 64 heads or more, where a
    request has more than 2 partials on average, stage 2 loads 4 at a time and the cap goes
    (``kernel_lab/results/partition_ab_h200_many_uncapped.md``)."""
    return MAX_PIECES if batch < PIECE_CAP_BATCH or (heads >= 64 and few_partials(batch, parts, heads)) else 0


def prefers_balanced(lens, page_size: int, heads: int, sm_count: int, num_splits: int,
                     max_pages: int | None = None, half_block_cost: float = HALF_BLOCK_PAGE_COST) -> bool:
    """Whether a batch of requests of ``lens`` tokens (host ints: an engine has them at every step,
    ``seq_lens_cpu``) is better served by the balanced schedule than by the split rule at ``num_splits``: its
    modelled makespan, both stages (``makespans``), ``BALANCED_MARGIN`` below the rule's. Scored on every H200 timing
    of the choice (``kernel_lab/results/split_model_fit_h200.md``, ``results/schedule_choice_h200.md``);
    ``half_block_cost``: ``makespans``'."""
    rule, balanced = makespans(lens, page_size, heads, sm_count, num_splits, max_pages, half_block_cost)
    return balanced < (1 - BALANCED_MARGIN) * rule


def num_parts(heads: int, sm_count: int, batch: int = 0, n_pages: int = 0) -> int:
    """Parts that fill the GPU once: its program slots (``PROGRAMS_PER_SM`` of the head block the kernel takes,
    ``gpu_block_h``) over the head blocks each part runs as (FlashMLA's ``num_sm_parts``:
    ``sm_count / h_k / ceil(h_q / 64)``, ``csrc/flash_api.cpp`` line 39 at ``9edee0c``)."""
    block_h = gpu_block_h(heads, batch, n_pages, balanced=True)
    return max(1, PROGRAMS_PER_SM[block_h] * sm_count // cdiv(heads, block_h))


def check_line_fits(batch: int, max_pages: int, parts: int, page_size: int) -> None:
    """ValueError when the balanced partition's numbers do not fit int32, where the kernels compute them: a
    request's tokens rounded up to whole pages, and the line (each request at most ``max_pages +
    FIXED_OVERHEAD_PAGES`` page-times, summed over the batch, plus a part's rounding)."""
    if (max_pages + 1) * page_size - 1 > INT32_MAX:
        raise ValueError(f"the balanced schedule: rows of {max_pages} pages of {page_size} tokens, rounded up to "
                         f"whole pages, are past int32 positions (at most {INT32_MAX}); expected a narrower table")
    line = batch * (max_pages + FIXED_OVERHEAD_PAGES) + FIXED_OVERHEAD_PAGES + parts
    if line > INT32_MAX:
        raise ValueError(f"the balanced schedule: B={batch} requests of up to {max_pages} pages make a line of "
                         f"{line} page-times, past the int32 sums its kernels compute (at most {INT32_MAX}); "
                         "expected fewer requests or a narrower table, or schedule='splits'")


def workspace_rows(batch: int, parts: int) -> int:
    """Workspace rows of the partials: row ``p + b`` for part p's segment of request b, ``p < parts``,
    ``b < batch``."""
    return parts + batch - 1


def workspace_bytes(batch: int, heads: int, d_latent: int, parts: int) -> int:
    """float32 partials ``[rows, H, d_latent]`` and their log-sum-exps ``[rows, H]``."""
    return workspace_rows(batch, parts) * heads * (d_latent + 1) * 4


def block_b(batch: int) -> int:
    """The width of the lengths vector every program loads (a power of two, at least 16)."""
    return max(16, 1 << max(batch - 1, 0).bit_length())


def plan_constexprs(batch: int, pieces: int) -> dict:
    """The compile-time parameters of ``batch_plan`` for a launch, as every kernel that computes it takes them;
    ``pieces``: ``max_pieces(batch, heads, parts)`` of the launch (stage 1 and stage 2 must agree on it)."""
    return dict(OVERHEAD=FIXED_OVERHEAD_PAGES, MIN_PAGES=MIN_PART_PAGES, MAX_PIECES=pieces, BLOCK_B=block_b(batch))


@dataclass(frozen=True)
class Segment:
    """One row of ``segments`` (``SEGMENT_FIELDS``): part ``part`` reads tokens ``[t_start, t_end)`` of request
    ``request``; ``flag`` DIRECT or PARTIAL."""

    part: int
    request: int
    t_start: int
    t_end: int
    flag: int


def segments(seq_lens, page_size: int, max_pages: int, parts: int, heads: int) -> list[Segment]:
    """Every part's segments, in workspace-row order (part by part, each part's requests in order), from the
    arithmetic the kernels run for ``heads`` query heads (``segments_kernel``: on the lengths' GPU, or in Triton's
    interpreter on CPU; the heads set the piece cap, ``max_pieces``). ``seq_lens``: int32 [B] tensor or a list."""
    _check_sizes(page_size=page_size, max_pages=max_pages, parts=parts, heads=heads)
    check_line_fits(len(seq_lens), max_pages, parts, page_size)
    require_triton("schedule.segments (the partition's arithmetic, run as a Triton kernel)")
    from mla_edu.kernels.partition import segments_kernel

    if not isinstance(seq_lens, torch.Tensor):
        seq_lens = torch.tensor(seq_lens, dtype=torch.int64)
    if seq_lens.numel() and not -2**31 <= int(seq_lens.min()) <= int(seq_lens.max()) < 2**31:
        raise ValueError(f"seq_lens: expected int32 values (the kernels' lengths), got [{int(seq_lens.min())}, "
                         f"{int(seq_lens.max())}]")
    dev = seq_lens.device if seq_lens.is_cuda or TRITON_INTERPRET else torch.device("cuda")
    b = seq_lens.numel()
    table = torch.full((workspace_rows(b, parts), len(SEGMENT_FIELDS)), IDLE, dtype=torch.int32, device=dev)
    segments_kernel[(parts,)](seq_lens.to(dev, torch.int32), table, b, max_pages, parts, PAGE=page_size,
                              **plan_constexprs(b, max_pieces(b, heads, parts)))
    return [Segment(*row) for row in table.tolist() if row[4] != IDLE]


def line_parts(n_pages: list[int], chunk: int) -> list[tuple[int, int, int]]:
    """``batch_plan``'s line on the host at ``chunk``: ``(start, p_first, p_last)`` per request of ``n_pages`` pages
    (clamped, host ints): its place ``W_b`` on the line and the parts holding its first and last page (``p_last <
    p_first`` for an empty request)."""
    out, start = [], 0
    for k in n_pages:
        first = (start + FIXED_OVERHEAD_PAGES) // chunk
        out.append((start, first, (start + FIXED_OVERHEAD_PAGES + k - 1) // chunk if k else first - 1))
        start += k + FIXED_OVERHEAD_PAGES if k else 0
    return out


def host_segments(seq_lens, page_size: int, max_pages: int, parts: int, heads: int) -> list[Segment]:
    """``segments`` in plain Python on the host, in the same order: ``batch_plan``'s chunk (``balanced_chunk``) and
    line (``line_parts``), then ``segment``'s tokens and flag for each part a request spans. No Triton and no
    kernel launch (the cost fit replays hundreds of batches); ``kernel_lab/tests/test_host_segments.py`` checks that
    it equals the kernel in Triton's interpreter row for row. ``seq_lens``: host ints (a negative length is 0, a
    request longer than its table row reads ``max_pages`` pages)."""
    _check_sizes(page_size=page_size, max_pages=max_pages, parts=parts, heads=heads)
    lens = [min(max(int(x), 0), max_pages * page_size) for x in seq_lens]  # [B] tokens each part may read
    n = [cdiv(x, page_size) for x in lens]  # [B] pages
    chunk = line_chunk(n, parts, heads)
    out = []
    for b, (x, k, (start, first, last)) in enumerate(zip(lens, n, line_parts(n, chunk))):
        for p in range(first, last + 1):  # part p takes the pages k with x_k in [p * chunk, (p + 1) * chunk)
            k_lo = min(max(p * chunk - start - FIXED_OVERHEAD_PAGES, 0), k)
            k_hi = min(max((p + 1) * chunk - start - FIXED_OVERHEAD_PAGES, 0), k)
            out.append(Segment(p, b, k_lo * page_size, min(k_hi * page_size, x), DIRECT if first == last else PARTIAL))
    return sorted(out, key=lambda s: (s.part, s.request))  # workspace-row order


#: Longest request ``lognormal_lengths`` draws (the bench's and the issue's batches reach 29K tokens).
MAX_LOGNORMAL_LEN = 32768


def lognormal_lengths(batch: int, median: int, seed: int, sigma: float = 1.0) -> list[int]:
    """Seeded ragged lengths, as a serving engine's decode batch holds: ``median * exp(sigma * z)``, z standard
    normal, rounded and clipped to ``[1, MAX_LOGNORMAL_LEN]`` (sigma 1: the longest of 64 is ~10x the median)."""
    z = torch.randn(batch, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return [min(max(1, round(median * float(torch.exp(sigma * x)))), MAX_LOGNORMAL_LEN) for x in z]


def pages_per_program(lens: list[int], page_size: int, heads: int, sm_count: int, num_splits: int,
                      max_pages: int | None = None) -> list[tuple[int, int]]:
    """Host side (``makespans``, the figures): ``(request, pages)`` of each stage-1 program of the split rule's grid
    ``(head blocks, B, splits)``, in launch order (``ceil(n_b / splits)`` pages a split; a request's pages clamped
    to ``max_pages``, the table's width)."""
    _check_sizes(page_size=page_size, heads=heads, sm_count=sm_count, num_splits=num_splits,
                 **({} if max_pages is None else {"max_pages": max_pages}))
    n_pages = [cdiv(max(x, 0), page_size) for x in lens]
    max_pages = max(n_pages + [1]) if max_pages is None else max_pages
    n_pages = [min(n, max_pages) for n in n_pages]
    hb = cdiv(heads, gpu_block_h(heads, len(lens), max_pages))
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
    _check_sizes(slots=slots)
    check_finite("overhead", overhead, "a program's fixed cost in page-times")
    free = [(0.0, s) for s in range(slots)]
    heapq.heapify(free)
    bars = []
    for req, pages in programs:
        t, s = heapq.heappop(free)
        end = t + overhead + pages
        bars.append((t, end, s, req))
        heapq.heappush(free, (end, s))
    return bars, max((e for _, e, _, _ in bars), default=0.0)


def part_timeline(lens: list[int], page_size: int, heads: int, sm_count: int, max_pages: int | None = None,
                  overhead: float = FIXED_OVERHEAD_PAGES):
    """The balanced schedule's stage 1 in the same terms as ``simulate``: part p's program of head block h runs
    on slot ``p * head blocks + h`` and walks its segments (``host_segments``) one after the other, each costing
    ``overhead + pages`` page-times. Returns ``(start, end, slot, request)`` per segment and program, and the
    makespan."""
    max_pages = max([cdiv(max(x, 0), page_size) for x in lens] + [1]) if max_pages is None else max_pages
    hb = cdiv(heads, gpu_block_h(heads, len(lens), max_pages, balanced=True))
    parts = num_parts(heads, sm_count, len(lens), max_pages)
    clock = [0.0] * parts
    bars = []
    for s in host_segments(lens, page_size, max_pages, parts, heads):
        t = clock[s.part]
        clock[s.part] = t + overhead + cdiv(s.t_end - s.t_start, page_size)
        bars += [(t, clock[s.part], s.part * hb + h, s.request) for h in range(hb)]
    return bars, max(clock, default=0.0)


def __getattr__(name: str):
    """``PARTITION_FUNCTIONS`` from ``kernels.partition``, imported at the first use (it needs Triton)."""
    if name in PARTITION_FUNCTIONS:
        from mla_edu.kernels import partition

        return getattr(partition, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
