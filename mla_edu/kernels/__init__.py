"""MLA decode kernels with sgl-kernel's ``cutlass_mla_decode`` contract."""

from mla_edu.kernels.contract import DecodePlan, make_plan, pages_read
from mla_edu.kernels.cutlass import check_cutlass_args, cutlass_unavailable_reason
from mla_edu.kernels.decode import IMPLS, mla_decode
from mla_edu.kernels.workspace import (DEFAULT_SM_COUNT, SPLIT_CHOICES, get_workspace_size, gpu_block_h,
                                       num_kv_splits_for, triton_num_kv_splits)

__all__ = [
    "DEFAULT_SM_COUNT",
    "DecodePlan",
    "SPLIT_CHOICES",
    "IMPLS",
    "check_cutlass_args",
    "cutlass_unavailable_reason",
    "get_workspace_size",
    "gpu_block_h",
    "make_plan",
    "mla_decode",
    "num_kv_splits_for",
    "pages_read",
    "triton_num_kv_splits",
]
