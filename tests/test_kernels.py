"""mla_decode (reference and torch impls), workspace formula, stride policy, cutlass contract.

Ground truth here is a float64 dense computation over each request's own token slots
(from how the case was built, not from the page table), written in this file.
"""

import math
import re

import pytest
import torch

import mla_edu  # noqa: F401
from mla_edu.device import TRITON_INTERPRET
from mla_edu.kernels import (IMPLS, check_cutlass_args, cutlass_unavailable_reason, get_workspace_size,
                            mla_decode, num_kv_splits_for, pages_read)
from mla_edu.graphs import Graph
from mla_edu.kernels import make_plan
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kernels.split_kv_torch import ROW_CHUNK, mla_decode_torch, stage1_partials
from op_log import OpLog


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


# ---- >= 300 random cases: reference and torch impls vs float64 -------------------------------
SPLITS = [1, 2, 3, -1]


@pytest.mark.parametrize("impl", ["reference", "torch"])
@pytest.mark.parametrize("seed", range(160))
def test_random_cases_match_float64(impl, seed):
    g = torch.Generator().manual_seed(10_000 + seed)
    page = [1, 16, 64, 128][seed % 4]
    heads = [1, 4, 16][int(torch.randint(0, 3, (1,), generator=g))]
    batch = int(torch.randint(1, 6, (1,), generator=g))
    max_len = int(torch.randint(1, 3 * 128 if page > 1 else 40, (1,), generator=g))
    small = seed % 5 != 0  # most cases use small latent dims for speed; every 5th the real 512/64
    case = random_decode_case(seed, batch=batch, heads=heads, page_size=page, max_len=max_len,
                              d_latent=32 if small else 512, d_rope=16 if small else 64,
                              extra_cols=int(torch.randint(0, 3, (1,), generator=g)))
    splits = SPLITS[seed % len(SPLITS)]
    ws = case.workspace(splits)
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale,
                     splits, impl=impl)
    assert out.shape == case.q_nope.shape and out.dtype == case.q_nope.dtype
    assert torch.isfinite(out).all(), "read an unused (NaN) page or slot"
    assert rel_err(out, case.dense_f64()) < 1e-5


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 5e-3)])
def test_torch_impl_low_precision(dtype, tol):
    case = random_decode_case(3, batch=5, heads=8, page_size=16, max_len=90, dtype=dtype)
    ref = case.dense_f64()
    for s in (1, 4):
        out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(s),
                         case.sm_scale, s, impl="torch")
        assert out.dtype == dtype and rel_err(out, ref) < tol


def test_splits_write_through_the_workspace():
    case = random_decode_case(1, batch=3, heads=4, page_size=16, lens=[40, 1, 64], d_latent=32, d_rope=16)
    ws = case.workspace(4)
    before = ws.clone()
    mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, 4, impl="torch")
    n = 3 * 4 * 4 * (32 + 1) * 4  # o_acc [B,H,S,D] + lse [B,H,S], float32
    assert not torch.equal(ws[:n], before[:n]) and torch.equal(ws[n:], before[n:])
    ws1 = case.workspace(1)
    before1 = ws1.clone()
    mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws1, case.sm_scale, 1, impl="torch")
    assert torch.equal(ws1, before1)  # one split: the workspace is not touched (as in cutlass)


