"""How long each notebook and each section takes to teach: the table the instructor guide's tracks come from.

    python -m tools.notebook_timings            # writes results/notebook_timings.json and docs/timings.md

Per section (a ``## `` heading of a notebook, marked ``(core)`` or ``(optional)``), three parts:
- reading: the words of its markdown cells (tokens holding a letter or digit; code is not counted) at
  ``WORDS_PER_MIN`` = 130 words a minute, a pace of live teaching (slower than reading aloud, about 150:
  the instructor stops at each formula and figure);
- walking through the code: ``MIN_PER_CODE_CELL`` = 1 minute per code cell (what it does, what its output
  shows), a stated allowance, not a measurement;
- running: the seconds its code cells took in the notebook's last execution (nbclient's timestamps in each
  cell's metadata), scaled so that the notebook's sections add up to its Run All time in JupyterLab where
  ``make test-lab`` has measured it (``build/lab_run_all_seconds.json``), else to nbclient's own total.

A track is a list of blocks (sections of a notebook, or a stated number of minutes for exercises and breaks);
its time is the sum. ``tests/test_notebook_timings.py`` checks the committed table against the notebooks'
current words and markers, and that the 3-hour track fits in 180 minutes.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime
from pathlib import Path

from mla_edu.paths import NOTEBOOKS_DIR, REPO_ROOT, RESULTS_DIR

WORDS_PER_MIN = 130
MIN_PER_CODE_CELL = 1.0
MARKERS = ("core", "optional")
TABLE_JSON = RESULTS_DIR / "notebook_timings.json"
TABLE_MD = REPO_ROOT / "docs" / "timings.md"
LAB_SECONDS = REPO_ROOT / "build" / "lab_run_all_seconds.json"
SMOKE_CELL = "sc.check_smoke"  # notebook 00's smoke-run cell: the reference speed of this machine
_HEADING = re.compile(r"^## (.+?)(?: \((core|optional)\))?\s*$")
_WORD = re.compile(r"\S*[A-Za-z0-9]\S*")

# The tracks of docs/instructor.md. A block is (notebook prefix, "core" | "all" | [section numbers], mode) or
# (None, minutes, what): exercises and breaks are stated, not measured.
TRACKS = {
    "90-minute": [
        (None, 0, "before: attendees run 00 (setup check) and read 01-02's 'What we saw'"),
        (None, 5, "MLA and weight absorption from the slides of 01 and 02"),
        ("03", [5, 6], "demo"),
        ("05", [1, 3], "demo"),
        ("06", [1, 2, 3, 4, 6], "demo"),
        ("07", [1, 4], "demo"),
        ("08", [1], "attendees run"),
        (None, 5, "questions"),
    ],
    "3-hour": [
        (None, 0, "before: attendees run 00 (setup check)"),
        ("01", "core", "attendees run"),
        ("02", "core", "attendees run"),
        ("03", "core", "attendees run"),
        ("04", [1, 3, 4, 5], "demo"),
        (None, 10, "break"),
        ("05", "core", "attendees run"),
        ("06", [1, 2, 3, 4, 6], "attendees run"),
        ("07", "core", "demo"),
        ("08", "core", "attendees run"),
    ],
}
BUDGET_MIN = {"90-minute": 90, "3-hour": 180}


def _duration(cell: dict) -> float:
    """Seconds a code cell ran in the last execution (0 when the notebook holds no timestamps)."""
    t = cell.get("metadata", {}).get("execution", {})
    if "iopub.execute_input" not in t or "shell.execute_reply" not in t:
        return 0.0
    start, end = (datetime.fromisoformat(t[k].replace("Z", "+00:00")) for k in ("iopub.execute_input",
                                                                                 "shell.execute_reply"))
    return max(0.0, (end - start).total_seconds())


def sections(nb: dict) -> list[dict]:
    """The notebook's sections in order: ``title``, ``marker`` (None where the heading has none), ``words``,
    ``code_cells``, ``nbclient_s``. Text before the first ``## `` heading is the section "introduction" (core)."""
    out = [{"title": "introduction", "marker": "core", "words": 0, "code_cells": 0, "nbclient_s": 0.0}]
    for cell in nb["cells"]:
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            for line in src.splitlines():
                m = _HEADING.match(line)
                if m:
                    out.append({"title": m.group(1), "marker": m.group(2), "words": 0, "code_cells": 0,
                                "nbclient_s": 0.0})
                elif not line.startswith("# "):  # the notebook's title is not read out
                    out[-1]["words"] += len(_WORD.findall(line))
        elif cell["cell_type"] == "code":
            out[-1]["nbclient_s"] += _duration(cell)
            out[-1]["code_cells"] += 1
    return out


def section_number(title: str) -> int | None:
    """``"3. Naive gather"`` -> 3; None for unnumbered sections."""
    m = re.match(r"(\d+)\. ", title)
    return int(m.group(1)) if m else None


