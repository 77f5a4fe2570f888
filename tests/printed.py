"""A committed, printed number against a fresh, unrounded one (docs/CONTRIBUTING.md's rule).

A value whose last bits depend on the machine (the BLAS's summation order, the thread count, the GPU) can land on
either side of a rounding boundary, so comparing printed numbers at the printed step fails on another machine.
``printed_as`` asks instead whether the committed text is what the format prints for SOME value within ``rel`` of
the fresh one: a tolerance on the unrounded value, chosen well inside the printed step.
"""

from __future__ import annotations


def printed_as(text: str, value: float, spec: str, rel: float) -> bool:
    """Whether ``text`` is ``format(x, spec)`` for some x within ``rel`` (relative) of ``value``.

    Rounding is monotone, so the texts of [lo, hi] are those from ``format(lo)`` to ``format(hi)``: ``text`` must be
    in the format's own spelling and between them."""
    if not 0 <= rel < 0.5:
        raise ValueError(f"rel must be in [0, 0.5), got {rel!r}")
    try:
        number = float(text)
    except ValueError:
        return False
    lo, hi = sorted((value * (1 - rel), value * (1 + rel)))
    return text == format(number, spec) and float(format(lo, spec)) <= number <= float(format(hi, spec))
