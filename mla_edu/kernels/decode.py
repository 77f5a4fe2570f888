"""``mla_decode``: one call, sgl-kernel's ``cutlass_mla_decode`` contract, one entry of ``IMPLS`` per implementation.

An implementation is registered by one entry of ``IMPLS`` (``docs/CONTRIBUTING.md``, "Adding a kernel impl").
``observe_plans`` shows every call's plan to an observer (``mla_edu.case_study.diagnose`` records launches with it).
"""

from __future__ import annotations

import contextlib
from typing import Callable, NamedTuple

import torch

from mla_edu.device import require_triton
from mla_edu.kernels.contract import (STRIDE_POLICIES, DecodePlan, check_common, check_flags, check_stride_policy,
                                      make_plan)
from mla_edu.kernels.cutlass import check_cutlass_call, mla_decode_cutlass
from mla_edu.kernels.reference import mla_decode_reference
from mla_edu.kernels.split_kv_torch import mla_decode_torch
from mla_edu.kernels.schedule import SCHEDULES


class Impl(NamedTuple):
    """How ``mla_decode`` runs one implementation."""

    #: (q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale: float, plan, checked) -> out [B, H, D_latent]
    run: Callable[..., torch.Tensor]
    #: (q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale, num_kv_splits) -> None: the argument checks
    check: Callable[..., None] = check_common
    #: the stride policies it implements (None, the default, is the first)
    stride_policies: tuple = STRIDE_POLICIES
    #: (q_nope, q_pe, cache, plan, checked, stage1, launch) -> the plan with its stage-1 kernel and launch
    #: config; None: the impl has no such choice
    plan_stage1: Callable[..., DecodePlan] | None = None
    #: ``run`` with the balanced schedule (``schedule="balanced"``: the plan carries its parts); None: the impl has none
    balanced: Callable[..., torch.Tensor] | None = None
    #: (stage1, launch) -> None: their checks alone (run at B = 0, where no plan is made); None: no such choice
    check_stage1: Callable[..., object] | None = None
    #: autograd flows through ``run`` (plain torch ops); False: its kernels are custom ops with no backward, so
    #: ``mla_decode`` refuses inputs that require grad while grad mode is on (their output would carry none)
    differentiable: bool = False


def _reference(q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale, plan, checked):
    return mla_decode_reference(q_nope, q_pe, cache, seq_lens, page_table, sm_scale, plan, checked).to(q_nope.dtype)


def _triton(name: str) -> Callable:
    """``split_kv_triton.<name>``, imported at its first call: Triton is optional (``device.require_triton``)."""

    def call(*args):
        require_triton('impl="triton"')
        from mla_edu.kernels import split_kv_triton

        return getattr(split_kv_triton, name)(*args)

    call.__name__ = name
    return call


#: name -> implementation (see ``mla_decode``'s docstring); tests parametrize over it.
IMPLS: dict[str, Impl] = {
    "reference": Impl(_reference, differentiable=True),
    "torch": Impl(mla_decode_torch),
    "triton": Impl(_triton("mla_decode_triton"), plan_stage1=_triton("plan_stage1"),
                   balanced=_triton("mla_decode_triton_balanced"), check_stage1=_triton("check_stage1_args")),
    "cutlass": Impl(mla_decode_cutlass, check_cutlass_call, ("size",)),
}

_observers: list[Callable[[DecodePlan, torch.Tensor, torch.Tensor], None]] = []


@contextlib.contextmanager
def observe_plans(observer: Callable[[DecodePlan, torch.Tensor, torch.Tensor], None]):
    """Inside the block ``observer(plan, page_table, workspace)`` is called by every ``mla_decode`` call that
    launches a kernel, with its plan (host code: under a CUDA graph at capture only, never at a replay)."""
    if not callable(observer):
        raise TypeError(f"observer must be callable, got {type(observer).__name__}")
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


def check_no_grad(entry: Impl, impl: str, **tensors: torch.Tensor) -> None:
    """ValueError when a kernel with no backward gets an input that requires grad while grad mode is on: its
    output would carry no gradient, and a loss through it would silently leave that input's gradient at zero."""
    if entry.differentiable or not torch.is_grad_enabled():
        return
    wanting = [name for name, t in tensors.items() if t.requires_grad]
    if wanting:
        raise ValueError(f"impl={impl!r} is inference only (its kernels have no backward), got {', '.join(wanting)} "
                         f"requiring grad: call it under torch.no_grad() or torch.inference_mode(), pass "
                         f".detach()ed tensors, or use impl='reference', which autograd flows through")


