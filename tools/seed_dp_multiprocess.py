"""The seed's configuration, pre-fix: one process per DP rank over gloo against the lockstep ``DPEngine``.

    .venv/bin/python -m tools.seed_dp_multiprocess > results/dp_multiprocess_cpu.txt

``make repro`` runs DP attention as ``DPEngine`` (8 ranks stepped in one process). This runs the
pre-fix configurations (with and without the bug-era kernel) both ways on all 256 questions and
compares every request's output ids, batch rows and graph-replayed decode steps.
"""
import argparse
import time

import torch

from mla_edu import cli
from mla_edu.case_study.seed import SEED_CONFIG
from mla_edu.model import load_pretrained, task
from mla_edu.serving import PRE_FIX, SEED_PRE_FIX, DPEngine, run_dp_multiprocess


def accuracy(reqs, qs) -> float:
    return sum(task.get_answer_value(task.decode(r.output_ids)) == q.label for r, q in zip(reqs, qs)) / len(qs)


def start(module: str, doc: str, cost: str, argv=None) -> None:
    """The seed tools' command line, parsed before any work: ``--threads`` (default 1) and ``--help``
    (which says what the job costs and runs nothing)."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0],
                                epilog=f"{cost}; prints to stdout")
    p.add_argument("--threads", type=cli.positive_int, default=1, help="torch CPU threads (default 1)")
    torch.set_num_threads(p.parse_args(argv).threads)


def main(argv=None) -> int:
    start("tools.seed_dp_multiprocess", __doc__, "many minutes and several GB on a CPU (8 processes)", argv)
    model = load_pretrained()
    qs = task.default_eval_set()
    prompts = [q.prompt_ids for q in qs]
    gen = dict(max_new_tokens=task.MAX_NEW_TOKENS, stop_token_ids=(task.EOS,))
    for label, defects in (("pre-fix + bug-era kernel (SEED_PRE_FIX)", SEED_PRE_FIX), ("pre-fix (PRE_FIX)", PRE_FIX)):
        kw = dict(SEED_CONFIG, defects=defects)
        t0 = time.perf_counter()
        lock = DPEngine(model, **kw).generate(prompts, **gen)
        t1 = time.perf_counter()
        multi, steps = run_dp_multiprocess(model, prompts, **gen, **kw)
        t2 = time.perf_counter()
        same = sum(a.output_ids == b.output_ids and a.rows == b.rows and a.replayed == b.replayed
                   for a, b in zip(lock, multi))
        print(f"{label}: lockstep {t1 - t0:.0f} s, accuracy {accuracy(lock, qs):.3f}; 8 processes (gloo) "
              f"{t2 - t1:.0f} s, accuracy {accuracy(multi, qs):.3f}; identical output ids, rows and replayed "
              f"steps: {same} of {len(qs)} requests; rank steps {({k: sum(s[k] for s in steps) for k in steps[0]})}",
              flush=True)
        assert same == len(qs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
