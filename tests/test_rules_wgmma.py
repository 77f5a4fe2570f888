"""The Gluon launch on sm90 (``split_kv_wgmma.launch``), pinned so that bending it fails a test: the grid takes
the head block of the kernel it launches (16 or 32 heads a program for the swapped kernel, not the 64-head
block), and TMA is chosen only for a cache whose base address is 16-byte aligned (else cp.async reads it).

On any machine the launch's grid and the TMA rule are checked on the host; on a Hopper GPU the answers are
checked against float64 (every slot no request owns is NaN). The GPU-only tests ran on the H200 (one run
through the project's device tool, with the two bent copies below run beside them: see each docstring), for the
kinds "cp.async" and "tma"; "seesaw" (``split_kv_seesaw``, added later) has not run there yet.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.triton  # its kernels are Triton's (tests/conftest.py: skipped without Triton)
pytest.importorskip("triton", reason="needs Triton, which is not installed here (Linux wheels only)")
import torch

import mla_edu  # noqa: F401  (TRITON_INTERPRET on CPU before triton is imported)
from mla_edu.kernels import mla_decode
from mla_edu.kernels import split_kv_seesaw as seesaw
from mla_edu.kernels import stage1
from mla_edu.kernels import split_kv_wgmma as wg
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kernels.contract import GLUON_KINDS
from mla_edu.kernels.stage1 import Stage1Call
from mla_edu.kernels.workspace import gpu_block_h

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
ON_HOPPER = pytest.mark.skipif(not HOPPER, reason="the Gluon wgmma kernels run on sm90 GPUs only (ran on the H200, "
                               "but for 'seesaw')")


class _Recorder:
    """Stands in for a Gluon kernel: ``kernel[grid](...)`` records the grid and the constexprs."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kw: self.calls.append((grid, kw, args))


