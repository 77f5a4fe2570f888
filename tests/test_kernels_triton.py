"""mla_decode impl="triton" (Triton interpreter on CPU; real kernels on GPU) vs float64 dense."""

import pytest
import torch

import mla_edu  # noqa: F401
from mla_edu.kernels import IMPLS, get_workspace_size, mla_decode, observe_plans
from mla_edu.kernels.cases import random_decode_case as _case
from op_log import OpLog

pytestmark = pytest.mark.triton  # every test runs impl="triton" (tests/conftest.py: skipped without Triton)

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: Triton's interpreter; GPU: real kernels


def random_decode_case(*args, **kw):
    return _case(*args, device=DEV, **kw)


def _two_requests():
    """Two requests of 20 and 40 tokens, 4 heads, pages of 16, a small latent: the launch-level tests' case."""
    return random_decode_case(1, batch=2, heads=4, page_size=16, lens=[20, 40], d_latent=32, d_rope=16)


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def run(case, splits, **kw):
    return mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(splits),
                      case.sm_scale, splits, impl="triton", **kw)


@pytest.mark.parametrize("seed", range(36))
def test_random_cases_match_float64(seed):
    g = torch.Generator().manual_seed(20_000 + seed)
    page = [1, 16, 64, 128][seed % 4]
    heads = [1, 4, 16, 20][int(torch.randint(0, 4, (1,), generator=g))]
    batch = int(torch.randint(1, 5, (1,), generator=g))
    max_len = int(torch.randint(1, 40 if page == 1 else 300, (1,), generator=g))
    real_dims = seed % 6 == 0
    case = random_decode_case(seed, batch=batch, heads=heads, page_size=page, max_len=max_len,
                              d_latent=512 if real_dims else 32, d_rope=64 if real_dims else 16,
                              extra_cols=int(torch.randint(0, 3, (1,), generator=g)))
    splits = [1, 2, 3, -1][seed % 4]
    out = run(case, splits)
    assert out.shape == case.q_nope.shape
    assert torch.isfinite(out).all(), "read an unused (NaN) page or slot"
    assert rel_err(out, case.dense_f64()) < 1e-5


@pytest.mark.parametrize("d_latent,d_rope", [(8, 4), (16, 8), (40, 12)])
def test_head_dims_narrower_than_a_dot_tile(d_latent, d_rope):
    # compiled Triton refuses tl.dot with K < 16, so the kernel pads such widths to 16 and masks the pad
    case = random_decode_case(3, batch=3, heads=4, page_size=16, lens=[7, 33, 16], d_latent=d_latent, d_rope=d_rope)
    for s in (1, 2):
        assert rel_err(run(case, s), case.dense_f64()) < 1e-5


def test_fp16():
    case = random_decode_case(4, batch=3, heads=4, page_size=16, lens=[1, 16, 45], dtype=torch.float16)
    for s in (1, 2):
        out = run(case, s)
        assert out.dtype == torch.float16 and rel_err(out, case.dense_f64()) < 5e-3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 runs on GPU only")
def test_bf16_on_gpu():
    case = random_decode_case(4, batch=5, heads=16, page_size=64, lens=[1, 64, 300, 129, 77], dtype=torch.bfloat16)
    for s in (1, 2, -1):
        assert rel_err(run(case, s), case.dense_f64()) < 2e-2


@pytest.mark.skipif(torch.cuda.is_available(), reason="bf16 is refused only under the CPU interpreter")
def test_bf16_on_cpu_is_refused():
    case = random_decode_case(4, batch=1, heads=2, page_size=16, lens=[5], d_latent=32, d_rope=16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="computes bfloat16 wrongly"):
        run(case, 1)


def test_triton_equals_torch_impl_bitwise_close_on_splits():
    case = random_decode_case(9, batch=3, heads=16, page_size=16, lens=[100, 1, 64], d_latent=32, d_rope=16)
    for s in (1, 4):
        ws = case.workspace(s)
        a = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, s,
                       impl="torch")
        b = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, s,
                       impl="triton")
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_size_policy_on_narrow_view():
    case = random_decode_case(7, batch=4, heads=4, page_size=16, lens=[40, 33, 17, 48], d_latent=32, d_rope=16,
                              extra_cols=0)
    w = case.page_table.size(1)
    buf = torch.full((6, w + 5), 1, dtype=torch.int32, device=DEV)
    buf[:4, :w] = case.page_table
    ref = case.dense_f64()
    ws = case.workspace(2)
    args = (case.q_nope, case.q_pe, case.cache, case.seq_lens)
    bad = mla_decode(*args, buf[:4, :1], ws, case.sm_scale, 2, impl="triton")
    assert rel_err(bad[0], ref[0]) < 1e-5
    assert all(not rel_err(bad[b], ref[b]) < 0.1 for b in range(1, 4))
    good = mla_decode(*args, buf[:4, :1], ws, case.sm_scale, 2, impl="triton", stride_policy="stride")
    assert rel_err(good, ref) < 1e-5
    full = mla_decode(*args, buf[:4], ws, case.sm_scale, 2, impl="triton")
    assert rel_err(full, ref) < 1e-5


