"""Stage 1 at 64 heads a program, FlashMLA's way: two warpgroups that take turns on pairs of tiles.

Why a third Hopper kernel. ``split_kv_wgmma.stage1_wgmma_kernel`` runs its two warpgroups in lock step on
one 64-token tile: each scores 32 of its tokens (wgmma n = 32), they meet for the row max, both write P,
meet again, then each multiplies P by its 256 output columns. While both do the softmax the tensor cores
wait, and an n = 32 score product reads more shared memory per multiply-add than an n = 64 one
(``docs/kernel_essay.md``).

FlashMLA's sm90 kernel (``csrc/kernels/splitkv_mla.cu`` at ``9edee0c``, ``wg0_subroutine`` and ``wg1_subroutine``,
lines 740-943; ``docs/sources.md``) takes the tiles two at a time instead. Warpgroup 0 scores tile 0 of the
pair, warpgroup 1 tile 1, each with n = 64. The output stays split by columns (a 64 x 512 float32 accumulator
does not fit one warpgroup's registers): warpgroup 0 owns columns [0, 256), "left", warpgroup 1 [256, 512),
"right". So each needs the other's P, and the running max passes from one to the other. Here, per pair:

==============================================  ==============================================
warpgroup 0 (tile 0 of the pair)                warpgroup 1 (tile 1 of the pair)
==============================================  ==============================================
S0 = q K0^T                                     S1 = q K1^T, at the same time
m0 = new max(m, S0), scale0 = 2^(m - m0) ->
P0 = 2^(S0 - m0) to shared memory ->            <- m1 = new max(m0, S1), scale1 = 2^(m0 - m1)
O_L = O_L scale0 + P0 V0_left                   O_R = O_R scale0 + P0 V0_right, issued, then
(P0 from registers)                             <- P1 = 2^(S1 - m1) to shared memory under it
O_L = O_L scale1 + P1 V1_left                   O_R = O_R scale1 + P1 V1_right (P1 from registers)
==============================================  ==============================================

Arrows are mbarrier hand-offs through shared memory; each warpgroup's softmax overlaps the other's tensor-core work
("seesaw"). Warpgroup 1 issues P0 V0_right before it computes P1, so the tensor cores have that product while it
takes P1's exponentials (measured: ``kernel_lab/results/seesaw_ab_h200_pv0early.md``). Row sums: warpgroup 0 keeps
those of the P0s, warpgroup 1 of the P1s, added at the end. FlashMLA's warpgroup 0 instead waits for scale1 and
sends P0 scale1, and its warpgroup 1 multiplies its own P1 first; here P0 leaves as soon as it exists, so warpgroup
0 never holds it in float32 registers while it waits (the register budget below). This kernel is written from that
description, in Gluon; FlashMLA's code is CUDA/CuTe.

"new max" keeps a row's running max unless a score passes it by more than ``RESCALE_THRESHOLD`` (8, in log2
units), and only then moves it to the row's new max: FlashAttention-4's rescale threshold for 16-bit inputs
(``SoftmaxSm100.update_row_max``, ``flash_attn/cute/softmax.py``; ``docs/sources.md``). So P is at most 2^8 and,
in exact arithmetic, the sums and the log-sum-exp, taken against the same max, are unchanged; but after a request's
first tiles a max rarely moves, each scale is then exactly 1, and each warpgroup skips the multiply of its 64 x 256
float32 output (128 registers a thread, twice a pair) when every row's scale is 1 (``_rescaled``). The price is in
P's bf16 rounding: its largest entry is no longer exactly 1 (``kernel_lab/tools/stale_max_error.py``: its rms error
grows, ``kernel_lab/results/stale_max_error_cpu.md``).
Scores leave ``_scores`` unscaled and are scaled inside the exponential (S above is in log2 units). Measured:
``kernel_lab/results/seesaw_ab_h200_v19.md``, ``kernel_lab/results/seesaw_ab_h200_v20.md``.

Pages arrive by TMA in two halves per ring slot, each with its own mbarrier (FlashMLA cuts a tile into nine
64-column pieces; that was measured here and was slower, ``kernel_lab/results/seesaw_ab_h200_rejected.md``): "left"
= latent columns [0, 256), "right" = [256, 512) and the 64 rope columns. A half is reloaded with the next pair's
tile (after a segment's last pair in the balanced schedule's walk, the next segment's first) by the warpgroup that
reads it last, as soon as it is done:

* slot 0 left: warpgroup 0 only (its scores and its P0 V0_left) -> reloaded by warpgroup 0 right after
  its own P0 V0_left, so the load runs under the rest of the pair;
* slot 0 right: warpgroup 0's scores, then warpgroup 1's P0 V0_right -> reloaded by warpgroup 1;
* slot 1 right: warpgroup 1 only -> reloaded by warpgroup 1 after its P1 V1_right;
* slot 1 left: warpgroup 1's scores, then warpgroup 0's P1 V1_left -> reloaded by warpgroup 0.

Both warpgroups score a tile's left half first, the half that is reloaded earlier: slot 0's by warpgroup 0
halfway through the pair, slot 1's by warpgroup 0 right after its P1 V1_left, while slot 1's right half waits for
warpgroup 1's P1 V1_right (scoring that half first cost warpgroup 1 a wait at each pair's start:
``kernel_lab/results/seesaw_ab_h200_w1left.md``).
A pair with no tile 1 (an odd tile count) has P1 = 0, and neither warpgroup reads slot 1.

Shared memory: q_nope 64 KB, the ring 2 x 72 KB, P0 and P1 8 KB each: 224 KB of the 227 KB an SM has; q_pe
(8 KB) lives in each warpgroup's registers as the A operand of the rope scores (FlashMLA keeps one of its nine
q pieces in registers for the same reason, ``splitkv_mla.cu`` line 198). Registers: 248 a thread in each
warpgroup (two warpgroups of 128 threads: 63,488 of an SM's 65,536), no spill (``tests/test_sm90.py``).

q_nope arrives by TMA too where its rows are one 2D view (``q_descriptor``), else through registers. Warpgroup 0
issues it before the first pair's halves, in two halves with an mbarrier each, so the first score products wait for
q's left half only (``kernel_lab/results/seesaw_ab_h200_qfirst.md``); in the balanced schedule it issues the next
segment's q at the end of the current one.

Final output rows leave by TMA too, as FlashMLA stores its output (``store_o``, ``splitkv_mla.cu``): each warpgroup
writes its [64, 256] in bf16 into its half of q's buffer, then one TMA store copies the block out, where the output
is one 2D view (``q_descriptor(out)``) and q's buffer is free: with one split, and in the balanced schedule at a
part's last request when that request is whole there (a next request's q goes into that buffer under the stores).
From the wgmma's registers a warp's bf16 store covers 16 bytes in each of 8 rows, half a 32-byte sector each (our
reading of why it was slow; the TMA store measured faster: ``kernel_lab/results/seesaw_ab_h200_out_tma.md``).
Float32 partials are still stored from registers (32 bytes a row: whole sectors).

The default stage 1 at 64 heads a program on the H200 (``stage1.DEFAULT_GLUON``). Compiled for
sm_90a on any machine (``mla_edu.kernels.sm90``, ``tests/test_sm90.py``); ``tests/test_kernels_wgmma.py`` and
``tests/test_kernels_schedule.py`` run it against float64 on a Hopper GPU, as stage-1 kind "seesaw"
(``results/tests_h200.md``). Same contract, grids and outputs as ``split_kv_wgmma``'s kernels, the balanced
schedule included. How it compares with FlashMLA, and what was tried: ``docs/kernel_essay.md``.
"""

