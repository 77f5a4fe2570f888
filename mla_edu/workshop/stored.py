"""A notebook cell that needs Triton, on a machine without it (macOS, Windows: Triton has Linux wheels only).

Such a cell carries a tag line, ``# stored output: NAME``, and runs its Triton code where
``triton_available()``; elsewhere it calls ``show_stored(notebook, NAME)``, which prints why it does not run here
(one line starting with ``NOTE``) and then the outputs the committed run of that cell stored in the notebook's
``.ipynb``: its text as printed, its figures as drawn. Strict nbval compares those outputs with the stored ones
once the note line is removed (``notebooks/without_triton.cfg``, nbval's ``--nbval-sanitize-with``).
"""

from __future__ import annotations

import json
import sys

from mla_edu.device import triton_available
from mla_edu.paths import NOTEBOOKS_DIR

#: The first words of the line that says why a cell's stored output is shown instead of a run.
NOTE = "[not run here:"
#: How a cell names its stored output: a comment line of its source.
TAG = "# stored output: "


def stored_outputs(notebook: str, name: str) -> list[dict]:
    """The outputs of the code cell of ``notebooks/<notebook>.ipynb`` whose source has the line ``TAG + name``
    (ValueError if no cell or several do, or if that cell stored none)."""
    path = NOTEBOOKS_DIR / f"{notebook}.ipynb"
    cells = [c for c in json.loads(path.read_text())["cells"]
             if c["cell_type"] == "code" and TAG + name in "".join(c["source"]).splitlines()]
    if len(cells) != 1:
        raise ValueError(f"expected one code cell tagged {TAG + name!r} in {path}, found {len(cells)}")
    if not cells[0].get("outputs"):
        raise ValueError(f"the cell tagged {TAG + name!r} in {path} stored no output: execute the notebook "
                         "with Triton and commit it")
    return cells[0]["outputs"]


def show_stored(notebook: str, name: str, lines_from: str | None = None) -> None:
    """Print why the cell ``name`` of ``notebook`` is not run here, then show its stored outputs (streams as
    text, figures and other displays as they were stored). ``lines_from``: only the stored text lines that start
    with it (a cell that runs its other lines here). A cell that printed nothing (a figure alone) gets no note
    line, which nbval could not remove: the note of the Triton cell before it says why."""
    from IPython.display import display

    outputs = []
    for out in stored_outputs(notebook, name):  # a line may be stored in pieces: one text per stream run
        if out["output_type"] == "stream" and outputs and outputs[-1].get("name") == out["name"]:
            outputs[-1] = dict(outputs[-1], text="".join(outputs[-1]["text"]) + "".join(out["text"]))
        else:
            outputs.append(out)
    if any(out["output_type"] == "stream" and out["name"] == "stdout" for out in outputs):
        print(f"{NOTE} {triton_available().reason}; the output of the committed run, with Triton:]")
    for out in outputs:
        if out["output_type"] == "stream":
            text = "".join(out["text"])
            if lines_from is not None:
                text = "".join(ln for ln in text.splitlines(keepends=True) if ln.startswith(lines_from))
            (sys.stderr if out["name"] == "stderr" else sys.stdout).write(text)
        elif out["output_type"] in ("display_data", "execute_result") and lines_from is None:
            # the .ipynb keeps a text as a list of its lines
            display({k: "".join(v) if isinstance(v, list) else v for k, v in out["data"].items()}, raw=True)
