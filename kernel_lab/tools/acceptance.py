"""Issue 52's acceptance on the H200, read from the committed family-bench runs: ``python -m kernel_lab.tools.acceptance
--out FILE``. No GPU.

Every problem of the family bench (``family_bench.problems``: a set, a family or uniform length, h_q and B) takes its
ratio from the runs of ``RUNS`` that timed FlashMLA on it at or after ``RULES_FROM``, their median; where none did,
the latest before alone, flagged 'older rules' (its balanced schedule was not the package's: another partition,
``choice_fit.benched_balanced``, or another stage 2); where no run did, the problem is missing. A run without FlashMLA
is skipped. The ratio is the backend's choice against FlashMLA (``family_bench.backend_choice``;
``family_bench.x_flashmla``: the median over that run's rounds of FlashMLA's time over the choice's, above 1 ours
faster), and the choice over the best option (``family_bench.best_option``), pooled alike: the median over the runs of
the choice's time over that run's best option's. A problem is held out where no fit of the choice read any run pooled
into it (``FITTED``).

``RUNS`` lists the runs in the order they ran, one file a line; each run's commit (its setup line) is one of
``COMMITS``, oldest first. Every family-bench json in the results folder is in ``RUNS`` or ``SKIPPED``
(``check_listed``).

The criteria (issue 52, 'Acceptance'): per head count and family, the geomean over the batches at least
``GEOMEAN_BAR`` and every batch at least ``FLOOR``; uniform lengths from B=4 at every head count at least ``FLOOR``;
at h_q=16 every uniform shape, B=1 too, at least ``H16_FLOOR``; the choice within ``WITHIN`` of the best option at
every problem; each ratio the median of at least ``MIN_RUNS`` runs. A criterion is met where every problem it covers
is measured at current rules and passes. A value at its bar passes (compared at ``DIGITS`` decimals, so that a
geomean's float rounding does not decide).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from kernel_lab.tools import choice_fit as cf
from kernel_lab.tools import family_bench as fb
from kernel_lab.tools import half_block_fit as hb
from kernel_lab.tools import print_and_write, rel
from kernel_lab.tools import split_model_fit as smf
from mla_edu.config import MLAConfig
from mla_edu.files import read_json
from mla_edu.paths import REPO_ROOT
from mla_edu.serving.backends.base import page_table_width

LAB = REPO_ROOT / "kernel_lab" / "results"
#: The family-bench runs on the H200, in the order they ran, one a line (the 8acf73a runs: h16 and b128 on one
#: machine, then b256 and h16_uniform on a second). A new run: its file's name last, its commit in ``COMMITS``.
RUNS = tuple(LAB / name for name in (
    "family_bench_h200.json",
    "family_bench_h200_fm_a2e9367.json",
    "family_bench_h200_ours_a2e9367.json",
    "family_bench_h200_fm_8acf73a_h16.json",
    "family_bench_h200_fm_8acf73a_b128.json",
    "family_bench_h200_fm_8acf73a_b256.json",
    "family_bench_h200_fm_8acf73a_h16_uniform.json",
    "family_bench_h200_fm_4d46283_run1.json",
    "family_bench_h200_fm_4d46283_run2.json",
    "family_bench_h200_fm_4d46283_run3.json",
    "family_bench_h200_fm_261e2bd_run1.json",  # h_q 64/128, B 128/256 families: stage 2 pipelined
    "family_bench_h200_fm_261e2bd_run2.json",
    "family_bench_h200_fm_261e2bd_run3.json",
    "family_bench_h200_fm_1699741_run1.json",  # the whole bench: every family and the uniform grid
))
#: The family-bench jsons of the results folder left out of ``RUNS`` on purpose (a comment each says why).
SKIPPED: tuple[str, ...] = (
    "family_bench_h200_ours_df92c31_small.json",  # split counts at small uniform batches, no FlashMLA (split_model_fit)
)
PATTERN = "family_bench_h200*.json"  # the family-bench runs on the H200 in the results folder
H100_PATTERN = "family_bench_h100*.json"  # ... and on an H100: each in H100_RUNS
#: The whole bench on an H100, twice at 84453eb, once at 69707eb and once at bd22e84 (the same kernels: bd22e84 added
#: host-side checks only): not the H200's RUNS; their own scoreboard is acceptance_h100.md
H100_RUNS = (*(LAB / f"family_bench_h100_fm_84453eb_run{i}.json" for i in (1, 2)),
             LAB / "family_bench_h100_fm_69707eb_run1.json", LAB / "family_bench_h100_fm_bd22e84_run1.json")
OUT = LAB / "acceptance_h200.md"
#: The runs' commits, oldest first, one a line.
COMMITS = (
    "29d1c24",
    "a2e9367",
    "8acf73a",
    "4d46283",
    "261e2bd",
    "1699741",
    "84453eb",  # the two runs on an H100 (family_bench_h100_*: not the H200's RUNS; acceptance --runs reads them)
    "69707eb",  # the third run on an H100
    "bd22e84",  # the fourth run on an H100
)
#: From this commit on, the timed options are the package's kernels (the choice between them has changed since, and
#: is taken as the package makes it now); before it, the balanced schedule ran another partition (before a2e9367) or
#: another stage 2 (before 261e2bd: its merge loop not pipelined, `partition_ab_h200_stage2_few_wide_pipelined.md`).
#: Runs from it on are pooled (their median), so it moves to the first commit with a change of a timed kernel or
#: partition; it holds for a problem whose choice is a split count too, since its best option is judged against the
#: balanced schedule's time.
RULES_FROM = "261e2bd"
GEOMEAN_BAR, FLOOR, H16_FLOOR, WITHIN, MIN_RUNS = 1.05, 0.95, 1.0, 1.05, 3
#: A server's context limit, DeepSeek-V3's (its config.json's max_position_embeddings): the triton serving backend's
#: page table is that wide whatever the batch, and a step reads the narrowest of its widths that holds the batch's
#: longest request, the split rule counting on that width (``served_choice``).
SERVED_CONTEXT = MLAConfig.deepseek_v3().max_position_embeddings
UNIFORM_FROM = 4  # the uniform bar's smallest batch
DIGITS = 9
#: The family-bench runs a fit of the choice read (``choice_fit``'s margin, ``half_block_fit``'s scale, the split
#: count's and the choice's stage 2 model: ``split_model_fit.FIT_SETS``).
FITTED = tuple(dict.fromkeys([cf.FAMILY_BENCH, *hb.RUNS,
                              *(path for _, path, kind in smf.FIT_SETS if kind.startswith("family"))]))


@dataclass(frozen=True)
class Run:
    name: str  # the json's file name
    commit: str
    data: dict


@dataclass(frozen=True)
class Pick:
    """One problem's ratio: the latest run it comes from, the runs pooled into it (oldest first), the choice, the
    latest run's best option, and the medians over the pooled runs of x FlashMLA of the choice and of the choice's
    time over that run's best option's."""

    key: tuple  # (set, family, h_q, B)
    run: str
    commit: str
    older: bool
    pooled: tuple[str, ...]
    choice: str
    best: str
    x: float
    regret: float
    xs: tuple[float, ...] = ()  # x FlashMLA of each pooled run, oldest first
    served: str = ""  # the option a server with SERVED_CONTEXT tokens of context runs (``served_choice``)
    served_regret: float | None = None  # its time over the best option's, the median over the pooled runs (None:
    # a split count the runs did not time, or a launch other than the bench's: ``served_as_benched``)

    @property
    def always_below(self) -> bool:
        """Below ``FLOOR`` in every pooled run, so not a median pulled down by one slow run."""
        return bool(self.xs) and not any(passes(x, FLOOR) for x in self.xs)

    @property
    def crosses(self) -> bool:
        """Some pooled run on each side of ``FLOOR``: the spread between runs reaches across the bar."""
        return any(passes(x, FLOOR) for x in self.xs) and not all(passes(x, FLOOR) for x in self.xs)

    @property
    def runs(self) -> int:
        return len(self.pooled)


def commit_of(data: dict, where: str) -> str:
    """The commit of ``COMMITS`` a run names in its setup line (``commit <hash>``, the hash 7 to 40 digits); an error
    naming ``where`` if it names none, or one not in ``COMMITS``."""
    setup = data.get("info", {}).get("setup", "")
    found = re.search(r"\bcommit ([0-9a-f]{7,40})\b", setup)
    if not found:
        raise ValueError(f"{where}: expected a setup line naming 'commit <hash>', got {setup!r}")
    known = [c for c in COMMITS if found[1].startswith(c)]
    if not known:
        raise ValueError(f"{where}: expected a commit of COMMITS {COMMITS}, got {found[1]} (add it to COMMITS, "
                         "after the commits made before it)")
    return known[0]


def runs_in_order(runs: list[tuple[str, dict]]) -> list[Run]:
    """``(name, family-bench json)`` of each run, oldest first, as ``Run``; an error where the commits go back."""
    out = [Run(name, commit_of(data, name), data) for name, data in runs]
    for a, b in zip(out, out[1:]):
        if COMMITS.index(b.commit) < COMMITS.index(a.commit):
            raise ValueError(f"expected the runs in the order they ran, their commits in COMMITS' order "
                             f"({' < '.join(COMMITS)}), got {b.name} ({b.commit}) after {a.name} ({a.commit})")
    return out


def check_listed(paths=None, skipped=None, lab: Path | None = None, pattern: str = PATTERN,
                 name: str = "RUNS") -> None:
    """An error unless each of ``paths`` is a file listed once, each of ``skipped`` a file in ``lab`` not in
    ``paths``, and every family-bench json in ``lab`` that ``pattern`` matches one of the two; by default ``RUNS``,
    ``SKIPPED``, ``LAB`` and ``PATTERN`` (``name``: the list, in the errors)."""
    paths, skipped, lab = RUNS if paths is None else paths, SKIPPED if skipped is None else skipped, lab or LAB
    names = _once(paths, name)
    for p in paths:
        if not Path(p).is_file():
            raise ValueError(f"{name}: expected the file {rel(p)}, got none there")
    for n in skipped:
        if n in names or not (lab / n).is_file():
            raise ValueError(f"SKIPPED: expected a file in {rel(lab)} not in {name}, got {n}, "
                             + (f"which {name} lists" if n in names else "which is not there"))
    unlisted = sorted(p.name for p in lab.glob(pattern) if p.name not in names and p.name not in skipped)
    if unlisted:
        raise ValueError(f"expected every {pattern} in {rel(lab)} in {name} or SKIPPED, got {', '.join(unlisted)} in "
                         f"neither (add it to {name} in the order it ran, its commit to COMMITS, or to SKIPPED)")


def _once(paths, what: str) -> list[str]:
    """The file names of ``paths``; an error naming ``what`` if one is there twice."""
    names = [Path(p).name for p in paths]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{what}: expected each run once, got {', '.join(twice)} more than once")
    return names


def load(paths=None) -> list[Run]:
    """The runs at ``paths`` (default ``RUNS``) as ``Run``, in their order (``runs_in_order``); ``RUNS`` and
    ``H100_RUNS`` first checked against the results folder (``check_listed``). An error for a run given twice (by
    name, or the same times of a problem under another name: a copy would pass for a second run) and for a timed
    option whose times are not finite and positive (``check_times``)."""
    paths = RUNS if paths is None else paths
    if [Path(p).resolve() for p in paths] in ([p.resolve() for p in RUNS], [p.resolve() for p in H100_RUNS]):
        check_listed()
        check_listed(H100_RUNS, (), pattern=H100_PATTERN, name="H100_RUNS")
    _once(paths, "runs")
    runs = runs_in_order([(Path(p).name, read_json(p, "family bench json")) for p in paths])
    seen: dict[str, str] = {}
    for run in runs:
        for kind in ("family", "uniform"):
            for r in run.data[kind]:
                where = f"{run.name}: {kind} {r.get('family')} h_q={r.get('heads')} B={r.get('batch')}"
                check_times(r, where)
                times = json.dumps([kind, r["family"], r["heads"], r["batch"], r["us"]], sort_keys=True)
                if times in seen:
                    raise ValueError(f"expected each run's own times, got {where} timed as in {seen[times]} "
                                     "(a copy of a run is not a second run)")
                seen[times] = run.name
    return runs


def check_times(row: dict, where: str) -> None:
    """An error naming ``where`` unless every timed option of ``row`` has at least one time, each finite and
    positive, FlashMLA's (where timed) as many as the options'."""
    us = row.get("us")
    if not isinstance(us, dict) or not us:
        raise ValueError(f"{where}: expected times per option, got {us!r}")
    for option, times in us.items():
        if (not isinstance(times, list) or not times
                or not all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in times)):
            raise ValueError(f"{where}: expected {option}'s times finite and positive, got {times!r}")
    if "flashmla" in us and len({len(t) for t in us.values()}) > 1:
        raise ValueError(f"{where}: expected as many rounds of every option as of FlashMLA's, got "
                         + ", ".join(f"{o} {len(t)}" for o, t in us.items()))


def bench_keys() -> list[tuple]:
    """(set, family, h_q, B) of every problem of the family bench, in its order."""
    return [(kind, fam, h, len(lens)) for kind, fam, h, lens in fb.problems()]


def picks(runs: list[Run], rules_from: str = RULES_FROM) -> dict[tuple, Pick]:
    """``{(set, family, h_q, B): Pick}`` of every problem some run timed FlashMLA on: the median over the runs at
    current rules (at or after ``rules_from``) that timed it (x FlashMLA and the choice over the best, each run's own;
    the run named is the latest, whose best option is shown), else the latest such run alone."""
    timed: dict[tuple, list[tuple[Run, dict]]] = {}
    for run in runs:
        for kind in ("family", "uniform"):
            for r in run.data[kind]:
                if "flashmla" in r["us"]:
                    timed.setdefault((kind, r["family"], r["heads"], r["batch"]), []).append((run, r))
    start, out = COMMITS.index(rules_from), {}
    for key, held in timed.items():
        current = [(run, r) for run, r in held if COMMITS.index(run.commit) >= start]
        used = current or held[-1:]
        run, r = used[-1]
        choice, best = fb.backend_choice(r, run.data["info"]["sm_count"]), fb.best_option(r)
        xs = tuple(fb.x_flashmla(r, choice)[0] for _, r in used)
        sms = run.data["info"]["sm_count"]
        served = served_choice(r, sms)
        timed_as_served = served_as_benched(r, sms) and all(served in r["us"] for _, r in used)
        out[key] = Pick(key, run.name, run.commit, not current, tuple(u.name for u, _ in used), choice, best,
                        statistics.median(xs), median_regret([r for _, r in used], choice), xs, served,
                        median_regret([r for _, r in used], served) if timed_as_served else None)
    return out


def served_width(row: dict, context: int = SERVED_CONTEXT, whole: bool = False) -> int:
    """The columns a step of the triton serving backend reads for a bench row, its table as wide as a ``context``
    limit in the bench's 64-token pages (``page_table_width``): the narrowest of the table's widths
    (``table_widths``: powers of two, and the whole) that holds the batch's longest request (``step_width``); with
    ``whole``, the whole table, as the backend read it before ``table_widths``."""
    from mla_edu.serving.backends.triton import step_width, table_widths

    width = page_table_width(context, fb.PAGE)
    return width if whole else step_width(row["lens"], table_widths(width), fb.PAGE)


def served_choice(row: dict, sm_count: int, context: int = SERVED_CONTEXT, whole: bool = False) -> str:
    """The option a server with ``context`` tokens of context runs for a bench row (``family_bench.choice_option``):
    its split rule and schedule choice count on the width the step reads (``served_width``), not on the batch's
    longest request as the bench's choice does. A split divides a request's own pages, so a count's time does not
    depend on the width."""
    return fb.choice_option(row, sm_count, served_width(row, context, whole))


def served_as_benched(row: dict, sm_count: int, context: int = SERVED_CONTEXT, whole: bool = False) -> bool:
    """Whether the kernels launch for this batch in a server with ``context`` tokens of context as the bench
    launched them: the same heads a program for either schedule (``workspace.gpu_block_h``, which takes 16 for a
    problem too small to fill the GPU, counted on the width read) and the same parts (``schedule.num_parts``).
    Not checked, and not measured: Triton compiles an integer argument divisible by 16 (the table's row stride, 2561
    at 163,840 tokens, and the width read, a power of two) as such, so the compiled stage 1 may differ in its
    address arithmetic from the bench's, whose table is as wide as its longest request."""
    from mla_edu.kernels import schedule
    from mla_edu.kernels.workspace import gpu_block_h

    def launch(width: int) -> tuple:
        b, h = row["batch"], row["heads"]
        return gpu_block_h(h, b, width), gpu_block_h(h, b, width, balanced=True), schedule.num_parts(h, sm_count, b,
                                                                                                      width)

    return launch(fb.table_width(row)) == launch(served_width(row, context, whole))


