"""Stage 1 of the split-KV decode in plain Triton: the teaching kernel, stage-1 kind "tl".

``stage1_kernel``, grid ``(B, ceil(H / BLOCK_H), S)``: program (b, head block, s) walks the tokens of split ``s``
of request ``b`` (pages ``[s * c_b, (s+1) * c_b)``, ``c_b = ceil(n_pages_b / S)``), looks each token's page up in
the table, and keeps an online softmax over ``q . [c_kv; k_pe]`` (``_attend``). It writes the normalized partial
output and its log-sum-exp into the workspace (or, with one split, the final output directly); stage 2
(``split_kv_triton``) merges the splits. Same algorithm as SGLang's Triton MLA decode
(``python/sglang/srt/layers/attention/triton_ops/decode_attention.py``), with the cutlass contract's page table.

``stage1_balanced_kernel`` is the same attention under the balanced schedule (``kernels.schedule``): grid
``(num_parts, head blocks)``, persistent programs, each computing the batch's partition from ``seq_lens`` and
walking its part's requests, one ``_attend`` per segment.

Runs everywhere: any GPU, checked calls, the CPU interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import torch

from mla_edu.device import quiet
from mla_edu.kernels import schedule
from mla_edu.kernels.contract import LaunchConfig
from mla_edu.kernels.stage1.registry import CompileSpec, Stage1Impl
from mla_edu.kernels.workspace import D_LATENT, D_ROPE, gpu_block_h

import triton  # noqa: E402  (after mla_edu.device)
import triton.language as tl  # noqa: E402


@triton.jit
def stage1_kernel(
    q_nope_ptr, q_pe_ptr, cache_ptr, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr, out_ptr,
    stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
    stride_c_page, stride_c_slot,
    stride_o_b, stride_o_h,
    H, row_stride, max_pages, table_reach, num_pages, num_splits, sm_scale,
    PAGE: tl.constexpr, DL: tl.constexpr, DR: tl.constexpr, BLOCK_DL: tl.constexpr, BLOCK_DR: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, CHECKED: tl.constexpr, FINAL: tl.constexpr,
    IEEE: tl.constexpr, SAME_PAGE: tl.constexpr,
):
    hb = tl.program_id(1)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)  # [BLOCK_H]
    mask_h = offs_h < H
    offs_dl = tl.arange(0, BLOCK_DL)
    mask_o = mask_h[:, None] & (offs_dl < DL)[None, :]
    b = tl.program_id(0)
    s = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + b).to(tl.int64)
    n_pages = tl.minimum((seq_len + PAGE - 1) // PAGE, max_pages)
    seq_len = tl.minimum(seq_len, n_pages * PAGE)
    per_split = (n_pages + num_splits - 1) // num_splits
    t_start = s * per_split * PAGE
    t_end = tl.minimum((s + 1) * per_split * PAGE, seq_len)
    o, lse = _attend(q_nope_ptr, q_pe_ptr, cache_ptr, seq_lens_ptr, table_ptr, b, t_start, t_end, offs_h,
                     mask_h, offs_dl, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_c_page,
                     stride_c_slot, row_stride, max_pages, table_reach, num_pages, sm_scale, PAGE, DL, DR,
                     BLOCK_DL, BLOCK_DR, BLOCK_H, BLOCK_N, CHECKED, IEEE, SAME_PAGE)
    if FINAL:
        tl.store(out_ptr + b * stride_o_b + offs_h[:, None] * stride_o_h + offs_dl[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=mask_o)
    else:  # [BLOCK_H] row of o_acc [B, H, S, DL]
        _store_partial(o_acc_ptr, lse_ptr, (b * H + offs_h) * num_splits + s, o, lse, offs_dl, mask_h, mask_o,
                       DL)


@triton.jit
def stage1_balanced_kernel(
    q_nope_ptr, q_pe_ptr, cache_ptr, seq_lens_ptr, table_ptr, o_acc_ptr, lse_ptr, out_ptr,
    stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
    stride_c_page, stride_c_slot,
    stride_o_b, stride_o_h,
    H, row_stride, max_pages, table_reach, num_pages, sm_scale, B, num_parts,
    PAGE: tl.constexpr, DL: tl.constexpr, DR: tl.constexpr, BLOCK_DL: tl.constexpr, BLOCK_DR: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, CHECKED: tl.constexpr, IEEE: tl.constexpr,
    SAME_PAGE: tl.constexpr, OVERHEAD: tl.constexpr, MIN_PAGES: tl.constexpr, MAX_PIECES: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """Grid ``(num_parts, head blocks)``: part p of the balanced schedule walks its requests."""
    hb = tl.program_id(1)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)  # [BLOCK_H]
    mask_h = offs_h < H
    offs_dl = tl.arange(0, BLOCK_DL)
    mask_o = mask_h[:, None] & (offs_dl < DL)[None, :]
    p = tl.program_id(0)
    b_lo, b_hi, start, chunk = schedule.part_requests(seq_lens_ptr, tl.arange(0, BLOCK_B), B, max_pages,
                                                      num_parts, p, PAGE, OVERHEAD, MIN_PAGES, MAX_PIECES)
    for b in range(b_lo, b_hi + 1):
        t_start, t_end, live, flag, row, start = schedule.segment(seq_lens_ptr, b, p, start, chunk, max_pages,
                                                                  PAGE, OVERHEAD)
        if live:
            o, lse = _attend(q_nope_ptr, q_pe_ptr, cache_ptr, seq_lens_ptr, table_ptr, b, t_start, t_end,
                             offs_h, mask_h, offs_dl, stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h,
                             stride_c_page, stride_c_slot, row_stride, max_pages, table_reach, num_pages,
                             sm_scale, PAGE, DL, DR, BLOCK_DL, BLOCK_DR, BLOCK_H, BLOCK_N, CHECKED, IEEE,
                             SAME_PAGE)
            if flag == schedule.DIRECT:  # the request's only part: its output
                tl.store(out_ptr + b * stride_o_b + offs_h[:, None] * stride_o_h + offs_dl[None, :],
                         o.to(out_ptr.dtype.element_ty), mask=mask_o)
            else:  # one partial of several, in workspace row p + b
                _store_partial(o_acc_ptr, lse_ptr, row * H + offs_h, o, lse, offs_dl, mask_h, mask_o, DL)


@triton.jit
def _attend(q_nope_ptr, q_pe_ptr, cache_ptr, seq_lens_ptr, table_ptr, b, t_start, t_end, offs_h, mask_h, offs_dl,
            stride_qn_b, stride_qn_h, stride_qp_b, stride_qp_h, stride_c_page, stride_c_slot,
            row_stride, max_pages, table_reach, num_pages, sm_scale,
            PAGE: tl.constexpr, DL: tl.constexpr, DR: tl.constexpr, BLOCK_DL: tl.constexpr, BLOCK_DR: tl.constexpr,
            BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, CHECKED: tl.constexpr, IEEE: tl.constexpr,
            SAME_PAGE: tl.constexpr):
    """Online softmax of request b's heads ``offs_h`` over its tokens [t_start, t_end), each token's page looked
    up in the table: the normalized output [BLOCK_H, BLOCK_DL] and its log-sum-exp [BLOCK_H] (-inf, with a
    zero output, over no tokens). CHECKED: NaN where a page id is out of range or the request is longer than
    its table row."""
    offs_dr = tl.arange(0, BLOCK_DR)
    mask_dl = offs_dl < DL
    mask_dr = offs_dr < DR
    q = tl.load(q_nope_ptr + b * stride_qn_b + offs_h[:, None] * stride_qn_h + offs_dl[None, :],
                mask=mask_h[:, None] & mask_dl[None, :], other=0.0)  # [BLOCK_H, BLOCK_DL]
    q_pe = tl.load(q_pe_ptr + b * stride_qp_b + offs_h[:, None] * stride_qp_h + offs_dr[None, :],
                   mask=mask_h[:, None] & mask_dr[None, :], other=0.0)  # [BLOCK_H, BLOCK_DR]

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DL], dtype=tl.float32)
    n_bad = tl.zeros([BLOCK_N], dtype=tl.int32)

    for t0 in range(t_start, t_end, BLOCK_N):
        pos = t0 + tl.arange(0, BLOCK_N)  # [BLOCK_N] token positions
        mask_n = pos < t_end
        if SAME_PAGE:  # PAGE % BLOCK_N == 0 and splits start on page boundaries: one page per block
            flat = b * row_stride + t0 // PAGE  # flat index into the table's storage
            ok_f = flat < table_reach
            page = tl.load(table_ptr + tl.minimum(flat, table_reach - 1)).to(tl.int64)
            ok = ok_f & (page >= 0) & (page < num_pages)
        else:
            flat = b * row_stride + pos // PAGE
            ok_f = flat < table_reach
            page = tl.load(table_ptr + tl.minimum(flat, table_reach - 1), mask=mask_n, other=0).to(tl.int64)
            ok = ok_f & (page >= 0) & (page < num_pages)
        if CHECKED:
            n_bad += (mask_n & (ok == 0)).to(tl.int32)
            ld = mask_n & ok
        else:
            ld = mask_n
        page = tl.minimum(tl.maximum(page, 0), num_pages - 1)
        row = cache_ptr + page * stride_c_page + (pos % PAGE) * stride_c_slot  # [BLOCK_N] row pointers
        kv = tl.load(row[:, None] + offs_dl[None, :], mask=ld[:, None] & mask_dl[None, :], other=0.0)  # [N, DL]
        k_pe = tl.load(row[:, None] + DL + offs_dr[None, :], mask=ld[:, None] & mask_dr[None, :], other=0.0)
        if IEEE:
            qk = tl.dot(q, tl.trans(kv), input_precision="ieee")
            qk += tl.dot(q_pe, tl.trans(k_pe), input_precision="ieee")
        else:
            qk = tl.dot(q, tl.trans(kv))
            qk += tl.dot(q_pe, tl.trans(k_pe))
        qk = qk * sm_scale
        qk = tl.where(mask_n[None, :], qk, float("-inf"))  # [BLOCK_H, BLOCK_N]
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p.to(kv.dtype), kv, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(kv.dtype), kv)
        m_i = m_new

    has = l_i > 0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
    if CHECKED:
        bad = (tl.sum(n_bad, 0) > 0) | ((tl.load(seq_lens_ptr + b).to(tl.int64) + PAGE - 1) // PAGE > max_pages)
        o = tl.where(bad, float("nan"), o)
    return o, lse


@triton.jit
def _store_partial(o_acc_ptr, lse_ptr, base, o, lse, offs_dl, mask_h, mask_o, DL: tl.constexpr):
    """A partial output and its log-sum-exp into rows ``base`` [BLOCK_H] of o_acc [rows, DL] and lse [rows]."""
    tl.store(o_acc_ptr + base[:, None] * DL + offs_dl[None, :], o, mask=mask_o)
    tl.store(lse_ptr + base, lse, mask=mask_h)


#: GPU launch configs (BLOCK_N, num_warps, num_stages) per head-block size (``gpu_block_h``).
GPU_CONFIGS = {16: (64, 4, 2), 32: (32, 4, 2), 64: (64, 8, 2)}  # measured on the H200 (kernel_bench_h200.md)


def _dot_width(d: int) -> int:
    """Block width for a head dimension of ``d`` that feeds ``tl.dot`` as K: a power of two, and at
    least 16, since compiled Triton rejects a dot with K < 16 ("Input shapes should have ... K >= 16",
    seen on the H200 with a rope width of 8); the interpreter accepts any K. The padding is masked."""
    return max(16, triton.next_power_of_2(d))


def launch_config(heads: int, on_gpu: bool, batch: int = 0, n_pages: int = 0,
                  balanced: bool = False) -> LaunchConfig:
    """The tl kernel's default launch config; on a GPU the head block is ``gpu_block_h(heads, batch, n_pages,
    balanced)`` (16 for problems too small to fill the GPU with 64-head programs). A call can pass its own
    (``mla_decode(..., launch=...)``, as ``tools.kernel_sweep`` does)."""
    if not on_gpu:  # the interpreter runs programs one by one: fewer, bigger blocks are faster
        return LaunchConfig(max(16, triton.next_power_of_2(heads)), 64, 4, 1)
    block_h = gpu_block_h(heads, batch, n_pages, balanced)
    return LaunchConfig(block_h, *GPU_CONFIGS[block_h])


def stage1_constexprs(page: int, dl: int, dr: int, fp32: bool, checked: bool, final: bool, block_h: int,
                      block_n: int, scheduled: bool, batch: int, pieces: int) -> dict:
    """The compile-time parameters of a launch: ``stage1_kernel``'s, or with ``scheduled``
    ``stage1_balanced_kernel``'s (also what ``mla_edu.kernels.sm90`` compiles); ``pieces``: the launch's
    ``schedule.max_pieces`` (read with ``scheduled`` only)."""
    common = dict(PAGE=page, DL=dl, DR=dr, BLOCK_DL=_dot_width(dl), BLOCK_DR=_dot_width(dr), BLOCK_H=block_h,
                  BLOCK_N=block_n, CHECKED=checked, IEEE=fp32, SAME_PAGE=page % block_n == 0)
    return dict(common, **schedule.plan_constexprs(batch, pieces)) if scheduled else dict(common, FINAL=final)


def _launch(kind, launch, call) -> None:
    """``stage1_kernel`` on grid ``(B, head blocks, splits)``, or with ``call.num_parts`` > 0
    ``stage1_balanced_kernel`` on ``(num_parts, head blocks)``."""
    q_nope, q_pe, cache, out = call.q_nope, call.q_pe, call.cache, call.out
    b, h, dl = q_nope.shape
    block_h, block_n, warps, stages = launch
    tensors = (q_nope, q_pe, cache, call.seq_lens, call.table_flat, call.o_acc, call.lse_acc, out,
               q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1), cache.stride(0), cache.stride(1),
               out.stride(0), out.stride(1), h, call.row_stride, call.max_pages, call.table_flat.numel(),
               cache.size(0))
    consts = stage1_constexprs(cache.size(1), dl, q_pe.size(2), q_nope.dtype == torch.float32, call.checked,
                               call.final, block_h, block_n, call.num_parts > 0, b,
                               schedule.max_pieces(b, h, call.num_parts))
    with quiet(q_nope.is_cuda):
        if call.num_parts:
            stage1_balanced_kernel[(call.num_parts, triton.cdiv(h, block_h))](
                *tensors, call.sm_scale, b, call.num_parts, **consts, num_warps=warps, num_stages=stages)
        else:
            stage1_kernel[(b, triton.cdiv(h, block_h), call.num_splits)](
                *tensors, call.num_splits, call.sm_scale, **consts, num_warps=warps, num_stages=stages)


def _launch_config(kind, plan, on_gpu: bool) -> LaunchConfig:
    return launch_config(plan.heads, on_gpu, plan.batch, plan.width, plan.schedule == "balanced")


def _compile_spec(kind, page: int, dtype: str, final: bool, heads: int, scheduled: bool, batch: int,
                  n_pages: int) -> CompileSpec:
    block_h, block_n, warps, stages = launch_config(heads, on_gpu=True, batch=batch, n_pages=n_pages,
                                                    balanced=scheduled)
    consts = stage1_constexprs(page, D_LATENT, D_ROPE, False, False, final, block_h, block_n, scheduled, batch,
                               schedule.MAX_PIECES)
    kernel = stage1_balanced_kernel if scheduled else stage1_kernel
    return CompileSpec(kernel, consts, {}, {"num_warps": warps, "num_stages": stages}, gluon=False)


#: Stage-1 kind "tl" (``stage1.registry``): it runs every launch it is given.
STAGE1 = Stage1Impl(applies=lambda kind, block_h, cache: True, launch_config=_launch_config, launch=_launch,
                    compile_spec=_compile_spec)
