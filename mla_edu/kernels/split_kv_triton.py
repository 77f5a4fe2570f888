"""Two-stage split-KV MLA decode in Triton (flash-decoding), registered as torch custom ops.

Stage 1 is one of the kernels of ``kernels.stage1`` (its registry: the plain-Triton teaching kernel ``stage1.tl``,
the Gluon kernels for Hopper); ``plan_stage1`` chooses it on the host and the plan carries the choice. Each
program writes a normalized partial output and its log-sum-exp into the workspace (or, with one split, the
final output directly). Stage 2 (``stage2_kernel``, grid ``(B, H)``) merges the S partials by LSE. Same
algorithm as SGLang's Triton MLA decode (``python/sglang/srt/layers/attention/triton_ops/decode_attention.py``),
with the cutlass contract's page table and workspace. With the balanced schedule (``kernels.schedule``,
``mla_decode_triton_balanced``) stage 1 runs persistent programs, one per part of the batch, and
``stage2_scheduled_kernel`` merges each cut request's own number of partials.

dtypes: GPU fp16/bf16/fp32. CPU (TRITON_INTERPRET=1): fp32/fp16; bf16 raises TypeError
because the interpreter computes bf16 wrongly.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from mla_edu.device import TRITON_INTERPRET, quiet
from mla_edu.kernels import schedule
from mla_edu.kernels import split_kv_wgmma as wgmma
from mla_edu.kernels import stage1 as stage1_kernels
from mla_edu.kernels.contract import DecodePlan, LaunchConfig, check_balanced_workspace, flat_table, workspace_views
from mla_edu.kernels.stage1 import Stage1Call
from mla_edu.kernels.workspace import D_LATENT, D_ROPE, gpu_block_h
from mla_edu.util import is_int

import triton  # noqa: E402  (after mla_edu.device)
import triton.language as tl  # noqa: E402


@triton.jit
def stage2_kernel(o_acc_ptr, lse_ptr, out_ptr, stride_o_b, stride_o_h, H, num_splits,
                   DL: tl.constexpr, BLOCK_DL: tl.constexpr, BLOCK_S: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_DL)
    mask_s = offs_s < num_splits
    mask_d = offs_d < DL
    base = (b * H + h) * num_splits
    lse = tl.load(lse_ptr + base + offs_s, mask=mask_s, other=float("-inf"))  # [S]
    o = tl.load(o_acc_ptr + (base + offs_s)[:, None] * DL + offs_d[None, :],
                mask=mask_s[:, None] & mask_d[None, :], other=0.0)  # [S, DL]
    mx = tl.max(lse, 0)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    w = tl.exp(lse - mx)
    den = tl.sum(w, 0)
    res = tl.sum(w[:, None] * o, 0) / tl.where(den > 0, den, 1.0)
    tl.store(out_ptr + b * stride_o_b + h * stride_o_h + offs_d, res.to(out_ptr.dtype.element_ty), mask=mask_d)


@triton.jit
def _merge_block(o_acc_ptr, lse_ptr, s0, u1, offs_s, offs_h, offs_d, mask_h, mask_d, H, DL, m, den, acc):
    """One block of partials (workspace rows ``s0 + offs_s`` below ``u1``) into the running max ``m``, sum ``den``
    [BH] and output ``acc`` [BH, BD]."""
    rows = (s0 + offs_s)[None, :] * H + offs_h[:, None]  # [BH, BS] rows of lse [rows, H]
    ok = ((s0 + offs_s) < u1)[None, :] & mask_h[:, None]
    lse = tl.load(lse_ptr + rows, mask=ok, other=float("-inf"))
    o = tl.load(o_acc_ptr + rows[:, :, None] * DL + offs_d[None, None, :],
                mask=ok[:, :, None] & mask_d[None, None, :], other=0.0)  # [BH, BS, BD]
    m_new = tl.maximum(m, tl.max(lse, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m - m_safe)
    w_s = tl.exp(lse - m_safe[:, None])  # [BH, BS]
    return m_new, den * alpha + tl.sum(w_s, 1), acc * alpha[:, None] + tl.sum(w_s[:, :, None] * o, 1)


@triton.jit
def stage2_scheduled_kernel(o_acc_ptr, lse_ptr, seq_lens_ptr, out_ptr, stride_o_b, stride_o_h, H, B, max_pages,
                            num_parts, PAGE: tl.constexpr, OVERHEAD: tl.constexpr, MIN_PAGES: tl.constexpr,
                            MAX_PIECES: tl.constexpr, BLOCK_B: tl.constexpr, DL: tl.constexpr,
                            BLOCK_DL: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_S: tl.constexpr,
                            PIPELINED: tl.constexpr):
    """Grid ``(B, ceil(H / BLOCK_H), ceil(DL / BLOCK_DL))``: merges request b's partials, workspace rows ``p + b``
    for its parts ``p`` in ``[p_first, p_last]`` (the balanced schedule, computed again from the lengths: a
    variable number, as FlashMLA's combine kernel merges), by log-sum-exp, ``BLOCK_S`` partials at a time
    (loaded together: a long request's merge is not a chain of dependent loads); with ``PIPELINED`` (the config
    ``STAGE2_FEW_WIDE``, one partial at a time) the next blocks' loads are issued before the current one is merged.
    A request of one part was written by stage 1; an empty request's output is zeros, as with one split."""
    b = tl.program_id(0)
    offs = tl.arange(0, BLOCK_B)
    n_b, p_first, p_last = schedule.request_parts(seq_lens_ptr, offs, b, B, max_pages, num_parts, PAGE, OVERHEAD,
                                                  MIN_PAGES, MAX_PIECES)
    u0 = p_first + b  # its rows p + b
    u1 = p_last + b + 1
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)  # [BH]
    offs_d = tl.program_id(2) * BLOCK_DL + tl.arange(0, BLOCK_DL)  # [BD]
    mask_h = offs_h < H
    mask_d = offs_d < DL
    dst = out_ptr + b * stride_o_b + offs_h[:, None] * stride_o_h + offs_d[None, :]
    if n_b == 0:
        tl.store(dst, tl.zeros([BLOCK_H, BLOCK_DL], tl.float32).to(out_ptr.dtype.element_ty),
                 mask=mask_h[:, None] & mask_d[None, :])
    elif u1 - u0 > 1:
        offs_s = tl.arange(0, BLOCK_S)  # [BS]
        m = tl.full([BLOCK_H], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_DL], tl.float32)
        # online over blocks of partials: running max, rescaled sums; PIPELINED: the next blocks' loads in flight
        if PIPELINED:
            for s0 in tl.range(u0, u1, BLOCK_S, num_stages=3):
                m, den, acc = _merge_block(o_acc_ptr, lse_ptr, s0, u1, offs_s, offs_h, offs_d, mask_h, mask_d, H, DL,
                                           m, den, acc)
        else:
            for s0 in range(u0, u1, BLOCK_S):
                m, den, acc = _merge_block(o_acc_ptr, lse_ptr, s0, u1, offs_s, offs_h, offs_d, mask_h, mask_d, H, DL,
                                           m, den, acc)
        res = acc / tl.where(den > 0, den, 1.0)[:, None]
        tl.store(dst, res.to(out_ptr.dtype.element_ty), mask=mask_h[:, None] & mask_d[None, :])


