"""The balanced split-KV schedule (``kernels.schedule``): its units on the host for enumerated length sets,
``mla_decode(schedule="balanced")`` against float64 (Triton's interpreter on CPU; the real kernels, every
stage-1 kind, and graph replay with new lengths on a GPU)."""

from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.triton  # its kernels are Triton's (tests/conftest.py: skipped without Triton)
pytest.importorskip("triton", reason="needs Triton, which is not installed here (Linux wheels only)")
import torch

import mla_edu  # noqa: F401
from mla_edu.kernels import make_plan, mla_decode
from mla_edu.kernels import schedule as sc
from mla_edu.kernels import split_kv_triton as skt
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kernels import stage1
from mla_edu.kernels.contract import STAGE1_KINDS
from mla_edu.kernels.workspace import HALF_BLOCK_BATCH, SPLIT_COST_PAGES, gpu_block_h, stage2_pages
from mla_edu.util import PAGE_SIZE, cdiv

DEV = "cuda" if torch.cuda.is_available() else "cpu"
HOPPER = DEV == "cuda" and torch.cuda.get_device_capability()[0] == 9

LENGTH_SETS = [  # (page, max_pages, lengths): ones, zeros, negatives, page multiples, past the table, one giant
    (16, 20, [1]), (16, 20, [0]), (16, 20, [-5, 3]), (16, 20, [16, 32, 320]), (16, 4, [100, 1, 64, 65]),
    (64, 500, [205, 2043, 28562, 1, 64, 4096]), (64, 64, [4096] * 64), (1, 40, [40, 1, 39, 7]),
    (128, 300, [37000, 5, 128, 129, 255]), (1, 100, [100, 3]),  # the last: one request cut into MAX_PIECES
]


@pytest.mark.parametrize("page,max_pages,lens", LENGTH_SETS)
@pytest.mark.parametrize("parts", [1, 3, 66, 132])
def test_segments_cover_every_token_once(page, max_pages, lens, parts):
    for heads in (16, 64):  # the piece cap of small batches; and at 64 heads where stage 2 merges one at a time
        check_segments(page, max_pages, lens, parts, heads)


@pytest.mark.parametrize("heads, batch, capped", [(16, 15, True), (16, 16, False), (32, 64, False),
                                                  (64, 16, False), (64, 64, False), (64, 128, False),
                                                  (64, 256, True), (128, 64, False), (128, 16, False),
                                                  (64, 8, True), (128, 1, True)])
