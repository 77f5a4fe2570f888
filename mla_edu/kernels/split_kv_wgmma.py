"""Stage 1 of the split-KV decode for Hopper (sm90), written in Gluon, Triton's explicit-layout dialect.

Why a second kernel: in plain Triton (``split_kv_triton``) the score tile ``S = q K^T`` feeds the next
``tl.dot``, so Triton gives it the "all warps along M" layout. With 64 heads and 8 warps that makes both
warpgroups compute the whole 64 x 64 score tile: ``q K^T`` is done twice, and at ``h_q = 128`` the
kernel stays near a third of the matmul rate (``results/kernel_bench_h200.md``, its "tl" rows). Gluon lets us
choose the layouts.

``stage1_wgmma_kernel``, 64 heads a program, two warpgroups:

* ``S_LAYOUT`` (warps ``[4, 2]``): warpgroup ``w`` computes the scores of tokens ``[32 w, 32 w + 32)``
  for all 64 heads, so no score is computed twice. The row max crosses the two warpgroups (Gluon
  reduces through shared memory).
* ``P`` goes to shared memory, and ``O_LAYOUT`` (warps ``[4, 2]``, wgmma ``n = 256``) gives warpgroup
  ``w`` output columns ``[256 w, 256 w + 256)``: ``acc`` is 64 x 256 float32 per warpgroup, 128
  registers a thread, the split FlashMLA uses.

``stage1_swapped_kernel``, 16 or 32 heads a program, one warpgroup: a wgmma's M is 64 rows, so heads as
M would leave three quarters of it empty at 16 heads. It swaps the operands instead: tokens, then latent
columns, are M and heads are n, ``S^T = K q^T`` and ``O^T = V^T P^T``.

Both: the page tiles go to a ring of ``STAGES`` shared-memory buffers, by ``cp.async`` (any page size;
masked rows zero-filled) or by TMA (one page per tile; the last tile's rows past the length zeroed in
shared memory), so a page's unused slots, NaN perhaps, never reach the tensor cores. The tile that
feeds the scores is the same buffer that feeds ``P V``: the 512 latent columns are both K and V.

Both also run the balanced schedule (``kernels.schedule``): a persistent program per part and head block
walks its part's requests (``schedule.part_requests``, ``segment``), one segment at a time (``_segment_wgmma``,
``_segment_swapped``: q loaded again, the ring refilled; the ring's barrier phases count the program's tiles
across segments).

Same contract, grids and outputs as ``split_kv_triton``'s stage 1 (its stage 2 merges the splits); used
there on sm90 GPUs for unchecked calls whose heads fill whole programs (the plan's ``stage1``: "tma" at 16 and
32 heads a program by default, "seesaw", ``split_kv_seesaw``, at 64: ``split_kv_triton.plan_stage1``). No CPU
interpreter for Gluon: on CPU, ``mla_edu.kernels.sm90`` compiles them for sm_90a and shows what the compiler made;
the tests against float64 run on a Hopper GPU.
"""

from __future__ import annotations

import mla_edu.device  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)
from mla_edu.kernels import schedule
from mla_edu.kernels.contract import GLUON_KINDS, LaunchConfig
from mla_edu.kernels.stage1.registry import CompileSpec, Stage1Impl
from mla_edu.kernels.workspace import D_LATENT, D_ROPE, gpu_block_h

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    async_copy, fence_async_shared, mbarrier, tma, warpgroup_mma)

# Gluon is experimental and renames things between Triton releases; these names are the one Gluon op each,
# under the name of the installed release: a CTA-wide barrier (``gl.thread_barrier`` in 3.6, the H200's;
# ``gl.barrier`` from 3.7, the CPU lock's), and the cp.async and TMA loads (``async_copy_global_to_shared``
# up to 3.7, ``async_load`` from 3.9, where the old names raise).
thread_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
cp_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

WGMMA_KINDS = GLUON_KINDS[:2]  # the kinds ``launch`` takes ("seesaw" is ``split_kv_seesaw``'s)
BLOCK_H = 64  # heads per program: one wgmma M of 64 rows per warpgroup
BLOCK_N = 64  # tokens per tile
STAGES = 2  # page tiles in flight: q (72 KB) + 2 tiles (144 KB) + P (8 KB) = 224 KB of shared memory
NUM_WARPS = 8  # two warpgroups
SWAPPED_BLOCK_H = (16, 32)  # heads per program of stage1_swapped_kernel: the wgmma's n
SWAPPED_WARPS = 4  # one warpgroup


@gluon.constexpr_function
def _load_layouts(warps):
    """(LOAD_KV, LOAD_PE): 16-byte row vectors for the global loads of 512- and 64-wide rows."""
    return (gl.BlockedLayout([1, 8], [1, 32], [warps, 1], [1, 0]),
            gl.BlockedLayout([1, 8], [4, 8], [warps, 1], [1, 0]))


@gluon.constexpr_function
def smem_layout():
    """128-byte swizzled shared memory, as the wgmma and TMA read it."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)


@gluon.constexpr_function
def _layouts(BLOCK_N, DL):
    """(S_LAYOUT, O_LAYOUT, LOAD_KV, LOAD_PE, SMEM) of ``stage1_wgmma_kernel``: scores and output with warps
    [4, 2] (see the module docstring)."""
    return (gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, BLOCK_N // 2, 16]),
            gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, DL // 2, 16]),
            *_load_layouts(8), smem_layout())


@gluon.constexpr_function
def _swapped_layouts(BLOCK_H):
    """``_layouts``' five for ``stage1_swapped_kernel``: one warpgroup, heads as the wgmma's n, the same layout
    (T_LAYOUT) for both transposed products (scores ``S^T`` [tokens, heads] and output ``O^T`` [512, heads])."""
    t_layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_H, 16])
    return (t_layout, t_layout, *_load_layouts(4), smem_layout())


@gluon.constexpr_function
def plan_layout(warps):
    """The batch's lengths, one vector across the program (``schedule.batch_plan``)."""
    return gl.BlockedLayout([1], [32], [warps], [0])


