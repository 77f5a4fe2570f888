"""The "predict, then run" checks of notebooks 01-07: a right prediction passes, a blank one is "not answered
yet", a classic mistake gets its hint, and no input makes a check raise."""

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