from __future__ import annotations

import mla_edu.device  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)
from mla_edu.kernels import schedule
from mla_edu.kernels import split_kv_wgmma as wg
from mla_edu.kernels.stage1.registry import CompileSpec, Stage1Impl
from mla_edu.kernels.workspace import D_LATENT, D_ROPE

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

BLOCK_H = 64  # heads per program: each warpgroup's wgmma M
BLOCK_N = 64  # tokens per tile: each warpgroup scores one tile of a pair (wgmma n = 64)
WARPS = 4  # per warpgroup: the kernel's num_warps (warpgroup 0, the default partition), the worker's
#: registers per thread in each warpgroup (the launch's maxnreg): 2 x 128 threads x 248 = 63,488 of an SM's 65,536
REGISTERS = gl.constexpr(248)
#: how far (log2 units) a score may pass a row's running max before the max moves and the output is rescaled
#: (``_new_max``): FlashAttention-4's ``rescale_threshold`` for 16-bit inputs. P = 2^(S - m) is then at most 2^8
RESCALE_THRESHOLD = gl.constexpr(8.0)

# mbarriers: TMA halves of the two ring slots, then the hand-offs between the warpgroups
LEFT0, LEFT1, RIGHT0, RIGHT1 = (gl.constexpr(i) for i in range(4))  # a slot's tile half has landed
SCALE0, SCALE1, P0_READY, P1_READY = (gl.constexpr(i) for i in range(4, 8))  # m0, scale0 / m1, scale1 / P0 / P1
Q_LEFT, Q_FREE, SUM0, SUM1 = (gl.constexpr(i) for i in range(8, 12))  # q's left half stored / q no longer read / sums
P0_FREE = gl.constexpr(12)  # warpgroup 1 is done reading P0
Q_RIGHT = gl.constexpr(13)  # q's right half stored
NUM_BARRIERS = gl.constexpr(14)
# rows of the float32 statistics buffer [6, BLOCK_H]
M0, SC0, M1, SC1, L0, L1 = (gl.constexpr(i) for i in range(6))


