"""The pitfall registry: one ``Pitfall`` record per pitfall, registered with ``register``.

The runner (``runner.py``), the command line, the checker's tests, notebook 05 and README's count all read
``PITFALLS``; a new pitfall is one record (``docs/CONTRIBUTING.md``, "Adding a CUDA-graph pitfall"). Each
record gives one or two *scenarios*, the rows of the tables: the step as the pitfall has it and, if the record
has a fix, the fixed step (named ``<name>:fixed``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

from mla_edu.graphs.scenarios.problem import Problem

MATCHES = "matches eager"  # a replay gives eager's answer on every later batch
CAPTURE_REFUSED = "capture refused: sync"  # the capture raised; on a GPU that ends the process' capturing
OUTCOMES = (MATCHES, "wrong: rows>0", "wrong: all rows", "wrong: some rows", "NaN", "wrong: stale state (2nd replay)",
            "wrong: freed memory reused", CAPTURE_REFUSED)  # what ``runner.scenario_outcome`` can return
FIXED = ":fixed"  # the fixed scenario's name: the record's name and this


@dataclass(frozen=True)
class Pitfall:
    """One CUDA-graph pitfall: the step that has it, its fix, what each does under a graph, what the checker says.

    ``build(device)`` and ``fix(device)`` return a ``Problem`` (``problem.py``). ``outcome_cpu`` is what the step
    does captured once and replayed on later batches under the emulator, ``outcome_cuda`` under real CUDA graphs
    (the H200 log ``results/graph_scenarios_h200_cuda.md`` is the evidence); a fix must give ``MATCHES`` on both.
    ``hint``: words the checker's hint holds when it flags the step; ``None`` for a step that matches eager,
    which the checker must pass. ``run(device, mode, fixed)``: the scenario when it is more than one capture
    of ``build``'s step (its outcome); ``None``: ``runner.run_problem`` on the step.
    """

    name: str
    number: int | None  # "Pitfall N" in notebook 05; records showing one pitfall with two kernels share it;
    # None: a scenario that shows no pitfall (the correct pattern)
    build: Callable[[Any], Problem]
    fix: Callable[[Any], Problem] | None
    outcome_cpu: str
    outcome_cuda: str
    hint: str | None
    needs_triton: bool = False
    run: Callable[[Any, str, bool], str] | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or FIXED in self.name:
            raise ValueError(f"Pitfall.name: expected a non-empty str without {FIXED!r}, got {self.name!r}")
        if self.number is not None and (type(self.number) is not int or self.number < 1):
            raise ValueError(f"Pitfall {self.name!r}: number must be a positive int or None, got {self.number!r}")
        for field, f in (("build", self.build), ("fix", self.fix), ("run", self.run)):
            if not callable(f) and (field == "build" or f is not None):
                raise TypeError(f"Pitfall {self.name!r}: {field} must be callable, got {f!r}")
        for field in ("outcome_cpu", "outcome_cuda"):
            if getattr(self, field) not in OUTCOMES:
                raise ValueError(f"Pitfall {self.name!r}: {field} must be one of {OUTCOMES}, "
                                 f"got {getattr(self, field)!r}")
        diverges = self.outcome_cpu != MATCHES or self.outcome_cuda != MATCHES
        if diverges != (self.hint is not None):
            raise ValueError(f"Pitfall {self.name!r}: a step that diverges under a graph needs the checker's hint, "
                             f"one that matches eager on both has none; got outcomes {self.outcome_cpu!r}, "
                             f"{self.outcome_cuda!r} and hint {self.hint!r}")
        if not isinstance(self.needs_triton, bool):
            raise TypeError(f"Pitfall {self.name!r}: needs_triton must be a bool, got {self.needs_triton!r}")

    def scenarios(self) -> list[Scenario]:
        """Its rows: the step as the pitfall has it, then its fix if it has one."""
        return [Scenario(self, False)] + ([Scenario(self, True)] if self.fix is not None else [])


@dataclass(frozen=True)
class Scenario:
    """One row of the tables: a pitfall's step (``fixed=False``) or its fix."""

    pitfall: Pitfall
    fixed: bool

    @property
    def name(self) -> str:
        return self.pitfall.name + FIXED * self.fixed

    @property
    def needs_triton(self) -> bool:
        return self.pitfall.needs_triton

    @property
    def hint(self) -> str | None:
        """Words of the checker's hint on this step; None: the checker must pass it."""
        return None if self.fixed else self.pitfall.hint

    @property
    def safe(self) -> bool:
        """What the checker must conclude: the step matches eager under a graph."""
        return self.hint is None

    def build(self, device) -> Problem:
        return (self.pitfall.fix if self.fixed else self.pitfall.build)(device)

    def expected(self, backend: str) -> str:
        """The outcome under ``backend``'s graphs (``Graph.backend``: ``"emulated"`` or ``"cuda"``)."""
        if backend not in ("emulated", "cuda"):
            raise ValueError(f"backend: expected 'emulated' or 'cuda', got {backend!r}")
        if self.fixed:
            return MATCHES
        return self.pitfall.outcome_cpu if backend == "emulated" else self.pitfall.outcome_cuda

    @property
    def refuses_capture(self) -> bool:
        """CUDA refuses its capture: run it last on a GPU."""
        return self.expected("cuda") == CAPTURE_REFUSED


PITFALLS: dict[str, Pitfall] = {}


def register(pitfall: Pitfall) -> Pitfall:
    """Add ``pitfall`` to ``PITFALLS``; records sharing a ``number`` are registered one after another."""
    if not isinstance(pitfall, Pitfall):
        raise TypeError(f"register: expected a Pitfall, got {type(pitfall).__name__}")
    taken = {s.name for p in PITFALLS.values() for s in p.scenarios()}
    clash = [s.name for s in pitfall.scenarios() if s.name in taken]
    if clash:
        raise ValueError(f"register: scenario {clash[0]!r} is already registered")
    last = list(PITFALLS.values())[-1] if PITFALLS else None
    if pitfall.number is not None and pitfall.number in {p.number for p in PITFALLS.values()} \
            and (last is None or last.number != pitfall.number):
        raise ValueError(f"register: pitfall {pitfall.number} is shown by records registered earlier, not by the "
                         f"last one ({last.name!r}); register the records of one pitfall one after another")
    PITFALLS[pitfall.name] = pitfall
    return pitfall


def count() -> int:
    """How many pitfalls are registered (the number README and notebook 05 quote)."""
    return len({p.number for p in PITFALLS.values() if p.number is not None})


def scenarios() -> list[Scenario]:
    """Every row, in registration order; the records of one pitfall give their steps first, then their fixes."""
    rows = []
    for _, group in itertools.groupby(PITFALLS.values(), key=lambda p: p.name if p.number is None else p.number):
        group = list(group)
        rows += [s for p in group for s in p.scenarios() if not s.fixed]
        rows += [s for p in group for s in p.scenarios() if s.fixed]
    return rows


def scenario(name: str) -> Scenario:
    """The scenario named ``name`` (a record's name, or that and ``:fixed``)."""
    found = {s.name: s for s in scenarios()}
    if name not in found:
        raise ValueError(f"scenario: expected one of {sorted(found)}, got {name!r}")
    return found[name]
