"""The instructor build: the notebooks and the book with every exercise's solution (``make instructor``).

The learner's notebooks and book carry no solution; ``instructor/solutions/`` holds each notebook's, in a file named
after the notebook, as blocks ``<!-- after: ANCHOR -->`` followed by markdown (a line ``<!-- code: PATH -->``
inside a block becomes that file's code). This command copies every executed notebook to
``build/instructor/notebooks/``, inserting each block as a markdown cell right after the first code cell whose
source contains its anchor, then builds the book from those copies into ``build/instructor/book/`` (the same
Sphinx configuration as ``make book``).

    python -m tools.instructor            # notebooks and book
    python -m tools.instructor --no-book  # the notebooks only
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "instructor" / "solutions"
OUT = ROOT / "build" / "instructor"
_BLOCK = re.compile(r"^<!-- after: (.+?) -->\n", flags=re.M)
_CODE = re.compile(r"^<!-- code: (\S+) -->$", flags=re.M)


def solution_blocks(notebook_stem: str) -> list:
    """``[(anchor, markdown)]`` of one notebook's solutions, in order (empty when it has none)."""
    path = SOLUTIONS / f"{notebook_stem}.md"
    if not path.exists():
        return []
    parts = _BLOCK.split(path.read_text())
    blocks = []
    for anchor, text in zip(parts[1::2], parts[2::2]):
        text = _CODE.sub(lambda m: "```python\n" + (ROOT / m.group(1)).read_text().rstrip("\n") + "\n```", text)
        blocks.append((anchor, text.strip("\n")))
    return blocks


def with_solutions(notebook: Path):
    """The executed ``notebook`` with its solution blocks inserted (a new nbformat object); each anchor must match
    a code cell."""
    nb = nbformat.read(notebook, as_version=4)
    for anchor, text in solution_blocks(notebook.stem):
        at = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and anchor in c.source]
        if not at:
            raise ValueError(f"{notebook.name}: no code cell contains the solution anchor {anchor!r}")
        cell = nbformat.v4.new_markdown_cell(text)
        cell.metadata["tags"] = ["solution"]
        nb.cells.insert(at[0] + 1, cell)
    for c in nb.cells:  # nbformat >= 4.5 wants an id on every cell
        c.setdefault("id", f"cell-{id(c):x}")
    return nb


def _fresh(folder: Path) -> Path:
    """``folder``, emptied of an earlier build (made where missing)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def build_notebooks(out: Path = OUT) -> list:
    """Every notebook of ``notebooks/`` with its solutions, into ``out/notebooks/``; returns the paths written."""
    nb_dir = _fresh(out / "notebooks")
    written = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        target = nb_dir / path.name
        nbformat.write(with_solutions(path), target)
        written.append(target)
    return written


def build_book(out: Path = OUT) -> Path:
    """The book's sources with the solved notebooks, built by Sphinx with the learner book's configuration."""
    src = _fresh(out / "docs")
    for item in (ROOT / "docs").iterdir():
        if item.name == "notebooks" or item.name == "conf.py":
            continue
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, src / item.name)
    (src / "notebooks").symlink_to("../notebooks")  # as docs/notebooks -> ../notebooks: the notebooks' links hold
    book = out / "book"
    subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "--keep-going", "-b", "html", "-c",
                    str(ROOT / "docs"), str(src), str(book)], check=True)
    return book


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-book", action="store_true", help="write the notebooks only")
    args = parser.parse_args(argv)
    written = build_notebooks()
    print(f"wrote {len(written)} notebooks with solutions to {OUT / 'notebooks'}")
    if not args.no_book:
        print(f"wrote the instructor book to {build_book()}")


if __name__ == "__main__":
    main()
