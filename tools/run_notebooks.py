"""Execute every notebook top to bottom and keep the executed copies (``make notebooks``, in place; the GPU runs).

    python -m tools.run_notebooks --out DIR [--timeout 600] [names...]

Prints one line per notebook (seconds, ok/error, device, the kernel's peak memory) and writes DIR/<name>.ipynb.
The committed GPU copies in notebooks/gpu/ were made this way on a Hopper GPU (see notebooks/gpu/README.md).

After the last cell, one more cell (``PEAK_CELL``, removed again before the notebook is written) asks the kernel
for its peak resident memory (``resource.getrusage``: Linux and macOS); it goes in the notebook's metadata (key
``kernel_peak_rss_mb`` of its ``mla_edu`` entry), where ``tools.notebook_timings`` reads it for the memory line.

The kernel client's channels are polled in 1-second slices (``poll_in_slices``). With one long
poll, nbclient can miss a reply that has already arrived and see it only when the cell's timeout
ends (jupyter/nbclient#312, open: "when cell contains ipywidget, execute cell will sometimes
blocks"). On the H200 this hit notebook 08's ``panel.show()`` cell: the kernel stamped its
reply at once and then sat idle (a faulthandler dump showed its main thread waiting in its event
loop), while nbclient waited out the whole cell timeout. Each new slice checks the socket afresh.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from queue import Empty

from mla_edu import cli
from mla_edu.files import check_out_dir, write_atomic
from mla_edu.paths import NOTEBOOKS_DIR as NOTEBOOKS


def poll_in_slices(channel, slice_s: float = 1.0) -> None:
    """Make ``channel.get_msg(timeout)`` wait in slices of ``slice_s`` seconds, same total timeout."""
    get_msg = channel.get_msg

    async def sliced(timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await get_msg(timeout=slice_s if left is None else min(slice_s, left))
            except Empty:
                if left is not None and left <= slice_s:
                    raise

    channel.get_msg = sliced


#: The kernel's peak resident memory in MiB, printed by the cell appended after the notebook's last one
#: (ru_maxrss: KiB on Linux, bytes on macOS).
PEAK_CELL = ("import resource as _r, sys as _s\n"
             "print(_r.getrusage(_r.RUSAGE_SELF).ru_maxrss // (2**20 if _s.platform == 'darwin' else 2**10))")


def peak_mb(cell) -> int | None:
    """The MiB ``PEAK_CELL`` printed, or None (it did not run: a cell before it failed)."""
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout").strip()
    return int(text) if text.isdigit() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the executed copies")
    parser.add_argument("--timeout", type=cli.positive_int, default=600, help="seconds per cell")
    parser.add_argument("names", nargs="*", help="notebook file names (default: all in notebooks/)")
    args = parser.parse_args(argv)
    try:
        check_out_dir(args.out, "--out")
    except ValueError as e:
        parser.error(str(e))
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    paths = [NOTEBOOKS / n for n in args.names] if args.names else sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such notebook: {missing}")
    failures = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS)}})

        def sliced_polls(notebook, client=client):
            poll_in_slices(client.kc.shell_channel)
            poll_in_slices(client.kc.iopub_channel)

        client.on_notebook_start = sliced_polls
        nb.cells.append(nbformat.v4.new_code_cell(PEAK_CELL))
        meta = nb.metadata.setdefault("mla_edu", {})
        meta.pop("kernel_peak_rss_mb", None)  # an earlier run's, never kept by mistake
        t0 = time.perf_counter()
        status = "ok"
        try:
            client.execute()
        except CellExecutionError as err:
            status = "error: " + str(err).strip().splitlines()[-1][:200]
            failures += 1
        except Exception as err:  # the kernel process died (nbclient may then fail in its cleanup too)
            ran = [c.get("execution_count") for c in nb.cells if c.cell_type == "code"]
            last = max((i for i, n in enumerate(ran) if n is not None), default=-1)
            status = f"error: {type(err).__name__} after code cell {last + 1} of {len(ran)} ran (kernel died?)"
            failures += 1
        peak = peak_mb(nb.cells.pop())
        if peak is not None:
            meta["kernel_peak_rss_mb"] = peak
        if not meta:
            del nb.metadata["mla_edu"]
        try:  # a failed write is this notebook's status; the others still run
            write_atomic(args.out / path.name, nbformat.writes(nb))
        except OSError as err:
            status += f"; not written: {err}"
            failures += 1
        memory = f", kernel peak {peak} MiB" if peak is not None else ""
        print(f"{path.name:45s} {time.perf_counter() - t0:7.1f} s  {status}  ({device}{memory})", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
