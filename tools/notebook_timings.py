"""How long each notebook and each section takes to teach: the table the instructor guide's tracks come from.

    python -m tools.notebook_timings            # writes results/notebook_timings.json and docs/timings.md

Per section (a ``## `` heading of a notebook, marked ``(core)`` or ``(optional)``; each exercise of an exercises
section, ``**N.**`` or ``### Exercise N``, is a unit of its own), the minutes of teaching it live:
- prose: the words of its markdown (tokens holding a letter or digit; display equations and code are not counted
  as words) at ``WORDS_PER_MIN`` = 100 words a minute, the bottom of the 100-150 that VirtualSpeech gives for
  presentations (docs/sources.md), times the measured read-aloud factor ``prose_factor()``: notebook 03's prose
  synthesised by espeak-ng at that rate took that many times the minutes the words give (the prose's audio minutes
  over its model minutes in ``results/timing_readaloud_03.json``, written by ``python -m tools.timing_readaloud``;
  read from there, never copied): a speaker says more words than the model counts (code spans, numbers, symbols)
  and pauses at punctuation;
- ``MIN_PER_EQUATION`` = 1 minute per display equation (``$$ ... $$``): written out, each symbol named;
- ``MIN_PER_CODE_LINE`` = 0.1 minute (6 s) per line of code read aloud and explained (blank lines and nbval's
  markers not counted): a minute per 10 lines;
- ``MIN_PER_FIGURE`` = 1 minute per figure (an image the cells draw, or one the markdown shows): what the axes
  are, what to look at;
- running: the seconds its code cells took in the notebook's last execution (nbclient's timestamps in each
  cell's metadata), scaled so that the notebook's sections add up to its Run All time in JupyterLab where
  ``make test-lab LAB_WORKERS=1`` has measured it, one notebook at a time (``build/lab_run_all_seconds.json``),
  else to nbclient's own total;
- attendees running the cells themselves: the code part (lines and running) times ``ATTENDEE_FACTOR`` = 2
  (typing or stepping through, waiting for the slowest laptop), a stated allowance;
- an exercise unit adds ``EXERCISE_MIN`` = 4 minutes for attendees to predict, run the check and hear the answer.

The rates other than the words a minute and its read-aloud factor are stated allowances, not measurements.

A track is a list of blocks (sections and exercises of a notebook, or a stated number of minutes for a break, lunch
or questions); its time is the sum, split into teaching and exercise minutes. A track counts whole minutes from the
start, rounded once by ``whole`` (half up): each exercise unit's minutes (``exercise_unit_minutes``, the minutes
its slide's title gives too), each block's teaching (in a block that holds exercises, each stretch of teaching
between them on its own); the totals, the clock and the budget check add those integers, so the printed table adds
up. Each exercise a track uses declares in ``NEEDS`` the sections it builds on; ``unmet_needs`` names those a track
teaches after the exercise or not at all. ``tests/test_notebook_timings.py`` checks the committed table against the
notebooks' current counts and markers, that each track fits its budget with a 10-minute break per 90 minutes, that
no track teaches more than ``MAX_GAP_MIN`` minutes without an exercise, that every exercise comes after the sections
it needs, and that each printed track table adds up.
"""

from __future__ import annotations

import argparse
import json
import math
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
READALOUD_JSON = RESULTS_DIR / "timing_readaloud_03.json"  # python -m tools.timing_readaloud: the prose factor
SMOKE_CELL = "sc.check_smoke"  # notebook 00's smoke-run cell: the reference speed of this machine
_HEADING = re.compile(r"^## (.+?)(?: \((core|optional)\))?\s*$")
_EXERCISE = re.compile(r"^(?:\*\*(\d+)\.\*\*|### Exercise (\d+)\b)")
_WORD = re.compile(r"\S*[A-Za-z0-9]\S*")
_FIGURE_MIME = ("image/png", "image/svg+xml", "image/jpeg")