@gluon.jit
def _opaque_zero(x):
    """0, computed from the int32 ``x`` inside inline PTX. The pair loop takes its shared-memory operands at this
    index: the compiler then cannot hoist their ~80 wgmma descriptors per warpgroup (each slot's role is fixed,
    so they would be loop-invariant) out of the loop, where they spilled (536 bytes; 2,340 in the persistent
    variant: ``tests/test_sm90.py``)."""
    return gl.inline_asm_elementwise("mov.u32 $0, 0;", "=r,r", [x], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _row(table_ptr, b, t0, row_stride, table_reach, num_pages, PAGE: gl.constexpr):
    """The cache row of token t0 of request b (int32; a global load of its page-table entry)."""
    return (wg.page_of(table_ptr, b, t0, row_stride, table_reach, num_pages, PAGE) * PAGE + t0 % PAGE).to(gl.int32)


@gluon.jit
def _half(kv_desc, pe_desc, kv_bufs, pe_bufs, bars, SIDE: gl.constexpr, SLOT: gl.constexpr, row0, pred,
          HALF: gl.constexpr):
    """TMA of one half (SIDE 0: latent columns [0, HALF); 1: [HALF, 2 HALF) and the rope columns) of the tile at
    cache row ``row0`` (``_row``) into ring slot SLOT; its mbarrier completes when the bytes have landed. Nothing
    is issued where ``pred`` is false."""
    if SIDE == 0:
        bar = bars.index(LEFT0 + SLOT)
        mbarrier.expect(bar, kv_desc.block_type.nbytes, pred=pred)
        wg.tma_load(kv_desc, [row0, 0], bar, kv_bufs.index(SLOT).slice(0, HALF, dim=1), pred=pred)
    else:
        bar = bars.index(RIGHT0 + SLOT)
        mbarrier.expect(bar, kv_desc.block_type.nbytes + pe_desc.block_type.nbytes, pred=pred)
        wg.tma_load(kv_desc, [row0, HALF], bar, kv_bufs.index(SLOT).slice(HALF, HALF, dim=1), pred=pred)
        wg.tma_load(pe_desc, [row0, 0], bar, pe_bufs.index(SLOT), pred=pred)


@gluon.jit
def _zero_rows(kv, pe, t0, t_end, DL: gl.constexpr, DR: gl.constexpr, BLOCK_N: gl.constexpr, ROWS: gl.constexpr):
    """Rows of a ring slot at tokens >= t_end set to zero (all of them when t0 >= t_end), 64 columns at a time,
    then made visible to this warpgroup's wgmma: a page's unused rows may hold NaN, and 0 x NaN is NaN."""
    keep = (t0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, ROWS)) < t_end)[:, None]
    for c in gl.static_range(DL // DR):
        chunk = kv.slice(c * DR, DR, dim=1)  # [BLOCK_N, 64]
        chunk.store(gl.where(keep, chunk.load(ROWS), 0.0).to(kv.dtype))
    pe.store(gl.where(keep, pe.load(ROWS), 0.0).to(pe.dtype))
    fence_async_shared()
    wg.thread_barrier()


@gluon.jit
def _new_max(m, sc, qk_scale):
    """The max (log2 units) the rows of scores ``sc`` [BLOCK_H, BLOCK_N] (``_scores``: times ``qk_scale`` > 0 to
    log2 units) are exponentiated against: the running max ``m`` [BLOCK_H] where no scaled score of the row passes
    it by more than RESCALE_THRESHOLD, else the row's new max. -inf scores (past the length) leave ``m`` as it is; a
    finite score moves an -inf ``m`` (a request's first tile)."""
    top = gl.max(sc, 1) * qk_scale  # the max of the scaled scores: qk_scale > 0 (sm_scale is checked > 0)
    return gl.where(top > m + RESCALE_THRESHOLD, top, m)


@gluon.jit
def _rescaled(acc, scale, stats, SCALE_ROW: gl.constexpr, EVERY: gl.constexpr):
    """The output ``acc`` [BLOCK_H, 256] times ``scale`` [BLOCK_H] row by row, or ``acc`` itself where every row's
    scale is 1 (no row's max moved: most tiles, ``_new_max``). Each warp reads all BLOCK_H scales from row SCALE_ROW
    of the statistics buffer (stored there, and visible to this warpgroup, before the call) in a layout that gives
    each warp all of them (EVERY), so the test is one warp reduction (``redux.sync``), no barrier; every warp then
    takes the same branch."""
    if gl.max((stats.index(SCALE_ROW).load(EVERY) != 1.0).to(gl.int32), 0) != 0:
        acc = acc * gl.convert_layout(scale, gl.SliceLayout(1, acc.type.layout))[:, None]
    return acc


@gluon.jit
def _hand_over_max(stats, M_ROW: gl.constexpr, SCALE_ROW: gl.constexpr, m, scale, bar):
    """A warpgroup's new row max and its scale to the statistics buffer for the other, then one arrival on
    ``bar`` once every thread has stored its rows."""
    stats.index(M_ROW).store(m)
    stats.index(SCALE_ROW).store(scale)
    wg.thread_barrier()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _hand_over_p(p_smem, p, bar):
    """A warpgroup's P tile to shared memory for the other's wgmma (the async proxy: a fence), then one arrival
    on ``bar``."""
    p_smem.store(p)
    fence_async_shared()
    wg.thread_barrier()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _scores(q_smem, qpe, kv, pe, first, second, q_right, q_phase, LEFT_FIRST: gl.constexpr, phase, t0, t_end,
            qk_scale, DL: gl.constexpr, DR: gl.constexpr, HALF: gl.constexpr, BLOCK_H: gl.constexpr,
            BLOCK_N: gl.constexpr, S_LAYOUT: gl.constexpr, ROWS: gl.constexpr):
    """Scores q K^T [BLOCK_H, BLOCK_N], not yet scaled (-inf past t_end, in a partial last tile only), of the tile
    in ``kv``, ``pe``, whose halves complete ``phase`` of the mbarriers ``first`` and ``second``: the left half
    multiplied first (LEFT_FIRST) or the right half and the rope columns. q's right half completes ``q_phase`` of
    ``q_right`` (its left half was waited for before the pairs). A partial last tile is zeroed past t_end first.
    The caller scales them inside the exponent, 2^(S qk_scale - m): one fused multiply-add an entry."""
    if t0 + BLOCK_N > t_end:  # rows past the length: TMA cannot mask rows
        mbarrier.wait(first, phase)
        mbarrier.wait(second, phase)
        _zero_rows(kv, pe, t0, t_end, DL, DR, BLOCK_N, ROWS)
    mbarrier.wait(first, phase)  # (at once where it already completed)
    zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=S_LAYOUT)
    if LEFT_FIRST:
        acc = warpgroup_mma(q_smem.slice(0, HALF, dim=1), kv.slice(0, HALF, dim=1).permute((1, 0)), zero,
                            use_acc=False, is_async=True)
        mbarrier.wait(second, phase)
        mbarrier.wait(q_right, q_phase)  # (at once after the segment's first pair)
        acc = warpgroup_mma(q_smem.slice(HALF, HALF, dim=1), kv.slice(HALF, HALF, dim=1).permute((1, 0)), acc,
                            is_async=True)
        acc = warpgroup_mma(qpe, pe.permute((1, 0)), acc, is_async=True)
    else:
        mbarrier.wait(q_right, q_phase)
        acc = warpgroup_mma(q_smem.slice(HALF, HALF, dim=1), kv.slice(HALF, HALF, dim=1).permute((1, 0)), zero,
                            use_acc=False, is_async=True)
        acc = warpgroup_mma(qpe, pe.permute((1, 0)), acc, is_async=True)
        mbarrier.wait(second, phase)
        acc = warpgroup_mma(q_smem.slice(0, HALF, dim=1), kv.slice(0, HALF, dim=1).permute((1, 0)), acc,
                            is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    if t0 + BLOCK_N > t_end:
        pos = t0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))
        acc = gl.where((pos < t_end)[None, :], acc, float("-inf"))
    return acc


@gluon.jit
def _head_row(b, hb, H, BLOCK_H: gl.constexpr):
    """The row of request b's head ``BLOCK_H * hb`` in a [B * H, ...] view of q_nope or of the output: the TMA
    coordinate of a program's first row (int32)."""
    return (b * H + hb * BLOCK_H).to(gl.int32)


