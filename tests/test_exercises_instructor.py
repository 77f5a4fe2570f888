"""Solutions for the instructor only (issues 46 and 47): no solution is reachable from a learner's notebook, the
learner's book sources or ``import mla_edu``; no answer reachable from the package passes a checker; the instructor
build (``make instructor``, ``tools/instructor.py``) holds every solution; the attendees' copy (``make attendee``)
holds none, and its tests run without them."""

import ast
import importlib
import inspect
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import mla_edu
from solutions import require_solutions
from tools import instructor as build

require_solutions()
from instructor import answers, ex08  # noqa: E402

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted(ROOT.glob("notebooks/0[1-8]_*.ipynb"))


def _solution_lines() -> list:
    """Distinctive lines of every solution: each block's prose lines and each line of ex08.py's functions."""
    lines = []
    for path in sorted(build.SOLUTIONS.glob("*.md")):  # the prose (the code comes from ex08.py below)
        lines += [ln.strip() for ln in path.read_text().splitlines() if len(ln.strip()) > 40 and "<" not in ln]
    source = inspect.getsource(ex08)  # the workspace formula is the library's own (kernels/workspace.py): left out
    body = source[source.index("def replay"):source.index("# 4. sgl-kernel")] + source[source.index("# 5. A read"):]
    lines += [ln.strip() for ln in body.splitlines() if len(ln.strip()) > 30 and not ln.strip().startswith("#")
              and "import" not in ln and not ln.strip().startswith(('"""', "def "))]
    return sorted(set(lines))


def test_every_notebook_with_exercises_has_its_solutions():
    stems = {p.stem for p in build.SOLUTIONS.glob("*.md")}
    assert stems == {p.stem for p in NOTEBOOKS}
    assert set(answers.ANSWERS) == stems


def test_no_solution_in_a_learners_notebook_or_the_learners_book():
    sources = [p.read_text() for p in NOTEBOOKS] + [p.with_suffix(".py").read_text() for p in NOTEBOOKS]
    sources += [p.read_text() for p in (ROOT / "docs").glob("*.md")]
    lines = _solution_lines()
    assert len(lines) > 100
    for line in lines:
        hits = [i for i, text in enumerate(sources) if line in text]
        assert not hits, line


def test_no_solution_reachable_from_import_mla_edu():
    modules = [m.name for m in pkgutil.walk_packages(mla_edu.__path__, "mla_edu.")]
    assert not [m for m in modules if "solution" in m]
    package_text = "\n".join(p.read_text() for p in Path(mla_edu.__file__).parent.rglob("*.py"))
    package_text += "\n".join(p.read_text() for p in Path(mla_edu.__file__).parent.rglob("*.json")
                              if p.stat().st_size < 10 ** 6)
    for line in _solution_lines():
        assert line not in package_text, line
    for name in ("MYSTERY_ANSWERS", "MYSTERY_ENGINES", "ROW_STRIDE_ANSWERS", "option_for", "_row_stride_truth",
                 "_mystery_engine"):
        assert name not in package_text, name


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None or not (ROOT / ".git").exists(),
                    reason="make attendee archives the committed tree: needs git, make and the repository's history")
def test_the_attendees_copy_has_no_solution_nor_the_tests_that_read_them(tmp_path):
    # docs/instructor.md sends attendees `make attendee`'s archive (HEAD without instructor/): no solution in it, nor
    # the four test modules that read them, and its test suite collects everything else
    tar = tmp_path / "attendee.tar.gz"
    subprocess.run(["make", "-s", "attendee", f"ATTENDEE={tar}"], cwd=ROOT, check=True, capture_output=True)
    with tarfile.open(tar) as t:
        names = t.getnames()
        t.extractall(tmp_path, filter="data")
    assert "mla-edu/README.md" in names and "mla-edu/tests/test_serving.py" in names
    assert [n for n in names if n.startswith("mla-edu/instructor")] == []
    # nor the modules that read the solutions (their reference answers and near misses), nor their helper
    readers = sorted(p.name for p in (ROOT / "tests").glob("*.py") if "\nrequire_solutions()" in p.read_text())
    assert len(readers) == 4 and __file__.endswith(tuple(readers))
    assert [n for n in names if n.endswith(tuple(["/solutions.py"] + readers))] == []
    copy = tmp_path / "mla-edu"
    # the copy first; what else PYTHONPATH holds stays (on the GPU machine, tools.gpu_suite's carried test stack), but
    # this repository, whose instructor/ would be found
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT.resolve()]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "--collect-only",
                          "tests"], cwd=copy, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), *kept])},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    # (without Triton, other modules skip at collection too, for their own reason)
    skipped = [ln for ln in run.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert [ln for ln in skipped if "solutions" in ln or "instructor" in ln] == [], run.stdout[-3000:]
    # no text of the copy names a file it left out
    docs = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_docs_paths.py"],
                          cwd=copy, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), *kept])},
                          capture_output=True, text=True, timeout=300)
    assert docs.returncode == 0, docs.stdout[-3000:] + docs.stderr[-2000:]


