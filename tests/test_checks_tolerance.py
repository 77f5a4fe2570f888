"""``check_number`` with an int truth and a tolerance: the tolerance applies (relative), as for a float truth."""

from mla_edu.workshop.checks import check_number


def test_int_truth_with_a_tolerance_accepts_a_near_value():
    assert check_number("q", 103, 100, tolerance=0.05).passed  # 3% off, 5% allowed
    assert check_number("q", 103.0, 100, tolerance=0.05).passed
    assert not check_number("q", 106, 100, tolerance=0.05).passed  # 6% off
    assert not check_number("q", 103, 100).passed  # no tolerance: an int truth is matched exactly
    assert check_number("q", 104, 100, tolerance=0.05, mistakes={50: "half"}).passed  # near the truth, not the mistake
