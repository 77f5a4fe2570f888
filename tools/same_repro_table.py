"""Two outputs of ``python -m mla_edu.case_study.repro`` print the same tables, the ``time s`` column aside
(``make test-no-triton``: the run without Triton against ``results/repro_cpu.md``).

    python -m tools.same_repro_table results/repro_cpu.md .venv-no-triton/repro.md
"""

from __future__ import annotations

import argparse
from pathlib import Path


def table_rows(text: str) -> list[list[str]]:
    """Every markdown table row as its stripped cells, without the cells of a ``time s`` column."""
    rows, drop = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            drop = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if drop is None:  # a table's header row
            drop = cells.index("time s") if "time s" in cells else -1
        rows.append([c for i, c in enumerate(cells) if i != drop])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.same_repro_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("expected", type=Path, help="the committed output, e.g. results/repro_cpu.md")
    parser.add_argument("got", type=Path, help="the new run's output")
    args = parser.parse_args(argv)
    for path in (args.expected, args.got):
        if not path.is_file():
            parser.error(f"{path}: expected a file, found {'a folder' if path.is_dir() else 'nothing'}")
    expected, got = table_rows(args.expected.read_text()), table_rows(args.got.read_text())
    if not expected:
        raise SystemExit(f"{args.expected}: expected markdown tables, found none")
    differ = [(e, g) for e, g in zip(expected, got) if e != g]
    if len(expected) != len(got) or differ:
        raise SystemExit(f"{args.got} differs from {args.expected}: {len(got)} rows against {len(expected)}; "
                         f"first different rows: {differ[:3]}")
    print(f"{args.got}: the same {len(expected)} table rows as {args.expected} (time column aside)")

if __name__ == "__main__":
    main()
