"""Faults, round three (issue 48): one test per fault, named after it.

Each bad input or misuse gets the right answer or a clear error naming what was expected and what came, before
any launch or long work; no process crash, no silent difference from the reference, no destroyed file.
"""

import io
import json
import math
import pickle
import re
import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from cli_run import cli_module, main_exit
from markers import CPU_TRITON
from tiny_models import random_tiny_model

import mla_edu  # noqa: F401
from mla_edu.files import write_atomic
from mla_edu.graphs import Graph, GraphCaptureError, check, graph
from mla_edu.kernels import mla_decode, schedule
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kvcache import PagedAllocator, ReqToTokenPool, fill_page_table
from mla_edu.model import MANIFEST_FILE, WEIGHTS_DIR, WEIGHTS_FILE, load_pretrained, sha256_file
from mla_edu.device import TRITON_INTERPRET, triton_available
from mla_edu.serving import Engine, ServerArgs
from mla_edu.serving.backends import BACKEND_CLASSES, AttentionBackend, TritonBackend, backend_class, register_backend
from mla_edu.workshop.panel import PanelSettings

#: the Triton paths where Triton runs on CPU tensors (its interpreter: not on a GPU machine, where it runs the GPU's)
KERNEL_PATHS = [("reference", "splits"), ("torch", "splits")] + (
    [("triton", "splits"), ("triton", "balanced")] if triton_available() and TRITON_INTERPRET else [])


def _case(**kw):
    return random_decode_case(0, batch=3, heads=2, page_size=16, max_len=60, d_latent=32, d_rope=16, **kw)


def _decode(c, impl, sched, seq_lens=None, cache=None, **kw):
    ws = torch.zeros(1 << 20, dtype=torch.uint8)
    splits = {"num_kv_splits": -1} if sched == "balanced" else {}
    return mla_decode(c.q_nope, c.q_pe, c.cache if cache is None else cache,
                      c.seq_lens if seq_lens is None else seq_lens, c.page_table, ws, c.sm_scale, impl=impl,
                      schedule=sched, **splits, **kw)


# ---- kernels and the paged cache ----------------------------------------------------------------------
@pytest.mark.parametrize("impl,sched", KERNEL_PATHS)
def test_a_cache_of_no_pages_is_refused_by_every_impl_before_any_launch(impl, sched):
    c = _case()
    with pytest.raises(ValueError, match=r"kv_c_and_k_pe_cache must hold at least one page .* got shape \(0, 16"):
        _decode(c, impl, sched, cache=c.cache[:0])


@pytest.mark.parametrize("impl,sched", KERNEL_PATHS[1:])
def test_strided_seq_lens_give_the_reference_answer(impl, sched):
    c = _case()
    buf = torch.stack([c.seq_lens, torch.zeros_like(c.seq_lens)], 1).reshape(-1)  # [2B]: lengths at even places
    ref = _decode(c, "reference", "splits")
    out = _decode(c, impl, sched, seq_lens=buf[::2])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl,sched", KERNEL_PATHS)
def test_a_length_of_2_31_minus_1_is_flagged_when_checked_and_read_as_the_whole_row_when_not(impl, sched):
    """The request is longer than its table row: checked, NaN for it alone; unchecked, the row's pages (the
    reference's clamp), never uninitialised memory. Every table entry is a valid page, so only the length can
    flag it."""
    c = _case()
    c.page_table.clamp_(0, c.cache.size(0) - 1)
    lens = c.seq_lens.clone()
    lens[0] = 2**31 - 1
    out = _decode(c, impl, sched, seq_lens=lens, checked=True)
    assert out[0].isnan().all() and not out[1:].isnan().any()
    ref = _decode(c, "reference", "splits", seq_lens=lens)
    out = _decode(c, impl, sched, seq_lens=lens)
    assert out.isfinite().all() == ref.isfinite().all()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5, equal_nan=True)