def wgmma_applies(q_nope: torch.Tensor, q_pe: torch.Tensor, cache: torch.Tensor, width: int,
                  checked: bool) -> bool:
    """Whether the Gluon wgmma kernels fit the call: a Hopper GPU (sm90), fp16/bf16, DeepSeek's 512 + 64
    dims, unchecked, heads a whole number of programs (``gpu_block_h``: 64, or 16 and 32 for the swapped
    kernel), a cache whose base and rows are 16-byte aligned (Triton cannot compile the cp.async kernel for
    one that is not: seen on the H200, ``tests/test_rules_wgmma.py``). Everything else runs the tl kernel
(``stage1.tl``)."""
    b, h, dl = q_nope.shape
    block_h = gpu_block_h(h, b, width)  # the table's columns (``DecodePlan.width``)
    return (q_nope.is_cuda and not checked and q_nope.dtype in (torch.float16, torch.bfloat16)
            and cache.dtype == q_pe.dtype == q_nope.dtype and dl == D_LATENT and q_pe.size(2) == D_ROPE
            and torch.cuda.get_device_capability(q_nope.device)[0] == 9 and h % block_h == 0
            and wgmma.aligned_16(cache))


def check_stage1_args(stage1: str | None, launch) -> str | None:
    """``stage1`` and ``launch`` checked (ValueError naming what came); the kind they ask for: "tl" where a
    ``launch`` is given, else ``stage1``."""
    if stage1 is not None and stage1 not in stage1_kernels.KINDS:
        raise ValueError(f"stage1 must be None or one of {tuple(stage1_kernels.KINDS)}, got {stage1!r}")
    if launch is not None:
        if stage1 not in (None, "tl"):
            raise ValueError(f"launch configures the tl kernel (the Gluon kernels' configs are fixed), "
                             f"got launch={launch!r} with stage1={stage1!r}")
        if (not isinstance(launch, tuple) or len(launch) != 4 or not all(is_int(x) and x >= 1 for x in launch)
                or launch[0] & (launch[0] - 1) or launch[1] & (launch[1] - 1)):
            raise ValueError("launch must be (BLOCK_H, BLOCK_N, num_warps, num_stages), ints >= 1, the blocks "
                             f"powers of two, got {launch!r}")
        stage1 = "tl"
    return stage1