def median_regret(rows: list[dict], option: str) -> float:
    """The median over one problem's rows of the pooled runs of ``option``'s time over that row's best option's."""
    return statistics.median(fb.median_us(r, option) / fb.median_us(r, fb.best_option(r)) for r in rows)


def passes(value: float, bar: float) -> bool:
    return round(value, DIGITS) >= bar


def _current(keys: list[tuple], got: dict) -> list[Pick]:
    return [got[k] for k in keys if k in got and not got[k].older]


def ragged(keys: list[tuple], got: dict) -> list[dict]:
    """Per (h_q, family) of the families: its batches' picks (None where missing), the geomean and the lowest of the
    measured ones, and whether it is met (every batch measured at current rules; the bars)."""
    out, groups = [], {}
    for k in keys:
        if k[0] == "family":
            groups.setdefault((k[2], k[1]), []).append(k)
    order = list(dict.fromkeys(fam for _, fam in groups))
    for (h, fam), ks in sorted(groups.items(), key=lambda g: (g[0][0], order.index(g[0][1]))):
        now = _current(ks, got)  # a ratio at older rules is shown, flagged, and counted as unmeasured
        xs = [p.x for p in now]
        low = min(now, key=lambda p: p.x, default=None)
        geomean = statistics.geometric_mean(xs) if xs else None
        met = (len(_current(ks, got)) == len(ks) and passes(geomean, GEOMEAN_BAR) and passes(low.x, FLOOR))
        out.append(dict(heads=h, family=fam, picks={k[3]: got.get(k) for k in ks}, geomean=geomean, low=low,
                        met=met))
    return out


