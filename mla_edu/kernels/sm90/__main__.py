"""``python -m mla_edu.kernels.sm90``: compile stage 1 for sm_90a and print the reports as JSON (the library:
``mla_edu.kernels.sm90``; ``compile_stage1`` runs this in a child process under Triton's interpreter)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from mla_edu.cli import int_at_least
from mla_edu.files import check_out_dir, check_out_file, write_atomic
from mla_edu.kernels.contract import STAGE1_KINDS
from mla_edu.kernels.stage1 import KINDS
from mla_edu.kernels.sm90 import HEAD_COUNTS, HEADS, compile_stage1, to_markdown


def _kind(value: str) -> str:
    """argparse type of a kind (``choices`` with ``nargs="*"`` refuses an empty list on Python 3.11)."""
    if value not in KINDS:
        raise argparse.ArgumentTypeError(f"expected one of {tuple(KINDS)}, got {value!r}")
    return value


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Compile stage 1 for sm_90a (no GPU needed) and print, per kind, its "
                                 "wgmma layouts and instructions, registers, spills and shared memory as JSON.")
    ap.add_argument("kinds", nargs="*", type=_kind, help=f"kernels, of {STAGE1_KINDS} (default: all)")
    ap.add_argument("--page", type=int_at_least(1), default=64, help="page size (default 64)")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--heads", type=int, choices=HEAD_COUNTS, default=HEADS,
                    help=f"h_q of the problem (default {HEADS}; 16: the 16-head programs)")
    ap.add_argument("--final", action="store_true", help="the one-split variant (writes out directly)")
    ap.add_argument("--scheduled", action="store_true",
                    help="the balanced schedule's persistent variant (kernels.schedule)")
    ap.add_argument("--ptx", metavar="DIR", help="also write each kind's PTX to DIR/<kind>.ptx")
    ap.add_argument("--md", metavar="FILE", help="also write the report as a markdown table to FILE")
    args = ap.parse_args(argv)
    try:  # before the compile, which takes minutes
        if args.ptx:
            check_out_dir(args.ptx, "--ptx")
        if args.md:
            check_out_file(args.md, "--md")
    except ValueError as e:
        ap.error(str(e))
    reports = compile_stage1(args.kinds or STAGE1_KINDS, args.page, args.dtype, args.final, args.heads,
                             args.scheduled)
    if args.ptx:
        for k, r in reports.items():
            write_atomic(os.path.join(args.ptx, f"{k}.ptx"), r["ptx"])
    if args.md:
        command = "python -m mla_edu.kernels.sm90 " + " ".join(argv or sys.argv[1:])
        write_atomic(args.md, to_markdown(reports, command, args.heads))
    print(json.dumps(reports))


if __name__ == "__main__":
    main()
