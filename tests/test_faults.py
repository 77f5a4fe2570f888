"""Faults and bad input never fail silently (issue 11): one test per fault, named after it.

Each behaviour is either a clear error naming what was expected and what came, or a correct result.
"""

import json
import shutil
import warnings
from collections import deque

import pytest
import torch
from cli_run import main_exit
from tiny_models import random_prompts, random_tiny_model

import mla_edu  # noqa: F401
from mla_edu.graphs import Graph, GraphCaptureError, GraphWarmupWarning, check, graph, warm_up
from mla_edu.graphs import emulator
from mla_edu.kernels import IMPLS, check_cutlass_args, mla_decode
from mla_edu.kernels.cases import random_decode_case
from mla_edu.model import WEIGHTS_DIR, load_manifest, load_pretrained, task
from mla_edu.serving import Engine


# ---- 1, 2, 10: the graph emulator ---------------------------------------------------------------
@pytest.mark.parametrize("failure", ["refused op", "exception"])
def test_failed_capture_leaves_no_recorded_ops(failure):
    buf, x = torch.zeros(3), torch.ones(3)
    g = Graph(device="cpu", mode="emulated")
    with pytest.raises((GraphCaptureError, ValueError)):
        with graph(g):
            buf.add_(1)
            if failure == "refused op":
                x.sum().item()  # a device->host sync: refused
            raise ValueError("the step failed")
    assert g.recorded_ops() == [] and buf.tolist() == [0, 0, 0]  # nothing kept, the write undone
    with graph(g):  # the same Graph captures again, from empty
        out = x + 1
    g.replay()
    assert out.tolist() == [2, 2, 2]
    assert buf.tolist() == [0, 0, 0], "the failed capture's buf.add_(1) leaked into the new graph"
    assert g.recorded_ops() == ["aten.add.Tensor"]


def test_a_capture_that_fails_at_its_end_keeps_nothing(monkeypatch):
    """The end of a capture can raise too (its cold-matmul warning under ``-W error``): the capture's writes are
    undone and its ops dropped, as for a failure inside it; the same Graph then captures from empty."""
    monkeypatch.setattr(emulator, "_WARMED", set())  # no matmul warmed up yet
    x, w, count = torch.ones(1, 2), torch.ones(2, 2), torch.zeros(1)
    g = Graph(device="cpu", mode="emulated")
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphWarmupWarning)
        with pytest.raises(GraphWarmupWarning):
            with graph(g):
                x @ w
                count.add_(1)
    assert count.tolist() == [0.0] and g.recorded_ops() == []
    with graph(g):
        count.add_(1)
    g.replay()
    assert count.tolist() == [1.0] and g.recorded_ops() == ["aten.add_.Tensor"]


def test_nested_capture_refused():
    x = torch.ones(3)
    g1, g2 = Graph(device="cpu", mode="emulated"), Graph(device="cpu", mode="emulated")
    with graph(g1):
        out1 = x * 2
        with pytest.raises(GraphCaptureError, match="nested capture.*CUDA refuses it too"):
            with graph(g2):
                x * 3
    g1.replay()
    assert out1.tolist() == [2, 2, 2]
    with graph(g2):  # refused, not spoiled: g2 captures on its own afterwards
        out2 = x * 3
    g2.replay()
    assert out2.tolist() == [3, 3, 3] and not torch.isnan(out2).any()


def test_capture_without_warmup_warns(monkeypatch):
    monkeypatch.setattr(emulator, "_WARMED", set())  # a fresh process: no matmul warmed up yet
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with graph(Graph(device="cpu", mode="emulated")):  # elementwise ops: CUDA captures them cold too
            x * 2 + 1
    with pytest.warns(GraphWarmupWarning, match=r"aten\.mm.*CUBLAS_STATUS_NOT_INITIALIZED.*warm up on a side "
                                                r"stream.*pytorch.org/docs/stable/notes/cuda.html#cuda-graphs"):
        with graph(Graph(device="cpu", mode="emulated")):
            x @ w
    with warnings.catch_warnings():  # the fix: warm up first
        warnings.simplefilter("error")
        g, out = Graph.capture(lambda: x @ w, warmup=1, device="cpu", mode="emulated")
        with graph(Graph(device="cpu", mode="emulated")):  # once warmed up on the device, as cuBLAS's handle
            x @ w
    g.replay()
    assert torch.allclose(out, x @ w)
    with pytest.raises(ValueError, match="warm-up runs must be an int >= 0"):
        warm_up(lambda: None, -1)


