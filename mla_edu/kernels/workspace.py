"""Split-KV count and workspace size with sgl-kernel's formulas (host side, shapes only).

Source: sgl-project/sglang ``sgl-kernel/csrc/attention/cutlass_sm100_mla/device/sm100_mla.hpp``
(``MLA::set_split_kv``) and ``kernel/sm100_fmha_mla_tma_warpspecialized.hpp``
(``get_workspace_size``: ``(sizeof(float) * D_latent + sizeof(float)) * H * split_kv * B`` with
H = 128 heads, the kernel's fixed tile). Nothing here reads a device value: in SGLang the
split count is a launch parameter, so under a CUDA graph it is frozen at capture.
"""

from __future__ import annotations

import torch
from mla_edu.util import cdiv, is_int

#: H100 / H200 SXM have 132 SMs; used where no GPU can be asked (CPU runs).
DEFAULT_SM_COUNT = 132
#: cutlass pads heads to its 128-row tile; workspace is sized for 128 heads whatever H is.
CUTLASS_HEADS = 128
D_LATENT = 512
#: float32 o_acc [B, 128, split, 512] + float32 lse [B, split, 128], per (batch, split); the kernel's LSE
#: layout (ptr_lse_acc + H * split, batch stride H * split_kv); mla_edu's kernels use [B, H, split], same bytes.
BYTES_PER_BATCH_SPLIT = (4 * D_LATENT + 4) * CUTLASS_HEADS  # 262,656


def _pos_int(name: str, v) -> int:
    if not is_int(v):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {v}")
    return v


def device_sm_count() -> int:
    """SM count of GPU 0, or ``DEFAULT_SM_COUNT`` without a GPU."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).multi_processor_count
    return DEFAULT_SM_COUNT


def num_kv_splits_for(max_seq_len: int, num_batches: int, sm_count: int = 0, num_kv_splits: int = 1) -> int:
    """The split count the kernel will use. ``num_kv_splits >= 1`` is taken as is; ``-1`` is auto:

    ``max_splits = ceil(max_seq_len / 128)``, ``heur = min(max_splits, max(1, sm_count // B))``,
    ``split = ceil(max_splits / ceil(max_splits / heur))`` (wave-aware rounding).
    """
    _pos_int("max_seq_len", max_seq_len)
    _pos_int("num_batches", num_batches)
    if not is_int(sm_count):
        raise TypeError(f"sm_count must be an int, got {type(sm_count).__name__}")
    if not is_int(num_kv_splits):
        raise TypeError(f"num_kv_splits must be an int, got {type(num_kv_splits).__name__}")
    if num_kv_splits >= 1:
        return num_kv_splits
    if num_kv_splits != -1:
        raise ValueError(f"num_kv_splits must be -1 (auto) or >= 1, got {num_kv_splits}")
    sms = sm_count if sm_count > 0 else device_sm_count()
    max_splits = cdiv(max_seq_len, 128)
    heur = min(max_splits, max(1, sms // num_batches))
    k_waves = cdiv(max_splits, heur)
    return cdiv(max_splits, k_waves)


def get_workspace_size(max_seq_len: int, num_batches: int, sm_count: int = 0, num_kv_splits: int = 1) -> int:
    """Bytes of workspace ``cutlass_mla_decode`` needs: 262,656 per (batch, split).

    Same signature and formula as ``sgl_kernel.cutlass_mla_get_workspace_size``. Note that it is
    not zero for one split, although the kernel touches the workspace only when split > 1.
    """
    split = num_kv_splits_for(max_seq_len, num_batches, sm_count, num_kv_splits)
    return BYTES_PER_BATCH_SPLIT * split * num_batches
