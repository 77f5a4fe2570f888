"""The accuracy benchmark: ``run_bench`` (one engine, one eval set, one score), its result, its child process for a
configuration that may crash the GPU, and ``AccuracyRuns`` (memoized runs). The command line: ``__main__.py``."""

from __future__ import annotations

import gc
import json
import os
import sys
import time

import torch

from mla_edu.device import default_device
from mla_edu.model import load_pretrained, task
from mla_edu.serving import DPEngine, Engine, ServerArgs, backend_class


def _load_model(device=None):
    return load_pretrained(device=device) if device else load_pretrained()


_IN_CHILD = "MLA_EDU_BENCH_CHILD"  # set in the child process, which then runs the configuration itself


def may_crash_the_gpu(args: ServerArgs) -> bool:
    """True for the pre-fix workspace handling with split partials under real CUDA graphs.

    Measured on the H200 (results/workspace_hazard_h200.md): a graph keeps writing the
    capture-time workspace that Python dropped when the next size was captured;
    ``torch.cuda.graph`` empties the allocator's cache when a capture starts, so the memory can
    be unmapped, and the replay dies with "an illegal memory access". That error poisons the
    whole process's CUDA context, so ``run_bench`` runs such a configuration in a child process.
    """
    device = torch.device(args.device) if args.device else default_device()
    return (os.environ.get(_IN_CHILD) != "1" and device.type == "cuda" and not args.disable_cuda_graph
            and backend_class(args.attention_backend).may_drop_a_live_workspace(args.defects, args.num_kv_splits))


def _run_in_child(args: ServerArgs, num_questions: int, parallel: int) -> dict:
    """``run_bench`` in a child process (``child_main``), which gets ``args`` as data (``ServerArgs.to_json``);
    a crash becomes the result."""
    import subprocess

    job = json.dumps({"server_args": args.to_json(), "num_questions": num_questions, "parallel": parallel})
    cmd = [sys.executable, "-c", "from mla_edu.case_study.accuracy import child_main; child_main()"]
    proc = subprocess.run(cmd, input=job, capture_output=True, text=True, env={**os.environ, _IN_CHILD: "1"})
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    lines = [ln for ln in proc.stderr.strip().splitlines() if "Error" in ln] or proc.stderr.strip().splitlines()[-1:]
    return bench_result(args, num_questions, accuracy=0.0, invalid=1.0, errors=num_questions, device="cuda",
                        crashed=lines[-1][:300] if lines else f"exit code {proc.returncode}")


def child_main() -> None:
    """The child of ``_run_in_child``: a job (JSON on stdin: server_args, num_questions, parallel) in, the
    ``run_bench`` result out (one JSON line on stdout)."""
    job = json.loads(sys.stdin.read())
    fields = ServerArgs.from_json(job["server_args"]).__dict__
    print(json.dumps(run_bench(num_questions=job["num_questions"], parallel=job["parallel"], **fields)))


def bench_result(args: ServerArgs, num_questions: int, *, accuracy: float, invalid: float, errors: int,
                 device: str, crashed: str | None = None, latency: float = float("nan"), decode_steps=None,
                 graph_steps=None, max_splits_used=None, max_splits_captured=None, groups: dict | None = None,
                 eager_step=None,
                 accuracy_eager_step: float = float("nan"), accuracy_no_eager_step: float = float("nan"),
                 output_tokens: int = 0) -> dict:
    """The one schema of a ``run_bench`` result, measured or crashed (``crashed``: the error; None for a run)."""
    backend = backend_class(args.attention_backend)
    if groups is None:  # no requests were measured: every group empty
        groups = {k: v for g in ROW_GROUPS for k, v in ((g, None), (f"right_{g}", None), (f"acc_{g}", float("nan")))}
    return {
        "attention_backend": args.attention_backend,
        "cuda_graph": not args.disable_cuda_graph,
        "defects": sorted(backend.active_defects(args.defects)),
        "poison_fill": args.poison_fill,
        "num_kv_splits": args.num_kv_splits,
        "max_running_requests": args.max_running_requests,
        "context_length": args.context_length,
        "page_table_width": args.page_table_width,
        "dp_size": args.dp_size if args.enable_dp_attention else 1,
        "row_order": args.row_order,
        "num_questions": num_questions,
        "accuracy": accuracy,
        "invalid": invalid,
        "errors": errors,
        "latency": latency,
        "output_throughput": output_tokens / latency if latency > 0 else float("nan"),
        "decode_steps": decode_steps,
        "graph_steps": graph_steps,
        "max_splits_used": max_splits_used,  # over every launch: captures, warm-ups and eager steps
        # over the graphs' captures alone (None: no graph, or graphs of the balanced schedule alone, whose split
        # counts are per request on the device)
        "max_splits_captured": max_splits_captured,
        **groups,  # only_row0, first_row0, rest: counts, right_*, acc_* (``row_groups``)
        "accuracy_only_row0": groups["acc_only_row0"],
        "eager_step": eager_step,
        "accuracy_eager_step": accuracy_eager_step,
        "accuracy_no_eager_step": accuracy_no_eager_step,
        "device": device,
        "dtype": args.dtype,
        "crashed": crashed,
    }


#: request groups by the batch rows their decode steps ran in (``Req.rows``; ``row_groups``)
ROW_GROUPS = ("only_row0", "first_row0", "rest")


