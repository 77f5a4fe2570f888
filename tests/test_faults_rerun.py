"""Notebook cells re-run (issue 23, item 15): after Run All, running any single code cell again gives the
output it gave the first time, as a learner who re-runs a cell expects.

Each notebook is executed top to bottom in a kernel (from its jupytext ``.py``, the source), then each
code cell is executed once more and its text output compared with the first run's. Cells marked
``NBVAL_IGNORE_OUTPUT`` (timings, device names) are re-run but not compared, as under nbval.
"""

import copy
import time

from mla_edu.paths import NOTEBOOKS_DIR

IGNORE = "NBVAL_IGNORE_OUTPUT"


def text_outputs(cell) -> list[str]:
    """A code cell's outputs as text: streams, and the text/plain of results and displays."""
    out = []
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream":
            out.append(f"{o['name']}: {o['text']}")
        elif o["output_type"] in ("execute_result", "display_data"):
            out.append(o.get("data", {}).get("text/plain", ""))
        elif o["output_type"] == "error":
            out.append(f"error: {o['ename']}: {o['evalue']}")
    return out


def rerun_differences(name: str, skip: str | None = None) -> tuple[list[str], int]:
    """Run All of ``notebooks/<name>.py``, then every code cell once more (but those whose source holds
    ``skip``): (the cells whose output changed, described; the number of cells re-run)."""
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(NOTEBOOKS_DIR / f"{name}.py")
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
    changed, rerun = [], 0
    with client.setup_kernel():
        for i in code:
            client.execute_cell(nb.cells[i], i)
        for i in code:
            if skip is not None and skip in nb.cells[i].source:
                continue
            again = copy.deepcopy(nb.cells[i])
            client.execute_cell(again, i)  # raises CellExecutionError if the re-run fails
            rerun += 1
            first, second = text_outputs(nb.cells[i]), text_outputs(again)
            if IGNORE not in nb.cells[i].source and first != second:
                changed.append(f"code cell {code.index(i)} ({nb.cells[i].source.splitlines()[0][:60]!r}): "
                               f"{first} then {second}")
    return changed, rerun


def test_every_cell_of_notebook_05_gives_the_same_output_when_re_run():
    t0 = time.perf_counter()
    changed, rerun = rerun_differences("05_cuda_graphs_and_their_pitfalls")
    assert not changed, "\n".join(changed)
    assert rerun > 20 and time.perf_counter() - t0 < 120


def test_every_cell_of_notebook_06_but_the_seed_table_gives_the_same_output_when_re_run():
    """The seed table's cell (five engine runs over 64 questions: 12 of the 40 s this test would take) is
    run once, in Run All, but not re-run; every other code cell is."""
    changed, rerun = rerun_differences("06_reproducing_the_zero_accuracy_bug", skip="seed_table(run)")
    assert not changed, "\n".join(changed)
    assert rerun > 10
