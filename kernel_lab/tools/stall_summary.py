"""Where each kernel's warps wait, from Nsight Compute's source-level stall sampling:
``python -m kernel_lab.tools.stall_summary
sass.csv.gz``.

The input: ``ncu --section SourceCounters --section WarpStateStats -o REPORT ...`` then ``ncu -i REPORT.ncu-rep --page
source --csv --print-source sass`` (gzipped or not), one table per kernel. Printed per kernel: the samples, each
stall reason's share of them (1% and more), the samples per reason on a common scale (the first kernel's samples
= 100, so two kernels timed over the same work compare), and the SASS instructions where the largest reasons
sample most.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io

from mla_edu.files import check_in_file

REASONS = ("stall_long_sb", "stall_barrier", "stall_wait", "stall_short_sb", "stall_mio", "stall_lg")
ALL = "Warp Stall Sampling (All Samples)"


def kernels(text: str) -> list[tuple[str, list[dict]]]:
    """(kernel name, rows as dicts) for each kernel's table in ``ncu --page source --csv`` output."""
    out = []
    for part in text.split('"Kernel Name",')[1:]:
        name, body = part.split("\n", 1)
        rows = list(csv.reader(io.StringIO(body)))
        hdr = rows[0]
        out.append((name.strip().strip(",").strip('"'), [dict(zip(hdr, r)) for r in rows[1:] if len(r) == len(hdr)]))
    return out


def samples(row: dict, col: str) -> float:
    """A row's samples in column ``col`` (0 where empty or not a number)."""
    try:
        return float(row.get(col) or 0)
    except ValueError:
        return 0.0


def read(path: str) -> str:
    """The text of ``ncu --page source --csv`` output at ``path``, gzipped or not."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        return f.read()


def short_name(name: str) -> str:
    """A kernel's name without its template arguments and return type."""
    return name.split("<")[0].replace("void ", "")


def totals(rows: list[dict]) -> dict:
    """One kernel's samples: ``ALL`` and each stall reason (all samples, issued or not), summed over its rows."""
    return {c: sum(samples(r, c) for r in rows) for c in rows[0]
            if c == ALL or (c.startswith("stall_") and "Not Issued" not in c)}


def summary(text: str, top: int = 5) -> str:
    lines, scale = [], None
    for name, rows in kernels(text):
        reasons = totals(rows)
        total = reasons.pop(ALL)
        scale = scale or total / 100
        short = short_name(name)
        lines.append(f"== {short}: {len(rows)} instructions, {total:.0f} samples ({total / scale:.1f} on the common "
                     "scale)")
        for c, v in sorted(reasons.items(), key=lambda kv: -kv[1]):
            if v >= 0.01 * total:
                lines.append(f"   {c:24s} {v / total:6.1%}  {v / scale:6.1f}")
        for c in REASONS[:3]:
            lines.append(f"   where {c} samples most (a branch: with the instruction it follows, an mbarrier's "
                         "try-wait loop):")
            for i in sorted(range(len(rows)), key=lambda i: -samples(rows[i], c))[:top]:
                src = rows[i]["Source"].strip()
                if "BRA" in src and i:
                    src = f"{rows[i - 1]['Source'].strip()} ; {src}"
                lines.append(f"      {int(samples(rows[i], c)):6d}  {src[:100]}")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv output, .gz or plain")
    path = ap.parse_args(argv).csv
    try:
        text = read(str(check_in_file(path, "csv")))
    except (OSError, UnicodeDecodeError, EOFError) as e:
        ap.error(f"csv: expected ncu's --csv output (gzipped or plain text), got {path}, which cannot be read ({e})")
    except ValueError as e:
        ap.error(str(e))
    if not kernels(text):
        ap.error(f"csv: expected ncu --page source --csv output (a '\"Kernel Name\",' table), got {path}, "
                 "which holds none")
    print(summary(text))


if __name__ == "__main__":
    main()