def plan_stage1(q_nope, q_pe, cache, plan: DecodePlan, checked: bool, stage1: str | None = None,
                launch=None) -> DecodePlan:
    """``plan`` with its stage-1 kernel and launch config. ``stage1``: a kind of ``stage1.STAGE1_KINDS``, or None
    for the device's default (``stage1.DEFAULT_GLUON`` where ``wgmma_applies``, else "tl"); ``launch``: the tl
    kernel's (BLOCK_H, BLOCK_N, num_warps, num_stages), or None for its kind's ``launch_config`` (the Gluon
    kernels' are fixed). Chosen on the host at each call, so a CUDA graph keeps the kernel it captured."""
    stage1 = check_stage1_args(stage1, launch)
    gluon = wgmma_applies(q_nope, q_pe, cache, plan.width, checked)
    kind = stage1 if stage1 is not None else (stage1_kernels.DEFAULT_GLUON if gluon else "tl")
    if stage1_kernels.KINDS[kind].gluon and not gluon:
        raise ValueError(f"stage1={kind!r} is a Gluon kernel: it needs a Hopper GPU, fp16/bf16, 512 + 64 dims, "
                         f"an unchecked call, heads a whole number of programs and a 16-byte aligned cache; "
                         f"got {q_nope.dtype} "
                         f"{tuple(q_nope.shape)} on {q_nope.device}, checked={checked} (stage1='tl' runs anywhere)")
    cfg = (LaunchConfig(*launch) if launch is not None
           else stage1_kernels.impl(kind).launch_config(kind, plan, q_nope.is_cuda))
    return dataclasses.replace(plan, stage1=kind, launch=cfg)


@torch.library.custom_op("mla_edu::mla_decode_stage1", mutates_args=("o_acc", "lse_acc", "out"))
def mla_decode_stage1(q_nope: torch.Tensor, q_pe: torch.Tensor, cache: torch.Tensor, seq_lens: torch.Tensor,
                      table_flat: torch.Tensor, o_acc: torch.Tensor, lse_acc: torch.Tensor, out: torch.Tensor,
                      sm_scale: float, row_stride: int, max_pages: int, num_splits: int, checked: bool,
                      final: bool, stage1: str, launch: list[int]) -> None:
    """Stage 1 by the kernel ``stage1`` (``stage1.STAGE1_KINDS``) with ``launch`` (``LaunchConfig``), as planned."""
    stage1_kernels.launch(stage1, launch, Stage1Call(q_nope, q_pe, cache, seq_lens, table_flat, o_acc, lse_acc, out,
                                                     sm_scale, row_stride, max_pages, num_splits, checked, final))