def uniform(keys: list[tuple], got: dict) -> list[dict]:
    """Per h_q: the uniform shapes from ``UNIFORM_FROM`` (measured at current rules, with older rules, the lowest at
    current rules, met at ``FLOOR``) and every shape (the same at ``H16_FLOOR``; that bar is h_q=16's)."""
    out = []
    for h in sorted({k[2] for k in keys if k[0] == "uniform"}):
        row = {"heads": h}
        for name, smallest, bar in (("big", UNIFORM_FROM, FLOOR), ("all", 0, H16_FLOOR)):
            ks = [k for k in keys if k[0] == "uniform" and k[2] == h and k[3] >= smallest]
            now = _current(ks, got)
            row[name] = dict(n=len(ks), current=len(now), older=sum(k in got and got[k].older for k in ks),
                             below=[p for p in now if not passes(p.x, bar)], now=now,
                             low=min(now, key=lambda p: p.x, default=None),
                             met=len(now) == len(ks) and all(passes(p.x, bar) for p in now))
        out.append(row)
    return out


def choice(keys: list[tuple], got: dict, fitted=()) -> list[dict]:
    """Per h_q and over all (``heads`` None): the problems measured at current rules, those whose choice is the best
    option and those within ``WITHIN`` of it (both on the median over the pooled runs, ``Pick.regret``), the worst,
    and the same on the held-out problems: those none of whose pooled runs a fit read (``fitted``: their names)."""
    out = []
    for h in (*sorted({k[2] for k in keys}), None):
        ks = [k for k in keys if h in (None, k[2])]
        now = _current(ks, got)
        held = [p for p in now if not set(p.pooled) & set(fitted)]
        out.append(dict(heads=h, n=len(ks), current=len(now), best=sum(_within(p, 1) for p in now),
                        within=sum(_within(p) for p in now), worst=max(now, key=lambda p: p.regret, default=None),
                        held=len(held), held_within=sum(_within(p) for p in held)))
    return out


