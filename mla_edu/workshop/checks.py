"""The checks of the "predict, then run" exercises of notebooks 01-07, and what every checker shares.

Each exercise asks for a prediction in a variable (``...`` until the learner writes one); the cell after it
runs the experiment with the library and hands the measured truth to a check here, which prints one line:
"not answered yet", PASS and what was measured, or NOT YET and a hint. None raises, whatever it is given.

| check | the learner predicts |
|---|---|
| ``check_number(q, prediction, truth)`` | a number (an int, or a float within a stated tolerance) |
| ``check_choice(q, prediction, options, truth)`` | one of a few labelled options (or True / False) |
| ``check_items(q, prediction, truth)`` | a set of items (rows, entries, names) |

**One rule for what an answer means** (``meaning``, used by every check here and by every checker of
notebook 08): numpy and torch scalars and one-element arrays or tensors mean the Python number (or bool) they
hold; ``float("-inf")``, ``-math.inf`` and the strings ``"-inf"`` / ``"nan"`` mean the same option; a float
with no fractional part is the int it equals; ``None`` means "none" (an empty set where the answer is a set);
booleans are only booleans (``1`` is not ``True``, ``np.int64(0)`` is not ``False``). Answers are compared as
these plain values, never through the answer object's own ``__eq__``. ``...`` (Ellipsis) is "not answered yet".

**What feedback discloses** (the limit every message keeps): a NOT YET message names the concept that is
wrong (a hint written for a classic mistake, or the question to ask next); it never contains the expected
value, never says which side of it a number lies on, and never counts the items missing or too many.
A multiple-choice hint names no other option. PASS messages state the measured truth.

**Learner code** (``run_learner``) runs with a time limit (``LEARNER_SECONDS``) and refuses to call the
library's own implementation of the answer (the checker names the code it refuses).
"""

from __future__ import annotations

import decimal
import itertools
import math
import numbers
import signal
import sys
import threading
import time
from dataclasses import dataclass

#: the most items a set answer may hold (``range(10**12)`` or ``itertools.count()`` is refused, not iterated)
MAX_ITEMS = 10_000
#: seconds one call of a learner's function may take
LEARNER_SECONDS = 5.0


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


# ---- what an answer means -------------------------------------------------------------------------
class Unreadable:
    """The meaning of an answer that is none of the plain kinds (an object, a multi-element tensor...)."""

    def __repr__(self) -> str:
        return "Unreadable"


UNREADABLE = Unreadable()


def not_answered(prediction) -> bool:
    return prediction is Ellipsis


def meaning(x):
    """What one answer means, as a plain Python value: ``Ellipsis``, ``None``, a bool, an int, a float (finite or
    not), a stripped str, or ``UNREADABLE``. numpy / torch scalars and one-element arrays mean what they hold
    (a bool dtype: a bool); an int-valued finite float stays a float here (``as_int`` takes it)."""
    try:
        if x is None or x is Ellipsis:
            return x
        if type(x) is bool:
            return x
        if type(x) is int:
            return x
        if type(x) is float:
            return x
        if type(x) is str:
            return x.strip()
        module = type(x).__module__ or ""
        if module.startswith(("numpy", "torch")):
            if hasattr(x, "numel"):  # a torch tensor
                if x.numel() != 1 or x.is_complex() or x.device.type == "meta":
                    return UNREADABLE
                import torch

                return bool(x.item()) if x.dtype == torch.bool else meaning(x.item())
            if getattr(x, "size", None) != 1 or getattr(x, "dtype", None) is None or x.dtype.kind not in "biufU":
                return UNREADABLE
            item = x.item() if hasattr(x, "item") else UNREADABLE
            return bool(item) if x.dtype.kind == "b" else meaning(item)
        if isinstance(x, decimal.Decimal):  # a Decimal or a Fraction means its value
            return int(x) if x.is_finite() and x == x.to_integral_value() else float(x)
        if isinstance(x, numbers.Integral):
            return int(x)
        if isinstance(x, numbers.Real):
            return float(x)
        return UNREADABLE
    except Exception:
        return UNREADABLE


def as_int(x):
    """``x`` as a Python int, or None: ints, integer-likes (numpy, torch, one-element) and int-valued floats; never
    a bool."""
    m = meaning(x)
    if type(m) is int:
        return m
    if type(m) is float and math.isfinite(m) and m.is_integer():
        return int(m)
    return None


def as_float(x):
    """``x`` as a finite Python float, or None (bools, NaN, infinities, strings are not)."""
    m = meaning(x)
    if type(m) in (int, float):
        try:
            v = float(m)
        except OverflowError:
            return None
        return v if math.isfinite(v) else None
    return None


