"""README leads with learning: after the two commands, a "Learn" block lists notebooks 00-09 in order, one line
each, within the first ~300 words; and "five exercises" wherever the teaching prose says it is notebook 08's count
of checkers (``exercises``). "six pitfalls" is the pitfall registry's ``count()``: tests/test_graphs_check.py."""

import re

from docs_text import NUMBER_WORDS, README, notebook_sources

from mla_edu.paths import REPO_ROOT

TEACHING = (README, REPO_ROOT / "docs" / "instructor.md")


def exercises() -> int:
    """Notebook 08's exercises: one automatic checker each."""
    from mla_edu.workshop import exercises as ex

    return len([name for name in ex.__all__ if name.startswith("check_")])


def test_the_learn_block_follows_the_two_commands_within_300_words():
    text = README.read_text(encoding="utf-8")
    before, _, rest = text.partition("\n## Learn\n")
    assert rest, "README has no '## Learn' section"
    assert "make test" in before.split("\n## Two commands\n")[1], "the Learn block should follow the two commands"
    assert len(before.split()) < 300, f"README's Learn block starts after {len(before.split())} words"
    block = rest.split("\n## ", 1)[0]
    items = re.findall(r"^- \*\*(\d\d)\*\* \[[^\]]+\]\(notebooks/(\d\d_\w+)\.ipynb\): .+$", block, re.M)
    assert all(n == stem[:2] for n, stem in items), items
    assert [f"{stem}.py" for _, stem in items] == [p.name for p in notebook_sources()], "a line a notebook, in order"
    assert "make book" in block  # the book, for those who read before they install


def test_the_quoted_exercise_count_is_notebook_08s():
    want = {"exercises": exercises()}
    found = []
    for path in TEACHING:
        for word, noun in re.findall(rf"\b({'|'.join(NUMBER_WORDS)}) (?:checked )?(exercises)\b",
                                     path.read_text(encoding="utf-8")):
            found.append((path.name, noun, word))
    assert {noun for _, noun, _ in found} == set(want), found
    wrong = [f for f in found if f[2] != NUMBER_WORDS[want[f[1]]]]
    assert not wrong, f"counts that are not the registries' ({want}): {wrong}"