# ---- workspace formula (sgl-kernel) ---------------------------------------------------------
def test_workspace_formula():
    assert get_workspace_size(128, 1) == 262_656  # fp32 o_acc [1,128,1,512] + lse [1,128,1]
    assert get_workspace_size(4096, 64, 132, 1) == 64 * 262_656
    assert get_workspace_size(4096, 8, 132, 4) == 4 * 8 * 262_656
    # auto: max_splits = 32; heur = min(32, 132 // 64 = 2) = 2; k_waves = 16; split = 2
    assert num_kv_splits_for(4096, 64, 132, -1) == 2
    # B=1: heur = min(32, 132) = 32 -> split 32
    assert num_kv_splits_for(4096, 1, 132, -1) == 32
    # max_splits = 33 (4224 = 33 pages of 128), B=8: heur = 16, k_waves = 3, split = ceil(33/3) = 11
    assert num_kv_splits_for(33 * 128, 8, 132, -1) == 11
    # capture-time dummy width 1 page: one split, however large the real lengths are later
    assert num_kv_splits_for(128, 8, 132, -1) == 1
    assert get_workspace_size(4224, 8, 132, -1) == 11 * 8 * 262_656
    # max_splits = ceil(L / 128): one token past a multiple of 128 needs one more split (B=1: heur = max_splits)
    assert [num_kv_splits_for(n, 1, 132, -1) for n in (1, 127, 128, 129, 256, 257)] == [1, 1, 1, 2, 2, 3]
    assert get_workspace_size(129, 1, 132, -1) == 2 * 262_656
    with pytest.raises(ValueError, match="num_kv_splits must be -1"):
        num_kv_splits_for(128, 1, 132, 0)
    with pytest.raises(ValueError, match="max_seq_len must be > 0"):
        get_workspace_size(0, 1)
    with pytest.raises(TypeError, match="num_batches must be an int"):
        get_workspace_size(128, 2.0)


def test_workspace_too_small_is_a_clear_error():
    case = random_decode_case(0, batch=2, heads=4, page_size=16, lens=[64, 64], d_latent=32, d_rope=16)
    small = torch.empty(get_workspace_size(64, 2, 132, 1), dtype=torch.uint8)  # sized for 1 split
    for impl in ("reference", "torch"):
        with pytest.raises(ValueError, match="workspace too small for 4 KV splits"):
            mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, small, case.sm_scale, 4,
                       impl=impl)
    # with one split the same workspace is fine
    mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, small, case.sm_scale, 1,
               impl="torch")


# ---- the stride policy: SGLang #6998 in one test --------------------------------------------
@pytest.mark.parametrize("impl", ["reference", "torch"])
def test_size_policy_on_narrow_view_reads_wrong_pages(impl):
    case = random_decode_case(7, batch=4, heads=4, page_size=16, lens=[40, 33, 17, 48], d_latent=32, d_rope=16,
                              extra_cols=0)
    width = case.page_table.size(1)  # 3 pages
    buf = torch.full((6, width + 5), 1, dtype=torch.int32)  # persistent, wider buffer (stale 1s)
    buf[:4, :width] = case.page_table
    narrow = buf[:4, :1]  # what capture froze: width 1, real row stride width + 5
    full = buf[:4]  # full-width view (SGLang's fix): size(1) == stride(0)
    cols = buf[:4, :width]  # all the useful columns but not the full width: still the wrong stride
    ws = case.workspace(1)
    ref = case.dense_f64()
    args = (case.q_nope, case.q_pe, case.cache, case.seq_lens)

    def per_request_err(table, policy):
        out = mla_decode(*args, table, ws, case.sm_scale, 1, impl=impl, stride_policy=policy)
        return [rel_err(out[b], ref[b]) for b in range(4)]

    bad = per_request_err(narrow, "size")
    assert bad[0] < 1e-5  # row 0 reads its own row
    assert all(not e < 0.1 for e in bad[1:])  # rows 1.. read row 0 shifted by b, then stale entries (NaN or wrong)
    assert max(per_request_err(narrow, "stride")) < 1e-5  # FlashMLA's policy: the real stride
    assert max(per_request_err(full, "size")) < 1e-5  # full-width view: size(1) == stride(0)
    assert all(not e < 0.1 for e in per_request_err(cols, "size")[1:])
    assert max(per_request_err(case.page_table, "size")) < 1e-5  # fresh contiguous table (eager mode)
    # default policy is "size" (cutlass contract)
    out = mla_decode(*args, narrow, ws, case.sm_scale, 1, impl=impl)
    assert not rel_err(out[1], ref[1]) < 0.1


