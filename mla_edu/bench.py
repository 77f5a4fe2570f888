"""Accuracy benchmark, mirroring SGLang's ``benchmark/gsm8k/bench_sglang.py`` on the tiny model.

    python -m mla_edu.bench --attention-backend cutlass_mla [--disable-cuda-graph]
        [--defects width,workspace,stale | none] [--num-kv-splits -1] --num-questions 256
        --parallel 128 --cuda-graph-bs 64 128 --max-running-requests 128 [--json]

Prints ``Accuracy``, ``Invalid``, ``Latency`` and output tokens/s (progress bar on stderr).
Concurrency is ``min(parallel, max_running_requests)``: the engine never runs more requests
at once than ``--max-running-requests``; the rest wait and join as rows free up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from mla_edu.serving import DEFECTS, ROW_ORDERS, Engine, ServerArgs, parse_defects


def _load_model(device=None):
    from mla_edu.model import load_pretrained

    return load_pretrained(device=device) if device else load_pretrained()


def run_bench(model=None, questions=None, *, num_questions: int | None = None, parallel: int = 128,
              progress: bool = False, prefill_cache: dict | None = None, **server_args) -> dict:
    """Run the eval set through an ``Engine`` and score it like bench_sglang.py.

    ``server_args``: any ``ServerArgs`` field. Returns a dict with ``accuracy``, ``invalid``,
    ``latency`` (s), ``output_throughput`` (tok/s), ``errors`` and row statistics.
    """
    from mla_edu.model import task

    if model is None:
        model = _load_model(server_args.get("device"))
    if questions is None:
        questions = task.default_eval_set()
    if num_questions is not None:
        if not isinstance(num_questions, int) or num_questions < 1:
            raise ValueError(f"num_questions: expected an int >= 1, got {num_questions!r}")
        questions = questions[:num_questions]
    if not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel: expected an int >= 1, got {parallel!r}")
    server_args["max_running_requests"] = min(parallel, server_args.get("max_running_requests", 128))
    server_args.setdefault("context_length", model.config.mla.max_position_embeddings)
    engine = Engine(model, ServerArgs(**server_args), prefill_cache=prefill_cache)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(questions), file=sys.stderr, leave=False, desc="requests")
    t0 = time.perf_counter()
    reqs = engine.generate([q.prompt_ids for q in questions], max_new_tokens=task.MAX_NEW_TOKENS,
                           stop_token_ids=(task.EOS,), progress=bar.update if bar else None)
    latency = time.perf_counter() - t0
    if bar:
        bar.close()
    # a request that ended in an error (bad input, or NaN from a poisoned page id) has no answer:
    # it scores as invalid, as a failed request would in bench_sglang.py
    texts = ["" if r.error else task.decode(r.output_ids) for r in reqs]
    accuracy, invalid = task.score(texts, [q.answer for q in questions])
    correct = [task.get_answer_value(t) == q.label for t, q in zip(texts, questions)]
    row0 = [r.decoded_only_in_row0 for r in reqs]
    n_row0 = sum(row0)
    out_tokens = sum(len(r.output_ids) for r in reqs)
    return {
        "attention_backend": engine.args.attention_backend,
        "cuda_graph": not engine.args.disable_cuda_graph,
        "defects": sorted(engine.args.defects) if engine.args.attention_backend == "cutlass_mla" else [],
        "num_kv_splits": engine.args.num_kv_splits,
        "max_running_requests": engine.args.max_running_requests,
        "row_order": engine.args.row_order,
        "num_questions": len(questions),
        "accuracy": accuracy,
        "invalid": invalid,
        "errors": sum(r.finished_reason == "error" for r in reqs),
        "latency": latency,
        "output_throughput": out_tokens / latency if latency > 0 else float("nan"),
        "decode_steps": engine.stats["decode_steps"],
        "graph_steps": engine.stats["graph_steps"],
        "max_splits_used": max(engine.runner.backend.splits_used, default=1),
        "only_row0": n_row0,
        "accuracy_only_row0": (sum(c for c, r in zip(correct, row0) if r) / n_row0) if n_row0 else float("nan"),
        "device": str(engine.runner.device),
        "dtype": engine.args.dtype,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mla_edu.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--attention-backend", default="cutlass_mla", choices=["cutlass_mla", "triton"])
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--defects", default="width,workspace,stale",
                   help=f"comma list from {','.join(DEFECTS)} or 'none' (cutlass_mla only; "
                        "'stale' alone = SGLang's merged fix)")
    p.add_argument("--num-kv-splits", type=int, default=1, help="1, or -1 for the automatic split count")
    p.add_argument("--num-questions", type=int, default=None, help="default: the whole eval set")
    p.add_argument("--parallel", type=int, default=128)
    p.add_argument("--cuda-graph-bs", type=int, nargs="+", default=[64, 128])
    p.add_argument("--max-running-requests", type=int, default=128)
    p.add_argument("--row-order", default="append", choices=list(ROW_ORDERS))
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default=None)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    return p


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    try:
        defects = parse_defects(a.defects)
        res = run_bench(num_questions=a.num_questions, parallel=a.parallel, progress=not a.json,
                        attention_backend=a.attention_backend, disable_cuda_graph=a.disable_cuda_graph,
                        defects=defects, num_kv_splits=a.num_kv_splits, cuda_graph_bs=tuple(a.cuda_graph_bs),
                        max_running_requests=a.max_running_requests, row_order=a.row_order,
                        dtype=a.dtype, device=a.device)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
