"""How long each notebook and each section takes to teach: the table the instructor guide's tracks come from.

    python -m tools.notebook_timings            # writes results/notebook_timings.json and docs/timings.md

Per section (a ``## `` heading of a notebook, marked ``(core)`` or ``(optional)``; each exercise of an exercises
section, ``**N.**`` or ``### Exercise N``, is a unit of its own), the minutes of teaching it live:
- prose: the words of its markdown (tokens holding a letter or digit; display equations and code are not counted
  as words) at ``WORDS_PER_MIN`` = 100 words a minute, the bottom of the 100-150 that VirtualSpeech gives for
  presentations (docs/sources.md): the prose here is dense and technical;
- ``MIN_PER_EQUATION`` = 1 minute per display equation (``$$ ... $$``): written out, each symbol named;
- ``MIN_PER_CODE_LINE`` = 0.1 minute (6 s) per line of code read aloud and explained (blank lines and nbval's
  markers not counted): a minute per 10 lines;
- ``MIN_PER_FIGURE`` = 1 minute per figure (an image the cells draw, or one the markdown shows): what the axes
  are, what to look at;
- running: the seconds its code cells took in the notebook's last execution (nbclient's timestamps in each
  cell's metadata), scaled so that the notebook's sections add up to its Run All time in JupyterLab where
  ``make test-lab`` has measured it (``build/lab_run_all_seconds.json``), else to nbclient's own total;
- attendees running the cells themselves: the code part (lines and running) times ``ATTENDEE_FACTOR`` = 2
  (typing or stepping through, waiting for the slowest laptop), a stated allowance;
- an exercise unit adds ``EXERCISE_MIN`` = 4 minutes for attendees to predict, run the check and hear the answer.

The rates other than the words a minute are stated allowances, not measurements. ``tools/timing_readaloud.py``
checks the arithmetic and the word counts once against synthesised speech of notebook 03
(``results/timing_readaloud_03.md``).

A track is a list of blocks (sections and exercises of a notebook, or a stated number of minutes for a break or
questions); its time is the sum, split into teaching and exercise minutes. ``tests/test_notebook_timings.py``
checks the committed table against the notebooks' current counts and markers, that each track fits its budget
with a 10-minute break per 90 minutes, and that no track teaches more than ``MAX_GAP_MIN`` minutes without an
exercise.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime
from pathlib import Path

from mla_edu.paths import NOTEBOOKS_DIR, REPO_ROOT, RESULTS_DIR

WORDS_PER_MIN = 100
MIN_PER_EQUATION = 1.0
MIN_PER_CODE_LINE = 0.1
MIN_PER_FIGURE = 1.0
ATTENDEE_FACTOR = 2.0
EXERCISE_MIN = 4.0
MAX_GAP_MIN = 20.0  # the most teaching minutes between two exercises (Carpentries: an exercise every 15-20 min)
BREAK_MIN_PER_90 = 10
MODES = ("demo", "attendees run")
MARKERS = ("core", "optional")
TABLE_JSON = RESULTS_DIR / "notebook_timings.json"
TABLE_MD = REPO_ROOT / "docs" / "timings.md"
LAB_SECONDS = REPO_ROOT / "build" / "lab_run_all_seconds.json"
SMOKE_CELL = "sc.check_smoke"  # notebook 00's smoke-run cell: the reference speed of this machine
_HEADING = re.compile(r"^## (.+?)(?: \((core|optional)\))?\s*$")
_EXERCISE = re.compile(r"^(?:\*\*(\d+)\.\*\*|### Exercise (\d+)\b)")
_WORD = re.compile(r"\S*[A-Za-z0-9]\S*")
_FIGURE_MIME = ("image/png", "image/svg+xml", "image/jpeg")

# The tracks of docs/instructor.md. A block is (notebook prefix, "core" | "all" | [section numbers and titles],
# mode) or (None, minutes, what): breaks and questions are stated, not measured. Exercises are done by the
# attendees whatever the block's mode.
EX = "Exercises · exercise "
EX08 = "2. Exercises · exercise "
TRACKS = {
    "90-minute": [
        ("01", ["What we saw"], "demo"),
        ("02", ["What we saw"], "demo"),
        ("03", [5, 6], "demo"),
        ("05", [1], "demo"),
        ("03", [EX + "2"], "demo"),
        ("06", [1, 2, 3, 4, 6], "demo"),
        ("06", [EX + "2"], "demo"),
        (None, 10, "break"),
        ("07", [1], "demo"),
        ("08", [1], "demo"),
        ("08", [EX08 + "2"], "demo"),
        (None, 5, "questions"),
    ],
    "3-hour": [
        ("01", ["The symbols", "The equations", "Building it by hand, one equation at a time", "What we saw"], "demo"),
        ("02", ["The identity", "Why RoPE has to be decoupled"], "demo"),
        ("02", [EX + "1"], "demo"),
        ("02", ["`AbsorbedMLA`", "What we saw"], "demo"),
        ("03", [3, 5, 6], "demo"),
        ("03", [EX + "2"], "demo"),
        (None, 10, "break"),
        ("05", [1, 3], "demo"),
        ("05", [EX + "1"], "demo"),
        ("04", [4, 5], "demo"),
        ("06", [1, 2, 3, 4], "demo"),
        ("06", [EX + "2"], "demo"),
        ("06", [5, 6], "demo"),
        ("07", [1], "demo"),
        ("07", [EX + "2"], "demo"),
        (None, 10, "break"),
        ("07", [4, 6], "demo"),
        ("08", [1], "demo"),
        ("08", [EX08 + "2", EX08 + "3"], "demo"),
        (None, 5, "questions"),
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


def cell_source(cell: dict) -> str:
    """A cell's source as one string (nbformat stores a string or a list of lines)."""
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _new(title: str, marker: str | None, exercise: int | None = None) -> dict:
    return {"title": title, "marker": marker, "exercise": exercise, "words": 0, "equations": 0, "code_lines": 0,
            "code_cells": 0, "figures": 0, "nbclient_s": 0.0}


