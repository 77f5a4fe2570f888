"""Split-KV count and workspace size with sgl-kernel's formulas (host side, shapes only).

Source: sgl-project/sglang ``sgl-kernel/csrc/attention/cutlass_sm100_mla/device/sm100_mla.hpp``
(``MLA::set_split_kv``) and ``kernel/sm100_fmha_mla_tma_warpspecialized.hpp``
(``get_workspace_size``: ``(sizeof(float) * D_latent + sizeof(float)) * H * split_kv * B`` with
H = 128 heads, the kernel's fixed tile). Nothing here reads a device value: in SGLang the
split count is a launch parameter, so under a CUDA graph it is frozen at capture.
"""

from __future__ import annotations

import torch

from mla_edu.util import cdiv, check_finite, check_int, is_int

#: H100 / H200 SXM have 132 SMs; used where no GPU can be asked (CPU runs). cutlass_mla_decode itself runs only on
#: SM100, and a B200 has 148: the automatic split counts can differ (at W = 33, B = 8: 11 here, 17 there), but for
#: the seed's graphs (64 and 128 requests, any width up to 33) they are the same.
DEFAULT_SM_COUNT = 132
#: cutlass pads heads to its 128-row tile; workspace is sized for 128 heads whatever H is.
CUTLASS_HEADS = 128
#: DeepSeek's MLA dims, the cutlass kernel's fixed ones (and the Gluon kernels'): kv_lora_rank (the latent, the
#: value) and qk_rope_head_dim (the shared RoPE key); a cache row holds D_LATENT + D_ROPE = 576 numbers
D_LATENT = 512
D_ROPE = 64
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
    if sm_count < 0:
        raise ValueError(f"sm_count must be >= 0 (0: the device's), got {sm_count}")
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


#: Split counts the Triton kernel's split rule chooses from (and the benchmark times).
SPLIT_CHOICES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)
#: Programs resident on one SM at once, keyed by heads per program, for the stage 1 a Hopper GPU runs (the
#: Gluon kernels, ``split_kv_wgmma``): two page tiles of 72 KB in shared memory each, so 1 at 16, 32 and 64
#: heads. (The tl kernel, which other GPUs run, fits 2 programs of 16 or 32 heads on an H200; the rule
#: then splits less than it could. Only the H200 was measured.)
PROGRAMS_PER_SM = {16: 1, 32: 1, 64: 1}
#: Below this many (request, head block, page) programs, even one page per program leaves most SMs
#: idle: the kernel then takes 16 heads per program, four times the programs (each page read once
#: per head block, from L2).
SMALL_GRID = 32
#: The balanced schedule at exactly 32 heads (the head count measured) in batches of at most this many requests runs
#: two 16-head programs a part, on half as many parts (``schedule.num_parts``). Measured on the H200
#: (``kernel_lab/results/partition_ab_h200_h32.md``): 1.36-1.45x faster at B=16 on three families of ragged batches,
#: 0.77-0.99x at B=64-256, where a part's share is long and one 32-head program's page costs less than two 16-head
#: programs' pages. B=17-63 was not timed.
HALF_BLOCK_BATCH = 16
#: Longest walk of one program the rule allows, in pages: at h_q=128 on the H200 one program per
#: (request, head block) over 512 pages (L=32768, page 64) ran 5-10% slower than 2-4 shorter ones in
#: two bench runs, where the wave count alone sees no difference.
MAX_PAGES_PER_PROGRAM = 256
#: Fixed cost of splitting, in page-times of one program: stage 2's launch. Fitted with ``MERGE_WEIGHT`` on every H200
#: timing of the split counts (``kernel_lab/results/split_model_fit_h200.md``).
SPLIT_COST_PAGES = 2.0
#: Weight of the merge's float32 partial bytes in ``stage2_pages``: they cost 1.5x their bytes' share of one page read
#: on every SM (``kernel_lab/results/split_model_fit_h200.md``).
MERGE_WEIGHT = 1.5


def gpu_block_h(heads: int, batch: int = 0, n_pages: int = 0, balanced: bool = False) -> int:
    """Query heads per program of the Triton kernel on a GPU: a power of two in [16, 64]; 16 when
    ``batch * head blocks * n_pages <= SMALL_GRID`` (a problem too small to fill the GPU otherwise), and for the
    balanced schedule (``balanced``) at 32 heads in batches of at most ``HALF_BLOCK_BATCH`` requests."""
    _pos_int("heads", heads)
    block = min(64, max(16, 1 << (heads - 1).bit_length()))
    if block > 16 and batch * cdiv(heads, block) * n_pages <= SMALL_GRID and batch > 0:
        return 16
    if balanced and heads == 32 and 0 < batch <= HALF_BLOCK_BATCH:
        return 16
    return block


