"""The Gluon wgmma stage 1 (``split_kv_wgmma``, cp.async and TMA; ``split_kv_seesaw``): its switch and its TMA rule
on any machine, its answers on a Hopper GPU. What the compiler makes of it: ``tests/test_sm90.py``."""

import math

import pytest

pytestmark = pytest.mark.triton  # its kernels are Triton's (tests/conftest.py: skipped without Triton)
pytest.importorskip("triton", reason="needs Triton, which is not installed here (Linux wheels only)")
import torch

import mla_edu  # noqa: F401
from mla_edu.kernels import make_plan, mla_decode
from mla_edu.kernels import split_kv_seesaw as seesaw
from mla_edu.kernels import split_kv_triton as skt
from mla_edu.kernels import stage1
from mla_edu.kernels import split_kv_wgmma as wg
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kernels.contract import GLUON_KINDS, STAGE1_KINDS

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def test_seesaw_by_default_where_the_gluon_kernels_apply_else_tl():
    assert stage1.DEFAULT_GLUON == "seesaw" and set(GLUON_KINDS) | {"tl"} == set(STAGE1_KINDS)
    case = random_decode_case(0, batch=2, heads=64)
    plan = make_plan(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(1), 1)
    assert skt.plan_stage1(case.q_nope, case.q_pe, case.cache, plan, False).stage1 == "tl"  # CPU tensors
    assert skt.plan_stage1(case.q_nope, case.q_pe, case.cache, plan, False, "tl").stage1 == "tl"


def test_unknown_kind_is_refused():
    case = random_decode_case(0, batch=2, heads=64)
    plan = make_plan(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(1), 1)
    with pytest.raises(ValueError, match=r"stage1 must be None or one of \('tl', 'cp.async', 'tma', 'seesaw'\), "
                                         r"got 'wgmma'"):
        skt.plan_stage1(case.q_nope, case.q_pe, case.cache, plan, False, "wgmma")


def test_tma_applies_to_whole_pages_of_a_row_major_cache():
    cache = torch.empty(4, 64, 576, dtype=torch.bfloat16)
    assert wg.tma_applies(cache) and wg.tma_applies(torch.empty(4, 128, 576, dtype=torch.bfloat16))
    assert not wg.tma_applies(torch.empty(4, 16, 576, dtype=torch.bfloat16))  # a tile would span 4 pages
    assert wg.tma_applies(torch.empty(4, 64, 600, dtype=torch.bfloat16)[..., :576])  # rows 1200 B apart: fine
    assert not wg.tma_applies(torch.empty(4, 64, 580, dtype=torch.bfloat16)[..., :576])  # rows not 16-B aligned
    assert not wg.tma_applies(torch.empty(8, 64, 576, dtype=torch.bfloat16)[::2])  # pages not back to back


def test_launch_refuses_a_head_block_that_does_not_fit():
    case = random_decode_case(0, batch=2, heads=48)
    args = (case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table.reshape(-1), None, None, None,
            case.sm_scale, case.page_table.size(1), case.page_table.size(1), 1, True)
    with pytest.raises(ValueError, match=r"block_h must be one of \(64, 16, 32\) and divide the 48 heads, got 64"):
        wg.launch("tma", *args, block_h=64)
    with pytest.raises(ValueError, match=r"block_h must be one of \(64, 16, 32\) and divide the 48 heads, got 8"):
        wg.launch("tma", *args, block_h=8)
    with pytest.raises(ValueError, match=r"kind must be one of \('cp.async', 'tma'\), got 'wgmma'"):
        wg.launch("wgmma", *args, block_h=16)


def test_never_applies_to_cpu_tensors():
    case = random_decode_case(0, batch=2, heads=64)
    assert not skt.wgmma_applies(case.q_nope, case.q_pe, case.cache, case.page_table.size(1), False)