@mla_decode_stage1.register_fake
def _(q_nope, q_pe, cache, seq_lens, table_flat, o_acc, lse_acc, out, sm_scale, row_stride, max_pages, num_splits,
      checked, final, stage1, launch):
    return None


@torch.library.custom_op("mla_edu::mla_decode_stage2", mutates_args=("out",))
def mla_decode_stage2(o_acc: torch.Tensor, lse_acc: torch.Tensor, out: torch.Tensor) -> None:
    b, h, s, dl = o_acc.shape
    with quiet(out.is_cuda):
        stage2_kernel[(b, h)](o_acc, lse_acc, out, out.stride(0), out.stride(1), h, s,
                              DL=dl, BLOCK_DL=triton.next_power_of_2(dl), BLOCK_S=max(2, triton.next_power_of_2(s)))


@mla_decode_stage2.register_fake
def _(o_acc, lse_acc, out):
    return None


@torch.library.custom_op("mla_edu::mla_decode_stage1_scheduled", mutates_args=("o_acc", "lse_acc", "out"))
def mla_decode_stage1_scheduled(q_nope: torch.Tensor, q_pe: torch.Tensor, cache: torch.Tensor, seq_lens: torch.Tensor,
                                table_flat: torch.Tensor, o_acc: torch.Tensor, lse_acc: torch.Tensor,
                                out: torch.Tensor, sm_scale: float, row_stride: int, max_pages: int, num_parts: int,
                                checked: bool, stage1: str, launch: list[int]) -> None:
    """Stage 1 by the balanced schedule (``kernels.schedule``): ``num_parts`` persistent programs per head block,
    each walking its part of the batch; partials in o_acc ``[rows, H, DL]``, lse ``[rows, H]`` (row ``p + b``)."""
    stage1_kernels.launch(stage1, launch, Stage1Call(q_nope, q_pe, cache, seq_lens, table_flat, o_acc, lse_acc, out,
                                                     sm_scale, row_stride, max_pages, 1, checked, False, num_parts))


@mla_decode_stage1_scheduled.register_fake
def _(q_nope, q_pe, cache, seq_lens, table_flat, o_acc, lse_acc, out, sm_scale, row_stride, max_pages, num_parts,
      checked, stage1, launch):
    return None


class Stage2Config(NamedTuple):
    """A launch config of ``stage2_scheduled_kernel``: what one program merges at a time."""

    block_h: int  # heads
    block_s: int  # partials, loaded together
    block_d: int  # latent columns
    num_warps: int


#: Stage 2's configs, one per kind of batch (``stage2_config``; timed on the H200:
#: ``kernel_lab/results/stage2_ab_h200.md``).
#: Requests in many pieces: a [16, 4, 128] float32 tile, 4 partials loaded together.
STAGE2_MANY = Stage2Config(16, 4, 128, 4)
#: Few pieces a request, 64 heads or more: a program merges 8 heads' 512 columns one partial at a time (96 registers
#: a thread where STAGE2_MANY holds 158, so more programs fit an SM), its loop pipelined (``PIPELINED``, timed
#: against the loop without: ``kernel_lab/results/partition_ab_h200_stage2_few_wide_pipelined.md``).
STAGE2_FEW_WIDE = Stage2Config(8, 1, 512, 4)
#: Few pieces, fewer heads: [16, 2, 128] at 8 warps (64 registers); its columns in 4 programs, for enough of them.
STAGE2_FEW_NARROW = Stage2Config(16, 2, 128, 8)