@gluon.jit
def split_bounds(seq_lens_ptr, b, s, max_pages, num_splits, PAGE: gl.constexpr):
    """Tokens [t_start, t_end) of split s of request b (int32 positions)."""
    seq_len = gl.minimum(gl.load(seq_lens_ptr + b), max_pages * PAGE)  # first: 2**31 - 1 + PAGE overflows
    n_pages = (seq_len + PAGE - 1) // PAGE
    seq_len = gl.minimum(seq_len, n_pages * PAGE)
    per_split = (n_pages + num_splits - 1) // num_splits
    return s * per_split * PAGE, gl.minimum((s + 1) * per_split * PAGE, seq_len)


@gluon.jit
def _load_q(q_nope_ptr, q_pe_ptr, b, hb, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, q_smem, qpe_smem,
            BLOCK_H: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, LOAD_KV: gl.constexpr,
            LOAD_PE: gl.constexpr):
    """q of this head block into shared memory: the A operand of every score wgmma."""
    offs_h = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, LOAD_KV))
    offs_dl = gl.arange(0, DL, layout=gl.SliceLayout(0, LOAD_KV))
    q_smem.store(gl.load(q_nope_ptr + b * stride_qn_b + offs_h[:, None] * stride_qn_h + offs_dl[None, :]))
    offs_hp = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, LOAD_PE))
    offs_dr = gl.arange(0, DR, layout=gl.SliceLayout(0, LOAD_PE))
    qpe_smem.store(gl.load(q_pe_ptr + b * stride_qp_b + offs_hp[:, None] * stride_qp_h + offs_dr[None, :]))


@gluon.jit
def page_of(table_ptr, b, t0, row_stride, table_reach, num_pages, PAGE: gl.constexpr):
    """Page id of token t0 (a position or a tensor of them) of request b: the table entry, clamped into the
    storage and [0, num_pages), so every load is in bounds."""
    page = gl.load(table_ptr + gl.minimum(b * row_stride + t0 // PAGE, table_reach - 1)).to(gl.int64)
    return gl.minimum(gl.maximum(page, 0), num_pages - 1)


@gluon.jit
def _issue_tma(kv_desc, pe_desc, kv_buf, pe_buf, bar, table_ptr, b, t0, pred, row_stride, table_reach, num_pages,
               PAGE: gl.constexpr):
    """TMA of the tile at token t0 of request b (inside one page) into one ring slot; ``bar`` completes when
    its bytes have landed. Nothing is issued where ``pred`` is false (a tile past the split's end)."""
    row0 = (page_of(table_ptr, b, t0, row_stride, table_reach, num_pages, PAGE) * PAGE + t0 % PAGE).to(gl.int32)
    mbarrier.expect(bar, kv_desc.block_type.nbytes + pe_desc.block_type.nbytes, pred=pred)
    tma_load(kv_desc, [row0, 0], bar, kv_buf, pred=pred)
    tma_load(pe_desc, [row0, 0], bar, pe_buf, pred=pred)


@gluon.jit
def _issue_tile(kv_buf, pe_buf, cache_ptr, table_ptr, b, t0, t_end, row_stride, table_reach, num_pages,
                stride_c_page, stride_c_slot,
                PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_N: gl.constexpr,
                LOAD_KV: gl.constexpr, LOAD_PE: gl.constexpr):
    """cp.async of tokens [t0, t0 + BLOCK_N) of request b into one ring slot; rows >= t_end are zero-filled."""
    pos = t0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LOAD_KV))  # [BLOCK_N]
    ok = pos < t_end
    page = page_of(table_ptr, b, pos, row_stride, table_reach, num_pages, PAGE)  # [BLOCK_N]
    row = page * stride_c_page + (pos % PAGE).to(gl.int64) * stride_c_slot  # [BLOCK_N] offset of each token's row
    offs_dl = gl.arange(0, DL, layout=gl.SliceLayout(0, LOAD_KV))
    cp_async_load(kv_buf, cache_ptr + row[:, None] + offs_dl[None, :], mask=ok[:, None])
    row_pe = gl.convert_layout(row, gl.SliceLayout(1, LOAD_PE))
    ok_pe = gl.convert_layout(ok, gl.SliceLayout(1, LOAD_PE))
    offs_dr = gl.arange(0, DR, layout=gl.SliceLayout(0, LOAD_PE))
    cp_async_load(pe_buf, cache_ptr + DL + row_pe[:, None] + offs_dr[None, :], mask=ok_pe[:, None])


@gluon.jit
def _initial_state(BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr, DL: gl.constexpr, S_LAYOUT: gl.constexpr,
                   O_LAYOUT: gl.constexpr):
    """Running max (-inf), row-sum tile and output accumulator (zeros), and the tile's token offsets."""
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(1, S_LAYOUT))
    l_tile = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=S_LAYOUT)
    acc = gl.zeros([BLOCK_H, DL], gl.float32, layout=O_LAYOUT)
    return m_i, l_tile, acc, gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))


