"""The split count and the schedule choice with stage 2's cost in both models, scored on every committed H200 timing
set: ``python -m kernel_lab.tools.split_model_fit --out FILE``. No GPU.

The triton backend chooses per batch in two steps: ``workspace.triton_num_kv_splits`` picks the split rule's count S
(waves times pages a program, plus for S > 1 stage 2, ``workspace.stage2_pages``: ``SPLIT_COST_PAGES`` and the merge's
float32 partials, weighed ``MERGE_WEIGHT``, in page-times of all SMs), then ``schedule.prefers_balanced`` compares the
rule at S with the balanced schedule (``schedule.makespans``: both stages, the balanced schedule ``BALANCED_MARGIN``
below). A ``Model`` here varies the three constants of that pair: ``split_cost`` (the second launch, page-times),
``merge_weight`` (the partials' bytes) and ``margin``, and where stage 2 enters the makespans: nowhere (the package
before, ``BEFORE``), on the rule's side only (B * S partial rows at S > 1), or on both (and the balanced schedule's
partial rows, ``schedule.balanced_partials``, with its launch, which always runs: the package, ``PACKAGE``). Every
stage 2 cost here is ``workspace.stage2_pages``, and the count ``triton_num_kv_splits``, with the model's constants.

Every problem of every run that timed the split rule's counts: the family benches (every split count of
``family_bench.SPLITS`` up to the table's width and the balanced schedule), the schedule bench and the headline kernel
bench (every count of ``SPLIT_CHOICES``; the kernel bench has no balanced time, so a choice of it there is 'untimed').
The family bench at 29d1c24 ran an older balanced schedule: its makespan and partials are modelled as it ran
(``long_tail.benched_makespan``, ``long_tail.parts_as_benched`` with the piece cap). A choice within ``WITHIN`` of the
fastest option counts as right (issue 52).
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from kernel_lab.tools import long_tail as lt
from kernel_lab.tools import print_and_write, rel
from mla_edu.files import read_json
from mla_edu.kernels import schedule as sc
from mla_edu.kernels import workspace as ws
from mla_edu.paths import REPO_ROOT, RESULTS_DIR
from mla_edu.util import cdiv

LAB = REPO_ROOT / "kernel_lab" / "results"
OUT = LAB / "split_model_fit_h200.md"
PAGE = 64  # every run's page size
#: (name, file, kind): the committed H200 runs that timed the split rule's counts. kind: "family" (a family bench;
#: "family_benched" where its balanced schedule is modelled as it ran), "schedule" (``tools.schedule_bench``),
#: "kernel" (``tools.kernel_bench``, uniform lengths, no balanced time).
FIT_SETS = (
    ("family 29d1c24", LAB / "family_bench_h200.json", "family_benched"),
    ("family ours a2e9367", LAB / "family_bench_h200_ours_a2e9367.json", "family"),
    ("family fm a2e9367", LAB / "family_bench_h200_fm_a2e9367.json", "family"),
    ("family fm 8acf73a h16", LAB / "family_bench_h200_fm_8acf73a_h16.json", "family"),
    ("family fm 8acf73a h16 uniform", LAB / "family_bench_h200_fm_8acf73a_h16_uniform.json", "family"),
    ("family fm 8acf73a b128", LAB / "family_bench_h200_fm_8acf73a_b128.json", "family"),
    ("family fm 8acf73a b256", LAB / "family_bench_h200_fm_8acf73a_b256.json", "family"),
    ("schedule bench", RESULTS_DIR / "kernel_bench_h200_schedule.json", "schedule"),
    ("kernel bench", RESULTS_DIR / "kernel_bench_h200.json", "kernel"),
    ("kernel bench stage1", RESULTS_DIR / "kernel_bench_h200_stage1.json", "kernel"),
)
#: The runs timed after the models above were written (so none was fitted to them): three whole family benches with
#: FlashMLA and small uniform batches at h_q 32-128 (B 1-16, L 1024 and 2048).
NEW_SETS = (
    ("family fm 4d46283 run 1", LAB / "family_bench_h200_fm_4d46283_run1.json", "family"),
    ("family fm 4d46283 run 2", LAB / "family_bench_h200_fm_4d46283_run2.json", "family"),
    ("family fm 4d46283 run 3", LAB / "family_bench_h200_fm_4d46283_run3.json", "family"),
    ("family ours df92c31 small", LAB / "family_bench_h200_ours_df92c31_small.json", "family"),
)
SETS = FIT_SETS + NEW_SETS
#: A choice within this of the fastest option counts as right (issue 52's 5%).
WITHIN = 1.05
#: Where stage 2's cost enters the makespans (``schedule.stage1_makespans`` plus stage 2).
IN_MAKESPANS = ("none", "rule", "both")


@dataclass(frozen=True)
class Model:
    """The two models' constants: ``split_cost`` page-times for a stage 2 launch, ``merge_weight`` times the
    package's merge bytes, the balanced schedule's ``margin``, and where stage 2 enters ``makespans``."""

    name: str
    split_cost: float
    merge_weight: float
    margin: float
    in_makespans: str

    def __post_init__(self):
        if self.in_makespans not in IN_MAKESPANS:
            raise ValueError(f"expected in_makespans in {IN_MAKESPANS}, got {self.in_makespans!r}")


#: The package's model before stage 2 entered the choice: what every other model is scored against.
BEFORE = Model("before: launch 1, merge 1, margin 0.1, stage 1 only", 1.0, 1.0, 0.1, "none")
#: The package's model: its constants, stage 2 on both sides (``schedule.makespans``).
PACKAGE = Model(f"package: both, launch {ws.SPLIT_COST_PAGES:g}, margin {sc.BALANCED_MARGIN:g}, merge "
                f"x{ws.MERGE_WEIGHT:g}", ws.SPLIT_COST_PAGES, ws.MERGE_WEIGHT, sc.BALANCED_MARGIN, "both")
MODELS = (
    BEFORE,
    Model("merge x1.5 in the count only", 1.0, 1.5, 0.1, "none"),
    Model("merge x1.5, rule side of makespans", 1.0, 1.5, 0.1, "rule"),
    Model("stage 2 on both sides", 1.0, 1.0, 0.1, "both"),
    Model("both, launch 2, margin 0.125", 2.0, 1.0, 0.125, "both"),
    PACKAGE,
)
#: The grid scored around the package's constants, against ``BEFORE``: merge weights, launch costs, margins.
GRID = ((1.0, 1.25, 1.5, 2.0), (1.0, 1.5, 2.0, 3.0), (0.1, 0.11, 0.12, 0.125, 0.13, 0.14, 0.15))


@dataclass(frozen=True)
class Problem:
    """One timed batch: its set, a label, h_q, lengths, table width in pages, SM count, the median time (us) of each
    of mla_edu's options (``split_S``, ``balanced``) and whether its balanced schedule is modelled as benched."""

    set: str
    label: str
    heads: int
    lens: tuple[int, ...]
    width: int
    sms: int
    us: dict
    benched: bool

    def regret(self, option: str) -> float | None:
        """The option's time over the fastest's; None where the run did not time it."""
        return self.us[option] / min(self.us.values()) if option in self.us else None


