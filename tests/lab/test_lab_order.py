"""The order ``make test-lab`` hands the browser tests to its workers (these run in ``make test``): the longest Run
All first, by the committed times, so that two workers finish together; every test still collected once."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _collected(*args) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if line.startswith("tests/lab/")]


def test_the_longest_run_all_comes_first_and_nothing_is_lost():
    seconds = {n: v["run_all_s"] for n, v in
               json.loads((ROOT / "results" / "notebook_timings.json").read_text())["notebooks"].items()}
    ids = _collected("-m", "lab", "tests/lab")
    assert len(ids) == len(set(ids)) > 20  # each test once
    runs = [i.split("[", 1)[1].rstrip("]") for i in ids if "::test_run_all_in_jupyterlab[" in i]
    assert runs and runs == sorted(runs, key=lambda n: -seconds[n]), runs  # longest first
    assert ids[0] == f"tests/lab/test_lab.py::test_run_all_in_jupyterlab[{max(runs, key=seconds.get)}]"
    cheap = [i for i in ids if "jupyterlab" not in i]
    assert ids.index(cheap[0]) > ids.index(next(i for i in ids if i.endswith(f"[{runs[-1]}]")))