def test_the_piece_cap_holds_where_stage_2_merges_one_partial_at_a_time(heads, batch, capped):
    # max_pieces' three conditions, each way: B below 16 (at 16 and at 64 heads or more); 64 heads or more; few
    # partials (at 64 heads or more: at most 2 a request). B=16: 132 parts + 15 rows > 4 per request (STAGE2_MANY,
    # 4 at a time); at 64 heads B=64 and 128 have more than 2 (STAGE2_MANY), B=256 fewer (FEW_WIDE, one at a time);
    # at 128 heads (66 parts) B=64 has 129 rows, just over 2 a request
    parts = sc.num_parts(heads, 132, batch, 1024)
    assert sc.max_pieces(batch, heads, parts) == (sc.MAX_PIECES if capped else 0)
    lens = [512] * batch
    lens[batch // 2] = 65536  # one giant request among short ones: the cap sets the chunk if it holds
    w = [8 + sc.FIXED_OVERHEAD_PAGES] * (batch - 1) + [1024 + sc.FIXED_OVERHEAD_PAGES]
    share = sc.balanced_chunk(w, parts, 0)
    expect = sc.balanced_chunk(w, parts, sc.MAX_PIECES) if capped else share
    assert sc.stage1_makespans(lens, 64, heads, 132, 1)[1] == expect + sc.FIXED_OVERHEAD_PAGES
    assert (expect > share) == capped


@pytest.mark.parametrize("page,max_pages,lens", LENGTH_SETS)
@pytest.mark.parametrize("heads,sms", [(16, 132), (32, 132), (64, 132), (128, 132), (16, 4), (128, 2)])
def test_balanced_partials_are_the_partitions_partial_rows(page, max_pages, lens, heads, sms):
    parts = sc.num_parts(heads, sms, len(lens), max_pages)
    rows = sc.host_segments(lens, page, max_pages, parts, heads)
    assert sc.balanced_partials(lens, page, heads, sms, max_pages) == sum(r.flag == sc.PARTIAL for r in rows)


def test_makespans_add_stage_2_on_both_sides():
    # four one-page requests at 16 heads: no request is cut (no partial), yet the balanced schedule's stage 2 runs,
    # its launch alone (SPLIT_COST_PAGES); the rule at one split has no stage 2. Stage 1: the rule's four programs
    # of 5 + 1 page-times; a part's chunk of 2 and one overhead.
    assert sc.balanced_partials([64] * 4, 64, 16, 132) == 0
    assert sc.stage1_makespans([64] * 4, 64, 16, 132, 1) == (6, 7)
    assert sc.makespans([64] * 4, 64, 16, 132, 1) == (6, 7 + SPLIT_COST_PAGES)
    # one request of 40 pages: chunk 2 (45 page-times over 132 parts, at least MIN_PART_PAGES), its pages at
    # x = 5..44 span parts 2..22: 21 partial rows; the rule at 8 splits merges B * 8 = 8 rows
    assert sc.balanced_partials([64 * 40], 64, 16, 132) == 21
    for lens, heads, splits in (([64 * 40], 16, 8), ([64 * 40], 16, 1), ([205, 2043, 28562, 1, 64, 4096], 32, 4),
                                ([4096] * 64, 128, 2), ([7702, 102] + [627] * 14, 128, 16)):
        rule, balanced = sc.stage1_makespans(lens, 64, heads, 132, splits)
        got = sc.makespans(lens, 64, heads, 132, splits)
        assert got[0] == rule + (stage2_pages(len(lens) * splits, heads, 132, 64) if splits > 1 else 0)
        assert got[1] == balanced + stage2_pages(sc.balanced_partials(lens, 64, heads, 132), heads, 132, 64)


def test_the_balanced_schedule_takes_16_heads_a_program_at_32_heads_in_small_batches():
    # workspace.HALF_BLOCK_BATCH: at 32 heads, B <= 16, two 16-head programs a part on half as many parts; the split
    # rule keeps 32 (except on a grid too small for it, SMALL_GRID), and no other head count changes
    for batch in range(1, 40):
        half = batch <= HALF_BLOCK_BATCH
        assert gpu_block_h(32, batch, 64, balanced=True) == (16 if half else 32)
        assert gpu_block_h(32, batch, 64) == 32
        assert sc.num_parts(32, 132, batch, 64) == (66 if half else 132)
        for heads in (16, 24, 31, 64, 128):  # 24 and 31 take 32-head programs too, but were not measured
            assert gpu_block_h(heads, batch, 64, balanced=True) == gpu_block_h(heads, batch, 64)
    assert gpu_block_h(32, 1, 16) == 16  # 1 x 1 x 16 programs <= SMALL_GRID
    plan = SimpleNamespace(heads=32, batch=16, width=64, schedule="balanced")
    for want in (16, 32):  # the launch configs agree with num_parts: both kernels' head blocks
        assert [stage1.impl(k).launch_config(k, plan, True)[0] for k in ("tma", "tl")] == [want, want]
        plan.schedule = "splits"


def check_segments(page, max_pages, lens, parts, heads):
    segs = sc.segments(torch.tensor(lens, dtype=torch.int32, device=DEV), page, max_pages, parts, heads)
    assert sc.host_segments(lens, page, max_pages, parts, heads) == segs  # the host's copy, row for row
    rows = [s.part + s.request for s in segs]
    assert rows == sorted(set(rows)) and all(0 <= r < sc.workspace_rows(len(lens), parts) for r in rows)
    assert all(0 <= s.part < parts for s in segs)
    n = [min(cdiv(max(x, 0), page), max_pages) for x in lens]
    w = [k + sc.FIXED_OVERHEAD_PAGES if k else 0 for k in n]
    pieces = sc.max_pieces(len(lens), heads, parts)
    chunk = max(cdiv(sum(w), parts), sc.MIN_PART_PAGES, cdiv(max(w), sc.MAX_PIECES - 1) if pieces else 0)
    for p in range(parts):  # each part near its share: at most chunk pages, and one overhead beyond it in all
        mine = [cdiv(s.t_end - s.t_start, page) for s in segs if s.part == p]
        assert sum(mine) + len(mine) * sc.FIXED_OVERHEAD_PAGES <= chunk + sc.FIXED_OVERHEAD_PAGES  # so pages <= chunk
    if any(n):  # the last page of the last request sits at sum(w) - 1 on the line: the chunk is exact
        assert max(s.part for s in segs) == (sum(w) - 1) // chunk
    for b, x in enumerate(lens):
        mine = [s for s in segs if s.request == b]
        if not n[b]:
            assert mine == []  # an empty request has no part: stage 2 writes its zeros
            continue
        own = [s.part for s in mine]
        assert own == list(range(own[0], own[-1] + 1)) and len(own) <= (pieces or parts)  # stage 2: rows p + b
        assert all(s.flag == (sc.DIRECT if len(mine) == 1 else sc.PARTIAL) for s in mine)
        covered = [t for s in mine for t in range(s.t_start, s.t_end)]
        assert covered == list(range(min(max(x, 0), n[b] * page)))  # each token once, in order
        assert all(s.t_start % page == 0 for s in mine if s.t_end > s.t_start)  # pieces start on a page


def test_balanced_beats_one_split_count_on_a_ragged_batch():
    # the example shape: B = 64, lengths from 205 to 28562 tokens (seeded log-normal), page 64, 16 heads
    lens = sc.lognormal_lengths(64, 2048, seed=0)
    bars, balanced = sc.part_timeline(lens, 64, 16, 132)
    fixed = min(sc.simulate(sc.pages_per_program(lens, 64, 16, 132, num_splits=s), 132)[1] for s in range(1, 33))
    assert balanced < 0.5 * fixed
    assert len({slot for _, _, slot, _ in bars}) >= 125  # nearly every SM gets work (the chunk is rounded up)
    ideal = sum(cdiv(x, 64) for x in lens) / 132
    assert balanced < ideal + 3 * sc.FIXED_OVERHEAD_PAGES  # within a few requests' overhead of a perfect split


def test_lognormal_lengths_are_seeded_and_clipped():
    a = sc.lognormal_lengths(128, 1024, seed=3)
    assert a == sc.lognormal_lengths(128, 1024, seed=3) and a != sc.lognormal_lengths(128, 1024, seed=4)
    assert len(a) == 128 and min(a) >= 1 and max(a) <= sc.MAX_LOGNORMAL_LEN
    assert sorted(a)[64] in range(512, 2049)  # the median near the one asked for


def _case(seed, lens, dtype=torch.float32, heads=4, device=DEV, **kw):
    return random_decode_case(seed, heads=heads, page_size=kw.pop("page_size", 16), lens=lens, dtype=dtype,
                              device=device, **kw)


def _balanced(case, sm_count, **kw):
    b, h, dl = case.q_nope.shape
    target = sc.num_parts(h, sm_count, b, case.page_table.size(1))
    ws = torch.full((sc.workspace_bytes(b, h, dl, target),), 0xFF, dtype=torch.uint8, device=case.q_nope.device)
    return mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, -1,
                      impl="triton", schedule="balanced", sm_count=sm_count, **kw)