@gluon.jit
def _attend_tile(q_smem, qpe_smem, kv, pe, p_smem, m_i, l_tile, acc, pos, t_end, qk_scale,
                 S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr):
    """One tile of online softmax: scores (each warpgroup its 32 tokens), P to shared memory, P V (each
    warpgroup its 256 columns). kv [BLOCK_N, DL] and pe [BLOCK_N, DR] are the tile in shared memory."""
    s_zero = gl.zeros(l_tile.shape, gl.float32, layout=S_LAYOUT)
    sc = warpgroup_mma(q_smem, kv.permute((1, 0)), s_zero, use_acc=False)  # [BLOCK_H, BLOCK_N]
    sc = warpgroup_mma(qpe_smem, pe.permute((1, 0)), sc)
    sc = gl.where((pos < t_end)[None, :], sc * qk_scale, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(sc, 1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(sc - m_new[:, None])
    l_tile = l_tile * alpha[:, None] + p  # row sums kept as a tile, reduced once at the end
    p_smem.store(p.to(p_smem.dtype))
    fence_async_shared()
    thread_barrier()  # P's two halves written before either warpgroup reads it
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT))[:, None]
    acc = warpgroup_mma(p_smem, kv, acc)  # [BLOCK_H, DL]: warpgroup w its 256 columns
    return m_new, l_tile, acc


@gluon.jit
def _write(acc, m_i, l_tile, o_acc_ptr, lse_ptr, out_ptr, b, hb, s, H, num_splits, stride_o_b, stride_o_h, flag,
           row, BLOCK_H: gl.constexpr, DL: gl.constexpr, FINAL: gl.constexpr, SCHEDULED: gl.constexpr,
           S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr):
    """Normalized output (FINAL, or a segment flagged DIRECT: into out) or the split's partial output and
    log-sum-exp (into o_acc, lse: row ``(b * H + h) * num_splits + s``, or a segment flagged PARTIAL its row
    ``row * H + h``)."""
    l_i = gl.sum(l_tile, 1)
    has = l_i > 0
    l_safe = gl.where(has, l_i, 1.0)
    o = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, O_LAYOUT))[:, None]
    lse = gl.where(has, (m_i + gl.log2(l_safe)) * 0.6931471805599453, float("-inf"))  # x ln 2: natural log
    offs_ho = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, O_LAYOUT))
    offs_do = gl.arange(0, DL, layout=gl.SliceLayout(0, O_LAYOUT))
    offs_hs = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, S_LAYOUT))
    out_rows = out_ptr + b * stride_o_b + offs_ho[:, None] * stride_o_h + offs_do[None, :]
    if SCHEDULED:
        if flag == schedule.DIRECT:
            gl.store(out_rows, o.to(out_ptr.dtype.element_ty))
        if flag == schedule.PARTIAL:
            gl.store(o_acc_ptr + (row * H + offs_ho)[:, None] * DL + offs_do[None, :], o)
            gl.store(lse_ptr + row * H + offs_hs, lse)
    elif FINAL:
        gl.store(out_rows, o.to(out_ptr.dtype.element_ty))
    else:
        base = (b * H + offs_ho) * num_splits + s  # row of o_acc [B, H, S, DL]
        gl.store(o_acc_ptr + base[:, None] * DL + offs_do[None, :], o)
        gl.store(lse_ptr + (b * H + offs_hs) * num_splits + s, lse)


@gluon.jit
def _issue(j, g, kv_bufs, pe_bufs, bars, kv_desc, pe_desc, cache_ptr, table_ptr, b, t_start, t_end, n_tiles,
           row_stride, table_reach, num_pages, stride_c_page, stride_c_slot,
           PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
           TMA: gl.constexpr, LOAD_KV: gl.constexpr, LOAD_PE: gl.constexpr):
    """Start loading tile j of the segment into ring slot (g + j) % STAGES, g the program's tiles before this
    segment (by TMA: nothing past the last tile)."""
    slot = (g + j) % STAGES
    if TMA:
        _issue_tma(kv_desc, pe_desc, kv_bufs.index(slot), pe_bufs.index(slot), bars.index(slot), table_ptr, b,
                   t_start + j * BLOCK_N, j < n_tiles, row_stride, table_reach, num_pages, PAGE)
    else:
        _issue_tile(kv_bufs.index(slot), pe_bufs.index(slot), cache_ptr, table_ptr, b, t_start + j * BLOCK_N, t_end,
                    row_stride, table_reach, num_pages, stride_c_page, stride_c_slot,
                    PAGE, DL, DR, BLOCK_N, LOAD_KV, LOAD_PE)
        async_copy.commit_group()