# ---- 9: the graph checker --------------------------------------------------------------------------
def _inputs(gen, trial):
    n = 4 if trial < 0 else int(torch.randint(1, 5, (1,), generator=gen))
    return {"x": torch.randn(n, 8, generator=gen), "scale": float(torch.rand((), generator=gen)) + 0.5}


def test_checker_names_accumulating_state():
    x, acc = torch.zeros(4, 8), torch.zeros(4, 8)

    def step():
        acc.add_(x)  # a persistent buffer that accumulates across replays
        return acc * 1

    report = check(step, _inputs, static_inputs={"x": x}, reference=lambda inp: inp["x"].clone(), mode="emulated")
    assert not report.ok
    assert "state leaks between replays" in report.hint and "host value" not in report.hint


def test_checker_tells_a_frozen_float_from_its_device_tensor_fix():
    x, scale_t = torch.zeros(4, 8), torch.ones(())
    host = {"scale": 1.0}

    def frozen():
        return x * host["scale"]  # a Python float, read once at capture

    def prepare(inp):
        host["scale"] = inp["scale"]
        scale_t.fill_(inp["scale"])

    ref = lambda inp: inp["x"] * inp["scale"]  # noqa: E731
    bad = check(frozen, _inputs, static_inputs={"x": x}, prepare=prepare, reference=ref, mode="emulated")
    assert not bad.ok and "host value" in bad.hint
    good = check(lambda: x * scale_t, _inputs, static_inputs={"x": x}, prepare=prepare, reference=ref,
                 mode="emulated")
    assert good.ok, good


# ---- 3: the weights loader --------------------------------------------------------------------------
@pytest.fixture
def weights_copy(tmp_path):
    shutil.copytree(WEIGHTS_DIR, tmp_path / "w")
    return tmp_path / "w"


def _edit_manifest(d, fn):
    path = d / "manifest.json"
    m = json.loads(path.read_text())
    fn(m)
    path.write_text(json.dumps(m, indent=2))


@pytest.mark.parametrize("key,value", [("rms_norm_eps", 1e-2), ("rope_theta", 500.0)])
def test_manifest_config_is_covered_by_the_checksum(weights_copy, key, value):
    _edit_manifest(weights_copy, lambda m: m["config"]["mla"].__setitem__(key, value))
    with pytest.raises(ValueError, match="config checksum mismatch.*config_sha256"):
        load_pretrained(weights_copy)
    assert getattr(load_pretrained(weights_copy, verify=False).config.mla, key) == value  # opt out explicitly


def test_manifest_without_sha256_is_a_clear_error(weights_copy):
    _edit_manifest(weights_copy, lambda m: m.pop("sha256"))
    with pytest.raises(ValueError, match=r"manifest .*manifest.json has no 'sha256'"):
        load_pretrained(weights_copy)
    _edit_manifest(weights_copy, lambda m: m.pop("config_sha256"))
    with pytest.raises(ValueError, match="has no 'sha256'|has no 'config_sha256'"):
        load_pretrained(weights_copy)


def test_non_json_manifest_names_its_path(weights_copy):
    (weights_copy / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match=f"manifest {weights_copy / 'manifest.json'} is not valid JSON"):
        load_pretrained(weights_copy)
    (weights_copy / "manifest.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object, got a list"):
        load_manifest(weights_copy)


