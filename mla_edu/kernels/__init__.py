"""MLA decode kernels with sgl-kernel's ``cutlass_mla_decode`` contract."""

from mla_edu.kernels.contract import DecodePlan, make_plan, pages_read
from mla_edu.kernels.cutlass import check_cutlass_args, cutlass_unavailable_reason
from mla_edu.kernels.decode import IMPLS, mla_decode
from mla_edu.kernels.workspace import DEFAULT_SM_COUNT, get_workspace_size, num_kv_splits_for

__all__ = [
    "DEFAULT_SM_COUNT",
    "DecodePlan",
    "IMPLS",
    "check_cutlass_args",
    "cutlass_unavailable_reason",
    "get_workspace_size",
    "make_plan",
    "mla_decode",
    "num_kv_splits_for",
    "pages_read",
]