@gluon.jit
def _load_q(q_desc, q_nope_ptr, b, hb, H, stride_qn_b, stride_qn_h, q_smem, bars, DL: gl.constexpr, DR: gl.constexpr,
            Q_TMA: gl.constexpr, ROWS: gl.constexpr):
    """Warpgroup 0 puts request b's q_nope (heads [64 hb, 64 hb + 64), 64 KB) into ``q_smem``; mbarrier Q_LEFT
    completes once columns [0, DL / 2) are there, Q_RIGHT once the rest are, so the scores' first product waits
    for the first half only. Q_TMA: by TMA, one block of DL / 2 columns a half (``q_descriptor``), so the copy runs
    while the warpgroup goes on; else through registers, 64 columns at a time (few registers), then an arrival on
    each."""
    BLOCK_H: gl.constexpr = q_smem.shape[0]
    HALF: gl.constexpr = DL // 2
    if Q_TMA:
        row = _head_row(b, hb, H, BLOCK_H)  # q_nope's rows [B * H, DL]
        for side in gl.static_range(2):
            bar = bars.index(Q_LEFT if side == 0 else Q_RIGHT)
            mbarrier.expect(bar, q_desc.block_type.nbytes)
            wg.tma_load(q_desc, [row, side * HALF], bar, q_smem.slice(side * HALF, HALF, dim=1))
    else:
        offs_h = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ROWS))
        offs_d = gl.arange(0, DR, layout=gl.SliceLayout(0, ROWS))
        for c in gl.static_range(DL // DR):
            q_smem.slice(c * DR, DR, dim=1).store(
                gl.load(q_nope_ptr + b * stride_qn_b + offs_h[:, None] * stride_qn_h + c * DR + offs_d[None, :]))
        fence_async_shared()
        wg.thread_barrier()
        mbarrier.arrive(bars.index(Q_LEFT), count=1)
        mbarrier.arrive(bars.index(Q_RIGHT), count=1)


@gluon.jit
def _segment(ROLE: gl.constexpr, q_nope_ptr, q_pe_ptr, q_desc, o_desc, kv_desc, pe_desc, table_ptr, o_acc_ptr, lse_ptr,
             out_ptr, b, hb, s, t_start, t_end, g0, g1, n_seg, ahead, b_next, t_next, t_end_next, flag, row, qk_scale,
             stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_o_b, stride_o_h,
             H, row_stride, table_reach, num_pages, num_splits,
             q_bufs, kv_bufs, pe_bufs, p_bufs, stats, bars,
             PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, FINAL: gl.constexpr, SCHEDULED: gl.constexpr,
             Q_TMA: gl.constexpr, O_TMA: gl.constexpr):
    """Warpgroup ROLE's share of request b's tokens [t_start, t_end) for 64 heads, written to the output or a
    partial. ``g0``, ``g1``: tiles the program loaded into ring slots 0 and 1 before (each slot half's mbarrier
    completes once per tile loaded into it; the hand-off barriers once per pair, as slot 0); ``n_seg``: its
    segments before (Q_LEFT, Q_RIGHT and Q_FREE complete once per segment). ``b_next`` >= 0: the next segment is
    request b_next's tokens [t_next, t_end_next); this segment's last pair reloads the ring with its first pair, as
    any pair does with the next, and warpgroup 0 issues its q at the end of this one, before the output is written
    (FlashMLA issues the next request's q there, ``splitkv_mla.cu`` lines 1223-1226, but fills the ring at each
    request's start). ``ahead``: the last segment did that for this one."""
    q_smem = q_bufs.index(0)
    BLOCK_H: gl.constexpr = q_smem.shape[0]
    BLOCK_N: gl.constexpr = kv_bufs.shape[1]
    HALF: gl.constexpr = DL // 2
    S_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    O_LAYOUT: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    P_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    QPE_OPERAND: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=S_LAYOUT, k_width=2)
    ROW: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)
    ROWS: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # [rows, 64] loads and stores
    EVERY: gl.constexpr = gl.BlockedLayout([BLOCK_H // 32], [32], [4], [0])  # [BLOCK_H], all of it in each warp
    n_tiles = (gl.maximum(t_end - t_start, 0) + BLOCK_N - 1) // BLOCK_N
    n_pairs = (n_tiles + 1) // 2
    seg_phase = n_seg & 1

    # unless the last segment issued them: q (warpgroup 0), whose left half the first score products wait for,
    # then the first pair's halves, each by the warpgroup that reloads it later (free now: their last readers are
    # done, warpgroup 0 waited for P1_READY, warpgroup 1 for SCALE0, after the other's scores)
    if ROLE == 0:
        if not ahead:
            mbarrier.wait(bars.index(Q_FREE), seg_phase ^ 1)  # warpgroup 1 is done with the last segment's q
            _load_q(q_desc, q_nope_ptr, b, hb, H, stride_qn_b, stride_qn_h, q_smem, bars, DL, DR, Q_TMA,
                    ROWS)  # (a fresh barrier's phase 1 counts as complete)
    side: gl.constexpr = ROLE
    if not ahead:
        _half(kv_desc, pe_desc, kv_bufs, pe_bufs, bars, side, 0,
              _row(table_ptr, b, t_start, row_stride, table_reach, num_pages, PAGE), n_tiles > 0, HALF)
        _half(kv_desc, pe_desc, kv_bufs, pe_bufs, bars, side, 1,
              _row(table_ptr, b, t_start + BLOCK_N, row_stride, table_reach, num_pages, PAGE), n_tiles > 1, HALF)
    offs_h = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, QPE_OPERAND))
    offs_dr = gl.arange(0, DR, layout=gl.SliceLayout(0, QPE_OPERAND))
    qpe = gl.load(q_pe_ptr + b * stride_qp_b + offs_h[:, None] * stride_qp_h + offs_dr[None, :])  # [64, 64], own
    mbarrier.wait(bars.index(Q_LEFT), seg_phase)

    if SCHEDULED:  # the next segment's first two rows (-1: no such tile)
        n_next = (gl.maximum(t_end_next - t_next, 0) + BLOCK_N - 1) // BLOCK_N
        b_n = gl.maximum(b_next, 0)
        row_a = gl.where((b_next >= 0) & (n_next > 0),
                         _row(table_ptr, b_n, t_next, row_stride, table_reach, num_pages, PAGE), -1)
        row_b = gl.where((b_next >= 0) & (n_next > 1),
                         _row(table_ptr, b_n, t_next + BLOCK_N, row_stride, table_reach, num_pages, PAGE), -1)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=ROW)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=ROW)
    acc = gl.zeros([BLOCK_H, HALF], gl.float32, layout=O_LAYOUT)
    for i in range(n_pairs):
        t0 = t_start + 2 * i * BLOCK_N
        t1 = t0 + BLOCK_N
        ph = (g0 + i) & 1  # slot 0's halves and the hand-offs
        ph1 = (g1 + i) & 1  # slot 1's halves (loaded only where tile 1 exists)
        has1 = 2 * i + 1 < n_tiles
        # the next pair, which this warpgroup's reloads below fetch: this segment's, or after its last pair the next
        # segment's first. Its rows now: their page-table loads wait out their latency under this pair's work, not
        # in front of the TMA (FlashMLA reads them as early)
        nxt0 = _row(table_ptr, b, t0 + 2 * BLOCK_N, row_stride, table_reach, num_pages, PAGE)
        nxt1 = _row(table_ptr, b, t1 + 2 * BLOCK_N, row_stride, table_reach, num_pages, PAGE)
        more0 = 2 * i + 2 < n_tiles
        more1 = 2 * i + 3 < n_tiles
        if SCHEDULED:  # -1: no such tile
            last = 2 * i + 2 >= n_tiles
            nxt0 = gl.where(last, row_a, nxt0)
            nxt1 = gl.where(last, row_b, nxt1)
            more0 = gl.where(last, row_a >= 0, more0)
            more1 = gl.where(last, row_b >= 0, more1)
        z = _opaque_zero(t0)  # (see _opaque_zero)
        q_smem = q_bufs.index(z)
        kv0 = kv_bufs.index(z)
        kv1 = kv_bufs.index(1 - z)
        p0_smem = p_bufs.index(z)
        p1_smem = p_bufs.index(1 - z)
        if ROLE == 0:
            sc = _scores(q_smem, qpe, kv0, pe_bufs.index(z), bars.index(LEFT0), bars.index(RIGHT0),
                         bars.index(Q_RIGHT), seg_phase, True, ph, t0, t_end, qk_scale, DL, DR, HALF, BLOCK_H,
                         BLOCK_N, S_LAYOUT, ROWS)
            m0 = _new_max(m_i, sc, qk_scale)  # tile 0 has a token in range: m0 is finite
            scale0 = gl.exp2(m_i - m0)
            _hand_over_max(stats, M0, SC0, m0, scale0, bars.index(SCALE0))
            p = gl.exp2(sc * qk_scale - m0[:, None]).to(q_smem.dtype)  # P0 against m0
            l_i = l_i * scale0 + gl.sum(p.to(gl.float32), 1)
            mbarrier.wait(bars.index(P0_FREE), ph ^ 1)  # warpgroup 1 is done with the last pair's P0
            _hand_over_p(p0_smem, p, bars.index(P0_READY))
            acc = _rescaled(acc, scale0, stats, SC0, EVERY)
            acc = warpgroup_mma(gl.convert_layout(p, P_OPERAND), kv0.slice(0, HALF, dim=1), acc,
                                is_async=True)  # O_L += P0 V0_left, P0 from registers
            mbarrier.wait(bars.index(SCALE1), ph)
            m_i = stats.index(M1).load(ROW)
            scale1 = stats.index(SC1).load(ROW)
            acc = warpgroup_mma_wait(0, deps=[acc])
            wg.thread_barrier()  # every warp's part of it
            _half(kv_desc, pe_desc, kv_bufs, pe_bufs, bars, 0, 0, nxt0, more0, HALF)  # slot 0 left: done with it
            acc = _rescaled(acc, scale1, stats, SC1, EVERY)  # (SC1 changes after the next pair's SCALE0 only)
            l_i = l_i * scale1
            mbarrier.wait(bars.index(P1_READY), ph)
            if has1:
                acc = warpgroup_mma(p1_smem, kv1.slice(0, HALF, dim=1), acc)  # O_L += P1 V1_left
                wg.thread_barrier()
            _half(kv_desc, pe_desc, kv_bufs, pe_bufs, bars, 0, 1, nxt1, more1, HALF)  # slot 1 left: done
        else:
            if has1:
                sc = _scores(q_smem, qpe, kv1, pe_bufs.index(1 - z), bars.index(LEFT1), bars.index(RIGHT1),
                             bars.index(Q_RIGHT), seg_phase, True, ph1, t1, t_end, qk_scale, DL, DR, HALF, BLOCK_H,
                             BLOCK_N, S_LAYOUT, ROWS)
            else:  # no tile 1 (an odd count): P1 = 0, and neither warpgroup multiplies slot 1
                sc = gl.full([BLOCK_H, BLOCK_N], float("-inf"), gl.float32, layout=S_LAYOUT)
            mbarrier.wait(bars.index(SCALE0), ph)
            m0 = stats.index(M0).load(ROW)
            scale0 = stats.index(SC0).load(ROW)
            m1 = _new_max(m0, sc, qk_scale)
            scale1 = gl.exp2(m0 - m1)
            _hand_over_max(stats, M1, SC1, m1, scale1, bars.index(SCALE1))
            mbarrier.wait(bars.index(P0_READY), ph)
            acc = _rescaled(acc, scale0, stats, SC0, EVERY)  # (SC0 changes only after slot 0's reload below)
            acc = warpgroup_mma(p0_smem, kv0.slice(HALF, HALF, dim=1), acc,
                                is_async=True)  # O_R += P0 V0_right, under P1's exponentials
            p = gl.exp2(sc * qk_scale - m1[:, None]).to(q_smem.dtype)  # P1 against m1
            l_i = l_i * (scale0 * scale1) + gl.sum(p.to(gl.float32), 1)
            _hand_over_p(p1_smem, p, bars.index(P1_READY))
            p = gl.convert_layout(p, P_OPERAND)
            acc = warpgroup_mma_wait(0, deps=[acc])
            wg.thread_barrier()
            mbarrier.arrive(bars.index(P0_FREE), count=1)
            _half(kv_desc, pe_desc, kv_bufs, pe_bufs, bars, 1, 0, nxt0, more0, HALF)  # slot 0 right: done
            acc = _rescaled(acc, scale1, stats, SC1, EVERY)
            if has1:
                acc = warpgroup_mma(p, kv1.slice(HALF, HALF, dim=1), acc)  # O_R += P1 V1_right, P1 from registers
                wg.thread_barrier()
            _half(kv_desc, pe_desc, kv_bufs, pe_bufs, bars, 1, 1, nxt1, more1, HALF)  # slot 1 right: done
            m_i = m1
    # the output rows by TMA through q's buffer (``_store_final``) where they are final and no next segment's q
    # was to go there under this one's stores: with one split, or in the schedule a part's last request if it is
    # whole (measured: kernel_lab/results/seesaw_ab_h200_out_tma.md)
    if SCHEDULED:
        staged = O_TMA & (flag == schedule.DIRECT) & (b_next < 0)
    else:
        staged = O_TMA & FINAL
    if ROLE == 1:
        if not staged:
            mbarrier.arrive(bars.index(Q_FREE), count=1)  # its last scores are done
    elif b_next >= 0:  # the next segment's q, under this one's sums and stores
        mbarrier.wait(bars.index(Q_FREE), seg_phase)
        _load_q(q_desc, q_nope_ptr, b_next, hb, H, stride_qn_b, stride_qn_h, q_smem, bars, DL, DR, Q_TMA, ROWS)

    # each warpgroup's row sums to the other; both now hold the same running max
    stats.index(L0 + ROLE).store(l_i)
    wg.thread_barrier()
    mbarrier.arrive(bars.index(SUM0 + ROLE), count=1)
    mbarrier.wait(bars.index(SUM0 + 1 - ROLE), seg_phase)
    l_i = l_i + stats.index(L0 + 1 - ROLE).load(ROW)
    _write(ROLE, acc, m_i, l_i, o_acc_ptr, lse_ptr, out_ptr, b, hb, s, H, num_splits, stride_o_b, stride_o_h,
           flag, row, q_smem, o_desc, staged, DL, FINAL, SCHEDULED, S_LAYOUT, O_LAYOUT)
    if staged & (ROLE == 1):  # its store has read q's buffer, where a later segment of the part (after requests
        mbarrier.arrive(bars.index(Q_FREE), count=1)  # with no pages: not ahead) loads its q
    return g0 + n_pairs, g1 + n_tiles // 2