@gluon.jit
def _wait(j, g, kv_bufs, pe_bufs, bars, t0, t_end, DL: gl.constexpr, DR: gl.constexpr, BLOCK_N: gl.constexpr,
          STAGES: gl.constexpr, TMA: gl.constexpr, LOAD_PE: gl.constexpr):
    """Wait until tile j (tokens from t0) is in its slot for every thread. By TMA (the slot's barrier completes
    once per tile the program loads into it: phase ``((g + j) // STAGES) & 1``), the last tile's rows past the
    length are then zeroed in shared memory, 64 columns (one 128-byte swizzle span) at a time."""
    if TMA:
        slot = (g + j) % STAGES
        mbarrier.wait(bars.index(slot), phase=((g + j) // STAGES) & 1)
        if t0 + BLOCK_N > t_end:
            kv = kv_bufs.index(slot)
            pe = pe_bufs.index(slot)
            keep = (t0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LOAD_PE)) < t_end)[:, None]
            for c in gl.static_range(DL // DR):
                chunk = kv.slice(c * DR, DR, dim=1)  # [BLOCK_N, 64]
                chunk.store(gl.where(keep, chunk.load(LOAD_PE), 0.0).to(kv.dtype))
            pe.store(gl.where(keep, pe.load(LOAD_PE), 0.0).to(pe.dtype))
            fence_async_shared()
            thread_barrier()
    else:
        async_copy.wait_group(STAGES - 1)  # this thread's copies of tile j have landed
        fence_async_shared()
        thread_barrier()  # ... and every thread's


@gluon.jit
def _alloc(cache_ptr, BLOCK_H: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_N: gl.constexpr,
           STAGES: gl.constexpr, TMA: gl.constexpr, SMEM: gl.constexpr):
    """A program's shared memory, the same in both kernels: q, the ring of page tiles, P's buffer, an mbarrier
    per slot (TMA, initialized here)."""
    dtype: gl.constexpr = cache_ptr.dtype.element_ty
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_H, DL], SMEM)
    qpe_smem = gl.allocate_shared_memory(dtype, [BLOCK_H, DR], SMEM)
    kv_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DL], SMEM)  # ring of page tiles
    pe_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, DR], SMEM)
    p_smem = gl.allocate_shared_memory(dtype, [BLOCK_H, BLOCK_N], SMEM)  # P (the swapped kernel reads it as P^T)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    if TMA:
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
    fence_async_shared()  # the barriers initialized before any use by the async proxy
    return q_smem, qpe_smem, kv_bufs, pe_bufs, p_smem, bars


@gluon.jit
def _begin(q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, table_ptr, b, hb, g, t_start, t_end, n_tiles,
           q_smem, qpe_smem, kv_bufs, pe_bufs, bars, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
           stride_c_page, stride_c_slot, row_stride, table_reach, num_pages,
           PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
           STAGES: gl.constexpr, TMA: gl.constexpr, LOAD_KV: gl.constexpr, LOAD_PE: gl.constexpr):
    """A segment's start, the same in both kernels: once every warp is done with the last segment's q, request
    b's q into shared memory, and its first ``STAGES - 1`` tiles in flight."""
    thread_barrier()
    _load_q(q_nope_ptr, q_pe_ptr, b, hb, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, q_smem, qpe_smem,
            BLOCK_H, DL, DR, LOAD_KV, LOAD_PE)
    fence_async_shared()  # q stored before the wgmma (the async proxy) reads it
    for i in gl.static_range(STAGES - 1):  # prologue
        _issue(i, g, kv_bufs, pe_bufs, bars, kv_desc, pe_desc, cache_ptr, table_ptr, b, t_start, t_end, n_tiles,
               row_stride, table_reach, num_pages, stride_c_page, stride_c_slot,
               PAGE, DL, DR, BLOCK_N, STAGES, TMA, LOAD_KV, LOAD_PE)


@gluon.jit
def _end(TMA: gl.constexpr):
    """A segment's end: by cp.async, the copies issued past its last tile (zero fills into slots the next
    segment uses) retired. (By TMA nothing was issued past the last tile.)"""
    if not TMA:
        async_copy.wait_group(0)


@gluon.jit
def _segment_wgmma(q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, table_ptr, b, hb, g, t_start, t_end,
                   q_smem, qpe_smem, kv_bufs, pe_bufs, p_smem, bars, qk_scale,
                   stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_c_page, stride_c_slot,
                   row_stride, table_reach, num_pages,
                   PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr,
                   BLOCK_N: gl.constexpr, STAGES: gl.constexpr, TMA: gl.constexpr, S_LAYOUT: gl.constexpr,
                   O_LAYOUT: gl.constexpr, LOAD_KV: gl.constexpr, LOAD_PE: gl.constexpr):
    """Request b's tokens [t_start, t_end) for 64 heads: ``(m_i, l_tile, acc)`` and the program's tile count g
    after it."""
    n_tiles = (gl.maximum(t_end - t_start, 0) + BLOCK_N - 1) // BLOCK_N
    _begin(q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, table_ptr, b, hb, g, t_start, t_end, n_tiles,
           q_smem, qpe_smem, kv_bufs, pe_bufs, bars, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
           stride_c_page, stride_c_slot, row_stride, table_reach, num_pages,
           PAGE, DL, DR, BLOCK_H, BLOCK_N, STAGES, TMA, LOAD_KV, LOAD_PE)
    m_i, l_tile, acc, offs_n = _initial_state(BLOCK_H, BLOCK_N, DL, S_LAYOUT, O_LAYOUT)
    for j in range(n_tiles):
        t0 = t_start + j * BLOCK_N
        thread_barrier()  # both warpgroups are done with tile j - 1, whose slot the next load reuses
        _issue(j + STAGES - 1, g, kv_bufs, pe_bufs, bars, kv_desc, pe_desc, cache_ptr, table_ptr, b, t_start, t_end,
               n_tiles, row_stride, table_reach, num_pages, stride_c_page, stride_c_slot,
               PAGE, DL, DR, BLOCK_N, STAGES, TMA, LOAD_KV, LOAD_PE)
        _wait(j, g, kv_bufs, pe_bufs, bars, t0, t_end, DL, DR, BLOCK_N, STAGES, TMA, LOAD_PE)
        slot = (g + j) % STAGES
        m_i, l_tile, acc = _attend_tile(q_smem, qpe_smem, kv_bufs.index(slot), pe_bufs.index(slot), p_smem, m_i,
                                        l_tile, acc, t0 + offs_n, t_end, qk_scale, S_LAYOUT, O_LAYOUT)
    _end(TMA)
    return m_i, l_tile, acc, g + n_tiles