def code_lines(src: str) -> int:
    """Lines of code read aloud: not blank, not an nbval marker."""
    return sum(1 for line in src.splitlines() if line.strip() and not line.lstrip().startswith("# NBVAL_"))


def figures(cell: dict) -> int:
    """Images a code cell's stored outputs show."""
    return sum(1 for o in cell.get("outputs", []) if any(m in o.get("data", {}) for m in _FIGURE_MIME))


def markdown_parts(src: str) -> list[tuple[str, str]]:
    """A markdown cell as ``(kind, text)`` parts in order: ``heading`` (a ``## `` line), ``exercise`` (the line
    that opens one), ``equation`` (a display equation, ``$$ ... $$`` over one or more lines), ``figure`` (an
    image), ``prose`` (any other line). The title line (``# ``) is dropped: it is not read out."""
    parts, lines, i = [], src.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("$$"):
            block = [line]
            while not (block[-1].rstrip().endswith("$$") and (len(block) > 1 or block[0].count("$$") >= 2)):
                i += 1
                if i == len(lines):
                    raise ValueError(f"a display equation opened with $$ is not closed: {line[:60]!r}")
                block.append(lines[i])
            parts.append(("equation", "\n".join(block)))
        elif _HEADING.match(line):
            parts.append(("heading", line))
        elif _EXERCISE.match(line):
            parts.append(("exercise", line))
        elif line.startswith("# "):
            pass
        elif re.search(r"!\[[^\]]*\]\(", line):
            parts.append(("figure", line))
        else:
            parts.append(("prose", line))
        i += 1
    return parts


def sections(nb: dict) -> list[dict]:
    """The notebook's sections in order: ``title``, ``marker`` (None where the heading has none), ``exercise``
    (its number in an exercise unit, else None), ``words``, ``equations``, ``code_lines``, ``code_cells``,
    ``figures``, ``nbclient_s``. Text before the first ``## `` heading is the section "introduction" (core); an
    exercise unit is titled ``<section> · exercise N`` and carries its section's marker."""
    out = [_new("introduction", "core")]
    parent = out[0]
    for cell in nb["cells"]:
        src = cell_source(cell)
        if cell["cell_type"] == "markdown":
            for kind, text in markdown_parts(src):
                cur = out[-1]
                if kind == "heading":
                    m = _HEADING.match(text)
                    parent = _new(m.group(1), m.group(2))
                    out.append(parent)
                    cur = parent
                elif kind == "exercise" and "xercise" in parent["title"]:
                    m = _EXERCISE.match(text)
                    cur = _new(f"{parent['title']} · exercise {m.group(1) or m.group(2)}", parent["marker"],
                               int(m.group(1) or m.group(2)))
                    out.append(cur)
                elif kind == "equation":
                    cur["equations"] += 1
                    continue
                elif kind == "figure":
                    cur["figures"] += 1
                cur["words"] += len(_WORD.findall(re.sub(r"^#+ ", "", text)))
        elif cell["cell_type"] == "code":
            cur = out[-1]
            cur["nbclient_s"] += _duration(cell)
            cur["code_cells"] += 1
            cur["code_lines"] += code_lines(src)
            cur["figures"] += figures(cell)
    return out