def within(regret: float, bar: float = WITHIN) -> bool:
    """Whether a time over the best option's is at most ``bar`` (compared at ``DIGITS`` decimals, as ``passes``)."""
    return round(regret, DIGITS) <= bar


def _within(p: Pick, bar: float = WITHIN) -> bool:
    return within(p.regret, bar)


def sources(keys: list[tuple], got: dict) -> list[dict]:
    """The problems grouped by set, h_q, the run their ratio comes from (None: missing) and the runs behind it, by
    set and h_q: each group's batches and its count."""
    out = {}
    for k in sorted(keys, key=lambda k: (k[0] != "family", k[2], k[3])):
        p = got.get(k)
        what = (k[0], k[2], p.run if p else None, p.commit if p else None, p.older if p else False,
                p.runs if p else 0)
        group = out.setdefault(what, {"what": what, "batches": [], "n": 0, "names": []})
        group["n"] += 1
        group["names"].append(f"{k[1]} B={k[3]}")
        if k[3] not in group["batches"]:
            group["batches"].append(k[3])
    return list(out.values())


def glance(keys: list[tuple], got: dict) -> list[dict]:
    """Per h_q, the answer to 'is it faster than FlashMLA at my head count and batch size': for each family batch
    size, the geomean of x FlashMLA over the families and the lowest and highest family; for the uniform lengths,
    the same over the lengths at each batch size. Problems measured at current rules only, with the fewest and most
    runs behind them."""
    out = []
    for h in sorted({k[2] for k in keys}):
        row = {"heads": h}
        for kind in ("family", "uniform"):
            cells = {}
            for b in sorted({k[3] for k in keys if k[0] == kind}):
                now = _current([k for k in keys if k[0] == kind and k[2] == h and k[3] == b], got)
                if now:
                    xs = [p.x for p in now]
                    cells[b] = dict(geomean=statistics.geometric_mean(xs), low=min(xs), high=max(xs),
                                    runs=(min(p.runs for p in now), max(p.runs for p in now)))
            row[kind] = cells
        out.append(row)
    return out