def test_size_policy_reads_exactly_the_flat_storage_index():
    # request b reads page j at flat index storage_offset + b * size(1) + j
    case = random_decode_case(5, batch=3, heads=2, page_size=16, lens=[16, 16, 16], d_latent=32, d_rope=16)
    buf = torch.full((3, 4), 0, dtype=torch.int32)
    pages = case.page_table[:, 0].clone()
    buf.view(-1)[:3] = pages  # flat storage [p0, p1, p2, 0, ...]: rows 1, 2 read entries 1, 2 under "size"
    narrow = buf[:, :1]
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, narrow, case.workspace(1), case.sm_scale,
                     impl="torch", stride_policy="size")
    assert rel_err(out, case.dense_f64()) < 1e-5


# ---- checked mode and poison ------------------------------------------------------------------
def finite_case(seed, lens, extra_cols=1):
    """A case with no NaN slot and no poison id (an unused column holds the row's first page): every NaN a
    checked call returns is the check's, not a read of poison."""
    case = random_decode_case(seed, heads=4, page_size=16, lens=lens, d_latent=32, d_rope=16, extra_cols=extra_cols)
    case.cache = case.cache.nan_to_num(0.5)
    t = case.page_table
    case.page_table = torch.where((t < 0) | (t >= case.cache.size(0)), t[:, :1], t)  # [B, W]
    assert torch.isfinite(case.cache).all()
    assert bool(((case.page_table >= 0) & (case.page_table < case.cache.size(0))).all())
    return case


def checked_and_unchecked(case, lens, table, impl, splits=2, **kw):
    args = (case.q_nope, case.q_pe, case.cache, lens, table, case.workspace(splits), case.sm_scale, splits)
    return mla_decode(*args, impl=impl, checked=True, **kw), mla_decode(*args, impl=impl, **kw)


@pytest.mark.parametrize("impl", ["reference", "torch"])
@pytest.mark.parametrize("bad_id", [-1, 10_000])
def test_checked_mode_nan_for_out_of_range_page(impl, bad_id):
    case = finite_case(11, [20, 5, 33])
    table = case.page_table.clone()
    table[2, 1] = bad_id  # request 2 reads a page that does not exist (its 2nd of 3)
    out, out_u = checked_and_unchecked(case, case.seq_lens, table, impl)
    assert torch.isnan(out[2]).all() and torch.isfinite(out[:2]).all()
    ref = case.dense_f64()
    assert rel_err(out[:2], ref[:2]) < 1e-5
    # unchecked: the id is clamped into [0, num_pages) and the request silently gets a finite, wrong answer
    assert torch.isfinite(out_u).all() and rel_err(out_u[:2], ref[:2]) < 1e-5 and not rel_err(out_u[2], ref[2]) < 0.1


@pytest.mark.parametrize("impl", ["reference", "torch"])
def test_checked_mode_nan_when_length_needs_more_pages_than_the_row(impl):
    case = finite_case(12, [30, 10], extra_cols=0)  # rows of 2 pages, every entry a valid page id
    lens = torch.tensor([30, 40], dtype=torch.int32)  # request 1 now claims 3 pages, its row holds 2
    out, out_u = checked_and_unchecked(case, lens, case.page_table, impl)
    assert torch.isnan(out[1]).all() and torch.isfinite(out[0]).all()
    assert torch.isfinite(out_u).all()  # unchecked: clamped to the row's 2 pages


@pytest.mark.parametrize("impl", ["reference", "torch"])
def test_checked_mode_nan_for_a_table_entry_past_the_storage(impl):
    # a [2, 2] table of row stride 4 whose storage ends with its last row: 6 entries, every one a valid page id
    case = finite_case(13, [20, 30], extra_cols=0)
    store = torch.cat([case.page_table[0], case.page_table[0], case.page_table[1]])  # [6]: row 0, 2 spare, row 1
    table = store.as_strided((2, 2), (4, 1))
    assert torch.equal(table, case.page_table)
    # under the "stride" policy request 1 may read 4 entries from flat index 4; with 40 tokens it reads a 3rd,
    # flat index 6, past the storage (not past the rows' 4 pages: no length check fires)
    lens = torch.tensor([20, 40], dtype=torch.int32)
    out, out_u = checked_and_unchecked(case, lens, table, impl, stride_policy="stride")
    assert torch.isnan(out[1]).all() and torch.isfinite(out[0]).all()
    assert rel_err(out[0], case.dense_f64()[0]) < 1e-5
    assert torch.isfinite(out_u).all()  # unchecked: clamped to the storage's last entry


