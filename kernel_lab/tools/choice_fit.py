"""The triton backend's per-batch choice (the split rule or the balanced schedule), fitted on families of batches and
scored on families left out: ``python -m kernel_lab.tools.choice_fit --out FILE``. No GPU: it reads the measured
times of the family bench's H200 run (``kernel_lab.tools.family_bench``) and of the earlier uniform grid
(``tools.schedule_bench``).

The backend took the balanced schedule where its model of stage 1 was ``margin`` below the split rule's at the rule's
count (``schedule.prefers_balanced`` before stage 2 entered it, margin ``STAGE1_MARGIN``; the package's model now adds
stage 2 on both sides: ``kernel_lab/results/split_model_fit_h200.md``). These are stage-1 models scored with the counts
the runs stored. Two models of the rule's makespan are scored: the lower bound the backend used until the family bench
(``lower_bound_makespans``: the longest program, or the programs' total spread evenly over the GPU's slots) and the
package's (``schedule.stage1_makespans``: the
programs handed to the slots in launch order, so that a long request's programs launched last run alone). Both score
the balanced schedule as the measured runs ran it (``launch_order_makespans``): its model in the package has changed
since, for a kernel these times did not measure. For each
model and each margin of ``MARGINS``, every problem's choice is timed against the best of every split count and
the balanced schedule (its regret, choice / best). The margin is fitted by leave-one-family-out (``lofo``): for
each family, the margin best on all the other families (``fit_margin``: fewest problems over ``WITHIN``, then the
smallest max regret, then the smallest geomean regret, then the one nearest ``STAGE1_MARGIN``) is scored on the family
held out. Two ceilings: the better of the two options the choice picks from ("best of two", a perfect choice),
and the best option (every split count and the balanced schedule), so that what the choice loses and what the kernel
loses against FlashMLA read apart.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from kernel_lab.tools import long_tail as lt
from kernel_lab.tools import print_and_write, rel
from mla_edu.files import read_json
from mla_edu.kernels import schedule as sc
from mla_edu.kernels.workspace import PROGRAMS_PER_SM, gpu_block_h
from mla_edu.paths import REPO_ROOT, RESULTS_DIR
from mla_edu.util import cdiv

FAMILY_BENCH = REPO_ROOT / "kernel_lab" / "results" / "family_bench_h200.json"
UNIFORM_GRID = RESULTS_DIR / "kernel_bench_h200_schedule.json"
OUT = REPO_ROOT / "kernel_lab" / "results" / "choice_fit_h200.md"
PAGE = 64  # both benches' page size
#: The package's margin while its choice modelled stage 1 only (``split_model_fit.BEFORE``): the margin these models
#: were fitted around.
STAGE1_MARGIN = 0.1
#: Margins scored, -0.1 to 0.3 by 0.05 (a negative margin takes the balanced schedule where it is modelled slower).
MARGINS = tuple(round(-0.1 + 0.05 * i, 2) for i in range(9))
#: A choice within this of the best option counts as right (issue 52's 5%).
WITHIN = 1.05
MODELS = ("lower bound", "launch order")
#: The set names of the uniform rows: the family bench's (cut short by its deadline) and the earlier grid's.
UNIFORM, GRID = "uniform", "uniform grid"


@dataclass(frozen=True)
class Problem:
    """One measured batch: its family (or uniform set), head count, lengths, the split rule's count, the median time
    of each of mla_edu's options (``split_S``, ``balanced``) and FlashMLA's time over each option's, the median of
    the round-by-round ratio (families only, else empty)."""

    family: str
    heads: int
    lens: tuple[int, ...]
    rule_splits: int
    us: dict
    x_flashmla: dict

    @property
    def rule(self) -> str:
        return f"split_{self.rule_splits}"

    @property
    def best(self) -> str:
        return min(self.us, key=self.us.get)

    def regret(self, option: str) -> float:
        return self.us[option] / self.us[self.best]

    def best_of_two(self) -> str:
        return min((self.rule, "balanced"), key=self.us.get)


def load(family_bench=FAMILY_BENCH, uniform_grid=UNIFORM_GRID) -> tuple[list[Problem], int]:
    """The problems of both runs (the family bench's families and uniform rows, the grid's uniform rows) and the SM
    count they ran on."""
    from kernel_lab.tools.family_bench import median_us, mla_options, x_flashmla

    fb, grid = read_json(family_bench, "--family-bench"), read_json(uniform_grid, "--uniform-grid")
    sms = fb["info"]["sm_count"]
    if grid["info"]["sm_count"] != sms:
        raise ValueError(f"expected both runs on one GPU, got {sms} and {grid['info']['sm_count']} SMs")
    out = []
    for kind in ("family", "uniform"):
        for r in fb[kind]:
            x = {k: x_flashmla(r, k)[0] for k in mla_options(r)} if kind == "family" and "flashmla" in r["us"] else {}
            out.append(Problem(r["family"] if kind == "family" else UNIFORM, r["heads"], tuple(r["lens"]),
                               r["rule_splits"], {k: median_us(r, k) for k in mla_options(r)}, x))
    for r in grid["uniform"]:
        us = {f"split_{s}": t for s, t in r["split_us"].items()} | {"balanced": r["balanced_us"]}
        out.append(Problem(GRID, r["heads"], (r["lens_max"],) * r["batch"], r["rule_splits"], us, {}))
    return out, sms


def benched_balanced(lens, page_size: int, heads: int, sm_count: int) -> int:
    """The balanced schedule's modelled makespan as the family bench ran it (29d1c24,
    ``long_tail.benched_makespan``: the piece cap at every batch, one program of the split rule's head block a
    part). The package's has changed since (``schedule.max_pieces`` lifts the cap; at 32 heads and few requests it
    runs 16-head programs, ``workspace.HALF_BLOCK_BATCH``), and the times scored here are those of the schedule that
    ran. On the uniform grid's batches (h_q 16 and 128) the two models are the same
    (``kernel_lab/tests/test_choice_fit.py``)."""
    if page_size != lt.PAGE:
        raise ValueError(f"expected the benches' page size {lt.PAGE}, got {page_size}")
    return lt.benched_makespan(list(lens), heads, sm_count)


def launch_order_makespans(lens, page_size: int, heads: int, sm_count: int, num_splits: int) -> tuple[float, int]:
    """``schedule.stage1_makespans``'s rule term (the rule's programs handed to the slots in launch order) and
    ``benched_balanced``: stage 1 only, as the package modelled the choice when these runs were timed."""
    return (sc.stage1_makespans(lens, page_size, heads, sm_count, num_splits)[0],
            benched_balanced(lens, page_size, heads, sm_count))


def lower_bound_makespans(lens, page_size: int, heads: int, sm_count: int, num_splits: int) -> tuple[float, float]:
    """``schedule.makespans`` as it was before the family bench (``git show 7e95aeb^:mla_edu/kernels/schedule.py``):
    the rule's programs (``ceil(n_b / S) + FIXED_OVERHEAD_PAGES`` page-times, per split and head block) at least
    the longest and at least their total spread over the slots; the balanced schedule's term as benched
    (``benched_balanced``)."""
    n = [cdiv(max(int(x), 0), page_size) for x in lens]
    block_h = gpu_block_h(heads, len(n), max(n + [1]))
    slots = PROGRAMS_PER_SM[block_h] * sm_count
    programs = [cdiv(k, num_splits) + sc.FIXED_OVERHEAD_PAGES for k in n if k > 0
                for _ in range(num_splits)] * cdiv(heads, block_h)
    rule = max(max(programs, default=0), sum(programs) / slots)
    return rule, benched_balanced(lens, page_size, heads, sm_count)


def modelled(problems: list[Problem], sms: int) -> dict:
    """``{model: [(rule, balanced) makespans per problem]}``."""
    fns = {"lower bound": lower_bound_makespans, "launch order": launch_order_makespans}
    return {m: [fns[m](p.lens, PAGE, p.heads, sms, p.rule_splits) for p in problems] for m in MODELS}


def choose(p: Problem, spans: tuple[float, float], margin: float) -> str:
    """``schedule.prefers_balanced``'s rule at ``margin``: the balanced schedule where modelled ``margin`` below the
    rule."""
    rule, balanced = spans
    return "balanced" if balanced < (1 - margin) * rule else p.rule


def score(regrets: list[float]) -> dict:
    """Problems, how many within ``WITHIN`` of the best, the max and geomean regret."""
    return {"problems": len(regrets), "within": sum(x <= WITHIN for x in regrets),
            "max": max(regrets, default=1.0), "geomean": statistics.geometric_mean(regrets) if regrets else 1.0}


def margin_scores(problems: list[Problem], spans: list, margins=MARGINS) -> dict:
    """``{margin: score}`` of the choices at each margin of ``margins`` on ``problems``."""
    return {m: score([p.regret(choose(p, sp, m)) for p, sp in zip(problems, spans)]) for m in margins}


def best_margin(scores: dict) -> float:
    """The margin of ``scores`` (``margin_scores``) whose choices are best: fewest over ``WITHIN``, then the smallest
    max regret, then the smallest geomean, then the nearest ``STAGE1_MARGIN``."""
    def key(m):
        s = scores[m]
        return (s["problems"] - s["within"], round(s["max"], 9), round(s["geomean"], 9), abs(m - STAGE1_MARGIN))
    return min(scores, key=key)


def fit_margin(problems: list[Problem], spans: list, margins=MARGINS) -> float:
    """The margin of ``margins`` whose choices are best on ``problems`` (``best_margin``)."""
    return best_margin(margin_scores(problems, spans, margins))


def families(problems: list[Problem]) -> list[str]:
    return list(dict.fromkeys(p.family for p in problems))


def lofo(problems: list[Problem], spans: list, margins=MARGINS) -> dict:
    """``{family: (margin fitted on the other families, [choice per problem of the family])}``."""
    out = {}
    for fam in families(problems):
        rest = [(p, s) for p, s in zip(problems, spans) if p.family != fam]
        m = fit_margin([p for p, _ in rest], [s for _, s in rest], margins)
        out[fam] = (m, [choose(p, s, m) for p, s in zip(problems, spans) if p.family == fam])
    return out


def held_out_choices(problems: list[Problem], fits: dict) -> list[str]:
    """Each problem's choice at the margin fitted without its family (``fits``: ``lofo``'s result)."""
    choices = {f: iter(c) for f, (_, c) in fits.items()}
    return [next(choices[p.family]) for p in problems]


def run(family_bench=FAMILY_BENCH, uniform_grid=UNIFORM_GRID) -> dict:
    problems, sms = load(family_bench, uniform_grid)
    spans = modelled(problems, sms)
    grid = {m: margin_scores(problems, spans[m]) for m in MODELS}
    fits = {m: lofo(problems, spans[m]) for m in MODELS}
    return {"problems": problems, "sms": sms, "grid": grid, "fitted": {m: best_margin(grid[m]) for m in MODELS},
            "lofo": fits, "held_out": {m: held_out_choices(problems, fits[m]) for m in MODELS}}


def best_x_flashmla(problems: list[Problem], heads=(16, 32, 64, 128)) -> dict:
    """{h_q: geomean over the family batches of FlashMLA's time / the best option's}: where the kernel stands
    against FlashMLA whatever the choice (the essay and docs/results.md quote it)."""
    return {h: statistics.geometric_mean([p.x_flashmla[p.best] for p in problems if p.heads == h and p.x_flashmla])
            for h in heads}


def _x(values: list[float]) -> str:
    return f"{statistics.geometric_mean(values):.2f} / {min(values):.2f}" if values else "-"


def _s(s: dict) -> str:
    return f"{s['within']}/{s['problems']}, {s['max']:.2f}x"


def to_markdown(result: dict, command: str, inputs: list[str]) -> str:
    problems, new = result["problems"], "launch order"
    held = {m: [p.regret(c) for p, c in zip(problems, result["held_out"][m])] for m in MODELS}
    two = [p.regret(p.best_of_two()) for p in problems]
    lines = [f"# The split rule or the balanced schedule, fitted on families of batches ({result['sms']} SMs)", "",
             f"Command: `{command}` (no GPU). Inputs: {', '.join(f'`{x}`' for x in inputs)}.", "",
             f"Per problem, the choice's time over the best of every split count and the balanced schedule (its "
             f"regret; 'within' = at most {WITHIN:.2f}x). 'lower bound' = the rule's makespan modelled as the longest "
             "program or the total over the slots (the backend's model until the family bench); 'launch order' = "
             "`schedule.stage1_makespans`'s (the programs handed to the slots in launch order). The balanced "
             "schedule's makespan is modelled as the family bench ran it (`choice_fit.benched_balanced`: the piece cap "
             "at every batch, the split rule's head block); the package's balanced schedule has changed since. It is "
             "chosen where its model is the margin below the rule's (stage 1 only, margin `choice_fit.STAGE1_MARGIN` "
             f"= {STAGE1_MARGIN}: the package's choice before stage 2 entered it, `split_model_fit_h200.md`). 'best of "
             "two' = the better of the rule and the "
             "balanced schedule, what a perfect choice reaches. Families: the family bench's 8 at h_q 16-128 and "
             f"B 16-256; '{UNIFORM}' = its uniform rows (cut by its deadline); '{GRID}' = the earlier schedule "
             "bench's uniform grid (h_q 16 and 128, B 1-128, L 1K-16K).", "",
             "## Every margin, all problems", "",
             "| margin | " + " | ".join(f"{m}: within, max" for m in MODELS) + " |", "|---" * (1 + len(MODELS)) + "|"]
    for mg in MARGINS:
        lines.append(f"| {mg:.2f} | " + " | ".join(_s(result["grid"][m][mg]) for m in MODELS) + " |")
    lines += ["", "Fitted on all problems: " + ", ".join(f"{m} {result['fitted'][m]:.2f}" for m in MODELS)
              + f". Best of two: {_s(score(two))}.", "",
              "## Each family held out", "",
              "The margin fitted on the other families, scored on the family.", "",
              "| family | problems | " + " | ".join(f"{m}: margin, within, max" for m in MODELS)
              + " | best of two: within, max |", "|---" * (3 + len(MODELS)) + "|"]
    for fam in families(problems):
        idx = [i for i, p in enumerate(problems) if p.family == fam]
        cells = [f"{result['lofo'][m][fam][0]:.2f}, {_s(score([held[m][i] for i in idx]))}" for m in MODELS]
        lines.append(f"| {fam} | {len(idx)} | " + " | ".join(cells) + f" | {_s(score([two[i] for i in idx]))} |")
    lines.append(f"| all | {len(problems)} | " + " | ".join(f"-, {_s(score(held[m]))}" for m in MODELS)
                 + f" | {_s(score(two))} |")
    lines += ["", "## By head count", "",
              f"The {new} model's choice at the margin fitted without its family. 'x FM' = FlashMLA's time over "
              "mla_edu's (the median of the round-by-round ratio), geomean / min over the families' problems (FlashMLA "
              "ran in the family bench only); above 1, mla_edu is faster.", "",
              "| h_q | problems | choice: within, max | best of two: within, max | x FM choice | x FM best of two "
              "| x FM best option |", "|---" * 7 + "|"]
    for h in sorted({p.heads for p in problems}):
        idx = [i for i, p in enumerate(problems) if p.heads == h]
        fm = [i for i in idx if problems[i].x_flashmla]
        lines.append(f"| {h} | {len(idx)} | {_s(score([held[new][i] for i in idx]))} | "
                     f"{_s(score([two[i] for i in idx]))} | "
                     f"{_x([problems[i].x_flashmla[result['held_out'][new][i]] for i in fm])} | "
                     f"{_x([problems[i].x_flashmla[problems[i].best_of_two()] for i in fm])} | "
                     f"{_x([problems[i].x_flashmla[problems[i].best] for i in fm])} |")
    lines += ["", f"## Over {WITHIN:.2f}x, held out", "",
              "| model | family | h_q | B | lengths min / median / max | choice | choice us | best | best us "
              "| choice / best |",
              "|---" * 10 + "|"]
    for m in MODELS:
        for p, c in zip(problems, result["held_out"][m]):
            if p.regret(c) > WITHIN:
                lens = f"{min(p.lens)} / {int(statistics.median(p.lens))} / {max(p.lens)}"
                lines.append(f"| {m} | {p.family} | {p.heads} | {len(p.lens)} | {lens} | {c} | {p.us[c]:.1f} | "
                             f"{p.best} | {p.us[p.best]:.1f} | {p.regret(c):.2f} |")
    return "\n".join(lines) + "\n"


def render(family_bench=FAMILY_BENCH, uniform_grid=UNIFORM_GRID, out=None) -> str:
    """The markdown of a fit on these runs, its command line naming ``out`` and any input not the default."""
    inputs = [rel(family_bench), rel(uniform_grid)]
    command = "python -m kernel_lab.tools.choice_fit" + "".join(
        f" {flag} {x}" for flag, x, default in (("--family-bench", inputs[0], FAMILY_BENCH),
                                                 ("--uniform-grid", inputs[1], UNIFORM_GRID))
        if x != rel(default)) + (f" --out {rel(out)}" if out else "")
    return to_markdown(run(family_bench, uniform_grid), command, inputs)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family-bench", default=str(FAMILY_BENCH), help="a family_bench run's json")
    ap.add_argument("--uniform-grid", default=str(UNIFORM_GRID), help="a schedule_bench run's json")
    ap.add_argument("--out", help="write the markdown here too (committed: kernel_lab/results/choice_fit_h200.md)")
    args = ap.parse_args(argv)
    return print_and_write(ap, args.out, lambda: render(args.family_bench, args.uniform_grid, args.out))


if __name__ == "__main__":
    main()
