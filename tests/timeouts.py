"""A guard for tests of a time limit: they fail, rather than hang the suite, when the limit does not hold."""

import contextlib
import signal

import pytest


@contextlib.contextmanager
def fails_if_hung(seconds: int, what: str):
    """Raise ``TimeoutError(what)`` if the block runs longer than ``seconds`` (SIGALRM: POSIX only; elsewhere the
    test is skipped)."""
    if not hasattr(signal, "SIGALRM"):
        pytest.skip("needs SIGALRM (POSIX) to stop a hung check")

    def too_long(signum, frame):
        raise TimeoutError(what)

    old = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
