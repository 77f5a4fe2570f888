"""The kernel rules the notebooks and the bench rest on, each pinned so that bending it fails a test: the
triton backend's split rule (``workspace.triton_num_kv_splits`` and its head block ``gpu_block_h``) and the
workspace contract (``contract.make_plan``: alignment, and the bytes needed with the LSE words).

Each test's docstring names the one-line changes that were applied to a copy of the package to see it fail.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mla_edu.kernels import contract, mla_decode
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kernels.workspace import (BYTES_PER_BATCH_SPLIT, MAX_PAGES_PER_PROGRAM, MERGE_WEIGHT, PROGRAMS_PER_SM,
                                       SPLIT_CHOICES, SPLIT_COST_PAGES, gpu_block_h, stage2_pages,
                                       triton_num_kv_splits)

# ---- the triton split rule ------------------------------------------------------------------------------------
# gpu_block_h(heads, batch, n_pages): the power of two >= heads, clamped to [16, 64]; 16 when the grid
# batch * ceil(heads / block) * n_pages is <= SMALL_GRID = 32 (and batch > 0).
BLOCK_H_TABLE = [  # heads, batch, n_pages -> block
    (1, 0, 0, 16), (16, 0, 0, 16), (17, 0, 0, 32), (32, 0, 0, 32), (33, 0, 0, 64), (64, 0, 0, 64),
    (100, 0, 0, 64), (128, 0, 0, 64), (16, 100, 100, 16),
    (128, 1, 16, 16),  # 1 * 2 blocks * 16 pages = 32 <= 32: the small grid
    (128, 1, 17, 64),  # 34 > 32
    (64, 2, 16, 16), (64, 1, 33, 64),  # 32 and 33 programs-pages
    (32, 1, 32, 16), (32, 1, 33, 32),
    (128, 0, 1, 64),  # no batch given: never the small grid
]


@pytest.mark.parametrize("heads,batch,n_pages,block", BLOCK_H_TABLE)
def test_triton_split_rule_head_block(heads, batch, n_pages, block):
    """The head block, by hand, on both sides of each boundary (a power of two, 16, 64, SMALL_GRID).

    Bent in a copy, fails here: ``<= SMALL_GRID`` -> ``< SMALL_GRID`` (the rows at exactly 32);
    ``and batch > 0`` dropped; ``min(64, ...)`` -> ``min(128, ...)``; ``(heads - 1).bit_length()`` ->
    ``heads.bit_length()``.
    """
    assert gpu_block_h(heads, batch, n_pages) == block


# triton_num_kv_splits(L, B, H, page, sm_count): n_pages = ceil(L / page); P = B * ceil(H / block_h) programs a
# split; for each S in SPLIT_CHOICES (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32) with S <= n_pages and
# ceil(n_pages / S) <= 256 (unless S = 32):
#   cost(S) = ceil(P * S / sm_count) * ceil(n_pages / S)
#             + [S > 1] * (2 + 1.5 * B * H * S * 512 * 8 / (sm_count * page * 1152))
# (the launch SPLIT_COST_PAGES = 2, the merge's bytes weighed MERGE_WEIGHT = 1.5), the cheapest S, the smaller on a
# tie. m = the weighed merge term at S = 1 (1.5 * B * H * 4096 / (sm_count * page * 1152) = 16 B H / (3 sm_count page)).
SPLIT_TABLE = [  # L, B, H, page, sm_count -> S, and the hand computation
    # one page: S = 1 is the only choice
    (64, 1, 128, 64, 132, 1),
    # L = 65: 2 pages; block 16 (1 * 8 * 2 <= 32), P = 8, m = 0.081: S=1 2; S=2 1 + 2 + 0.162 = 3.162
    (65, 1, 128, 64, 132, 1),
    # H = 16, B = 1: P = 1, m = 16 * 16 / (3 * 132 * 64) = 0.0101
    #   L = 128, 2 pages: S=1 2; S=2 1 + 2 + 0.020 = 3.020 -> 1
    (128, 1, 16, 64, 132, 1),
    #   L = 192, 3 pages: S=1 3; S=2 2 + 2.020 = 4.020; S=3 1 + 2.030 = 3.030 -> 1 (the launch outweighs a page)
    (192, 1, 16, 64, 132, 1),
    #   L = 256, 4 pages: S=1 4; S=2 2 + 2.020 = 4.020; S=3 2 + 2.030; S=4 1 + 2.040 = 3.040 -> 4 (= n_pages)
    (256, 1, 16, 64, 132, 4),
    #   L = 257, 5 pages: S=3 2 + 2.030 = 4.030; S=4 2 + 2.040; S=5 1 + 2.051 = 3.051 -> 5 (= n_pages)
    (257, 1, 16, 64, 132, 5),
    # H = 128, B = 1, L = 1024: 16 pages, block 16 (1 * 8 * 16 = 32), P = 8, m = 0.0808
    #   132 SMs: S=8 1 * 2 + 2 + 0.646 = 4.646; S=10 2 + 2.808; S=12 2 + 2.970; S=16 ceil(128/132) * 1 + 2
    #   + 1.293 = 4.293 -> 16 (S = 20 > 16 pages: not a choice)
    (1024, 1, 128, 64, 132, 16),
    #   4 SMs (m = 2.667): S=1 ceil(8/4) * 16 = 32; S=2 4 * 8 + 2 + 5.33 = 39.3; S=4 8 * 4 + 2 + 10.7 = 44.7;
    #   every S > 1 keeps ceil(8 S / 4) * ceil(16 / S) >= 32 and adds the merge -> 1
    (1024, 1, 128, 64, 4, 1),
    # H = 16, B = 64, L = 4096: 64 pages, block 16, P = 64, m = 0.646
    #   S=1 1 * 64 = 64; S=2 ceil(128/132) * 32 + 2 + 1.29 = 35.29; S=4 2 * 16 + 2 + 2.59 = 36.59;
    #   S=6 3 * 11 + 2 + 3.88 = 38.88; S=8 4 * 8 + 2 + 5.17 = 39.17 -> 2
    (4096, 64, 16, 64, 132, 2),
    #   the same on 64 SMs (m = 1.333): S=1 64; S=2 2 * 32 + 2 + 2.67 = 68.7; S=4 4 * 16 + 2 + 5.3 = 71.3 -> 1
    (4096, 64, 16, 64, 64, 1),
    # H = 128, B = 128, L = 32768: 512 pages, block 64, P = 256, m = 10.34
    #   S=1 walks 512 > 256 pages a program: skipped (it would cost 2 * 512 = 1024, the cheapest);
    #   S=2 256 pages, allowed: 4 * 256 + 2 + 20.7 = 1046.7; S=3 6 * 171 + 2 + 31.0 = 1059.0;
    #   S=4 8 * 128 + 2 + 41.4 = 1067.4; S=8 16 * 64 + 2 + 82.7 = 1108.7 -> 2
    (32768, 128, 128, 64, 132, 2),
    # a tie: H = 36, B = 1, L = 640 on 2 SMs: 10 pages, block 16 (1 * 3 * 10 <= 32), P = 3, m = 16 * 36 / (3 * 2 *
    #   64) = 1.5 exactly: S=1 ceil(3/2) * 10 = 20; S=2 ceil(6/2) * 5 + 2 + 3 = 20 (a tie: the smaller, 1);
    #   S=3 5 * 4 + 2 + 4.5 = 26.5; S=4 6 * 3 + 2 + 6 = 26; S=5 8 * 2 + 2 + 7.5 = 25.5; S=6 9 * 2 + 2 + 9 = 29;
    #   S=8 12 * 2 + 2 + 12 = 38; S=10 15 * 1 + 2 + 15 = 32 -> 1. Half the merge's bytes would make S=2 18.5 -> 2
    (640, 1, 36, 64, 2, 1),
]


@pytest.mark.parametrize("L,B,H,page,sms,splits", SPLIT_TABLE)
def test_triton_split_rule_choices(L, B, H, page, sms, splits):
    """The rule's choice on shapes computed by hand (the table's comments), at its boundaries: S = n_pages
    chosen (n_pages 3, 4, 5), the small grid at exactly 32 programs-pages, the 256-page cap, the caller's SMs.

    Bent in a copy, fails here: ``if s > n_pages: break`` -> ``s >= n_pages`` (256 and 257 tokens, and
    16 pages at L = 1024); ``sms = sm_count if sm_count > 0 else device_sm_count()`` -> ``sms =
    device_sm_count()`` (4 and 64 SMs); the cap's ``>`` -> ``>=`` (S=3 at L = 32768) or dropped (S=1);
    ``SPLIT_COST_PAGES = 0.0`` (L = 128 splits); ``cost < best_cost`` -> ``<=`` (the tie at L = 640); the
    merge's ``* 8`` bytes -> ``* 4`` (the same row).
    """
    assert triton_num_kv_splits(L, B, H, page, sm_count=sms) == splits


def test_triton_split_rule_honours_the_callers_sm_count():
    """``sm_count`` given is used, whatever the device has (0: the device's count, on CPU 132)."""
    assert triton_num_kv_splits(1024, 1, 128, 64, sm_count=0) == triton_num_kv_splits(1024, 1, 128, 64, 132) == 16
    assert [triton_num_kv_splits(4096, 64, 16, 64, sm_count=s) for s in (64, 132, 264)] == [1, 2, 4]
    # 264 SMs (m = 0.323): S=2 1 * 32 + 2.65 = 34.65; S=4 ceil(256/264) * 16 + 2 + 1.29 = 19.29;
    # S=8 2 * 8 + 2 + 2.59 = 20.59; S=5 2 * 13 + ...; S=6 2 * 11 + ... -> 4



def _rule_restated(L, B, H, page, sms, split_cost=2.0, merge_weight=1.5):
    """The split rule whole, stage 2 inline (the formula above the table, with its launch cost and merge weight)."""
    n_pages = -(-L // page)
    block_h = gpu_block_h(H, B, n_pages)
    programs, slots = B * -(-H // block_h), PROGRAMS_PER_SM[block_h] * sms
    best, best_cost = 1, None
    for s in SPLIT_CHOICES:
        if s > n_pages:
            break
        if -(-n_pages // s) > MAX_PAGES_PER_PROGRAM and s < max(SPLIT_CHOICES):
            continue
        cost = -(-programs * s // slots) * -(-n_pages // s)
        if s > 1:
            cost += split_cost + merge_weight * B * s * H * 512 * 8 / (sms * page * 1152)
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


# B: the powers of two to 256 and odd sizes beside them; L: every page boundary (page 64) and one token either side,
# to 64K tokens.
GRID_BATCHES = sorted({1 << k for k in range(9)} | {3, 5, 7, 9, 15, 17, 31, 33, 63, 65, 127, 129, 255})
GRID_LENGTHS = sorted({x for n in range(1, 1025) for x in (64 * n - 1, 64 * n, 64 * n + 1) if x <= 65536})


@pytest.mark.parametrize("page", [64, 128])
@pytest.mark.parametrize("heads", [16, 32, 64, 128])
def test_triton_split_rule_at_its_defaults_is_the_formula(heads, page):
    """``triton_num_kv_splits`` with stage 2 from ``stage2_pages`` at the package's constants chooses what the
    formula restated whole chooses, on 22 batch sizes x 3,071 lengths (1 to 64K tokens) on 132 SMs."""
    assert len(GRID_BATCHES) == 22 and len(GRID_LENGTHS) == 3071 and GRID_LENGTHS[-1] == 65536
    wrong = [(L, B) for B in GRID_BATCHES for L in GRID_LENGTHS
             if triton_num_kv_splits(L, B, heads, page, 132) != _rule_restated(L, B, heads, page, 132)]
    assert not wrong, wrong[:10]


@pytest.mark.parametrize("split_cost,merge_weight", [(1.0, 1.0), (1.0, 1.5), (2.0, 1.0), (2.0, 1.5), (3.0, 2.0)])
def test_triton_split_rule_takes_the_labs_stage_2_constants(split_cost, merge_weight):
    """The keywords ``kernel_lab.tools.split_model_fit`` varies reach stage 2 (launch cost, merge weight), at
    h_q 16-128, the grid's batch sizes and lengths of 1-64 and powers of two to 1024 pages, each one token off."""
    lengths = sorted({64 * n + d for n in list(range(1, 65)) + [1 << k for k in range(7, 11)] for d in (-1, 0, 1)})
    wrong = [(L, B, H) for H in (16, 32, 64, 128) for B in GRID_BATCHES for L in lengths
             if triton_num_kv_splits(L, B, H, 64, 132, split_cost=split_cost, merge_weight=merge_weight)
             != _rule_restated(L, B, H, 64, 132, split_cost, merge_weight)]
    assert not wrong, wrong[:10]
    # a costlier stage 2 never splits more: h_q=128, B=1, 1024 tokens takes 16 at the defaults
    assert triton_num_kv_splits(1024, 1, 128, 64, 132, split_cost=split_cost, merge_weight=merge_weight) <= 16


def test_stage2_pages_by_hand_and_its_bad_inputs():
    """The tie row's merge: 1 row of 36 heads on 2 SMs, page 64, is 36 * 4096 / (2 * 73728) = 1 page-time of bytes,
    weighed 1.5, plus the launch of 2; ``merge_weight`` scales the bytes, not the launch. Sizes that are not ints or
    too small are refused."""
    assert stage2_pages(1, 36, 2, 64) == 3.5 and stage2_pages(0, 36, 2, 64) == 2.0
    assert (SPLIT_COST_PAGES, MERGE_WEIGHT) == (2.0, 1.5)
    assert stage2_pages(3, 36, 2, 64, split_cost=0.5, merge_weight=1.5) == 0.5 + 4.5
    for args, exc in (((-1, 36, 2, 64), ValueError), ((1, 0, 2, 64), ValueError), ((1, 36, 0, 64), ValueError),
                      ((1, 36, 2, 0), ValueError), ((1.0, 36, 2, 64), TypeError), ((1, 36, True, 64), TypeError)):
        with pytest.raises(exc):
            stage2_pages(*args)

# ---- the workspace contract -----------------------------------------------------------------------------------
def _with_splits(plan, splits):
    return dataclasses.replace(plan, num_splits=splits)


def _plan(heads, d_latent, batch, splits, workspace):
    """``make_plan`` for ``batch`` requests of 2 pages of 64 (fp32), ``heads`` heads, ``d_latent``, with
    ``splits`` KV splits and this workspace."""
    case = random_decode_case(0, batch=batch, heads=heads, page_size=64, lens=[100] * batch, d_latent=d_latent,
                              d_rope=16)
    return contract.make_plan(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, workspace,
                              splits)


@pytest.mark.parametrize("offset", [1, 2, 3])
def test_workspace_contract_refuses_a_workspace_not_4_byte_aligned(offset):
    """The workspace holds float32 partials: its first byte must sit on a 4-byte boundary (offset 0, 4, 8
    pass; 1, 2, 3 are refused, naming the offset). Checked only with more than one split (one split never
    touches it).

    Bent in a copy, fails here: ``workspace.data_ptr() % 4`` -> ``% 2`` (offsets 1 and 3 still refused, 2
    accepted: the float32 view then fails deep inside with another error); the contiguity check dropped (a
    workspace of every other byte accepted).
    """
    buf = torch.empty(BYTES_PER_BATCH_SPLIT * 2 + 64, dtype=torch.uint8)  # 1 request, 2 splits: sgl-kernel's size
    base = (-buf.data_ptr()) % 16  # a 16-byte aligned start inside buf
    for ok in (0, 4, 8):
        assert _plan(16, 32, 1, 2, buf[base + ok:]).num_splits == 2
    with pytest.raises(ValueError, match=rf"4-byte boundary .* got an address {offset} bytes past one"):
        _plan(16, 32, 1, 2, buf[base + offset:])
    assert _plan(16, 32, 1, 1, buf[base + offset:]).num_splits == 1  # one split: not checked
    strided = torch.empty(2 * BYTES_PER_BATCH_SPLIT * 2, dtype=torch.uint8)[::2]
    with pytest.raises(ValueError, match="workspace must be contiguous bytes, got stride 2"):
        _plan(16, 32, 1, 2, strided)


# Bytes needed: max(ours, theirs), ours = B * H * S * (d_latent + 1) * 4 (the o_acc floats and ONE LSE float per
# (request, head, split)), theirs = sgl-kernel's 262,656 * S * B = (4 * 512 + 4) * 128 * S * B.
# Can a shape tell whether the LSE words are counted? Only where ours decides the max with them:
#   H * (d_latent + 1) > 128 * 513 = 65,664.
# At DeepSeek's d_latent = 512 that is any H > 128 (at H <= 128 sgl-kernel's formula, sized for 128 heads of
# 512 + 1 words, covers ours with room to spare: no workspace can tell, and the LSE words cannot be seen).
# Also at H = 256, d_latent = 256: 256 * 257 = 65,792 > 65,664 >= 256 * 256 = 65,536.
LSE_SHAPES = [  # heads, d_latent, batch, splits, ours with the LSE, without
    (256, 512, 1, 2, 256 * 2 * 513 * 4, 256 * 2 * 512 * 4),  # 1,050,624 vs 1,048,576: 2,048 bytes apart
    (256, 256, 1, 2, 256 * 2 * 257 * 4, BYTES_PER_BATCH_SPLIT * 2),  # 526,336 vs theirs 525,312
    (136, 512, 2, 3, 2 * 136 * 3 * 513 * 4, 2 * 136 * 3 * 512 * 4),
]


@pytest.mark.parametrize("heads,d_latent,batch,splits,need,without_lse", LSE_SHAPES)
def test_workspace_contract_counts_the_lse_words(heads, d_latent, batch, splits, need, without_lse):
    """At the shapes where the LSE words decide (see above), a workspace one LSE float short of them is refused
    with the bytes needed named; the exact size runs and equals the float64 reference.

    Bent in a copy, fails here: ``(plan.d_latent + 1)`` -> ``plan.d_latent`` in ``workspace_bytes_needed`` (the
    short workspace is accepted, and the kernel's LSE view then fails on it); ``max(ours, theirs)`` -> ``theirs``.
    """
    assert need > without_lse and need > BYTES_PER_BATCH_SPLIT * splits * batch
    empty = torch.empty(0, dtype=torch.uint8)
    assert contract.workspace_bytes_needed(_with_splits(_plan(heads, d_latent, batch, 1, empty), splits)) == need
    with pytest.raises(ValueError, match=rf"workspace too small for {splits} KV splits: need {need} bytes"):
        _plan(heads, d_latent, batch, splits, torch.empty(need - 4, dtype=torch.uint8))
    case = random_decode_case(1, batch=batch, heads=heads, page_size=64, lens=[100] * batch, d_latent=d_latent,
                              d_rope=16)
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table,
                     torch.empty(need, dtype=torch.uint8), case.sm_scale, splits, impl="torch")
    torch.testing.assert_close(out.double(), case.dense_f64(), rtol=1e-4, atol=1e-5)


def test_workspace_contract_keeps_sgl_kernels_size_where_the_lse_cannot_tell():
    """At H <= 128 (d_latent 512) the bytes needed are sgl-kernel's formula, larger than ours with the LSE words:
    a workspace of exactly ours is refused. Bent: ``max(ours, theirs)`` -> ``ours``."""
    empty = torch.empty(0, dtype=torch.uint8)
    plan = _with_splits(_plan(16, 512, 2, 1, empty), 2)
    ours = 2 * 16 * 2 * 513 * 4
    assert contract.workspace_bytes_needed(plan) == BYTES_PER_BATCH_SPLIT * 2 * 2 > ours
    with pytest.raises(ValueError, match="workspace too small for 2 KV splits"):
        _plan(16, 512, 2, 2, torch.empty(ours, dtype=torch.uint8))


@pytest.mark.parametrize("name, value", [("split_cost", -1.0), ("split_cost", float("nan")), ("merge_weight", -0.5),
                                         ("merge_weight", float("inf")), ("merge_weight", "1.5"), ("split_cost", True)])
def test_a_bad_stage2_cost_is_refused_by_the_rule_and_the_merge_model(name, value):
    from mla_edu.kernels import workspace as ws

    with pytest.raises(ValueError, match=f"{name} must be a finite number >= 0, got"):
        ws.triton_num_kv_splits(1, 1, 16, 64, 132, **{name: value})  # one page: a count of 1 without stage 2
    with pytest.raises(ValueError, match=f"{name} must be a finite number >= 0, got"):
        ws.stage2_pages(4, 16, 132, 64, **{name: value})