def mla_decode(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, sm_scale, num_kv_splits=1, *,
               impl="torch", stride_policy=None, checked=False, sm_count=None, stage1=None,
               launch=None, schedule="splits") -> torch.Tensor:
    """Absorbed-MLA decode attention over a paged latent cache; returns ``out [B, H, D_latent]``.

    q_nope ``[B, H, 512]``, q_pe ``[B, H, 64]`` (other dims allowed except for "cutlass"),
    kv_c_and_k_pe_cache ``[num_pages, PAGE, 576]``, seq_lens int32 ``[B]``, page_table int32
    ``[B, block_num]``, workspace uint8 ``[bytes]`` (see ``get_workspace_size``).
    ``out[b, h] = softmax_t(sm_scale * q[b, h] . k_t) @ c_kv_t`` over the ``seq_lens[b]`` tokens.

    impl:
      "reference": float32 loop over requests (ground truth; syncs with the host, not graph-safe).
      "torch":     split-KV in torch ops, stage 1 one custom op (``torch.ops.mla_edu.mla_decode_torch_stage1``)
                   that a graph records as one launch; on CUDA no host sync and fixed shapes (graph-safe),
                   on CPU it gathers only the tokens the lengths need, as a kernel's loop does.
      "triton":    two Triton kernels (split-KV stage 1, LSE merge stage 2) registered as the
                   custom ops ``torch.ops.mla_edu.mla_decode_stage1`` / ``..._stage2``. GPU: fp16/bf16
                   (fp32 too). CPU (Triton interpreter): fp32/fp16 only; bf16 raises TypeError,
                   because the interpreter computes bf16 wrongly.
      "cutlass":   ``sgl_kernel.cutlass_mla_decode``; runs only on SM100 with sgl_kernel installed,
                   else RuntimeError with the reason. Its argument checks run everywhere.
    stride_policy: "size" (row stride = page_table.size(1), as the cutlass wrapper) or "stride"
      (page_table.stride(0), as FlashMLA). None = "size" for every impl, since this call mirrors
      cutlass_mla_decode; SGLang #6998 hinges on it. See ``mla_edu.kernels.contract``.
    num_kv_splits: >= 1 fixed, -1 auto (sgl-kernel's heuristic from B, max_seq_len = PAGE *
      page_table.size(1) and sm_count, host-side and shape-only). With > 1 split, partial
      outputs go through the workspace, which must be large enough (ValueError otherwise).
    checked: NaN output for a request that reads an out-of-range page id, a table entry past
      the storage, or more pages than the table row holds, or whose seq_len is negative; unchecked
      clamps (documented in ``mla_edu.kernels.contract``; a negative length attends to nothing:
      zeros). Table entries past ceil(len/PAGE) are never read. Must be a bool.
    sm_count: SM count for the auto split (None: GPU 0's, or 132 on CPU; else an int >= 1).
    stage1, launch: impl "triton" only: its stage-1 kernel, one of ``stage1.KINDS`` (None: the
      device's default, ``split_kv_triton.plan_stage1``), and the tl kernel's launch config (BLOCK_H, BLOCK_N,
      num_warps, num_stages; None: ``stage1.tl.launch_config``). The plan carries both.
    schedule: "splits" (every request split ``num_kv_splits`` ways, the cutlass contract) or "balanced" (impl
      "triton", ``num_kv_splits=-1``: one near-equal part of the batch per SM, from the lengths, on the device;
      ``mla_edu.kernels.schedule``; its partials need ``schedule.workspace_bytes`` of workspace).

    Refused up front (ValueError/TypeError): a non-finite or non-positive ``sm_scale``, a page table
    whose rows are not contiguous (``stride(1) != 1``), a misaligned or strided workspace when
    splits > 1, a cache of no pages, a table whose rows address more tokens than int32 holds or whose last row
    starts past int32 indices (the Triton kernels compute ``b * row_stride`` in int32), partial outputs past int32
    indices (``B * H * splits * D_latent`` values), with the balanced schedule a batch whose partition passes int32
    (``schedule.check_line_fits``), and (every impl but "reference") q_nope, q_pe or the cache requiring grad while
    grad mode is on (``check_no_grad``). A strided
    ``seq_lens`` view is read through a contiguous copy; lengths up to ``2**31 - 1`` are read without overflow.
    ``B = 0`` returns an empty ``[0, H, D_latent]`` output for every impl.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {tuple(IMPLS)}, got {impl!r}")
    entry = IMPLS[impl]
    check_flags(checked, sm_count)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "balanced" and entry.balanced is None:
        raise ValueError(f"schedule='balanced' needs impl='triton', got impl={impl!r}")
    if schedule == "balanced" and num_kv_splits != -1:
        raise ValueError(f"schedule='balanced' chooses each request's splits itself: num_kv_splits must be -1, "
                         f"got {num_kv_splits!r}")
    if entry.plan_stage1 is None and (stage1, launch) != (None, None):
        raise ValueError(f"impl={impl!r} has no stage-1 kernel to choose: stage1 and launch must be None, "
                         f"got stage1={stage1!r}, launch={launch!r}")
    if stride_policy is not None:  # make_plan's check, before B = 0's return
        check_stride_policy(stride_policy)
    if stride_policy in STRIDE_POLICIES and stride_policy not in entry.stride_policies:
        raise ValueError(f"impl={impl!r} always uses stride_policy={entry.stride_policies[0]!r} (its wrapper's "
                         f"contract), got {stride_policy!r}")
    entry.check(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, sm_scale, num_kv_splits,
                sm_count)
    check_no_grad(entry, impl, q_nope=q_nope, q_pe=q_pe, kv_c_and_k_pe_cache=kv_c_and_k_pe_cache)
    if q_nope.size(0) == 0:  # B = 0: no kernel runs, every impl returns an empty output (after its checks)
        if entry.check_stage1 is not None:
            entry.check_stage1(stage1, launch)
        return q_nope.new_empty((0, q_nope.size(1), q_nope.size(2)))
    seq_lens = seq_lens.contiguous()  # a strided view (buf[::2]): the kernels read lengths one int32 apart
    policy = entry.stride_policies[0] if stride_policy is None else stride_policy  # "size": the cutlass wrapper's
    balanced = schedule == "balanced"  # its splits come from the lengths: the plan's split count is not used
    plan = make_plan(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace,
                     1 if balanced else num_kv_splits, policy, sm_count, schedule)
    if entry.plan_stage1 is not None:
        plan = entry.plan_stage1(q_nope, q_pe, kv_c_and_k_pe_cache, plan, checked, stage1, launch)
    for observer in _observers:
        observer(plan, page_table, workspace)
    args = (q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, float(sm_scale), plan, checked)
    out = entry.balanced(*args) if balanced else entry.run(*args)
    if checked:  # a negative length is an invalid request too; a device op, no host sync (graph-safe)
        out = torch.where((seq_lens < 0)[:, None, None], float("nan"), out)
    return out