@pytest.mark.parametrize("heads,block_h", [(16, 16), (32, 32), (64, 64), (128, 64), (128, 16), (96, 32), (48, 16)])
@pytest.mark.parametrize("splits", [1, 3])
def test_gluon_grid_has_one_program_per_head_block_of_its_own_kernel(monkeypatch, heads, block_h, splits):
    """``launch`` with ``block_h`` heads a program runs ``heads / block_h`` programs per (request, split), for
    the 64-head kernel and for the swapped one (16, 32), whatever the head count (128 heads with 16 a
    program: the small-grid case). On the host, with the kernel replaced by a recorder.

    Bent in a copy, fails here: ``grid = (h // BLOCK_H, b, num_splits)`` (the 64-head block for every kernel:
    0 programs at 16 or 32 heads, 2 instead of 8 at 128 heads with 16 a program); the batch and the split
    swapped in the grid; ``kernel_for`` giving the 64-head kernel to a 32-head block; the balanced schedule's
    grid ``(h // BLOCK_H, num_parts, 1)``.
    """
    case = random_decode_case(0, batch=3, heads=heads, d_latent=512, d_rope=64, lens=[70, 5, 130], page_size=64)
    rec = _Recorder()
    monkeypatch.setattr(wg, "kernel_for", lambda bh: (rec, 4 if bh != wg.BLOCK_H else 8))
    out = torch.empty_like(case.q_nope)
    wg.launch("cp.async", case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table.reshape(-1), None,
              None, out, case.sm_scale, case.page_table.size(1), case.page_table.size(1), splits, splits == 1,
              block_h)
    [(grid, constexprs, _)] = rec.calls
    assert tuple(grid) == (heads // block_h, 3, splits)
    assert constexprs["BLOCK_H"] == block_h and constexprs["TMA"] is False
    # the balanced schedule's launch: one persistent program per (head block, part)
    wg.launch("cp.async", case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table.reshape(-1), None,
              None, out, case.sm_scale, case.page_table.size(1), case.page_table.size(1), 1, False, block_h,
              num_parts=7)
    assert tuple(rec.calls[1][0]) == (heads // block_h, 7, 1) and rec.calls[1][1]["SCHEDULED"] is True


@pytest.mark.parametrize("kind,page,offset,tma", [("tma", 64, 0, True), ("tma", 64, 8, False), ("tma", 16, 0, False),
                                                  ("cp.async", 64, 0, False)])
def test_gluon_launch_takes_tma_only_where_it_applies(monkeypatch, kind, page, offset, tma):
    """The "tma" kind launches with TMA descriptors (and ``TMA=True``) only for a cache ``tma_applies`` to;
    otherwise, and for "cp.async", with no descriptor. On the host, with the kernel replaced by a recorder.

    Bent in a copy, fails here: ``tma_on = kind == "tma"`` (TMA for a misaligned cache, or pages of 16 rows).
    """
    case = random_decode_case(0, batch=2, heads=64, d_latent=512, d_rope=64, lens=[70, 130], page_size=page,
                              dtype=torch.bfloat16)
    cache = _cache_at(case.cache, offset)
    rec = _Recorder()
    monkeypatch.setattr(wg, "kernel_for", lambda bh: (rec, 8))
    wg.launch(kind, case.q_nope, case.q_pe, cache, case.seq_lens, case.page_table.reshape(-1), None, None,
              torch.empty_like(case.q_nope), case.sm_scale, case.page_table.size(1), case.page_table.size(1), 1,
              True, 64)
    [(_, constexprs, args)] = rec.calls
    assert constexprs["TMA"] is tma and (args[3] is not None, args[4] is not None) == (tma, tma)


@pytest.mark.parametrize("block_h,page,offset,seesaw_runs", [(64, 64, 0, True), (16, 64, 0, False), (32, 128, 0, False),
                                                              (64, 16, 0, False), (64, 64, 8, False)])
@pytest.mark.parametrize("num_parts", [0, 7])
def test_seesaw_runs_where_it_applies_else_what_tma_runs(monkeypatch, block_h, page, offset, seesaw_runs, num_parts):
    """Stage-1 kind "seesaw": ``split_kv_seesaw``'s kernel for 64-head programs on a cache TMA reads, launched with
    two warpgroups' worth of registers (4 warps, the worker adds 4) and descriptors of half-width latent blocks;
    anywhere else the "tma" kind's launch (the swapped kernel at 16 or 32 heads, cp.async where TMA does not
    apply). On the host, both kernels replaced by recorders.

    Bent in a copy, fails here: ``seesaw.applies`` without the block check (the two-warpgroup kernel given a
    16-head block), without ``tma_applies`` (a 16-row page or a misaligned cache given to TMA), the split grid's
    batch and head block swapped, ``maxnreg`` dropped, the latent descriptor's block full-width.
    """
    case = random_decode_case(0, batch=3, heads=128 if block_h == 64 else block_h, d_latent=512, d_rope=64,
                              lens=[70, 5, 130], page_size=page, dtype=torch.bfloat16)
    cache = _cache_at(case.cache, offset)
    two, one = _Recorder(), _Recorder()
    monkeypatch.setattr(seesaw, "stage1_seesaw_kernel", two)
    monkeypatch.setattr(wg, "kernel_for", lambda bh: (one, 8 if bh == wg.BLOCK_H else 4))
    b, h, _ = case.q_nope.shape
    call = Stage1Call(case.q_nope, case.q_pe, cache, case.seq_lens, case.page_table.reshape(-1), None, None,
                      torch.empty_like(case.q_nope), case.sm_scale, case.page_table.size(1), case.page_table.size(1), 3,
                      False, False, num_parts)
    stage1.launch("seesaw", (block_h, 64, 8, 2), call)
    assert (len(two.calls), len(one.calls)) == ((1, 0) if seesaw_runs else (0, 1))
    [(grid, kw, args)] = two.calls or one.calls
    assert tuple(grid) == ((h // block_h, num_parts, 1) if num_parts else (h // block_h, b, 3))
    assert kw["SCHEDULED"] is (num_parts > 0) and kw["BLOCK_H"] == block_h
    if seesaw_runs:
        assert kw["num_warps"] == seesaw.WARPS and kw["maxnreg"] == seesaw.REGISTERS.value and kw["TMA"] is True
        # q_nope by TMA (a contiguous q); the output's rows by TMA store where they can be final (here: in the
        # balanced schedule; with 3 splits they are partials); then the cache's latent halves and rope columns
        assert kw["Q_TMA"] is True and list(args[3].block_shape) == [64, 256] and args[3].strides == [512, 1]
        assert kw["O_TMA"] is (num_parts > 0)
        assert list(args[5].block_shape) == [64, 256] and list(args[6].block_shape) == [64, 64]
    else:  # "tma": TMA where it applies (whole 64-row tiles of an aligned cache), else cp.async
        assert kw["TMA"] is (page % 64 == 0 and offset == 0)


@pytest.mark.parametrize("layout,q_tma", [("contiguous", True), ("slice", True), ("transposed", False)])
def test_seesaw_takes_q_by_tma_where_its_rows_are_one_view(monkeypatch, layout, q_tma):
    """q_nope contiguous or sliced from [B, H, 576]: a descriptor over its rows (row stride 512 or 576); transposed
    (requests 512 apart): Q_TMA off and the cache's latent descriptor, the same type, in q's place (never read).
    On the host, the kernel replaced by a recorder."""
    case = random_decode_case(0, batch=3, heads=128, lens=[70, 5, 130], page_size=64, dtype=torch.bfloat16)
    q_nope, q_pe = case.q_views(layout)
    assert torch.equal(q_nope, case.q_nope) and torch.equal(q_pe, case.q_pe)  # the same values, laid out apart
    with pytest.raises(ValueError, match="'contiguous', 'slice' or 'transposed', got 'strided'"):
        case.q_views("strided")
    two = _Recorder()
    monkeypatch.setattr(seesaw, "stage1_seesaw_kernel", two)
    call = Stage1Call(q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table.reshape(-1), None, None,
                      torch.empty_like(case.q_nope), case.sm_scale, case.page_table.size(1), case.page_table.size(1), 3,
                      False, False, 0)
    stage1.launch("seesaw", (64, 64, 8, 2), call)
    [(_, kw, args)] = two.calls
    assert kw["Q_TMA"] is q_tma
    if q_tma:
        assert args[3].strides == [q_nope.stride(1), 1] and args[3].shape == [3 * 128, 512]
    else:
        assert args[3] is args[5]


@pytest.mark.parametrize("final,num_parts,out_layout,o_tma", [
    (True, 0, "contiguous", True), (False, 0, "contiguous", False), (False, 7, "contiguous", True),
    (True, 0, "transposed", False), (False, 7, "transposed", False)])
def test_seesaw_stores_final_rows_by_tma_where_the_output_is_one_view(monkeypatch, final, num_parts, out_layout,
                                                                      o_tma):
    """The seesaw's output rows leave by TMA store (``split_kv_seesaw._store_final``) where they can be final: with
    one split, or in the balanced schedule (its whole requests); never for a split's partials. A descriptor over
    out's rows [B * H, 512] in [64, 256] blocks, or, where out is not one 2D view (requests apart), O_TMA off and
    the cache's latent descriptor in its place (never read). On the host, the kernel replaced by a recorder."""
    case = random_decode_case(0, batch=3, heads=128, lens=[70, 5, 130], page_size=64, dtype=torch.bfloat16)
    b, h, dl = case.q_nope.shape
    out = (torch.empty_like(case.q_nope) if out_layout == "contiguous"
           else case.q_nope.new_empty((h, b, dl)).transpose(0, 1))  # [B, H, 512], requests 512 apart
    two = _Recorder()
    monkeypatch.setattr(seesaw, "stage1_seesaw_kernel", two)
    call = Stage1Call(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table.reshape(-1), None, None, out,
                      case.sm_scale, case.page_table.size(1), case.page_table.size(1), 1 if final else 3, False, final,
                      num_parts)
    stage1.launch("seesaw", (64, 64, 8, 2), call)
    [(_, kw, args)] = two.calls
    assert kw["O_TMA"] is o_tma and args[11] is out
    if o_tma:
        assert args[4].base.data_ptr() == out.data_ptr() and args[4].shape == [3 * 128, 512]
        assert args[4].strides == [512, 1] and list(args[4].block_shape) == [64, 256]
    else:
        assert args[4] is args[5]


def test_gluon_kernel_for_each_head_block():
    """64 heads a program: the two-warpgroup kernel (8 warps); 16 and 32: the swapped one (4 warps)."""
    assert wg.kernel_for(64) == (wg.stage1_wgmma_kernel, 8)
    assert wg.kernel_for(16) == wg.kernel_for(32) == (wg.stage1_swapped_kernel, 4)


def _cache_at(cache: torch.Tensor, offset_bytes: int) -> torch.Tensor:
    """A copy of ``cache`` (same shape, strides and values) whose first byte is ``offset_bytes`` past a 16-byte
    boundary (the allocator's blocks start 512-byte aligned)."""
    es = cache.element_size()
    buf = torch.empty(cache.numel() + 64 // es, dtype=cache.dtype, device=cache.device)
    start = ((-buf.data_ptr()) % 16 + offset_bytes) // es
    view = buf[start:start + cache.numel()].view(cache.shape)
    view.copy_(cache)
    assert view.data_ptr() % 16 == offset_bytes
    return view


@pytest.mark.parametrize("offset", [0, 2, 4, 8, 14])
def test_tma_only_for_a_cache_whose_base_is_16_byte_aligned(offset):
    """TMA needs a 16-byte aligned base (and rows): a bf16 cache starting 2, 4, 8 or 14 bytes past a 16-byte
    boundary (shape and strides fit) is read by cp.async instead.

    Bent in a copy, fails here: ``and cache.data_ptr() % 16 == 0`` dropped from ``tma_applies``; ``% 16`` ->
    ``% 8`` (offset 8 accepted); the rows' check dropped (rows 1160 bytes apart accepted).
    """
    cache = torch.zeros(4, 64, 576, dtype=torch.bfloat16)
    assert wg.tma_applies(_cache_at(cache, offset)) == (offset == 0)
    rows_off = torch.zeros(4, 64, 580, dtype=torch.bfloat16)[..., :576]  # base aligned, rows 1160 bytes apart
    assert rows_off.data_ptr() % 16 == 0 and not wg.tma_applies(rows_off)


CASES = [  # heads, batch, max_len, splits: the head block gpu_block_h picks
    (16, 6, 900, 3),  # 16 a program: the swapped kernel
    (32, 5, 1000, 1),  # 32 a program
    (128, 1, 500, 2),  # 1 * 2 * 8 pages <= 32: 16 a program, 8 programs a split
    (128, 4, 900, 2),  # 64 a program
]


@ON_HOPPER
@pytest.mark.parametrize("kind", GLUON_KINDS)
@pytest.mark.parametrize("heads,batch,max_len,splits", CASES)
def test_gluon_launch_covers_every_head_on_hopper(kind, heads, batch, max_len, splits):
    """Every head of every request computed and right against float64, for each head block the rule picks.
    Ran on the H200 (8 passed). Bent there in a copy (the 64-head block's grid for every kernel), the 6 cases of
    16 heads a program (16 heads, and 128 heads in the small grid) and 32 failed, with both kinds (programs for
    0 heads, or for 2 of 8 head blocks: the output kept torch.empty's bytes)."""
    case = random_decode_case(7, batch=batch, heads=heads, page_size=64, max_len=max_len, dtype=torch.bfloat16,
                              device="cuda")
    assert gpu_block_h(heads, batch, case.page_table.size(1)) in ((16,) if heads == 16 else (32,) if heads == 32
                                                                  else (16, 64))
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(splits),
                     case.sm_scale, splits, impl="triton", stage1=kind)
    ref = case.dense_f64()
    assert torch.isfinite(out).all()
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-2, err


@ON_HOPPER
@pytest.mark.parametrize("heads", [128, 16])
def test_a_cache_not_16_byte_aligned_never_reaches_a_gluon_kernel_on_hopper(heads):
    """A cache whose base is 8 bytes past a 16-byte boundary: TMA does not apply (above), and neither does the
    cp.async Gluon kernel, which Triton cannot compile for it; the call runs the tl kernel and gives float64's
    answer, as the aligned copy does (by a Gluon kernel); asking for a Gluon kernel by name is refused.

    On the H200 (one run, before ``wgmma_applies`` checked the cache's alignment) the misaligned calls failed:
    "Pipeline failed while executing ConvertTritonGPUToLLVM" compiling the cp.async kernel that the "tma"
    kind falls back to. Bent there in a copy (the base-address check dropped from ``tma_applies``), the test
    failed at ``tma_applies``.
    """
    case = random_decode_case(3, batch=4, heads=heads, page_size=64, max_len=900, dtype=torch.bfloat16,
                              device="cuda")
    ref = case.dense_f64()
    for offset in (0, 8):
        cache = _cache_at(case.cache, offset)
        assert wg.tma_applies(cache) == (offset == 0)
        out = mla_decode(case.q_nope, case.q_pe, cache, case.seq_lens, case.page_table, case.workspace(2),
                         case.sm_scale, 2, impl="triton")
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-2, (offset, err)
    for kind in GLUON_KINDS:
        with pytest.raises(ValueError, match=f"stage1={kind!r} is a Gluon kernel"):
            mla_decode(case.q_nope, case.q_pe, cache, case.seq_lens, case.page_table, case.workspace(2),
                       case.sm_scale, 2, impl="triton", stage1=kind)
