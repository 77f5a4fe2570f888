"""A linear cost model per kernel, fitted to the H200 family bench: what the balanced schedule and FlashMLA pay per
page, per segment, per partial and per merge step. ``python -m kernel_lab.tools.cost_fit --out FILE``. No GPU: it
fits the whole family-bench run at 1699741 (``RUNS``: FlashMLA timed in the same process; the kernels, partition and
stage 2 of 261e2bd, the package's now, at 16, 32, 64 and 128 heads) and checks both fits on the three runs at 261e2bd
(``CHECK_RUNS``: the same kernels, and the same 32 family batches at h_q 64 and 128 with B 128 and 256, timed again in
three other processes: the run-to-run spread, not new batches).
The runs before 261e2bd ran another stage 2 or partition and are left out.

Per batch and kernel, from its partition replayed on the host (ours: ``schedule.host_segments``, the Triton
partition's arithmetic in plain Python, equal to the kernel's row for row; FlashMLA:
``flashmla_schedule.flashmla_parts``, its ``get_mla_metadata`` walk):

* ``pages``, ``segments``: the busiest part's pages and segments (requests or pieces it walks), the busiest by the
  partitions' own charge, pages plus ``schedule.FIXED_OVERHEAD_PAGES`` a segment; both partitions balance that
  charge, so several parts tie, and the tie goes to the part of more segments;
* ``partials``: the pieces of requests cut across parts (each writes a float32 partial the merge reads);
* ``merge``: the longest merge of one request: ours, its partials over stage 2's ``BLOCK_S``
  (``split_kv_triton.stage2_config``: 4 at a time or 1 at a time at 64 heads or more with few partials); FlashMLA,
  its partials (0 where no request is cut);
* ``fixed``: 1 (launches, the part's setup, the merge kernel's grid).

``time = a * pages + b * segments + c * partials + e * merge + d``, least squares weighted by 1 / time (each batch
counts by its relative error), per head count. At 32 heads the batches of at most 16 requests are left out: there the
balanced schedule runs 16-head programs (``workspace.HALF_BLOCK_BATCH``), another kernel. Fit quality: R^2, the
largest relative residual, leave-one-family-out (each family's batches predicted by the fit on the others; a uniform
length is one family) and the range of each coefficient over those fits (a term whose range is wide is not separated
from the others by these batches).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from functools import cache

import torch

from kernel_lab.tools import family_bench as fb
from kernel_lab.tools import markdown_main, rel
from mla_edu.files import read_json
from mla_edu.kernels import flashmla_schedule as fs
from mla_edu.kernels import schedule as sc
from mla_edu.kernels.workspace import gpu_block_h
from mla_edu.paths import REPO_ROOT
from mla_edu.util import cdiv

RESULTS = REPO_ROOT / "kernel_lab" / "results"
RUNS = (RESULTS / "family_bench_h200_fm_1699741_run1.json",)
CHECK_RUNS = tuple(RESULTS / f"family_bench_h200_fm_261e2bd_run{i}.json" for i in (1, 2, 3))
OUT = RESULTS / "cost_fit_h200.md"
PAGE = fb.PAGE
HEADS = fb.HEADS
KERNELS = ("balanced", "flashmla")
TERMS = ("pages", "segments", "partials", "merge", "fixed")
#: The batches whose gap to FlashMLA the report splits by term: the families' (ragged lengths, where the backend runs
#: the balanced schedule; at uniform lengths it runs the split rule) from this batch size on.
BIG_BATCH = 128
#: A batch the report also splits by term at each head count: one giant request among short ones, where stage 2's
#: merge of one request's many partials weighs most.
GIANT = ("giant", 256)
assert sc.FIXED_OVERHEAD_PAGES == fs.FIXED_OVERHEAD_NUM_BLOCKS  # both partitions charge a segment alike


@dataclass(frozen=True)
class Features:
    """One kernel's terms on one batch (``TERMS`` but ``fixed``), and the most partials of one request."""

    pages: int
    segments: int
    partials: int
    merge: int
    max_partials: int

    def row(self) -> list[float]:
        return [self.pages, self.segments, self.partials, self.merge, 1.0]


def busiest(loads: list[tuple[int, int]]) -> tuple[int, int]:
    """The ``(pages, segments)`` of the part the partition charges most (pages plus ``FIXED_OVERHEAD_PAGES`` a
    segment); of parts charged alike, the one of more segments."""
    return max(loads, key=lambda ps: (ps[0] + sc.FIXED_OVERHEAD_PAGES * ps[1], ps[1]))


