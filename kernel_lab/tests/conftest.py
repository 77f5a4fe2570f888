"""The kernel lab's tests (``make test-kernel-lab``) read prose with the teaching suite's helpers
(tests/docs_text.py)."""

import sys

from mla_edu.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tests"))