@pytest.mark.parametrize("impl", ["reference", "torch", "triton"])  # Triton: the GPU, else its interpreter
@pytest.mark.parametrize("splits", [1, 2, 4])
def test_empty_request_gives_zeros_whatever_the_split_count(impl, splits):
    # seq_len 0: every split of request 0 is empty (lse -inf); stage 2 must merge them to 0, not 0/0 = NaN
    dev = "cuda" if impl == "triton" and torch.cuda.is_available() else "cpu"
    case = random_decode_case(14, heads=4, page_size=16, lens=[0, 40, 16], d_latent=32, d_rope=16, device=dev)
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(splits),
                     case.sm_scale, splits, impl=impl)
    assert (out[0] == 0).all() and torch.isfinite(out).all()
    assert rel_err(out.cpu(), case.dense_f64().cpu()) < 1e-5


def test_torch_and_reference_agree_unchecked_on_garbage_tables():
    # unchecked clamping is documented behaviour: both impls must clamp the same way
    for seed in range(6):
        case = random_decode_case(seed, batch=4, heads=2, page_size=16, max_len=60, d_latent=32, d_rope=16)
        g = torch.Generator().manual_seed(seed)
        table = torch.randint(-5, case.cache.size(0) + 5, case.page_table.shape, generator=g, dtype=torch.int32)
        cache = torch.nan_to_num(case.cache, nan=0.5)
        ws = case.workspace(-1)
        outs = [mla_decode(case.q_nope, case.q_pe, cache, case.seq_lens, table, ws, case.sm_scale, -1, impl=i)
                for i in ("reference", "torch")]
        assert torch.allclose(outs[0], outs[1], atol=1e-5, rtol=1e-5)


# ---- graph safety of the torch impl -----------------------------------------------------------
def test_torch_impl_has_no_host_sync_and_fixed_shapes():
    shapes, inner = set(), set()
    for lens in ([1, 2, 3], [40, 17, 48]):
        pages = [-(-n // 16) for n in lens]
        case = random_decode_case(2, batch=3, heads=4, page_size=16, lens=lens, d_latent=32, d_rope=16,
                                  extra_cols=3 - max(pages), extra_pages=11 - sum(pages))
        assert case.page_table.shape == (3, 3) and case.cache.size(0) == 11
        with OpLog() as log:
            out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(2),
                             case.sm_scale, 2, impl="torch", checked=True)
        assert rel_err(out, case.dense_f64()) < 1e-5
        banned = {"aten._local_scalar_dense", "aten.nonzero", "aten.item", "aten.masked_select", "aten.unique"}
        assert not banned & set(log.packets), banned & set(log.packets)
        shapes.add(tuple(log.packets))
        # inside the stage-1 op: the static bound (what runs on CUDA) syncs nothing and has fixed shapes too
        with OpLog() as log:
            stage1_partials(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table.flatten(), 0,
                            case.sm_scale, 3, 3, 2, True, trim=False)
        assert not banned & set(log.packets), banned & set(log.packets)
        inner.add(tuple((str(f), tuple(a.shape for a in args if isinstance(a, torch.Tensor))) for f, args in log.calls))
    assert len(shapes) == 1 and len(inner) == 1  # the same ops (and inner shapes) whatever the lengths


@pytest.mark.parametrize("splits,checked", [(1, False), (3, True), (-1, True)])
def test_torch_impl_trim_equals_static_bound(splits, checked):
    # 40 requests (3 chunks of ROW_CHUNK), a wide table, and the narrow view of SGLang #6998 (wrong reads)
    case = random_decode_case(5, batch=40, heads=4, page_size=16, max_len=90, d_latent=32, d_rope=16, extra_cols=6)
    assert case.q_nope.size(0) > 2 * ROW_CHUNK
    for table in (case.page_table, case.page_table[:, :1]):
        plan = make_plan(case.q_nope, case.q_pe, case.cache, case.seq_lens, table, case.workspace(splits), splits)
        outs = [mla_decode_torch(case.q_nope, case.q_pe, case.cache, case.seq_lens, table, case.workspace(splits),
                                 case.sm_scale, plan, checked, trim=trim) for trim in (True, False)]
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-6, atol=1e-6, equal_nan=True)
        if table.size(1) > 1:
            assert torch.isfinite(outs[0]).all()  # no unused (NaN) page or slot read
        elif checked:
            assert torch.isnan(outs[0]).any()  # wrong rows read out-of-range ids: NaN