def _features(loads: list[tuple[int, int]], pieces: list[int], block_s: int) -> Features:
    pages, segments = busiest(loads)
    most = max(pieces)
    return Features(pages, segments, sum(n for n in pieces if n > 1), cdiv(most, block_s) if most > 1 else 0, most)


@cache
def ours(lens: tuple[int, ...], heads: int, sms: int, page: int = PAGE) -> Features:
    """The balanced schedule's terms for requests of ``lens`` tokens (``schedule.host_segments`` on the package's
    parts)."""
    from mla_edu.kernels.split_kv_triton import stage2_config

    max_pages = max([cdiv(x, page) for x in lens] + [1])
    parts = sc.num_parts(heads, sms, len(lens), max_pages)
    loads, pieces = [[0, 0] for _ in range(parts)], Counter()
    for s in sc.host_segments(lens, page, max_pages, parts, heads):
        loads[s.part][0] += cdiv(s.t_end - s.t_start, page)
        loads[s.part][1] += 1
        pieces[s.request] += 1
    return _features([tuple(x) for x in loads], [pieces[b] for b in range(len(lens))],
                     stage2_config(len(lens), heads, parts).block_s)


@cache
def flashmla(lens: tuple[int, ...], heads: int, sms: int, page: int = PAGE) -> Features:
    """FlashMLA's terms for requests of ``lens`` tokens (its walk at ``num_sm_parts``; its merge in partials)."""
    walk = fs.flashmla_parts(list(lens), fs.num_sm_parts(heads, sms), page)
    pieces = Counter(pc.request for mine in walk for pc in mine)
    return _features([(sum(pc.end - pc.first for pc in mine), len(mine)) for mine in walk],
                     [pieces[b] for b in range(len(lens))], 1)


@dataclass(frozen=True)
class Point:
    """One timed batch: its run (the file's name after ``family_bench_h200_``), family (or uniform length), heads,
    lengths, the balanced schedule's head block and the median times (us) of ``KERNELS`` that ran."""

    run: str
    family: str
    heads: int
    lens: tuple[int, ...]
    block: int
    us: dict

    @property
    def batch(self) -> int:
        return len(self.lens)

    def features(self, kernel: str, sms: int) -> Features:
        return (ours if kernel == "balanced" else flashmla)(self.lens, self.heads, sms)


def points(runs=RUNS) -> tuple[list[Point], int]:
    """Every batch of ``runs`` (each run's families, then its uniform grid), once: a batch timed by two runs keeps
    the later run's times (``runs`` in the order they ran); and the runs' SM count."""
    out, sms = {}, set()
    for path in runs:
        data = read_json(str(path), "family bench json")
        sms.add(data["info"]["sm_count"])
        for r in data["family"] + data["uniform"]:
            lens = tuple(r["lens"])
            block = gpu_block_h(r["heads"], len(lens), max(cdiv(x, PAGE) for x in lens), balanced=True)
            us = {k: fb.median_us(r, k) for k in KERNELS if k in r["us"]}
            out[r["family"], r["heads"], lens] = Point(path.stem.removeprefix("family_bench_h200_"), r["family"],
                                                       r["heads"], lens, block, us)
    if len(sms) != 1:
        raise ValueError(f"the runs were made on GPUs of different SM counts: {sorted(sms)}")
    return list(out.values()), sms.pop()


def in_fit(p: Point, heads: int) -> bool:
    """Whether ``p`` belongs to the fit at ``heads``: that head count, the balanced schedule's large-batch head block
    (``gpu_block_h`` of the split rule: 16, 32, 64, 64)."""
    return p.heads == heads and p.block == gpu_block_h(heads)


def solve(rows: list[list[float]], us: list[float]) -> list[float]:
    """Least squares of ``us`` on ``rows``, each row and time divided by its time (relative residuals), float64."""
    x = torch.tensor(rows, dtype=torch.float64)
    y = torch.tensor(us, dtype=torch.float64)
    if x.shape[0] < x.shape[1]:
        raise ValueError(f"{x.shape[0]} batches cannot fit {x.shape[1]} terms")
    w = 1 / y
    return torch.linalg.lstsq(x * w[:, None], (y * w)[:, None], driver="gelsd").solution[:, 0].tolist()


def predict(coefs: list[float], f: Features) -> float:
    return sum(c * v for c, v in zip(coefs, f.row(), strict=True))