def stage2_config(batch: int, heads: int, parts: int) -> Stage2Config:
    """Stage 2's config for a balanced call, from what the host knows: B, h_q and the parts. The parts' segments
    number at most ``parts + B - 1``, so a request has at most ``(parts + B - 1) / B`` partials on average. Above
    ``schedule.FEW_PARTIALS`` (4 below 64 heads, 2 from 64 up: ``schedule.few_partials``) STAGE2_MANY loads them 4 at
    a time; else STAGE2_FEW_WIDE where there are 64 heads or more, STAGE2_FEW_NARROW below (measured:
    ``kernel_lab/results/stage2_ab_h200.md``, ``kernel_lab/results/partition_ab_h200_many_uncapped.md``)."""
    if batch < 1 or heads < 1 or parts < 1:
        raise ValueError(f"stage2_config needs batch, heads and parts >= 1, got {batch}, {heads}, {parts}")
    if not schedule.few_partials(batch, parts, heads):
        return STAGE2_MANY
    return STAGE2_FEW_WIDE if heads >= 64 else STAGE2_FEW_NARROW


def launch_stage2_scheduled(o_acc: torch.Tensor, lse_acc: torch.Tensor, seq_lens: torch.Tensor, out: torch.Tensor,
                            page_size: int, max_pages: int, num_parts: int, config: Stage2Config | None = None):
    """``stage2_scheduled_kernel`` over out [B, H, DL] at ``config`` (None: ``stage2_config``'s for this batch);
    returns the launch's compiled kernel (its ``n_regs``, on a GPU)."""
    b, h, dl = out.shape
    cfg = Stage2Config(*(config or stage2_config(b, h, num_parts)))
    block_h = min(cfg.block_h, triton.next_power_of_2(h))
    block_d = min(cfg.block_d, triton.next_power_of_2(dl))
    grid = (b, triton.cdiv(h, block_h), triton.cdiv(dl, block_d))
    with quiet(out.is_cuda):
        return stage2_scheduled_kernel[grid](o_acc, lse_acc, seq_lens, out, out.stride(0), out.stride(1), h, b,
                                             max_pages, num_parts, PAGE=page_size,
                                             **schedule.plan_constexprs(b, schedule.max_pieces(b, h, num_parts)),
                                             DL=dl, BLOCK_DL=block_d, BLOCK_H=block_h, BLOCK_S=cfg.block_s,
                                             PIPELINED=cfg == STAGE2_FEW_WIDE, num_warps=cfg.num_warps)


@torch.library.custom_op("mla_edu::mla_decode_stage2_scheduled", mutates_args=("out",))
def mla_decode_stage2_scheduled(o_acc: torch.Tensor, lse_acc: torch.Tensor, seq_lens: torch.Tensor,
                                out: torch.Tensor, page_size: int, max_pages: int, num_parts: int,
                                config: list[int]) -> None:
    """Merge each request's partials (rows ``p + b`` of o_acc [rows, H, DL], lse [rows, H] for its parts p) at
    ``config`` (a ``Stage2Config``; [] for ``stage2_config``'s)."""
    launch_stage2_scheduled(o_acc, lse_acc, seq_lens, out, page_size, max_pages, num_parts,
                            Stage2Config(*config) if config else None)


@mla_decode_stage2_scheduled.register_fake
def _(o_acc, lse_acc, seq_lens, out, page_size, max_pages, num_parts, config):
    return None


def _check_inputs(q_nope, q_pe, cache, plan: DecodePlan) -> None:
    """What the Triton impl refuses beyond ``mla_decode``'s checks (the interpreter's bf16, strided rows, a plan
    without a stage-1 kernel)."""
    if not q_nope.is_cuda:
        if not TRITON_INTERPRET:
            raise RuntimeError("impl='triton' on CPU tensors needs TRITON_INTERPRET=1 set before triton is imported")
        if q_nope.dtype == torch.bfloat16:
            raise TypeError("impl='triton' on CPU runs in Triton's interpreter, which computes bfloat16 wrongly: "
                            "use float32 or float16 on CPU (bfloat16 works on GPU)")
    if q_nope.stride(-1) != 1 or q_pe.stride(-1) != 1 or cache.stride(-1) != 1:
        raise ValueError("q_nope, q_pe and kv_c_and_k_pe_cache must be contiguous in their last dim")
    if plan.stage1 is None or plan.launch is None:
        raise ValueError("the plan names no stage-1 kernel: make it with plan_stage1 (as mla_decode does)")


