"""Faults, round two (issue 23): one test per fault, named after it.

Each behaviour is either a correct result or a clear error naming what was expected and what came,
raised before any long work; no work is lost after a long run and no shipped file is overwritten.
"""

import numpy as np
import pytest
import torch
from cli_run import main_exit
from tiny_models import random_prompts, random_tiny_model

import mla_edu  # noqa: F401
from mla_edu.kernels import mla_decode
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kvcache import PoolExhausted
from mla_edu.serving import Engine, ServerArgs


@pytest.fixture(scope="module")
def model():
    return random_tiny_model()


def _free(eng):
    rn = eng.runner
    return rn.req_to_token_pool.available(), rn.allocator.available_pages()


# ---- 4, 5: no leak on a failure path ----------------------------------------------------------------
def test_prefill_requests_over_capacity_keeps_no_rows_or_pages(model):
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=2)
    before = _free(eng)
    with pytest.raises(PoolExhausted, match="expected at most 2 prompts.*got 3"):
        eng.prefill_requests(random_prompts(0, 3, 20, 40))
    assert _free(eng) == before
    reqs = eng.generate(random_prompts(1, 2, 20, 40), max_new_tokens=2)  # the engine still serves
    assert [r.error for r in reqs] == [None, None] and _free(eng) == before


def test_prefill_requests_failing_half_way_gives_back_what_it_took(model, monkeypatch):
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=3)
    before, calls = _free(eng), []
    real = eng.runner.prefill

    def fail_on_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the third prefill failed")
        return real(*a, **k)

    monkeypatch.setattr(eng.runner, "prefill", fail_on_third)
    with pytest.raises(RuntimeError, match="third prefill"):
        eng.prefill_requests(random_prompts(0, 3, 20, 40))
    assert len(calls) == 3 and _free(eng) == before


@pytest.mark.parametrize("which", ["finished", "freed", "foreign", "twice"])
def test_decode_step_refuses_finished_or_unknown_requests_before_touching_the_pool(model, which):
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=3)
    reqs = eng.prefill_requests(random_prompts(2, 2, 20, 40))
    if which == "finished":
        eng._finish(reqs[1], "length")
    elif which == "freed":
        eng.free_req(reqs[1])
    elif which == "foreign":
        other = Engine(model, disable_cuda_graph=True, max_running_requests=3)
        reqs[1] = other.prefill_requests(random_prompts(3, 3, 20, 40))[2]  # row 2: free in eng's pool
    else:
        reqs[1] = reqs[0]
    before, table = _free(eng), eng.runner.req_to_token_pool.req_to_token.clone()
    with pytest.raises(ValueError, match=r"running\[1\]: expected a (running request|request prefilled by this)"):
        eng.decode_step(reqs, set())
    assert _free(eng) == before and torch.equal(eng.runner.req_to_token_pool.req_to_token, table)
    assert reqs[0].output_ids and len(reqs[0].rows) == 0  # nothing decoded, no row recorded


# ---- 6, 11: settings and prompts read as given ------------------------------------------------------
@pytest.mark.parametrize("bs", ["64", 64, (64.0,), [True], None])
def test_cuda_graph_bs_of_the_wrong_type_is_refused(bs):
    with pytest.raises(TypeError, match=r"cuda_graph_bs: expected a list or tuple of int batch sizes, got"):
        ServerArgs(cuda_graph_bs=bs)


def test_cuda_graph_bs_list_is_kept():
    assert ServerArgs(cuda_graph_bs=[8, 4, 8]).cuda_graph_bs == (4, 8)


def test_prompt_of_numpy_ints_is_accepted_and_a_float_is_named(model):
    eng = Engine(model, disable_cuda_graph=True, max_running_requests=2)
    prompt = random_prompts(5, 1, 20, 40)[0]
    plain, as_numpy = eng.generate([prompt, list(np.array(prompt, dtype=np.int64))], max_new_tokens=2)
    assert as_numpy.error is None and as_numpy.output_ids == plain.output_ids
    assert all(type(t) is int for t in as_numpy.prompt_ids)
    bad = [prompt[:3] + [np.float32(4.0)], prompt[:2] + [True], prompt[:1] + [4.0]]
    for req, pos in zip(eng.generate(bad, max_new_tokens=2), (3, 2, 1)):
        assert req.error.startswith("prompt: expected int token ids, got ") and req.error.endswith(f"at position {pos}")