def test_torch_impl_is_one_graph_op_whose_gathered_keys_are_transient():
    # emulated capture at a serving-like shape: the gathered keys [B, S, max_pages * PAGE, 576] would be
    # 40 x 1 x 512 x 576 x 4 = 47 MB; the graph keeps only the op's output and the stage-2 temporaries
    case = random_decode_case(6, batch=40, heads=4, page_size=16, max_len=60, extra_cols=28)
    ws = case.workspace(1)
    g, out = Graph.capture(lambda: mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table,
                                              ws, case.sm_scale, 1, impl="torch"), device="cpu")
    assert g.recorded_ops().count("mla_edu.mla_decode_torch_stage1.default") == 1
    gathered = 40 * case.page_table.size(1) * 16 * 576 * 4
    assert g.captured_bytes < gathered / 50, (g.captured_bytes, gathered)
    case.q_nope.mul_(0.5)  # new inputs in the same buffers; replay equals eager
    g.replay()
    eager = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, 1,
                       impl="torch")
    assert torch.equal(out, eager)


# ---- errors -----------------------------------------------------------------------------------
def _case():
    return random_decode_case(0, batch=2, heads=4, page_size=16, lens=[5, 9], d_latent=32, d_rope=16)


def test_bad_inputs_raise_clear_errors():
    c = _case()
    ws = c.workspace(1)
    a = (c.q_nope, c.q_pe, c.cache, c.seq_lens, c.page_table, ws, c.sm_scale)
    with pytest.raises(ValueError, match="impl must be one of"):
        mla_decode(*a, impl="cuda")
    with pytest.raises(ValueError, match="stride_policy must be one of"):
        mla_decode(*a, stride_policy="rows")
    with pytest.raises(TypeError, match="seq_lens must be int32, got torch.int64"):
        mla_decode(c.q_nope, c.q_pe, c.cache, c.seq_lens.long(), c.page_table, ws, c.sm_scale)
    with pytest.raises(TypeError, match="page_table must be int32"):
        mla_decode(c.q_nope, c.q_pe, c.cache, c.seq_lens, c.page_table.long(), ws, c.sm_scale)
    with pytest.raises(ValueError, match="last dim must be D_latent \\+ D_rope = 32 \\+ 16 = 48, got 47"):
        mla_decode(c.q_nope, c.q_pe, c.cache[..., :47], c.seq_lens, c.page_table, ws, c.sm_scale)
    with pytest.raises(TypeError, match="share one floating dtype"):
        mla_decode(c.q_nope.half(), c.q_pe, c.cache, c.seq_lens, c.page_table, ws, c.sm_scale)
    with pytest.raises(TypeError, match="workspace must be a 1-D uint8"):
        mla_decode(*a[:5], ws.view(torch.int32), c.sm_scale)
    with pytest.raises(ValueError, match="num_kv_splits must be -1 \\(auto\\) or in \\[1, 256\\], got 0"):
        mla_decode(*a, 0)
    with pytest.raises(ValueError, match="seq_lens must be \\[B=2\\]"):
        mla_decode(c.q_nope, c.q_pe, c.cache, c.seq_lens[:1], c.page_table, ws, c.sm_scale)
    with pytest.raises(ValueError, match="sm_scale must be a finite float > 0"):
        mla_decode(*a[:6], -1.0)


