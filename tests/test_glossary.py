"""docs/glossary.md: every term is linked from the notebooks, and every link names a term that is there."""

import re

from docs_text import notebook_sources

from mla_edu.paths import REPO_ROOT

GLOSSARY = REPO_ROOT / "docs" / "glossary.md"
LINK = re.compile(r"\]\(\.\./docs/glossary\.md#([\w-]+)\)")


def anchor(heading: str) -> str:
    """The id MyST gives a heading (myst_heading_anchors): lower case, spaces to '-', punctuation dropped."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_anchor_spelling():
    assert [anchor(h) for h in ("W", "`block_num`", "Padded rows", "DP attention")] == [
        "w", "block_num", "padded-rows", "dp-attention"]


def test_every_term_is_linked_and_every_link_has_a_term():
    terms = {anchor(m) for m in re.findall(r"^## (.+)$", GLOSSARY.read_text(), re.MULTILINE)}
    links = {}
    for path in notebook_sources():
        for target in LINK.findall(path.read_text()):
            links.setdefault(target, []).append(path.name)
    assert not sorted(set(links) - terms), f"links to terms the glossary lacks: {sorted(set(links) - terms)}"
    unlinked = sorted(terms - set(links))
    assert not unlinked, f"glossary terms no notebook links to where they first appear: {unlinked}"
    assert all(len(set(files)) == 1 for files in links.values()), {t: f for t, f in links.items() if len(f) > 1}
