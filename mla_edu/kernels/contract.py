"""Argument checks and the page-table addressing plan shared by every ``mla_decode`` impl.

Addressing (the crux of SGLang #6998): a kernel reads page ``j`` of request ``b`` from flat
storage index ``storage_offset + b * row_stride + j`` of the page-table tensor.

* ``stride_policy="size"`` (sgl-kernel ``cutlass_mla_decode``): ``row_stride = page_table.size(1)``
  and ``max_seq_len = PAGE * page_table.size(1)``; the C++ wrapper builds
  ``stride_PT = make_stride(_1{}, page_count_per_seq)`` from ``page_table.sizes()[1]``
  (``sgl-kernel/csrc/attention/cutlass_mla_kernel.cu``). A narrow view ``buf[:B, :w]`` of a wider
  buffer is then read with the wrong row stride, outside the view.
* ``stride_policy="stride"`` (FlashMLA passes ``block_table.stride(0)``): the view's real stride.

Every impl reads ``n_pages_b = ceil(seq_lens[b] / PAGE)`` entries per request (the real kernel
reads as many as the length needs, whatever ``size(1)`` says). A static bound is needed for
fixed shapes: ``max_pages = max(size(1), stride(0))`` (the row of the underlying buffer).
Requests needing more pages than that, table reads past the end of the storage, and page ids
outside ``[0, num_pages)`` are "invalid reads": ``checked=True`` gives NaN for that request;
``checked=False`` clamps (flat index into the storage, page id into ``[0, num_pages)``, length to
``max_pages * PAGE``) and computes on whatever is there. The real kernel reads arbitrary memory.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from mla_edu.kernels import schedule as balanced_schedule
from mla_edu.kernels.stage1.registry import KINDS
from mla_edu.kernels.workspace import BYTES_PER_BATCH_SPLIT, device_sm_count, num_kv_splits_for
from mla_edu.util import INT32_MAX, is_int

STRIDE_POLICIES = ("size", "stride")
MAX_SPLITS = 256
#: Stage-1 kernels of the Triton impl built in (the registry, ``kernels.stage1.KINDS``, also holds any added
#: later): "tl" the plain-Triton kernel (every GPU, checked calls, the CPU interpreter); "cp.async" and "tma" the
#: Gluon kernels of ``split_kv_wgmma`` (Hopper only), named by how they read pages; "seesaw" the two-warpgroup
#: kernel of ``split_kv_seesaw`` for 64-head programs on a cache TMA reads (else what "tma" runs).
STAGE1_KINDS = tuple(KINDS)
GLUON_KINDS = tuple(k for k, entry in KINDS.items() if entry.gluon)  # the Gluon kernels (Hopper only)


class LaunchConfig(NamedTuple):
    """A stage-1 launch config: heads and tokens per program, warps, pipeline stages."""

    block_h: int
    block_n: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class DecodePlan:
    """Launch parameters: host ints computed from shapes and strides only (frozen under a graph)."""

    batch: int
    heads: int
    d_latent: int  # value dim (kv_lora_rank)
    d_rope: int
    page_size: int
    num_pages: int
    row_stride: int
    max_pages: int  # static bound on table entries read per request
    table_offset: int  # storage offset of the page-table view
    table_reach: int  # entries from table_offset to the end of the storage
    max_seq_len: int  # PAGE * page_table.size(1), as the cutlass wrapper computes it
    num_splits: int
    stride_policy: str
    stage1: str | None = None  # the stage-1 kernel (STAGE1_KINDS) of an impl that has a choice, else None
    launch: LaunchConfig | None = None  # its launch config (None where the impl has no choice)
    schedule: str = "splits"  # "balanced": splits from the lengths (``kernels.schedule``), num_splits unused
    parts: int = 0  # the balanced schedule's parts (``check_balanced``, at make_plan's SM count); 0 for "splits"
    sm_count: int = 0  # the SM count make_plan counted on (the split rule's and the balanced schedule's)

    @property
    def width(self) -> int:
        """The view's columns (``page_table.size(1)``, at least 1): what the launch is sized for (the head block, the
        stage-1 kernel, the balanced schedule's parts), where ``max_pages`` bounds what a request may read."""
        return max(self.max_seq_len // self.page_size, 1)


def check_page_table_layout(page_table: torch.Tensor) -> None:
    """ValueError unless each row's entries are adjacent in memory (``stride(1) == 1``).

    Every kernel here steps through a row one int32 at a time, as cutlass does (its wrapper's
    ``stride_PT = make_stride(_1{}, ...)``: the column stride is the constant 1), so a column-strided
    view (``buf[:, ::2]``) or a column-major table (``buf.t()``) would be read at the wrong entries
    under either stride policy. Rows may be strided (that is ``stride(0)``).
    """
    if page_table.dim() == 2 and page_table.size(1) > 1 and page_table.stride(1) != 1:
        raise ValueError(
            "page_table entries of a row must be contiguous (stride(1) == 1), "
            f"got strides {tuple(page_table.stride())} for shape {tuple(page_table.shape)}: "
            "a column-strided or column-major table; pass .contiguous() or a row slice of a row-major buffer")


def check_flags(checked, sm_count) -> None:
    """TypeError/ValueError for a non-bool ``checked`` or an ``sm_count`` that is not None or an int > 0."""
    if not isinstance(checked, bool):
        raise TypeError(f"checked must be a bool, got {type(checked).__name__}")
    if sm_count is not None and not is_int(sm_count):
        raise TypeError(f"sm_count must be None or an int, got {type(sm_count).__name__}")
    if sm_count is not None and sm_count < 1:
        raise ValueError(f"sm_count must be >= 1 (None: the GPU's count), got {sm_count}")


def check_workspace_layout(workspace: torch.Tensor) -> None:
    """ValueError unless the workspace bytes are contiguous and start 4-byte aligned (float32 partials)."""
    if workspace.numel() > 1 and workspace.stride(0) != 1:
        raise ValueError(f"workspace must be contiguous bytes, got stride {workspace.stride(0)}")
    if workspace.data_ptr() % 4:
        raise ValueError(f"workspace must start on a 4-byte boundary (it holds float32 partials), got an address "
                         f"{workspace.data_ptr() % 4} bytes past one (storage offset {workspace.storage_offset()})")


def check_tensors(q_nope, q_pe, cache, seq_lens, page_table, workspace) -> None:
    """TypeError naming the first decode argument that is not a torch.Tensor."""
    for name, t in (("q_nope", q_nope), ("q_pe", q_pe), ("kv_c_and_k_pe_cache", cache), ("seq_lens", seq_lens),
                    ("page_table", page_table), ("workspace", workspace)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def check_lengths_and_table(seq_lens, page_table, b: int) -> None:
    """seq_lens int32 ``[B]`` and page_table int32 (both contracts: every impl's and sgl-kernel's)."""
    if seq_lens.dtype != torch.int32:
        raise TypeError(f"seq_lens must be int32, got {seq_lens.dtype}")
    if page_table.dtype != torch.int32:
        raise TypeError(f"page_table must be int32, got {page_table.dtype}")
    if seq_lens.dim() != 1 or seq_lens.numel() != b:
        raise ValueError(f"seq_lens must be [B={b}], got {tuple(seq_lens.shape)}")


NOT_ABSORBED = "is q_nope absorbed (multiplied by W_UK, notebook 02)?"


def check_device_and_scale(tensors, sm_scale) -> None:
    """The decode tensors on one device, and ``sm_scale`` a finite float > 0 (every impl's, cutlass's too)."""
    devs = {t.device for t in tensors}
    if len(devs) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(str(d) for d in devs)}")
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)):
        raise TypeError(f"sm_scale must be a float, got {type(sm_scale).__name__}")
    if not (sm_scale > 0 and math.isfinite(sm_scale)):
        raise ValueError(f"sm_scale must be a finite float > 0, got {sm_scale}")


