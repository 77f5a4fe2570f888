"""The rule that decides whether a stage-2 patch lands, fixed before its H200 A/B ran (the device ran it as a script
between the A/Bs and the suite; committed here after, it regenerates that output): ``python -m
kernel_lab.tools.stage2_pick DIR/partition_ab.json ...`` (each A/B's folder named for its patch in
``kernel_lab/results/stage2_variants/``; no GPU). A patch is taken where, over the A/B's batches whose stage 2 runs
``STAGE2_FEW_WIDE`` (the config whose loop the pipelined patches change: 64 heads or more, few partials a request,
``schedule.few_partials``), base / patched is at least 1.01 in geomean and no batch is below 0.98; of several, the
highest geomean. The last line printed is the patch taken, or ``none``. The device applied the patch it named
(``kernel_lab/results/stage2_pick_h200.txt``)."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from kernel_lab.tools import partition_ab as pab
from mla_edu.files import read_json
from mla_edu.kernels import schedule as sc
from mla_edu.kernels.split_kv_triton import STAGE2_FEW_WIDE, stage2_config

GEOMEAN, FLOOR = 1.01, 0.98
SMS = 132  # the H200's
BENCH_PAGES = 1024  # pages of a bench batch's longest request, for ``num_parts`` (any count past SMALL_GRID)
VARIANTS = Path("kernel_lab/results/stage2_variants")


def few_wide(heads: int, batch: int) -> bool:
    """Whether stage 2 runs ``STAGE2_FEW_WIDE`` for a balanced batch on the H200: ``stage2_config`` on the parts
    ``schedule.num_parts`` gives the batch (its longest request ``BENCH_PAGES`` pages: far past ``SMALL_GRID``)."""
    return stage2_config(batch, heads, sc.num_parts(heads, SMS, batch, BENCH_PAGES)) == STAGE2_FEW_WIDE


def pick(paths: list[Path]) -> list[str]:
    """The lines the rule prints for the A/B jsons at ``paths``: each patch's verdict and rows, then the patch taken."""
    lines, best = [], ("none", 0.0)
    for p in paths:
        name = p.parent.name
        if not p.exists():
            lines.append(f"{name} no json")
            continue
        rows = pab.table(read_json(p, "partition A/B json"), VARIANTS / f"{name}.patch")
        few = [r for r in rows if few_wide(r["heads"], r["batch"])]
        ctrl = [r for r in rows if r not in few]
        if not few:
            lines.append(f"{name} no few-wide rows")
            continue
        gm, mn = statistics.geometric_mean([r["x"] for r in few]), min(r["x"] for r in few)
        cg = statistics.geometric_mean([r["x"] for r in ctrl]) if ctrl else float("nan")
        ok = gm >= GEOMEAN and mn >= FLOOR
        lines.append(f"{name}: few-wide {len(few)} batches geomean {gm:.3f} min {mn:.3f}; control {len(ctrl)} geomean "
                     f"{cg:.3f}; {'accept' if ok else 'reject'}")
        lines += [f"  {r['family']} h{r['heads']} B{r['batch']} {'FEW' if r in few else 'ctl'} {r['x']:.3f} "
                  f"[{r['x_min']:.3f}-{r['x_max']:.3f}] {r['base_us']:.1f} -> {r['patched_us']:.1f}" for r in rows]
        if ok and gm > best[1]:
            best = (name, gm)
    return [*lines, best[0]]


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jsons", nargs="+", type=Path, help="each A/B's partition_ab.json, in a folder named for its patch")
    text = "\n".join(pick(ap.parse_args(argv).jsons)) + "\n"
    sys.stdout.write(text)
    return text


if __name__ == "__main__":
    main()
