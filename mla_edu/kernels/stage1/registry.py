"""The stage-1 kernels of impl "triton", one registry entry each: kind -> the module that holds it.

A kind's module defines ``STAGE1 = Stage1Impl(...)``: whether the kernel runs a launch (``applies``), its
launch config for a plan (``launch_config``), its launch (``launch``) and what ``kernels.sm90`` compiles for
sm_90a (``compile_spec``). The module is imported at the kind's first use, so this registry (and
``mla_edu.kernels``) imports without Triton. Adding a kind: one module and one entry of ``KINDS``
(``docs/CONTRIBUTING.md``, "Adding a stage-1 kind").

The choice between them, written once here: a call names a kind or takes the device's default
(``DEFAULT_GLUON`` where the Gluon kernels fit the call, ``split_kv_triton.wgmma_applies``, else "tl"); a kind
whose ``applies`` is false for a launch runs its ``fallback`` instead ("seesaw" at 16 or 32 heads a program, or
on a cache TMA cannot read, runs "tma"): ``running_kind``.
"""

from __future__ import annotations

import importlib
from typing import Callable, NamedTuple

from mla_edu.device import require_triton


class Stage1Kind(NamedTuple):
    """One registry entry."""

    #: the module that defines ``STAGE1`` (a ``Stage1Impl``), imported at first use
    module: str
    #: a Gluon kernel (Hopper only: ``split_kv_triton.wgmma_applies`` must hold), or plain Triton (runs anywhere)
    gluon: bool
    #: the kind that runs a launch this kind's ``applies`` refuses; None: it applies to every launch it is given
    fallback: str | None = None


class Stage1Impl(NamedTuple):
    """What a kind's module provides. Every function takes the kind first (one module may hold several)."""

    #: (kind, block_h, cache) -> whether this kernel runs a launch with ``block_h`` heads a program on ``cache``
    applies: Callable[..., bool]
    #: (kind, plan, on_gpu) -> the LaunchConfig of a call with this ``DecodePlan``
    launch_config: Callable[..., tuple]
    #: (kind, launch: LaunchConfig, call: Stage1Call) -> None: writes ``out`` or the partials
    launch: Callable[..., None]
    #: (kind, page, dtype "bf16"/"fp16", final, heads, scheduled, batch, n_pages) -> CompileSpec; None: not compiled
    compile_spec: Callable[..., CompileSpec] | None = None


class Stage1Call(NamedTuple):
    """The arguments of one stage-1 launch (both custom ops': ``split_kv_triton.mla_decode_stage1`` and
    ``..._scheduled``). ``num_parts`` > 0: the balanced schedule's persistent grid (``num_splits`` 1, not final)."""

    q_nope: object  # [B, H, DL]
    q_pe: object  # [B, H, DR]
    cache: object  # [num_pages, PAGE, DL + DR]
    seq_lens: object  # int32 [B]
    table_flat: object  # int32: the table's storage from the view's first element
    o_acc: object  # float32 partials: [B, H, S, DL] (splits) or [rows, H, DL] (balanced)
    lse_acc: object  # float32 their log-sum-exps
    out: object  # [B, H, DL]
    sm_scale: float
    row_stride: int
    max_pages: int
    num_splits: int
    checked: bool
    final: bool
    num_parts: int = 0


class CompileSpec(NamedTuple):
    """What ``kernels.sm90`` compiles for a kind: the JIT function, its constexprs, the host objects whose types
    its descriptor arguments take, the compile options, whether it is Gluon, and whether its PTX holds the same
    code twice (one copy per warpgroup: the report counts one)."""

    kernel: object
    constexprs: dict
    descriptors: dict
    options: dict
    gluon: bool
    per_warpgroup: bool = False


#: kind -> entry; ``kernels.contract.STAGE1_KINDS`` names the built-in ones.
KINDS: dict[str, Stage1Kind] = {
    "tl": Stage1Kind("mla_edu.kernels.stage1.tl", gluon=False),  # plain Triton: the teaching kernel
    "cp.async": Stage1Kind("mla_edu.kernels.split_kv_wgmma", gluon=True),  # Gluon, pages by cp.async
    "tma": Stage1Kind("mla_edu.kernels.split_kv_wgmma", gluon=True),  # Gluon, pages by TMA where they can be
    "seesaw": Stage1Kind("mla_edu.kernels.split_kv_seesaw", gluon=True, fallback="tma"),  # two warpgroups, 64 heads
}
#: The kind a call that names none runs where the Gluon kernels fit it (``split_kv_triton.wgmma_applies``): the
#: two-warpgroup kernel for 64-head programs on a cache TMA reads, else (its fallback) the Gluon kernel reading pages
#: by TMA (through cp.async where ``split_kv_wgmma.tma_applies`` is false). On the H200 the seesaw kernel is the
#: faster where a program walks many tiles and about equal at the smallest shapes
#: (``results/kernel_bench_h200_stage1.md``); so is the balanced path with it
#: (``kernel_lab/results/kernel_bench_h200_schedule_v8.md``). Everywhere else "tl".
DEFAULT_GLUON = "seesaw"


def check_kind(kind) -> str:
    """``kind`` if it is registered, else ValueError naming the kinds."""
    if kind not in KINDS:
        raise ValueError(f"stage1 must be one of {tuple(KINDS)}, got {kind!r}")
    return kind


def impl(kind: str) -> Stage1Impl:
    """The kind's ``Stage1Impl``, its module imported now (RuntimeError without Triton)."""
    require_triton(f"the stage-1 kernel {check_kind(kind)!r}")
    return importlib.import_module(KINDS[kind].module).STAGE1


def running_kind(kind: str, block_h: int, cache) -> str:
    """The kind that runs a launch planned with ``kind``: itself where its ``applies``, else its fallback's."""
    while KINDS[check_kind(kind)].fallback is not None and not impl(kind).applies(kind, block_h, cache):
        kind = KINDS[kind].fallback
    return kind


def launch(kind: str, launch_config, call: Stage1Call) -> None:
    """Stage 1 by the kernel that runs ``kind`` (``running_kind``) with ``launch_config`` (BLOCK_H first)."""
    ran = running_kind(kind, launch_config[0], call.cache)
    impl(ran).launch(ran, launch_config, call)
