"""Every PR, issue and commit cited in README, docs/ and the notebooks' .py is listed in docs/sources.md,
in an entry that says what it is used for.

A PR or issue is ``#N`` or ``owner/repo#N``; sources.md must link it (``github.com/<repo>/pull/N`` or
``/issues/N``; with the repository when the citation names one). A commit is a 7-40 digit hex token
with a digit and a letter; sources.md must hold it (either one a prefix of the other), unless it is
a commit of this repository (``git cat-file``: README cites the runs in ``results/`` by commit). The
entry (a top-level ``- `` item of sources.md, with its section's heading) must name a use: a notebook,
README, a module, a tool or a results file.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from docs_text import SOURCES, rel, texts

from mla_edu.paths import REPO_ROOT

REF_RE = re.compile(r"(?<![\w&/#])(?:(?P<repo>[\w.-]+/[\w.-]+))?#(?P<num>\d{2,6})\b")
HEX_RE = re.compile(r"(?<![\w/.-])[0-9a-f]{7,40}(?![\w-])")
LINK_RE = re.compile(r"github\.com/(?P<repo>[\w.-]+/[\w.-]+)/(?:pull|issues)/(?P<num>\d+)")
USE_RE = re.compile(r"\b(?:[Nn]otebooks? \d\d|README|mla_edu[./]\w|tools/\w|results/\w|[Uu]sed (?:by|for|throughout))")


def refs(text: str) -> set[tuple[str | None, str]]:
    """(repo or None, number) of every ``#N`` / ``owner/repo#N`` citation."""
    return {(m.group("repo"), m.group("num")) for m in REF_RE.finditer(text)}


def commits(text: str) -> set[str]:
    return {h for h in HEX_RE.findall(text) if re.search(r"\d", h) and re.search(r"[a-f]", h)}


def entries(sources: str) -> list[str]:
    """Each top-level item of sources.md with the heading of its section in front."""
    out, heading = [], ""
    for block in re.split(r"\n(?=- |#)", sources):
        if block.startswith("#"):
            heading = block.splitlines()[0]
        elif block.startswith("- "):
            out.append(f"{heading}\n{block}")
    return out


def own_commit(h: str) -> bool:
    return subprocess.run(["git", "-C", str(REPO_ROOT), "cat-file", "-e", f"{h}^{{commit}}"],
                          capture_output=True).returncode == 0


def problems(name: str, text: str, sources: str, is_own=own_commit) -> list[str]:
    listed = entries(sources)
    out = []
    for repo, num in sorted(refs(text), key=str):
        hits = [e for e in listed if any(m.group("num") == num and (repo is None or m.group("repo") == repo)
                                         for m in LINK_RE.finditer(e))]
        cite = f"{repo or ''}#{num}"
        if not hits:
            out.append(f"{name}: {cite} has no link in docs/sources.md")
        elif not any(USE_RE.search(e) for e in hits):
            out.append(f"{name}: {cite}: its sources.md entry does not say what it is used for")
    listed_hashes = commits(sources)
    for h in sorted(commits(text)):
        hits = [e for e in listed if any(x.startswith(h) or h.startswith(x) for x in commits(e))]
        if not hits and any(x.startswith(h) or h.startswith(x) for x in listed_hashes):
            hits = [sources]
        if not hits:
            if not is_own(h):
                out.append(f"{name}: commit {h} is neither in docs/sources.md nor a commit of this repository")
        elif not any(USE_RE.search(e) for e in hits):
            out.append(f"{name}: commit {h}: its sources.md entry does not say what it is used for")
    return out


@pytest.mark.skipif(shutil.which("git") is None or not (REPO_ROOT / ".git").exists(),
                    reason="needs the git history (README cites this repository's commits)")
def test_every_cited_source_is_in_sources_md():
    sources = SOURCES.read_text(encoding="utf-8")
    found = [p for name, text in texts(with_docstrings=False) if name != rel(SOURCES)
             for p in problems(name, text, sources)]
    assert not found, "\n".join(found)


def test_every_sources_entry_says_what_it_is_used_for():
    missing = [e.splitlines()[1][:90] for e in entries(SOURCES.read_text(encoding="utf-8")) if not USE_RE.search(e)]
    assert not missing, "sources.md entries that name no use:\n" + "\n".join(missing)


SOURCES_SAMPLE = """## SGLang

- **PR #6998** ([sgl-project/sglang#6998](https://github.com/sgl-project/sglang/pull/6998)), merged as
  `e58423b2b`, parent `7059ae16f`. Used throughout; notebooks 06 and 07.
- **PR #7145** ([#7145](https://github.com/sgl-project/sglang/pull/7145), `aa46ed34d`): two q tensors.

## Tools

- **nbclient issue #312**, [jupyter/nbclient#312](https://github.com/jupyter/nbclient/issues/312): why
  `tools/run_notebooks.py` polls.
"""


def not_own(_h):
    return False


@pytest.mark.parametrize("cited, why", [
    ("SGLang PR #7184 passed the scale", "#7184 has no link"),
    ("the commit `ab1a4fa5c`", "commit ab1a4fa5c is neither in docs/sources.md"),
    ("PR #7145 split q", "#7145: its sources.md entry does not say what it is used for"),
    ("commit `aa46ed34d`", "commit aa46ed34d: its sources.md entry does not say"),
    ("flashinfer-ai/flashinfer#312", "flashinfer-ai/flashinfer#312 has no link"),
])
def test_a_missing_source_is_caught(cited, why):
    found = problems("notebooks/07_the_fix.py", f"Prose: {cited}, and more.", SOURCES_SAMPLE, is_own=not_own)
    assert len(found) == 1 and why in found[0], found


@pytest.mark.parametrize("cited", ["PR #6998 (`e58423b2b9f2`)", "`7059ae16fb0793a0dd41576e3f20b045eaef9400`",
                                   "jupyter/nbclient#312", "nbclient issue #312", "a color #1f77b4, a hash 1234567"])
def test_a_listed_source_passes(cited):
    assert problems("README.md", f"Prose: {cited}.", SOURCES_SAMPLE, is_own=not_own) == []