# The tracks of docs/instructor.md. A block is (notebook prefix, "core" | "all" | [section numbers and titles],
# mode) or (None, minutes, what): breaks, a lunch and questions are stated, not measured. Exercises are done by the
# attendees whatever the block's mode.
EX = "Exercises · exercise "
EX08 = "2. Exercises · exercise "
TRACKS = {
    "90-minute": [
        ("01", ["What we saw"], "demo"),
        ("02", ["What we saw"], "demo"),
        ("03", [5, 6], "demo"),
        ("04", ["What we saw"], "demo"),
        ("05", [1], "demo"),
        ("03", [EX + "2"], "demo"),
        ("06", [2, 3, 4, 6], "demo"),
        ("07", [1], "demo"),
        ("06", [EX + "2"], "demo"),
        (None, 10, "break"),
        ("08", [1], "demo"),
        ("08", [EX08 + "2"], "demo"),
        (None, 5, "questions"),
    ],
    "3-hour": [
        ("01", ["The symbols", "The equations", "Building it by hand, one equation at a time"], "demo"),
        ("02", ["The identity", "Why RoPE has to be decoupled"], "demo"),
        ("02", [EX + "1"], "demo"),
        ("02", ["`AbsorbedMLA`"], "demo"),
        ("03", [5, 6], "demo"),
        ("03", [EX + "2"], "demo"),
        ("04", ["What we saw"], "demo"),
        (None, 10, "break"),
        ("05", [1, 3], "demo"),
        ("05", [EX + "1"], "demo"),
        ("06", [1, 2, 3, 4], "demo"),
        ("06", [EX + "2"], "demo"),
        ("06", [5, 6], "demo"),
        ("08", [EX08 + "3"], "demo"),
        ("07", [1, 4, 6], "demo"),
        ("07", [EX + "2"], "demo"),
        (None, 10, "break"),
        ("08", [1], "demo"),
        ("08", [EX08 + "2"], "demo"),
        (None, 5, "questions"),
    ],
    # Every (core) section of 01-08 in order, with (core) exercises set where a stretch of teaching would pass
    # MAX_GAP_MIN, each after what it needs: 01 and 04 have no (core) exercise and 05's need its section 2 or 3,
    # so exercises of 02, 03 and 08 fill in there.
    "day": [
        ("01", ["introduction", "The symbols", "The equations", "Building it by hand, one equation at a time"], "demo"),
        ("02", ["introduction", "The identity"], "demo"),
        ("02", [EX + "3"], "demo"),
        ("01", ["Checking against `transformers`", "Decoding with the latent cache", "What the small cache buys",
                "What we saw"], "demo"),
        ("02", ["Why RoPE has to be decoupled"], "demo"),
        ("02", [EX + "1"], "demo"),
        ("02", ["`AbsorbedMLA`", "What each order costs"], "demo"),
        ("02", [EX + "2"], "demo"),
        ("02", ["What we saw"], "demo"),
        (None, 10, "break"),
        ("03", ["introduction", 1, 2, 3], "demo"),
        ("03", [EX + "1"], "demo"),
        ("03", [5, 6, "What we saw"], "demo"),
        ("04", ["introduction", 1], "demo"),
        ("03", [EX + "2"], "demo"),
        (None, 10, "break"),
        ("04", [2, 3], "demo"),
        ("03", [EX + "3"], "demo"),
        ("04", [4, 5, 7, "What we saw"], "demo"),
        ("05", ["introduction", 1], "demo"),
        ("08", [EX08 + "4"], "demo"),
        (None, 60, "lunch"),
        ("05", [2], "demo"),
        ("05", [EX + "4"], "demo"),
        ("05", [3], "demo"),
        ("05", [EX + "1"], "demo"),
        ("05", ["What we saw"], "demo"),
        (None, 10, "break"),
        ("06", ["introduction", 1, 2, 3, 4], "demo"),
        ("06", [EX + "2"], "demo"),
        ("06", [5, 6, "What we saw"], "demo"),
        ("08", [EX08 + "3"], "demo"),
        ("07", ["introduction", 1, 4], "demo"),
        ("07", [EX + "2"], "demo"),
        (None, 10, "break"),
        ("07", [6, "What we saw"], "demo"),
        ("07", [EX + "3"], "demo"),
        ("08", ["introduction", 1], "demo"),
        ("08", [EX08 + "2"], "demo"),
        ("08", ["What we saw"], "demo"),
        (None, 5, "questions"),
    ],
}
# What each exercise a track uses or adds builds on (read off its text in notebooks/NN_*.py): (notebook prefix,
# section number or title). A track must teach these before the exercise.
NEEDS = {
    ("02", EX + "1"): [("02", "Why RoPE has to be decoupled")],  # the "why decoupled" cell
    ("02", EX + "2"): [("02", "What each order costs")],  # "from the counts above": the intensity, the ridge
    ("02", EX + "3"): [("02", "The identity")],  # the product W^UQ^T W^UK the identity forms
    ("03", EX + "1"): [("03", 2)],  # the slots paging wastes
    ("03", EX + "2"): [("03", 5), ("03", 6)],  # section 5's buffer, read with a row stride
    ("03", EX + "3"): [("03", 5), ("03", 6)],  # section 5's fill, read with row stride 1
    ("05", EX + "1"): [("05", 3)],  # sc.narrow_view, the toy paged decode's pitfall
    ("05", EX + "4"): [("05", 2)],  # what the emulator records and replays, what a graph freezes
    ("06", EX + "2"): [("06", 2), ("06", 4)],  # section 2's batch; row b reads b * row_stride + j
    ("06", EX + "3"): [("06", 1), ("06", 3)],  # the seed's runs; only row 0 reads its own pages
    ("07", EX + "2"): [("07", 4)],  # section 4's batch and the poison fill
    ("07", EX + "3"): [("07", 6)],  # section 6's differential test
    ("07", EX + "4"): [("06", 1)],  # the seed's graphs and DP ranks, each rank's rows padded to a graph
    ("08", EX08 + "2"): [("08", 1)],  # the control panel's plots, the poison fill
    ("08", EX08 + "1"): [("03", 5), ("05", 2), ("07", 1)],  # the fill; copy into captured buffers; the full width
    ("08", EX08 + "3"): [("06", 4), ("06", 6)],  # the stride from the view's width; seq_lens at capture
    ("08", EX08 + "4"): [("04", 5)],  # the split count and the workspace's size
    ("08", EX08 + "5"): [("03", 5), ("06", 5)],  # the entries the fill writes; the stale ones the wrong rows read
}
# Where to add, if the class is fast: (core) sections and exercises a track leaves out, timed in docs/timings.md
# for the guide's "where to add" lists.
ADD = {
    "90-minute": [("06", [1], "demo"), ("06", [5], "demo")],
    "3-hour": [("03", [3], "demo"), ("04", [4, 5], "demo"), ("02", ["What each order costs"], "demo"),
               ("08", [EX08 + "4", EX08 + "5"], "demo")],
    "day": [("06", [EX + "3"], "demo"), ("07", [EX + "4"], "demo"), ("08", [EX08 + "1", EX08 + "5"], "demo")],
}
# A track's minutes, its lunch included where it has one: the day is 360 minutes of class and a 60-minute lunch.
BUDGET_MIN = {"90-minute": 90, "3-hour": 180, "day": 420}


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


