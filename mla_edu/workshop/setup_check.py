"""What notebook 00 checks before a workshop: versions against the lock, the device, the Triton
interpreter, the shipped model's checksum, a few-second smoke run, and how long each notebook should
take on this machine (``results/notebook_timings.json``, written by ``python -m tools.notebook_timings``).

    from mla_edu.workshop import setup_check as sc
    sc.lock_mismatches()          # [] when every locked package is installed at its locked version
    sc.smoke_run()                # {"seconds": ..., "accuracy": ...}: the pre-fix bug and the fix, 8 questions
    sc.expected_run_times(s)      # {notebook: seconds on this machine}, scaled by the smoke run's speed
"""

from __future__ import annotations

import json
import os
import re
import time
from importlib import metadata
from pathlib import Path

from mla_edu.paths import REPO_ROOT, RESULTS_DIR

TIMINGS_JSON = RESULTS_DIR / "notebook_timings.json"
SMOKE_QUESTIONS = 8  # the smoke run's size: a few seconds on a laptop CPU
UNLOCKED_ENV = "MLA_EDU_UNLOCKED"  # "1" in make test-latest, whose environment has the newest versions on purpose
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def locked() -> bool:
    """Whether this environment is meant to match the lock (everywhere but ``make test-latest``)."""
    return os.environ.get(UNLOCKED_ENV) != "1"


def lock_path(has_gpu: bool | None = None) -> Path:
    """The lock this machine installs from, as the Makefile picks it: requirements/gpu.txt with a GPU, else cpu.txt."""
    if has_gpu is None:
        from mla_edu.device import HAS_CUDA

        has_gpu = HAS_CUDA
    return REPO_ROOT / "requirements" / ("gpu.txt" if has_gpu else "cpu.txt")


def read_lock(path: str | Path) -> dict[str, str]:
    """``{normalized name: version}`` of every ``name==version`` line of a pip lock file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no lock at {path}: expected requirements/cpu.txt or gpu.txt from make lock")
    pins = {}
    for line in path.read_text().splitlines():
        m = _PIN.match(line.strip())
        if m:
            pins[_normalize(m.group(1))] = m.group(2)
    if not pins:
        raise ValueError(f"{path}: expected 'name==version' lines, found none")
    return pins


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_mismatches(path: str | Path | None = None, installed: dict[str, str] | None = None) -> list[tuple]:
    """``[(name, locked, installed or None)]`` for each locked package not installed at its locked version.

    ``installed``: ``{name: version}`` (default: this environment's distributions). A local version label
    counts as the same release only where the lock has one too (``torch==2.13.0+cpu``)."""
    pins = read_lock(path or lock_path())
    if installed is None:
        installed = {d.metadata["Name"]: d.version for d in metadata.distributions() if d.metadata["Name"]}
    have = {_normalize(k): v for k, v in installed.items()}
    return sorted((name, want, have.get(name)) for name, want in pins.items() if have.get(name) != want)


def weights_ok(variant: str = "tiny") -> tuple[bool, str]:
    """``(ok, sha256)``: the shipped weights' and config's digests against their manifest (what
    ``load_pretrained`` checks); the message of the refusal instead of the digest when they differ."""
    from mla_edu.model import VARIANTS, load_manifest, load_pretrained

    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {sorted(VARIANTS)}, got {variant!r}")
    try:
        load_pretrained(variant)
    except ValueError as e:
        return False, str(e)
    return True, load_manifest(VARIANTS[variant])["sha256"]


def smoke_run(num_questions: int = SMOKE_QUESTIONS) -> dict:
    """A few seconds of the real stack: the shipped model answers ``num_questions`` questions through the
    mini engine with CUDA graphs (emulated on a CPU), once with the pre-fix cutlass_mla backend and once with
    the merged fix. Returns seconds, both accuracies and the device."""
    from mla_edu.case_study.accuracy import run_bench
    from mla_edu.model import load_pretrained
    from mla_edu.serving import MERGED_FIX, PRE_FIX
    from mla_edu.util import is_int

    if not is_int(num_questions) or num_questions < 2:
        raise ValueError(f"num_questions: expected an int >= 2, got {num_questions!r}")
    t0 = time.perf_counter()
    model = load_pretrained()
    runs = {name: run_bench(model, num_questions=num_questions, parallel=num_questions, defects=defects,
                            attention_backend="cutlass_mla", cuda_graph_bs=(num_questions,))
            for name, defects in (("pre_fix", PRE_FIX), ("fixed", MERGED_FIX))}
    return {"seconds": time.perf_counter() - t0, "device": runs["fixed"]["device"],
            **{f"{name}_accuracy": r["accuracy"] for name, r in runs.items()}}


def load_timings(path: str | Path = TIMINGS_JSON) -> dict:
    """The committed table of ``python -m tools.notebook_timings``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no timings at {path}: run python -m tools.notebook_timings")
    return json.loads(path.read_text())


def expected_run_times(smoke_seconds: float, timings: dict | None = None) -> dict[str, float]:
    """``{notebook: Run All seconds expected here}``: the committed Run All times scaled by how much slower
    (or faster) this machine ran the smoke run than the machine that measured them."""
    if not isinstance(smoke_seconds, (int, float)) or not smoke_seconds > 0:
        raise ValueError(f"smoke_seconds: expected a positive number, got {smoke_seconds!r}")
    timings = load_timings() if timings is None else timings
    reference = timings.get("reference_smoke_s")
    if not isinstance(reference, (int, float)) or not reference > 0:
        raise ValueError(f"timings: expected a positive 'reference_smoke_s', got {reference!r} "
                         "(rerun python -m tools.notebook_timings after executing notebook 00)")
    factor = smoke_seconds / reference
    return {name: nb["run_all_s"] * factor for name, nb in timings["notebooks"].items()}
