"""tools.kernel_bench's report, on CPU: the committed H200 run renders to the committed table, and the Gluon
kernels' rows (``--wgmma``) render beside it."""

import copy
import json

from mla_edu.paths import RESULTS_DIR as RESULTS
from tools import kernel_bench as kb

RUN = json.loads((RESULTS / "kernel_bench_h200.json").read_text())


def test_committed_table_is_the_committed_runs_rendering():
    assert kb.to_markdown(RUN) == (RESULTS / "kernel_bench_h200.md").read_text()


def test_wgmma_rows_are_rendered_per_kind():
    data = copy.deepcopy(RUN)
    row = next(r for r in data["results"] if (r["page"], r["heads"], r["batch"], r["seq_len"]) == (64, 128, 64, 4096))
    row["wgmma"] = {"cp.async": {"split_us": {"1": 200.0}, "rule_us": 200.0, "best_splits": 1, "best_us": 200.0,
                                 "rel_err": 3e-3},
                    "tma": {"split_us": {"1": 161.15}, "rule_us": 161.15, "best_splits": 1, "best_us": 161.15,
                            "rel_err": 2e-3}}
    lines = kb.to_markdown(data).splitlines()
    table = [ln for ln in lines if ln.startswith("| 64 | 128 | 64 | 4096 | 322.3 (1) | ") and "0.36" not in ln]
    # x tl = 322.3 / 161.15; % copy = 320 MB in 161.15 us over 4.27 TB/s; % matmul = 73 GFLOP over 708 TFLOP/s
    assert table == ["| 64 | 128 | 64 | 4096 | 322.3 (1) | cp.async | 200.0 | 200.0 (1) | 1.61 | 37% / 52% | 0.58 "
                     "| 3.0e-03 |",
                     "| 64 | 128 | 64 | 4096 | 322.3 (1) | tma | 161.2 | 161.2 (1) | 2.00 | 46% / 64% | 0.72 "
                     "| 2.0e-03 |"]
