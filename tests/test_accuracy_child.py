"""Settings passed once: ``run_bench``'s child process gets ``ServerArgs`` as data (``to_json``), and one function
(``accuracy.bench_result``) builds every result, measured or crashed."""

import dataclasses
import json

import pytest

from mla_edu.case_study.accuracy import bench as accuracy  # run_bench and its child process
from mla_edu.serving import SEED_PRE_FIX, ServerArgs

# a value other than the default for every field: a new field that JSON does not carry fails here
NON_DEFAULT = dict(attention_backend="cutlass_mla", disable_cuda_graph=True, cuda_graph_bs=(2, 4),
                   max_running_requests=4, context_length=4096, defects=SEED_PRE_FIX, poison_fill=True,
                   num_kv_splits=1, row_order="prepend", kernel_impl="reference", sm_count=7, dtype="float16",
                   device="cpu", max_total_pages=99, dp_size=2, enable_dp_attention=True)


def test_server_args_round_trip_every_field():
    defaults = ServerArgs()
    assert set(NON_DEFAULT) == {f.name for f in dataclasses.fields(ServerArgs)}
    args = ServerArgs(**{**NON_DEFAULT, "num_kv_splits": 1})
    changed = [f.name for f in dataclasses.fields(ServerArgs)
               if getattr(args, f.name) == getattr(defaults, f.name) and f.name != "num_kv_splits"]
    assert changed == ["attention_backend"]  # the one field whose other values change what else is allowed
    assert ServerArgs.from_json(args.to_json()) == args
    with pytest.raises(TypeError, match="expected a JSON object, got list"):
        ServerArgs.from_json("[1, 2]")
    with pytest.raises(TypeError, match="unexpected keyword argument 'cuda_graphs'"):
        ServerArgs.from_json(json.dumps({"cuda_graphs": [1]}))


def test_child_result_and_crash_result_share_one_schema():
    args = ServerArgs(attention_backend="triton", cuda_graph_bs=(1, 2), max_running_requests=2, kernel_impl="torch",
                      context_length=640, device="cpu")
    measured = accuracy._run_in_child(args, 2, 2)
    assert measured["crashed"] is None and measured["num_questions"] == 2 and measured["graph_steps"] > 0
    assert measured["device"] == "cpu" and measured["max_running_requests"] == 2
    # the reference impl syncs with the host, which a graph capture refuses: the child got kernel_impl (the
    # flags it was given before had no such flag, so it ran the default impl), and its crash is a result
    crashed = accuracy._run_in_child(dataclasses.replace(args, kernel_impl="reference"), 2, 2)
    assert crashed["crashed"] and crashed["accuracy"] == 0.0 and crashed["errors"] == 2
    assert list(crashed) == list(measured)
