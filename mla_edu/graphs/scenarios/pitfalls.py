"""The pitfalls of notebook 05, one ``Pitfall`` record each (the correct pattern too, as a record of no pitfall).

What each does under a CUDA graph: the H200 log ``results/graph_scenarios_h200_cuda.md`` is the evidence,
the emulator's run ``results/graph_scenarios_cpu.md``. The checker's hints come from ``graphs/check.py``.
"""

from __future__ import annotations

from functools import partial

from mla_edu.graphs.scenarios import builders
from mla_edu.graphs.scenarios.registry import CAPTURE_REFUSED, MATCHES, Pitfall, register

FROZEN_SCALAR = register(Pitfall(
    "frozen_scalar", 1, builders.frozen_scalar, partial(builders.frozen_scalar, fixed=True),
    outcome_cpu="wrong: all rows", outcome_cuda="wrong: all rows", hint="host value"))
NARROW_VIEW_TORCH = register(Pitfall(
    "narrow_view/torch", 2, partial(builders.narrow_view, impl="torch"),
    partial(builders.narrow_view, fixed=True, impl="torch"),
    outcome_cpu="wrong: rows>0", outcome_cuda="wrong: rows>0", hint="row stride"))
NARROW_VIEW_TRITON = register(Pitfall(
    "narrow_view/triton", 2, partial(builders.narrow_view, impl="triton"),
    partial(builders.narrow_view, fixed=True, impl="triton"),
    outcome_cpu="wrong: rows>0", outcome_cuda="wrong: rows>0", hint="row stride", needs_triton=True))
FREED_POOL_REUSE = register(Pitfall(  # the checker's step: a workspace re-allocated at every replay
    "freed_pool_reuse", 3, builders.freed_workspace, partial(builders.freed_workspace, fixed=True),
    outcome_cpu="wrong: freed memory reused", outcome_cuda="wrong: freed memory reused",
    hint="freed memory used at replay", run=builders.freed_pool_reuse))
STALE_BUFFER = register(Pitfall(
    "stale_buffer", 4, builders.stale_buffer, partial(builders.stale_buffer, fixed=True),
    outcome_cpu="wrong: stale state (2nd replay)", outcome_cuda="wrong: stale state (2nd replay)",
    hint="never writes"))
PADDED_SLOTS = register(Pitfall(
    "padded_slots", 5, builders.padded_slots, partial(builders.padded_slots, fixed=True),
    outcome_cpu="wrong: some rows", outcome_cuda="wrong: some rows", hint="never writes"))
STATIC_BUFFERS = register(Pitfall(
    "static_buffers", None, builders.static_buffers, None, outcome_cpu=MATCHES, outcome_cuda=MATCHES, hint=None))
SYNC_IN_CAPTURE = register(Pitfall(  # no fix to show: take the sync out of the step
    "sync_in_capture", 6, builders.sync_in_capture, None,
    outcome_cpu=CAPTURE_REFUSED, outcome_cuda=CAPTURE_REFUSED, hint="capture refused"))