def test_a_forgotten_absorption_blames_q_nope_not_the_cache():
    """The per-head q_nope (qk_nope_head_dim 128, before W_UK) handed to the kernel: the error names q_nope, the
    width it should have (the cache's 576 minus q_pe's 64) and the likely cause, not the cache."""
    c = _cutlass_case()
    c[0] = torch.zeros(2, 16, 128, dtype=torch.bfloat16)  # q^C = q_nope, not absorbed
    for call in (lambda: mla_decode(*c, 0.1, 1, impl="torch"), lambda: check_cutlass_args(*c)):
        with pytest.raises(ValueError, match=r"q_nope.*512.*got 128: is q_nope absorbed \(multiplied by W_UK"):
            call()
    with pytest.raises(ValueError, match=r"^q_nope: expected last dim kv_lora_rank = 576 - 64 = 512 \(kv_c_and"):
        mla_decode(*c, 0.1, 1, impl="torch")


# ---- cutlass: the contract runs everywhere; the kernel only on SM100 --------------------------
def _cutlass_case(heads=16, page=64, width=4, dtype=torch.bfloat16, b=2):
    q_nope = torch.zeros(b, heads, 512, dtype=dtype)
    q_pe = torch.zeros(b, heads, 64, dtype=dtype)
    cache = torch.zeros(10, page, 576, dtype=dtype)
    seq_lens = torch.ones(b, dtype=torch.int32)
    table = torch.zeros(b, width, dtype=torch.int32)
    ws = torch.empty(get_workspace_size(page * width, b, 0, 1), dtype=torch.uint8)
    return [q_nope, q_pe, cache, seq_lens, table, ws]


def test_cutlass_contract_accepts_valid_args():
    check_cutlass_args(*_cutlass_case())
    check_cutlass_args(*_cutlass_case(heads=128, page=128, width=1, dtype=torch.float16))
    check_cutlass_args(*_cutlass_case(page=16, width=8))


@pytest.mark.parametrize("mutate,exc,msg", [
    (lambda a: a.__setitem__(0, torch.zeros(2, 129, 512, dtype=torch.bfloat16)) or
     a.__setitem__(1, torch.zeros(2, 129, 64, dtype=torch.bfloat16)), ValueError, "H must be <= 128"),
    (lambda a: a.__setitem__(4, torch.zeros(2, 3, dtype=torch.int32)), ValueError, "multiple of 128 / PAGE = 2, got 3"),
    (lambda a: a.__setitem__(2, torch.zeros(10, 48, 576, dtype=torch.bfloat16)),
     ValueError, "power of two <= 128, got 48"),
    (lambda a: a.__setitem__(2, torch.zeros(10, 256, 576, dtype=torch.bfloat16)),
     ValueError, "power of two <= 128, got 256"),
    (lambda a: a.__setitem__(0, torch.zeros(2, 16, 256, dtype=torch.bfloat16)), ValueError, "must be 512"),
    (lambda a: a.__setitem__(1, torch.zeros(2, 16, 32, dtype=torch.bfloat16)), ValueError, "must be 64"),
    (lambda a: a.__setitem__(2, torch.zeros(10, 64, 512, dtype=torch.bfloat16)), ValueError, "must be 576"),
    (lambda a: [a.__setitem__(i, a[i].float()) for i in range(3)], TypeError, "float16 or bfloat16, got torch.float32"),
    (lambda a: a.__setitem__(1, a[1].half()), TypeError, "must share a dtype"),
    (lambda a: a.__setitem__(3, a[3].long()), TypeError, "seq_lens must be int32, got torch.int64"),
    (lambda a: a.__setitem__(4, a[4].long()), TypeError, "page_table must be int32, got torch.int64"),
    (lambda a: a.__setitem__(4, torch.zeros(3, 4, dtype=torch.int32)), ValueError, "B=2 rows"),
    (lambda a: a.__setitem__(4, torch.zeros(2, 0, dtype=torch.int32)), ValueError, "block_num must be > 0"),
    (lambda a: a.__setitem__(5, torch.empty(1000, dtype=torch.uint8)),
     ValueError, "workspace must hold >= 525312 bytes"),
    (lambda a: a.__setitem__(5, torch.empty(10**6, dtype=torch.float32)), TypeError, "workspace must be uint8"),
])
def test_cutlass_contract_rejects(mutate, exc, msg):
    a = _cutlass_case()
    mutate(a)
    with pytest.raises(exc, match=msg):
        check_cutlass_args(*a)