def test_weights_file_outside_the_manifest_directory_refused(weights_copy, tmp_path):
    shutil.copy(weights_copy / "tiny.safetensors", tmp_path / "outside.safetensors")
    for name in ["../outside.safetensors", str(tmp_path / "outside.safetensors")]:
        _edit_manifest(weights_copy, lambda m: m.__setitem__("weights", name))
        with pytest.raises(ValueError, match="not in that directory"):
            load_pretrained(weights_copy)


def test_digest_compared_case_insensitively(weights_copy):
    _edit_manifest(weights_copy, lambda m: m.update(sha256=m["sha256"].upper(),
                                                    config_sha256=m["config_sha256"].upper()))
    ref, m = load_pretrained(), load_pretrained(weights_copy)
    assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), m.state_dict().values()))
    _edit_manifest(weights_copy, lambda m: m.update(sha256="xyz"))
    with pytest.raises(ValueError, match="'sha256' must be 64 hex digits, got 'xyz'"):
        load_pretrained(weights_copy)


# ---- 4, 6, 11: the engine ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped():
    """The shipped model, the full eval set, a shared prefill cache, and a new engine's accuracy."""
    model = load_pretrained()
    questions = task.default_eval_set()
    cache = {}
    acc = _accuracy(_engine(model, cache), questions)
    return model, questions, cache, acc


def _engine(model, cache):
    return Engine(model, attention_backend="triton", cuda_graph_bs=(16, 32), max_running_requests=32,
                  prefill_cache=cache)


def _accuracy(eng, questions):
    reqs = eng.generate([q.prompt_ids for q in questions], max_new_tokens=task.MAX_NEW_TOKENS,
                        stop_token_ids=(task.EOS,))
    return task.score(["" if r.error else task.decode(r.output_ids) for r in reqs], [q.answer for q in questions])


def _fail_on_call(obj, name, k, exc):
    """Make ``obj.name`` raise ``exc`` on its k-th call (0-based)."""
    orig, calls = getattr(obj, name), [0]

    def wrapper(*a, **kw):
        calls[0] += 1
        if calls[0] - 1 == k:
            raise exc
        return orig(*a, **kw)

    setattr(obj, name, wrapper)
    return lambda: setattr(obj, name, orig)


@pytest.mark.parametrize("where,k,exc", [
    ("decode", 0, KeyboardInterrupt), ("decode", 1, KeyboardInterrupt), ("decode", 4, RuntimeError("boom")),
    ("decode", 9, KeyboardInterrupt), ("prefill", 40, KeyboardInterrupt),
])
def test_interrupted_generate_frees_rows_and_pages(shipped, one_thread, where, k, exc):
    model, questions, cache, acc_new = shipped
    eng = _engine(model, cache)
    rn = eng.runner
    rows0, pages0 = rn.req_to_token_pool.available(), rn.allocator.available_pages()
    restore = _fail_on_call(rn, where, k, exc)
    with pytest.raises(type(exc) if isinstance(exc, Exception) else exc):
        eng.generate([q.prompt_ids for q in questions], max_new_tokens=task.MAX_NEW_TOKENS,
                     stop_token_ids=(task.EOS,))
    restore()
    assert (rn.req_to_token_pool.available(), rn.allocator.available_pages()) == (rows0, pages0)
    assert _accuracy(eng, questions) == acc_new  # the full eval set, as on a new engine
    assert (rn.req_to_token_pool.available(), rn.allocator.available_pages()) == (rows0, pages0)


def test_engine_does_not_mutate_the_callers_model():
    model = random_tiny_model().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    eng = Engine(model, dtype="bfloat16", disable_cuda_graph=True, max_running_requests=2)
    eng.generate(random_prompts(0, 2, 20, 40), max_new_tokens=2)
    assert eng.runner.model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.training and all(v.dtype == torch.float32 for v in model.state_dict().values())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("backend,defects", [("cutlass_mla", "none"), ("triton", "none")])
