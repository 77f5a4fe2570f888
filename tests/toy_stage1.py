"""A toy stage-1 kind for ``tests/test_stage1_registry.py``: stage 1 in torch ops (``split_kv_torch``'s), behind
the registry's protocol. Adding it is this module and one entry of ``kernels.stage1.KINDS``."""

from mla_edu.kernels.contract import LaunchConfig
from mla_edu.kernels.split_kv_torch import stage1_partials
from mla_edu.kernels.stage1 import Stage1Impl


def _launch_config(kind, plan, on_gpu: bool) -> LaunchConfig:
    return LaunchConfig(plan.heads, 1, 1, 1)  # one program a request and split, all heads: nothing to tune


def _launch(kind, launch, call) -> None:
    if call.num_parts:
        raise ValueError("the toy stage-1 kind has no balanced schedule")
    o, lse = stage1_partials(call.q_nope, call.q_pe, call.cache, call.seq_lens, call.table_flat, 0, call.sm_scale,
                             call.row_stride, call.max_pages, call.num_splits, call.checked, trim=True)
    if call.final:  # one split: the output itself
        call.out.copy_(o[:, :, 0])
    else:  # the partials stage 2 merges: o_acc [B, H, S, DL], lse [B, H, S]
        call.o_acc.copy_(o)
        call.lse_acc.copy_(lse)


STAGE1 = Stage1Impl(applies=lambda kind, block_h, cache: True, launch_config=_launch_config, launch=_launch)
