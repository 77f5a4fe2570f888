"""The instructor build: the notebooks and the book with every exercise's solution (``make instructor``).

The learner's notebooks and book carry no solution; ``instructor/solutions/`` holds each notebook's, in a file named
after the notebook, as blocks ``<!-- after: ANCHOR -->`` followed by markdown (a line ``<!-- code: PATH -->``
inside a block becomes that file's code). This command copies every executed notebook to
``build/instructor/notebooks/``, inserting each block as a markdown cell right after the first code cell whose
source contains its anchor (``<!-- code: PATH:NAME -->`` becomes the source of the top-level ``NAME`` of PATH, its
comment lines above included). Each inserted block ends with the common wrong answers of the checks that cell runs
and what the checker says to each, read from the checkers' own data (``common_mistakes``). It then builds the book
from those copies into ``build/instructor/book/`` (the same Sphinx configuration as ``make book``), with the decks
``make slides`` wrote (run it first: the book's slide page links them).

    python -m tools.instructor            # notebooks and book
    python -m tools.instructor --no-book  # the notebooks only
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "instructor" / "solutions"
OUT = ROOT / "build" / "instructor"
DECKS = ROOT / "build" / "book" / "slides"  # what ``make slides`` writes (tools.slides.OUT)
_BLOCK = re.compile(r"^<!-- after: (.+?) -->\n", flags=re.M)
_CODE = re.compile(r"^<!-- code: (\S+) -->$", flags=re.M)


def code_of(spec: str) -> str:
    """The text of ``PATH`` (from the checkout), or with ``PATH:NAME`` the source of its top-level function, class or
    assignment ``NAME`` with the comment lines right above it."""
    file, _, name = spec.partition(":")
    text = (ROOT / file).read_text()
    if not name:
        return text.rstrip("\n")
    lines = text.splitlines()
    for node in ast.parse(text).body:
        names = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                 [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)])
        if name in names:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
            while start > 0 and lines[start - 1].startswith("#"):
                start -= 1
            return "\n".join(lines[start:node.end_lineno])
    raise ValueError(f"{file}: expected a top-level function, class or assignment named {name!r}, found none")


def solution_blocks(notebook_stem: str) -> list:
    """``[(anchor, markdown)]`` of one notebook's solutions, in order (empty when it has none)."""
    path = SOLUTIONS / f"{notebook_stem}.md"
    if not path.exists():
        return []
    parts = _BLOCK.split(path.read_text())
    blocks = []
    for anchor, text in zip(parts[1::2], parts[2::2]):
        text = _CODE.sub(lambda m: "```python\n" + code_of(m.group(1)) + "\n```", text)
        blocks.append((anchor, text.strip("\n")))
    return blocks


#: the checks of ``mla_edu.workshop.checks`` whose ``mistakes`` (and ``hint``) keywords hold a question's wrong answers
_WITH_MISTAKES = ("check_number", "check_items")


def checker_mistakes() -> dict:
    """{a checker of ``mla_edu.workshop.exercises``: [(a wrong answer, what the checker says)]}, from its own data."""
    from mla_edu.workshop import exercises as ex

    return {
        "check_replay": [(f"a hook that did `{name}`", hint) for name, hint in ex.REPLAY_HINTS.items()],
        "check_workspace_size": [(f"a split count with the `{name}` step wrong", hint)
                                 for name, (_, hint) in ex.WORKSPACE_MISTAKES.items()]
        + [(f"{n:,} bytes per (batch, split)", hint) for n, hint in ex.bytes_mistakes().items()]
        + [("the workspace of one request", ex.WORKSPACE_BATCH_HINT)],
        "check_stale_reads": [(f"reads with the `{name}` step wrong", hint)
                              for name, hint in ex.STALE_MISTAKES.items()],
        "check_row_stride": [(f"{part}: {what}", hint) for part, mistakes in ex.ROW_STRIDE_MISTAKES.items()
                             for what, hint in mistakes.items()]
        + [(f"any other {part}", hint) for part, hint in ex.ROW_STRIDE_OTHER.items()],
    }


def _text(node: ast.AST, source: str) -> str:
    """A hint's string (a literal), else its source as written."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        value = None
    return value if isinstance(value, str) else f"`{ast.get_source_segment(source, node)}`"


def common_mistakes(source: str) -> list:
    """``[(question or "", wrong answer, what the checker says)]`` for every check the code cell ``source`` runs, in
    order: the ``mistakes`` and ``hint`` of its ``check_number`` / ``check_items`` calls (a wrong answer as its
    expression in the cell) and the classic mistakes of a checker of ``checker_mistakes``."""
    by_checker = checker_mistakes()
    calls = sorted((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)),
                   key=lambda n: (n.lineno, n.col_offset))
    out = []
    for call in calls:
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
        if name in by_checker:
            out += [("", wrong, hint) for wrong, hint in by_checker[name]]
        if name not in _WITH_MISTAKES:
            continue
        question = _text(call.args[0], source) if call.args else name
        for kw in call.keywords:
            if kw.arg == "mistakes":
                if not isinstance(kw.value, ast.Dict):
                    raise ValueError(f"expected mistakes={{wrong answer: hint}} written out in the cell, got "
                                     f"{ast.get_source_segment(source, kw.value)!r}")
                out += [(question, f"`{ast.get_source_segment(source, k)}`", _text(v, source))
                        for k, v in zip(kw.value.keys, kw.value.values)]
            elif kw.arg == "hint":
                out.append((question, "any other wrong answer", _text(kw.value, source)))
    return out


def mistakes_markdown(source: str) -> str:
    """The instructor's list of ``common_mistakes(source)`` (empty when the cell's checks know none)."""
    rows = common_mistakes(source)
    if not rows:
        return ""
    lines = [f"- {question + ', ' if question else ''}{wrong}: the checker says \u201c{hint}\u201d"
             for question, wrong, hint in rows]
    return ("<details><summary>Common wrong answers and what the checker says</summary>\n\n" + "\n".join(lines)
            + "\n\n</details>")


def with_solutions(notebook: Path):
    """The executed ``notebook`` with its solution blocks inserted (a new nbformat object); each anchor must match
    a code cell."""
    nb = nbformat.read(notebook, as_version=4)
    for anchor, text in solution_blocks(notebook.stem):
        at = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and anchor in c.source]
        if not at:
            raise ValueError(f"{notebook.name}: no code cell contains the solution anchor {anchor!r}")
        mistakes = mistakes_markdown(nb.cells[at[0]].source)
        cell = nbformat.v4.new_markdown_cell(text + "\n\n" + mistakes if mistakes else text)
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
    copy_decks(book)
    return book


def copy_decks(book: Path, decks: Path = DECKS) -> bool:
    """The decks ``make slides`` wrote (``build/book/slides/``) into ``book/slides/``, where the book's slide page
    links them; False, after saying so, when there are none yet (the links stay dead until ``make slides``)."""
    if not any(decks.glob("*.slides.html")):
        print(f"no decks in {decks}: the instructor book's slide links stay dead until `make slides` and "
              "`make instructor` again", file=sys.stderr)
        return False
    shutil.copytree(decks, book / "slides", dirs_exist_ok=True)
    return True


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