def test_padded_graph_rows_write_only_the_dummy_slot(backend, defects):
    model = random_tiny_model()
    eng = Engine(model, attention_backend=backend, defects=defects, cuda_graph_bs=(4,), max_running_requests=4)
    rn = eng.runner
    reqs = [eng.new_req(p, 8) for p in random_prompts(3, 4, 30, 60)]
    for r in reqs:
        eng.prefill(r)
    eng.decode_step(reqs, set())  # 4 real rows: the static out_cache_loc now holds 4 live slots
    before = [buf.clone() for buf in rn.kv_cache.kv_buffer]
    batch = eng.make_batch(reqs[:2])  # 2 real rows, padded to 4
    rn.decode(batch)
    allowed = set(batch.out_cache_loc.tolist()) | {rn.pad_loc}
    for layer, buf in enumerate(rn.kv_cache.kv_buffer):
        changed = (buf != before[layer]).view(-1, buf.size(-1)).any(dim=1).nonzero().flatten().tolist()
        assert set(changed) <= allowed, f"layer {layer}: padded rows wrote slots {set(changed) - allowed}"
        assert set(batch.out_cache_loc.tolist()) <= set(changed)


def test_joining_requests_take_the_last_rows_with_append():
    model = random_tiny_model()
    for order, joined_row in [("append", 2), ("prepend", 0)]:
        eng = Engine(model, disable_cuda_graph=True, max_running_requests=3, row_order=order)
        reqs = [eng.new_req(p, n) for p, n in zip(random_prompts(4, 4, 20, 40), [2, 5, 5, 5])]
        eng._loop(deque(reqs), set(), None)  # request 0 finishes after one decode step; request 3 joins
        assert [r.rows[0] for r in reqs[:3]] == [0, 1, 2]
        assert reqs[3].rows[0] == joined_row
        survivors = [r.rows[1] for r in reqs[1:3]]
        assert survivors == ([0, 1] if order == "append" else [1, 2])  # filter_batch keeps their order


# ---- 5, 8, 11b: the kernel contract -------------------------------------------------------------------
def _case(batch=2, lens=(20, 40), extra_cols=0, impl="torch"):
    # Triton: the GPU, else its interpreter
    device = "cuda" if impl == "triton" and torch.cuda.is_available() else "cpu"
    return random_decode_case(7, batch=batch, heads=2, page_size=16, lens=list(lens), d_latent=32, d_rope=16,
                              extra_cols=extra_cols, device=device)


@pytest.mark.parametrize("policy", ["size", "stride"])
@pytest.mark.parametrize("layout", ["every other column", "column-major"])
def test_column_strided_page_table_refused(policy, layout):
    c = _case()
    b, w = c.page_table.shape
    if layout == "every other column":
        table = torch.zeros(b, 2 * w, dtype=torch.int32)
        table[:, ::2] = c.page_table
        table = table[:, ::2]
    else:
        table = c.page_table.t().contiguous().t()
    assert torch.equal(table, c.page_table) and table.stride(1) != 1
    for impl in ["reference", "torch", "triton"]:
        with pytest.raises(ValueError, match=r"page_table entries of a row must be contiguous \(stride\(1\) == 1\)"):
            mla_decode(c.q_nope, c.q_pe, c.cache, c.seq_lens, table, c.workspace(1), c.sm_scale, impl=impl,
                       stride_policy=policy)


def test_column_strided_page_table_refused_by_the_cutlass_contract():
    q, qp = torch.zeros(1, 16, 512, dtype=torch.bfloat16), torch.zeros(1, 16, 64, dtype=torch.bfloat16)
    cache = torch.zeros(4, 128, 576, dtype=torch.bfloat16)
    table = torch.zeros(1, 4, dtype=torch.int32)[:, ::2]
    ws = torch.empty(1 << 20, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"stride\(1\) == 1"):
        check_cutlass_args(q, qp, cache, torch.ones(1, dtype=torch.int32), table, ws)


@pytest.mark.parametrize("scale", [float("inf"), float("nan"), -float("inf")])
def test_non_finite_sm_scale_refused(scale):
    c = _case()
    with pytest.raises(ValueError, match="sm_scale must be a finite float > 0"):
        mla_decode(c.q_nope, c.q_pe, c.cache, c.seq_lens, c.page_table, c.workspace(1), scale)


