"""The real thing: ``sgl_kernel.cutlass_mla_decode`` (CUTLASS SM100, Blackwell only).

``check_cutlass_args`` reproduces the wrapper's checks (sgl-project/sglang
``sgl-kernel/python/sgl_kernel/attention.py`` as of SGLang PR #7184: ``num_kv_splits`` from PR #6929,
``q_nope``/``q_pe`` from #7145, ``sm_scale`` and one split by default from #7184; ``docs/sources.md``) plus the C++
``can_implement`` page-size rules (``sm100_fmha_mla_tma_warpspecialized.hpp``: power-of-two page
<= 128 on the cp.async path, exactly 128 on the TMA path) and checks the real wrapper does not do: the
workspace size, each row's entries contiguous (the kernel's column stride is the constant 1), and rows
``size(1)`` apart (the kernel's row stride is ``page_table.sizes()[1]``, ``cutlass_mla_kernel.cu`` lines 104 and
129 at ``7059ae16f``: a narrow view ``buf[:, :w]`` of a wider buffer sends rows 1.. into row 0's entries,
SGLang #6998). It runs on any machine, so the contract is tested on CPU.
"""

from __future__ import annotations

import torch

from mla_edu.kernels.contract import (NOT_ABSORBED, DecodePlan, check_device_and_scale, check_lengths_and_table,
                                      check_page_table_layout, check_tensors)
from mla_edu.kernels.workspace import CUTLASS_HEADS, D_LATENT, D_ROPE, get_workspace_size
from mla_edu.util import is_int


def check_cutlass_args(q_nope, q_pe, cache, seq_lens, page_table, workspace, num_kv_splits=1, sm_count=0, *,
                       allow_row_stride_mismatch: bool = False) -> None:
    """Raise ValueError/TypeError where ``cutlass_mla_decode`` would reject (or misread) its arguments.

    ``allow_row_stride_mismatch=True`` accepts a table whose rows are not ``size(1)`` apart (the kernel then reads
    rows 1.. at the wrong entries): only for code that reproduces SGLang #6998 on purpose.
    """
    if not isinstance(allow_row_stride_mismatch, bool):
        raise TypeError(f"allow_row_stride_mismatch must be a bool, got {type(allow_row_stride_mismatch).__name__}")
    check_tensors(q_nope, q_pe, cache, seq_lens, page_table, workspace)
    for name, t in (("q_nope", q_nope), ("q_pe", q_pe), ("kv_c_and_k_pe_cache", cache)):
        if t.dim() != 3:
            raise ValueError(f"{name} must be a 3-D tensor, got {t.dim()}-D {tuple(t.shape)}")
    b, h, d_nope = q_nope.shape
    if tuple(q_pe.shape[:2]) != (b, h):
        raise ValueError(f"q_pe must be [B={b}, H={h}, 64], got {tuple(q_pe.shape)}")
    page = cache.size(1)
    if d_nope != D_LATENT:
        raise ValueError(f"q_nope last dim must be {D_LATENT} (kv_lora_rank), got {d_nope}"
                         + (f": {NOT_ABSORBED}" if d_nope < D_LATENT else ""))
    if q_pe.size(2) != D_ROPE:
        raise ValueError(f"q_pe last dim must be {D_ROPE} (qk_rope_head_dim), got {q_pe.size(2)}")
    if cache.size(2) != D_LATENT + D_ROPE:
        raise ValueError(f"kv_c_and_k_pe_cache last dim must be {D_LATENT + D_ROPE}, got {cache.size(2)}")
    if h > CUTLASS_HEADS:
        raise ValueError(f"H must be <= {CUTLASS_HEADS} (heads are padded to the 128-row tile), got {h}")
    if page <= 0 or page & (page - 1) or page > 128:
        raise ValueError(f"page size must be a power of two <= 128, got {page}")
    if page_table.dim() != 2:
        raise ValueError(f"page_table must be 2-D [B, block_num], got {tuple(page_table.shape)}")
    if page_table.size(0) != b:
        raise ValueError(f"page_table must have B={b} rows, got {page_table.size(0)}")
    block_num = page_table.size(1)
    if block_num <= 0:
        raise ValueError(f"block_num must be > 0, got {block_num}")
    if block_num % (128 // page) != 0:
        raise ValueError(f"block_num must be a multiple of 128 / PAGE = {128 // page}, got {block_num}")
    check_page_table_layout(page_table)
    if page_table.size(0) > 1 and page_table.stride(0) != block_num and not allow_row_stride_mismatch:
        raise ValueError(
            f"page_table rows must be size(1) = {block_num} entries apart (the kernel's row stride is size(1)), "
            f"got stride(0) = {page_table.stride(0)} for shape {tuple(page_table.shape)}: a narrow or row-strided "
            "view, whose rows 1.. the kernel would read at the wrong entries (SGLang #6998); pass .contiguous()")
    if q_nope.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"q_nope dtype must be float16 or bfloat16, got {q_nope.dtype}")
    if not q_nope.dtype == q_pe.dtype == cache.dtype:
        raise TypeError("q_nope, q_pe, kv_c_and_k_pe_cache must share a dtype, "
                        f"got {q_nope.dtype}, {q_pe.dtype}, {cache.dtype}")
    check_lengths_and_table(seq_lens, page_table, b)
    if workspace.dtype != torch.uint8:
        raise TypeError(f"workspace must be uint8, got {workspace.dtype}")
    if not is_int(num_kv_splits) or not (num_kv_splits == -1 or num_kv_splits >= 1):
        raise ValueError(f"num_kv_splits must be -1 (auto) or >= 1, got {num_kv_splits!r}")
    if b == 0:  # no request: nothing to size (this package's get_workspace_size wants num_batches > 0)
        return
    need = get_workspace_size(page * block_num, b, sm_count or 0, num_kv_splits)
    if workspace.numel() < need:
        raise ValueError(f"workspace must hold >= {need} bytes (get_workspace_size({page * block_num}, {b}, "
                         f"{sm_count or 0}, {num_kv_splits})), got {workspace.numel()}")


