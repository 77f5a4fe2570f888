"""Faults, round two (issue 23): one test per fault, named after it.

Each behaviour is either a correct result or a clear error naming what was expected and what came,
raised before any long work; no work is lost after a long run and no shipped file is overwritten.
"""

import numpy as np
import pytest
import torch
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
    from mla_edu.case_study import accuracy
    from mla_edu.model import task
    from mla_edu.workshop.panel import PanelRuns, PanelSettings

    monkeypatch.setattr(accuracy, "run_bench", lambda *a, **k: pytest.fail("ran before refusing"))
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