# ---- 12: a page-strided cache ------------------------------------------------------------------------
@pytest.mark.parametrize("splits", [1, 2])
def test_torch_decode_on_a_page_strided_cache_equals_the_reference(splits):
    case = random_decode_case(3, batch=3, heads=2, page_size=16, lens=[5, 40, 33], d_latent=32, d_rope=16)
    buf = torch.full((2 * case.cache.size(0), *case.cache.shape[1:]), float("nan"))
    buf[::2] = case.cache
    strided = buf[::2]  # every other page: no flat [slots, 48] view exists
    assert not strided.is_contiguous()
    args = (case.q_nope, case.q_pe, strided, case.seq_lens, case.page_table, case.workspace(splits), case.sm_scale)
    out = mla_decode(*args, num_kv_splits=splits, impl="torch")
    ref = mla_decode(*args, num_kv_splits=splits, impl="reference")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.double(), case.dense_f64(), atol=1e-4, rtol=1e-4)


# ---- 8, 16: what a setting says is what runs; errors that name the thing --------------------------------
def test_panel_asked_for_more_questions_than_it_holds_refuses_before_running(monkeypatch):
    from mla_edu.model import task
    from mla_edu.workshop import panel
    from mla_edu.workshop.panel import PanelRuns, PanelSettings

    monkeypatch.setattr(panel, "run_bench", lambda *a, **k: pytest.fail("ran before refusing"))  # the panel's
    runs = PanelRuns(random_tiny_model(), task.default_eval_set()[:20])
    with pytest.raises(ValueError, match=r"num_questions: expected at most 20 \(the questions this panel holds\), "
                                         r"got 32"):
        runs(PanelSettings(num_questions=32))


def test_panel_settings_defects_none_means_the_pre_fix_defects_as_server_args():
    from mla_edu.serving import PRE_FIX
    from mla_edu.workshop.panel import PanelSettings

    assert PanelSettings(defects=None).defects == ServerArgs(defects=None).defects == PRE_FIX
    with pytest.raises(TypeError, match="defects: expected a set of names from .*, got 5"):
        PanelSettings(defects=5)


def test_graph_context_entered_twice_is_refused_by_name():
    from mla_edu.graphs import Graph, graph

    g, x = Graph(device="cpu", mode="emulated"), torch.ones(3)
    ctx = graph(g)
    with ctx:
        out = x + 1
    with pytest.raises(RuntimeError, match=r"this graph\(Graph\(.*\)\) context was already entered; expected a new"):
        with ctx:
            x + 2
    g.replay()
    assert out.tolist() == [2, 2, 2]


def test_weights_symlink_escaping_the_directory_is_named(tmp_path):
    import shutil

    from mla_edu.model import WEIGHTS_DIR, load_manifest, load_pretrained

    d = tmp_path / "w"
    shutil.copytree(WEIGHTS_DIR, d)
    name = load_manifest(d).get("weights", "tiny.safetensors")
    (d / name).rename(tmp_path / "elsewhere.safetensors")
    (d / name).symlink_to(tmp_path / "elsewhere.safetensors")
    with pytest.raises(ValueError, match=f"weights file {d / name} is a symlink to {tmp_path / 'elsewhere.safetensors'}"
                                         f", outside {d}; expected a file inside that directory"):
        load_pretrained(d)


# ---- 1, 2, 3, 7, 13: commands check their paths and flags before the work, write atomically ---------------
def _no_work(monkeypatch, obj, name):
    monkeypatch.setattr(obj, name, lambda *a, **k: pytest.fail(f"{name} ran before the refusal"))


def test_train_writes_no_weights_into_the_package_by_default(capsys, monkeypatch):
    from mla_edu.model.train import training as train  # the module whose TinyDeepseek run() builds

    _no_work(monkeypatch, train, "TinyDeepseek")
    code, err = main_exit("mla_edu.model.train", ["--steps", "1"], capsys)
    assert code == 2 and "the following arguments are required: --out" in err