def option_key(answer):
    """A written option label as a key: ``"b"``, ``"B"``, ``"(b)"``, ``" b. "`` -> ``"b"``; a number as the label a
    person would write for it (``-inf``, ``nan``, ``0``); anything else as ``meaning`` gives it."""
    m = meaning(answer)
    if type(m) is str:
        return m.strip(".").strip().strip("()").strip().lower()
    if type(m) is float:
        if math.isnan(m):
            return "nan"
        if math.isinf(m):
            return "-inf" if m < 0 else "inf"
        return str(int(m)) if m.is_integer() and abs(m) < 2 ** 63 else repr(m)
    if type(m) is int:
        return str(m) if m.bit_length() <= 64 else UNREADABLE
    return m


def as_items(prediction, limit: int = MAX_ITEMS):
    """``(frozenset of meanings, None)`` or ``(None, what is wrong)``: a set, list, tuple, range or iterator of items
    (each an int-like, a name, or a tuple of those), at most ``limit`` of them. ``None`` and an empty ``{}`` mean
    the empty set."""
    if prediction is None or (isinstance(prediction, dict) and not prediction):
        return frozenset(), None
    if isinstance(prediction, (str, bytes, dict)) or not hasattr(prediction, "__iter__"):
        return None, f"expected a set or list, got {type(prediction).__name__} {show(prediction)}"
    try:
        if hasattr(prediction, "__len__") and len(prediction) > limit:
            return None, f"expected a set of at most {limit:,} items, got more"
    except (Exception, OverflowError):  # range(10**20).__len__ overflows
        return None, f"expected a set of at most {limit:,} items, got more"
    got = set()
    try:
        for n, item in enumerate(itertools.islice(iter(prediction), limit + 1)):
            if n >= limit:
                return None, f"expected a set of at most {limit:,} items, got more"
            got.add(_item(item))
    except Exception as e:
        return None, f"iterating over your answer raised {type(e).__name__}"
    if UNREADABLE in got or any(isinstance(i, tuple) and UNREADABLE in i for i in got):
        return None, f"expected ints, tuples of ints or names, got {show(prediction)}"
    return frozenset(got), None


def _item(item):
    """One item of a set answer: a name, an int, or a tuple of those."""
    m = meaning(item)
    if type(m) is str:
        return m
    if type(m) in (int, float):
        i = as_int(m)
        return UNREADABLE if i is None else i
    if isinstance(item, (tuple, list)) and len(item) <= 8:
        parts = tuple(as_int(p) if type(meaning(p)) is not str else meaning(p) for p in item)
        return UNREADABLE if None in parts else parts
    return UNREADABLE


# ---- running a learner's function -------------------------------------------------------------------
def describe(e: BaseException, limit: int = 160) -> str:
    """``"TypeError: the first line of its message"`` (at most ``limit`` characters of it), whatever ``str(e)`` does."""
    try:
        first = str(e).splitlines()[0][:limit] if str(e) else ""
    except Exception:
        first = ""
    return f"{type(e).__name__}: {first}"


class _Stop(BaseException):
    """Raised into a learner's function that ran out of time or called refused code (not an Exception, so that a
    learner's ``except Exception`` does not swallow it)."""


class Refusal:
    """What a checker refuses to see run inside a learner's function: the code of whole files (path suffixes, e.g.
    ``"mla_edu/workshop/"``) and single functions, by their code object and by an exact copy of it."""

    def __init__(self, files=(), functions=(), why: str = "the library's own implementation of the answer"):
        self.files = tuple(files)
        self.codes = {f.__code__ for f in functions}
        self.copies = {(c.co_code, c.co_consts) for c in self.codes}
        self.why = why

    def refuses(self, code) -> bool:
        name = code.co_filename.replace("\\", "/")
        return (code in self.codes or name.endswith(".py") and any(f in name for f in self.files)
                or (code.co_code, code.co_consts) in self.copies)


