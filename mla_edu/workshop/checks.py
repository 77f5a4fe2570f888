"""The checks of the "predict, then run" exercises of notebooks 01-07, and what every checker shares.

Each exercise asks for a prediction in a variable (``None`` until the learner writes one); the cell after it
runs the experiment with the library and hands the measured truth to a check here, which prints one line:
"not answered yet", PASS and what was measured, or NOT YET and a hint (a named classic mistake where the
notebook gives one, never the measured value: the learner re-runs with a new prediction). None raises,
whatever it is given. The answers, with the why, are in each exercise's dropdown in the book.

| check | the learner predicts |
|---|---|
| ``check_number(q, prediction, truth)`` | a number (an int, or a float within a tolerance) |
| ``check_choice(q, prediction, options, truth)`` | one of a few labelled options |
| ``check_items(q, prediction, truth)`` | a set of items (rows, entries, names) |
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass


@dataclass
class ExerciseResult:
    passed: bool
    message: str

    def __str__(self) -> str:
        return ("PASS: " if self.passed else "NOT YET: ") + self.message

    def __repr__(self) -> str:
        return f"ExerciseResult(passed={self.passed})"


def report(passed: bool, message: str) -> ExerciseResult:
    """Print and return the result, on one line."""
    r = ExerciseResult(passed, " ".join(message.split()))
    print(r)
    return r


def show(x, limit: int = 48) -> str:
    """A short one-line repr of anything a learner gives (a 5000-digit int, a tensor, an object whose repr raises)."""
    try:
        if isinstance(x, int) and x.bit_length() > 128:  # str() of a 5000-digit int raises
            return f"an int of about {int(x.bit_length() * math.log10(2)) + 1} digits"
        s = " ".join(repr(x).split())
    except Exception:
        s = f"a {type(x).__name__}"
    return s if len(s) <= limit else s[: limit - 3] + "..."


def as_int(x, allow_float: bool = False):
    """``x`` as a Python int, or None: ints and integer-likes (numpy's int64, a one-element integer tensor on
    any device) count, bools do not; with ``allow_float`` a finite float with no fractional part too."""
    import torch

    try:
        if isinstance(x, bool) or type(x).__name__ == "bool_":
            return None
        if isinstance(x, torch.Tensor):
            if x.numel() != 1 or x.dtype == torch.bool or x.is_complex() or x.device.type == "meta":
                return None
            x = x.item()
            if isinstance(x, float) and not allow_float:
                return None
        if isinstance(x, float) or type(x).__module__ == "numpy" and "float" in type(x).__name__:
            x = float(x)
            return int(x) if allow_float and math.isfinite(x) and x.is_integer() else None
        return operator.index(x)
    except Exception:
        return None


def as_float(x):
    """``x`` as a finite Python float, or None (bools, NaN, infinities, strings and multi-element tensors are not)."""
    try:
        if isinstance(x, (bool, str, bytes)) or type(x).__name__ == "bool_":
            return None
        if hasattr(x, "numel") and x.numel() != 1:
            return None
        v = float(x.item() if hasattr(x, "item") else x)
        return v if math.isfinite(v) else None
    except Exception:
        return None


def describe(e: BaseException, limit: int = 160) -> str:
    """``"TypeError: the first line of its message"`` (at most ``limit`` characters of it), whatever ``str(e)`` does."""
    try:
        first = str(e).splitlines()[0][:limit] if str(e) else ""
    except Exception:
        first = ""
    return f"{type(e).__name__}: {first}"


def call(fn, *args):
    """``(value, None)`` or ``(None, a one-line description of what fn raised)``."""
    try:
        return fn(*args), None
    except (Exception, SystemExit) as e:  # the learner's code: any failure is a hint, not a crash
        return None, describe(e)


def not_answered(prediction) -> bool:
    return prediction is None or prediction is Ellipsis


def _waiting(question: str) -> ExerciseResult:
    return report(False, f"{question}: not answered yet; write your prediction above and run this cell again")


def check_number(question: str, prediction, truth, *, tolerance: float = 0.0, mistakes: dict | None = None,
                 unit: str = "") -> ExerciseResult:
    """``prediction`` against the measured ``truth``: equal for an int truth, within ``tolerance`` (relative)
    for a float one. ``mistakes``: {the value a classic mistake gives: its hint}."""
    if not_answered(prediction):
        return _waiting(question)
    exact = isinstance(truth, int) and tolerance == 0
    value = as_int(prediction, allow_float=True) if exact else as_float(prediction)
    if value is None:
        return report(False, f"{question}: expected {'an int' if exact else 'a number'}, got "
                             f"{type(prediction).__name__} {show(prediction)}")
    if (value == truth) if exact else math.isclose(value, truth, rel_tol=tolerance, abs_tol=1e-12):
        return report(True, f"{question}: {truth:,}{unit}" if exact else f"{question}: {truth:.4g}{unit}")
    for wrong, hint in (mistakes or {}).items():
        if (value == wrong) if exact else math.isclose(value, wrong, rel_tol=tolerance, abs_tol=1e-12):
            return report(False, f"{question}: not {show(prediction)}; {hint}")
    side = "too large" if value > truth else "too small"
    return report(False, f"{question}: not {show(prediction)} ({side}); see the hint in the exercise")


def option_key(answer):
    """A written option label as a key: ``"b"``, ``"B"``, ``"(b)"``, ``" b. "`` -> ``"b"``; anything but a str as is."""
    if not isinstance(answer, str):
        return answer
    return answer.strip().strip(".").strip().strip("()").strip().lower()


def check_choice(question: str, prediction, options: dict, truth) -> ExerciseResult:
    """``prediction``: a key of ``options`` ("a", "b", ... or True / False) against the measured ``truth``."""
    if not_answered(prediction):
        return _waiting(question)
    key = option_key(prediction)
    try:
        known = key in options and not (isinstance(key, (int, float)) and not isinstance(key, bool)
                                        and any(isinstance(o, bool) for o in options))
    except TypeError:  # unhashable
        known = False
    if not known:
        return report(False, f"{question}: expected one of {list(options)}, got {show(prediction)}")
    if key == truth:
        return report(True, f"{question}: ({show(key)}) {options[key]}")
    return report(False, f"{question}: not ({show(key)}); the run contradicts \"{options[key]}\"")


def check_items(question: str, prediction, truth, *, mistakes: dict | None = None) -> ExerciseResult:
    """``prediction``: an iterable of items (ints, tuples of ints, or names) against the measured set ``truth``;
    ``mistakes``: {frozenset a classic mistake gives: its hint}."""
    if not_answered(prediction):
        return _waiting(question)
    if isinstance(prediction, (str, bytes, dict)) or not hasattr(prediction, "__iter__"):
        return report(False, f"{question}: expected a set or list, got {type(prediction).__name__} {show(prediction)}")
    got = set()
    try:
        for item in prediction:
            if isinstance(item, str):
                got.add(item.strip())
            elif isinstance(item, tuple):
                ints = tuple(as_int(x) for x in item)
                got.add(None if None in ints else ints)
            else:
                got.add(as_int(item))
    except Exception as e:
        return report(False, f"{question}: iterating over your answer raised {type(e).__name__}")
    if None in got:
        return report(False, f"{question}: expected ints, tuples of ints or names, got {show(prediction)}")
    truth = set(truth)
    if got == truth:
        return report(True, f"{question}: {sorted(truth)}")
    hint = (mistakes or {}).get(frozenset(got))
    if hint:
        return report(False, f"{question}: not {show(sorted(got))}; {hint}")
    return report(False, f"{question}: not {show(sorted(got))}: {len(got - truth)} item(s) too many, "
                         f"{len(truth - got)} missing")


__all__ = ["ExerciseResult", "as_float", "as_int", "call", "check_choice", "check_items", "check_number", "describe",
           "not_answered", "option_key", "report", "show"]