def check_common(q_nope, q_pe, cache, seq_lens, page_table, workspace, sm_scale, num_kv_splits,
                 sm_count=None) -> None:
    """Shape/dtype checks every impl applies (ValueError/TypeError naming expected vs got). ``sm_count`` is
    ``mla_decode``'s (``check_flags`` checks it; only the cutlass check sizes a workspace with it)."""
    check_tensors(q_nope, q_pe, cache, seq_lens, page_table, workspace)
    if q_nope.dim() != 3 or q_pe.dim() != 3:
        raise ValueError(f"q_nope and q_pe must be 3-D [B, H, D], got {tuple(q_nope.shape)} and {tuple(q_pe.shape)}")
    if cache.dim() != 3:
        raise ValueError("kv_c_and_k_pe_cache must be 3-D [num_pages, PAGE, D_latent + D_rope], "
                         f"got {tuple(cache.shape)}")
    b, h, dl = q_nope.shape
    if tuple(q_pe.shape[:2]) != (b, h):
        raise ValueError(f"q_pe must be [B={b}, H={h}, D_rope], got {tuple(q_pe.shape)}")
    dr = q_pe.size(2)
    if cache.size(0) < 1 or cache.size(1) < 1:
        raise ValueError("kv_c_and_k_pe_cache must hold at least one page of at least one token, "
                         f"got shape {tuple(cache.shape)} ({cache.size(0)} pages of {cache.size(1)} tokens)")
    if dl < dr:  # MLA's latent (512) is wider than its rope part (64): the two given the other way round
        raise ValueError(f"q_nope (the latent, kv_lora_rank wide) must be at least as wide as q_pe (the rope part), "
                         f"got {dl} and {dr}: are q_nope and q_pe swapped?")
    if dl < cache.size(2) - dr:  # narrower than the cache's latent: the per-head q of the paper, not absorbed
        raise ValueError(f"q_nope: expected last dim kv_lora_rank = {cache.size(2)} - {dr} = {cache.size(2) - dr} "
                         f"(kv_c_and_k_pe_cache's last dim minus q_pe's), got {dl}: {NOT_ABSORBED}")
    if cache.size(2) != dl + dr:
        raise ValueError(f"kv_c_and_k_pe_cache last dim must be D_latent + D_rope = {dl} + {dr} = {dl + dr}, "
                         f"got {cache.size(2)}")
    if not q_nope.dtype.is_floating_point or q_pe.dtype != q_nope.dtype or cache.dtype != q_nope.dtype:
        raise TypeError(f"q_nope, q_pe and kv_c_and_k_pe_cache must share one floating dtype, got "
                        f"{q_nope.dtype}, {q_pe.dtype}, {cache.dtype}")
    check_lengths_and_table(seq_lens, page_table, b)
    if page_table.dim() != 2 or page_table.size(0) != b:
        raise ValueError(f"page_table must be [B={b}, block_num], got {tuple(page_table.shape)}")
    if page_table.size(1) < 1:
        raise ValueError(f"page_table must have block_num >= 1 columns, got {page_table.size(1)}")
    check_page_table_layout(page_table)
    if workspace.dtype != torch.uint8 or workspace.dim() != 1:
        raise TypeError("workspace must be a 1-D uint8 tensor, "
                        f"got {workspace.dtype} of shape {tuple(workspace.shape)}")
    check_device_and_scale((q_nope, q_pe, cache, seq_lens, page_table, workspace), sm_scale)
    if not is_int(num_kv_splits):
        raise TypeError(f"num_kv_splits must be an int, got {type(num_kv_splits).__name__}")
    if not (num_kv_splits == -1 or 1 <= num_kv_splits <= MAX_SPLITS):
        raise ValueError(f"num_kv_splits must be -1 (auto) or in [1, {MAX_SPLITS}], got {num_kv_splits}")