def run_learner(fn, *args, refuse: Refusal | None = None, seconds: float | None = None):
    """``(value, None)`` or ``(None, a one-line description of what went wrong)``: ``fn(*args)`` with a time limit
    (``seconds``, at most ``LEARNER_SECONDS``), any exception caught (the learner's code: a failure is a hint, not a
    crash), and any call of code that ``refuse`` names stopped ("refused: ...")."""
    seconds = LEARNER_SECONDS if seconds is None else min(seconds, LEARNER_SECONDS)
    state = {"stop": None}
    deadline = time.monotonic() + seconds
    count = [0]

    def tracer(frame, event, arg):
        if frame.f_code is alarm.__code__:
            return None
        if state["stop"] is None:
            if refuse is not None and event == "call" and refuse.refuses(frame.f_code):
                state["stop"] = f"refused: your function runs {frame.f_code.co_name} ({refuse.why}); write it yourself"
            count[0] += 1
            if count[0] % 256 == 0 and time.monotonic() > deadline:
                state["stop"] = f"your function did not finish within {seconds:g} s (an endless loop?)"
        if state["stop"] is not None:
            raise _Stop(state["stop"])
        return tracer

    def alarm(signum, frame):
        state["stop"] = state["stop"] or f"your function did not finish within {seconds:g} s (an endless loop?)"
        raise _Stop(state["stop"])

    # the alarm interrupts what the tracer cannot (a sleep, one long C call): only in the main thread, and only
    # when no one else's alarm is pending
    main = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer") \
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    old_trace = sys.gettrace()
    old_handler = signal.signal(signal.SIGALRM, alarm) if main else None
    if main:
        signal.setitimer(signal.ITIMER_REAL, seconds + 1.0)
    sys.settrace(tracer)
    try:
        value = fn(*args)
    except (Exception, SystemExit, _Stop) as e:
        sys.settrace(old_trace)
        return None, state["stop"] or describe(e)
    finally:
        sys.settrace(old_trace)
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_handler)
    if state["stop"]:  # raised into the function, which swallowed it
        return None, state["stop"]
    return value, None


# ---- the checks ---------------------------------------------------------------------------------
def _waiting(question: str) -> ExerciseResult:
    return report(False, f"{question}: not answered yet; write your prediction above and run this cell again")


def check_number(question: str, prediction, truth, *, tolerance: float = 0.0, mistakes: dict | None = None,
                 unit: str = "", hint: str = "") -> ExerciseResult:
    """``prediction`` against the measured ``truth``: equal for an int truth, within ``tolerance`` (relative)
    for a float one. ``mistakes``: {the value a classic mistake gives: its hint}; ``hint``: the question to ask
    for any other wrong answer (the concept, never the value)."""
    if not_answered(prediction):
        return _waiting(question)
    exact = isinstance(truth, int) and tolerance == 0
    value = as_int(prediction) if exact else as_float(prediction)
    if value is None:
        return report(False, f"{question}: expected {'an int' if exact else 'a number'}, got "
                             f"{type(prediction).__name__} {show(prediction)}")

    def near(a, b):
        return (a == b) if exact else math.isclose(a, b, rel_tol=tolerance, abs_tol=1e-12)

    if near(value, truth):
        return report(True, f"{question}: {truth:,}{unit}" if exact else f"{question}: {truth:.4g}{unit}")
    for wrong, why in (mistakes or {}).items():
        if near(value, wrong):
            return report(False, f"{question}: not {show(prediction)}; {why}")
    return report(False, f"{question}: not {show(prediction)}; {hint or 'see the hint in the exercise'}")


def check_choice(question: str, prediction, options: dict, truth) -> ExerciseResult:
    """``prediction``: a key of ``options`` ("a", "b", ... or True / False) against the measured ``truth``. A wrong
    option is told only that the run contradicts it (never which other option the run supports)."""
    if not_answered(prediction):
        return _waiting(question)
    bools = all(type(o) is bool for o in options)
    if bools:
        m = meaning(prediction)
        key = m if type(m) is bool else UNREADABLE
    else:
        labels = {option_key(o): o for o in options}
        key = labels.get(option_key(prediction), UNREADABLE) if type(option_key(prediction)) is str else UNREADABLE
    if key is UNREADABLE:
        want = "True or False" if bools else f"one of {list(options)}"
        return report(False, f"{question}: expected {want}, got {show(prediction)}")
    if key == truth:
        return report(True, f"{question}: ({key}) {options[key]}")
    return report(False, f"{question}: not ({key}); the run contradicts \"{options[key]}\"")


def check_items(question: str, prediction, truth, *, mistakes: dict | None = None, hint: str = "") -> ExerciseResult:
    """``prediction``: a set of items (ints, tuples of ints, or names; ``None`` or ``{}``: none) against the
    measured set ``truth``; ``mistakes``: {frozenset a classic mistake gives: its hint}; ``hint``: the question
    to ask for any other wrong set."""
    if not_answered(prediction):
        return _waiting(question)
    got, err = as_items(prediction)
    if err:
        return report(False, f"{question}: {err}")
    truth = frozenset(truth)
    if got == truth:
        return report(True, f"{question}: {sorted(truth) if truth else 'none'}")
    why = (mistakes or {}).get(got) or hint or "see the hint in the exercise"
    return report(False, f"{question}: not {show(sorted(got, key=repr))}; {why}")


__all__ = ["LEARNER_SECONDS", "MAX_ITEMS", "UNREADABLE", "ExerciseResult", "Refusal", "as_float", "as_int",
           "as_items", "check_choice", "check_items", "check_number", "describe", "meaning",
           "not_answered", "option_key", "report", "run_learner", "show"]
