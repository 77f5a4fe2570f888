import sys
from pathlib import Path

import pytest
import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU before anything imports triton)
from mla_edu.device import triton_available

sys.path.insert(0, str(Path(__file__).parent))

import triton_record  # noqa: E402  (tests/, on the path just above)

#: Whether Triton is installed here (it has no wheel for macOS or Windows), and why not.
TRITON = triton_available()
#: The marker of a test that needs Triton: without it the test is skipped with ``TRITON.reason``. A test
#: parametrized with ``impl="triton"`` needs it too, and is skipped the same way without the marker. A test module
#: that imports a Triton kernel module at its top skips itself there (``pytest.importorskip``) and carries the
#: marker, so ``-m "not triton"`` selects the same tests with or without Triton.
TRITON_MARKER = "triton"


def pytest_addoption(parser):
    triton_record.addoption(parser)


def pytest_configure(config):
    triton_record.configure(config)
    config.addinivalue_line("markers", f"{TRITON_MARKER}: needs Triton (skipped where it is not installed; "
                            "tests parametrized with impl='triton' too)")


def _needs_triton(item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return item.get_closest_marker(TRITON_MARKER) is not None or params.get("impl") == "triton"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _needs_triton(item):
            item.add_marker(TRITON_MARKER)
            if not TRITON:
                item.add_marker(pytest.mark.skip(reason=f"needs Triton: {TRITON.reason}"))


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
