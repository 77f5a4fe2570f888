"""Silent failures in the serving engine and its command lines: an audit's findings, each reproduced first, then
fixed. Each test is named after its finding and failed before the fix: a refused run that printed an accuracy and
exited 0, prompts a generator lost on the way to the DP ranks, a decode batch whose short tensors a graph replay
broadcast, a bad ``stop`` that raised after a request had advanced or a row had been taken, pages an interrupt leaked,
and arguments a backend or the engine took and then dropped or failed on with torch's own error.
"""

import json
from pathlib import Path

import pytest
import torch
from tiny_models import pools, random_prompts, random_tiny_model

import mla_edu.case_study.accuracy.bench as bench  # the module whose _load_model run_bench calls
import mla_edu.kvcache.pool as pool_mod
from mla_edu.case_study.accuracy import __main__ as accuracy_cli
from mla_edu.kvcache import PagedAllocator
from mla_edu.serving import Engine, ServerArgs
from mla_edu.serving.batch import ForwardBatch
from mla_edu.serving.dp import idle_batch, run_dp_multiprocess

KW = dict(cuda_graph_bs=(2, 4), max_running_requests=4, defects="none", context_length=64)


@pytest.fixture(scope="module")
def model():
    return random_tiny_model()


def state(eng, reqs):
    return pools(eng), dict(eng.stats), [(r.seq_len, list(r.output_ids), list(r.rows), list(r.pages)) for r in reqs]