def scoreboard(runs: list[Run], keys: list[tuple] | None = None, fitted: set[str] | None = None,
               rules_from: str = RULES_FROM) -> dict:
    """Everything the markdown shows, on ``keys`` (default the family bench's problems) with ``fitted`` the names of
    the runs a fit read (default ``FITTED``'s), judged at the rules from ``rules_from`` (a commit of ``COMMITS``)."""
    keys = bench_keys() if keys is None else keys
    got = {k: p for k, p in picks(runs, rules_from).items() if k in set(keys)}
    fitted = {p.name for p in FITTED} if fitted is None else set(fitted)
    return dict(keys=keys, rules_from=rules_from, picks=got, glance=glance(keys, got), ragged=ragged(keys, got),
                uniform=uniform(keys, got),
                choice=choice(keys, got, fitted), sources=sources(keys, got),
                runs=[r.name for r in runs], skipped=[r.name for r in runs if not _has_flashmla(r)],
                fitted=sorted(fitted & {r.name for r in runs}))


def _has_flashmla(run: Run) -> bool:
    return any("flashmla" in r["us"] for kind in ("family", "uniform") for r in run.data[kind])


def ratio(x: float, bar: float, digits: int = 2, upper: bool = False) -> str:
    """``x`` at ``digits`` decimals, or at as many more as it takes for the printed value to fall on the side of
    ``bar`` that ``x`` does (0.948 against 0.95, 0.9496 too: not 0.95, nor 0.950). ``upper``: ``bar`` is a ceiling
    (``_within``'s), a value at it on the good side."""
    side = (lambda v: within(v, bar)) if upper else (lambda v: passes(v, bar))
    for d in range(digits, DIGITS + 1):
        text = f"{x:.{d}f}"
        if side(float(text)) == side(x):
            return text
    return repr(x)


def _floor(heads: int) -> float:
    """The bar a uniform ratio is printed against: h_q=16's where it is higher (``H16_FLOOR``)."""
    return max(FLOOR, H16_FLOOR) if heads == 16 else FLOOR


def _x(p: Pick | None, bar: float = FLOOR) -> str:
    return "-" if p is None else ratio(p.x, bar) + (" (older)" if p.older else "")


def _where(p: Pick) -> str:
    return f"{p.key[1]} h_q={p.key[2]} B={p.key[3]}"


def _spread(now: list[Pick]) -> str:
    """The spread between runs judged against ``FLOOR``, on the problems timed in more than one run: of those whose
    median is below it, how many were below in every run, and how many whose median passes had a run below."""
    several = [p for p in now if p.runs > 1]
    below = [p for p in several if not passes(p.x, FLOOR)]
    above = sum(p.crosses for p in several if passes(p.x, FLOOR))
    if not below and not above:
        return ""
    return (f" (of those timed in 2 or more runs: {sum(p.always_below for p in below)} of the {len(below)} below "
            f"{FLOOR:.2f} in every run, {above} above with a run below)")