def test_train_out_holding_weights_needs_force(tmp_path, capsys, monkeypatch):
    from mla_edu.model.train import training as train  # the module whose TinyDeepseek run() builds

    (tmp_path / "manifest.json").write_text("{}")
    real = train.TinyDeepseek
    _no_work(monkeypatch, train, "TinyDeepseek")
    code, err = main_exit("mla_edu.model.train", ["--steps", "1", "--out", str(tmp_path)], capsys)
    assert code == 2 and f"--out: expected a folder without weights, got {tmp_path}, which holds manifest.json; " \
                         "pass --force to overwrite them" in err
    monkeypatch.setattr(train, "TinyDeepseek", real)
    from mla_edu.model.train import __main__ as train_cli

    manifest = train_cli.main(["--steps", "1", "--eval-questions", "1", "--out", str(tmp_path), "--force"])
    from mla_edu.model import load_pretrained

    assert load_pretrained(tmp_path) is not None and manifest["training"]["steps"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "tiny.safetensors"]  # no temp file left


def test_train_out_that_cannot_be_created_fails_before_training(tmp_path, capsys, monkeypatch):
    from mla_edu.model.train import training as train  # the module whose TinyDeepseek run() builds

    (tmp_path / "a_file").write_text("")
    _no_work(monkeypatch, train, "TinyDeepseek")
    code, err = main_exit("mla_edu.model.train", ["--steps", "1", "--out", str(tmp_path / "a_file" / "w")], capsys)
    assert code == 2 and f"--out: expected a folder that can be created, got {tmp_path / 'a_file' / 'w'}" in err
    code, err = main_exit("mla_edu.model.train", ["--steps", "1", "--out", str(tmp_path / "a_file")], capsys)
    assert code == 2 and f"--out: expected a folder, got {tmp_path / 'a_file'}, which is a file" in err


@pytest.mark.parametrize("argv,msg", [
    (["--json-out", "/no/such/folder/r.json"],
     "--json-out: expected a file in an existing folder, got /no/such/folder/r.json (no folder /no/such/folder)"),
    (["--dp", "4", "--no-enable-dp-attention"],
     "dp_size=4: the mini engine runs data parallelism only as DP attention; pass enable_dp_attention=True"),
    (["--num-questions", "100000"], "argument --num-questions: expected at most 256 (the eval set), got 100000"),
])
def test_repro_refuses_bad_output_path_and_conflicting_flags_before_any_run(argv, msg, capsys, monkeypatch):
    from mla_edu.case_study import repro

    _no_work(monkeypatch, repro, "AccuracyRuns")
    code, err = main_exit("mla_edu.case_study.repro", argv, capsys)
    assert code == 2 and msg in err and "Traceback" not in err


def test_repro_without_dp_attention_runs_one_engine(monkeypatch):
    from mla_edu.case_study import repro

    seen = {}

    class Stop(Exception):
        pass

    def runs(model, questions, common, progress):
        seen.update(common)
        raise Stop

    monkeypatch.setattr(repro, "AccuracyRuns", runs)
    with pytest.raises(Stop):
        repro.main(["--no-enable-dp-attention", "--num-questions", "2"])
    assert seen["dp_size"] == 1 and seen["enable_dp_attention"] is False


def test_accuracy_num_questions_above_the_eval_set_is_refused(capsys, monkeypatch):
    from mla_edu.case_study.accuracy import __main__ as accuracy_cli
    from mla_edu.case_study.accuracy import bench as accuracy

    _no_work(monkeypatch, accuracy, "ServerArgs")  # refused before the engine's arguments are built
    assert accuracy_cli.main(["--num-questions", "100000"]) == 2
    assert "error: num_questions: expected an int in [1, 256] (the questions given), got 100000" in \
        capsys.readouterr().err