def _family(name: str, path, benched: bool) -> list[Problem]:
    data = read_json(str(path), name)
    out = []
    for r in data["family"] + data["uniform"]:
        us = {k: statistics.median(v) for k, v in r["us"].items() if k.startswith("split_") or k == "balanced"}
        out.append(Problem(name, f"{r['family']} h{r['heads']} B{r['batch']}", r["heads"], tuple(r["lens"]),
                           cdiv(max(r["lens"]), PAGE), data["info"]["sm_count"], us, benched))
    return out


def _schedule(name: str, path) -> list[Problem]:
    from tools.schedule_choice import problems

    data = read_json(str(path), name)
    out = []
    for kind, lens, r in problems(data):
        us = {f"split_{s}": t for s, t in r["split_us"].items()} | {"balanced": r["balanced_us"]}
        out.append(Problem(name, f"{kind} h{r['heads']} B{r['batch']} {r['lens_median']}/{r['lens_max']}", r["heads"],
                           tuple(lens), cdiv(max(lens), PAGE), data["info"]["sm_count"], us, False))
    return out


def _kernel(name: str, path) -> list[Problem]:
    data = read_json(str(path), name)
    out = []
    for r in data["results"]:
        if r["page"] != PAGE:
            raise ValueError(f"{name}: expected page {PAGE}, got {r['page']}")
        us = {f"split_{s}": t for s, t in r["triton_split_us"].items()}
        out.append(Problem(name, f"uniform h{r['heads']} B{r['batch']} L{r['seq_len']}", r["heads"],
                           (r["seq_len"],) * r["batch"], cdiv(r["seq_len"], PAGE), data["info"]["sm_count"], us,
                           False))
    return out


def load(sets=SETS) -> list[Problem]:
    out = []
    for name, path, kind in sets:
        if kind.startswith("family"):
            out += _family(name, path, kind == "family_benched")
        else:
            out += _schedule(name, path) if kind == "schedule" else _kernel(name, path)
    return out


def stage2_pages(rows: int, p: Problem, model: Model) -> float:
    """``workspace.stage2_pages`` of ``rows`` partial rows of ``p`` with the model's launch cost and merge weight."""
    return ws.stage2_pages(rows, p.heads, p.sms, PAGE, model.split_cost, model.merge_weight)


