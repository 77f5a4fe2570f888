"""The committed results the kernel lab's tests read: the lab's own (kernel_lab/results/) and the headline benches
(results/), by file name."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from docs_text import missing, norm

from mla_edu.paths import REPO_ROOT, RESULTS_DIR

LAB_RESULTS = REPO_ROOT / "kernel_lab" / "results"


def path(name: str) -> Path:
    """kernel_lab/results/``name`` if the lab holds it, else results/``name``; an error if neither does."""
    for folder in (LAB_RESULTS, RESULTS_DIR):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"{name}: in neither kernel_lab/results/ nor results/")


@cache
def result(name: str) -> dict:
    return json.loads(path(name).read_text(encoding="utf-8"))


def md(name: str) -> str:
    return norm(path(name).read_text(encoding="utf-8"))


def ab_blocks(name: str) -> list[str]:
    """The ``kernel_lab.tools.stage1_ab`` output blocks (fenced) of ``name``."""
    return path(name).read_text(encoding="utf-8").split("```")[1::2]


def assert_results_say(name: str, claims: list[str]) -> None:
    """Every claim is in results file ``name`` (whitespace aside); else the ones it lacks."""
    lost = missing(claims, path(name).read_text(encoding="utf-8"))
    assert not lost, f"{path(name).relative_to(REPO_ROOT)} does not say:\n" + "\n".join(lost)
