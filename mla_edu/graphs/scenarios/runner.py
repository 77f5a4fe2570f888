"""Running a scenario: capture its step once, replay it on later batches, compare with eager; and the checker on it.

``run_all`` gives the rows ``(device, backend, scenario, outcome)`` of ``report.format_table``.
"""

from __future__ import annotations

from typing import Callable

import torch

from mla_edu.device import default_device, triton_available
from mla_edu.graphs.capture import Graph, graph
from mla_edu.graphs.check import check, rows_label
from mla_edu.graphs.emulator import GraphCaptureError
from mla_edu.graphs.scenarios.problem import Problem
from mla_edu.graphs.scenarios.registry import CAPTURE_REFUSED, MATCHES, Scenario, scenario, scenarios


def classify(out: torch.Tensor, ref: torch.Tensor, atol: float = 1e-3) -> str:
    """'matches eager', 'wrong: rows>0' (row 0 right), 'NaN', 'wrong: all rows' or 'wrong: some rows'."""
    return rows_label(out, ref, atol=atol, rtol=1e-4)


def run_problem(build: Callable[[], Problem], mode: str = "auto") -> str:
    """Capture on the first batch, replay each later batch twice; the first divergence's label.

    A throwaway instance runs the step eagerly first (compiles Triton kernels before capture).
    """
    warm = build()
    warm.prepare(*warm.batches[0])
    try:
        warm.step()
    except GraphCaptureError:
        pass
    problem = build()
    s = problem.server
    problem.prepare(*problem.batches[0])
    g = Graph(device=s.device, mode=mode)
    try:
        with graph(g):
            out = problem.step()
    except (GraphCaptureError, RuntimeError) as e:
        if isinstance(e, GraphCaptureError) or "capturing" in str(e) or "capture" in str(e):
            return CAPTURE_REFUSED
        raise
    for reqs, lens in problem.batches[1:]:
        problem.prepare(reqs, lens)
        saved = s.kv_cache.clone()
        ref = problem.reference(reqs, lens)
        s.kv_cache.copy_(saved)
        for rep in range(2):
            g.replay()
            label = classify(out[: len(reqs)], ref)
            if label != MATCHES:
                return label if rep == 0 else "wrong: stale state (2nd replay)"
    return MATCHES


def scenario_outcome(sc: Scenario, device="cpu", mode: str = "auto") -> str:
    """What scenario ``sc`` does under a graph: its record's ``run``, else ``run_problem`` on its step."""
    if sc.pitfall.run is not None:
        return sc.pitfall.run(device, mode, sc.fixed)
    return run_problem(lambda: sc.build(device), mode)


def run_scenario(name: str, device="cpu", mode: str = "auto") -> str:
    """``scenario_outcome`` of the scenario named ``name`` (``registry.scenario``)."""
    return scenario_outcome(scenario(name), device, mode)


def run_all(device=None, mode: str = "auto", only: list[Scenario] | None = None) -> list[tuple[str, str, str, str]]:
    """Rows (device, backend, scenario, outcome) of ``only`` (default: every registered scenario), in order."""
    dev = torch.device(device) if device is not None else default_device()
    backend = Graph(device=dev, mode=mode).backend
    rows = []
    for sc in scenarios() if only is None else only:
        if sc.needs_triton and not triton_available():
            rows.append((str(dev), backend, sc.name, "skipped: no triton"))
            continue
        rows.append((str(dev), backend, sc.name, scenario_outcome(sc, dev, mode)))
    return rows


def check_problem(problem: Problem, n_trials: int = 6, seed: int = 0, mode: str = "auto", poison: bool = True):
    """Run :func:`mla_edu.graphs.check` on a scenario's step over random batches."""
    s = problem.server

    def make_inputs(gen, trial):
        reqs, lens = problem.batch(gen, trial)
        return {"reqs": reqs, "lens": lens}

    return check(problem.step, make_inputs,
                 static_inputs={"seq_lens": s.seq_lens, "req_pool_indices": s.req_pool_indices},
                 prepare=lambda inp: problem.prepare(inp["reqs"], inp["lens"]),
                 reference=lambda inp: problem.reference(inp["reqs"], inp["lens"]),
                 persistent=problem.persistent, model_state=[s.kv_cache, s.req_to_token],
                 n_trials=n_trials, poison=poison, seed=seed, device=s.device, mode=mode)