def _runs_behind(runs: list[tuple[int, int]]) -> str:
    """The runs behind the glance's ratios: '3 runs behind every ratio', or 'Runs behind each ratio: 1 to 4'."""
    few, most = min(r[0] for r in runs), max(r[1] for r in runs)
    if few == most:
        return f"{few} run{'s' * (few > 1)} behind every ratio"
    return f"Runs behind each ratio: {few} to {most}"


def _verdict(met: bool, missing: int) -> str:
    """'met', or 'not met' and, where nothing measured fails but problems are missing, why."""
    return "met" if met else f"not met ({missing} unmeasured)" if missing else "not met"


def verdicts(board: dict) -> list[tuple[str, str, str]]:
    """(criterion, where it stands, verdict) of each of issue 52's acceptance lines."""
    rg, un, ch = board["ragged"], board["uniform"], board["choice"][-1]
    keys, got = board["keys"], board["picks"]
    fam_keys = [k for k in keys if k[0] == "family"]
    fam_now = _current(fam_keys, got)
    lines = []
    if rg:
        geo = [r["geomean"] for r in rg if r["geomean"] is not None]
        fails = any(not passes(p.x, FLOOR) for p in fam_now) or any(not passes(g, GEOMEAN_BAR) for g in geo)
        low = min(fam_now, key=lambda p: p.x, default=None)
        lines.append((f"ragged: every family and head count, geomean >= {GEOMEAN_BAR:.2f}x FlashMLA, no batch below "
                      f"{FLOOR:.2f}x",
                      f"{sum(r['met'] for r in rg)} of {len(rg)} (h_q, family) met"
                      + (f"; geomeans {ratio(min(geo), GEOMEAN_BAR, 3)}-{ratio(max(geo), GEOMEAN_BAR, 3)}x, "
                         f"{sum(passes(g, GEOMEAN_BAR) for g in geo)} at "
                         f"or above {GEOMEAN_BAR:.2f}" if geo else "")
                      + f"; {len(fam_now)} of {len(fam_keys)} batches measured, "
                      f"{sum(not passes(p.x, FLOOR) for p in fam_now)} below {FLOOR:.2f}"
                      + _spread(fam_now)
                      + (f", the lowest {ratio(low.x, FLOOR)}x ({_where(low)})" if low else ""),
                      _verdict(all(r["met"] for r in rg), 0 if fails else len(fam_keys) - len(fam_now))))
    if un:
        big = [u["big"] for u in un]
        lines.append((f"uniform, every head count, B >= {UNIFORM_FROM}: no shape below {FLOOR:.2f}x",
                      "; ".join(f"h_q={u['heads']}: {u['big']['current']} of {u['big']['n']} measured"
                                + f", {len(u['big']['below'])} below {FLOOR:.2f}{_spread(u['big']['now'])}"
                                + (f", the lowest {ratio(u['big']['low'].x, _floor(u['heads']))}x "
                                   f"({u['big']['low'].key[1]}, "
                                   f"B={u['big']['low'].key[3]})" if u["big"]["low"] else "")
                                + (f" ({u['big']['older']} with older rules)" if u["big"]["older"] else "")
                                for u in un),
                      _verdict(all(b["met"] for b in big),
                               0 if any(b["low"] and not passes(b["low"].x, FLOOR) for b in big)
                               else sum(b["n"] - b["current"] for b in big))))
        h16 = next((u["all"] for u in un if u["heads"] == 16), None)
        if h16:
            low = h16["low"]
            lines.append((f"uniform h_q=16: every shape, B=1 too, >= {H16_FLOOR:.2f}x",
                          f"{h16['current']} of {h16['n']} measured"
                          + (f", the lowest {ratio(low.x, H16_FLOOR)}x ({low.key[1]}, B={low.key[3]})" if low else ""),
                          _verdict(h16["met"], 0 if low and not passes(low.x, H16_FLOOR)
                                   else h16["n"] - h16["current"])))
    worst = ch["worst"]
    lines.append((f"the choice within {round(100 * (WITHIN - 1))}% of the best option at every problem",
                  f"{ch['within']} of {ch['current']} measured (the best option at {ch['best']})"
                  + (f", the worst {ratio(worst.regret, WITHIN, upper=True)}x ({_where(worst)})"
                     if worst and worst.regret > 1 else "")
                  + f"; of these, held out (no run behind the ratio read by a fit): {ch['held_within']} of "
                  f"{ch['held']}",
                  _verdict(ch["within"] == ch["current"] == ch["n"],
                           0 if ch["within"] < ch["current"] else ch["n"] - ch["current"])))
    now = _current(keys, got)
    served = [p for p in now if p.served_regret is not None]
    untimed = len(now) - len(served)
    ok = [p for p in served if within(p.served_regret)]
    sw = max(served, key=lambda p: p.served_regret, default=None)
    lines.append((f"the same in a server whose context limit is {SERVED_CONTEXT:,} tokens (DeepSeek-V3's): its page "
                  "table that wide, a step reading the narrowest of its widths (powers of two) that holds the longest "
                  "request, the split rule counting on that width (`served_choice`)",
                  f"{len(ok)} of {len(served)} whose choice a run timed"
                  + (f" ({untimed} more take a split count or a launch no run timed)" if untimed else "")
                  + (f"; {len(keys) - len(served) - untimed} not measured at current rules"
                     if len(keys) > len(served) + untimed else "")
                  + (f", the worst {ratio(sw.served_regret, WITHIN, upper=True)}x ({_where(sw)}: {sw.served}, best "
                     f"{sw.best})" if sw and sw.served_regret > 1 else ""),
                  _verdict(len(ok) == len(served) == len(keys), 0 if len(ok) < len(served) else
                           len(keys) - len(served))))
    counts = [p.runs for p in now]
    twice = [_where(p) for p in now if p.runs > 1]
    lines.append((f"each ratio the median of >= {MIN_RUNS} runs",
                  "each ratio is the median of the runs that timed it; problems timed in "
                  + ", ".join(f"{n} run{'s' * (n > 1)}: {counts.count(n)}" for n in sorted(set(counts)))
                  + (f" ({', '.join(twice)})" if 0 < len(twice) <= 3 else "")
                  + f"; in {MIN_RUNS} or more: {sum(n >= MIN_RUNS for n in counts)}",
                  _verdict(len(counts) == len(keys) and all(n >= MIN_RUNS for n in counts), 0)))
    lines.append(("correctness as before (float64 with NaN in unowned slots, graph replays, bf16 and fp16)",
                  "the test suite's on the H200 (results/gpu_suite_h200.md); these runs check only bf16 against "
                  "float64, on the first, last and longest request of each batch", "not judged here"))
    return lines