def measure(notebooks_dir: Path = NOTEBOOKS_DIR, lab_seconds: Path = LAB_SECONDS) -> dict:
    """The table: per notebook its Run All seconds (and their source) and its sections' words, reading minutes
    and run seconds; the reference smoke-run seconds; the tracks' minutes."""
    lab = json.loads(lab_seconds.read_text()) if lab_seconds.is_file() else {}
    table = {"words_per_min": WORDS_PER_MIN, "min_per_code_cell": MIN_PER_CODE_CELL, "notebooks": {},
             "reference_smoke_s": None}
    for path in sorted(notebooks_dir.glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text())
        secs = sections(nb)
        total = sum(s["nbclient_s"] for s in secs)
        run_all = lab.get(path.name, total)
        scale = run_all / total if total > 0 else 0.0
        for s in secs:
            s["run_s"] = round(s.pop("nbclient_s") * scale, 1)
            s["minutes"] = round(minutes(s), 1)
        table["notebooks"][path.name] = {"run_all_s": round(run_all, 1),
                                         "run_all_source": "jupyterlab" if path.name in lab else "nbclient",
                                         "words": sum(s["words"] for s in secs), "sections": secs}
        for cell in nb["cells"]:
            if cell["cell_type"] == "code" and SMOKE_CELL in "".join(cell["source"]) and _duration(cell) > 0:
                table["reference_smoke_s"] = round(_duration(cell), 1)
    if table["reference_smoke_s"] is None:  # notebook 00 not executed yet: time the smoke run here
        from mla_edu.workshop.setup_check import smoke_run

        table["reference_smoke_s"] = round(smoke_run()["seconds"], 1)
    table["tracks"] = {name: track_minutes(table, blocks) for name, blocks in TRACKS.items()}
    return table


def minutes(section: dict) -> float:
    """Teaching minutes of a section: reading its words, walking through its code cells, running them."""
    return section["words"] / WORDS_PER_MIN + section["code_cells"] * MIN_PER_CODE_CELL + section["run_s"] / 60


def _notebook(table: dict, prefix: str) -> tuple[str, dict]:
    names = [n for n in table["notebooks"] if n.startswith(prefix + "_")]
    if len(names) != 1:
        raise ValueError(f"track: expected one notebook named {prefix}_*, got {names}")
    return names[0], table["notebooks"][names[0]]


def select(nb: dict, which) -> list[dict]:
    """The sections a track block takes: "core", "all", or a list of section numbers (with the notebook's
    introduction and its unnumbered core sections, e.g. "What we saw")."""
    secs = nb["sections"]
    if which == "all":
        return secs
    if which == "core":
        return [s for s in secs if s["marker"] == "core"]
    if not isinstance(which, list) or not all(isinstance(n, int) for n in which):
        raise ValueError(f"track block: expected 'core', 'all' or a list of section numbers, got {which!r}")
    numbers = {section_number(s["title"]) for s in secs}
    missing = sorted(set(which) - numbers)
    if missing:
        raise ValueError(f"track block: sections {missing} do not exist (the notebook has {sorted(numbers - {None})})")
    return [s for s in secs if section_number(s["title"]) in which
            or (section_number(s["title"]) is None and s["marker"] == "core")]


def track_minutes(table: dict, blocks: list) -> dict:
    """Each block's minutes (reading + walking through the code + running) and the total."""
    rows = []
    for prefix, which, mode in blocks:
        if prefix is None:
            rows.append({"block": mode, "minutes": float(which)})
            continue
        name, nb = _notebook(table, prefix)
        chosen = select(nb, which)
        label = which if isinstance(which, str) else ("section " if len(which) == 1 else "sections ") + ", ".join(
            map(str, which))
        rows.append({"block": f"{name[:2]}: {label} ({mode})", "minutes": round(sum(map(minutes, chosen)), 1)})
    return {"blocks": rows, "total_min": round(sum(r["minutes"] for r in rows), 1)}


def unmarked(table: dict) -> list[str]:
    """``notebook: heading`` of every section without a (core) / (optional) marker."""
    return [f"{name}: {s['title']}" for name, nb in table["notebooks"].items() for s in nb["sections"]
            if s["marker"] is None]


def to_markdown(table: dict) -> str:
    rate, cell = table["words_per_min"], table["min_per_code_cell"]
    lines = ["<!-- written by python -m tools.notebook_timings; do not edit -->", "",
             f"Minutes of teaching: the markdown's words at {rate} words a minute, {cell:g} minute a code cell to walk "
             "through it, and the seconds the cells ran in the last execution (JupyterLab's Run All where "
             "`make test-lab` measured it). Exercises and breaks are stated minutes.", "",
             "| notebook | words | code cells | Run All, s | core, min | optional, min |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, nb in table["notebooks"].items():
        mins = {m: sum(s["minutes"] for s in nb["sections"] if s["marker"] == m) for m in MARKERS}
        cells = sum(s["code_cells"] for s in nb["sections"])
        lines.append(f"| {name[:2]} | {nb['words']} | {cells} | {nb['run_all_s']:.0f} "
                     f"| {mins['core']:.0f} | {mins['optional']:.0f} |")
    for track, t in table["tracks"].items():
        lines += ["", f"**{track} track: {t['total_min']:.0f} of {BUDGET_MIN[track]} minutes**", "",
                  "| block | minutes |", "|---|---:|"]
        lines += [f"| {r['block']} | {r['minutes']:.0f} |" for r in t["blocks"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the markdown, write nothing")
    args = parser.parse_args(argv)
    table = measure()
    missing = unmarked(table)
    if missing:
        parser.error(f"sections without a (core) or (optional) marker: {missing}")
    if args.print:
        print(to_markdown(table))
        return
    TABLE_JSON.write_text(json.dumps(table, indent=1) + "\n")
    TABLE_MD.write_text(to_markdown(table))
    print(f"wrote {TABLE_JSON.relative_to(REPO_ROOT)} and {TABLE_MD.relative_to(REPO_ROOT)}")
    for track, t in table["tracks"].items():
        print(f"{track}: {t['total_min']:.0f} of {BUDGET_MIN[track]} min")
    over = [track for track, t in table["tracks"].items() if t["total_min"] > BUDGET_MIN[track]]
    if over:
        parser.error(f"tracks over their budget: {over}; cut sections in TRACKS")


if __name__ == "__main__":
    main()