INTERP_CASES = [  # lengths, sm_count (few SMs: long requests cut into many units, short ones alone)
    ([1, 200, 33, 0, 64], 8), ([300, 2, 2, 2], 4), ([17], 1), ([5, 90, 161, 48, 16, 1], 16),
    ([1500, 3, 5, 0], 16),  # one request in 15 partials: stage 2's merge loops over blocks of them
]


@pytest.mark.parametrize("lens,sms", INTERP_CASES)
@pytest.mark.parametrize("checked", [False, True])
def test_matches_float64(lens, sms, checked):
    case = _case(11, lens, d_latent=32, d_rope=16)  # every slot no request owns is NaN
    out = _balanced(case, sms, checked=checked)
    ref = case.dense_f64()
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5


STAGE2_CONFIGS = [skt.STAGE2_MANY, skt.STAGE2_FEW_WIDE, skt.STAGE2_FEW_NARROW]


@pytest.mark.parametrize("config", STAGE2_CONFIGS)
def test_each_stage2_config_matches_float64(config):
    # the configs stage2_config chooses from, each on every interpreter case: at 16 heads and 64 latent columns
    # they differ in heads a program (8 or 16) and partials loaded together (1, 2, 4)
    for lens, sms in INTERP_CASES:
        case = _case(16, lens, heads=16, d_latent=64, d_rope=16)
        b, h, dl = case.q_nope.shape
        ws = torch.full((sc.workspace_bytes(b, h, dl, sc.num_parts(h, sms, b, case.page_table.size(1))),), 0xFF,
                        dtype=torch.uint8, device=case.q_nope.device)
        args = (case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws)
        plan = skt.plan_stage1(*args[:3], make_plan(*args, 1, "size", sms, "balanced"), False)
        out = skt.mla_decode_triton_balanced(*args, case.sm_scale, plan, False, stage2=config)
        ref = case.dense_f64()
        assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5, (config, lens, sms)