def to_markdown(board: dict, command: str, gpu: str = "the H200") -> str:
    batches = sorted({k[3] for k in board["keys"] if k[0] == "family"})
    lengths = list(dict.fromkeys(k[1] for k in board["keys"] if k[0] == "uniform"))
    lines = [f"# Issue 52's acceptance on {gpu}: where the project stands", "",
             f"Command: `{command}` (no GPU). Runs read, in the order they ran: "
             + ", ".join(f"`{n}`" for n in board["runs"])
             + ("; skipped, no FlashMLA: " + ", ".join(f"`{n}`" for n in board["skipped"]) if board["skipped"]
                else "") + ".", "",
             "## Verdict", "", "| criterion | where it stands | verdict |", "|---|---|---|"]
    lines += [f"| {c} | {s} | {v} |" for c, s, v in verdicts(board)]
    lines += ["", "x FM = FlashMLA's time over the backend's choice's (`family_bench.x_flashmla`: the median over one "
              "run's rounds; above 1, ours faster). Each problem's ratio is the median over the runs that timed "
              f"FlashMLA on it at or after {board['rules_from']}; '(older)' = only runs before it did, and the latest "
              "of them alone is shown (one run's ratio, not a median; its balanced schedule ran another partition or "
              "stage 2), "
              "counted as unmeasured; '-' = no run did. A value at its bar meets it; one below it that would print at "
              "its bar prints with more decimals. The issue asks each ratio to be the median of at least "
              f"{MIN_RUNS} runs: the section 'Where each ratio comes from' gives the runs behind each."]
    if board["glance"]:
        fam_b = sorted({b for r in board["glance"] for b in r["family"]})
        uni_b = sorted({b for r in board["glance"] for b in r["uniform"]})
        runs = [c["runs"] for r in board["glance"] for kind in ("family", "uniform") for c in r[kind].values()]
        lines += ["", "## At a glance: per head count and batch size", "",
                  "For a server: h_q is the heads a GPU holds (DeepSeek-V3's 128 at tensor parallel 1, 64, 32 "
                  "and 16 at 2, 4 and 8). Each cell is the geomean of x FM [lowest-highest] over the families of "
                  "ragged lengths at that batch size, or over the uniform lengths (1K, 4K, 16K); above 1, ours "
                  f"faster. {_runs_behind(runs)} (the "
                  f"issue asks {MIN_RUNS}); within one run, a problem's rounds spread by a few percent (the "
                  "family-bench files give each round's range). Calls are CUDA-graph replays back to back, L2 not "
                  "flushed: where a batch's whole cache (B x L x 1,152 bytes) fits in L2, as at uniform B=1, B=4 "
                  "below L=16K and B=16 at L=1K, both kernels may find it there from the call before (from the "
                  "sizes, not measured; `back_to_back_h200.md` measures the call before's share at three larger "
                  "shapes). A lowest value under "
                  f"its bar ({FLOOR:.2f}; {H16_FLOOR:.2f} at uniform h_q=16) prints with the decimals that show it.",
                  "",
                  "| h_q | " + " | ".join(f"ragged B={b}" for b in fam_b) + " | "
                  + " | ".join(f"uniform B={b}" for b in uni_b) + " |", "|---" * (1 + len(fam_b) + len(uni_b)) + "|"]
        for r in board["glance"]:
            cells = [r[kind].get(b) for kind, bs in (("family", fam_b), ("uniform", uni_b)) for b in bs]
            bars = [H16_FLOOR if kind == "uniform" and r["heads"] == 16 else FLOOR
                    for kind, bs in (("family", fam_b), ("uniform", uni_b)) for _ in bs]
            lines.append(f"| {r['heads']} | " + " | ".join(
                f"{c['geomean']:.2f} [{ratio(c['low'], bar)}-{c['high']:.2f}]" if c else "-"
                for c, bar in zip(cells, bars)) + " |")
    if board["ragged"]:
        lines += ["", f"## Ragged families: x FM of the choice (bars: geomean >= {GEOMEAN_BAR:.2f}, every batch >= "
                  f"{FLOOR:.2f})", "",
                  "| h_q | family | " + " | ".join(f"B={b}" for b in batches) + " | geomean | lowest | met |",
                  "|---" * (5 + len(batches)) + "|"]
        for r in board["ragged"]:
            tail = (f" | {ratio(r['geomean'], GEOMEAN_BAR, 3)} | {ratio(r['low'].x, FLOOR)} (B={r['low'].key[3]})"
                    if r["low"] else " | - | -")
            lines.append(f"| {r['heads']} | {r['family']} | " + " | ".join(_x(r["picks"].get(b)) for b in batches)
                         + tail + f" | {'yes' if r['met'] else 'no'} |")
    if board["uniform"]:
        lines += ["", f"## Uniform lengths: x FM of the choice (bars: from B={UNIFORM_FROM} >= {FLOOR:.2f}; at "
                  f"h_q=16 every shape >= {H16_FLOOR:.2f})", "",
                  "| h_q | B | " + " | ".join(f"L={x[1:]}" for x in lengths) + " |", "|---" * (2 + len(lengths)) + "|"]
        ukeys = [k for k in board["keys"] if k[0] == "uniform"]
        for h in sorted({k[2] for k in ukeys}):
            for b in sorted({k[3] for k in ukeys if k[2] == h}):
                lines.append(f"| {h} | {b} | " + " | ".join(_x(board["picks"].get(("uniform", x, h, b)),
                                                               H16_FLOOR if h == 16 else FLOOR) for x in lengths)
                             + " |")
    lines += ["", f"## The choice against the best option (within {WITHIN:.2f}x)", "",
              "A problem's choice is judged as its ratio is pooled: on the median over its pooled runs of the "
              "choice's time over that run's best option's (the median of two runs is their mean); 'the best "
              f"option' where that median is 1, 'within' where it is at most {WITHIN:.2f}. The best option named "
              "under 'worst' is the latest run's. 'held out' = the problems none of whose pooled runs a fit of the "
              "choice read (`choice_fit`'s margin, `half_block_fit`'s scale and `split_model_fit`'s stage 2 model read "
              + ", ".join(f"`{n}`" for n in board["fitted"]) + ").", "",
              "| h_q | measured | the best option | within | worst | held out: within |", "|---|---|---|---|---|---|"]
    for c in board["choice"]:
        w = c["worst"]
        lines.append(f"| {c['heads'] or 'all'} | {c['current']} of {c['n']} | {c['best']} | {c['within']} | "
                     + (f"{ratio(w.regret, WITHIN, upper=True)}x ({_where(w)}: {w.choice}, best {w.best})"
                        if w and w.regret > 1 else "-")
                     + f" | {c['held_within']} of {c['held']} |")
    lines += ["", "## Where each ratio comes from", "",
              "'runs' = the runs at the problem's rules that timed FlashMLA on it, the latest named; the ratio is "
              "their median.", "",
              "| set | h_q | B | problems | run | runs |", "|---|---|---|---|---|---|"]
    for s in board["sources"]:
        kind, h, run, commit, older, n = s["what"]
        lines.append(f"| {kind} | {h} | {', '.join(map(str, s['batches']))} | "
                     + (", ".join(s["names"]) if n > 1 else str(s["n"])) + " | "
                     + (f"`{run}`" + (f" ({commit}, older rules)" if older else "") if run else "not measured")
                     + f" | {n} |")
    return "\n".join(lines) + "\n"


def render(paths=None, out=None) -> str:
    """The markdown of the scoreboard on these runs, its command line naming ``out`` and the runs if not the
    default."""
    paths = RUNS if paths is None else paths
    command = "python -m kernel_lab.tools.acceptance" + (
        " --runs " + " ".join(rel(p) for p in paths) if [rel(p) for p in paths] != [rel(p) for p in RUNS] else "") + (
        f" --out {rel(out)}" if out else "")
    runs = load(paths)
    gpus = sorted({r.data["info"]["gpu"] for r in runs})  # the heading names another GPU's runs
    return to_markdown(scoreboard(runs), command, "the H200" if gpus == ["NVIDIA H200"] else " and ".join(gpus))


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", help="family_bench runs' jsons, in the order they ran (default: RUNS)")
    ap.add_argument("--out", help="write the markdown here too (committed: kernel_lab/results/acceptance_h200.md)")
    args = ap.parse_args(argv)
    return print_and_write(ap, args.out, lambda: render(args.runs and [Path(p) for p in args.runs], args.out))


if __name__ == "__main__":
    main()