def cutlass_unavailable_reason(device=None) -> str | None:
    """``None`` if ``sgl_kernel.cutlass_mla_decode`` can run here, else a one-line reason."""
    if not torch.cuda.is_available():
        return "cutlass_mla_decode needs a CUDA GPU with SM100 (Blackwell); no GPU is present"
    dev = torch.device(device) if device is not None else torch.device("cuda")
    if dev.type != "cuda":
        return f"cutlass_mla_decode needs CUDA tensors, got tensors on {dev}"
    major, minor = torch.cuda.get_device_capability(dev)
    if major != 10:
        return f"cutlass_mla_decode is a CUTLASS SM100 (Blackwell) kernel; this GPU is sm{major}{minor}"
    try:
        import sgl_kernel  # noqa: F401
    except Exception as e:  # ImportError, or a broken binary
        return f"sgl_kernel does not import ({type(e).__name__}: {e}); install the 'gpu' extra beside a CUDA torch"
    if not hasattr(sgl_kernel, "cutlass_mla_decode"):
        return "this sgl_kernel has no cutlass_mla_decode"
    return None


def check_cutlass_call(q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale, num_kv_splits,
                       sm_count=None) -> None:
    """``check_cutlass_args`` in the argument order of ``mla_decode``'s other checks (``IMPLS["cutlass"].check``),
    and what every impl checks besides: one device, ``sm_scale`` a finite float > 0.

    A narrow view is let through: ``mla_decode`` reads every impl's rows ``size(1)`` apart, as the wrapper does, so
    that the pre-fix backend reproduces SGLang #6998 with any impl, this one included."""
    check_cutlass_args(q_nope, q_pe, cache, seq_lens, page_table, workspace, num_kv_splits, sm_count or 0,
                       allow_row_stride_mismatch=True)
    check_device_and_scale((q_nope, q_pe, cache, seq_lens, page_table, workspace), sm_scale)


def mla_decode_cutlass(q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale: float, plan: DecodePlan,
                       checked: bool = False) -> torch.Tensor:
    """Call the real kernel with the plan's split count (sgl-kernel's own formula), or raise RuntimeError with the
    reason it cannot run here. ``checked`` has no meaning for it: the real kernel reads whatever it is given."""
    reason = cutlass_unavailable_reason(q_nope.device)
    if reason is not None:
        raise RuntimeError(reason)
    import sgl_kernel  # optional: only where cutlass_unavailable_reason found it

    return sgl_kernel.cutlass_mla_decode(q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale,
                                         plan.num_splits)
