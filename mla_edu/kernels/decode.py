"""``mla_decode``: one call, sgl-kernel's ``cutlass_mla_decode`` contract, four implementations."""

from __future__ import annotations

import torch

from mla_edu.kernels.contract import check_common, check_flags, make_plan

IMPLS = ("reference", "torch", "triton", "cutlass")
#: stride policy each impl uses when ``stride_policy=None``: all follow the cutlass contract.


def mla_decode(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, sm_scale, num_kv_splits=1, *,
               impl="torch", stride_policy=None, checked=False, sm_count=None) -> torch.Tensor:
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

    Refused up front (ValueError/TypeError): a non-finite or non-positive ``sm_scale``, a page table
    whose rows are not contiguous (``stride(1) != 1``), a misaligned or strided workspace when
    splits > 1. ``B = 0`` returns an empty ``[0, H, D_latent]`` output for every impl.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    check_flags(checked, sm_count)
    if isinstance(q_nope, torch.Tensor) and q_nope.dim() == 3 and q_nope.size(0) == 0:
        # B = 0: no kernel runs, every impl returns an empty output (after the general checks)
        check_common(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, sm_scale, num_kv_splits)
        return q_nope.new_empty((0, q_nope.size(1), q_nope.size(2)))
    if impl == "cutlass":
        if stride_policy not in (None, "size"):
            raise ValueError("impl='cutlass' always uses stride_policy='size' (its wrapper's contract), "
                             f"got {stride_policy!r}")
        from mla_edu.kernels.cutlass import mla_decode_cutlass

        return mla_decode_cutlass(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, sm_scale,
                                  num_kv_splits)
    check_common(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, sm_scale, num_kv_splits)
    policy = "size" if stride_policy is None else stride_policy  # every impl mirrors the cutlass wrapper
    plan = make_plan(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, num_kv_splits, policy,
                     sm_count)
    if impl == "reference":
        from mla_edu.kernels.reference import mla_decode_reference

        out = mla_decode_reference(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, float(sm_scale), plan,
                                   checked).to(q_nope.dtype)
    elif impl == "torch":
        from mla_edu.kernels.split_kv_torch import mla_decode_torch

        out = mla_decode_torch(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, float(sm_scale),
                               plan, checked)
    else:
        from mla_edu.kernels.split_kv_triton import mla_decode_triton

        out = mla_decode_triton(q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, float(sm_scale),
                                plan, checked)
    if checked:  # a negative length is an invalid request too; a device op, no host sync (graph-safe)
        out = torch.where((seq_lens < 0)[:, None, None], float("nan"), out)
    return out