def split_workspace_bytes(batch: int, heads: int, splits: int, d_latent: int) -> int:
    """Bytes this package's impls write for ``splits`` > 1 KV splits of ``batch`` requests at ``heads`` query heads:
    the partial outputs and their LSE, ``[B, H, S, D_latent + 1]`` float32, and at least sgl-kernel's formula (which
    counts 128 heads a split)."""
    ours = batch * heads * splits * (d_latent + 1) * 4
    theirs = BYTES_PER_BATCH_SPLIT * splits * batch
    return max(ours, theirs)


def workspace_bytes_needed(plan: DecodePlan) -> int:
    """Bytes this package's impls write when splits > 1: ``split_workspace_bytes`` of the plan's shapes."""
    return split_workspace_bytes(plan.batch, plan.heads, plan.num_splits, plan.d_latent)


def check_partials_fit(floats: int, what: str) -> None:
    """ValueError when the partial outputs ``o_acc`` (``floats`` float32 values: ``[B, H, S, D_latent]``, or the
    balanced schedule's ``[rows, H, D_latent]``) reach past int32 indices, which the kernels compute them in."""
    if floats - 1 > INT32_MAX:
        raise ValueError(f"workspace: {floats} float32 partial outputs ({what}) reach past int32 indices (at most "
                         f"{INT32_MAX + 1} values); expected a smaller batch or fewer splits")