def rule_splits(p: Problem, model: Model) -> int:
    """``workspace.triton_num_kv_splits`` of ``p`` (its table width) with the model's stage 2 constants."""
    return ws.triton_num_kv_splits(PAGE * p.width, len(p.lens), p.heads, PAGE, p.sms, split_cost=model.split_cost,
                                   merge_weight=model.merge_weight)


def balanced_partials(p: Problem) -> int:
    """Workspace rows the balanced schedule writes as partials: ``schedule.balanced_partials``, or as the run ran it
    where ``p.benched`` (the parts of then, ``long_tail.parts_as_benched``, and the piece cap at every batch)."""
    if not p.benched:
        return sc.balanced_partials(list(p.lens), PAGE, p.heads, p.sms, p.width)
    n = [min(cdiv(max(x, 0), PAGE), p.width) for x in p.lens]
    w = [k + sc.FIXED_OVERHEAD_PAGES for k in n if k > 0]
    chunk = sc.balanced_chunk(w, lt.parts_as_benched(p.heads, p.sms, len(n), p.width), sc.MAX_PIECES)
    return sc.partial_rows(n, chunk)


_STAGE1: dict = {}


def stage1_spans(p: Problem, splits: int) -> tuple[float, float]:
    """``schedule.stage1_makespans`` of ``p`` at ``splits`` (the balanced term as benched where ``p.benched``), kept
    per problem and count: the grid asks for the same ones many times."""
    key = (p.heads, p.lens, p.width, p.sms, p.benched, splits)
    if key not in _STAGE1:
        rule, balanced = sc.stage1_makespans(list(p.lens), PAGE, p.heads, p.sms, splits, p.width)
        _STAGE1[key] = (rule, lt.benched_makespan(list(p.lens), p.heads, p.sms) if p.benched else balanced)
    return _STAGE1[key]


def spans(p: Problem, model: Model) -> tuple[int, float, float]:
    """(the rule's count, its modelled makespan, the balanced schedule's) under ``model``, in page-times."""
    s = rule_splits(p, model)
    rule, balanced = stage1_spans(p, s)
    if model.in_makespans != "none" and s > 1:
        rule += stage2_pages(len(p.lens) * s, p, model)
    if model.in_makespans == "both":
        balanced += stage2_pages(balanced_partials(p), p, model)
    return s, rule, balanced


def choice(p: Problem, model: Model) -> str:
    """The backend's option for ``p`` under ``model``: ``split_S`` or ``balanced`` (modelled ``margin`` below)."""
    s, rule, balanced = spans(p, model)
    return "balanced" if balanced < (1 - model.margin) * rule else f"split_{s}"


def regrets(problems: list[Problem], model: Model) -> list[float | None]:
    return [p.regret(choice(p, model)) for p in problems]


def right(r: float | None) -> bool:
    return r is not None and r <= WITHIN


def against(problems: list[Problem], model: Model, base: list[float | None]) -> tuple[list[Problem], list[Problem]]:
    """(problems right under ``model`` and not at ``base``'s regrets, problems right at ``base`` and not under it)."""
    now = regrets(problems, model)
    return ([p for p, a, b in zip(problems, now, base) if right(a) and not right(b)],
            [p for p, a, b in zip(problems, now, base) if right(b) and not right(a)])


def _change(p: Problem, model: Model) -> str:
    """A problem whose choice changes: ``BEFORE``'s and the model's (count, rule, balanced makespans) and regret."""
    out = []
    for m in (BEFORE, model):
        s, rule, bal = spans(p, m)
        r = p.regret(choice(p, m))
        out.append(f"{choice(p, m)} [S={s}: rule {rule:.1f}, balanced {bal:.1f}] "
                   + (f"{r:.2f}x" if r is not None else "untimed"))
    return f"{p.set}, {p.label}: " + " -> ".join(out)


def _cell(rs: list) -> str:
    timed = [r for r in rs if r is not None]
    untimed = len(rs) - len(timed)
    return (f"{sum(map(right, rs))}, {max(timed, default=1.0):.2f}x" + (f", {untimed} untimed" if untimed else ""))