CASES = [  # page, heads, splits, dtype, batch, max_len
    (64, 128, 1, torch.bfloat16, 6, 900), (64, 128, 3, torch.bfloat16, 6, 900), (64, 128, -1, torch.float16, 6, 900),
    (16, 128, 1, torch.bfloat16, 6, 900), (16, 64, 5, torch.bfloat16, 8, 700), (128, 128, 2, torch.bfloat16, 5, 1000),
    (1, 128, 1, torch.bfloat16, 4, 300), (32, 256, 4, torch.float16, 4, 1500), (64, 128, 7, torch.bfloat16, 4, 300),
    # 16 and 32 heads a program: stage1_swapped_kernel (the last: 128 heads, a grid too small for 64 a program)
    (64, 16, 1, torch.bfloat16, 6, 900), (64, 16, 4, torch.bfloat16, 6, 900), (16, 16, 3, torch.float16, 5, 700),
    (128, 32, 2, torch.bfloat16, 5, 1000), (64, 64, 5, torch.bfloat16, 1, 600), (64, 128, 1, torch.bfloat16, 1, 500),
    # the balanced schedule at 32 heads: 16 heads a program up to B=16 (workspace.HALF_BLOCK_BATCH), 32 above; at 64
    # heads and B=64, more than 2 partials a request: stage 2 loads 4 at a time, no piece cap (schedule.few_partials)
    (64, 32, -1, torch.bfloat16, 16, 1000), (64, 32, -1, torch.float16, 17, 700), (64, 64, -1, torch.bfloat16, 64, 700),
]


@pytest.mark.skipif(not HOPPER, reason="the Gluon wgmma kernels run on sm90 GPUs only")
@pytest.mark.parametrize("kind", STAGE1_KINDS)  # "tl": the plain-Triton kernel, on the same cases
@pytest.mark.parametrize("case_args", CASES, ids=lambda c: f"page{c[0]}-h{c[1]}-s{c[2]}-{str(c[3])[6:]}-B{c[4]}")
def test_matches_float64_on_hopper(case_args, kind):
    page, heads, splits, dtype, batch, max_len = case_args
    case = random_decode_case(7, batch=batch, heads=heads, page_size=page, max_len=max_len, dtype=dtype,
                              device="cuda")  # every slot no request owns is NaN: a stray read shows
    assert skt.wgmma_applies(case.q_nope, case.q_pe, case.cache, case.page_table.size(1), False)
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(splits),
                     case.sm_scale, splits, impl="triton", stage1=kind)
    ref = case.dense_f64()
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-2, err


@pytest.mark.skipif(not HOPPER, reason="the Gluon wgmma kernels run on sm90 GPUs only")
@pytest.mark.parametrize("kind", GLUON_KINDS)
@pytest.mark.parametrize("heads", [128, 16])
def test_graph_replay_equals_eager_on_hopper(kind, heads):
    case = random_decode_case(3, batch=8, heads=heads, page_size=64, max_len=2000, dtype=torch.bfloat16,
                              device="cuda")
    ws = case.workspace(4)
    call = lambda: mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table,  # noqa: E731
                              ws, case.sm_scale, 4, impl="triton", stage1=kind)
    eager = call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    case.q_nope.mul_(-1)  # new inputs in the same buffers: the replay must follow them
    graph.replay()
    assert torch.equal(out, call())
    assert not torch.equal(out, eager)


def test_the_seesaw_kernel_reads_q_by_tma_where_its_rows_are_one_2d_view():
    # seesaw.q_descriptor: rows [B * H, 512] one row stride apart, base and rows 16-byte aligned; else None (the
    # kernel copies q through registers). On any machine: the descriptor is a host object
    q = torch.zeros(3, 128, 576, dtype=torch.bfloat16)
    for q_nope, row in ((q[..., :512].contiguous(), 512), (q[..., :512], 576), (q[:1, :, :512], 576)):
        desc = seesaw.q_descriptor(q_nope)
        assert (desc.shape, desc.strides, desc.block_shape) == ([q_nope.size(0) * 128, 512], [row, 1], [64, 256])
    assert seesaw.q_descriptor(q[..., :512].transpose(0, 1).contiguous().transpose(0, 1)) is None  # requests apart
    assert seesaw.q_descriptor(q[..., 1:513]) is None  # base 2 bytes off 16
    assert seesaw.q_descriptor(q.view(-1)[: 3 * 128 * 516].view(3, 128, 516)[..., :512]) is None  # rows 1,032 bytes
    assert seesaw.q_descriptor(torch.zeros(3, 128, 1024, dtype=torch.bfloat16)[..., ::2]) is None  # columns apart