def test_checked_mode_and_workspace_errors():
    case = random_decode_case(11, batch=3, heads=4, page_size=16, lens=[20, 5, 33], d_latent=32, d_rope=16)
    table = case.page_table.clone()
    table[0, 1] = -3
    ws = case.workspace(2)
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, table, ws, case.sm_scale, 2, impl="triton",
                     checked=True)
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1:]).all()
    assert rel_err(out[1:], case.dense_f64()[1:]) < 1e-5
    small = torch.empty(get_workspace_size(48, 3, 0, 1), dtype=torch.uint8, device=DEV)
    with pytest.raises(ValueError, match="workspace too small for 3 KV splits"):
        mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, small, case.sm_scale, 3,
                   impl="triton")


def test_each_launch_is_one_custom_op():
    case = _two_requests()
    for s, expect in ((1, ["mla_edu.mla_decode_stage1.default"]),
                      (2, ["mla_edu.mla_decode_stage1.default", "mla_edu.mla_decode_stage2.default"])):
        ws = case.workspace(s)
        with OpLog() as log:
            out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, s,
                             impl="triton")
        assert [x for x in log.ops if "mla_edu" in x] == expect
        assert rel_err(out, case.dense_f64()) < 1e-5


def test_launch_configs_default_explicit_and_interpreted():
    from mla_edu.kernels.stage1 import tl as skt

    assert skt.launch_config(128, on_gpu=True) == (64, *skt.GPU_CONFIGS[64])  # 128 heads: two 64-head blocks
    assert skt.launch_config(20, on_gpu=True)[0] == 32
    assert skt.launch_config(128, on_gpu=False)[:2] == (128, 64)  # the interpreter's own
    case = _two_requests()
    plans = []
    with observe_plans(lambda plan, table, ws: plans.append(plan)):
        for launch in (None, (16, 32, 4, 1)):  # the default, then one passed with the call (as the sweep does)
            out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(2),
                             case.sm_scale, 2, impl="triton", launch=launch)
            assert rel_err(out, case.dense_f64()) < 1e-5
    default = skt.launch_config(4, DEV == "cuda", 2, plans[0].max_pages)  # (16, 64, 4, 1) on CPU
    assert [(p.stage1, p.launch) for p in plans] == [("tl", default), ("tl", (16, 32, 4, 1))]


@pytest.mark.parametrize("kw,msg", [
    (dict(stage1="wgmma"), r"stage1 must be None or one of \('tl', 'cp.async', 'tma', 'seesaw'\), got 'wgmma'"),
    (dict(stage1="tma"), r"stage1='tma' is a Gluon kernel: it needs a Hopper GPU"),
    (dict(stage1="cp.async", launch=(16, 32, 4, 1)), r"launch configures the tl kernel"),
    (dict(launch=(16, 32, 4)), r"launch must be \(BLOCK_H, BLOCK_N, num_warps, num_stages\)"),
    (dict(launch=(24, 32, 4, 1)), r"the blocks powers of two, got \(24, 32, 4, 1\)"),
    (dict(launch=[16, 32, 4, 1]), r"launch must be"),
])
def test_stage1_and_launch_are_checked(kw, msg):
    case = _two_requests()
    with pytest.raises(ValueError, match=msg):
        mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(1),
                   case.sm_scale, impl="triton", **kw)


@pytest.mark.parametrize("impl", [i for i, entry in IMPLS.items() if entry.plan_stage1 is None])
def test_impls_without_a_stage1_choice_refuse_one(impl):
    case = _two_requests()
    with pytest.raises(ValueError, match=f"impl='{impl}' has no stage-1 kernel to choose"):
        mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(1),
                   case.sm_scale, impl=impl, stage1="tl")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_sweep_refuses_without_a_gpu():
    from tools import kernel_sweep as sweep

    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        sweep.main([])
