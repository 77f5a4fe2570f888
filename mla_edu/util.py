"""Small things used everywhere: the page size, ceiling division and the checks of an int and of a finite number."""

from __future__ import annotations

import math
from contextlib import contextmanager

__all__ = ["INT32_MAX", "PAGE_SIZE", "cdiv", "check_finite", "check_int", "is_int", "torch_threads"]

# Tokens per KV-cache page: cutlass_mla's fixed page size (SGLang's cutlass_mla_backend.py,
# PAGE_SIZE = 128), used by both backends here and by the task's prompt lengths (1..4 pages).
PAGE_SIZE = 128
#: The largest value an int32 holds: the kernels count tokens, slots and offsets in int32.
INT32_MAX = 2**31 - 1


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints, b > 0 (Triton's ``cdiv``): pages needed for ``a`` tokens when ``b = PAGE_SIZE``."""
    return -(-a // b)


def is_int(value) -> bool:
    """True for a Python int that is not a bool (``True`` is an int to ``isinstance``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value, minimum: int) -> int:
    """``value`` if it is an int >= ``minimum``; else TypeError (not an int) or ValueError (too small)."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_finite(name: str, value, why: str = "") -> float:
    """``value`` if it is a real number (not a bool), finite and >= 0; else ValueError naming ``name``, what came and,
    with ``why``, what a bad one would do."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0{f' ({why})' if why else ''}, got {value!r}")
    return value


@contextmanager
def torch_threads(n: int | None):
    """torch's intra-op thread count set to ``n`` inside the block (``None`` or 0: left as it is), and put back after
    it, an exception or an interrupt too: a command's ``main(argv)`` called from a notebook or a test leaves the
    process as it found it."""
    import torch

    before = torch.get_num_threads()
    if n:
        check_int("threads", n, 1)
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
