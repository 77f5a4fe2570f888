"""Are the choice's constants per GPU? The split count's and the schedule choice's three constants refitted on the
H100's two family benches: ``python -m kernel_lab.tools.per_gpu_fit --out FILE``. No GPU.

The package's constants (``SPLIT_COST_PAGES``, ``MERGE_WEIGHT``, ``BALANCED_MARGIN``) were fitted on the H200
(``split_model_fit_h200.md``). Here every point of ``GRID`` (stage 2 on both sides of the choice, as the package) is
scored on the H100's problems, each problem's time of each option the median of the runs that timed it
(``acceptance.H100_RUNS``): on all of them, and left out one family at a time (the constants best on the other
families, scored on the family; ``fit``: most problems within ``WITHIN`` of the fastest option, then the smallest
worst regret, then the nearest the package's). Then the constants best on the H100, scored on the H200's timing
sets of ``split_model_fit.SETS``: whether one set of constants serves both GPUs.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from functools import cache

from kernel_lab.tools import print_and_write, rel
from kernel_lab.tools import split_model_fit as smf
from kernel_lab.tools.acceptance import H100_RUNS
from mla_edu.paths import REPO_ROOT

OUT = REPO_ROOT / "kernel_lab" / "results" / "per_gpu_fit_h100.md"
#: merge weights, launch costs (page-times), margins: split_model_fit's grid, the launch cost taken further up
GRID = ((1.0, 1.25, 1.5, 2.0, 3.0), (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0), (0.1, 0.125, 0.15))
WITHIN = smf.WITHIN


def h100_problems() -> list[smf.Problem]:
    """The H100 runs' problems, one per batch, each option's time the median over the runs (``smf.Problem``)."""
    runs = [smf.load([(f"h100 run {i + 1}", path, "family")]) for i, path in enumerate(H100_RUNS)]
    by_label: dict = {}
    for run in runs:
        for p in run:
            by_label.setdefault(p.label, []).append(p)
    out = []
    for label, ps in by_label.items():
        us = {k: statistics.median(p.us[k] for p in ps if k in p.us) for k in ps[0].us}
        out.append(smf.Problem("h100", label, ps[0].heads, ps[0].lens, ps[0].width, ps[0].sms, us, False))
    return out


def family(p: smf.Problem) -> str:
    """The problem's family (its label's first word), 'uniform' for the uniform rows (labels ``L<len> h.. B..``)."""
    first = p.label.split()[0]
    return "uniform" if first.startswith("L") and first[1:].isdigit() else first


def model(merge: float, launch: float, margin: float) -> smf.Model:
    return smf.Model(f"merge {merge:g}, launch {launch:g}, margin {margin:g}", launch, merge, margin, "both")


PACKAGE = model(smf.PACKAGE.merge_weight, smf.PACKAGE.split_cost, smf.PACKAGE.margin)
MODELS = [model(*c) for c in itertools.product(*GRID)]


def score(problems, m: smf.Model) -> tuple[int, float]:
    """(problems within ``WITHIN``, the worst regret) of ``m``'s choices."""
    rs = smf.regrets(problems, m)
    return sum(map(smf.right, rs)), max(r for r in rs if r is not None)


def fit(problems) -> smf.Model:
    """The grid's best on ``problems``: most within, then the smallest worst regret, then nearest the package's."""
    def key(m):
        n, worst = score(problems, m)
        near = (abs(m.split_cost - PACKAGE.split_cost), abs(m.merge_weight - PACKAGE.merge_weight),
                abs(m.margin - PACKAGE.margin))
        return (-n, round(worst, 6), near)
    return min(MODELS, key=key)


def _cell(n: int, total: int, worst: float) -> str:
    return f"{n}/{total}, {worst:.2f}x"