def test_run_notebooks_out_checked_first_and_a_failed_write_is_a_status(tmp_path, capsys, monkeypatch):
    import nbclient
    import nbformat

    from tools import run_notebooks

    (tmp_path / "f").write_text("")
    code, err = main_exit("tools.run_notebooks", ["--out", str(tmp_path / "f" / "x")], capsys)
    assert code == 2 and f"--out: expected a folder that can be created, got {tmp_path / 'f' / 'x'}" in err

    nbs = tmp_path / "nbs"
    nbs.mkdir()
    for name in ("01_a.ipynb", "02_b.ipynb"):
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), nbs / name)

    class Client:  # no kernel: the test is about the writing
        def __init__(self, nb, **kw):
            self.nb = nb

        def execute(self):
            return self.nb

    monkeypatch.setattr(run_notebooks, "NOTEBOOKS", nbs)
    monkeypatch.setattr(nbclient, "NotebookClient", Client)
    out = tmp_path / "out"
    (out / "01_a.ipynb").mkdir(parents=True)  # the first copy cannot be written
    assert run_notebooks.main(["--out", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "01_a.ipynb" in lines[0] and "not written" in lines[0]
    assert "02_b.ipynb" in lines[1] and "  ok  " in lines[1]
    assert nbformat.read(out / "02_b.ipynb", as_version=4).cells[0].source == "1"


@pytest.mark.parametrize("module", ["tools.seed_dp", "tools.seed_scale", "tools.seed_dp_multiprocess"])
def test_seed_tools_parse_their_arguments_before_the_job(module, capsys, monkeypatch):
    import importlib

    import mla_edu.model

    _no_work(monkeypatch, mla_edu.model, "load_pretrained")
    mod = importlib.import_module(module)  # importing runs nothing
    _no_work(monkeypatch, mod, "load_pretrained")
    with pytest.raises(SystemExit) as info:
        mod.main(["--help"])
    assert info.value.code == 0 and f"usage: python -m {module} [-h]" in capsys.readouterr().out
    code, err = main_exit(module, ["--bogus"], capsys)
    assert code == 2 and "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize("module,argv,heavy,msg", [
    ("tools.launch_bench", ["--out", "/no/such/folder/l.json"], "run",
     "--out: expected a file in an existing folder, got /no/such/folder/l.json (no folder /no/such/folder)"),
    ("mla_edu.kernels.sm90", ["--md", "/no/such/folder/s.md"], "compile_stage1",
     "--md: expected a file in an existing folder, got /no/such/folder/s.md"),
    ("mla_edu.kernels.sm90", ["--ptx", "/dev/null/ptx"], "compile_stage1",
     "--ptx: expected a folder that can be created, got /dev/null/ptx"),
])
def test_long_commands_check_their_output_paths_before_the_work(module, argv, heavy, msg, capsys, monkeypatch):
    import importlib

    _no_work(monkeypatch, importlib.import_module(module), heavy)
    code, err = main_exit(module, argv, capsys)
    assert code == 2 and msg in err and "Traceback" not in err


