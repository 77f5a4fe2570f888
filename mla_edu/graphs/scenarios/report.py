"""The command line's tables: the scenarios' outcomes, and the checker's verdicts on every scenario."""

from __future__ import annotations

from mla_edu.graphs.scenarios.registry import Scenario
from mla_edu.graphs.scenarios.runner import check_problem


def format_table(rows) -> str:
    """``rows`` (device, backend, scenario, outcome) as a padded markdown table."""
    head = ("device", "backend", "scenario", "outcome")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(4)]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def checker_row(sc: Scenario, device, schedules: int, mode: str = "auto") -> tuple[str, bool, str, str]:
    """(scenario, safe, one '.' (passed) or 'F' (flagged) per random schedule, the first flag's hint, cut to 90)."""
    reports = [check_problem(sc.build(device), seed=k, mode=mode) for k in range(schedules)]
    bad = next((r for r in reports if not r.ok), None)
    return sc.name, sc.safe, "".join("." if r.ok else "F" for r in reports), (bad.hint or "")[:90] if bad else ""


def format_checks(rows, schedules: int) -> str:
    """``checker_row`` rows under their heading."""
    return "\n".join([f"checker, {schedules} random schedules per problem ('.' = safe, 'F' = flagged)",
                      "| problem | safe | verdicts | first hint |", "|---|---|---|---|",
                      *("| " + " | ".join(map(str, c)) + " |" for c in rows)])