def prose_factor(path: Path = READALOUD_JSON) -> float:
    """Minutes of speech per minute the words a minute give for the same prose: the audio of notebook 03's prose,
    synthesised at ``WORDS_PER_MIN``, over its words at that rate (``prose_audio_min / prose_model_min`` of
    ``python -m tools.timing_readaloud``'s json)."""
    if not path.is_file():
        raise FileNotFoundError(f"no read-aloud result at {path}: run python -m tools.timing_readaloud")
    result = json.loads(path.read_text())
    missing = [k for k in ("words_per_min", "prose_model_min", "prose_audio_min") if k not in result]
    if missing:
        raise ValueError(f"{path}: expected the keys words_per_min, prose_model_min and prose_audio_min "
                         f"(python -m tools.timing_readaloud writes them), missing {missing}")
    if result["words_per_min"] != WORDS_PER_MIN:
        raise ValueError(f"{path}: read aloud at {result['words_per_min']} words a minute, expected the model's "
                         f"{WORDS_PER_MIN}: rerun python -m tools.timing_readaloud")
    audio, model = result["prose_audio_min"], result["prose_model_min"]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in (audio, model)):
        raise ValueError(f"{path}: expected positive prose_model_min and prose_audio_min, got {model!r} and "
                         f"{audio!r}")
    return audio / model


