"""The prose the docs tests read: README, docs/*.md, the notebooks' .py twins, the library's docstrings.

Shared by ``test_docs_paths``, ``test_docs_sources``, ``test_docs_numbers`` and ``kernel_lab/tests``; each text is
``(name, text)`` with ``name`` the repository path it came from (for the failure message).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mla_edu.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
#: README's Results in full: the seed's flags, the ablation, the defects, what broke, the other measurements
RESULTS_DOC = REPO_ROOT / "docs" / "results.md"
SOURCES = REPO_ROOT / "docs" / "sources.md"
#: the counts prose spells out, by value
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve")


def rel(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


LAB = REPO_ROOT / "kernel_lab"
#: documentation outside README and docs/: the kernel lab's README and essay, the H200 notebooks' README
OTHER_DOCS = (LAB / "README.md", REPO_ROOT / "docs" / "kernel_essay.md", REPO_ROOT / "notebooks" / "gpu" / "README.md")


def notebook_sources() -> list[Path]:
    """Every notebooks/NN_*.py (each notebook's paired source)."""
    return sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def doc_files() -> list[Path]:
    """README.md, every docs/*.md, ``OTHER_DOCS`` and ``notebook_sources()``."""
    return [README, *sorted((REPO_ROOT / "docs").glob("*.md")), *OTHER_DOCS, *notebook_sources()]


def docstrings(path: Path) -> list[str]:
    """The module's, every class's and every function's docstring in one .py file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))]
    return [d for d in (ast.get_docstring(n, clean=False) for n in nodes) if d]


def library_files() -> list[Path]:
    """The library's, the tools' and the kernel lab's tools' .py files."""
    return (sorted((REPO_ROOT / "mla_edu").rglob("*.py")) + sorted((REPO_ROOT / "tools").glob("*.py"))
            + sorted((LAB / "tools").glob("*.py")))


def texts(with_docstrings: bool = True) -> list[tuple[str, str]]:
    """Every (name, text) pair the docs tests check."""
    out = [(rel(p), p.read_text(encoding="utf-8")) for p in doc_files()]
    if with_docstrings:
        out += [(rel(p), "\n".join(docstrings(p))) for p in library_files()]
    return out


def norm(text: str) -> str:
    """``text`` with every run of whitespace one space: prose may wrap anywhere."""
    return re.sub(r"\s+", " ", text)


def missing(claims: list[str], text: str) -> list[str]:
    """The claims ``text`` does not contain (whitespace aside)."""
    body = norm(text)
    return [c for c in claims if norm(c) not in body]


def one(pattern: str, text: str) -> re.Match:
    """The one match of ``pattern`` in ``text``; fails unless there is exactly one."""
    found = list(re.finditer(pattern, text))
    assert len(found) == 1, f"expected one match of {pattern!r}, got {len(found)}"
    return found[0]


def span(values, digits: int = 2) -> str:
    """'lo-hi' of ``values`` as printed, or one number where both ends print alike."""
    lo, hi = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return lo if lo == hi else f"{lo}-{hi}"