def test_the_package_does_not_ship_the_instructor_folder():
    from setuptools import find_packages

    assert not [p for p in find_packages(str(ROOT), include=["mla_edu*"]) if "instructor" in p or "solution" in p]
    toml = (ROOT / "pyproject.toml").read_text()
    assert "workshop/mysteries.json" in toml  # the figures' data ships; the engines behind them do not


def test_no_answer_reachable_from_the_package_passes_a_checker(capsys):
    """Issue 47: ``ex._row_stride_truth()`` and ``ex._mystery_engine(k)`` returned the answers and ``ex.stale_cases()``
    held every step's truth. The module holds no value that is an answer, its case sets hold inputs only, the
    mystery data hold the figures' reads only, and the checkers' own truth code is refused inside a learner's
    function."""
    from mla_edu.workshop import exercises as ex

    assert not hasattr(ex, "_row_stride_truth") and not hasattr(ex, "_mystery_engine")
    for name, value in vars(ex).items():
        assert value != ex08.ROW_STRIDE_ANSWERS and value != ex08.MYSTERY_ANSWERS, name
        if isinstance(value, dict) and not name.startswith("__"):
            assert not all(value.get(k) == v for k, v in ex08.MYSTERY_ANSWERS.items()), name
    for case in ex.stale_cases() + ex.stale_domain()[:50]:
        assert len(case) == 3 and not any(isinstance(x, (set, frozenset)) for x in case)
    for k in ex.MYSTERY_NUMBERS:
        data = json.loads(ex.MYSTERY_FILE.read_text())[str(k)]
        assert set(data) == {"seq_lens", "intended", "read", "buffer", "live", "row_err"}  # no engine, no option
    assert not ex.check_stale_reads(lambda b, s, r: ex._stale_variant(b, s, r)).passed
    assert not ex.check_workspace_size(lambda *a: ex._split_variant(*a) * ex.BYTES_PER_BATCH_SPLIT * a[1]).passed
    assert not ex.check_workspace_size(mla_edu.kernels.get_workspace_size).passed
    capsys.readouterr()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("instructor")
    return out, build.build_notebooks(out)


def test_the_instructor_build_holds_every_solution_after_its_check(built):
    out, written = built
    assert sorted(p.name for p in written) == sorted(p.name for p in ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
    for path in NOTEBOOKS:
        cells = json.loads((out / "notebooks" / path.name).read_text())["cells"]
        blocks = build.solution_blocks(path.stem)
        solution_cells = [i for i, c in enumerate(cells) if "solution" in c["metadata"].get("tags", [])]
        assert len(solution_cells) == len(blocks) > 0, path.name
        for i, (anchor, text) in zip(solution_cells, blocks):
            assert "".join(cells[i]["source"]).startswith(text)  # then its checks' common wrong answers
            assert cells[i - 1]["cell_type"] == "code" and anchor in "".join(cells[i - 1]["source"]), (path, anchor)
        learner = json.loads(path.read_text())["cells"]
        assert len(cells) == len(learner) + len(blocks)  # nothing else changed


def test_every_exercise_check_is_followed_by_its_own_solution(built):
    """One solution block per exercise, right after the cell that checks it (``r1 = ...``, ``m2 = ...``)."""
    out, _ = built
    for path in NOTEBOOKS:
        cells = json.loads((out / "notebooks" / path.name).read_text())["cells"]
        checks = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
                  and re.search(r"^[rm]\d+ = ", "".join(c["source"]), flags=re.M)]
        assert checks, path.name
        for i in checks:
            assert "solution" in cells[i + 1]["metadata"].get("tags", []), (path.name, "".join(cells[i]["source"]))