def test_balanced_call_runs_stage2_config_of_its_batch(monkeypatch):
    seen = []
    choose = skt.stage2_config
    monkeypatch.setattr(skt, "stage2_config", lambda *a: seen.append(a) or choose(*a))
    case = _case(17, [5, 90, 161, 48], heads=4, d_latent=32, d_rope=16)
    _balanced(case, 16)
    assert seen == [(4, 4, sc.num_parts(4, 16, 4, case.page_table.size(1)))]


def test_stage2_config_by_pieces_per_request_and_heads():
    # every batch size to 300 at each head count, around the boundary parts + B - 1 = few * B (few: 4 partials a
    # request below 64 heads, 2 from 64 up), and the GPU's parts
    for heads in (1, 16, 32, 63, 64, 128):
        wide = skt.STAGE2_FEW_WIDE if heads >= 64 else skt.STAGE2_FEW_NARROW
        few = 2 if heads >= 64 else 4
        for batch in range(1, 301):
            edge = (few - 1) * batch + 1  # parts at which a request has `few` partials on average, at most
            assert skt.stage2_config(batch, heads, edge) == wide
            assert skt.stage2_config(batch, heads, edge + 1) == skt.STAGE2_MANY
            for sms in (132, 8):
                parts = sc.num_parts(heads, sms, batch, 64)
                want = skt.STAGE2_MANY if parts + batch - 1 > few * batch else wide
                assert skt.stage2_config(batch, heads, parts) == want
    # the H200's bench batches (132 SMs): B=16 many pieces; at 16 heads B >= 64 few; at 128 heads B=64 many, B=128 few
    assert skt.stage2_config(16, 128, 66) == skt.STAGE2_MANY and skt.stage2_config(16, 16, 132) == skt.STAGE2_MANY
    assert skt.stage2_config(64, 128, 66) == skt.STAGE2_MANY and skt.stage2_config(128, 64, 132) == skt.STAGE2_MANY
    assert skt.stage2_config(128, 128, 66) == skt.STAGE2_FEW_WIDE
    assert skt.stage2_config(256, 64, 132) == skt.STAGE2_FEW_WIDE
    assert skt.stage2_config(64, 16, 132) == skt.STAGE2_FEW_NARROW
    for bad in ((0, 16, 4), (4, 0, 4), (4, 16, 0)):
        with pytest.raises(ValueError, match=r"stage2_config needs batch, heads and parts >= 1, got"):
            skt.stage2_config(*bad)


def test_checked_poisons_only_the_bad_request():
    case = _case(12, [40, 90, 3], d_latent=32, d_rope=16)
    case.page_table[1, 2] = case.cache.size(0) + 5  # request 1's third page id is out of range
    out = _balanced(case, 4, checked=True)
    assert torch.isnan(out[1]).all() and torch.isfinite(out[[0, 2]]).all()


