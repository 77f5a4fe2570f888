"""Execute every notebook top to bottom and keep the executed copies (used for the H200 run).

    python -m tools.run_notebooks --out DIR [--timeout 600] [names...]

Prints one line per notebook (seconds, ok/error, device) and writes DIR/<name>.ipynb. The
committed GPU copies in notebooks/gpu/ were made this way on the H200 (see notebooks/gpu/README.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mla_edu import _cli

from mla_edu.paths import NOTEBOOKS_DIR as NOTEBOOKS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the executed copies")
    parser.add_argument("--timeout", type=_cli.positive_int, default=600, help="seconds per cell")
    parser.add_argument("names", nargs="*", help="notebook file names (default: all in notebooks/)")
    args = parser.parse_args(argv)
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    paths = [NOTEBOOKS / n for n in args.names] if args.names else sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such notebook: {missing}")
    args.out.mkdir(parents=True, exist_ok=True)
    failures = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS)}})
        t0 = time.perf_counter()
        status = "ok"
        try:
            client.execute()
        except CellExecutionError as err:
            status = "error: " + str(err).strip().splitlines()[-1][:200]
            failures += 1
        nbformat.write(nb, args.out / path.name)
        print(f"{path.name:45s} {time.perf_counter() - t0:7.1f} s  {status}  ({device})", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