def test_cutlass_contract_checks_workspace_for_splits():
    a = _cutlass_case(page=128, width=32, b=1)  # max_seq_len 4096, B=1 -> auto split 32 (132 SMs)
    with pytest.raises(ValueError, match=f"workspace must hold >= {32 * 262_656} bytes"):
        check_cutlass_args(*a, num_kv_splits=-1, sm_count=132)
    check_cutlass_args(*a, num_kv_splits=1)


def test_cutlass_contract_refuses_a_narrow_view_unless_told():
    # buf[:, :1] of a [4, 33] buffer: the kernel steps rows by size(1) = 1, the rows are 33 apart (SGLang #6998)
    a = _cutlass_case(page=128, width=1, b=4)
    a[3] = torch.full((4,), 300, dtype=torch.int32)
    a[4] = torch.zeros(4, 33, dtype=torch.int32)[:, :1]
    with pytest.raises(ValueError, match=r"rows must be size\(1\) = 1 entries apart .* got stride\(0\) = 33 "
                                         r"for shape \(4, 1\)"):
        check_cutlass_args(*a)
    with pytest.raises(ValueError, match=r"got stride\(0\) = 2 for shape \(4, 1\)"):
        check_cutlass_args(*a[:4], torch.zeros(8, 1, dtype=torch.int32)[::2], a[5])  # row-strided, as bad
    check_cutlass_args(*a, allow_row_stride_mismatch=True)  # the code that reproduces the bug on purpose
    check_cutlass_args(*a[:4], a[4].contiguous(), a[5])
    with pytest.raises(TypeError, match="allow_row_stride_mismatch must be a bool, got int"):
        check_cutlass_args(*a, allow_row_stride_mismatch=1)
    # mla_decode reads every impl's rows size(1) apart (the wrapper's bug, reproduced): it lets the view through
    if cutlass_unavailable_reason(a[0].device) is not None:
        with pytest.raises(RuntimeError):
            mla_decode(*a, 1 / math.sqrt(192), impl="cutlass")


def test_cutlass_impl_says_why_it_cannot_run_here():
    a = _cutlass_case()
    reason = cutlass_unavailable_reason(a[0].device)
    if reason is None:  # pragma: no cover - only on Blackwell with sgl_kernel
        pytest.skip("cutlass_mla_decode can run here")
    with pytest.raises(RuntimeError) as e:
        mla_decode(*a, 1 / math.sqrt(192), impl="cutlass")
    assert str(e.value) == reason and "\n" not in reason
    if not torch.cuda.is_available():
        assert "no GPU" in reason
    # the contract is checked before availability: bad args give ValueError even here
    a[4] = torch.zeros(2, 3, dtype=torch.int32)
    with pytest.raises(ValueError, match="multiple of 128 / PAGE"):
        mla_decode(*a, 1 / math.sqrt(192), impl="cutlass")
    with pytest.raises(ValueError, match="always uses stride_policy='size'"):
        mla_decode(*_cutlass_case(), 0.1, impl="cutlass", stride_policy="stride")


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(1, 70), min_size=1, max_size=5), page=st.sampled_from([1, 8, 16, 64]),
       heads=st.integers(1, 6), splits=st.sampled_from([1, 2, 5, -1]), seed=st.integers(0, 10**6))