def render(sets=SETS, out=OUT) -> str:
    problems = load(sets)
    names = [n for n, _, _ in sets]
    scored = {m.name: regrets(problems, m) for m in MODELS}
    base = scored[BEFORE.name]
    lines = ["# Stage 2's cost in the split count and the schedule choice, on every H200 timing set", "",
             f"Command: `python -m kernel_lab.tools.split_model_fit --out {rel(out)}` (no GPU). Inputs: "
             + ", ".join(f"`{rel(p)}`" for _, p, _ in sets) + ".", "",
             f"Per set and model: the problems whose choice is within {WITHIN:.2f}x of the fastest of every timed "
             "split count and the balanced schedule, and the largest regret (choice / fastest; 'untimed': the run "
             "did not time the chosen option). Models: 'launch' = page-times of stage 2's launch (`SPLIT_COST_PAGES`), "
             "'merge' = weight of the merge's partial bytes (`MERGE_WEIGHT`), 'margin' (`BALANCED_MARGIN`), and where "
             "stage 2 enters the makespans: 'none' (stage 1 only), 'rule' (its B x S partial rows at S > 1), 'both' "
             "(and the balanced schedule's partial rows, with its launch, which always runs: `schedule.makespans`). "
             f"The first row is the package before stage 2 entered the choice, the last the package now. 'gained' / "
             f"'lost': problems within {WITHIN:.2f}x under the model and not under the first row, and the reverse. "
             "Timed after the models were written (held out): "
             + (", ".join(n for n, _, _ in NEW_SETS if n in names) or "none") + ".", "",
             "| model | launch | merge | margin | in makespans | " + " | ".join(names) + " | all | gained | lost |",
             "|---" * (8 + len(names)) + "|"]
    for m in MODELS:
        rs = scored[m.name]
        cells = [_cell([r for p, r in zip(problems, rs) if p.set == n]) for n in names]
        gained, lost = against(problems, m, base)
        lines.append(f"| {m.name} | {m.split_cost:g} | {m.merge_weight:g} | {m.margin:g} | {m.in_makespans} | "
                     + " | ".join(cells) + f" | {_cell(rs)} | {len(gained)} | {len(lost)} |")
    lines += ["", f"{len(problems)} problems. Against the package before, per model: the problems it brings within "
              f"{WITHIN:.2f}x (+) and those it loses (-).", ""]
    for m in MODELS[1:]:
        gained, lost = against(problems, m, base)
        lines.append(f"- {m.name}: " + "; ".join(f"{sign} {_change(p, m)}" for sign, ps in (("+", gained), ("-", lost))
                                                  for p in ps))
    meets = [m.name for m in MODELS[1:] if (lambda g, lo: g and not lo)(*against(problems, m, base))]
    lines += ["", f"Bring more problems within {WITHIN:.2f}x and lose none: " + (", ".join(meets) or "none") + ".",
              "", "## The grid, stage 2 on both sides", "",
              "Gained / lost against the package before at each merge weight, launch cost and margin.", "",
              "| merge | launch | " + " | ".join(f"margin {g:g}" for g in GRID[2]) + " |", "|---" * (2 + len(GRID[2]))
              + "|"]
    for k in GRID[0]:
        for a in GRID[1]:
            cells = []
            for mg in GRID[2]:
                gained, lost = against(problems, Model("grid", a, k, mg, "both"), base)
                cells.append(f"+{len(gained)} -{len(lost)}")
            lines.append(f"| {k:g} | {a:g} | " + " | ".join(cells) + " |")
    lines += ["", "## The pair no count model separates", "",
              "The split count's model sees programs, pages a program and partial bytes. Two problems alike in all "
              "three, from runs of different stage-1 kernels, want opposite counts:", "",
              "| set | problem | programs at S, S/2 | pages a program | partial rows x heads | S / S/2 time |",
              "|---|---|---|---|---|---|"]
    for set_name, label, s in PAIR:
        p = next(x for x in problems if x.set == set_name and x.label == label)
        hb = cdiv(p.heads, ws.gpu_block_h(p.heads, len(p.lens), p.width))
        programs = len(p.lens) * hb
        lines.append(f"| {p.set} | {p.label} | {programs * s}, {programs * s // 2} | {cdiv(p.width, s)}, "
                     f"{cdiv(p.width, s // 2)} | {len(p.lens) * s * p.heads}, {len(p.lens) * s // 2 * p.heads} | "
                     f"{p.us[f'split_{s}'] / p.us[f'split_{s // 2}']:.2f} |")
    return "\n".join(lines) + "\n"


#: (set, problem, S): the kernel bench's h_q=128, B=1, L=2048 (its Gluon 'tma' stage 1) and the ours-alone family
#: bench's h_q=64, B=4, L=1024 (the seesaw), at the split rule's count S and S / 2.
PAIR = (("kernel bench", "uniform h128 B1 L2048", 32), ("family ours a2e9367", "L1024 h64 B4", 16))


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the markdown here (committed: kernel_lab/results/"
                                  "split_model_fit_h200.md)")
    args = ap.parse_args(argv)
    return print_and_write(ap, args.out, lambda: render(out=args.out or OUT))


if __name__ == "__main__":
    main()
