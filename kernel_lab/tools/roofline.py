"""How far FlashMLA and mla_edu sit from the H200's ceilings on the family bench's batches, and what 1.05x FlashMLA
would ask of mla_edu there: ``python -m kernel_lab.tools.roofline --out FILE``. No GPU: it reads the family bench's
H200 run (``kernel_lab.tools.family_bench``) and the ceilings the schedule bench measured on an H200
(``results/kernel_bench_h200_schedule.json``: a 2 GiB device copy, read + write, and an 8192^3 bf16 matmul).

A batch's floor is the larger of its bytes at the copy rate and its flops at the matmul rate: the cache's bf16 rows
read once (``sum(lens) * (512 + 64) * 2`` bytes; q and the output, ``h_q * (576 + 512) * 2`` bytes a request, are
left out: under 1% of the cache's bytes at h_q=16 and 4K-token requests, about 12% at h_q=128 and 2K tokens (the
floor there is that much too low) and the two products of every
head (``2 * h_q * sum(lens) * (576 + 512)`` flops). A kernel's 'of floor' is the floor over its median time: 1 is a
kernel as fast as the ceilings allow (a pure read can pass the copy's rate a little: the ceiling is a measured
copy's, not the HBM's peak). 'needs' is what 1.05x FlashMLA asks of mla_edu: 1.05 times FlashMLA's 'of floor'.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from kernel_lab.tools import family_bench as fb
from kernel_lab.tools import print_and_write, rel
from mla_edu.files import read_json
from mla_edu.paths import REPO_ROOT

FAMILY_BENCH = REPO_ROOT / "kernel_lab" / "results" / "family_bench_h200.json"
CEILINGS = REPO_ROOT / "results" / "kernel_bench_h200_schedule.json"
OUT = REPO_ROOT / "kernel_lab" / "results" / "roofline_h200.md"
D_LATENT, D_ROPE = 512, 64
#: mla_edu at 1.05x FlashMLA: the issue's bar for ragged batches.
BAR = 1.05


def floor_us(lens: list[int], heads: int, copy_tbps: float, matmul_tflops: float) -> float:
    """The batch's time at the ceilings (us): its cache bytes at the copy rate or its flops at the matmul rate."""
    tokens = sum(lens)
    read = tokens * (D_LATENT + D_ROPE) * 2 / (copy_tbps * 1e12)
    math = 2 * heads * tokens * (D_LATENT + D_ROPE + D_LATENT) / (matmul_tflops * 1e12)
    return max(read, math) * 1e6


@dataclass(frozen=True)
class Row:
    family: str
    heads: int
    batch: int
    floor: float  # us
    fm: float  # of floor
    best: float  # of floor, mla_edu's fastest option

    @property
    def needs(self) -> float:
        return BAR * self.fm


def rows(family_bench=FAMILY_BENCH, ceilings=CEILINGS) -> list[Row]:
    data = read_json(family_bench, "family bench")
    ceil = read_json(ceilings, "schedule bench (its ceilings)")["ceilings"]
    out = []
    for r in data["family"]:
        if "flashmla" not in r["us"]:
            continue
        f = floor_us(r["lens"], r["heads"], ceil["copy_TBps"], ceil["matmul_bf16_TFLOPs"])
        out.append(Row(r["family"], r["heads"], r["batch"], f, f / fb.median_us(r, "flashmla"),
                       f / fb.median_us(r, fb.best_option(r))))
    return out


def to_markdown(table: list[Row], command: str, ceil: dict) -> str:
    lines = ["# FlashMLA and mla_edu against the H200's ceilings, family bench batches", "",
             f"Command: `{command}` (no GPU). Inputs: `kernel_lab/results/family_bench_h200.json` (the times) and the "
             f"ceilings of `results/kernel_bench_h200_schedule.json`: copy {ceil['copy_TBps']:.2f} TB/s, bf16 matmul "
             f"{ceil['matmul_bf16_TFLOPs']:.0f} TFLOP/s.", "",
             (__doc__ or "").split("\n\n")[1].replace("\n", " "), "",
             "## By head count and batch size", "",
             "Geomeans over the 8 families; 'needs > 1' = batches where 1.05x FlashMLA would ask mla_edu to pass the "
             "measured ceiling.", "",
             "| h_q | B | FlashMLA of floor | mla_edu best of floor | needs (max) | needs > 1 |",
             "|---|---|---|---|---|---|"]
    for h in fb.HEADS:
        for b in fb.BATCHES:
            sel = [r for r in table if r.heads == h and r.batch == b]
            if not sel:
                continue
            lines.append(f"| {h} | {b} | {statistics.geometric_mean(r.fm for r in sel):.2f} | "
                         f"{statistics.geometric_mean(r.best for r in sel):.2f} | {max(r.needs for r in sel):.2f} | "
                         f"{sum(r.needs > 1 for r in sel)} |")
    top = max(table, key=lambda r: r.fm)
    lines += ["", f"FlashMLA's best: {top.fm:.2f} of the floor ({top.family}, h_q={top.heads}, B={top.batch}); "
              f"mla_edu's best: {max(r.best for r in table):.2f}. Over all {len(table)} batches 1.05x FlashMLA needs "
              f"more than the measured ceiling at {sum(r.needs > 1 for r in table)}, and more than 0.95 of it at "
              f"{sum(r.needs > 0.95 for r in table)}.", "",
              "## Every batch", "",
              "| family | h_q | B | floor us | FlashMLA of floor | mla_edu best of floor | needs |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.family} | {r.heads} | {r.batch} | {r.floor:.1f} | {r.fm:.2f} | {r.best:.2f} | {r.needs:.2f} |"
              for r in table]
    return "\n".join(lines) + "\n"


def render(out=None) -> str:
    command = "python -m kernel_lab.tools.roofline" + (f" --out {rel(out)}" if out else "")
    return to_markdown(rows(), command, read_json(CEILINGS, "schedule bench (its ceilings)")["ceilings"])


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", help="write the markdown here too (committed: kernel_lab/results/roofline_h200.md)")
    args = ap.parse_args(argv)
    return print_and_write(ap, args.out, lambda: render(args.out))


if __name__ == "__main__":
    main()