def test_bad_arguments_are_refused():
    case = _case(13, [10, 20], d_latent=32, d_rope=16)
    call = lambda ws, splits=-1, **kw: mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens,  # noqa: E731
                                                  case.page_table, ws, case.sm_scale, splits, **kw)
    ws = torch.zeros(1 << 20, dtype=torch.uint8, device=DEV)
    with pytest.raises(ValueError, match=r"schedule must be one of \('splits', 'balanced'\), got 'lpt'"):
        call(ws, impl="triton", schedule="lpt")
    with pytest.raises(ValueError, match="schedule='balanced' needs impl='triton', got impl='torch'"):
        call(ws, impl="torch", schedule="balanced")
    with pytest.raises(ValueError, match="num_kv_splits must be -1, got 2"):
        call(ws, 2, impl="triton", schedule="balanced")
    with pytest.raises(ValueError, match=r"workspace too small for the balanced schedule: need 32208 bytes "
                                         r"\(B=2, H=4, 61 rows of partials, 60 SMs\), got 100 bytes"):
        call(ws[:100], impl="triton", schedule="balanced", sm_count=60)
    # the launch itself, given a plan make_plan did not count parts for, or a workspace smaller than its plan's
    args = (case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table)
    splits = skt.plan_stage1(*args[:3], make_plan(*args, ws, 1, "size", 60), False)
    with pytest.raises(ValueError, match=r"expected a plan from make_plan\(\.\.\., schedule='balanced'\) "
                                         r"\(parts >= 1\), got schedule='splits', parts=0"):
        skt.mla_decode_triton_balanced(*args, ws, case.sm_scale, splits, False)
    plan = skt.plan_stage1(*args[:3], make_plan(*args, ws, 1, "size", 60, "balanced"), False)
    assert (plan.parts, plan.sm_count) == (60, 60)  # rows = B + parts - 1 = 61
    with pytest.raises(ValueError, match=r"need 32208 bytes \(B=2, H=4, 61 rows of partials, 60 SMs\), got 100"):
        skt.mla_decode_triton_balanced(*args, ws[:100], case.sm_scale, plan, False)


@pytest.mark.skipif(DEV != "cuda", reason="real kernels on a GPU")
@pytest.mark.parametrize("stage1", STAGE1_KINDS if HOPPER else ["tl"])
@pytest.mark.parametrize("heads,page", [(128, 64), (16, 64), (128, 16), (32, 128)])
def test_ragged_bf16_on_gpu(stage1, heads, page):
    if stage1 in ("tma", "seesaw") and page % 64:
        pytest.skip("TMA reads whole 64-token tiles of one page")
    lens = sc.lognormal_lengths(24, 700, seed=heads + page)
    case = _case(14, lens, torch.bfloat16, heads=heads, page_size=page, device="cuda")
    ref = case.dense_f64()
    for sms in (132, 7):
        out = _balanced(case, sms, stage1=stage1)
        assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2


@pytest.mark.skipif(DEV != "cuda", reason="CUDA graphs")
@pytest.mark.parametrize("heads", [128, 16])
def test_graph_replay_follows_new_lengths(heads):
    # captured with one batch's lengths, replayed with others in the same buffers: equal to eager every time
    case = _case(15, [3000] * 8, torch.bfloat16, heads=heads, page_size=64, device="cuda")  # pages for 3000 each
    case.seq_lens.copy_(torch.tensor([3000, 10, 700, 64, 1, 2500, 90, 129], dtype=torch.int32))
    b, h, dl = case.q_nope.shape
    target = sc.num_parts(h, 132, b, case.page_table.size(1))
    ws = torch.empty(sc.workspace_bytes(b, h, dl, target), dtype=torch.uint8, device="cuda")
    call = lambda: mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table,  # noqa: E731
                              ws, case.sm_scale, -1, impl="triton", schedule="balanced")
    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    for lens in ([1, 1, 1, 1, 1, 1, 1, 1], [3000, 3000, 3000, 3000, 3000, 3000, 3000, 3000], [0, 2999, 5, 64, 65, 1,
                                                                                                128, 1000]):
        case.seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))  # pages past the old lengths hold NaN
        graph.replay()
        assert torch.isfinite(out).all() and torch.equal(out, call())