@gluon.jit
def _store_final(ROLE: gl.constexpr, o, out_rows, staged, q_smem, o_desc, row):
    """Warpgroup ROLE's [64, 256] of final output rows (``out_rows``; ``row``: the first's index in out's rows
    [B * H, 512]). ``staged``: through its half of q's buffer and one TMA store (FlashMLA's ``store_o``,
    ``splitkv_mla.cu``); the buffer is free: both warpgroups are done with this segment's q, and no later q is
    loaded there before the store has read it (the wait here, then Q_FREE). Else from registers."""
    if staged:
        HALF: gl.constexpr = q_smem.shape[1] // 2
        buf = q_smem.slice(ROLE * HALF, HALF, dim=1)
        buf.store(o.to(buf.dtype))
        fence_async_shared()
        wg.thread_barrier()
        tma.async_copy_shared_to_global(o_desc, [row, ROLE * HALF], buf)
        tma.store_wait(0)
        wg.thread_barrier()
    else:
        gl.store(out_rows, o.to(out_rows.dtype.element_ty))


@gluon.jit
def _write(ROLE: gl.constexpr, acc, m_i, l_i, o_acc_ptr, lse_ptr, out_ptr, b, hb, s, H, num_splits, stride_o_b,
           stride_o_h, flag, row, q_smem, o_desc, staged, DL: gl.constexpr, FINAL: gl.constexpr,
           SCHEDULED: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr):
    """``split_kv_wgmma``'s output rows and partials, for warpgroup ROLE's columns [ROLE * DL / 2, ...); the
    log-sum-exp by warpgroup 0."""
    HALF: gl.constexpr = DL // 2
    BLOCK_H: gl.constexpr = acc.shape[0]
    has = l_i > 0
    l_safe = gl.where(has, l_i, 1.0)
    o = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, O_LAYOUT))[:, None]
    lse = gl.where(has, (m_i + gl.log2(l_safe)) * 0.6931471805599453, float("-inf"))  # x ln 2: natural log
    offs_ho = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, O_LAYOUT))
    offs_do = ROLE * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, O_LAYOUT))
    offs_hs = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, S_LAYOUT))
    out_rows = out_ptr + b * stride_o_b + offs_ho[:, None] * stride_o_h + offs_do[None, :]
    if SCHEDULED:
        if flag == schedule.DIRECT:
            _store_final(ROLE, o, out_rows, staged, q_smem, o_desc, _head_row(b, hb, H, BLOCK_H))
        if flag == schedule.PARTIAL:
            gl.store(o_acc_ptr + (row * H + offs_ho)[:, None] * DL + offs_do[None, :], o)
            if ROLE == 0:
                gl.store(lse_ptr + row * H + offs_hs, lse)
    elif FINAL:
        _store_final(ROLE, o, out_rows, staged, q_smem, o_desc, _head_row(b, hb, H, BLOCK_H))
    else:
        base = (b * H + offs_ho) * num_splits + s  # row of o_acc [B, H, S, DL]
        gl.store(o_acc_ptr + base[:, None] * DL + offs_do[None, :], o)
        if ROLE == 0:
            gl.store(lse_ptr + (b * H + offs_hs) * num_splits + s, lse)