# 1. the accuracy CLI: every request refused printed "Accuracy: 0.000" and exited 0
def test_accuracy_cli_refuses_a_context_too_short_for_the_questions(capsys):
    with pytest.raises(SystemExit) as e:  # before any model is loaded or run
        accuracy_cli.main(["--context-length", "8", "--num-questions", "4", "--disable-cuda-graph"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --context-length: expected at least" in err and "got 8" in err


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_accuracy_cli_exits_1_when_requests_end_in_an_error(monkeypatch, capsys, json_flag):
    # a 40-token vocabulary: every eval prompt's token ids are out of range, so each request is refused
    monkeypatch.setattr(bench, "_load_model", lambda device=None: random_tiny_model())
    rc = accuracy_cli.main(["--num-questions", "2", "--parallel", "2", "--disable-cuda-graph"] + json_flag)
    out, err = capsys.readouterr()
    assert rc == 1 and "error: 2 of 2 requests ended in an error" in err
    if json_flag:  # the JSON is printed as before, its errors field set
        assert json.loads(out)["errors"] == 2
    else:
        assert out.startswith("Accuracy: 0.000")


# 2. run_dp_multiprocess with a generator: the parent's checks consumed it and the ranks got no prompt
def test_run_dp_multiprocess_reads_a_generator_once(model, monkeypatch):
    prompts = random_prompts(1, 4, 5, 20)
    sent = []

    def spawn(fn, args, nprocs, join):  # the ranks' side, without processes: what each would get, and empty results
        sent.append(args[3])
        for r in range(nprocs):
            Path(args[7], f"rank{r}.json").write_text(json.dumps({"reqs": {}, "steps": {}}))

    monkeypatch.setattr(torch.multiprocessing, "spawn", spawn)
    reqs, _ = run_dp_multiprocess(model, (p for p in prompts), dp_size=2, enable_dp_attention=True, **KW)
    assert sent == [prompts] and [r.prompt_ids for r in reqs] == prompts
    with pytest.raises(TypeError, match="prompts: expected an iterable of token-id lists, got NoneType"):
        run_dp_multiprocess(model, None, dp_size=2, enable_dp_attention=True, **KW)


# 3. ForwardBatch took tensors shorter than batch_size; a graph replay broadcast them over the rows
def test_forward_batch_refuses_a_length_other_than_batch_size(model):
    eng = Engine(model, **KW)
    b = eng.make_batch(eng.prefill_requests(random_prompts(0, 3, 5, 20)))
    fields = dict(input_ids=b.input_ids, positions=b.positions, req_pool_indices=b.req_pool_indices,
                  seq_lens=b.seq_lens, out_cache_loc=b.out_cache_loc, seq_lens_cpu=b.seq_lens_cpu)
    for name in fields:
        with pytest.raises(ValueError, match=rf"ForwardBatch.{name}: expected shape \(3,\) \(batch_size=3\), "
                                             r"got \(1,\)"):
            ForwardBatch(3, **{**fields, name: fields[name][:1]})
    with pytest.raises(ValueError, match=r"ForwardBatch.seq_lens: expected shape \(3,\) .*got \(3, 1\)"):
        ForwardBatch(3, **{**fields, "seq_lens": fields["seq_lens"][:, None]})
    with pytest.raises(TypeError, match="ForwardBatch.batch_size: expected an int >= 0, got 3.0"):
        ForwardBatch(3.0, **fields)
    with pytest.raises(ValueError, match="ForwardBatch.batch_size: expected an int >= 0, got -1"):
        ForwardBatch(-1, **fields)
    assert ForwardBatch(3, **{**fields, "seq_lens_cpu": None}).seq_lens_cpu is None  # the host copy stays optional
    assert idle_batch("cpu").batch_size == 0  # DP attention's idle batch: no rows


# 4. a bad stop: decode_step raised after request 0 advanced, prefill after its row and pages were taken
@pytest.mark.parametrize("stop", ["2", 2, [2.5]])
def test_decode_step_and_prefill_check_stop_first(model, stop):
    eng = Engine(model, **KW)
    reqs = eng.prefill_requests(random_prompts(0, 3, 5, 20))
    before = state(eng, reqs)
    with pytest.raises(TypeError, match="stop: expected a list of ints"):
        eng.decode_step(reqs, stop)
    assert state(eng, reqs) == before
    req = eng.new_req([5, 6, 7])
    with pytest.raises(TypeError, match="stop: expected a list of ints"):
        eng.prefill(req, stop)
    assert pools(eng) == before[0] and req.req_pool_idx is None and not req.pages and not req.output_ids
    eng.prefill(req, [])  # the same request, with a good stop list
    eng.decode_step(reqs + [req], None)  # None: no stop token, as generate's stop_token_ids=None
    assert [r.seq_len for r in reqs] == [s + 1 for s, _, _, _ in before[2]]


# 5. alloc_pages: an interrupt while it built its result leaked the pages it had taken off the free list
def test_alloc_pages_interrupted_leaks_nothing(monkeypatch):
    a = PagedAllocator(8, 4)

    def interrupt(*args, **kw):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(pool_mod.torch, "tensor", interrupt)
        with pytest.raises(KeyboardInterrupt):
            a.alloc_pages(3)
    assert a.available_pages() == 7 and not a._used
    assert a.alloc_pages(7).tolist() == list(range(1, 8))  # every page still handed out, once


# 6. odd batches and arguments: named errors instead of torch's, nothing dropped silently
@pytest.mark.parametrize("backend", ["cutlass_mla", "triton"])
def test_eager_decode_of_odd_batches(model, backend):
    eng = Engine(model, **{**KW, "disable_cuda_graph": True, "attention_backend": backend})
    b = eng.make_batch(eng.prefill_requests(random_prompts(0, 2, 5, 20)))
    ids, _, logits = eng.runner.decode(b, eager=True)  # run twice, it writes the same latents to the same slots
    nocpu = ForwardBatch(b.batch_size, b.input_ids, b.positions, b.req_pool_indices, b.seq_lens, b.out_cache_loc)
    ids2, _, logits2 = eng.runner.decode(nocpu, eager=True)  # the host copy is optional: the lengths are read back
    assert ids2.tolist() == ids.tolist() and torch.equal(logits2, logits)
    with pytest.raises(ValueError, match=f"the {backend} backend expected a batch of at least one row .*"
                                         "got batch_size=0"):
        eng.runner.decode(idle_batch("cpu"), eager=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_engine_on_cuda_without_cuda_names_the_device(model):
    with pytest.raises(ValueError, match=r"device: expected cpu \(CUDA is not available here.*got 'cuda'"):
        Engine(model, device="cuda", **KW)


def test_a_defect_the_backend_cannot_switch_on_is_refused(model, monkeypatch, capsys):
    monkeypatch.setattr(bench, "_load_model", lambda device=None: model)
    with pytest.raises(ValueError, match=r"defects: the triton backend switches on none, got \['width'\]; "
                                         "pass defects='none'"):
        ServerArgs(attention_backend="triton", defects="width")
    assert ServerArgs(attention_backend="triton").defects  # the default (cutlass_mla's pre-fix), left unapplied
    assert not ServerArgs(attention_backend="triton", defects="none").defects
    eng = Engine(model, attention_backend="triton", **{**KW, "defects": "width,workspace"})  # the CLI's default
    assert eng.runner.backend.defects == frozenset()
    assert accuracy_cli.main(["--attention-backend", "triton", "--defects", "width", "--json"]) == 2
    assert "defects: the triton backend switches on none, got ['width']" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the usage error is for a machine without CUDA")
def test_the_scenarios_command_turns_a_mode_the_device_cannot_run_into_a_usage_error(capsys):
    from mla_edu.graphs.scenarios.__main__ import main

    with pytest.raises(SystemExit) as e:  # it printed a traceback and exited 1
        main(["--mode", "cuda"])
    assert e.value.code == 2 and "error: mode='cuda' needs a CUDA device" in capsys.readouterr().err


def test_a_graph_replay_reads_the_lengths_when_the_batch_has_no_host_copy(model):
    eng = Engine(model, **{**KW, "cuda_graph_bs": (2,), "attention_backend": "cutlass_mla"})
    b = eng.make_batch(eng.prefill_requests(random_prompts(0, 2, 5, 20)))
    nocpu = ForwardBatch(b.batch_size, b.input_ids, b.positions, b.req_pool_indices, b.seq_lens, b.out_cache_loc)
    ids2, _, logits2 = eng.runner.decode(nocpu, graph_bs=2)  # copy_(None): a bare TypeError before
    ids, _, logits = eng.runner.decode(b, graph_bs=2)  # the same step again: the same latents to the same slots
    assert ids2.tolist() == ids.tolist() and torch.equal(logits2, logits)