def test_triton_backend_chooses_each_batchs_schedule_from_its_lengths():
    # auto splits with the Triton kernel: schedule.prefers_balanced on the lengths, the rule's count for the batch
    # size; here with 2 SMs, where a batch of one long request and short ones needs the schedule and a uniform
    # one does not. The same choice names the graph a replay runs (choose_graph_variant: padded rows included)
    from tiny_models import random_tiny_model

    from mla_edu.serving import Engine

    eng = Engine(random_tiny_model(qk_rope_head_dim=16), attention_backend="triton", kernel_impl="triton",
                 num_kv_splits=-1, context_length=8192, sm_count=2, disable_cuda_graph=True)
    backend = eng.runner.backend
    widths = (1, 2, 4, 8, 16, 32, 64, 65)  # the table's 65 columns of 128 tokens, and each power of two below
    assert backend.chooses_schedule() and backend.widths() == widths
    assert backend.graph_variants() == tuple((w, s) for w in widths for s in ("splits", "balanced"))
    skewed, uniform = [6000, 30, 30, 30], [1500] * 4  # the longest: 47 pages, 12 pages
    assert backend.choose_schedule(skewed, 2) == "balanced" and backend.choose_schedule(uniform, 2) == "splits"
    assert backend.num_heads == 2  # the model's, known before any capture
    assert backend.choose_graph_variant(4, torch.tensor(skewed + [1] * 4, dtype=torch.int32)) == (64, "balanced")
    assert backend.choose_graph_variant(4, torch.tensor(uniform + [6000] * 4, dtype=torch.int32)) == (16, "splits")
    assert backend.choose_step([128 * 64], 2)[0] == 64 and backend.choose_step([128 * 64 + 1], 2)[0] == 65
    with pytest.raises(ValueError, match="at most 8320 tokens"):
        backend.choose_step([128 * 65 + 1], 2)
    for other in (dict(kernel_impl="torch"), dict(num_kv_splits=2)):  # no choice: one graph per size, the rule
        b = Engine(random_tiny_model(qk_rope_head_dim=16), attention_backend="triton", disable_cuda_graph=True,
                   **{"kernel_impl": "triton", "num_kv_splits": -1, **other}).runner.backend
        assert not b.chooses_schedule() and b.graph_variants() == (None,) and b.choose_graph_variant(1, None) is None


def test_triton_backend_replays_the_graph_of_the_chosen_schedule(monkeypatch):
    # a graph per batch size and schedule, the one the backend names replayed: under graph replay (the CPU emulator
    # here; real graphs on a GPU) the same tokens as the torch impl, the schedule chosen splits, splits, balanced, ...
    # (each graph replayed twice in a row, and each after the other)
    from tiny_models import random_prompts, random_tiny_model

    from mla_edu.kernels import observe_plans
    from mla_edu.serving import Engine
    from mla_edu.serving.backends.triton import TritonBackend

    steps = []

    def choose(self, lens, heads, width=None):
        pick = ("splits", "splits", "balanced")[len(steps) % 3]
        pages = -(-max(lens) // PAGE_SIZE)
        assert width == min([w for w in self.widths() if w >= pages])  # the narrowest that holds the longest
        steps.append((width, pick))
        return pick

    monkeypatch.setattr(TritonBackend, "choose_schedule", choose)
    model = random_tiny_model(qk_rope_head_dim=16)
    ps = random_prompts(4, 3, 20, 260)
    runs = {}
    # torch eager, the Triton impl under graphs, and the Triton impl eager: one choice a step, not a layer
    for impl, graphs in (("torch", False), ("triton", True), ("triton", False)):
        captured = []
        with observe_plans(lambda plan, table, ws: captured.append(plan.schedule)):  # the captures' launches
            eng = Engine(model, attention_backend="triton", kernel_impl=impl, num_kv_splits=-1, context_length=384,
                         max_running_requests=3,
                         **({"cuda_graph_bs": (4,)} if graphs else {"disable_cuda_graph": True}))
        assert set(captured) == ({"splits", "balanced"} if graphs else set())  # each graph its own path
        steps.clear()
        replays = []
        for key, g in (eng.runner.graph_runner.graphs.items() if graphs else ()):
            monkeypatch.setattr(g, "replay", lambda g=g, key=key: (replays.append(key[1]), type(g).replay(g)))
        widths = eng.runner.backend.widths()
        assert widths == ((1, 2, 4) if impl == "triton" else (4,))  # 384 tokens: 4 columns of 128
        runs[impl, graphs] = [r.output_ids for r in eng.generate(ps, max_new_tokens=4, stop_token_ids=())]
        if impl == "triton" and not graphs:
            assert len(steps) == eng.stats["decode_steps"] >= 3 and eng.stats["graph_steps"] == 0
        if graphs:
            assert set(eng.runner.graph_runner.graphs) == {(4, (w, s)) for w in widths for s in ("splits", "balanced")}
            assert replays == steps and len(steps) == eng.stats["graph_steps"] >= 3  # the graph each step chose
    assert all(tokens == runs["torch", False] for tokens in runs.values())


@pytest.mark.parametrize("schedule", ["balanced", "splits"])
def test_a_view_narrower_than_its_rows_sizes_the_launch_and_reads_whole_requests(schedule):
    # a [:, :1] view of a wider table, its real row stride: the launch is sized for 1 column (DecodePlan.width: the
    # parts, the head block), each request still reads all its pages through the stride (max_pages), NaN past them
    from mla_edu.kernels import observe_plans

    case = random_decode_case(5, heads=64, page_size=16, lens=[300, 2, 0, 17], d_latent=32, d_rope=16, device=DEV)
    view = case.page_table[:, :1]
    b, h, dl = case.q_nope.shape
    # the balanced partials of the parts 1 column gives, no more: parts counted on the 20-column rows would not fit
    size = sc.workspace_bytes(b, h, dl, sc.num_parts(h, 8, b, 1)) if schedule == "balanced" else 1 << 22
    ws = torch.zeros(size, dtype=torch.uint8, device=DEV)
    plans = []
    with observe_plans(lambda plan, table, workspace: plans.append(plan)):
        out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, view, ws, case.sm_scale, -1,
                         impl="triton", schedule=schedule, sm_count=8, stride_policy="stride")
    ref = case.dense_f64()
    assert ((out.double() - ref.to(out.device)).abs().max() / ref.abs().max()).item() < 1e-5
    (plan,) = plans
    assert plan.width == 1 and plan.max_pages == case.page_table.size(1) == 20  # 300 tokens: 19 pages, and one
    assert sc.num_parts(h, 8, b, plan.width) != sc.num_parts(h, 8, b, plan.max_pages)  # the case tells them apart


