"""``python -m mla_edu.case_study.accuracy`` and ``python -m mla_edu.case_study.repro``: CLI smoke tests.

Both run on a few questions. The model is a randomly initialised TinyDeepseek (the CLI's loader is
swapped out), so these check plumbing, output format and error handling, not accuracy.
"""

import json

import pytest
import torch

import mla_edu.case_study.accuracy.bench as bench  # the module whose _load_model run_bench calls
from mla_edu.case_study.accuracy import __main__ as bench_cli
from mla_edu.model import task
from mla_edu.model.tiny import TinyDeepseek


@pytest.fixture(scope="module")
def random_model():
    torch.manual_seed(0)
    return TinyDeepseek().eval()


@pytest.fixture
def patched(monkeypatch, random_model):
    monkeypatch.setattr(bench, "_load_model", lambda device=None: random_model)
    return random_model


def test_bench_cli_text(patched, capsys):
    rc = bench_cli.main(["--attention-backend", "cutlass_mla", "--num-questions", "3", "--parallel", "2",
                     "--cuda-graph-bs", "2", "4", "--max-running-requests", "4"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert out[0].startswith("Accuracy: ") and out[1].startswith("Invalid: ")
    assert out[2].startswith("Latency: ") and "token/s" in out[3]


def test_bench_cli_json_and_scoring(patched, capsys):
    rc = bench_cli.main(["--attention-backend", "triton", "--num-questions", "4", "--parallel", "4",
                     "--cuda-graph-bs", "2", "4", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["num_questions"] == 4 and res["cuda_graph"] and res["graph_steps"] > 0
    assert res["max_running_requests"] == 4
    # the score is bench_sglang's, recomputed here from the engine's own generations
    qs = task.default_eval_set()[:4]
    outs = [patched.generate(q.prompt_ids) for q in qs]
    acc, inv = task.score([task.decode(o) for o in outs], [q.answer for q in qs])
    assert (res["accuracy"], res["invalid"]) == (acc, inv)


def test_bench_cli_poison_fill(patched, capsys):
    """--poison-fill reaches the engine: width alone then reads the poison id, and those requests fail loudly."""
    common = ["--defects", "width", "--num-questions", "6", "--parallel", "4", "--cuda-graph-bs", "2", "4", "--json"]
    results = {}
    for flag in ([], ["--poison-fill"]):
        assert bench_cli.main(common + flag) == 0
        results[bool(flag)] = json.loads(capsys.readouterr().out)
    assert [results[k]["poison_fill"] for k in (False, True)] == [False, True]
    assert results[False]["errors"] == 0 and results[True]["errors"] > 0


@pytest.mark.parametrize("argv,msg", [
    (["--defects", "width,typo"], "defects: expected names from"),
    (["--defects", "width,stale"], "'stale' is no longer a defect"),
    (["--attention-backend", "triton", "--poison-fill"], "poison_fill: applies to the cutlass_mla backend only"),
    (["--num-questions", "0"], "argument --num-questions: expected an int >= 1, got 0"),
    (["--max-running-requests", "0"], "argument --max-running-requests: expected an int >= 1"),
])
def test_bench_cli_bad_arguments(patched, capsys, argv, msg):
    try:
        status = bench_cli.main(argv + ["--json"])
    except SystemExit as e:  # argparse's own one-line error
        status = e.code
    assert status == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_bench_cli_unknown_backend(capsys):
    with pytest.raises(SystemExit):
        bench_cli.main(["--attention-backend", "flashinfer"])
    assert "invalid choice" in capsys.readouterr().err


def test_bench_cli_dp_attention_and_context(patched, capsys):
    rc = bench_cli.main(["--num-questions", "4", "--cuda-graph-bs", "2", "4", "--max-running-requests", "4",
                     "--context-length", "1000", "--dp", "2", "--enable-dp-attention", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and (res["dp_size"], res["context_length"], res["page_table_width"]) == (2, 1000, 8)
    assert res["graph_steps"] > 0 and res["eager_step"] + res["graph_steps"] > 0


def test_repro_seed_configuration_small(capsys, tmp_path):
    """The repro's three parts, on 12 questions and a small DP configuration (the shipped model)."""
    from mla_edu.case_study import repro
    from mla_edu.serving import SEED_PRE_FIX

    out = tmp_path / "r.json"
    assert repro.build_parser().parse_args([]).context_length == repro.SEED_CONFIG["context_length"] == 4096
    rc = repro.main(["--num-questions", "12", "--context-length", "1024", "--dp", "2", "--max-running-requests", "8",
                     "--cuda-graph-bs", "4", "8", "--json-out", str(out)])
    text = capsys.readouterr().out
    res = json.loads(out.read_text())
    assert rc == 0 and "(W = 9) --dp 2 --enable-dp-attention" in text
    assert set(res["table"]) == {"eager", "pre_fix", "fixed", "triton", "scale"}
    assert res["table"]["pre_fix"]["defects"] == sorted(SEED_PRE_FIX) and not res["table"]["pre_fix"]["errors"]
    assert all(r["dp_size"] == 2 and r["page_table_width"] == 9 for r in res["table"].values())
    assert res["table"]["eager"]["accuracy"] > res["table"]["pre_fix"]["accuracy"]
    assert {label for label, _, _ in repro.ABLATION} == set(repro.MECHANISM)
    assert len(res["ablation"]) == 2 * len(repro.ABLATION)
    assert [r["num_kv_splits"] for r in res["ablation"][:2]] == [1, -1]
    assert [r["dp_size"] for r in res["open_question_this"]] == [2, 2]
    assert [(r["dp_size"], r["row_order"]) for r in res["open_question"]] == [(1, "append"), (1, "prepend")] * 2
    assert "NOT as predicted" not in text


def test_verdict_names_a_crash():
    """A configuration that ran in a child process and died is reported as a crash, never as = eager."""
    from mla_edu.case_study.repro import HARMFUL, HARMLESS, HARMLESS_OR_CRASH, verdict

    error = "torch.AcceleratorError: CUDA error: an illegal memory access"
    crashed = {"accuracy": 0.0, "errors": 12, "crashed": error}
    assert verdict(HARMLESS_OR_CRASH, crashed, 0.9) == f"crashed: {error}"  # the dropped workspace, unmapped
    assert verdict(HARMLESS, crashed, 0.9) == verdict(HARMFUL, crashed, 0.9) == f"crashed: {error} (NOT as predicted)"
    fine = {"accuracy": 0.89, "errors": 0, "crashed": None}
    assert verdict(HARMLESS, fine, 0.9) == verdict(HARMLESS_OR_CRASH, fine, 0.9) == "= eager"
    assert verdict(HARMFUL, fine, 0.9) == "= eager (NOT as predicted)"
    assert verdict(HARMFUL, dict(fine, accuracy=0.3, errors=2), 0.9) == "-0.600 vs eager, 2 NaN"


def test_run_bench_frees_its_engines_at_once(random_model):
    """A DP run's pools go when it returns, not at some later garbage collection (the repro runs 18 in a row)."""
    import gc

    from mla_edu.serving.model_runner import ModelRunner

    def runners():
        return sum(type(o) is ModelRunner for o in gc.get_objects())

    gc.collect()
    before = runners()
    gc.disable()  # only run_bench's own collection may free them
    try:
        bench.run_bench(random_model, task.default_eval_set()[:2], cuda_graph_bs=(2,), max_running_requests=4,
                        dp_size=2, enable_dp_attention=True)
        assert runners() == before
    finally:
        gc.enable()


def _longest_plus_new(n=None) -> int:
    qs = task.default_eval_set()[:n]
    return max(len(q.prompt_ids) for q in qs) + task.MAX_NEW_TOKENS


@pytest.mark.parametrize("n", [None, 3])
def test_repro_refuses_a_context_shorter_than_its_requests(n, capsys, monkeypatch):
    """Every request longer than the context was rejected, the table printed 0.000 everywhere, and the run exited 0;
    the minimum comes from the prompts used (fewer questions: maybe a shorter longest prompt)."""
    from mla_edu.case_study import repro
    from cli_run import main_exit

    class Ran(Exception):
        pass

    def runs(*a, **k):
        raise Ran

    monkeypatch.setattr(repro, "AccuracyRuns", runs)
    need = _longest_plus_new(n)
    argv = [] if n is None else ["--num-questions", str(n)]
    code, err = main_exit("mla_edu.case_study.repro", argv + ["--context-length", str(need - 1)], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"argument --context-length: expected at least {need} (the longest prompt" in err
    assert f"got {need - 1}" in err
    with pytest.raises(Ran):  # the minimum itself passes
        repro.main(argv + ["--context-length", str(need)])


def _fake_run_bench(errors_when):
    """A stand-in for ``run_bench``: no engine; ``errors_when(args)`` errored requests in each result."""
    from mla_edu.serving import ServerArgs

    def fake(model, questions, *, parallel, progress, prefill_cache, **server_args):
        server_args["max_running_requests"] = min(parallel, server_args.get("max_running_requests", 128))
        args = ServerArgs(**server_args)
        return bench.bench_result(args, len(questions), accuracy=0.5, invalid=0.0, errors=errors_when(args),
                                  device="cpu", latency=1.0, eager_step=0, max_splits_used=1)
    return fake


@pytest.mark.parametrize("errors_when,code", [
    (lambda args: 2 if args.row_order == "prepend" else 0, 1),  # errors where none should be: fail
    (lambda args: 3 if args.poison_fill else 0, 0),  # the poison fill's NaNs are its point
    (lambda args: 0, 0),
])
def test_repro_fails_when_requests_error(errors_when, code, capsys, monkeypatch):
    """A run whose requests ended in an error printed its table and exited 0; now the count goes to stderr and the
    exit status is 1, except for the poison fill's runs (``unexpected_errors``)."""
    from mla_edu.case_study import repro

    monkeypatch.setattr(bench, "run_bench", _fake_run_bench(errors_when))
    monkeypatch.setattr(repro, "load_pretrained", lambda: None)
    assert repro.main(["--num-questions", "4"]) == code
    err = capsys.readouterr().err
    assert ("error: 4 requests ended in an error" in err) == bool(code)  # 2 prepend runs x 2


def test_repro_gives_back_the_thread_count(capsys, monkeypatch):
    """main(argv) from Python set torch's thread count to --threads and left it there."""
    from mla_edu.case_study import repro

    monkeypatch.setattr(repro, "load_pretrained", lambda: None)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setattr(bench, "run_bench", _fake_run_bench(lambda args: 0))
        assert repro.main(["--num-questions", "2", "--threads", "1"]) == 0
        assert torch.get_num_threads() == 2

        def boom(*a, **k):
            raise RuntimeError("a run failed")

        monkeypatch.setattr(bench, "run_bench", boom)
        with pytest.raises(RuntimeError, match="a run failed"):
            repro.main(["--num-questions", "2", "--threads", "1"])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
