"""tools.kernel_bench's report, on CPU: the committed H200 run renders to the committed table, and the Gluon
other stage-1 kernels' rows (``--kernels``) render beside it."""

import copy
import json

import pytest

from markers import CPU_TRITON
from mla_edu.paths import RESULTS_DIR as RESULTS
from tools import kernel_bench as kb

RUN = json.loads((RESULTS / "kernel_bench_h200.json").read_text())


def test_committed_table_is_the_committed_runs_rendering():
    assert kb.to_markdown(RUN) == (RESULTS / "kernel_bench_h200.md").read_text()


def test_other_kernels_rows_are_rendered_per_kernel():
    data = copy.deepcopy(RUN)
    row = next(r for r in data["results"] if (r["page"], r["heads"], r["batch"], r["seq_len"]) == (64, 128, 64, 4096))
    row["triton_rule_us"], row["triton_rule_splits"] = 160.0, 1
    row["kernels"] = {"tl": {"split_us": {"1": 320.0}, "rule_us": 320.0, "best_splits": 1, "best_us": 320.0,
                             "rel_err": 3e-3}}
    data["ceilings"] = {"copy_TBps": 4.0, "matmul_bf16_TFLOPs": 700.0}
    lines = kb.to_markdown(data).splitlines()
    table = [ln for ln in lines if ln.startswith("| 64 | 128 | 64 | 4096 | 160.0 (1) | tma, 64 heads | tl | ")]
    # x = 320 / 160; % copy = 320 MB (cache + q + out) in 320 us over 4 TB/s; % matmul = 73 GFLOP over 700 TFLOP/s
    assert table == ["| 64 | 128 | 64 | 4096 | 160.0 (1) | tma, 64 heads | tl | 320.0 (1) | 2.00 | 25% / 33% "
                     "| 3.0e-03 |"]
    main = [ln for ln in lines if ln.startswith("| 64 | 128 | 64 | 4096 | 160.0 (1) | tma, 64 heads | 169.0 (1) |")]
    assert len(main) == 1  # the main table names each row's stage-1 kernel too


def test_the_stage1_run_renders_to_its_table():
    stage1 = json.loads((RESULTS / "kernel_bench_h200_stage1.json").read_text())
    assert kb.to_markdown(stage1) == (RESULTS / "kernel_bench_h200_stage1.md").read_text()


@pytest.mark.triton
def test_a_row_names_the_kernel_that_runs_there():
    """"seesaw" names the two-warpgroup kernel only where it runs (64-head programs, a cache TMA reads); elsewhere
    the TMA kernel runs, and the row says so (the first seesaw run labelled its 16-head rows "seesaw")."""
    import torch

    def cache(page):
        return torch.zeros(8, page, 576, dtype=torch.bfloat16)

    assert kb.stage1_name("seesaw", 128, 64, 64, cache(64)) == "seesaw, 64 heads"
    assert kb.stage1_name("seesaw", 16, 64, 64, cache(64)) == "tma, 16 heads (swapped)"
    assert kb.stage1_name("seesaw", 128, 64, 64, cache(32)) == "tma, 64 heads"  # tiles of 64 tokens in one page
    assert kb.stage1_name("seesaw", 128, 1, 1, cache(64)) == "tma, 16 heads (swapped)"  # too small a grid for 64
    assert kb.stage1_name("tma", 128, 64, 64, cache(64)) == "tma, 64 heads"
    assert kb.stage1_name("tl", 128, 64, 64, cache(64)) == "tl"


@pytest.mark.triton
@CPU_TRITON
def test_backend_calls_runs_both_paths_on_one_problem():
    # tools.kernel_bench.backend_calls, what kernel_lab.tools.stage1_ab and kernel_lab.tools.schedule_profile time on
    # the H200: here on
    # the CPU (Triton's interpreter, float32), a ragged batch with an empty request; both paths agree
    import math

    import torch

    from tools.kernel_bench import backend_calls

    (q_nope, *_), rule, parts, calls = backend_calls([130, 0, 20], 16, 4, 1 / math.sqrt(192), page=16,
                                                     dtype=torch.float32, device="cpu")
    assert (q_nope.shape, q_nope.device.type) == ((3, 16, 512), "cpu") and rule >= 1 and parts >= 1
    out = {path: call() for path, call in calls.items()}
    torch.testing.assert_close(out["rule"], out["balanced"], rtol=1e-4, atol=1e-5)
    assert torch.equal(out["rule"][1], torch.zeros_like(out["rule"][1]))  # no token: zeros