def measure(notebooks_dir: Path = NOTEBOOKS_DIR, lab_seconds: Path = LAB_SECONDS,
            readaloud: Path = READALOUD_JSON) -> dict:
    """The table: the model's rates and the read-aloud factor; per notebook its Run All seconds (and their
    source) and its sections' counts, run seconds and minutes (demo pace); the reference smoke-run seconds; the
    tracks' minutes and the additions'."""
    lab = json.loads(lab_seconds.read_text()) if lab_seconds.is_file() else {}
    table = {"words_per_min": WORDS_PER_MIN, "prose_factor": prose_factor(readaloud),
             "prose_factor_source": readaloud.relative_to(REPO_ROOT).as_posix(), "min_per_equation": MIN_PER_EQUATION,
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
            s["minutes"] = round(minutes(s, prose_factor=table["prose_factor"]), 1)
        table["notebooks"][path.name] = {"run_all_s": round(run_all, 1),
                                         "run_all_source": "jupyterlab" if path.name in lab else "nbclient",
                                         "words": sum(s["words"] for s in secs), "sections": secs,
                                         # tools.run_notebooks' reading of the kernel's peak (None: not measured)
                                         "kernel_peak_mb": nb["metadata"].get("mla_edu", {}).get("kernel_peak_rss_mb")}
        for cell in nb["cells"]:
            if cell["cell_type"] == "code" and SMOKE_CELL in cell_source(cell) and _duration(cell) > 0:
                table["reference_smoke_s"] = round(_duration(cell), 1)
    if table["reference_smoke_s"] is None:  # notebook 00 not executed yet: time the smoke run here
        from mla_edu.workshop.setup_check import smoke_run

        table["reference_smoke_s"] = round(smoke_run()["seconds"], 1)
    table["tracks"] = {name: track_minutes(table, blocks) for name, blocks in TRACKS.items()}
    table["additions"] = {name: [track_minutes(table, [block])["blocks"][0] for block in blocks]
                          for name, blocks in ADD.items()}
    return table


def whole(m: float) -> int:
    """``m`` minutes to the nearest whole minute, halves up (8.5 -> 9; Python's ``round`` gives 8): the one rounding
    of the tracks' table and of the slides' exercise minutes."""
    return math.floor(m + 0.5)


def exercise_unit_minutes(section: dict, *, prose_factor: float) -> int:
    """Whole minutes of an exercise unit, done by the attendees: what a track counts for it and what its slide's
    title says (``tools.slides.exercise_minutes``)."""
    if section["exercise"] is None:
        raise ValueError(f"expected an exercise unit, got the section {section['title']!r}")
    return whole(minutes(section, "attendees run", prose_factor=prose_factor))


def minutes(section: dict, mode: str = "demo", *, prose_factor: float) -> float:
    """Minutes of a section taught live: prose (its words at ``WORDS_PER_MIN`` times ``prose_factor``, the
    read-aloud factor), equations, figures, the code read aloud and run (twice as long when attendees run it), and
    the attempt of an exercise."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if isinstance(prose_factor, bool) or not isinstance(prose_factor, (int, float)) or prose_factor <= 0:
        raise ValueError(f"prose_factor: expected a positive number, got {prose_factor!r}")
    code = section["code_lines"] * MIN_PER_CODE_LINE + section["run_s"] / 60
    return (section["words"] / WORDS_PER_MIN * prose_factor + section["equations"] * MIN_PER_EQUATION
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
    (from the start, between two exercises, and to the end), all whole minutes: an exercise unit counts
    ``exercise_unit_minutes``; a stretch of teaching sections within a block (the whole block, unless exercises
    split it) counts its minutes added, then rounded by ``whole``; a block's teaching, the totals and the gaps are
    sums of those integers."""
    rows, gap, gaps = [], 0, []
    for prefix, which, mode in blocks:
        if prefix is None:
            rows.append({"block": mode, "teaching": 0, "exercises": 0, "other": int(which)})
            continue
        name, nb = notebook_entry(table, prefix)
        chosen = select(nb, which)
        teach = exer = 0
        stretch = 0.0  # unrounded minutes of the teaching since the block's start or its last exercise
        for s in chosen:  # attendees do the exercises, whatever the block's mode
            if s["exercise"] is None:
                stretch += minutes(s, mode, prose_factor=table["prose_factor"])
                continue
            teach, gap = teach + whole(stretch), gap + whole(stretch)
            stretch = 0.0
            exer += exercise_unit_minutes(s, prose_factor=table["prose_factor"])
            gaps.append(gap)
            gap = 0
        teach, gap = teach + whole(stretch), gap + whole(stretch)
        label = which if isinstance(which, str) else ", ".join(
            str(w).replace("Exercises · exercise ", "ex. ").replace(" · exercise ", " ex. ") for w in which)
        who = "attendees" if all(s["exercise"] is not None for s in chosen) else mode
        rows.append({"block": f"{name[:2]}: {label} ({who})", "teaching": teach, "exercises": exer, "other": 0})
    gaps.append(gap)
    return {"blocks": rows, "teaching_min": sum(r["teaching"] for r in rows),
            "exercise_min": sum(r["exercises"] for r in rows),
            "exercises": sum(1 for prefix, which, mode in blocks if prefix is not None
                             for s in select(notebook_entry(table, prefix)[1], which) if s["exercise"] is not None),
            "max_gap_min": max(gaps), "total_min": sum(r["teaching"] + r["exercises"] + r["other"] for r in rows)}


def unmet_needs(table: dict, blocks: list, needs: dict | None = None) -> list[str]:
    """Each exercise of the track ``blocks`` (sections as ``table`` has them) whose declared needs (``NEEDS``)
    the blocks before it do not teach, or that declares none, as a line: ``"07 Exercises · exercise 2 needs 07:
    4. The poison fill..., not taught before it"``. Empty when every exercise comes after what it needs."""
    needs = NEEDS if needs is None else needs
    taught, out = set(), []
    for prefix, which, _ in blocks:
        if prefix is None:
            continue
        for s in select(notebook_entry(table, prefix)[1], which):
            if s["exercise"] is None:
                taught.add((prefix, s["title"]))
                continue
            if (prefix, s["title"]) not in needs:
                out.append(f"{prefix} {s['title']}: declares no needs (add it to NEEDS)")
                continue
            for p, w in needs[(prefix, s["title"])]:
                missing = [t["title"] for t in select(notebook_entry(table, p)[1], [w]) if t["exercise"] is None
                           and (p, t["title"]) not in taught]
                out += [f"{prefix} {s['title']} needs {p}: {t}, not taught before it" for t in missing]
    return out


def track_problems(table: dict, track: str, blocks: list) -> list[str]:
    """What is wrong with the track ``blocks`` timed on ``table``: over its budget (``BUDGET_MIN[track]``), less
    break than ``breaks_needed`` (a lunch counts in the budget, not as a break), more than ``MAX_GAP_MIN`` minutes of
    teaching without an exercise, an exercise before the sections it needs (``unmet_needs``). Empty when none."""
    if track not in BUDGET_MIN:
        raise ValueError(f"track: expected one of {sorted(BUDGET_MIN)}, got {track!r}")
    t, budget = track_minutes(table, blocks), BUDGET_MIN[track]
    breaks = sum(which for prefix, which, what in blocks if prefix is None and what == "break")
    out = []
    if t["total_min"] > budget:
        out.append(f"{track}: {t['total_min']} minutes, over its {budget}")
    if breaks < breaks_needed(budget):
        out.append(f"{track}: {breaks} minutes of break, expected at least {breaks_needed(budget)}")
    if t["max_gap_min"] > MAX_GAP_MIN:
        out.append(f"{track}: {t['max_gap_min']} minutes of teaching without an exercise, expected at most "
                   f"{MAX_GAP_MIN:g}")
    return out + [f"{track}: {u}" for u in unmet_needs(table, blocks)]


def breaks_needed(budget_min: int) -> int:
    """Minutes of break a track of ``budget_min`` minutes must hold: 10 per full 90."""
    return BREAK_MIN_PER_90 * (budget_min // 90)


def unmarked(table: dict) -> list[str]:
    """``notebook: heading`` of every section without a (core) / (optional) marker."""
    return [f"{name}: {s['title']}" for name, nb in table["notebooks"].items() for s in nb["sections"]
            if s["marker"] is None]


def memory_line(table: dict) -> str:
    """What the instructor guide's memory advice rests on: the largest peak of one notebook's kernel (the resident
    memory ``tools.run_notebooks`` read from the kernel after its last cell), and the sum of all of them, what
    JupyterLab holds if no kernel is shut down."""
    peaks = {name[:2]: nb["kernel_peak_mb"] for name, nb in table["notebooks"].items()}
    unmeasured = sorted(k for k, v in peaks.items() if v is None)
    if unmeasured:
        return f"Memory: not measured for notebooks {', '.join(unmeasured)} (run `make notebooks`)."
    top = max(peaks, key=peaks.get)
    return (f"Memory: one notebook's kernel peaks at {peaks[top] / 1024:.1f} GB (notebook {top}; the last execution, "
            f"`tools.run_notebooks`); the {len(peaks)} kernels' peaks add up to "
            f"{sum(peaks.values()) / 1024:.1f} GB, a bound on what they hold if none is shut down.")


def to_markdown(table: dict) -> str:
    lines = ["<!-- written by python -m tools.notebook_timings; do not edit -->", "",
             f"Minutes of teaching at demo pace: the markdown's words at {table['words_per_min']} words a minute "
             f"times the read-aloud factor {table['prose_factor']:.2f} (notebook 03's prose, synthesised by espeak-ng "
             f"at {table['words_per_min']} words a minute, took {table['prose_factor']:.2f} times as long as its "
             f"words at that rate: `{table['prose_factor_source']}`, written by `python -m tools.timing_readaloud`; "
             f"about {table['words_per_min'] / table['prose_factor']:.0f} words a minute in effect), "
             f"{table['min_per_equation']:g} minute per display equation, {table['min_per_code_line'] * 60:g} s per "
             f"line of code read aloud, {table['min_per_figure']:g} minute per figure, and the seconds the cells ran "
             "in the last execution (JupyterLab's Run All where `make test-lab LAB_WORKERS=1` measured it, one "
             "notebook at a time); where attendees run "
             f"the cells, the code's part counts {table['attendee_factor']:g} times; an exercise adds "
             f"{table['exercise_min']:g} minutes for the attempt. Breaks, lunch and questions are stated minutes.", "",
             "| notebook | words | equations | code lines | figures | exercises | Run All, s | core, min "
             "| optional, min |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, nb in table["notebooks"].items():
        secs = nb["sections"]
        mins = {m: sum(s["minutes"] for s in secs if s["marker"] == m) for m in MARKERS}
        count = {k: sum(s[k] for s in secs) for k in ("equations", "code_lines", "figures")}
        lines.append(f"| {name[:2]} | {nb['words']} | {count['equations']} | {count['code_lines']} "
                     f"| {count['figures']} | {sum(s['exercise'] is not None for s in secs)} | {nb['run_all_s']:.0f} "
                     f"| {whole(mins['core'])} | {whole(mins['optional'])} |")
    lines += ["", memory_line(table)]
    for track, t in table["tracks"].items():
        lines += ["", f"**{track} track: {t['total_min']} of {BUDGET_MIN[track]} minutes** "
                  f"({t['teaching_min']} teaching, {t['exercises']} exercises in {t['exercise_min']}, "
                  f"at most {t['max_gap_min']} minutes of teaching between two exercises)", "",
                  "| block | teaching, min | exercises, min | other, min | ends at, min |", "|---|---:|---:|---:|---:|"]
        clock = 0  # minutes from the start: the blocks' whole minutes added
        for r in t["blocks"]:
            clock += r["teaching"] + r["exercises"] + r["other"]
            lines.append(f"| {r['block']} | {r['teaching']} | {r['exercises']} | {r['other']} | {clock} |")
        if table["additions"].get(track):
            lines += ["", f"Where to add to the {track} track, if the class is fast:", "",
                      "| block | teaching, min | exercises, min |", "|---|---:|---:|"]
            lines += [f"| {r['block']} | {r['teaching']} | {r['exercises']} |"
                      for r in table["additions"][track]]
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
        print(f"{track}: {t['total_min']} of {BUDGET_MIN[track]} min, longest stretch without an exercise "
              f"{t['max_gap_min']} min")
    problems = [p for track, blocks in TRACKS.items() for p in track_problems(table, track, blocks)]
    if problems:
        parser.error(f"the tracks do not hold (the files are written; fix TRACKS): {problems}")


if __name__ == "__main__":
    main()