def check_stride_policy(stride_policy) -> None:
    """ValueError unless ``stride_policy`` is one of ``STRIDE_POLICIES``."""
    if stride_policy not in STRIDE_POLICIES:
        raise ValueError(f"stride_policy must be one of {STRIDE_POLICIES} (or None for the impl's default), "
                         f"got {stride_policy!r}")


def check_balanced(plan: DecodePlan, workspace: torch.Tensor, sm_count: int) -> int:
    """The balanced schedule's parts for ``plan`` on ``sm_count`` SMs (``schedule.num_parts``, sized for the view's
    width), after its checks: the partition fits int32 (``schedule.check_line_fits``), so do the partials, and the
    workspace holds them (``check_balanced_workspace``); ValueError naming what is needed otherwise."""
    b, h, dl = plan.batch, plan.heads, plan.d_latent
    parts = balanced_schedule.num_parts(h, sm_count, b, plan.width)  # max_pages bounds the reads
    balanced_schedule.check_line_fits(b, plan.max_pages, parts, plan.page_size)
    rows = balanced_schedule.workspace_rows(b, parts)
    check_partials_fit(rows * h * dl, f"B={b}, H={h}, {rows} rows of partials")
    check_balanced_workspace(plan, workspace, parts, sm_count)
    return parts


def check_balanced_workspace(plan: DecodePlan, workspace: torch.Tensor, parts: int, sm_count: int) -> None:
    """ValueError unless ``workspace`` holds the balanced schedule's partials of ``plan`` at ``parts`` parts
    (``schedule.workspace_bytes``; the message names the ``sm_count`` the parts were counted on)."""
    b, h, dl = plan.batch, plan.heads, plan.d_latent
    check_workspace_layout(workspace)
    need = balanced_schedule.workspace_bytes(b, h, dl, parts)
    if workspace.numel() < need:
        rows = balanced_schedule.workspace_rows(b, parts)
        raise ValueError(f"workspace too small for the balanced schedule: need {need} bytes (B={b}, H={h}, "
                         f"{rows} rows of partials, {sm_count} SMs), got {workspace.numel()} bytes; size it with "
                         "schedule.workspace_bytes(B, H, D_latent, schedule.num_parts(H, sm_count, B, "
                         "page_table.size(1)))")


