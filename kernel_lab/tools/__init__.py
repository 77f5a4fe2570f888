"""The kernel lab's commands, run from the repository root as ``python -m kernel_lab.tools.<name>``: A/B timings of
kernel versions, profiles and stall readings, the schedule's constants varied (kernel_lab/README.md). Here: what the
no-GPU tools that write a committed markdown share."""

from __future__ import annotations

import argparse
from pathlib import Path

from mla_edu.files import check_out_file, write_atomic
from mla_edu.paths import REPO_ROOT


def rel(path) -> str:
    """``path`` relative to the repository root where it lies inside it (as a results file names its inputs and its
    command line), else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def print_and_write(ap, out, render) -> str:
    """A no-GPU tool's end: the markdown ``render()`` returns, printed and, with ``out`` (its ``--out``), written
    there. A bad ``--out`` or input file (``ValueError``) is ``ap.error``: the usage line and what was expected, not
    a traceback."""
    try:
        if out:
            check_out_file(out, "--out")
        text = render()
    except ValueError as e:
        ap.error(str(e))
    print(text, end="")
    if out:
        write_atomic(out, text)
    return text


def markdown_main(doc: str, render, argv=None) -> str:
    """The whole ``main`` of a no-GPU tool whose only option is ``--out``: ``render()``'s markdown, printed and
    written there (``print_and_write``); ``doc``'s first line is the usage's description."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args(argv)
    return print_and_write(ap, args.out, render)
