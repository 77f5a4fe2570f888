"""``schedule.HALF_BLOCK_PAGE_COST`` fitted on the backend's choice at h_q=32 where the balanced schedule runs 16
heads a program (B <= ``workspace.HALF_BLOCK_BATCH``): ``python -m kernel_lab.tools.half_block_fit --out FILE``. No
GPU: it reads two family-bench runs on the H200 at a2e9367 (ours alone over every batch, and the B=16 and B=64 batches
with FlashMLA), which timed every split count and the balanced schedule.

``schedule.makespans`` counts the balanced schedule's makespan in 16-head page-times there and scales it by the cost
into the split rule's 32-head page-times; ``schedule.prefers_balanced`` then compares. For each cost of ``COSTS`` every
problem's choice is timed against the best option (its regret, choice / best). The cost is fitted on all problems
(``fit``: most problems within ``WITHIN``, then the smallest max regret, then the smallest geomean regret) and by
leave-one-family-out: for each family (a uniform length is one), the cost best on the others, scored on it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from kernel_lab.tools import family_bench as fb
from kernel_lab.tools import markdown_main, rel
from mla_edu.files import read_json
from mla_edu.kernels import schedule as sc
from mla_edu.kernels.workspace import HALF_BLOCK_BATCH
from mla_edu.paths import REPO_ROOT

RUNS = tuple(REPO_ROOT / "kernel_lab" / "results" / f"family_bench_h200_{n}_a2e9367.json" for n in ("ours", "fm"))
OUT = REPO_ROOT / "kernel_lab" / "results" / "half_block_fit_h200.md"
PAGE = 64  # the bench's page size
HEADS = 32  # the one head count whose balanced programs take half the rule's heads
#: Costs scored: 0.5 to 1.0 by 0.02.
COSTS = tuple(round(0.5 + 0.02 * i, 2) for i in range(26))
#: A choice within this of the best option counts as right (issue 52's 5%).
WITHIN = 1.05


@dataclass(frozen=True)
class Problem:
    """One measured batch: its run (``ours`` or ``fm``, from the file's name), family (or uniform length), lengths,
    the split rule's count today (``family_bench.rule_splits_now``) and the median time (us) of each option
    (``split_S``, ``balanced``)."""

    run: str
    family: str
    lens: tuple[int, ...]
    rule_splits: int
    us: dict

    def regret(self, cost: float, sms: int) -> float:
        """The choice's time over the best option's, with ``cost`` as ``prefers_balanced``'s ``half_block_cost``."""
        balanced = sc.prefers_balanced(list(self.lens), PAGE, HEADS, sms, self.rule_splits, half_block_cost=cost)
        choice = "balanced" if balanced else f"split_{self.rule_splits}"
        return self.us[choice] / min(self.us.values())


def problems(runs=RUNS) -> tuple[list[Problem], int]:
    """The h_q=32 batches of at most ``HALF_BLOCK_BATCH`` requests of every run, and the runs' SM count."""
    out, sms = [], set()
    for path in runs:
        data = read_json(str(path), "family bench json")
        sms.add(data["info"]["sm_count"])
        for r in data["family"] + data["uniform"]:
            if r["heads"] == HEADS and r["batch"] <= HALF_BLOCK_BATCH:
                us = {k: statistics.median(v) for k, v in r["us"].items() if k == "balanced" or k.startswith("split_")}
                run = path.stem.removeprefix("family_bench_h200_").split("_")[0]
                out.append(Problem(run, r["family"], tuple(r["lens"]), fb.rule_splits_now(r, data["info"]["sm_count"]),
                                   us))
    if len(sms) != 1:
        raise ValueError(f"the runs were made on GPUs of different SM counts: {sorted(sms)}")
    return out, sms.pop()


def score(probs: list[Problem], cost: float, sms: int) -> tuple[int, float, float]:
    """(problems within WITHIN, max regret, geomean regret) at ``cost``."""
    r = [p.regret(cost, sms) for p in probs]
    return sum(x <= WITHIN for x in r), max(r), statistics.geometric_mean(r)


def fit(probs: list[Problem], sms: int) -> float:
    """The cost of ``COSTS`` with the most problems within WITHIN, then the smallest max and geomean regret."""
    return min(COSTS, key=lambda c: (lambda s: (-s[0], s[1], s[2]))(score(probs, c, sms)))


def render(runs=RUNS) -> str:
    probs, sms = problems(runs)
    best = fit(probs, sms)
    lines = ["# The cost of a 16-head page-time in the backend's choice at h_q=32 (H200)", "",
             f"Command: `python -m kernel_lab.tools.half_block_fit --out {rel(OUT)}` (no GPU). Inputs: "
             + ", ".join(f"`{rel(p)}`" for p in runs) + ".", "",
             f"{len(probs)} problems: the batches at h_q={HEADS} with at most {HALF_BLOCK_BATCH} requests (the "
             "balanced schedule's programs there take 16 heads, the split rule's 32) of each run, "
             f"{len({(p.family, p.lens) for p in probs})} distinct batches: the families at B=16 are in both runs. "
             "Per cost: the problems whose "
             f"choice is within {WITHIN:.2f}x of the best option (every split count and the balanced schedule), the "
             "largest and the geomean regret (choice / best), and the problems outside.", "",
             "| cost | within | max regret | geomean regret | outside |", "|---|---|---|---|---|"]
    for c in COSTS:
        n, worst, geo = score(probs, c, sms)
        out = [f"{p.family} B={len(p.lens)} ({p.run}) {p.regret(c, sms):.2f}" for p in probs
               if p.regret(c, sms) > WITHIN]
        mark = "**" if c == best else ""
        lines.append(f"| {mark}{c:.2f}{mark} | {n} / {len(probs)} | {worst:.2f} | {geo:.3f} | "
                     f"{'; '.join(sorted(out)) or '-'} |")
    lines += ["", f"Fitted on all: **{best:.2f}** (the package's `schedule.HALF_BLOCK_PAGE_COST`: "
              f"{sc.HALF_BLOCK_PAGE_COST}).", "", "Leave one family out: the cost fitted on the others, scored on it.",
              "", "| family held out | problems | cost | within | max regret |", "|---|---|---|---|---|"]
    for fam in sorted({p.family for p in probs}):
        held = [p for p in probs if p.family == fam]
        c = fit([p for p in probs if p.family != fam], sms)
        n, worst, _ = score(held, c, sms)
        lines.append(f"| {fam} | {len(held)} | {c:.2f} | {n} / {len(held)} | {worst:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    return markdown_main(__doc__, render, argv)


if __name__ == "__main__":
    main()
