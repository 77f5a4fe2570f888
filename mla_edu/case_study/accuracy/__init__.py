"""Accuracy benchmark, mirroring SGLang's ``benchmark/gsm8k/bench_sglang.py`` on the tiny model.

    python -m mla_edu.case_study.accuracy --attention-backend cutlass_mla [--disable-cuda-graph]
        [--defects width,workspace | none] [--poison-fill] [--num-kv-splits -1] --num-questions 256
        --parallel 128 --cuda-graph-bs 64 128 --max-running-requests 128
        [--context-length 4096] [--dp 8 --enable-dp-attention] [--json]

Prints ``Accuracy``, ``Invalid``, ``Latency`` and output tokens/s (progress bar on stderr).
Concurrency is ``min(parallel, max_running_requests)``: the engine never runs more requests
at once than ``--max-running-requests``; the rest wait and join as rows free up.
"""

from mla_edu.case_study.accuracy.bench import (ROW_GROUPS, AccuracyRuns, bench_result, child_main, may_crash_the_gpu,
                                               row_groups, run_bench)

__all__ = ["ROW_GROUPS", "AccuracyRuns", "bench_result", "child_main", "may_crash_the_gpu", "row_groups", "run_bench"]
