"""Small, runnable CUDA-graph pitfalls, each with its fix; same outcome on the emulator and a GPU.

    python -m mla_edu.graphs.scenarios [--mode auto|cuda|emulated] [--check]

prints ``device | backend | scenario | outcome`` for every scenario (the command line: ``__main__.py``).

- ``toy_decode``: the toy paged decode every scenario captures (cache, page table, kernel in torch and Triton)
- ``problem``: ``Problem``, a step to capture with its host work, reference and batches
- ``builders``: the steps that show each pitfall, and their fixes
- ``registry``: ``Pitfall``, one record per pitfall, ``register``, ``count``, ``scenarios``, ``scenario``
- ``pitfalls``: the records of notebook 05
- ``runner``: capture, replay, compare with eager (``run_all``, ``run_scenario``); the checker on a step
- ``report``: the command line's tables
"""

from mla_edu.graphs.scenarios import pitfalls
from mla_edu.graphs.scenarios.builders import (freed_pool_reuse, freed_workspace, frozen_scalar, narrow_view,
                                               narrow_view_pages, padded_slots, static_buffers, stale_buffer,
                                               sync_in_capture)
from mla_edu.graphs.scenarios.problem import CAPTURE_BATCH, REPLAY_BATCHES, Problem, random_batch
from mla_edu.graphs.scenarios.registry import (CAPTURE_REFUSED, MATCHES, PITFALLS, Pitfall, Scenario, count,
                                               register, scenario, scenarios)
from mla_edu.graphs.scenarios.report import checker_row, format_checks, format_table
from mla_edu.graphs.scenarios.runner import (check_problem, classify, run_all, run_problem, run_scenario,
                                             scenario_outcome)
from mla_edu.graphs.scenarios.toy_decode import (D, MAX_BS, NUM_PAGES, NUM_REQS, PAGE, W, ToyServer,
                                                 pages_through_view, paged_sum_torch, paged_sum_triton)

__all__ = ["CAPTURE_BATCH", "CAPTURE_REFUSED", "D", "MATCHES", "MAX_BS", "NUM_PAGES", "NUM_REQS",
           "PAGE", "PITFALLS", "Pitfall", "Problem", "REPLAY_BATCHES", "Scenario", "ToyServer", "W", "check_problem",
           "checker_row", "classify", "count", "format_checks", "format_table", "freed_pool_reuse",
           "freed_workspace", "frozen_scalar", "narrow_view", "narrow_view_pages", "padded_slots", "pages_through_view",
           "paged_sum_torch", "paged_sum_triton", "pitfalls", "random_batch", "register", "run_all", "run_problem",
           "run_scenario", "scenario", "scenario_outcome", "scenarios", "static_buffers", "stale_buffer",
           "sync_in_capture"]
