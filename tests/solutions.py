"""The instructor's solutions (``instructor/``) are not in the attendees' copy (``make attendee``: the repository
without ``instructor/``); the tests that read them skip there, with this reason, and nowhere else."""

from pathlib import Path

import pytest

#: where the solutions live in a full checkout
INSTRUCTOR = Path(__file__).parent.parent / "instructor"


def require_solutions() -> None:
    """Skips the calling test module in the attendees' copy (no ``instructor/`` folder). Where the folder is there,
    nothing is skipped: a broken ``instructor`` import then fails the module, as it should."""
    if not INSTRUCTOR.is_dir():
        pytest.skip("the instructor's solutions (instructor/) are not in the attendees' copy", allow_module_level=True)