def _check_cost(**costs) -> None:
    """Each cost a finite real number >= 0 (a negative or NaN cost would choose a count silently)."""
    for name, v in costs.items():
        check_finite(name, v)


def stage2_pages(rows: int, heads: int, sm_count: int, page_size: int, split_cost: float = SPLIT_COST_PAGES,
                 merge_weight: float = MERGE_WEIGHT, d_latent: int = D_LATENT, d_rope: int = D_ROPE) -> float:
    """Stage 2 (the merge) in page-times of one program: ``split_cost`` for its launch, plus its float32 partials
    ``[rows, heads, d_latent]``, written and read (``merge_weight`` times those bytes), over one page read on each
    of ``sm_count`` SMs."""
    check_int("rows", rows, 0)
    for name, v in (("heads", heads), ("sm_count", sm_count), ("page_size", page_size), ("d_latent", d_latent),
                    ("d_rope", d_rope)):
        check_int(name, v, 1)
    _check_cost(split_cost=split_cost, merge_weight=merge_weight)
    page_bytes = page_size * (d_latent + d_rope) * 2  # bf16 rows [page_size, d_latent + d_rope] of one page
    return split_cost + merge_weight * rows * heads * d_latent * 8 / (sm_count * page_bytes)


def triton_num_kv_splits(max_seq_len: int, num_batches: int, num_heads: int, page_size: int,
                         sm_count: int = 0, d_latent: int = D_LATENT, d_rope: int = D_ROPE, *,
                         split_cost: float = SPLIT_COST_PAGES, merge_weight: float = MERGE_WEIGHT) -> int:
    """The split count for ``mla_decode(impl="triton")``: host side, from shapes only (graph-safe).

    Cost model in page-times (the time one program takes for one page): the ``P * S`` programs
    (``P = B * ceil(H / block_h)``, ``block_h = gpu_block_h(H, B, n_pages)``) run in
    ``ceil(P * S / (PROGRAMS_PER_SM[block_h] * sm_count))`` waves of ``ceil(n_pages / S)`` pages each; with
    ``S > 1`` add stage 2, ``stage2_pages`` of ``B * S`` partial rows (with ``split_cost`` and ``merge_weight``,
    the package's constants unless given). The rule picks the cheapest ``S`` in ``SPLIT_CHOICES`` (at most
    ``n_pages``, and at most ``MAX_PAGES_PER_PROGRAM`` pages per program where a choice allows it). Unlike
    sgl-kernel's rule it counts head blocks, whole waves and the merge.
    """
    _pos_int("max_seq_len", max_seq_len)
    _pos_int("num_batches", num_batches)
    _pos_int("num_heads", num_heads)
    _pos_int("page_size", page_size)
    _pos_int("d_latent", d_latent)
    _pos_int("d_rope", d_rope)
    check_int("sm_count", sm_count, 0)  # 0: the device's
    _check_cost(split_cost=split_cost, merge_weight=merge_weight)
    sms = sm_count if sm_count > 0 else device_sm_count()
    n_pages = cdiv(max_seq_len, page_size)
    block_h = gpu_block_h(num_heads, num_batches, n_pages)
    programs = num_batches * cdiv(num_heads, block_h)
    slots = PROGRAMS_PER_SM[block_h] * sms
    best, best_cost = 1, None
    for s in SPLIT_CHOICES:
        if s > n_pages:
            break
        if cdiv(n_pages, s) > MAX_PAGES_PER_PROGRAM and s < max(SPLIT_CHOICES):
            continue
        cost = cdiv(programs * s, slots) * cdiv(n_pages, s)
        if s > 1:
            cost += stage2_pages(num_batches * s, num_heads, sms, page_size, split_cost, merge_weight, d_latent,
                                 d_rope)
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


def get_workspace_size(max_seq_len: int, num_batches: int, sm_count: int = 0, num_kv_splits: int = 1) -> int:
    """Bytes of workspace ``cutlass_mla_decode`` needs: 262,656 per (batch, split).

    Same signature and formula as ``sgl_kernel.cutlass_mla_get_workspace_size``. Note that it is
    not zero for one split, although the kernel touches the workspace only when split > 1.
    """
    split = num_kv_splits_for(max_seq_len, num_batches, sm_count, num_kv_splits)
    return BYTES_PER_BATCH_SPLIT * split * num_batches