@gluon.jit
def _drain(bars, STAGES: gl.constexpr, TMA: gl.constexpr):
    """After the program's last tile: the barriers invalidated (TMA)."""
    if TMA:
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))


@gluon.jit
def _segment_swapped(q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, table_ptr, b, hb, g, t_start, t_end,
                     q_smem, qpe_smem, kv_bufs, pe_bufs, p_smem, bars, qk_scale,
                     stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_c_page, stride_c_slot,
                     row_stride, table_reach, num_pages,
                     PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr,
                     BLOCK_N: gl.constexpr, STAGES: gl.constexpr, TMA: gl.constexpr, S_LAYOUT: gl.constexpr,
                     O_LAYOUT: gl.constexpr, LOAD_KV: gl.constexpr, LOAD_PE: gl.constexpr):
    """``_segment_wgmma`` transposed: ``(m_i, l_tile, acc)`` with ``acc`` = O^T [DL, BLOCK_H], and g after it.
    Scores S^T [tokens, heads] in ``S_LAYOUT``, the output O^T in ``O_LAYOUT``: both ``_swapped_layouts``' T."""
    dtype: gl.constexpr = cache_ptr.dtype.element_ty
    TOKENS: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)  # along a transposed score tile's rows
    HEADS: gl.constexpr = gl.SliceLayout(0, S_LAYOUT)  # along its columns
    n_tiles = (gl.maximum(t_end - t_start, 0) + BLOCK_N - 1) // BLOCK_N
    _begin(q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, table_ptr, b, hb, g, t_start, t_end, n_tiles,
           q_smem, qpe_smem, kv_bufs, pe_bufs, bars, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
           stride_c_page, stride_c_slot, row_stride, table_reach, num_pages,
           PAGE, DL, DR, BLOCK_H, BLOCK_N, STAGES, TMA, LOAD_KV, LOAD_PE)
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=HEADS)
    l_tile = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=S_LAYOUT)  # column sums kept as a tile
    acc = gl.zeros([DL, BLOCK_H], gl.float32, layout=O_LAYOUT)  # O^T
    offs_n = gl.arange(0, BLOCK_N, layout=TOKENS)
    for j in range(n_tiles):
        t0 = t_start + j * BLOCK_N
        thread_barrier()  # every warp is done with tile j - 1, whose slot the next load reuses
        _issue(j + STAGES - 1, g, kv_bufs, pe_bufs, bars, kv_desc, pe_desc, cache_ptr, table_ptr, b, t_start, t_end,
               n_tiles, row_stride, table_reach, num_pages, stride_c_page, stride_c_slot,
               PAGE, DL, DR, BLOCK_N, STAGES, TMA, LOAD_KV, LOAD_PE)
        _wait(j, g, kv_bufs, pe_bufs, bars, t0, t_end, DL, DR, BLOCK_N, STAGES, TMA, LOAD_PE)
        kv = kv_bufs.index((g + j) % STAGES)  # [BLOCK_N, DL]
        s_zero = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=S_LAYOUT)
        sc = warpgroup_mma(kv, q_smem.permute((1, 0)), s_zero, use_acc=False)  # S^T [BLOCK_N, BLOCK_H]
        sc = warpgroup_mma(pe_bufs.index((g + j) % STAGES), qpe_smem.permute((1, 0)), sc)
        sc = gl.where(((t0 + offs_n) < t_end)[:, None], sc * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(sc, 0))  # per head, over the tile's tokens (across the 4 warps)
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(sc - m_new[None, :])
        l_tile = l_tile * alpha[None, :] + p
        p_smem.store(gl.permute(p.to(dtype), (1, 0)))
        fence_async_shared()
        thread_barrier()  # all of P written before the wgmma reads it
        acc = warpgroup_mma(kv.permute((1, 0)), p_smem.permute((1, 0)), acc * alpha[None, :])  # O^T [DL, BLOCK_H]
        m_i = m_new
    _end(TMA)
    return m_i, l_tile, acc, g + n_tiles


