"""The instructor's solutions (``instructor/``) are not in the attendees' copy (``make attendee``: the repository
without ``instructor/``, without this file and without the test modules that call ``require_solutions``). A checkout
without ``instructor/`` made another way skips those modules, with this reason, and nothing else."""

from pathlib import Path

import pytest

#: where the solutions live in a full checkout
INSTRUCTOR = Path(__file__).parent.parent / "instructor"


def require_solutions() -> None:
    """Skips the calling test module in the attendees' copy (no ``instructor/`` folder). Where the folder is there,
    nothing is skipped: a broken ``instructor`` import then fails the module, as it should."""
    if not INSTRUCTOR.is_dir():
        pytest.skip("the instructor's solutions (instructor/) are not in the attendees' copy", allow_module_level=True)