def section_number(title: str) -> int | None:
    """``"3. Naive gather"`` -> 3; None for unnumbered sections."""
    m = re.match(r"(\d+)\. ", title)
    return int(m.group(1)) if m else None


def measure(notebooks_dir: Path = NOTEBOOKS_DIR, lab_seconds: Path = LAB_SECONDS) -> dict:
    """The table: the model's rates; per notebook its Run All seconds (and their source) and its sections' counts,
    run seconds and minutes (demo pace); the reference smoke-run seconds; the tracks' minutes."""
    lab = json.loads(lab_seconds.read_text()) if lab_seconds.is_file() else {}
    table = {"words_per_min": WORDS_PER_MIN, "min_per_equation": MIN_PER_EQUATION,
             "min_per_code_line": MIN_PER_CODE_LINE, "min_per_figure": MIN_PER_FIGURE,
             "attendee_factor": ATTENDEE_FACTOR, "exercise_min": EXERCISE_MIN, "notebooks": {},
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
            if cell["cell_type"] == "code" and SMOKE_CELL in cell_source(cell) and _duration(cell) > 0:
                table["reference_smoke_s"] = round(_duration(cell), 1)
    if table["reference_smoke_s"] is None:  # notebook 00 not executed yet: time the smoke run here
        from mla_edu.workshop.setup_check import smoke_run

        table["reference_smoke_s"] = round(smoke_run()["seconds"], 1)
    table["tracks"] = {name: track_minutes(table, blocks) for name, blocks in TRACKS.items()}
    return table


def minutes(section: dict, mode: str = "demo") -> float:
    """Minutes of a section taught live: prose, equations, figures, the code read aloud and run (twice as long
    when attendees run it), and the attempt of an exercise."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    code = section["code_lines"] * MIN_PER_CODE_LINE + section["run_s"] / 60
    return (section["words"] / WORDS_PER_MIN + section["equations"] * MIN_PER_EQUATION
            + section["figures"] * MIN_PER_FIGURE + code * (ATTENDEE_FACTOR if mode == "attendees run" else 1)
            + (EXERCISE_MIN if section["exercise"] is not None else 0))


def notebook_entry(table: dict, prefix: str) -> tuple[str, dict]:
    """(file name, table entry) of the one notebook named ``<prefix>_*``."""
    names = [n for n in table["notebooks"] if n.startswith(prefix + "_")]
    if len(names) != 1:
        raise ValueError(f"track: expected one notebook named {prefix}_*, got {names}")
    return names[0], table["notebooks"][names[0]]


def select(nb: dict, which) -> list[dict]:
    """The sections a track block takes, in the notebook's order: "core", "all", or a list whose items are section
    numbers (the section with its exercise units) or exact titles (``"introduction"``, an unnumbered section, or
    one exercise unit: ``"Exercises · exercise 2"``)."""
    secs = nb["sections"]
    if which == "all":
        return secs
    if which == "core":
        return [s for s in secs if s["marker"] == "core"]
    if not isinstance(which, list) or not all(isinstance(n, (int, str)) and not isinstance(n, bool) for n in which):
        raise ValueError(f"track block: expected 'core', 'all' or a list of section numbers and titles, got {which!r}")
    numbers = {section_number(s["title"]) for s in secs} - {None}
    titles = {s["title"] for s in secs}
    missing = [w for w in which if (w not in numbers if isinstance(w, int) else w not in titles)]
    if missing:
        raise ValueError(f"track block: sections {missing} do not exist (the notebook has numbers {sorted(numbers)} "
                         f"and titles {sorted(titles)})")
    return [s for s in secs if s["title"] in which or section_number(s["title"]) in which]


def track_minutes(table: dict, blocks: list) -> dict:
    """Each block's teaching and exercise minutes, the totals, and the most teaching minutes between exercises
    (from the start, between two exercises, and to the end)."""
    rows, gap, gaps = [], 0.0, []
    for prefix, which, mode in blocks:
        if prefix is None:
            rows.append({"block": mode, "teaching": 0.0, "exercises": 0.0, "other": float(which)})
            continue
        name, nb = notebook_entry(table, prefix)
        chosen = select(nb, which)
        teach = exer = 0.0
        for s in chosen:  # attendees do the exercises, whatever the block's mode
            m = minutes(s, mode if s["exercise"] is None else "attendees run")
            if s["exercise"] is None:
                teach += m
                gap += m
            else:
                exer += m
                gaps.append(gap)
                gap = 0.0
        label = which if isinstance(which, str) else ", ".join(
            str(w).replace("Exercises · exercise ", "ex. ").replace(" · exercise ", " ex. ") for w in which)
        who = "attendees" if all(s["exercise"] is not None for s in chosen) else mode
        rows.append({"block": f"{name[:2]}: {label} ({who})", "teaching": round(teach, 1),
                     "exercises": round(exer, 1), "other": 0.0})
    gaps.append(gap)
    total = sum(r["teaching"] + r["exercises"] + r["other"] for r in rows)
    return {"blocks": rows, "teaching_min": round(sum(r["teaching"] for r in rows), 1),
            "exercise_min": round(sum(r["exercises"] for r in rows), 1),
            "exercises": sum(1 for prefix, which, mode in blocks if prefix is not None
                             for s in select(notebook_entry(table, prefix)[1], which) if s["exercise"] is not None),
            "max_gap_min": round(max(gaps), 1), "total_min": round(total, 1)}


def breaks_needed(budget_min: int) -> int:
    """Minutes of break a track of ``budget_min`` minutes must hold: 10 per full 90."""
    return BREAK_MIN_PER_90 * (budget_min // 90)


def unmarked(table: dict) -> list[str]:
    """``notebook: heading`` of every section without a (core) / (optional) marker."""
    return [f"{name}: {s['title']}" for name, nb in table["notebooks"].items() for s in nb["sections"]
            if s["marker"] is None]


def to_markdown(table: dict) -> str:
    lines = ["<!-- written by python -m tools.notebook_timings; do not edit -->", "",
             f"Minutes of teaching at demo pace: the markdown's words at {table['words_per_min']} words a minute, "
             f"{table['min_per_equation']:g} minute per display equation, {table['min_per_code_line'] * 60:g} s per "
             f"line of code read aloud, {table['min_per_figure']:g} minute per figure, and the seconds the cells ran "
             "in the last execution (JupyterLab's Run All where `make test-lab` measured it); where attendees run "
             f"the cells, the code's part counts {table['attendee_factor']:g} times; an exercise adds "
             f"{table['exercise_min']:g} minutes for the attempt. Breaks and questions are stated minutes.", "",
             "| notebook | words | equations | code lines | figures | exercises | Run All, s | core, min "
             "| optional, min |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, nb in table["notebooks"].items():
        secs = nb["sections"]
        mins = {m: sum(s["minutes"] for s in secs if s["marker"] == m) for m in MARKERS}
        count = {k: sum(s[k] for s in secs) for k in ("equations", "code_lines", "figures")}
        lines.append(f"| {name[:2]} | {nb['words']} | {count['equations']} | {count['code_lines']} "
                     f"| {count['figures']} | {sum(s['exercise'] is not None for s in secs)} | {nb['run_all_s']:.0f} "
                     f"| {mins['core']:.0f} | {mins['optional']:.0f} |")
    for track, t in table["tracks"].items():
        lines += ["", f"**{track} track: {t['total_min']:.0f} of {BUDGET_MIN[track]} minutes** "
                  f"({t['teaching_min']:.0f} teaching, {t['exercises']} exercises in {t['exercise_min']:.0f}, "
                  f"at most {t['max_gap_min']:.0f} minutes of teaching between two exercises)", "",
                  "| block | teaching, min | exercises, min | other, min |", "|---|---:|---:|---:|"]
        lines += [f"| {r['block']} | {r['teaching']:.0f} | {r['exercises']:.0f} | {r['other']:.0f} |"
                  for r in t["blocks"]]
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
        print(f"{track}: {t['total_min']:.0f} of {BUDGET_MIN[track]} min, longest stretch without an exercise "
              f"{t['max_gap_min']:.0f} min")
    over = [track for track, t in table["tracks"].items() if t["total_min"] > BUDGET_MIN[track]
            or t["max_gap_min"] > MAX_GAP_MIN]
    if over:
        parser.error(f"tracks over their budget or with too long a stretch without an exercise: {over}")


if __name__ == "__main__":
    main()
