"""Every repository path written in README, docs/, the notebooks' .py and the library's docstrings exists.

A path is a token with a ``/`` whose first part is a top-level entry of this repository (``mla_edu/``,
``results/``, ``Makefile``, ...) or a subpackage of ``mla_edu`` (``kernels/decode.py``); upstream paths
(``python/sglang/...``, ``csrc/...``) and URLs are not. ``{a,b}`` is expanded, ``*`` globs (one match
at least), a trailing ``/`` must be a folder. Dotted modules (``python -m tools.kernel_bench``,
``kernel_lab.tools.stage1_ab``, ``mla_edu.case_study.repro``) must resolve to a file, and a trailing attribute must
be defined there.
Generated paths (not in a checkout until a target makes them) are listed in ``GENERATED`` with why.
"""

from __future__ import annotations

import itertools
import re

import pytest
from docs_text import rel, texts

from mla_edu.paths import REPO_ROOT

#: paths a command writes; absent from a fresh checkout, so only these spellings may be written
GENERATED = {
    "build/book/": "make book writes the static HTML site there",
    "build/book/slides/": "make slides writes a reveal.js deck per track and per notebook there (tools/slides.py)",
    "build/book/slides/vendor/": "make slides unpacks reveal.js and what the decks load there",
    "build/npm/": "make slides keeps the npm packages it fetched there",
    "build/lab_run_all_seconds.json": "make test-lab LAB_WORKERS=1 writes the Run All timings of every notebook there",
    "build/instructor/": "make instructor writes the instructor's copies there (tools/instructor.py)",
    "build/instructor/notebooks/": "make instructor writes every notebook with its solutions there",
    "build/instructor/book/": "make instructor builds the book from those notebooks there",
    "build/gpu_suite/": "make test-gpu leaves each part's junit xml, log and json there (tools/gpu_suite.py)",
    "build/mla-edu-attendee.tar.gz": "make attendee writes the attendees' copy there (no instructor/)",
    ".venv/": "make creates the environment (make .venv/.ready)",
    ".venv/.ready": "the Makefile's stamp that .venv is complete",
    ".venv/bin/jupyter": "installed into .venv by make",
    ".venv/bin/python": "installed into .venv by make",
    ".venv/bin/jupytext": "installed into .venv by make",
}
#: results a GPU run will write, named before it ran (the run is the lead's, on the H200); an entry goes once its
#: file is committed (a test fails while both are there)
AWAITED: dict[str, str] = {}
SPHINX_SUFFIXES = (".ipynb", ".md")  # a toctree entry (docs/index.md) names a page without its suffix
GENERATED_TOPS = {"build", ".venv", ".venv-latest"}
PACKAGE = REPO_ROOT / "mla_edu"
TOPS = {p.name for p in REPO_ROOT.iterdir()
        if not p.name.startswith(".") and p.name not in GENERATED_TOPS and not p.name.endswith(".egg-info")} | {".ci"}
SUBPACKAGES = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}

PLACEHOLDER_RE = re.compile(r"(^|/)[A-Z]{1,3}(\.\w+)?(/|$)")  # notebooks/X.py, NN/: a template, not a path
PATH_RE = re.compile(r"(?<![\w./:@~-])(\.?[\w{}*,-]+(?:\.[\w{}*,-]+)*/[\w./{}*,-]*)")
MODULE_RE = re.compile(r"(?<![\w./-])((?:mla_edu|tools|kernel_lab)(?:\.[A-Za-z_]\w*)+)")


def expand_braces(token: str) -> list[str]:
    """``requirements/{cpu,gpu}.in`` -> both paths."""
    parts = re.split(r"\{([^{}]*)\}", token)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def repo_paths(text: str) -> list[str]:
    """The repository paths written in ``text`` (upstream paths and URLs left out)."""
    out = []
    for m in PATH_RE.finditer(text):
        token = m.group(1).rstrip(".,:")
        if text[m.end():m.end() + 1] == "<" or PLACEHOLDER_RE.search(token):  # tests/test_<module>.py
            continue
        first = token.split("/", 1)[0]
        if first in TOPS or first in GENERATED_TOPS:
            out.append(token)
        elif first in SUBPACKAGES:
            out.append(f"mla_edu/{token}")
    return out


def missing_path(token: str) -> str | None:
    """None if ``token`` names something in the checkout (or an allowed generated path), else why not."""
    if token.split("/", 1)[0] in GENERATED_TOPS:
        return None if token in GENERATED else "a generated path not in GENERATED (add it there, with the command)"
    if token in AWAITED:
        return None
    for path in expand_braces(token):
        if "*" in path:
            if not list(REPO_ROOT.glob(path.rstrip("/"))):
                return f"{path}: the glob matches nothing"
        elif path.endswith("/"):
            if not (REPO_ROOT / path).is_dir():
                return f"{path}: no such folder"
        elif not any((REPO_ROOT / (path + ext)).exists() for ext in ("", *SPHINX_SUFFIXES)):
            return f"{path}: no such file"
    return None