@pytest.mark.parametrize("content,msg", [
    (None, "(No such file or directory)"),
    ("not json", "which is not JSON"),
    ("[1, 2]", "which holds a list, not an object"),
    ('{"ceilings": {"copy_TBps": 4, "matmul_bf16_TFLOPs": 700}, "info": {}}', "which has no info.sm_count"),
    ('{"ceilings": {"copy_TBps": 4, "matmul_bf16_TFLOPs": 700}, "info": {"sm_count": 132}, "results": [{}]}',
     "whose results[0] has no 'page'"),
])
def test_kernel_bench_rerule_on_a_missing_or_non_bench_json_is_one_error_line(tmp_path, capsys, content, msg):
    path = tmp_path / "k.json"
    if content is not None:
        path.write_text(content)
    code, err = main_exit("tools.kernel_bench", ["--rerule", str(path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and msg in err and f"got {path}" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1 and not (tmp_path / "o").exists()



# ---- 9, 10: the emulator tells what a CUDA graph would hide ----------------------------------------------
@pytest.mark.parametrize("move", ["tensor.resize_", "storage.resize_"])
@pytest.mark.parametrize("strict", [False, True])
def test_replay_after_a_captured_input_moved_is_reported_like_a_dropped_buffer(move, strict):
    from mla_edu.graphs import FreedMemoryError, Graph, graph

    x, acc = torch.ones(4), torch.zeros(4)
    g = Graph(device="cpu", mode="emulated", strict=strict)
    with graph(g):
        out = x * 2
        acc.add_(x)  # the graph writes into an old buffer too
    g.replay()
    assert out.tolist() == [2] * 4 and acc.tolist() == [1] * 4 and g.freed_uses() == []
    ptr = x.data_ptr()
    if move == "tensor.resize_":
        x.resize_(1 << 16)  # grown: its storage is reallocated
    else:
        x.untyped_storage().resize_(1 << 18)
    assert x.data_ptr() != ptr
    x[:4] = 3.0
    if strict:
        with pytest.raises(FreedMemoryError, match=r"aten.mul.Tensor uses float32\[4\] \(16 bytes, created before "
                                                    r"capture\), whose storage moved after capture \(resize_"):
            g.replay()
        return
    g.replay()  # a CUDA graph keeps the old, freed address: not the new memory's 3.0 (the eager 6.0)
    assert len(g.freed_uses()) == 1 and "whose storage moved after capture" in g.freed_uses()[0]
    assert torch.isnan(out).all() and torch.isnan(acc).all()
    assert x[:4].tolist() == [3.0] * 4  # the owner's new memory is not the graph's


def test_moved_storage_is_not_taken_for_a_dropped_one_by_another_graph():
    from mla_edu.graphs import Graph, graph

    x = torch.ones(4)
    g1, g2 = Graph(device="cpu", mode="emulated"), Graph(device="cpu", mode="emulated")
    with graph(g1):
        x * 2
    x.resize_(1 << 16)
    x[:4] = 1.0
    g1.replay()
    assert "moved" in g1.freed_uses()[0]
    with graph(g2):  # captured after the move, on the new memory
        out2 = x[:4] * 2
    g2.replay()
    assert out2.tolist() == [2.0] * 4 and g2.freed_uses() == []


@pytest.mark.parametrize("value", [3, 2.5, True, np.float32(1.5)])
def test_capture_of_a_fn_returning_a_host_number_is_refused(value):
    from mla_edu.graphs import Graph

    x = torch.ones(3)
    with pytest.raises(TypeError, match=rf"Graph.capture: expected fn to return tensors, got {type(value).__name__} "
                                        r".* \(output leaf 1 of 2\), a host number: it was computed once, at capture"):
        Graph.capture(lambda: (x + 1, value), warmup=0, device="cpu")
    g, out = Graph.capture(lambda: (x + 1, None), warmup=0, device="cpu")  # tensors (and None) are fine
    g.replay()
    assert out[0].tolist() == [2, 2, 2]


# ---- no command writes inside the installed package ---------------------------------------------------------
def _package_files() -> dict:
    from pathlib import Path

    root = Path(mla_edu.__file__).parent
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _commands() -> list[str]:
    """Every module of the package and of tools/ that runs as ``python -m`` (a package's: its ``__main__``)."""
    from pathlib import Path

    root = Path(mla_edu.__file__).parents[1]
    found = [p for d in ("mla_edu", "tools") for p in sorted((root / d).rglob("*.py"))
             if "__pycache__" not in p.parts and 'if __name__ == "__main__"' in p.read_text()]
    return [".".join(p.relative_to(root).with_suffix("").parts) for p in found]


def test_no_command_writes_inside_the_installed_package(tmp_path, capsys):
    import importlib

    commands = _commands()
    assert {"mla_edu.model.train.__main__", "mla_edu.case_study.repro", "tools.run_notebooks",
            "tools.seed_dp"} <= set(commands)
    before = _package_files()
    for module in commands:  # each command's --help
        with pytest.raises(SystemExit) as info:
            importlib.import_module(module).main(["--help"])
        assert info.value.code == 0, module
    # the cheap real paths: training with its default output, and with a folder of its own; a rerule
    with pytest.raises(SystemExit):
        importlib.import_module("mla_edu.model.train.__main__").main(["--steps", "1"])
    importlib.import_module("mla_edu.model.train.__main__").main(["--steps", "1", "--eval-questions", "1",
                                                                  "--out", str(tmp_path / "w")])
    from mla_edu.paths import RESULTS_DIR

    importlib.import_module("tools.kernel_bench").main(["--rerule", str(RESULTS_DIR / "kernel_bench_h200.json"),
                                                        "--out", str(tmp_path / "k")])
    capsys.readouterr()
    after = _package_files()
    assert after == before, (f"written inside the package: {sorted(set(after) - set(before))} new, "
                             f"{sorted(p for p in before if after.get(p) != before[p])} changed")
    assert (tmp_path / "w" / "manifest.json").is_file() and (tmp_path / "k" / "kernel_bench.json").is_file()