@gluon.jit
def _warpgroup(ROLE: gl.constexpr, args, PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, FINAL: gl.constexpr,
               SCHEDULED: gl.constexpr, OVERHEAD: gl.constexpr, MIN_PAGES: gl.constexpr, MAX_PIECES: gl.constexpr,
               BLOCK_B: gl.constexpr, Q_TMA: gl.constexpr, O_TMA: gl.constexpr):
    """Warpgroup ROLE's program: its split of a request (grid ``(head blocks, B, splits)``) or, SCHEDULED, the
    segments of its part of the batch (grid ``(head blocks, num_parts)``); both warpgroups walk the same
    segments (each computes the partition). ``args``: the kernel's tensors, scalars and shared memory (constexprs
    stay constexpr only as separate arguments of ``gl.warp_specialize``'s partitions)."""
    (q_nope_ptr, q_pe_ptr, q_desc, o_desc, kv_desc, pe_desc, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr, out_ptr,
     stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_o_b, stride_o_h,
     H, row_stride, max_pages, table_reach, num_pages, num_splits, sm_scale, B, num_parts,
     q_bufs, kv_bufs, pe_bufs, p_bufs, stats, bars) = args
    hb = gl.program_id(0)
    qk_scale = sm_scale * 1.4426950408889634  # exp2 in the tile loop: log2(e) folded into the scale
    if SCHEDULED:
        p = gl.program_id(1)
        b_lo, b_hi, start, chunk = schedule.part_requests(
            seq_lens_ptr, gl.arange(0, BLOCK_B, layout=wg.plan_layout(4)), B, max_pages, num_parts, p,
            PAGE, OVERHEAD, MIN_PAGES, MAX_PIECES)
        g0 = p * 0
        g1 = p * 0
        n_seg = p * 0
        ahead = p < 0  # false: the first segment loads its own q and first pair
        for b in range(b_lo, b_hi + 1):
            t_start, t_end, live, flag, row, start = schedule.segment(seq_lens_ptr, b, p, start, chunk, max_pages,
                                                                      PAGE, OVERHEAD)
            if live:
                # whether request b + 1 is this part's next segment (not where it has no pages): then its first
                # pair and q go in during this one. At b_hi, b_hi itself stands in for b + 1 (in bounds), not next
                after = gl.minimum(b + 1, b_hi)
                t_next, t_end_next, next_live, _, _, _ = schedule.segment(seq_lens_ptr, after, p, start, chunk,
                                                                          max_pages, PAGE, OVERHEAD)
                chain = next_live & (b < b_hi)
                g0, g1 = _segment(ROLE, q_nope_ptr, q_pe_ptr, q_desc, o_desc, kv_desc, pe_desc, table_ptr, o_acc_ptr,
                                  lse_ptr, out_ptr, b, hb, 0, t_start, t_end, g0, g1, n_seg, ahead,
                                  gl.where(chain, after, -1), t_next, t_end_next, flag, row, qk_scale,
                                  stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_o_b, stride_o_h,
                                  H, row_stride, table_reach, num_pages, num_splits,
                                  q_bufs, kv_bufs, pe_bufs, p_bufs, stats, bars, PAGE, DL, DR, FINAL, SCHEDULED,
                                  Q_TMA, O_TMA)
                n_seg += 1
                ahead = chain
    else:
        b = gl.program_id(1)
        s = gl.program_id(2)
        t_start, t_end = wg.split_bounds(seq_lens_ptr, b, s, max_pages, num_splits, PAGE)
        _segment(ROLE, q_nope_ptr, q_pe_ptr, q_desc, o_desc, kv_desc, pe_desc, table_ptr, o_acc_ptr, lse_ptr, out_ptr,
                 b, hb, s, t_start, t_end, 0, 0, 0, False, -1, 0, 0, 0, b, qk_scale,
                 stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_o_b, stride_o_h,
                 H, row_stride, table_reach, num_pages, num_splits,
                 q_bufs, kv_bufs, pe_bufs, p_bufs, stats, bars, PAGE, DL, DR, FINAL, SCHEDULED, Q_TMA, O_TMA)