def mla_decode_triton(q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale: float, plan: DecodePlan,
                      checked: bool = False) -> torch.Tensor:
    _check_inputs(q_nope, q_pe, cache, plan)
    stage1 = (plan.stage1, list(plan.launch))  # the custom op's last two arguments
    b, h, dl = q_nope.shape
    out = torch.empty((b, h, dl), dtype=q_nope.dtype, device=q_nope.device)
    table = flat_table(page_table, plan)
    if plan.num_splits == 1:
        dummy = out.new_empty((0,), dtype=torch.float32)
        torch.ops.mla_edu.mla_decode_stage1(q_nope, q_pe, cache, seq_lens, table, dummy, dummy.clone(), out, sm_scale,
                                            plan.row_stride, plan.max_pages, 1, checked, True, *stage1)
        return out
    o_acc, lse_acc = workspace_views(workspace, plan)
    torch.ops.mla_edu.mla_decode_stage1(q_nope, q_pe, cache, seq_lens, table, o_acc, lse_acc, out, sm_scale,
                                        plan.row_stride, plan.max_pages, plan.num_splits, checked, False, *stage1)
    torch.ops.mla_edu.mla_decode_stage2(o_acc, lse_acc, out)
    return out


def balanced_views(workspace: torch.Tensor, batch: int, heads: int, d_latent: int, parts: int):
    """The balanced schedule's partials in ``workspace`` (uint8, at least ``schedule.workspace_bytes`` long):
    o_acc [rows, H, DL] and lse [rows, H], float32, row ``p + b`` for part p's segment of request b."""
    rows = schedule.workspace_rows(batch, parts)
    f32 = workspace[: schedule.workspace_bytes(batch, heads, d_latent, parts)].view(torch.float32)
    return f32[: rows * heads * d_latent].view(rows, heads, d_latent), f32[rows * heads * d_latent:].view(rows, heads)


def mla_decode_triton_balanced(q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale: float,
                               plan: DecodePlan, checked: bool, stage2: Stage2Config | None = None) -> torch.Tensor:
    """``mla_decode_triton`` with the balanced schedule (``kernels.schedule``) instead of one split count for all
    requests: ``plan.parts`` persistent stage-1 programs per head block, each computing the partition from
    ``seq_lens`` on the device and walking its part (no host sync, no extra launch: graph-safe), and a stage 2
    merging each request's own number of partials, at ``stage2`` (None: ``stage2_config``'s for the batch). The
    plan comes from ``make_plan(..., schedule="balanced")``, which counted the parts and checked them; the
    partials go through the workspace (``contract.check_balanced_workspace``: ValueError if it is smaller)."""
    _check_inputs(q_nope, q_pe, cache, plan)
    b, h, dl = q_nope.shape
    if plan.schedule != "balanced" or plan.parts < 1:
        raise ValueError(f"expected a plan from make_plan(..., schedule='balanced') (parts >= 1), got "
                         f"schedule={plan.schedule!r}, parts={plan.parts}")
    parts = plan.parts
    check_balanced_workspace(plan, workspace, parts, plan.sm_count)  # the workspace may not be make_plan's
    o_acc, lse_acc = balanced_views(workspace, b, h, dl, parts)
    out = torch.empty((b, h, dl), dtype=q_nope.dtype, device=q_nope.device)
    torch.ops.mla_edu.mla_decode_stage1_scheduled(q_nope, q_pe, cache, seq_lens, flat_table(page_table, plan),
                                                  o_acc, lse_acc, out, sm_scale, plan.row_stride, plan.max_pages,
                                                  parts, checked, plan.stage1, list(plan.launch))
    torch.ops.mla_edu.mla_decode_stage2_scheduled(o_acc, lse_acc, seq_lens, out, plan.page_size, plan.max_pages,
                                                  parts, list(stage2 or ()))
    return out
