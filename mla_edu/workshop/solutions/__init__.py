"""Worked solutions to the notebooks' exercises (kept apart from the notebooks; try first)."""
