"""The "predict, then run" checks of notebooks 01-07: a right prediction passes, a blank one is "not answered
yet", a classic mistake gets its hint, and no input makes a check raise."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from mla_edu.workshop import checks

BAD = [Ellipsis, "x", 1.5, float("nan"), float("inf"), [1], {"a": 1}, 10 ** 5000, -(10 ** 5000),
       np.float64("nan"), torch.tensor([1, 2]), torch.tensor(1, device="meta"), torch.zeros(2, 2), object(),
       [None], [(1, "a")], {(1, 2.5)}]


def test_number():
    assert checks.check_number("q", 67, 67).passed and checks.check_number("q", np.int64(67), 67).passed
    assert checks.check_number("q", torch.tensor(67), 67).passed and checks.check_number("q", 67.0, 67).passed
    assert "not answered yet" in checks.check_number("q", None, 67).message
    assert checks.check_number("q", 0.1985, 0.19844, tolerance=0.02).passed
    assert not checks.check_number("q", 0.25, 0.19844, tolerance=0.02).passed
    r = checks.check_number("q", 66, 67, mistakes={66: "sm_count // B is still 2"})
    assert not r.passed and "sm_count // B is still 2" in r.message and "67" not in r.message
    assert "too small" in checks.check_number("q", 3, 67).message


def test_choice_and_items():
    opts = {True: "agree", False: "disagree"}
    assert checks.check_choice("q", True, opts, True).passed and not checks.check_choice("q", 1, opts, True).passed
    assert checks.check_choice("q", " (B) ", {"a": "x", "b": "y"}, "b").passed
    assert "contradicts" in checks.check_choice("q", "a", {"a": "x", "b": "y"}, "b").message
    assert checks.check_items("q", [0, np.int64(3)], {0, 3}).passed and checks.check_items("q", {"w"}, {"w"}).passed
    assert checks.check_items("q", [(1, 2)], {(1, 2)}).passed
    r = checks.check_items("q", {0}, {3}, mistakes={frozenset({0}): "R_0 is the identity"})
    assert not r.passed and "R_0 is the identity" in r.message


@pytest.mark.parametrize("value", BAD, ids=range(len(BAD)))
def test_no_check_raises(value, capsys):
    for r in [checks.check_number("q", value, 67), checks.check_number("q", value, 0.5, tolerance=0.1),
              checks.check_choice("q", value, {"a": "x", True: "y"}, "a"), checks.check_items("q", value, {7})]:
        assert not r.passed and "\n" not in r.message
    assert len(capsys.readouterr().out.splitlines()) == 4


# ---- every exercise of notebooks 01-07 is checkable, and its answer collapsed ----------------------
NOTEBOOKS = sorted(Path(__file__).parent.parent.glob("notebooks/0[1-7]_*.py"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem[:2] for p in NOTEBOOKS])
def test_each_exercise_has_a_prediction_a_check_and_a_collapsed_answer(path):
    text = path.read_text()
    assert "# ## Exercises" in text, path.name
    section = text[text.index("# ## Exercises"):]
    exercises = re.findall(r"^# \*\*(\d+)\.\*\*", section, flags=re.M)
    assert len(exercises) >= 3 and exercises == [str(i + 1) for i in range(len(exercises))], exercises
    predictions = re.findall(r"^(ex(\d+)_\w+) = None  # ", section, flags=re.M)
    assert {n for _, n in predictions} == set(exercises)  # every exercise asks for a prediction
    for name, _ in predictions:  # ... which the cell after it reads
        assert len(re.findall(rf"\b{name}\b", section)) >= 2, name
    assert len(re.findall(r"checks\.check_\w+\(", section)) >= len(exercises)
    assert section.count("# <details><summary>Answer") == len(exercises) == section.count("# </details>")


def test_notebook_08_checks_every_exercise_and_collapses_its_answers():
    text = (Path(__file__).parent.parent / "notebooks/08_workshop_exercises.py").read_text()
    for check in ("check_replay", "check_mystery", "check_row_stride", "check_workspace_size", "check_stale_reads"):
        assert f"ex.{check}(" in text, check
    assert "ex.MYSTERIES" not in text and "option_for" not in text and "solutions" not in text.split("# %%")[2]
    assert text.count("# <details>") == text.count("# </details>") == 2