@dataclass(frozen=True)
class Fit:
    """One kernel's fit at one head count: coefficients (``TERMS``), batches, families, R^2, largest relative
    residual, leave-one-family-out errors (max, mean) and coefficient ranges, and the largest |correlation| between
    two of its terms over the batches."""

    coefs: list[float]
    n: int
    families: int
    r2: float
    max_rel: float
    lofo_max: float
    lofo_mean: float
    ranges: list[tuple[float, float]]
    max_corr: float

    @property
    def segment_pages(self) -> float:
        """A segment's cost in page-times (b / a)."""
        return self.coefs[1] / self.coefs[0]


def fit(pts: list[Point], kernel: str, sms: int) -> Fit:
    feats = [p.features(kernel, sms) for p in pts]
    rows, us = [f.row() for f in feats], [p.us[kernel] for p in pts]
    coefs = solve(rows, us)
    pred = [predict(coefs, f) for f in feats]
    mean = statistics.fmean(us)
    r2 = 1 - sum((q - y) ** 2 for q, y in zip(pred, us)) / sum((y - mean) ** 2 for y in us)
    errs, held = [], []
    for fam in sorted({p.family for p in pts}):
        keep = [i for i, p in enumerate(pts) if p.family != fam]
        c = solve([rows[i] for i in keep], [us[i] for i in keep])
        held.append(c)
        errs += [abs(predict(c, f) / p.us[kernel] - 1) for p, f in zip(pts, feats) if p.family == fam]
    cols = torch.tensor(rows, dtype=torch.float64)[:, :-1].T
    corr = torch.corrcoef(cols).nan_to_num().abs().fill_diagonal_(0)
    return Fit(coefs, len(pts), len(held), r2, max(abs(q / y - 1) for q, y in zip(pred, us)), max(errs),
               statistics.fmean(errs), [(min(c[i] for c in held), max(c[i] for c in held)) for i in range(len(TERMS))],
               float(corr.max()))


@dataclass(frozen=True)
class Gap:
    """Ours minus FlashMLA (us) over batches: measured, and per term the kernel's share ((our coefficient - its) *
    our feature) and the partition's (its coefficient * (our feature - its)), each a mean over the batches; the
    residual is what the fits leave."""

    n: int
    measured: float
    kernel: list[float]
    partition: list[float]

    @property
    def residual(self) -> float:
        return self.measured - sum(self.kernel) - sum(self.partition)


def gap(pts: list[Point], fits: dict, sms: int) -> Gap:
    o, f = fits["balanced"].coefs, fits["flashmla"].coefs
    kernel, part = [0.0] * len(TERMS), [0.0] * len(TERMS)
    for p in pts:
        xo, xf = p.features("balanced", sms).row(), p.features("flashmla", sms).row()
        for i in range(len(TERMS)):
            kernel[i] += (o[i] - f[i]) * xo[i] / len(pts)
            part[i] += f[i] * (xo[i] - xf[i]) / len(pts)
    return Gap(len(pts), statistics.fmean(p.us["balanced"] - p.us["flashmla"] for p in pts), kernel, part)


def is_family(p: Point) -> bool:
    """A batch of one of the families (ragged lengths), not of the uniform grid."""
    return p.family in fb.FAMILIES


def run(runs=RUNS, check_runs=CHECK_RUNS) -> dict:
    """Per head count: the batches fitted, both kernels' fits, the gap over the families' batches of B >=
    ``BIG_BATCH`` (all of them and the one of the largest gap), and each fit on the batches of ``check_runs`` (every
    timing of each, not fitted): count, max and mean relative error, or None where they timed none."""
    pts, sms = points(runs)
    checks = []
    for path in check_runs:
        got, sms_check = points((path,))
        if sms_check != sms:
            raise ValueError(f"{rel(path)} ran on {sms_check} SMs, the fits' runs on {sms}")
        checks += got
    out = {"sms": sms, "check_runs": tuple(check_runs), "heads": {}}
    for h in HEADS:
        sel = [p for p in pts if in_fit(p, h)]
        fits = {k: fit(sel, k, sms) for k in KERNELS}
        big = [p for p in sel if p.batch >= BIG_BATCH and is_family(p)]
        worst = max(big, key=lambda p: p.us["balanced"] - p.us["flashmla"])
        check = [p for p in checks if in_fit(p, h)]
        errs = {k: [abs(predict(fits[k].coefs, p.features(k, sms)) / p.us[k] - 1) for p in check] for k in KERNELS}
        out["heads"][h] = dict(points=sel, fits=fits, big=gap(big, fits, sms), worst=worst,
                               worst_gap=gap([worst], fits, sms),
                               giant_gap=gap([p for p in sel if (p.family, p.batch) == GIANT], fits, sms),
                               check={k: (len(e), max(e), statistics.fmean(e)) if e else None
                                      for k, e in errs.items()})
    return out