def _checkers_hints(source: str) -> list:
    """Every hint the checks of one code cell know for a classic wrong answer, read here on its own: the literal
    strings of ``mistakes=`` and ``hint=`` in the cell, and the hint tables of notebook 08's checkers."""
    from mla_edu.workshop import exercises as ex

    tables = {"check_replay": list(ex.REPLAY_HINTS.values()),
              "check_workspace_size": [h for _, h in ex.WORKSPACE_MISTAKES.values()]
              + list(ex.bytes_mistakes().values()) + [ex.WORKSPACE_BATCH_HINT],
              "check_stale_reads": list(ex.STALE_MISTAKES.values()),
              "check_row_stride": [h for m in ex.ROW_STRIDE_MISTAKES.values() for h in m.values()]
              + list(ex.ROW_STRIDE_OTHER.values())}
    hints = []
    for call in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)):
        name = getattr(call.func, "attr", getattr(call.func, "id", None))
        hints += tables.get(name, [])
        for kw in call.keywords:
            if kw.arg == "mistakes":
                hints += [(ast.get_source_segment(source, k), ast.literal_eval(v))
                          for k, v in zip(kw.value.keys, kw.value.values)]
            elif kw.arg == "hint":
                hints.append(ast.literal_eval(kw.value))
    return hints


def test_each_solution_lists_its_checkers_common_wrong_answers(built):
    out, _ = built
    seen = 0
    for path in NOTEBOOKS:
        cells = json.loads((out / "notebooks" / path.name).read_text())["cells"]
        for i, cell in enumerate(cells):
            if "solution" not in cell["metadata"].get("tags", []):
                continue
            shown = "".join(cell["source"])
            for hint in _checkers_hints("".join(cells[i - 1]["source"])):
                wrong, hint = hint if isinstance(hint, tuple) else ("", hint)
                assert hint in shown and wrong in shown, (path.name, wrong, hint)
                seen += 1
    assert seen > 60  # every notebook 01-08 has some: 40 of notebook 08's tables alone


def test_notebook_08s_instructor_copy_holds_the_solution_code(built):
    out, _ = built
    text = (out / "notebooks" / "08_workshop_exercises.ipynb").read_text()
    for fn in (ex08.replay, ex08.workspace_size, ex08.stale_reads):
        assert json.dumps(inspect.getsource(fn).splitlines()[1])[1:-1] in text, fn.__name__


def test_an_anchor_that_matches_no_cell_is_refused(tmp_path, monkeypatch):
    (tmp_path / "01_mla_from_the_paper.md").write_text("<!-- after: no such cell -->\nx\n")
    monkeypatch.setattr(build, "SOLUTIONS", tmp_path)
    with pytest.raises(ValueError, match="no code cell contains the solution anchor"):
        build.with_solutions(ROOT / "notebooks/01_mla_from_the_paper.ipynb")


def test_the_instructor_answers_are_the_checks_answers():
    """The answers file agrees with the solutions' prose where it states a number."""
    for stem, preds in answers.ANSWERS.items():
        text = (build.SOLUTIONS / f"{stem}.md").read_text().replace(",", "")
        for name, value in preds.items():
            if isinstance(value, int) and not isinstance(value, bool) and value >= 10:
                assert re.search(rf"\b{value}\b", text), (stem, name, value)


def test_make_instructor_runs_the_build():
    assert "instructor: $(VENV)/.ready\n\t$(PY) -m tools.instructor" in (ROOT / "Makefile").read_text()
    importlib.import_module("tools.instructor")


def test_the_instructor_book_carries_the_decks_its_slide_page_links(tmp_path, capsys):
    # docs/slides.md links slides/<deck>.slides.html next to the book; the instructor book is built elsewhere, so
    # the build copies the decks in (before, every link on its slide page was dead)
    links = re.findall(r'href="(slides/[^"]+)"', (ROOT / "docs" / "slides.md").read_text())
    assert len(links) >= 12, links
    decks, book = tmp_path / "decks", tmp_path / "book"
    book.mkdir()
    assert not build.copy_decks(book, decks)
    assert "slide links stay dead until `make slides`" in capsys.readouterr().err
    decks.mkdir()
    for link in links:
        (decks / Path(link).name).write_text("deck")
    assert build.copy_decks(book, decks)
    assert [link for link in links if not (book / link).is_file()] == []
    assert build.DECKS == ROOT / "build" / "book" / "slides"
    from tools import slides
    assert build.DECKS == slides.OUT