#: Lengths around the seesaw kernel's edges: a pair is two 64-token tiles (warpgroup 0 scores the first, warpgroup 1
#: the second), so one below, at and above each multiple of 64 up to 3 pairs, a partial tile 0 or 1, a pair
#: without tile 1 (an odd tile count), and 0: first, and twice in the middle, where a part walking the batch
#: skips requests it holds no page of (it loads the next q ahead only for a request it does hold).
PAIR_EDGES = [0, 1, 63, 64, 65, 127, 0, 0, 128, 129, 191, 192, 193, 255, 256, 257, 383, 384, 385]


@pytest.mark.skipif(not HOPPER, reason="the Gluon wgmma kernels run on sm90 GPUs only")
@pytest.mark.parametrize("layout", ["contiguous", "slice", "transposed"])  # q by TMA, by TMA, through registers
@pytest.mark.parametrize("splits", [1, 3, -1])  # -1: the balanced schedule, a part walking several segments
def test_seesaw_at_every_tile_pair_edge_on_hopper(splits, layout):
    case = random_decode_case(5, heads=128, page_size=64, lens=PAIR_EDGES, dtype=torch.bfloat16, device="cuda")
    q_nope, q_pe = case.q_views(layout)
    assert (seesaw.q_descriptor(q_nope) is None) == (layout == "transposed")
    schedule = "balanced" if splits == -1 else "splits"
    ws = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    ref = case.dense_f64()  # every slot no request owns is NaN
    for sms in (132, 3) if splits == -1 else (132,):  # 3 SMs: 1 part, one program walks the whole batch
        out = mla_decode(q_nope, q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale,
                         splits, impl="triton", stage1="seesaw", schedule=schedule, sm_count=sms)
        assert torch.isfinite(out).all()
        for b in (0, 6, 7):  # no token: zeros
            assert torch.equal(out[b], torch.zeros_like(out[b]))
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-2, (sms, err)



#: (token, factor): cache rows scaled so that their scores pass the running max by far more than the rescale
#: threshold (``split_kv_seesaw.RESCALE_THRESHOLD``, 8 in log2 units) for the heads whose score is positive, and
#: fall below it for the others: the max moves in some rows of a tile and not in others. In each tile of a pair,
#: in the first pair and later ones, and in a partial last tile (the requests have 385 tokens).
SPIKES = [(10, 8.0), (70, 16.0), (130, 4.0), (200, 32.0), (260, 64.0), (384, 16.0)]


@pytest.mark.skipif(not HOPPER, reason="the Gluon wgmma kernels run on sm90 GPUs only")
@pytest.mark.parametrize("splits", [1, 2, -1])  # -1: the balanced schedule
def test_seesaw_rescales_where_a_max_moves_past_the_threshold_on_hopper(splits):
    case = random_decode_case(11, heads=128, page_size=64, lens=[385, 385, 64], dtype=torch.bfloat16, device="cuda")
    rows = case.cache.view(-1, case.cache.size(-1))
    for token, factor in SPIKES:
        rows[int(case.token_slots[0][token])] *= factor
        rows[int(case.token_slots[1][token])] *= -factor  # the other heads' scores jump there
    for b in (0, 1):  # the case covers both branches: rows whose max moves, rows whose max stays
        q = torch.cat([case.q_nope[b], case.q_pe[b]], -1).double()  # [H, 576]
        scores = q @ rows[case.token_slots[b]].double().T * case.sm_scale  # [H, 385], natural-log units
        jumps = torch.stack([scores[:, t] - scores[:, :t].amax(1) for t, _ in SPIKES], 1)
        assert (jumps > seesaw.RESCALE_THRESHOLD.value * math.log(2)).any() and (jumps < 0).any()
    schedule = "balanced" if splits == -1 else "splits"
    ws = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, splits,
                     impl="triton", stage1="seesaw", schedule=schedule)
    ref = case.dense_f64()
    err = ((out.double() - ref).abs().amax(-1) / ref.abs().amax(-1)).max().item()  # each head against its own scale
    assert err < 1e-2, err