@gluon.jit
def _write_swapped(acc, m_i, l_tile, o_acc_ptr, lse_ptr, out_ptr, b, hb, s, H, num_splits, stride_o_b, stride_o_h,
                   flag, row, BLOCK_H: gl.constexpr, DL: gl.constexpr, FINAL: gl.constexpr, SCHEDULED: gl.constexpr,
                   S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr):
    """``_write`` for the transposed accumulator O^T [DL, BLOCK_H] (``O_LAYOUT``; the row sums in ``S_LAYOUT``)."""
    l_i = gl.sum(l_tile, 0)  # [BLOCK_H]
    has = l_i > 0
    l_safe = gl.where(has, l_i, 1.0)
    o = acc / l_safe[None, :]
    lse = gl.where(has, (m_i + gl.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    offs_h = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(0, O_LAYOUT))
    offs_d = gl.arange(0, DL, layout=gl.SliceLayout(1, O_LAYOUT))
    out_rows = out_ptr + b * stride_o_b + offs_h[None, :] * stride_o_h + offs_d[:, None]
    if SCHEDULED:  # as _write
        if flag == schedule.DIRECT:
            gl.store(out_rows, o.to(out_ptr.dtype.element_ty))
        if flag == schedule.PARTIAL:
            gl.store(o_acc_ptr + (row * H + offs_h)[None, :] * DL + offs_d[:, None], o)
            gl.store(lse_ptr + row * H + offs_h, lse)
    elif FINAL:
        gl.store(out_rows, o.to(out_ptr.dtype.element_ty))
    else:
        base = (b * H + offs_h) * num_splits + s  # row of o_acc [B, H, S, DL]
        gl.store(o_acc_ptr + base[None, :] * DL + offs_d[:, None], o)
        gl.store(lse_ptr + base, lse)


@gluon.jit
def _stage1(SEGMENT: gl.constexpr, WRITE: gl.constexpr, SCORES: gl.constexpr, OUTPUT: gl.constexpr,
            LOAD_KV: gl.constexpr, LOAD_PE: gl.constexpr, SMEM: gl.constexpr,
    q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr, out_ptr,
    stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
    stride_c_page, stride_c_slot,
    stride_o_b, stride_o_h,
    H, row_stride, max_pages, table_reach, num_pages, num_splits, sm_scale, B, num_parts,
    PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, FINAL: gl.constexpr, TMA: gl.constexpr, SCHEDULED: gl.constexpr,
    OVERHEAD: gl.constexpr, MIN_PAGES: gl.constexpr, MAX_PIECES: gl.constexpr, BLOCK_B: gl.constexpr,
):
    """Both kernels' program: its shared memory, then its split of a request (grid ``(head blocks, B, splits)``)
    or, SCHEDULED, the segments of its part of the batch (grid ``(head blocks, num_parts)``), each read by
    ``SEGMENT`` (``_segment_wgmma`` or ``_segment_swapped``) and written by ``WRITE`` (``_write``,
    ``_write_swapped``), in the five layouts of ``_layouts`` or ``_swapped_layouts`` (passed one by one:
    Triton 3.6, the H200's, cannot pass a tuple of layouts to a function)."""
    hb = gl.program_id(0)  # head block first: the programs that read the same pages run side by side
    q_smem, qpe_smem, kv_bufs, pe_bufs, p_smem, bars = _alloc(cache_ptr, BLOCK_H, DL, DR, BLOCK_N, STAGES, TMA, SMEM)
    qk_scale = sm_scale * 1.4426950408889634  # exp2 in the tile loop: log2(e) folded into the scale
    if SCHEDULED:
        p = gl.program_id(1)
        b_lo, b_hi, start, chunk = schedule.part_requests(
            seq_lens_ptr, gl.arange(0, BLOCK_B, layout=plan_layout(gl.num_warps())), B, max_pages, num_parts, p,
            PAGE, OVERHEAD, MIN_PAGES, MAX_PIECES)
        g = p * 0  # tiles loaded so far: each ring slot's barrier phase
        for b in range(b_lo, b_hi + 1):
            t_start, t_end, live, flag, row, start = schedule.segment(seq_lens_ptr, b, p, start, chunk, max_pages,
                                                                      PAGE, OVERHEAD)
            if live:
                m_i, l_tile, acc, g = SEGMENT(
                    q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, table_ptr, b, hb, g, t_start, t_end,
                    q_smem, qpe_smem, kv_bufs, pe_bufs, p_smem, bars, qk_scale,
                    stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_c_page, stride_c_slot,
                    row_stride, table_reach, num_pages, PAGE, DL, DR, BLOCK_H, BLOCK_N, STAGES, TMA, SCORES, OUTPUT,
                    LOAD_KV, LOAD_PE)
                WRITE(acc, m_i, l_tile, o_acc_ptr, lse_ptr, out_ptr, b, hb, 0, H, num_splits, stride_o_b, stride_o_h,
                      flag, row, BLOCK_H, DL, FINAL, SCHEDULED, SCORES, OUTPUT)
    else:
        b = gl.program_id(1)
        s = gl.program_id(2)
        t_start, t_end = split_bounds(seq_lens_ptr, b, s, max_pages, num_splits, PAGE)
        m_i, l_tile, acc, g = SEGMENT(
            q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, table_ptr, b, hb, 0, t_start, t_end,
            q_smem, qpe_smem, kv_bufs, pe_bufs, p_smem, bars, qk_scale,
            stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_c_page, stride_c_slot,
            row_stride, table_reach, num_pages, PAGE, DL, DR, BLOCK_H, BLOCK_N, STAGES, TMA, SCORES, OUTPUT,
            LOAD_KV, LOAD_PE)
        WRITE(acc, m_i, l_tile, o_acc_ptr, lse_ptr, out_ptr, b, hb, s, H, num_splits, stride_o_b, stride_o_h, 0, b,
              BLOCK_H, DL, FINAL, SCHEDULED, SCORES, OUTPUT)
    _drain(bars, STAGES, TMA)


@gluon.jit
def stage1_wgmma_kernel(
    q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr, out_ptr,
    stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
    stride_c_page, stride_c_slot,
    stride_o_b, stride_o_h,
    H, row_stride, max_pages, table_reach, num_pages, num_splits, sm_scale, B, num_parts,
    PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, FINAL: gl.constexpr, TMA: gl.constexpr, SCHEDULED: gl.constexpr,
    OVERHEAD: gl.constexpr, MIN_PAGES: gl.constexpr, MAX_PIECES: gl.constexpr, BLOCK_B: gl.constexpr,
):
    """Grid ``(H / BLOCK_H, B, splits)``, or SCHEDULED ``(H / BLOCK_H, num_parts)``: part ``program_id(1)`` of the
    balanced schedule (``kernels.schedule``), a persistent program walking the segments of its part. Page tiles
    by cp.async (``TMA`` false: any page size, each row looks its page up; ``kv_desc``, ``pe_desc`` unused) or by
    TMA, the bulk copy engine (``TMA``: one page per tile, ``PAGE % BLOCK_N == 0``; ``kv_desc``, ``pe_desc`` are
    2D descriptors over the cache's rows ``[num_pages * PAGE, 576]``, columns [0, DL) and [DL, DL + DR): one
    thread issues a tile, an mbarrier per ring slot says when it has landed, no address registers). TMA cannot
    mask rows, so the rows of the last tile past the length (which may hold anything, NaN included) are zeroed
    in shared memory."""
    S_LAYOUT: gl.constexpr = _layouts(BLOCK_N, DL)[0]
    O_LAYOUT: gl.constexpr = _layouts(BLOCK_N, DL)[1]
    LOAD_KV: gl.constexpr = _layouts(BLOCK_N, DL)[2]
    LOAD_PE: gl.constexpr = _layouts(BLOCK_N, DL)[3]
    SMEM: gl.constexpr = _layouts(BLOCK_N, DL)[4]
    _stage1(_segment_wgmma, _write, S_LAYOUT, O_LAYOUT, LOAD_KV, LOAD_PE, SMEM,
            q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr,
            out_ptr, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_c_page, stride_c_slot, stride_o_b,
            stride_o_h, H, row_stride, max_pages, table_reach, num_pages, num_splits, sm_scale, B, num_parts,
            PAGE, DL, DR, BLOCK_H, BLOCK_N, STAGES, FINAL, TMA, SCHEDULED, OVERHEAD, MIN_PAGES, MAX_PIECES, BLOCK_B)


@gluon.jit
def stage1_swapped_kernel(
    q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr, out_ptr,
    stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
    stride_c_page, stride_c_slot,
    stride_o_b, stride_o_h,
    H, row_stride, max_pages, table_reach, num_pages, num_splits, sm_scale, B, num_parts,
    PAGE: gl.constexpr, DL: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr, FINAL: gl.constexpr, TMA: gl.constexpr, SCHEDULED: gl.constexpr,
    OVERHEAD: gl.constexpr, MIN_PAGES: gl.constexpr, MAX_PIECES: gl.constexpr, BLOCK_B: gl.constexpr,
):
    """``stage1_wgmma_kernel`` for 16 or 32 heads a program, one warpgroup, every product transposed ("swap
    A and B"): a wgmma's M is 64 rows, so 16 heads as M would waste three quarters of the tensor cores.
    Tokens and latent columns take M instead, heads are the n: scores ``S^T = K q^T`` [64 tokens, BLOCK_H],
    softmax down the columns, ``P^T`` to shared memory, output ``O^T = V^T P^T`` [512, BLOCK_H], V^T being
    the page tile read transposed from shared memory. Same grids, loads and outputs."""
    T_LAYOUT: gl.constexpr = _swapped_layouts(BLOCK_H)[0]
    LOAD_KV: gl.constexpr = _swapped_layouts(BLOCK_H)[2]
    LOAD_PE: gl.constexpr = _swapped_layouts(BLOCK_H)[3]
    SMEM: gl.constexpr = _swapped_layouts(BLOCK_H)[4]
    _stage1(_segment_swapped, _write_swapped, T_LAYOUT, T_LAYOUT, LOAD_KV, LOAD_PE, SMEM,
            q_nope_ptr, q_pe_ptr, cache_ptr, kv_desc, pe_desc, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr,
            out_ptr, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_c_page, stride_c_slot, stride_o_b,
            stride_o_h, H, row_stride, max_pages, table_reach, num_pages, num_splits, sm_scale, B, num_parts,
            PAGE, DL, DR, BLOCK_H, BLOCK_N, STAGES, FINAL, TMA, SCHEDULED, OVERHEAD, MIN_PAGES, MAX_PIECES, BLOCK_B)


def launch(kind: str, q_nope, q_pe, cache, seq_lens, table_flat, o_acc, lse_acc, out, sm_scale: float,
           row_stride: int, max_pages: int, num_splits: int, final: bool, block_h: int = BLOCK_H,
           num_parts: int = 0) -> None:
    """Stage 1 for ``split_kv_triton.mla_decode_stage1`` (same arguments, same outputs) with ``block_h`` heads a
    program: ``stage1_wgmma_kernel`` for 64, ``stage1_swapped_kernel`` for 16 or 32. ``kind`` "tma" reads
    pages with TMA where ``tma_applies(cache)``, else (and for "cp.async") with cp.async. ``num_parts`` > 0: the
    balanced schedule (``kernels.schedule``), grid ``(head blocks, num_parts)``, partials in o_acc ``[rows, H,
    DL]`` and lse ``[rows, H]`` (``num_splits`` and ``final`` unused)."""
    if kind not in WGMMA_KINDS:
        raise ValueError(f"kind must be one of {WGMMA_KINDS}, got {kind!r}")
    b, h, dl = q_nope.shape
    if block_h not in (BLOCK_H, *SWAPPED_BLOCK_H) or h % block_h:
        raise ValueError(f"block_h must be one of {(BLOCK_H, *SWAPPED_BLOCK_H)} and divide the {h} heads, "
                         f"got {block_h}")
    grid = (h // block_h, b, num_splits) if not num_parts else (h // block_h, num_parts, 1)
    q_strides = (q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1))
    tail = (out.stride(0), out.stride(1), h, row_stride, max_pages, table_flat.numel(), cache.size(0), num_splits,
            sm_scale, b, num_parts)
    tma_on = kind == "tma" and tma_applies(cache)
    kv_desc, pe_desc = tma_descriptors(cache, dl) if tma_on else (None, None)
    kernel, warps = kernel_for(block_h)
    kernel[grid](q_nope, q_pe, cache, kv_desc, pe_desc, seq_lens, table_flat, o_acc, lse_acc, out, *q_strides,
                 cache.stride(0), cache.stride(1), *tail,
                 **constexprs(cache.size(1), dl, q_pe.size(2), final, tma_on, block_h, num_parts > 0, b,
                              schedule.max_pieces(b, h, num_parts)),
                 num_warps=warps)


def kernel_for(block_h: int):
    """(kernel, num_warps) for ``block_h`` heads a program."""
    return (stage1_wgmma_kernel, NUM_WARPS) if block_h == BLOCK_H else (stage1_swapped_kernel, SWAPPED_WARPS)


def constexprs(page: int, dl: int, dr: int, final: bool, tma: bool, block_h: int, scheduled: bool, batch: int,
               pieces: int) -> dict:
    """The compile-time parameters of ``kernel_for(block_h)``'s kernel for a launch (also what
    ``mla_edu.kernels.sm90`` compiles); ``pieces``: the launch's ``schedule.max_pieces``."""
    return dict(PAGE=page, DL=dl, DR=dr, BLOCK_H=block_h, BLOCK_N=BLOCK_N, STAGES=STAGES, FINAL=final, TMA=tma,
                SCHEDULED=scheduled, **schedule.plan_constexprs(batch, pieces))


def aligned_16(cache) -> bool:
    """Whether the cache's base address and its page and row strides are multiples of 16 bytes (what both kinds'
    16-byte copies need: ``split_kv_triton.wgmma_applies``, ``tma_applies``)."""
    return cache.data_ptr() % 16 == 0 and all(s * cache.element_size() % 16 == 0 for s in cache.stride()[:2])


def tma_applies(cache) -> bool:
    """Whether the TMA kind of ``stage1_wgmma_kernel`` can read this cache: whole tiles inside one page
    (``PAGE % BLOCK_N == 0``), pages back to back (a 2D view of its rows), base and rows 16-byte aligned."""
    return (cache.size(1) % BLOCK_N == 0 and cache.stride(0) == cache.size(1) * cache.stride(1)
            and aligned_16(cache))


def tma_descriptors(cache, d_latent: int = D_LATENT):
    """(kv_desc, pe_desc): TMA descriptors over the rows ``[num_pages * PAGE, 576]`` of a cache that
    ``tma_applies`` to, blocks of ``BLOCK_N`` rows x the latent / rope columns. Host objects only (the
    launch copies them into the kernel's parameters), so a CUDA graph captures them like any argument."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    rows = cache.view(-1, cache.size(-1))  # [num_pages * PAGE, 576]
    layout = smem_layout()
    d_rope = cache.size(-1) - d_latent
    kv = TensorDescriptor(rows, [rows.size(0), d_latent], list(rows.stride()), [BLOCK_N, d_latent], layout)
    pe = TensorDescriptor(rows[:, d_latent:], [rows.size(0), d_rope], list(rows.stride()), [BLOCK_N, d_rope], layout)
    return kv, pe


def compile_cache(page: int, dtype: str):
    """A two-page cache of ``page`` (at least one tile) tokens in ``dtype`` ("bf16"/"fp16"): what a compile for
    sm_90a derives the descriptors' types from (``mla_edu.kernels.sm90``)."""
    import torch

    return torch.empty(2, max(page, BLOCK_N), D_LATENT + D_ROPE,
                       dtype=torch.bfloat16 if dtype == "bf16" else torch.float16)


def _launch_config(kind, plan, on_gpu: bool) -> LaunchConfig:
    block_h = gpu_block_h(plan.heads, plan.batch, plan.width, balanced=plan.schedule == "balanced")
    return LaunchConfig(block_h, BLOCK_N, kernel_for(block_h)[1], STAGES)


def _launch(kind, config, call) -> None:
    launch(kind, call.q_nope, call.q_pe, call.cache, call.seq_lens, call.table_flat, call.o_acc, call.lse_acc,
           call.out, call.sm_scale, call.row_stride, call.max_pages, call.num_splits, call.final, config[0],
           num_parts=call.num_parts)


def _compile_spec(kind, page: int, dtype: str, final: bool, heads: int, scheduled: bool, batch: int,
                  n_pages: int) -> CompileSpec:
    tma = kind == "tma"
    block_h = gpu_block_h(heads, batch, n_pages, balanced=scheduled)  # as split_kv_triton.plan_stage1 picks it
    kernel, warps = kernel_for(block_h)
    consts = constexprs(page, D_LATENT, D_ROPE, final, tma, block_h, scheduled, batch, schedule.MAX_PIECES)
    if tma:  # the descriptors' types, as the JIT derives them from real ones
        descriptors = dict(zip(("kv_desc", "pe_desc"), tma_descriptors(compile_cache(page, dtype))))
    else:  # None: a constexpr
        descriptors, consts = {}, dict(consts, kv_desc=None, pe_desc=None)
    return CompileSpec(kernel, consts, descriptors, {"num_warps": warps}, gluon=True)


#: Stage-1 kinds "cp.async" and "tma" (``stage1.registry``): they run every launch they are given.
STAGE1 = Stage1Impl(applies=lambda kind, block_h, cache: True, launch_config=_launch_config, launch=_launch,
                    compile_spec=_compile_spec)
