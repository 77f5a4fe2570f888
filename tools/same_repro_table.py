"""Two outputs of ``python -m mla_edu.case_study.repro`` print the same tables, the ``time s`` column aside
(``make test-no-triton``: the run without Triton against ``results/repro_cpu.md``).

    python -m tools.same_repro_table results/repro_cpu.md .venv-no-triton/repro.md
"""

from __future__ import annotations

import sys
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
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        raise SystemExit("usage: python -m tools.same_repro_table EXPECTED.md GOT.md")
    expected, got = (table_rows(Path(p).read_text()) for p in argv)
    if not expected:
        raise SystemExit(f"{argv[0]}: expected markdown tables, found none")
    differ = [(e, g) for e, g in zip(expected, got) if e != g]
    if len(expected) != len(got) or differ:
        raise SystemExit(f"{argv[1]} differs from {argv[0]}: {len(got)} rows against {len(expected)}; "
                         f"first different rows: {differ[:3]}")
    print(f"{argv[1]}: the same {len(expected)} table rows as {argv[0]} (time column aside)")


if __name__ == "__main__":
    main()
