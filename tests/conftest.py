import sys
from pathlib import Path

import pytest
import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU before anything imports triton)

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def one_thread():
    """Small ops: one torch thread is faster on a shared 2-core machine (restored afterwards)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


#: exercise -> (mutants generated, differing from the reference, rejected): tests/test_exercises_mutants.py
MUTANT_COUNTS = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def mutant_counts(pytestconfig) -> dict:
    return pytestconfig.stash.setdefault(MUTANT_COUNTS, {})


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counts = config.stash.get(MUTANT_COUNTS, {})
    if counts:
        terminalreporter.write_line("exercise checkers' mutants (generated / differing from the reference / rejected): "
                                    + "; ".join(f"{k} {g}/{d}/{r}" for k, (g, d, r) in sorted(counts.items())))