@gluon.jit
def stage1_seesaw_kernel(
    q_nope_ptr, q_pe_ptr, cache_ptr, q_desc, o_desc, kv_desc, pe_desc, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr,
    out_ptr, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
    stride_c_page, stride_c_slot,
    stride_o_b, stride_o_h,
    H, row_stride, max_pages, table_reach, num_pages, num_splits, sm_scale, B, num_parts,
    PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, FINAL: gl.constexpr, TMA: gl.constexpr, SCHEDULED: gl.constexpr,
    OVERHEAD: gl.constexpr, MIN_PAGES: gl.constexpr, MAX_PIECES: gl.constexpr, BLOCK_B: gl.constexpr,
    Q_TMA: gl.constexpr, O_TMA: gl.constexpr,
):
    """``split_kv_wgmma.stage1_wgmma_kernel``'s arguments and grids (TMA only, ``STAGES`` 2, ``BLOCK_H`` 64,
    ``BLOCK_N`` 64; ``cache_ptr`` and its strides unused: ``kv_desc`` has blocks [BLOCK_N, DL / 2], ``pe_desc``
    [BLOCK_N, DR]; ``q_desc`` blocks [BLOCK_H, DL / 2] of q_nope's rows, read where Q_TMA; ``o_desc`` the same
    blocks of the output's rows, written where O_TMA). Shared memory and
    mbarriers here, then warpgroup 0 (this launch's 4 warps) and warpgroup 1 (a worker partition of 4 warps) run
    ``_warpgroup`` side by side (``gl.warp_specialize``)."""
    dtype: gl.constexpr = cache_ptr.dtype.element_ty
    SMEM: gl.constexpr = wg.smem_layout()
    q_bufs = gl.allocate_shared_memory(dtype, [1, BLOCK_H, DL], SMEM)
    kv_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DL], SMEM)  # slot 0: a pair's tile 0, slot 1: 1
    pe_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DR], SMEM)
    p_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_H, BLOCK_N], SMEM)  # P0 (warpgroup 0's), P1
    stats = gl.allocate_shared_memory(gl.float32, [6, BLOCK_H], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    bars = gl.allocate_shared_memory(gl.int64, [NUM_BARRIERS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BARRIERS):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()  # the barriers initialized before any use by the async proxy
    args = (q_nope_ptr, q_pe_ptr, q_desc, o_desc, kv_desc, pe_desc, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr,
            out_ptr, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_o_b, stride_o_h,
            H, row_stride, max_pages, table_reach, num_pages, num_splits, sm_scale, B, num_parts,
            q_bufs, kv_bufs, pe_bufs, p_bufs, stats, bars)
    gl.warp_specialize(  # the constexprs written out in each partition's arguments: a tuple of them loses that
        [(_warpgroup, (0, args, PAGE, DL, DR, FINAL, SCHEDULED, OVERHEAD, MIN_PAGES, MAX_PIECES, BLOCK_B, Q_TMA,
                       O_TMA)),
         (_warpgroup, (1, args, PAGE, DL, DR, FINAL, SCHEDULED, OVERHEAD, MIN_PAGES, MAX_PIECES, BLOCK_B, Q_TMA,
                       O_TMA))],
        [gl.num_warps()], [REGISTERS])


def applies(block_h: int, cache) -> bool:
    """Whether ``stage1_seesaw_kernel`` runs a launch: 64-head programs and a cache TMA reads
    (``split_kv_wgmma.tma_applies``)."""
    return block_h == BLOCK_H and wg.tma_applies(cache)


def descriptors(cache, d_latent: int):
    """(kv_desc, pe_desc): ``split_kv_wgmma.tma_descriptors`` with the latent columns in halves of
    ``d_latent / 2`` (one descriptor for both halves)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    rows = cache.view(-1, cache.size(-1))  # [num_pages * PAGE, 576]
    layout = wg.smem_layout()
    d_rope = cache.size(-1) - d_latent
    kv = TensorDescriptor(rows, [rows.size(0), d_latent], list(rows.stride()), [BLOCK_N, d_latent // 2], layout)
    pe = TensorDescriptor(rows[:, d_latent:], [rows.size(0), d_rope], list(rows.stride()), [BLOCK_N, d_rope], layout)
    return kv, pe


def q_descriptor(q_nope):
    """TMA descriptor over q_nope's rows ``[B * H, 512]`` in blocks of ``[BLOCK_H, 256]`` (q_nope [B, H, 512], its
    heads one row stride apart and its requests H of them, as a contiguous q or a slice of one is), or None
    where its layout is not that or not 16-byte aligned (a transposed q): the kernel then copies q through
    registers."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    b, h, dl = q_nope.shape
    row = q_nope.stride(1)
    if not (q_nope.stride(2) == 1 and (b == 1 or q_nope.stride(0) == h * row) and q_nope.data_ptr() % 16 == 0
            and row * q_nope.element_size() % 16 == 0):
        return None
    rows = q_nope.as_strided((b * h, dl), (row, 1))
    return TensorDescriptor(rows, [b * h, dl], [row, 1], [BLOCK_H, dl // 2], wg.smem_layout())


def launch(q_nope, q_pe, cache, seq_lens, table_flat, o_acc, lse_acc, out, sm_scale: float, row_stride: int,
           max_pages: int, num_splits: int, final: bool, num_parts: int = 0) -> None:
    """Stage 1 by ``stage1_seesaw_kernel``: ``split_kv_wgmma.launch``'s arguments and outputs, for 64-head programs
    on a cache ``applies`` to (ValueError otherwise)."""
    b, h, dl = q_nope.shape
    if h % BLOCK_H or not wg.tma_applies(cache):
        raise ValueError(f"the seesaw kernel needs heads in programs of {BLOCK_H} and a cache TMA reads "
                         f"(split_kv_wgmma.tma_applies), got {h} heads, cache {tuple(cache.shape)} with strides "
                         f"{cache.stride()}")
    grid = (h // BLOCK_H, b, num_splits) if not num_parts else (h // BLOCK_H, num_parts, 1)
    kv_desc, pe_desc = descriptors(cache, dl)
    q_desc = q_descriptor(q_nope)  # None: q through registers, and kv_desc (the same type, never read) in its place
    o_desc = q_descriptor(out) if final or num_parts else None  # the final rows by TMA store; None: from registers
    stage1_seesaw_kernel[grid](
        q_nope, q_pe, cache, q_desc or kv_desc, o_desc or kv_desc, kv_desc, pe_desc, seq_lens, table_flat, o_acc,
        lse_acc, out,
        q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1), cache.stride(0), cache.stride(1),
        out.stride(0), out.stride(1), h, row_stride, max_pages, table_flat.numel(), cache.size(0), num_splits,
        sm_scale, b, num_parts,
        **wg.constexprs(cache.size(1), dl, q_pe.size(2), final, True, BLOCK_H, num_parts > 0, b,
                        schedule.max_pieces(b, h, num_parts)),
        Q_TMA=q_desc is not None, O_TMA=o_desc is not None, num_warps=WARPS, maxnreg=REGISTERS.value)


def _launch(kind, config, call) -> None:
    launch(call.q_nope, call.q_pe, call.cache, call.seq_lens, call.table_flat, call.o_acc, call.lse_acc, call.out,
           call.sm_scale, call.row_stride, call.max_pages, call.num_splits, call.final, call.num_parts)


def _compile_spec(kind, page: int, dtype: str, final: bool, heads: int, scheduled: bool, batch: int,
                  n_pages: int) -> CompileSpec:
    import torch

    cache = wg.compile_cache(page, dtype)
    # q_nope by TMA, as a contiguous q is read, and the output rows stored by TMA, as a launch does
    consts = dict(wg.constexprs(page, D_LATENT, D_ROPE, final, True, BLOCK_H, scheduled, batch, schedule.MAX_PIECES),
                  Q_TMA=True,
                  O_TMA=final or scheduled)
    rows = q_descriptor(torch.empty(batch, heads, D_LATENT, dtype=cache.dtype))  # q_desc's type, and o_desc's
    descs = dict(zip(("kv_desc", "pe_desc", "q_desc", "o_desc"), (*descriptors(cache, D_LATENT), rows, rows)))
    return CompileSpec(stage1_seesaw_kernel, consts, descs, {"num_warps": WARPS, "maxnreg": REGISTERS.value},
                       gluon=True, per_warpgroup=True)


#: Stage-1 kind "seesaw" (``stage1.registry``): where it does not apply, the registry runs its fallback, "tma".
STAGE1 = Stage1Impl(applies=lambda kind, block_h, cache: applies(block_h, cache), launch_config=wg.STAGE1.launch_config,
                    launch=_launch, compile_spec=_compile_spec)