def row_groups(reqs, correct) -> dict:
    """Requests sorted by the batch rows their decode steps ran in (``Req.rows``): ``only_row0`` (every step in
    row 0; a request that finished at prefill, with no decode step, counts here), ``first_row0`` (the first in
    row 0, a later one elsewhere), ``rest`` (the first elsewhere). A request that ended in an error (rejected,
    or non-finite logits) is in no group: it has no answer, and a rejected one never had a row. Per group: the
    count, ``right_<group>`` (right answers, ``correct``: one bool per request) and ``acc_<group>`` (their share,
    NaN for an empty group)."""
    ok = [r.finished_reason != "error" for r in reqs]
    only0 = [k and r.decoded_only_in_row0 for r, k in zip(reqs, ok)]
    first0 = [k and bool(r.rows) and r.rows[0] == 0 and not o for r, k, o in zip(reqs, ok, only0)]
    rest = [k and not (o or f) for k, o, f in zip(ok, only0, first0)]
    out = {}
    for name, mask in zip(ROW_GROUPS, (only0, first0, rest)):
        n, right = sum(mask), sum(c for c, m in zip(correct, mask) if m)
        out.update({name: n, f"right_{name}": right, f"acc_{name}": right / n if n else float("nan")})
    return out


def run_bench(model=None, questions=None, *, num_questions: int | None = None, parallel: int = 128,
              progress: bool = False, prefill_cache: dict | None = None, **server_args) -> dict:
    """Run the eval set through an ``Engine`` and score it like bench_sglang.py.

    ``server_args``: any ``ServerArgs`` field. Returns a dict with ``accuracy``, ``invalid``,
    ``latency`` (s), ``output_throughput`` (tok/s), ``errors``, ``crashed`` (None, or the error
    of a configuration that ``may_crash_the_gpu`` and did) and row statistics.
    """
    if model is None:
        model = _load_model(server_args.get("device"))
    if questions is None:
        questions = task.default_eval_set()
    if num_questions is not None:
        if not isinstance(num_questions, int) or not 1 <= num_questions <= len(questions):
            raise ValueError(f"num_questions: expected an int in [1, {len(questions)}] (the questions given), "
                             f"got {num_questions!r}")
        questions = questions[:num_questions]
    if not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel: expected an int >= 1, got {parallel!r}")
    server_args["max_running_requests"] = min(parallel, server_args.get("max_running_requests", 128))
    server_args.setdefault("context_length", model.config.mla.max_position_embeddings)
    args = ServerArgs(**server_args)
    if may_crash_the_gpu(args):
        if list(questions) != task.default_eval_set()[:len(questions)]:
            raise ValueError("this configuration runs in a child process, which reads the default eval set: "
                             "expected questions = task.default_eval_set()[:n], got another list")
        return _run_in_child(args, len(questions), parallel)
    # DP attention: one engine per rank, stepped in lockstep (``DPEngine``); else one engine
    engine = (DPEngine if args.enable_dp_attention else Engine)(model, args, prefill_cache=prefill_cache)
    engines = [r.engine for r in engine.ranks] if args.enable_dp_attention else [engine]
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
    # a request that ended in an error (bad input, or NaN from the poison page id) has no answer:
    # it scores as invalid, as a failed request would in bench_sglang.py
    texts = ["" if r.error else task.decode(r.output_ids) for r in reqs]
    accuracy, invalid = task.score(texts, [q.answer for q in questions])
    correct = [task.get_answer_value(t) == q.label for t, q in zip(texts, questions)]
    eager_step = [not all(r.replayed) for r in reqs]  # a decode step ran eagerly (DP: a rank was prefilling)
    n_eager = sum(eager_step)
    result = bench_result(
        args, len(questions), accuracy=accuracy, invalid=invalid,
        errors=sum(r.finished_reason == "error" for r in reqs), device=str(engines[0].runner.device),
        latency=latency, output_tokens=sum(len(r.output_ids) for r in reqs),
        decode_steps=sum(e.stats["decode_steps"] for e in engines),  # over the DP ranks
        graph_steps=sum(e.stats["graph_steps"] for e in engines),
        max_splits_used=max((s for e in engines for s in e.runner.backend.splits_used), default=1),
        max_splits_captured=max((s for e in engines for s in e.runner.backend.splits_captured), default=None),
        groups=row_groups(reqs, correct), eager_step=n_eager,
        accuracy_eager_step=sum(c for c, g in zip(correct, eager_step) if g) / n_eager if n_eager else float("nan"),
        accuracy_no_eager_step=(sum(c for c, g in zip(correct, eager_step) if not g) / (len(reqs) - n_eager)
                                if n_eager < len(reqs) else float("nan")))
    # free the engines' pools now (8 DP ranks at context 4096: 2.4 GB), not at the next garbage collection:
    # a ModelRunner and its GraphRunner refer to each other
    del engine, engines
    gc.collect()
    return result


def _key(cfg: dict) -> tuple:
    return tuple(sorted((k, tuple(sorted(v)) if isinstance(v, (set, frozenset)) else v) for k, v in cfg.items()))


class AccuracyRuns:
    """``run_bench`` of one model on one question set, called with server arguments; shares the prefill
    cache between runs and memoizes each result (``python -m mla_edu.case_study.repro``, notebooks 06-07)."""

    def __init__(self, model, questions, common: dict, progress: bool):
        self.model, self.questions, self.common, self.progress = model, questions, common, progress
        self.prefill_cache: dict = {}
        self.results: dict = {}

    def __call__(self, **cfg) -> dict:
        key = _key(cfg)
        if key not in self.results:
            args = {**self.common, **cfg}
            parallel = args.pop("parallel", 128)
            self.results[key] = run_bench(self.model, self.questions, parallel=parallel, progress=self.progress,
                                          prefill_cache=self.prefill_cache, **args)
        return self.results[key]