def make_plan(q_nope, q_pe, cache, seq_lens, page_table, workspace, num_kv_splits, stride_policy="size",
              sm_count=None, schedule="splits") -> DecodePlan:
    """Resolve the launch parameters from shapes/strides; check the workspace when splits > 1, or for the
    balanced schedule's partials (``check_balanced``, on ``sm_count`` SMs: None, the device's)."""
    check_stride_policy(stride_policy)
    b, h, dl = q_nope.shape
    dr = q_pe.size(2)
    num_pages, page = cache.size(0), cache.size(1)
    width = page_table.size(1)
    row_stride = width if stride_policy == "size" else page_table.stride(0)
    max_pages = max(width, page_table.stride(0), 1)
    offset = page_table.storage_offset()
    reach = page_table.untyped_storage().nbytes() // page_table.element_size() - offset
    max_seq_len = page * width
    if max_pages * page > INT32_MAX:
        raise ValueError(f"page_table rows address {max_pages} pages of {page} tokens = {max_pages * page} tokens, "
                         f"past int32 positions (at most {INT32_MAX}); expected a narrower table")
    last_row = (max(b, 1) - 1) * row_stride  # the kernels index the table in int32: program id x row stride
    if last_row + max_pages - 1 > INT32_MAX:
        raise ValueError(f"page_table: request {b - 1}'s row starts at entry {last_row} ({b} rows {row_stride} "
                         f"entries apart), and its {max_pages} pages reach past int32 indices (at most {INT32_MAX}); "
                         "expected fewer rows or a narrower table")
    sms = device_sm_count() if not sm_count else int(sm_count)
    splits = num_kv_splits_for(max_seq_len, max(b, 1), sms, num_kv_splits)
    plan = DecodePlan(b, h, dl, dr, page, num_pages, row_stride, max_pages, offset, reach, max_seq_len, splits,
                      stride_policy, schedule=schedule, sm_count=sms)
    if splits > 1:
        check_workspace_layout(workspace)
        need = workspace_bytes_needed(plan)
        check_partials_fit(b * h * splits * dl, f"B={b}, H={h}, {splits} splits")
        if workspace.numel() < need:
            raise ValueError(
                f"workspace too small for {splits} KV splits: need {need} bytes "
                f"(B={b}, max_seq_len={max_seq_len}, split={splits}), got {workspace.numel()} bytes; "
                f"size it with get_workspace_size(max_seq_len, B, sm_count, num_kv_splits)"
            )
    if schedule == "balanced":
        plan = dataclasses.replace(plan, parts=check_balanced(plan, workspace, sms))
    return plan


def pages_read(page_table: torch.Tensor, n_pages: list[int], row_stride: int,
               clamp: bool = True) -> list[list[int | None]]:
    """The page ids the kernel reads: request ``b``'s page ``j`` at flat index ``b * row_stride + j``
    of the table's storage, counted from the view's first element (so a narrow view reads past its
    own columns). An index past the end of the storage is clamped to its last element, as the
    unchecked kernel does, or with ``clamp=False`` gives ``None`` (a read outside the buffer)."""
    if not is_int(row_stride) or row_stride < 0:
        raise ValueError(f"row_stride must be an int >= 0 (entries between rows), got {row_stride!r}")
    check_page_table_layout(page_table)
    reach = page_table.untyped_storage().nbytes() // page_table.element_size() - page_table.storage_offset()
    flat = torch.as_strided(page_table, (reach,), (1,), page_table.storage_offset()).tolist()

    def at(i: int):
        return flat[min(i, reach - 1)] if clamp or i < reach else None

    return [[at(b * row_stride + j) for j in range(n)] for b, n in enumerate(n_pages)]


def flat_table(page_table: torch.Tensor, plan: DecodePlan) -> torch.Tensor:
    """1-D view from the table view's first element to the end of its storage (reaches outside the view)."""
    return torch.as_strided(page_table, (plan.table_reach,), (1,), plan.table_offset)


def workspace_views(workspace: torch.Tensor, plan: DecodePlan):
    """float32 views into the workspace bytes: o_acc ``[B, H, S, D_latent]`` then lse ``[B, H, S]``."""
    b, h, s, d = plan.batch, plan.heads, plan.num_splits, plan.d_latent
    n_o, n_l = b * h * s * d, b * h * s
    f32 = workspace[: 4 * (n_o + n_l)].view(torch.float32)
    return f32[:n_o].view(b, h, s, d), f32[n_o:].view(b, h, s)