def _fill_inputs():
    pool = torch.arange(4 * 64, dtype=torch.int32).view(4, 64) + 16  # slots: page ids 1.. (page 16)
    return pool, torch.tensor([3, 1]), torch.tensor([33, 1])


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=CPU_TRITON)])
def test_fill_page_table_reads_strided_lengths_and_indices_and_a_transposed_pool(impl):
    pool, idx, lens = _fill_inputs()
    want = torch.full((2, 5), -7, dtype=torch.int32)
    fill_page_table(pool, idx, lens, want, 16, impl="torch")
    got = torch.full((2, 5), -7, dtype=torch.int32)
    pool_t = pool.t().contiguous().t()  # the same values, column-major
    strided = lambda t: torch.stack([t, t * 0 + 99], 1).reshape(-1)[::2]  # noqa: E731
    fill_page_table(pool_t, strided(idx), strided(lens), got, 16, impl=impl)
    assert got.tolist() == want.tolist() == [[13, 14, 15, -7, -7], [5, -7, -7, -7, -7]]


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=CPU_TRITON)])
@pytest.mark.parametrize("what,idx,lens,msg", [
    ("pool index past the pool", [4, 1], [33, 1], r"req_pool_indices\[0\] must be a row of req_to_token, in \[0, 4\)"),
    ("negative pool index", [1, -1], [33, 1], r"req_pool_indices\[1\] must be a row .* got -1"),
    ("length past the context", [3, 1], [65, 1], r"seq_lens\[0\] must be in \[0, max_context_len=64\], got 65"),
])
def test_fill_page_table_refuses_a_pool_index_or_length_outside_the_pool_by_name(impl, what, idx, lens, msg):
    pool, _, _ = _fill_inputs()
    table = torch.full((2, 5), -7, dtype=torch.int32)
    with pytest.raises(ValueError, match=msg):
        fill_page_table(pool, torch.tensor(idx), torch.tensor(lens), table, 16, impl=impl)
    assert (table == -7).all()  # refused before any write


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_fill_page_table_on_unreadable_values_writes_no_page_for_what_no_page_serves(impl, monkeypatch):
    """Where values cannot be read without a sync (a GPU, a capture), the kernels mask: a row past the pool, pages
    past the context and negative slots get -1 (NO_PAGE), never a read outside req_to_token, a repeated last page,
    or page 0 (slot -1 in Triton's integer division, which rounds toward zero). On a GPU machine, on the GPU."""
    dev = "cpu"
    if impl == "triton":
        pytest.importorskip("triton")
        dev = "cpu" if TRITON_INTERPRET else "cuda"
    monkeypatch.setattr("mla_edu.kvcache.page_table.values_readable", lambda *t: False)
    pool, _, _ = _fill_inputs()
    pool[2, 16], pool[2, 32] = -1, -200  # request 3's second and third pages
    table = torch.full((4, 6), -7, dtype=torch.int32, device=dev)
    fill_page_table(pool.to(dev), torch.tensor([4, 1, -2, 2], device=dev), torch.tensor([33, 90, 20, 40], device=dev),
                    table, 16, impl=impl)
    assert table.tolist() == [[-1, -1, -1, -7, -7, -7], [5, 6, 7, 8, -1, -1], [-1, -1, -7, -7, -7, -7],
                              [9, -1, -1, -7, -7, -7]]


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=CPU_TRITON)])
def test_an_int64_page_id_past_int32_is_refused_not_wrapped(impl):
    pool = torch.zeros(2, 32, dtype=torch.int64)
    pool[0, 0] = 2**40  # page 2**36 of 16-token pages: an int32 table would hold 0
    table = torch.zeros(1, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"req_to_token holds page id 68719476736, past what the torch.int32"):
        fill_page_table(pool, torch.tensor([0]), torch.tensor([5]), table, 16, impl=impl)


def test_a_paged_allocator_whose_slots_pass_int32_is_refused():
    with pytest.raises(ValueError, match=r"num_pages \* page_size must be at most 2\*\*31 slots .* got 4096 \* "
                                         r"1048576"):
        PagedAllocator(4096, 2**20)
    PagedAllocator(2**11, 2**20)  # 2**31 slots: the last is 2**31 - 1