def test_property_torch_impl_matches_float64(lens, page, heads, splits, seed):
    case = random_decode_case(seed, heads=heads, page_size=page, lens=lens, d_latent=16, d_rope=8)
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(splits),
                     case.sm_scale, splits, impl="torch", checked=True)
    assert torch.isfinite(out).all() and rel_err(out, case.dense_f64()) < 1e-5


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_graph_replay_equals_eager_with_static_buffers(impl):
    """Captured once (CUDA graph on GPU, the emulator on CPU), replayed on new lengths and tables."""
    from mla_edu.graphs import Graph

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    a = random_decode_case(1, batch=3, heads=4, page_size=16, lens=[5, 30, 47], d_latent=32, d_rope=16, extra_cols=0,
                           device=dev)
    b = random_decode_case(2, batch=3, heads=4, page_size=16, lens=[48, 1, 20], d_latent=32, d_rope=16, extra_cols=0,
                           device=dev)
    assert a.page_table.shape == b.page_table.shape and a.cache.shape[1:] == b.cache.shape[1:]
    n = max(a.cache.size(0), b.cache.size(0))
    static = {k: getattr(a, k).clone() for k in ("q_nope", "q_pe", "seq_lens", "page_table")}
    cache = torch.zeros(n, 16, 48, device=dev)
    cache[: a.cache.size(0)] = a.cache
    ws = a.workspace(2)

    def step():
        return mla_decode(static["q_nope"], static["q_pe"], cache, static["seq_lens"], static["page_table"], ws,
                          a.sm_scale, 2, impl=impl)

    g, out = Graph.capture(step, warmup=1)
    for case in (b, a):
        for k in static:
            static[k].copy_(getattr(case, k))
        cache.fill_(float("nan"))
        cache[: case.cache.size(0)] = case.cache
        g.replay()
        assert rel_err(out, case.dense_f64()) < 1e-5


def test_pages_read_walks_the_storage_from_the_views_first_element():
    buf = torch.arange(12, dtype=torch.int32).view(3, 4)  # a persistent [3, 4] page-table buffer
    narrow = buf[:, :2]  # what a capture at width 2 sees
    assert pages_read(narrow, [2, 2, 1], row_stride=4) == [[0, 1], [4, 5], [8]]  # the buffer's stride: right
    assert pages_read(narrow, [2, 2, 1], row_stride=2) == [[0, 1], [2, 3], [4]]  # size(1): rows > 0 wrong
    tail = buf[2:]  # a view that starts inside the storage: indices count from its first element
    assert pages_read(tail, [3], row_stride=4) == [[8, 9, 10]]
    assert pages_read(buf, [1, 1, 3], row_stride=5) == [[0], [5], [10, 11, 11]]  # clamped like the kernel
    assert pages_read(buf, [1, 1, 3], row_stride=5, clamp=False) == [[0], [5], [10, 11, None]]


@pytest.mark.parametrize("impl", IMPLS)  # every registered impl, a new one included
def test_every_impl_matches_float64_or_says_why_it_cannot_run_here(impl):
    # the cutlass contract's shapes (512 + 64 dims, page 128, fp16) so that every impl accepts the call
    case = random_decode_case(5, heads=16, page_size=128, lens=[100, 300, 129], dtype=torch.float16, extra_cols=0)
    ws = case.workspace(1)
    args = (case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale)
    reason = cutlass_unavailable_reason(case.q_nope.device) if impl == "cutlass" else None
    if impl == "triton" and not TRITON_INTERPRET:  # a GPU machine: Triton compiles for the GPU, not these CPU tensors
        reason = "impl='triton' on CPU tensors needs TRITON_INTERPRET=1 set before triton is imported"
    if reason is not None:
        with pytest.raises(RuntimeError, match=re.escape(reason)):
            mla_decode(*args, impl=impl)
        return
    assert rel_err(mla_decode(*args, impl=impl), case.dense_f64()) < 2e-3


@pytest.mark.parametrize("kw, msg", [(dict(d_rope=-575), "d_rope must be > 0, got -575"),
                                     (dict(d_latent=0), "d_latent must be > 0, got 0"),
                                     (dict(sm_count=-3), "sm_count must be >= 0, got -3")])
def test_the_split_rule_refuses_dims_that_would_choose_silently(kw, msg):
    """An audit's find: d_rope=-575 made the rule pick 32 splits where it picks 1 (a negative page size in bytes)."""
    from mla_edu.kernels.workspace import stage2_pages, triton_num_kv_splits

    assert triton_num_kv_splits(4096, 64, 128, 64, 132) == 1
    with pytest.raises(ValueError, match=msg):
        triton_num_kv_splits(4096, 64, 128, 64, **{"sm_count": 132, **kw})
    if "sm_count" not in kw:
        with pytest.raises(ValueError, match=msg.replace("> 0", ">= 1")):
            stage2_pages(4, 16, 132, 64, **kw)