@pytest.mark.parametrize("batch, parts", [(16, 132), (16, 66), (64, 132), (1, 132)])
def test_a_giant_request_is_cut_as_the_share_falls_where_no_cap_holds(batch, parts):
    # one 64K-token request among 512-token ones at 16 heads: from B=16 on no piece cap (schedule.max_pieces), so it
    # is cut about as FlashMLA cuts it; at B=1 the cap stays
    from mla_edu.kernels import flashmla_schedule as fs

    lens = [512] * batch
    lens[batch // 2] = 65536
    segs = sc.segments(torch.tensor(lens, dtype=torch.int32, device=DEV), 64, 1024, parts, 16)
    pieces = sum(s.request == batch // 2 for s in segs)
    if batch >= sc.PIECE_CAP_BATCH:
        assert pieces > sc.MAX_PIECES and abs(pieces - fs.pieces_per_request(lens, parts)[batch // 2]) <= 1
    else:
        assert pieces < sc.MAX_PIECES  # the chunk is ceil(w / (MAX_PIECES - 1))


@pytest.mark.parametrize("heads", [4, 64])
def test_a_request_cut_into_more_pieces_than_the_cap_matches_float64(heads):
    # B=16 with one long request: uncapped below 64 heads (stage 2 merges 4 partials at a time) and cut into more
    # than MAX_PIECES; stage 1 and stage 2 compute the same partition, every unused cache slot NaN
    lens = [40] * 15 + [4000]
    lens[5] = 0
    case = random_decode_case(21, heads=heads, page_size=16, lens=lens, dtype=torch.float32, device=DEV, d_latent=32,
                              d_rope=16)
    b, h, dl = case.q_nope.shape
    parts = sc.num_parts(h, 64, b, case.page_table.size(1))
    pieces = sum(s.request == 15 for s in sc.segments(lens, 16, case.page_table.size(1), parts, h))
    assert pieces > sc.MAX_PIECES if sc.max_pieces(b, h, parts) == 0 else pieces <= sc.MAX_PIECES
    ws = torch.full((sc.workspace_bytes(b, h, dl, parts),), 0xFF, dtype=torch.uint8, device=DEV)
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, -1,
                     impl="triton", schedule="balanced", sm_count=64)
    ref = case.dense_f64()
    assert torch.isfinite(out).all()
    assert ((out.double() - ref.to(out.device)).abs().max() / ref.abs().max()).item() < 1e-5