def missing_module(dotted: str) -> str | None:
    """None if ``mla_edu.a.b`` / ``tools.x`` is a module (or a name defined in one), else why not."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = REPO_ROOT.joinpath(*parts[:n])
        source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if source.is_file() or (base.is_dir() and n == len(parts)):
            break
    else:
        return f"{dotted}: no such module"
    rest = parts[n:]
    if not rest:
        return None
    if len(rest) > 1 or not source.is_file():
        return f"{dotted}: {'.'.join(parts[:n])} has no module {'.'.join(rest)}"
    if not re.search(rf"\b{re.escape(rest[0])}\b", source.read_text(encoding="utf-8")):
        return f"{dotted}: {rel(source)} defines no {rest[0]!r}"
    return None


def problems(name: str, text: str) -> list[str]:
    out = [f"{name}: {token!r}: {why}" for token in repo_paths(text) if (why := missing_path(token))]
    out += [f"{name}: {why}" for m in MODULE_RE.finditer(text) if (why := missing_module(m.group(1).rstrip(".")))]
    return out


def test_every_written_path_exists():
    found = [p for name, text in texts() for p in problems(name, text)]
    assert not found, "paths that do not exist:\n" + "\n".join(found)


def test_the_extraction_finds_what_it_should():
    # what counts as a repository path, and what does not
    text = ("see `mla_edu/kernels/schedule.py`, kernels/decode.py, [08](notebooks/08_workshop_exercises.ipynb), "
            "`requirements/{cpu,gpu}.in`, `results/graph_scenarios_*.md`, `build/book/`; upstream "
            "`python/sglang/srt/managers/scheduler.py`, `csrc/flash_api.cpp`, https://github.com/a/b/blob/c/tests/x.py")
    assert repo_paths(text) == ["mla_edu/kernels/schedule.py", "mla_edu/kernels/decode.py",
                                "notebooks/08_workshop_exercises.ipynb", "requirements/{cpu,gpu}.in",
                                "results/graph_scenarios_*.md", "build/book/"]
    assert [m.group(1) for m in MODULE_RE.finditer("python -m tools.kernel_bench; mla_edu.graphs.check()")] == [
        "tools.kernel_bench", "mla_edu.graphs.check"]


@pytest.mark.parametrize("stale, why", [
    ("the solutions are in `mla_edu/solutions/ex08.py`", "mla_edu/solutions/ex08.py: no such file"),
    ("`results/no_such_run_*.md`", "the glob matches nothing"),
    ("`requirements/{cpu,tpu}.in`", "requirements/tpu.in: no such file"),
    ("`figures/page_table.png/`", "no such folder"),
    ("`build/lab_seconds.json`", "a generated path not in GENERATED"),
    ("python -m tools.kernel_benchmark", "defines no 'kernel_benchmark'"),
    ("`mla_edu.graphs.no_such_name`", "defines no 'no_such_name'"),
])
def test_a_stale_path_is_caught(stale, why):
    found = problems("README.md", f"Some prose around it: {stale}, and more prose.")
    assert len(found) == 1 and why in found[0], found


def test_every_generated_path_is_under_a_generated_folder():
    assert all(p.split("/", 1)[0] in GENERATED_TOPS and why for p, why in GENERATED.items())


def test_an_awaited_result_is_not_there_yet():
    there = [p for p in AWAITED if (REPO_ROOT / p).exists()]
    assert not there, f"{there} committed: remove them from AWAITED"


def test_the_offline_kits_platform_tags_are_the_platform_checks():
    """The instructor's offline kit downloads each laptop lock's wheels by the platform tag that
    ``make check-platforms`` checks that lock against (``tools.check_platforms.PLATFORMS``), into a folder named for
    the lock; setup.md names the same folders."""
    from tools.check_platforms import MACOS_TARGET, PLATFORMS

    guide = " ".join((REPO_ROOT / "docs" / "instructor.md").read_text().replace("\\\n", " ").split())
    kit = re.findall(r"pip download -d wheels-([\w-]+) --only-binary=:all: --no-deps --platform (\S+) "
                     r"--python-version 3\.11 -r requirements/([\w-]+)\.txt", guide)
    assert sorted(kit) == sorted((lock, tags[0], lock) for lock, tags in PLATFORMS.items())
    setup = (REPO_ROOT / "docs" / "setup.md").read_text()
    assert all(f"wheels-{lock}" in setup for lock in PLATFORMS)
    major = MACOS_TARGET.split(".")[0]  # the macOS the torch wheel is built for, as setup.md says
    assert f"macOS {major} or later" in setup and f"macosx_{major}_0_arm64" in setup
    assert PLATFORMS["macos-arm64"][0] == f"macosx_{major}_0_arm64"
