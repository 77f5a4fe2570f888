"""mla_edu.util's checks, by enumeration of what can come: every kind of number and of not-a-number."""

from __future__ import annotations

import math
import re

import pytest

from mla_edu.util import check_finite, check_int


@pytest.mark.parametrize("value", [0, 0.0, 1, 2.5, 1e300, 10**20])
def test_check_finite_returns_a_finite_number_at_or_above_zero(value):
    assert check_finite("x", value) == value


@pytest.mark.parametrize("value", [-1, -0.5, -1e-300, math.nan, math.inf, -math.inf, True, False, "1", None, [1]])
def test_check_finite_refuses_the_rest_naming_what_came_and_why(value):
    got = re.escape(repr(value))
    with pytest.raises(ValueError, match=rf"^x must be a finite number >= 0 \(a reason\), got {got}$"):
        check_finite("x", value, "a reason")
    with pytest.raises(ValueError, match=r"^x must be a finite number >= 0, got "):
        check_finite("x", value)


@pytest.mark.parametrize("value, minimum, error", [(True, 0, TypeError), (1.0, 0, TypeError), ("1", 0, TypeError),
                                                   (-1, 0, ValueError), (0, 1, ValueError)])
def test_check_int_refuses_a_non_int_and_a_small_one(value, minimum, error):
    with pytest.raises(error, match="^x must be "):
        check_int("x", value, minimum)
    assert check_int("x", minimum, minimum) == minimum


def test_torch_threads_puts_the_count_back_after_an_exception_too():
    import torch

    from mla_edu.util import torch_threads

    before = torch.get_num_threads()
    with pytest.raises(KeyboardInterrupt):
        with torch_threads(1):
            assert torch.get_num_threads() == 1
            raise KeyboardInterrupt
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be >= 1, got -2"):
        with torch_threads(-2):
            pass
    assert torch.get_num_threads() == before
