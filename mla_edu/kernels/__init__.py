"""MLA decode kernels with sgl-kernel's ``cutlass_mla_decode`` contract. Imports without Triton
(``triton_available``): the Triton kernels load when a call uses them."""

from mla_edu.device import triton_available
from mla_edu.kernels.contract import (STAGE1_KINDS, DecodePlan, LaunchConfig, make_plan, pages_read,
                                      split_workspace_bytes)
from mla_edu.kernels.cutlass import check_cutlass_args, cutlass_unavailable_reason
from mla_edu.kernels.decode import IMPLS, Impl, mla_decode, observe_plans
from mla_edu.kernels.workspace import (DEFAULT_SM_COUNT, SPLIT_CHOICES, get_workspace_size, gpu_block_h,
                                       num_kv_splits_for, triton_num_kv_splits)

__all__ = [
    "DEFAULT_SM_COUNT",
    "DecodePlan",
    "SPLIT_CHOICES",
    "IMPLS",
    "Impl",
    "LaunchConfig",
    "STAGE1_KINDS",
    "check_cutlass_args",
    "cutlass_unavailable_reason",
    "get_workspace_size",
    "gpu_block_h",
    "make_plan",
    "mla_decode",
    "observe_plans",
    "num_kv_splits_for",
    "pages_read",
    "split_workspace_bytes",
    "triton_available",
    "triton_num_kv_splits",
]
