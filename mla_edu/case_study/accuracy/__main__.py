"""``python -m mla_edu.case_study.accuracy``: the accuracy benchmark's command line (the library:
``mla_edu.case_study.accuracy``, whose docstring lists the flags)."""

from __future__ import annotations

import argparse
import json
import sys

from mla_edu import cli
from mla_edu.case_study import accuracy
from mla_edu.case_study.repro import unexpected_errors
from mla_edu.model import task
from mla_edu.serving import ROW_ORDERS, backend_names, known_defects, parse_defects
from mla_edu.util import torch_threads


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mla_edu.case_study.accuracy",
                                description=accuracy.__doc__.split("\n\n")[0])
    p.add_argument("--attention-backend", default="cutlass_mla", choices=list(backend_names()))
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--defects", default="width,workspace",
                   help=f"comma list from {','.join(known_defects())} or 'none' (cutlass_mla's; "
                        "'none' = SGLang's merged fix)")
    p.add_argument("--poison-fill", action="store_true",
                   help="cutlass_mla only, not in SGLang: fill unused page-table entries with an out-of-range page "
                        "id and run the kernel checked, so a read of one gives NaN (loud) instead of a stale page")
    p.add_argument("--num-kv-splits", type=cli.kv_splits, default=1, help="1, or -1 for the automatic split count")
    p.add_argument("--num-questions", type=cli.positive_int, default=None, help="default: the whole eval set")
    p.add_argument("--parallel", type=cli.positive_int, default=128)
    p.add_argument("--cuda-graph-bs", type=cli.positive_int, nargs="+", default=[64, 128])
    p.add_argument("--max-running-requests", type=cli.positive_int, default=128)
    p.add_argument("--row-order", default="append", choices=list(ROW_ORDERS))
    p.add_argument("--context-length", type=cli.int_at_least(2), default=None,
                   help="page-table width W = (context + 128) // 128 (default: the model's context)")
    p.add_argument("--dp", type=cli.positive_int, default=1, help="DP ranks (with --enable-dp-attention)")
    p.add_argument("--enable-dp-attention", action="store_true",
                   help="DP attention: --dp ranks in lockstep, each max_running_requests // dp requests")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", type=cli.device, default=None)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--threads", type=cli.positive_int, default=None, help="torch CPU threads (default: torch's)")
    return p



def main(argv=None) -> int:
    """Run the benchmark; 2 for bad arguments, 1 if a request ended in an error where none should (``repro``'s
    ``unexpected_errors``: a rejected request, or non-finite logits without the poison fill), else 0."""
    p = build_parser()
    a = p.parse_args(argv)
    if a.context_length is not None:  # as repro: a context too short for the questions is refused before any run
        cli.check_context_length(p, a.context_length, task.default_eval_set()[: a.num_questions])
    try:
        defects = parse_defects(a.defects)
        with torch_threads(a.threads):
            res = accuracy.run_bench(num_questions=a.num_questions, parallel=a.parallel, progress=not a.json,
                                     attention_backend=a.attention_backend, disable_cuda_graph=a.disable_cuda_graph,
                                     defects=defects, poison_fill=a.poison_fill, num_kv_splits=a.num_kv_splits,
                                     cuda_graph_bs=tuple(a.cuda_graph_bs), max_running_requests=a.max_running_requests,
                                     row_order=a.row_order, dtype=a.dtype, device=a.device, dp_size=a.dp,
                                     enable_dp_attention=a.enable_dp_attention,
                                     **({"context_length": a.context_length} if a.context_length else {}))
    except (ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(res))
    else:
        print(f"Accuracy: {res['accuracy']:.3f}")
        print(f"Invalid: {res['invalid']:.3f}")
        print(f"Latency: {res['latency']:.3f} s")
        print(f"Output throughput: {res['output_throughput']:.3f} token/s")
    errors = unexpected_errors([res])
    if errors:
        print(f"error: {errors} of {res['num_questions']} requests ended in an error (rejected, or non-finite "
              "logits without the poison fill): the accuracy counts them as wrong answers", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