@pytest.mark.parametrize("impl", ["reference", "torch", "triton"])
def test_negative_seq_len_flagged_when_checked(impl):
    c = _case(impl=impl)
    lens = torch.tensor([-5, 40], dtype=torch.int32, device=c.seq_lens.device)
    out = mla_decode(c.q_nope, c.q_pe, c.cache, lens, c.page_table, c.workspace(1), c.sm_scale, impl=impl,
                     checked=True)
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1]).all()
    out = mla_decode(c.q_nope, c.q_pe, c.cache, lens, c.page_table, c.workspace(1), c.sm_scale, impl=impl)
    assert (out[0] == 0).all()  # unchecked: a negative length attends to nothing, as documented


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_batch_gives_an_empty_output_for_every_impl(impl):
    # B = 0 runs the impl's own checks (cutlass's: bf16, 512 + 64, page 64 with an even table width) before it returns
    if impl == "cutlass":
        bf = torch.bfloat16
        args = (torch.zeros(0, 8, 512, dtype=bf), torch.zeros(0, 8, 64, dtype=bf), torch.zeros(4, 64, 576, dtype=bf),
                torch.zeros(0, dtype=torch.int32), torch.zeros(0, 2, dtype=torch.int32),
                torch.zeros(1 << 20, dtype=torch.uint8), 0.1)
        out = mla_decode(*args, impl=impl)
        assert out.shape == (0, 8, 512) and out.dtype == bf
        return
    c = _case()
    out = mla_decode(c.q_nope[:0], c.q_pe[:0], c.cache, c.seq_lens[:0], c.page_table[:0], c.workspace(1),
                     c.sm_scale, impl=impl)
    assert out.shape == (0, 2, 32) and out.dtype == c.q_nope.dtype


def test_misaligned_or_strided_workspace_gets_a_clear_message():
    c = _case()
    ws = c.workspace(2)
    args = (c.q_nope, c.q_pe, c.cache, c.seq_lens, c.page_table)
    big = torch.zeros(2 * ws.numel() + 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="workspace must start on a 4-byte boundary"):
        mla_decode(*args, big[1:ws.numel() + 1], c.sm_scale, 2)
    with pytest.raises(ValueError, match="workspace must be contiguous bytes, got stride 2"):
        mla_decode(*args, big[::2], c.sm_scale, 2)


@pytest.mark.parametrize("kw,err,msg", [
    (dict(checked=1), TypeError, "checked must be a bool, got int"),
    (dict(checked="yes"), TypeError, "checked must be a bool, got str"),
    (dict(sm_count=0), ValueError, "sm_count must be >= 1"),
    (dict(sm_count=-3), ValueError, "sm_count must be >= 1"),
    (dict(sm_count=2.5), TypeError, "sm_count must be None or an int, got float"),
])
def test_checked_and_sm_count_validated(kw, err, msg):
    c = _case()
    with pytest.raises(err, match=msg):
        mla_decode(c.q_nope, c.q_pe, c.cache, c.seq_lens, c.page_table, c.workspace(1), c.sm_scale, **kw)


@pytest.mark.parametrize("impl", ["reference", "torch", "triton"])
def test_checked_more_pages_than_the_row_with_valid_ids(impl):
    c = _case(lens=(20, 40), impl=impl)  # rows of 3 pages: request 0 holds 2 pages, request 1 holds 3
    table = c.page_table.clone()
    table[0, 2] = table[1, 0]  # every entry a valid page id (no poison id to make the NaN instead)
    cache = c.cache.nan_to_num(0.5)  # and no NaN in unused slots either
    assert table.shape == (2, 3) and bool(((table >= 0) & (table < c.cache.size(0))).all())
    lens = torch.tensor([60, 40], dtype=torch.int32, device=table.device)  # request 0 claims 4 pages; its row holds 3
    # the 4th entry request 0 would read is row 1's first: a valid page id, inside the storage
    args = (c.q_nope, c.q_pe, cache, lens, table, c.workspace(1), c.sm_scale)
    out = mla_decode(*args, impl=impl, checked=True)
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1]).all()
    assert torch.isfinite(mla_decode(*args, impl=impl)).all()  # unchecked: clamped to the row, finite