@cache
def numbers() -> dict:
    """Everything the markdown and the essay's sentences say: the H100's problems scored under the package's
    constants and the grid's best, each family held out, and both sets of constants on the H200's timing sets."""
    h100 = h100_problems()
    best = fit(h100)
    held = []
    for f in sorted({family(p) for p in h100}):
        mine = [p for p in h100 if family(p) == f]
        m = fit([p for p in h100 if family(p) != f])
        held.append(dict(family=f, n=len(mine), model=m, score=score(mine, m), package=score(mine, PACKAGE)))
    h200 = smf.load(smf.SETS)
    on_h200 = {}
    for m in (PACKAGE, best):
        rs = smf.regrets(h200, m)
        on_h200[m.name] = (sum(map(smf.right, rs)), max(r for r in rs if r is not None))
    best_regrets = smf.regrets(h100, best)
    return dict(problems=len(h100), package=score(h100, PACKAGE), best=best, best_score=score(h100, best),
                missed=[(p.label, smf.choice(p, best), r) for p, r in zip(h100, best_regrets) if not smf.right(r)],
                held=held, held_within=sum(h["score"][0] for h in held),
                held_worst=max(h["score"][1] for h in held), h200_problems=len(h200), on_h200=on_h200)


def render(out=OUT) -> str:
    x = numbers()
    best, total = x["best"], x["problems"]
    lines = ["# The choice's constants refitted on the H100", "",
             f"Command: `python -m kernel_lab.tools.per_gpu_fit --out {rel(out)}` (no GPU). Inputs: "
             + ", ".join(f"`{rel(p)}`" for p in H100_RUNS) + f" (each option's time the median of the {len(H100_RUNS)} "
             "runs), and for the last table the H200 timing sets of `split_model_fit.SETS`.", "",
             f"A choice is right within {WITHIN:.2f}x of the fastest option it could take (every timed split count and "
             "the balanced schedule). 'launch' = `SPLIT_COST_PAGES` (page-times), 'merge' = `MERGE_WEIGHT`, 'margin' = "
             f"`BALANCED_MARGIN`; grid: merge {', '.join(f'{v:g}' for v in GRID[0])}; launch "
             f"{', '.join(f'{v:g}' for v in GRID[1])}; margin {', '.join(f'{v:g}' for v in GRID[2])}.", "",
             "## All H100 problems", "",
             "| constants | launch | merge | margin | within, worst |", "|---|---|---|---|---|"]
    for name, m, (n, worst) in (("the package's (fitted on the H200)", PACKAGE, x["package"]),
                                ("the grid's best on the H100", best, x["best_score"])):
        lines.append(f"| {name} | {m.split_cost:g} | {m.merge_weight:g} | {m.margin:g} | {_cell(n, total, worst)} |")
    lines += ["", "Missed by the grid's best: " + ("; ".join(f"{label} ({c}, {r:.2f}x)" for label, c, r in x["missed"])
                                                  or "none") + ".", "",
              "## Each family held out", "",
              "The constants best on the other H100 families, scored on the family.", "",
              "| family | problems | launch | merge | margin | within, worst | the package's: within, worst |",
              "|---|---|---|---|---|---|---|"]
    for h in x["held"]:
        m = h["model"]
        lines.append(f"| {h['family']} | {h['n']} | {m.split_cost:g} | {m.merge_weight:g} | {m.margin:g} | "
                     f"{_cell(*h['score'][:1], h['n'], h['score'][1])} | "
                     f"{_cell(*h['package'][:1], h['n'], h['package'][1])} |")
    lines.append(f"| all, held out | {total} | | | | {_cell(x['held_within'], total, x['held_worst'])} | "
                 f"{_cell(x['package'][0], total, x['package'][1])} |")
    lines += ["", "## The H100's best constants on the H200", "",
              "Every H200 timing set of `split_model_fit.SETS`, scored under the package's constants and under the "
              "grid's best on the H100.", "", "| constants | H200: within, worst |", "|---|---|"]
    for name, m in (("the package's", PACKAGE), ("the grid's best on the H100", best)):
        n, worst = x["on_h200"][m.name]
        lines.append(f"| {name} ({m.name}) | {_cell(n, x['h200_problems'], worst)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the markdown here (committed: kernel_lab/results/per_gpu_fit_h100.md)")
    args = ap.parse_args(argv)
    return print_and_write(ap, args.out, lambda: render(out=args.out or OUT))


if __name__ == "__main__":
    main()