def _g(g: Gap, label: str) -> str:
    return (f"| {label} | {g.n} | {g.measured:.1f} | " + " | ".join(f"{v:+.1f}" for v in g.kernel)
            + f" | {sum(g.partition):+.1f} | {g.residual:+.1f} |")


def to_markdown(res: dict, command: str, inputs: list[str]) -> str:
    lines = [
        "# What the balanced schedule and FlashMLA pay per term (H200 family bench, a linear fit)", "",
        f"Command: `{command}` (no GPU). Inputs: " + ", ".join(f"`{x}`" for x in inputs) + ".", "",
        "time (us) = a * pages + b * segments + c * partials + e * merge + d, per kernel and head count, least squares "
        "weighted by 1 / time: pages and segments of the busiest part (by the partitions' charge, pages plus "
        f"{sc.FIXED_OVERHEAD_PAGES} a segment; ties to more segments), partials of requests cut across parts, merge = "
        "the longest merge of one request (ours: its partials over stage 2's `BLOCK_S`; FlashMLA: its partials). "
        "'b / a' = a segment in page-times. 'LOFO' = leave one family out: each family predicted by the fit on the "
        "others; the coefficient ranges below are over those fits. 'max corr' = the largest |correlation| of two terms "
        "over the batches. At h_q=32 the batches of B <= 16 (16-head programs) are not fitted.", "",
        "## Coefficients", "",
        "| h_q | kernel | batches | a us/page | b us/segment | b / a | c us/partial | e us/merge step | d us |",
        "|---|---|---|---|---|---|---|---|---|"]
    for h, r in res["heads"].items():
        for k in KERNELS:
            f = r["fits"][k]
            a, b, c, e, d = f.coefs
            lines.append(f"| {h} | {k} | {f.n} | {a:.3f} | {b:.2f} | {f.segment_pages:.2f} | {c:.3f} | {e:.3f} | "
                         f"{d:.1f} |")
    lines += ["", "## Fit quality", "",
              "| h_q | kernel | R^2 | max rel residual | LOFO max / mean rel error | max corr | range a | range b | "
              "range c | range e | range d |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for h, r in res["heads"].items():
        for k in KERNELS:
            f = r["fits"][k]
            rng = " | ".join(f"{lo:.3g} to {hi:.3g}" for lo, hi in f.ranges)
            lines.append(f"| {h} | {k} | {f.r2:.4f} | {f.max_rel:.3f} | {f.lofo_max:.3f} / {f.lofo_mean:.3f} | "
                         f"{f.max_corr:.2f} | {rng} |")
    checked = [(h, k, r["check"][k]) for h, r in res["heads"].items() for k in KERNELS if r["check"][k]]
    lines += ["", f"Each fit on the batches of {', '.join(f'`{rel(p)}`' for p in res['check_runs'])} (the same kernels "
              "and batches timed again in other processes: not fitted, but not new batches), max / mean relative "
              "error: "
              + "; ".join(f"h_q={h} {k} {c[1]:.3f} / {c[2]:.3f} over {c[0]}" for h, k, c in checked) + ".", "",
              f"## The gap over the families at B >= {BIG_BATCH}, term by term", "",
              "Ours minus FlashMLA in us, the mean over the batches: measured; each term's kernel share ((our "
              "coefficient - FlashMLA's) * our feature); the partition's share (FlashMLA's coefficients * (our "
              "features - FlashMLA's), all terms); what the fits leave. Positive: ours slower.", "",
              "| batches | n | measured | pages | segments | partials | merge | fixed | partition | residual |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for h, r in res["heads"].items():
        w = r["worst"]
        lines += [_g(r["big"], f"h_q={h}, families, B >= {BIG_BATCH}"),
                  _g(r["worst_gap"], f"h_q={h}, largest: {w.family} B={w.batch}"),
                  _g(r["giant_gap"], f"h_q={h}, {GIANT[0]} B={GIANT[1]}")]
    return "\n".join(lines) + "\n"


def render(runs=RUNS, check_runs=CHECK_RUNS) -> str:
    return to_markdown(run(runs, check_runs), f"python -m kernel_lab.tools.cost_fit --out {rel(OUT)}",
                       [rel(p) for p in runs])


def main(argv=None) -> str:
    return markdown_main(__doc__, render, argv)


if __name__ == "__main__":
    main()