# ---- 7: the command-line tools -------------------------------------------------------------------------
CLI_CASES = [
    ("mla_edu.case_study.repro", ["--num-questions", "-3"], "argument --num-questions: expected an int >= 1, got -3"),
    ("mla_edu.case_study.repro", ["--num-questions", "0"], "argument --num-questions: expected an int >= 1, got 0"),
    ("mla_edu.case_study.repro", ["--threads", "-1"], "argument --threads: expected an int >= 1, got -1"),
    ("mla_edu.case_study.repro", ["--device", "bogus"], "argument --device: expected a device such as cpu"),
    ("mla_edu.case_study.repro", ["--dp", "1"], "enable_dp_attention: expected dp_size > 1, got dp_size=1"),
    ("mla_edu.case_study.repro", ["--context-length", "1"], "argument --context-length: expected an int >= 2"),
    ("mla_edu.case_study.accuracy", ["--dp", "0"], "argument --dp: expected an int >= 1, got 0"),
    ("mla_edu.case_study.accuracy", ["--num-kv-splits", "100000"],
     "argument --num-kv-splits: expected -1 (auto) or an int in"),
    ("mla_edu.case_study.accuracy", ["--device", "bogus"], "argument --device: expected a device such as cpu"),
    ("mla_edu.case_study.accuracy", ["--threads", "-1"], "argument --threads: expected an int >= 1, got -1"),
    ("mla_edu.case_study.accuracy", ["--cuda-graph-bs", "0"], "argument --cuda-graph-bs: expected an int >= 1, got 0"),
    ("tools.launch_bench", ["--reps", "0"], "argument --reps: expected an int >= 1"),
    ("mla_edu.graphs.scenarios", ["--device", "tpu"], "argument --device: expected"),
    ("tools.kernel_sweep", ["--splits", "1,100000"], "argument --splits: expected -1 (auto) or an int in"),
    ("mla_edu.model.train", ["--steps", "0"], "argument --steps: expected an int >= 1, got 0"),
    ("mla_edu.model.train", ["--threads", "-1"], "argument --threads: expected an int >= 0, got -1"),
    ("mla_edu.model.train", ["--lr", "nan"], "argument --lr: expected a finite number > 0, got nan"),
    ("mla_edu.model.train", ["--hidden", "0"], "argument --hidden: expected an int >= 1, got 0"),
    ("tools.run_notebooks", ["--out", "x", "--timeout", "0"], "argument --timeout: expected an int >= 1"),
    ("tools.figures", ["no_such_figure"], "unknown figure(s) ['no_such_figure']"),
    ("mla_edu.kernels.sm90", ["wgmma"],
     "argument kinds: expected one of ('tl', 'cp.async', 'tma', 'seesaw'), got 'wgmma'"),
    ("mla_edu.kernels.sm90", ["--page", "0"], "argument --page: expected an int >= 1, got 0"),
    ("tools.schedule_bench", ["--also", "seesaw,wgmma"],
     "argument --also: expected stage-1 kinds of ('tl', 'cp.async', 'tma', 'seesaw'), got wgmma"),
]


@pytest.mark.parametrize("module,argv,msg", CLI_CASES)
def test_cli_flags_validated_up_front(capsys, module, argv, msg):
    code, err = main_exit(module, argv, capsys)
    assert code == 2 and msg in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
@pytest.mark.parametrize("module", ["mla_edu.case_study.repro", "mla_edu.case_study.accuracy", "tools.launch_bench"])
def test_cli_cuda_device_without_cuda(capsys, module):
    code, err = main_exit(module, ["--device", "cuda"], capsys)
    assert code == 2 and "expected cpu (CUDA is not available here" in err and "got 'cuda'" in err