def test_free_pages_and_pool_free_refuse_bools_and_floats():
    alloc = PagedAllocator(4, 16)
    alloc.alloc_pages(2)
    pool = ReqToTokenPool(3, 32)
    pool.alloc(2)
    for bad in ([True], [1.0], (False,)):
        with pytest.raises(TypeError, match=r"pages must hold ints, got"):
            alloc.free_pages(bad)
        with pytest.raises(TypeError, match=r"indices must hold ints, got"):
            pool.free(bad)
    assert alloc.available_pages() == 1 and pool.available() == 1  # nothing freed


@pytest.mark.parametrize("call,msg", [
    (lambda: schedule.segments([5, 40], 16, 4, 0, 16), "parts must be >= 1, got 0"),
    (lambda: schedule.segments([5, 40], 0, 4, 2, 16), "page_size must be >= 1, got 0"),
    (lambda: schedule.segments([5, 40], 16, 0, 2, 16), "max_pages must be >= 1, got 0"),
    (lambda: schedule.segments([5, 40], 16, 4, 2, 0), "heads must be >= 1, got 0"),
    (lambda: schedule.makespans([5, 40], 16, 4, 0, 1), "sm_count must be >= 1, got 0"),
    (lambda: schedule.makespans([5, 40], 16, 4, 8, 0), "num_splits must be >= 1, got 0"),
])
def test_schedule_sizes_of_zero_are_refused_not_an_empty_schedule(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


# ---- lost or poisoned data ----------------------------------------------------------------------------
def _bench_run(rows: int) -> dict:
    return {"info": {"gpu": "test"}, "ceilings": {}, "ragged": [{"row": i} for i in range(rows)], "uniform": []}


@pytest.mark.parametrize("given", ["{}", "missing", "folder", "not json", "fewer rows"])
def test_schedule_bench_render_never_replaces_a_result_with_less(given, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "schedule_bench.json").write_text(json.dumps(_bench_run(3)))
    (out / "schedule_bench.md").write_text("the committed table\n")
    before = {p.name: p.read_text() for p in out.iterdir()}
    src = tmp_path / "in.json"
    if given == "{}":
        src.write_text("{}")
    elif given == "folder":
        src.mkdir()
    elif given == "not json":
        src.write_text("ragged,uniform\n")
    elif given == "fewer rows":
        src.write_text(json.dumps(_bench_run(1)))
    code, err = main_exit("tools.schedule_bench", ["--render", str(src), "--out", str(out)], capsys)
    assert code == 2 and "--render: " in err and ("expected" in err or "never replaces a result with less" in err)
    assert {p.name: p.read_text() for p in out.iterdir()} == before


@pytest.mark.parametrize("tool,argv", [
    ("tools.schedule_choice", ["--bench", "{src}"]),
    ("kernel_lab.tools.schedule_variants", ["--render", "{src}"]),
    ("kernel_lab.tools.stall_summary", ["{src}"]),
])
@pytest.mark.parametrize("given", ["missing", "folder", "not json"])
def test_tools_given_a_missing_folder_or_unreadable_input_give_a_clear_error(tool, argv, given, tmp_path, capsys):
    src = tmp_path / "in.json"
    if given == "folder":
        src.mkdir()
    elif given == "not json":
        src.write_bytes(b"\x1f\x8b not what it says" if tool == "kernel_lab.tools.stall_summary" else b"[1, 2")
    code, err = main_exit(tool, [a.format(src=src) for a in argv], capsys)
    assert code == 2 and "expected" in err and str(src) in err, err


def test_stale_max_error_checks_out_before_the_computation(tmp_path, capsys, monkeypatch):
    sme = cli_module("kernel_lab.tools.stale_max_error")
    monkeypatch.setattr(sme, "errors", lambda: pytest.fail("the computation ran before --out was checked"))
    code, err = main_exit("kernel_lab.tools.stale_max_error", ["--out", str(tmp_path)], capsys)
    assert code == 2 and "--out: expected a file name, got" in err


def test_write_atomic_follows_a_symlink_to_its_target(tmp_path):
    target, link = tmp_path / "target.md", tmp_path / "link.md"
    target.write_text("old")
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new" and link.read_text() == "new"


def _train(argv, tmp_path, capsys):
    return main_exit("mla_edu.model.train", ["--steps", "1", "--eval-questions", "1", *argv], capsys)


@pytest.mark.parametrize("flag,value,msg", [
    ("--weight-decay", "nan", "expected a finite number"),
    ("--weight-decay", "-1", "expected a finite number >= 0"),
    ("--yarn-factor", "inf", "expected a finite number"),
    ("--lr", "nan", "expected a finite number > 0"),
])
def test_training_refuses_non_finite_hyperparameters_before_any_work(flag, value, msg, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = _train(["--out", str(out), flag, value], tmp_path, capsys)
    assert code == 2 and flag in err and msg in err
    assert not out.exists()


@pytest.mark.parametrize("flag,value,msg", [
    ("--curriculum", "bogus", "curriculum stage must look like LENGTH@FRACTION"),
    ("--curriculum", "0@0", r"curriculum stage '0@0': expected a length in \[6, 508\]"),
    ("--curriculum", "64@0,100@1.5", r"expected a start fraction in \[0, 1\), got 1.5"),
    ("--init", "missing", "expected a folder of weights holding manifest.json, got missing"),
    ("--facts", "3,1", "facts must be MIN,MAX with 1 <= MIN <= MAX <= 9, got '3,1'"),
])
def test_bad_curriculum_init_or_facts_give_a_clear_error_and_leave_no_folder(flag, value, msg, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = _train(["--out", str(out), flag, value], tmp_path, capsys)
    assert code == 2 and flag in err and re.search(msg, err), err
    assert not out.exists()


def test_a_failed_training_run_leaves_no_empty_out_folder(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    import mla_edu.model.train as train

    def diverge(*a):
        raise ValueError("training diverged")

    monkeypatch.setattr(train, "run", diverge)
    code, err = _train(["--out", str(out)], tmp_path, capsys)
    assert code == 1 and "training diverged" in err
    assert not out.exists()


def test_training_never_writes_non_finite_weights(tmp_path):
    from mla_edu.model import train

    model = random_tiny_model()
    with torch.no_grad():
        next(model.parameters())[0] = float("nan")
    with pytest.raises(ValueError, match=r"training diverged, nothing written: expected finite weights, got \d+ NaN"):
        train.check_finite(model, "training diverged, nothing written")


def test_load_pretrained_refuses_non_finite_weights_with_a_valid_checksum(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "w"
    shutil.copytree(WEIGHTS_DIR, folder)
    state = load_file(str(folder / WEIGHTS_FILE))
    name = next(iter(state))
    state[name] = torch.full_like(state[name], float("nan"))
    save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    manifest["sha256"] = sha256_file(folder / WEIGHTS_FILE)
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=f"expected finite weights, got NaN or infinite values .*first: {name}"):
        load_pretrained(folder)


# ---- settings taken without checking ------------------------------------------------------------------
@pytest.mark.parametrize("value", ["false", "no", 0, None])
def test_server_args_refuse_a_bool_setting_that_is_not_a_bool_in_parent_and_child(value):
    with pytest.raises(TypeError, match=f"disable_cuda_graph: expected a bool, got {value!r}"):
        ServerArgs(disable_cuda_graph=value)
    text = json.dumps({"disable_cuda_graph": value})  # what a child process is given
    with pytest.raises(TypeError, match=f"disable_cuda_graph: expected a bool, got {value!r}"):
        ServerArgs.from_json(text)


@pytest.mark.parametrize("value,error", [(math.nan, TypeError), (math.inf, TypeError), (640.5, TypeError),
                                         ("640", TypeError), (True, TypeError), (1, ValueError),
                                         (10**10, ValueError)])
def test_server_args_refuse_a_context_length_that_is_not_an_int_in_range(value, error):
    with pytest.raises(error, match=rf"context_length: expected an int in \[2, 2147483519\], got {value!r}"):
        ServerArgs(context_length=value)


@pytest.mark.parametrize("kw,error,msg", [
    (dict(device="bogus"), ValueError, "device: expected None or a device such as cpu"),
    (dict(device=5), TypeError, "device: expected a str or None, got 5"),
    (dict(max_running_requests=True), TypeError, "max_running_requests: expected an int >= 1, got True"),
    (dict(defects=5), TypeError, "defects: expected 'none', a comma-separated str or a set of names"),
    (dict(dp_size=2.0), TypeError, "dp_size: expected an int >= 1, got 2.0"),
])
def test_server_args_refuse_settings_of_the_wrong_type(kw, error, msg):
    with pytest.raises(error, match=msg):
        ServerArgs(**kw)


def test_server_args_keep_a_torch_device_as_its_name_and_write_it_to_json():
    args = ServerArgs(device=torch.device("cpu"))
    assert args.device == "cpu" and json.loads(args.to_json())["device"] == "cpu"
    assert ServerArgs.from_json(args.to_json()) == args


@pytest.mark.parametrize("kw", [dict(cuda_graph_bs=(100000,), max_running_requests=4),
                                dict(context_length=10**8, disable_cuda_graph=True)])
def test_a_graph_size_or_context_that_cannot_fit_is_refused_before_allocating(kw, monkeypatch):
    monkeypatch.setattr("mla_edu.serving.model_runner.free_bytes", lambda device: 2**30)
    monkeypatch.setattr("mla_edu.kvcache.ReqToTokenPool.__init__", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(ValueError,
                       match=r"these settings need at least \d+\.\d\d GiB .*but (cpu|cuda) has 1.00 GiB free"):
        Engine(random_tiny_model(), **kw)


@pytest.mark.parametrize("kw,error,msg", [
    (dict(defects=5), TypeError, "defects: expected a set of names from"),
    (dict(poison_fill="yes"), TypeError, "poison_fill: expected a bool, got 'yes'"),
    (dict(max_running_requests=True), TypeError, r"max_running_requests: expected an int in \[2, 64\], got True"),
    (dict(num_questions=0), ValueError, r"num_questions: expected an int in \[1, 256\], got 0"),
])
def test_panel_settings_refuse_settings_of_the_wrong_type(kw, error, msg):
    with pytest.raises(error, match=msg):
        PanelSettings(**kw)


def test_generate_refuses_a_str_of_stop_ids_and_a_bool_token_count():
    eng = Engine(random_tiny_model(), disable_cuda_graph=True, max_running_requests=2)
    with pytest.raises(TypeError, match="stop_token_ids: expected a list of ints .* got '2'"):
        eng.generate([[1, 5, 6]], stop_token_ids="2")
    (req,) = eng.generate([[1, 5, 6]], max_new_tokens=True)
    assert req.error == "max_new_tokens: expected an int >= 1, got True" and not req.output_ids


# ---- the graph-safety checker and the emulator --------------------------------------------------------
def _toy_check(**kw):
    x = torch.zeros(4)
    out = torch.zeros(4)

    def step():
        out.copy_(x * 2)
        return out

    args = dict(static_inputs={"x": x}, n_trials=2, device="cpu", mode="emulated")
    args.update(kw.pop("args", {}))
    return check(kw.pop("step", step), kw.pop("make_inputs", lambda g, t: {"x": torch.randn(4, generator=g)}),
                 **args, **kw)


def test_the_checker_reports_an_input_name_nothing_reads():
    with pytest.raises(ValueError, match=r"make_inputs gave \['xx'\], which no static input, prepare or reference "
                                         r"read: expected names from static_inputs \['x'\]"):
        _toy_check(make_inputs=lambda g, t: {"xx": torch.randn(4, generator=g)})


def test_the_checker_refuses_a_step_that_returns_nothing():
    x = torch.zeros(4)
    with pytest.raises(ValueError, match=r"the step returned no tensor \(None\?\): the checker has nothing"):
        _toy_check(step=lambda: (x.mul_(2), None)[1])


@pytest.mark.parametrize("tol", [{"atol": math.inf}, {"rtol": math.nan}, {"atol": -1.0}, {"atol": True}])
def test_the_checker_refuses_a_tolerance_that_accepts_anything(tol):
    with pytest.raises(ValueError, match=r"(atol|rtol) must be a finite number >= 0"):
        _toy_check(**tol)


def test_the_checker_refuses_a_copy_that_truncates_floats_into_an_int_buffer():
    x = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(TypeError, match=r"input 'x' is torch.float32 but its static buffer is torch.int32"):
        _toy_check(step=lambda: x * 2, args={"static_inputs": {"x": x}})


@pytest.mark.parametrize("copy", ["to('cpu')", "to(device='cpu')", "torch.save", "pickle.dumps"])
def test_the_emulator_refuses_every_device_to_host_copy_during_capture(copy):
    x = torch.ones(3)
    run = {"to('cpu')": lambda: x.to("cpu"), "to(device='cpu')": lambda: x.to(device="cpu", dtype=torch.float64),
           "torch.save": lambda: torch.save(x, io.BytesIO()), "pickle.dumps": lambda: pickle.dumps(x)}[copy]
    with pytest.raises(GraphCaptureError, match="during graph capture: it copies device data to the host"):
        with graph(Graph(device="cpu", mode="emulated")):
            run()
    pickle.dumps(x)  # after capture: allowed again
    assert x.to(device=x.device) is x  # a same-device call is no copy


def test_graph_used_as_a_decorator_gets_a_clear_error():
    with pytest.raises(TypeError, match=r"graph\(.*\) is a context manager, not a decorator: expected `with graph"):
        @graph(Graph(device="cpu", mode="emulated"))
        def step():
            pass


# ---- the backend registry -----------------------------------------------------------------------------
@pytest.fixture
def registry():
    """The registry as it was, restored after the test."""
    saved = dict(BACKEND_CLASSES)
    yield
    BACKEND_CLASSES.clear()
    BACKEND_CLASSES.update(saved)


def test_registering_an_alias_does_not_rename_the_class(registry):
    register_backend("alias")(TritonBackend)
    assert backend_class("alias") is TritonBackend
    assert backend_class("triton").name == TritonBackend.name == "triton"


def test_a_backend_that_implements_nothing_is_refused_at_registration_with_the_missing_methods_named(registry):
    class Empty(AttentionBackend):
        pass

    with pytest.raises(TypeError, match=r"register_backend\('empty'\): Empty must implement graph_index_buffer, "
                                        r"init_forward_metadata, .*forward_decode"):
        register_backend("empty")(Empty)
    assert "empty" not in BACKEND_CLASSES


@pytest.mark.parametrize("attr,value,msg", [
    ("switchable_defects", (5,), "switchable_defects: expected a tuple of defect names"),
    ("switchable_defects", "width", "switchable_defects: expected a tuple of defect names"),
    ("supports_poison_fill", "no", "supports_poison_fill: expected a bool, got 'no'"),
    ("freezes_a_view", 1, "freezes_a_view: expected a bool, got 1"),
])
def test_declared_capabilities_of_the_wrong_type_are_refused(registry, attr, value, msg):
    cls = type("Declared", (TritonBackend,), {attr: value})
    with pytest.raises(TypeError, match=msg):
        register_backend("declared")(cls)


def test_a_declared_page_size_the_engine_does_not_run_is_refused(registry):
    cls = type("Pages64", (TritonBackend,), {"page_size": 64})
    with pytest.raises(ValueError, match=r"page_size: the engine's pools run 128-token pages .* got 64"):
        register_backend("pages64")(cls)



# ---- a property: every public kernel and cache function, on strided, transposed, empty and extreme inputs --------
def _clear(e: Exception) -> bool:
    """A clear error: ValueError or TypeError whose message says what was expected."""
    return isinstance(e, (ValueError, TypeError)) and any(w in str(e) for w in ("must", "expected"))


def _outcome(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 (classified below: a clear error or a failure of the property)
        assert _clear(e), f"unclear error {type(e).__name__}: {e}"
        return None, e


LENGTHS = {"ragged": None, "zeros": [0, 0, 0], "one": [1, 1, 1], "page edge": [16, 32, 17], "negative": [-1, 5, 40],
           "past the row": [60, 2**31 - 1, 200]}
LAYOUTS = ("contiguous", "strided", "transposed")


def _lay(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t``'s values as a strided view (every other element of a wider buffer) or a transposed (column-major)
    copy; 1-D tensors have no transpose, so they are strided."""
    if layout == "contiguous":
        return t
    if layout == "transposed" and t.dim() == 2:
        return t.t().contiguous().t()
    wide = torch.stack([t, torch.full_like(t, 99)], -1).reshape(*t.shape[:-1], 2 * t.shape[-1])
    return wide[..., ::2]


@given(lengths=st.sampled_from(sorted(LENGTHS)), lens_layout=st.sampled_from(LAYOUTS),
       table_layout=st.sampled_from(LAYOUTS), batch=st.sampled_from([0, 3]), pages=st.sampled_from([0, 1, None]),
       path=st.sampled_from(KERNEL_PATHS[1:]), checked=st.booleans())
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_property_mla_decode_gives_the_references_answer_or_a_clear_error(lengths, lens_layout, table_layout, batch,
                                                                         pages, path, checked):
    c = _case(lens=[5, 40, 17])
    lens = c.seq_lens if LENGTHS[lengths] is None else torch.tensor(LENGTHS[lengths], dtype=torch.int32)
    cache = c.cache if pages is None else c.cache[:pages]
    q_nope, q_pe, table = c.q_nope[:batch], c.q_pe[:batch], _lay(c.page_table[:batch], table_layout)
    lens = _lay(lens[:batch], lens_layout)
    ws = torch.zeros(1 << 20, dtype=torch.uint8)

    def run(impl, sched):
        splits = {"num_kv_splits": -1} if sched == "balanced" else {}
        return mla_decode(q_nope, q_pe, cache, lens, table, ws, c.sm_scale, impl=impl, schedule=sched,
                          checked=checked, **splits)

    ref, ref_err = _outcome(lambda: run("reference", "splits"))
    out, err = _outcome(lambda: run(*path))
    if err is None:
        assert ref_err is None, f"{path} answered where the reference refused: {ref_err}"
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5, equal_nan=True)
    else:
        assert ref_err is not None or "contiguous" in str(err), f"{path} refused what the reference answers: {err}"


@given(lengths=st.sampled_from([[33, 1], [0, 0], [64, 64], [65, 1], [-3, 1]]), idx=st.sampled_from([[3, 1], [0, 0],
       [4, 1], [-1, 0]]), layout=st.sampled_from(LAYOUTS), batch=st.sampled_from([0, 2]),
       impl=st.sampled_from(["torch", "triton"] if triton_available() and TRITON_INTERPRET else ["torch"]),
       dtype=st.sampled_from([torch.int32, torch.int64]))
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_property_fill_page_table_matches_the_loop_or_refuses_clearly(lengths, idx, layout, batch, impl, dtype):
    pool = (torch.arange(4 * 64).view(4, 64) + 16).to(dtype)
    lens, rows = torch.tensor(lengths[:batch], dtype=torch.int64), torch.tensor(idx[:batch], dtype=torch.int64)
    table = torch.full((batch, 5), -7, dtype=torch.int32)
    _, err = _outcome(lambda: fill_page_table(_lay(pool, layout), _lay(rows, layout), _lay(lens, layout), table, 16,
                                              impl=impl))
    # SGLang's loop, on the inputs it is defined on: rows of the pool, lengths within the context
    defined = all(0 <= r < 4 and 0 <= n <= 64 for r, n in zip(rows.tolist(), lens.tolist()))
    want = [[-7] * 5 for _ in range(batch)]
    for b, (r, n) in enumerate(zip(rows.tolist(), lens.tolist()) if defined else ()):
        for p in range(min(-(-n // 16), 5)):
            want[b][p] = int(pool[r, p * 16]) // 16
    if err is None:
        assert defined and table.tolist() == want
    else:
        assert not defined and (table == -7).all()  # refused before any write
