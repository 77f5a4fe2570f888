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

**Learner code** (``run_learner``) runs with a time limit (``LEARNER_SECONDS``) and may not call the library's
own implementation of the answer (the checker names the code it refuses). The refusal stops an accidental or casual
call, not a learner determined to read the library, which runs in their own process (``run_learner`` says what it
stops and what it cannot).
"""

from __future__ import annotations

import _thread
import builtins
import ctypes
import decimal
import fractions
import hashlib
import hmac
import inspect
import itertools
import math
import operator
import os
import secrets
import signal
import sys
import sysconfig
import textwrap
import threading
import time
import types
import weakref
from collections import namedtuple
from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass

import numpy as np
import torch

#: the most items a set answer may hold (``range(10**12)`` or ``itertools.count()`` is refused, not iterated)
MAX_ITEMS = 10_000
#: seconds one call of a learner's function may take
LEARNER_SECONDS = 5.0
#: the watch's clock and thread id, bound at import: a learner's function that rebinds ``time.monotonic`` or
#: ``threading.get_ident`` cannot swap the watch's own (rebinding these names here is refused as any global)
_monotonic, _get_ident = time.monotonic, threading.get_ident
_interrupt_main, _getsignal = _thread.interrupt_main, signal.getsignal
#: the seal's hash and comparison, bound at import likewise: ``hmac.compare_digest = lambda a, b: True`` in the
#: learner's function would otherwise make every seal match
_sha256, _compare_digest = hashlib.sha256, hmac.compare_digest
#: where Python's and the installed packages' code lies: the tracer raises a stop in the learner's frames only, so that
#: library code it interrupts still runs its cleanup (a stop raised at a line event inside ``with lock:``'s exit skips
#: the release: a thread pool refused mid-``submit`` held ``concurrent.futures``' global lock for good)
_LIBRARY_FILES = tuple(sorted({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})) \
    + ("<frozen ",)
#: the library's own code (Python's, the packages', this package's) and where a finalizer of it starts: gc, or a last
#: reference dropped, runs it inside the learner's function, and a stop raised in it would be swallowed ("Exception
#: ignored in: <finalize object>") and cut its cleanup short (a graph emulator's, once: every graph test after it
#: failed). The stop waits until it is past, for this many seconds at most in one check, counted from the first wait (a
#: finalizer that sleeps or never ends, or a loop that swallows a stop in one after another, is stopped all the same).
_FINALIZER_SECONDS = 1.0
_OWN_FILES = _LIBRARY_FILES + (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)
_FINALIZE_CALL = weakref.finalize.__call__.__code__
#: while the alarm re-arms the tracer after a stop: every this many seconds (a stop swallowed by a bare ``except``)
_REARM_SECONDS = 0.25
#: how the alarm reaches the main thread: SIGALRM from ``signal.setitimer`` (Linux, macOS: it also interrupts a
#: sleep), else SIGINT from a watchdog thread through ``_thread.interrupt_main`` (Windows: as the stop button does)
_ALARM_SIGNAL = "SIGALRM" if hasattr(signal, "setitimer") else "SIGINT"


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
        if not _plain(x):  # its own __repr__ would run here, unwatched (and might never return)
            return f"a {type(x).__name__}"
        if type(x) is int and x.bit_length() > 128:  # str() of a 5000-digit int raises
            return f"an int of about {int(x.bit_length() * math.log10(2)) + 1} digits"
        s = " ".join(repr(x).split())
    except Exception:
        s = f"a {type(x).__name__}"
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _plain(x, depth: int = 2) -> bool:
    """Whether ``repr(x)`` runs only Python's or the library's code: builtin scalars, torch and numpy values, and
    builtin containers (at most ``MAX_ITEMS`` items, ``depth`` levels) of those."""
    t = type(x)
    if t in (type(None), type(Ellipsis), bool, int, float, complex, str, bytes, range) or library_kind(x):
        return True
    if t in (list, tuple, set, frozenset) and depth > 0 and len(x) <= MAX_ITEMS:
        return all(_plain(i, depth - 1) for i in x)
    if t is dict and depth > 0 and len(x) <= MAX_ITEMS:
        return all(_plain(k, depth - 1) and _plain(v, depth - 1) for k, v in x.items())
    return False


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
        kind = library_kind(x)
        if kind == "torch":
            if x.numel() != 1 or x.is_complex() or x.device.type == "meta":
                return UNREADABLE
            return bool(x.item()) if str(x.dtype) == "torch.bool" else meaning(x.item())
        if kind == "numpy":
            if x.size != 1 or x.dtype.kind not in "biufU":
                return UNREADABLE
            return bool(x.item()) if x.dtype.kind == "b" else meaning(x.item())
        if type(x) is decimal.Decimal:  # a Decimal or a Fraction means its value
            return int(x) if x.is_finite() and x == x.to_integral_value() else float(x)
        if type(x) is fractions.Fraction:
            return int(x) if x.denominator == 1 else float(x)
        return UNREADABLE  # a subclass of int or float, or any other class, whatever its __int__ says
    except Exception:
        return UNREADABLE


def library_kind(x) -> str | None:
    """``"torch"`` for a torch tensor, ``"numpy"`` for a numpy array or scalar, else None: by the exact type (a
    subclass, or a class that names numpy in its ``__module__``, is neither), so that reading its value runs the
    library's code, never a learner's. The types were taken at import (``_LIBRARY_TYPES``, read-only), not from
    ``sys.modules`` at check time, which a learner's code may change."""
    return _LIBRARY_TYPES.get(type(x))


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
    (each an int-like, a name, or a tuple of those), at most ``limit`` of them; a 2-D integer tensor or array is
    the set of its rows, as tuples. ``None`` and an empty ``{}`` mean the empty set."""
    if prediction is None or (type(prediction) is dict and not prediction):
        return frozenset(), None
    if type(prediction) not in (set, frozenset, list, tuple, range) and library_kind(prediction) is None:
        # a class of one's own (a subclass of set included) would run its own __iter__ here, unwatched
        return None, f"expected a set or list, got {type(prediction).__name__} {show(prediction)}"
    if library_kind(prediction) is not None and getattr(prediction, "ndim", 1) == 0:
        return None, f"expected a set or list, got a 0-d {library_kind(prediction)} value {show(prediction)}"
    if _integer_matrix(prediction):  # torch.nonzero(mask), np.argwhere(mask): one (row, column) tuple per row
        try:
            prediction = [tuple(row) for row in prediction.tolist()]
        except Exception as e:  # a meta tensor has no values
            return None, f"reading your answer raised {describe(e)}"
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


def _integer_matrix(x) -> bool:
    """A 2-D integer torch tensor or numpy array (not bool)."""
    if library_kind(x) is None or x.ndim != 2:
        return False
    dtype = x.dtype
    if hasattr(dtype, "is_floating_point"):  # torch
        return not (dtype.is_floating_point or dtype.is_complex or str(dtype) == "torch.bool")
    return getattr(dtype, "kind", "") in "iu"


def _item(item):
    """One item of a set answer: a name, an int, or a tuple of those."""
    m = meaning(item)
    if type(m) is str:
        return m
    if type(m) in (int, float):
        i = as_int(m)
        return UNREADABLE if i is None else i
    if type(item) in (tuple, list) and len(item) <= 8:
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


class Refusal(namedtuple("Refusal", "files codes copies why bytecodes")):
    """What a checker refuses to see run inside a learner's function: the code of whole files (path suffixes, e.g.
    ``"mla_edu/workshop/"``) and single functions, by their code object and (``copies=True``) by an exact copy of
    it. Immutable (a tuple): a function that walks its frames up to the checker's ``Refusal`` cannot empty it."""

    __slots__ = ()

    def __new__(cls, files=(), functions=(), why: str = "the library's own implementation of the answer",
                copies: bool = True):
        codes = frozenset(f.__code__ for f in functions)
        copied = frozenset().union(*(_fingerprints(f) for f in functions)) if copies else frozenset()
        return super().__new__(cls, tuple(files), codes, copied, why, frozenset(p[0] for p in copied))

    def refuses(self, code) -> bool:
        name = code.co_filename.replace("\\", "/")
        return (code in self.codes or name.endswith(".py") and any(f in name for f in self.files)
                or code.co_code in self.bytecodes and _fingerprint(code) in self.copies)  # a cheap test first


def _fingerprint(code: types.CodeType) -> tuple:
    """``(co_code, co_names, co_consts)`` with each nested code object (a function, lambda or comprehension inside)
    replaced by its own fingerprint: what a copy of the code has wherever it sits (a code object compares with its
    file, name and line numbers, which a copy pasted elsewhere does not share)."""
    return (code.co_code, code.co_names,  # the names too: max(...) and sum(...) compile to the same bytes
            tuple(_fingerprint(c) if isinstance(c, types.CodeType) else c for c in code.co_consts))


def _fingerprints(fn) -> set:
    """``_fingerprint`` of ``fn``'s code as it is and as its source compiles with ``optimize`` 0, 1 and 2 (no
    asserts, no docstring): an exec'd copy of it compiled any of these ways, at any line, has one of them."""
    code = fn.__code__
    prints = {_fingerprint(code)}
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):  # no source (a builtin, a function made by exec): its own code only
        return prints
    for level in (0, 1, 2):
        module = compile(source, code.co_filename, "exec", optimize=level, dont_inherit=True)
        prints |= {_fingerprint(c) for c in module.co_consts
                   if isinstance(c, types.CodeType) and c.co_name == code.co_name}
    return prints


#: {thread id: the run's state} while a learner's function runs there under a ``Refusal`` (read by ``_audit``)
_WATCHED: dict = {}
_TRACE_OFF = ("refused: your function sets a trace function (sys.settrace or sys.setprofile, as a debugger "
              "does), which would switch off the check's watch; run it without")


_TAMPERED = ("refused: your function changed the code or defaults of the check's own functions (its trace "
             "function, reached through sys.gettrace()); run it without")


def _audit(event, args, _this_file=__file__):
    """Python's audit hook (it cannot be removed): a learner's function that, in its own thread while a check watches
    it, calls ``sys.settrace`` or ``sys.setprofile``, or sets ``__code__``, ``__defaults__`` or ``__kwdefaults__`` of a
    function of this file (the tracer, which ``sys.gettrace()`` hands out: Python audits those sets as
    ``object.__setattr__``), is stopped there, before the call or the set."""
    if event in ("sys.settrace", "sys.setprofile"):
        state = _WATCHED.get(_get_ident())
        if state is not None and not state.pop("drop_ok", False):  # not CPython dropping the tracer for the stop button
            state["stop"] = state["stop"] or _TRACE_OFF
            state["raised"] = _Stop(state["stop"])
            raise state["raised"]
    elif event == "object.__setattr__" and isinstance(args[0], types.FunctionType) \
            and args[0].__code__.co_filename == _this_file:
        state = _WATCHED.get(_get_ident())
        if state is not None:
            state["stop"] = state["stop"] or _TAMPERED
            state["raised"] = _Stop(state["stop"])
            raise state["raised"]


sys.addaudithook(_audit)


def read_only(table: dict) -> types.MappingProxyType:
    """``table`` as a read-only view (its dict values too): a table a check reads, which a learner's function cannot
    edit in place (the put-back after a run sees names rebound, not a container's contents changed)."""
    return types.MappingProxyType({k: read_only(v) if type(v) is dict else v for k, v in table.items()})


def library_globals() -> list:
    """``[(module, a copy of its globals)]`` for every loaded module of ``mla_edu`` and for ``builtins``, then
    ``("code", (function, (its __code__, __defaults__, __kwdefaults__)))`` for every function and ``("class",
    (class, a copy of its attributes, their names, their values))`` for every class those modules define, then
    ``("rebound", (torch, a copy of its names))`` and ``torch.Tensor``'s ``"class"`` entry: what a checker reads its
    truths through (``exercises.get_workspace_size`` is looked up there at check time, ``report`` builds the verdict,
    ``torch.equal`` compares an answer). A checker that runs a learner's function on many cases takes it once and
    gives it to each ``run_learner`` (``saved=``): taking it costs about as much as a short call of the function."""
    modules = [(m, dict(vars(m))) for name, m in list(sys.modules.items())
               if (name == "mla_edu" or name.startswith("mla_edu.")) and m is not None]
    names = {m.__name__ for m, _ in modules}
    modules.append((builtins, dict(vars(builtins))))  # min, len, ...: every truth is computed with them
    seen, parts = set(), []
    for _, space in modules:
        for v in space.values():
            if id(v) in seen or getattr(v, "__module__", None) not in names:
                continue
            seen.add(id(v))
            if isinstance(v, types.FunctionType):
                parts.append(("code", (v, (v.__code__, v.__defaults__, v.__kwdefaults__))))
            elif isinstance(v, type):
                attrs = dict(vars(v))
                parts.append(("class", (v, attrs, tuple(attrs), tuple(attrs.values()))))
    # torch, which every truth and every comparison of an answer is computed with: its names rebound or deleted
    # (``torch.equal = ...``; a submodule imported meanwhile adds names, which stay, and may wrap one of torch's own
    # functions, which is kept: ``_torch_wraps``), and torch.Tensor's attributes
    parts.append(("rebound", (torch, dict(vars(torch)))))
    attrs = dict(vars(torch.Tensor))  # Tensor.nan_to_num = ... adds one over the C method of its base
    parts.append(("class", (torch.Tensor, attrs, tuple(attrs), tuple(attrs.values()))))
    return modules + parts


def _restore_globals(saved: list) -> list:
    """Put back every global of ``saved`` that was rebound, deleted or added (a submodule imported meanwhile
    stays), every function's code and defaults and every class attribute that changed; ``["module.name", ...]``
    of those changed."""
    changed = []
    for module, before in saved:
        if module == "code":
            fn, (code, defaults, kwdefaults) = before
            if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults:
                fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kwdefaults
                changed.append(f"{fn.__module__}.{fn.__qualname__}.__code__")
            continue
        if module == "rebound":
            space, names = before
            now = vars(space)
            for name, value in names.items():
                new = now.get(name, _MISSING)
                if new is not value and not _torch_wraps(new, value):
                    setattr(space, name, value)
                    changed.append(f"{space.__name__}.{name}")
            continue
        if module == "class":
            cls, attrs, keys, values = before
            now = vars(cls)
            if len(now) == len(keys) and all(map(operator.is_, now, keys)) and all(
                    map(operator.is_, now.values(), values)):  # by identity, in order: a change shows
                continue
            for name in sorted(set(now) | set(attrs)):
                if now.get(name, _MISSING) is attrs.get(name, _MISSING):
                    continue
                try:
                    if name in attrs:
                        setattr(cls, name, attrs[name])
                    else:
                        delattr(cls, name)
                except (AttributeError, TypeError):  # __dict__ and the like cannot be set
                    continue
                changed.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
            continue
        now = vars(module)
        if now.keys() == before.keys() and all(map(operator.is_, now.values(), before.values())):
            continue  # by identity: a learner's object's own __eq__ is never asked
        for name in set(now) | set(before):
            if name.startswith("__") and name.endswith("__"):  # __warningregistry__ and the like
                continue
            if name not in before:
                if isinstance(now[name], types.ModuleType):
                    continue
                del now[name]
            elif now.get(name, _MISSING) is not before[name]:
                now[name] = before[name]
            else:
                continue
            changed.append(f"{module.__name__}.{name}")
    return changed


_MISSING = object()
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _torch_wraps(new, old) -> bool:
    """Whether ``new`` is torch's own wrapper of ``old``: importing ``torch._dynamo`` (``torch.compile`` and others
    do, on first use) rebinds ``torch.manual_seed`` to one (``functools.wraps``: ``__wrapped__`` is the old one),
    with its code in torch's files, which a learner's wrapper does not have."""
    code = getattr(new, "__code__", None)
    return (getattr(new, "__wrapped__", None) is old and isinstance(code, types.CodeType)
            and code.co_filename.startswith(_TORCH_DIR))


#: {exact type: "torch" or "numpy"} (``library_kind``)
_LIBRARY_TYPES = read_only({torch.Tensor: "torch", np.ndarray: "numpy",
                            **{t: "numpy" for t in np.sctypeDict.values() if issubclass(t, np.generic)}})


# Python's C API (3.3 and later), through prototypes of our own (the shared ctypes.pythonapi is left as it is)
_INCREF = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))
_SET_EXC_INFO = ctypes.PYFUNCTYPE(None, *[ctypes.py_object] * 3)(("PyErr_SetExcInfo", ctypes.pythonapi))


def _set_handled_exception(exc_info: tuple) -> None:
    """Make ``exc_info`` (``sys.exc_info()``'s triple) the exception this thread is handling again. A stop raised
    while a ``with`` block's exit runs can be left behind as the thread's handled exception once the function has
    returned (seen on CPython 3.11 and 3.12: a loop that swallows a stop in each row leaves a chain of 200), and each
    later error of the notebook would carry that chain, and its frames, as its ``__context__``. ``PyErr_SetExcInfo``
    steals a reference to each argument: each is given one first."""
    for obj in exc_info:
        _INCREF(obj)
    _SET_EXC_INFO(*exc_info)


def _torch_mode_depths() -> tuple[int, int]:
    """How many torch function modes and dispatch modes are on (torch's mode stacks)."""
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


def _pop_torch_modes(depths: tuple[int, int]) -> str | None:
    """Take off the torch modes pushed since ``_torch_mode_depths()`` gave ``depths``; what they were, or None. A
    mode left on (``TorchFunctionMode().__enter__()``) runs its own code at every torch call after the function has
    returned: when the check reads the answer, too."""
    names = []
    while torch._C._len_torch_function_stack() > depths[0]:
        names.append(type(torch._C._pop_torch_function_stack()).__name__)
    while torch._C._len_torch_dispatch_stack() > depths[1]:
        names.append(type(torch._C._pop_torch_dispatch_stack()).__name__)
    return f"a torch mode ({', '.join(names)})" if names else None


def run_learner(fn, *args, refuse: Refusal | None = None, seconds: float | None = None, items: bool = False,
                what: str = "your function", saved: list | None = None):
    """``(value, None)`` or ``(None, a one-line description of what went wrong)``: ``fn(*args)`` with a time limit
    (``seconds``, at most ``LEARNER_SECONDS``), any exception caught (the learner's code: a failure is a hint, not a
    crash), and any call of code that ``refuse`` names stopped ("refused: ..."). ``items``: the answer is a set of
    items, so a lazy one (a generator) is read here, inside the time limit and the watch, into a list of at most
    ``MAX_ITEMS + 1``.

    **The time limit.** A bytecode tracer checks the clock. In the main thread the stop is raised by an alarm's
    handler: at once when the tracer asks, a second after the time is up, and every ``_REARM_SECONDS`` after, until
    the function returns. The handler puts the tracer back each time: a stop that the function swallows (a bare
    ``except:`` around an endless loop) takes the tracer off, as CPython drops a trace function that raised. The
    tracer raises nothing while a stop is being handled (a ``with``'s exit, an ``except:`` body) or in Python's or
    a package's own code, which so finishes its cleanup (a lock's ``with``); grad mode is put back after. Neither
    the tracer nor the alarm raises it inside a finalizer of the library's (``weakref.finalize``, ``__del__``) that
    gc or a last reference dropped runs inside the function: raised there, Python would swallow it ("Exception
    ignored in") and skip the rest of the cleanup; the tracer raises it at the learner's next line. That wait lasts
    ``_FINALIZER_SECONDS`` at most in one check: a finalizer that sleeps or never ends is stopped all the same.
    On Linux and macOS the alarm is SIGALRM (``signal.setitimer``), which also interrupts what the tracer cannot
    see: a ``time.sleep``, one long C call. Windows has no ``setitimer``: there a watchdog thread sends SIGINT
    (``_thread.interrupt_main``, what the stop button does) and the check's handler takes it; a sleep or one long
    C call runs to its end first. The learner's own stop button stops the check (``KeyboardInterrupt``), even
    where the function swallows it.

    **What the refusal stops, and what it cannot.** It is a guard against an accidental or casual use of the
    library's answer, not a sandbox. Under ``refuse`` the function is refused when it calls the named code in its
    own thread (directly, through a wrapper or a copy of the code), calls ``sys.settrace`` / ``sys.setprofile``
    (which would switch the tracer off), leaves another trace function behind, starts a thread (through
    ``threading``, whose new threads the tracer would not see), sets the code or defaults of the check's own
    functions (the tracer, which ``sys.gettrace()`` hands out), leaves the tracer's state changed, or rebinds a
    global of a loaded ``mla_edu`` module (``exercises.get_workspace_size = ...`` would change the truth of every
    later check), or changes the code or defaults of one of their functions or an attribute of one of their classes
    (``checks.report.__code__ = ...``), or rebinds a name of ``torch`` or sets an attribute of ``torch.Tensor``
    (``torch.equal = ...``: a checker compares with them): each is put back, so the session stays usable, an
    interrupt (the stop button) included. The checkers that run a learner's function over cases (exercises 4 and 5)
    compute their truths before the calls but keep only their ``Seal`` while the function runs, so no truth of a
    case not yet answered sits in a frame the function can walk up to or an object ``gc`` can list, and they compute
    them again after (a change to a module outside ``mla_edu`` that would bend them is caught there).
    What the notebook changed before the check ran is not seen. It cannot stop a learner determined to get the
    answer: the library is Python running in the learner's own process (the tracer's state, its closure, changed
    and put back before the function returns; a thread pool started before the check, a thread started through
    ``_thread`` itself, which Python 3.11 does not audit, a subprocess, ``ctypes``, or simply reading the source and
    copying it out by hand all get through).
    ``saved``: ``library_globals()`` as the caller took it before its loop of calls (None: taken here); the
    globals are put back to it after the call."""
    seconds = LEARNER_SECONDS if seconds is None else min(seconds, LEARNER_SECONDS)
    state = {"stop": None}
    deadline = _monotonic() + seconds
    count = [0]
    late = f"{what} did not finish within {seconds:g} s (an endless loop?)"
    own_files, finalize_call = _OWN_FILES, _FINALIZE_CALL

    def tracer(frame, event, arg, refuse=refuse):  # refuse as a default: a closure's cell can be set unaudited
        if frame.f_code is alarm.__code__:
            return None
        if state["stop"] is None:
            if refuse is not None and event == "call" and refuse.refuses(frame.f_code):
                state["stop"] = f"refused: your function runs {frame.f_code.co_name} ({refuse.why}); write it yourself"
                state["raised"] = _Stop(state["stop"])  # before the refused code runs, wherever it lies
                raise state["raised"]
            count[0] += 1
            if count[0] % 256 == 0 and _monotonic() > deadline:
                state["stop"] = late
        if state["stop"] is not None:
            # not raised again while the stop raised last is on its way out or being handled (a `with`'s exit, an
            # `except:` body: they run to their end, so that `with torch.no_grad()` puts grad mode back), nor in
            # Python's or a package's code (a lock's `with` in threading finishes): raised at the learner's next line
            if event == "exception" or sys.exc_info()[1] is state.get("raised", _MISSING) \
                    or frame.f_code.co_filename.startswith(_LIBRARY_FILES):
                return tracer
            f = frame  # nor in the library's finalizer, for a second at most (inline: a call from here is traced)
            while f is not None and f.f_code is not here and f.f_code.co_filename.startswith(own_files):
                if f.f_code is finalize_call or f.f_code.co_name == "__del__":
                    if _monotonic() - state.setdefault("finalizing", _monotonic()) < _FINALIZER_SECONDS:
                        return tracer
                    break
                f = f.f_back
            if alarm_signum is not None and _getsignal(alarm_signum) is alarm:  # raised by the alarm's handler,
                _interrupt_main(alarm_signum)  # which puts the tracer back after (where the function took the
                return tracer  # handler off, raised here)
            state["raised"] = _Stop(state["stop"])
            raise state["raised"]
        return tracer

    def alarm(signum, frame):
        if state.get("done"):  # the function has returned; the finally below is cancelling this alarm, but a press
            if signum == signal.SIGINT and not state.get("late") and state["stop"] is None:  # of the stop button
                state["interrupted"] = True  # is kept: raised once all is put back
            return
        if signum == signal.SIGINT and not state.get("late") and state["stop"] is None:  # the stop button
            state["interrupted"] = True
            if frame is not None and frame.f_code is tracer.__code__:  # raised in the tracer, which CPython drops:
                state["drop_ok"] = True  # _audit lets that one drop through, once
            raise KeyboardInterrupt  # (no Python call here: the tracer would raise the stop into it)
        state["stop"] = state["stop"] or late
        f, in_finalizer = frame, False  # in the library's finalizer (gc, or a last reference dropped, runs it here)?
        while f is not None and f.f_code is not here and f.f_code.co_filename.startswith(own_files):
            if f.f_code is finalize_call or f.f_code.co_name == "__del__":  # a stop raised in it would be swallowed
                # and cut its cleanup short: not there, for a second at most ("finalizing": when the first wait began)
                in_finalizer = _monotonic() - state.setdefault("finalizing", _monotonic()) < _FINALIZER_SECONDS
                break
            f = f.f_back
        if frame is not None and frame.f_code is tracer.__code__:
            if in_finalizer:
                return  # the tracer is on: it raises the stop at the learner's next line
            # the tracer's request, taken inside the tracer: the raise drops it (CPython drops a trace function
            # that raised); the next alarm, asked for in a millisecond, finds the function's own code running and
            # puts the tracer back, so that a stop swallowed in each row of a loop costs a millisecond a row
            if itimer:
                signal.setitimer(signal.ITIMER_REAL, 0.001, _REARM_SECONDS)
            else:
                wake.set()  # the watchdog's next SIGINT at once (threading's code: the tracer lets it run)
            state["raised"] = _Stop(state["stop"])
            raise state["raised"]
        # a stop the function swallowed (a bare except) took the tracer off (CPython drops a trace function that
        # raised): put it back on the function's frames, so that the stop is raised again at its next line
        if watch:
            _WATCHED.pop(ident, None)  # this settrace is the check's own, not the function's
        sys.settrace(tracer)
        if watch:
            _WATCHED[ident] = state
        while frame is not None and frame.f_code is not here:
            frame.f_trace = tracer
            frame = frame.f_back
        if in_finalizer:
            return  # the tracer, back on, raises it past the finalizer, at the learner's next line
        state["raised"] = _Stop(state["stop"])
        raise state["raised"]

    def thread_started(frame, event, arg):  # threading's hook, in a thread the function started
        state["stop"] = state["stop"] or ("refused: your function starts a thread, where the check cannot watch it; "
                                          "compute the answer in the function itself")
        sys.settrace(None)
        return None

    def watchdog():  # Windows' alarm: SIGINT to the main thread when the time is up, then every _REARM_SECONDS
        wake.wait(seconds + 1.0)  # or at once when the handler asks
        while not state.get("done"):
            wake.clear()
            if _monotonic() > deadline:
                state["late"] = True  # from now on a SIGINT is the alarm's, not the stop button's
            _interrupt_main(signal.SIGINT)  # bound at import: a function that rebinds _thread's cannot mute it
            wake.wait(_REARM_SECONDS)

    # the alarm interrupts what the tracer cannot (a sleep, one long C call): only in the main thread, and with
    # SIGALRM only when no one else's alarm is pending; the stop button's SIGINT is the check's there too
    main = threading.current_thread() is threading.main_thread()
    itimer = main and _ALARM_SIGNAL == "SIGALRM" and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    watchdog_on = main and not itimer and _ALARM_SIGNAL == "SIGINT"
    alarm_signum = signal.SIGALRM if itimer else signal.SIGINT if watchdog_on else None  # the alarm's signal
    wake, handlers, dog = threading.Event(), {}, None
    watch = refuse is not None
    here = sys._getframe().f_code  # the alarm re-arms the tracer on the frames above this one
    ident, error, now_trace = _get_ident(), None, None
    cells = tuple(c.cell_contents for c in tracer.__closure__)
    saved = (library_globals() if saved is None else saved) if watch else []
    modes, grad_was = _torch_mode_depths(), torch.is_grad_enabled()
    old_trace, old_thread_trace = sys.gettrace(), threading.gettrace()
    handled = sys.exc_info()  # the exception the caller is handling, if any: handled again after the function
    # the setup inside the try: a stop pressed during it is put back by the finally too
    try:
        # each old handler kept before the alarm is set: a press in between finds it there to put back
        if main:
            handlers[signal.SIGINT] = _getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, alarm)
        if itimer:
            handlers[signal.SIGALRM] = _getsignal(signal.SIGALRM)
            signal.signal(signal.SIGALRM, alarm)
        elif watchdog_on:  # started before the watch on threads: the check's own thread
            dog = threading.Thread(target=watchdog, daemon=True, name="mla_edu check watchdog")
            dog.start()
        if watch:
            threading.settrace(thread_started)
        if itimer:  # then every _REARM_SECONDS, until the function has returned
            signal.setitimer(signal.ITIMER_REAL, seconds + 1.0, _REARM_SECONDS)
        sys.settrace(tracer)
        if watch:
            _WATCHED[ident] = state
        # until the tracer is off again, this frame calls no function of this file (the tracer would refuse it)
        value = fn(*args)
        if items and (isinstance(value, Iterator) or isinstance(value, Iterable) and not isinstance(value, Sized)):
            value = list(itertools.islice(value, MAX_ITEMS + 1))  # a generator: its items run the learner's code
    except KeyboardInterrupt:  # the learner's stop button: the check stops too, once all is put back (below: a
        state["interrupted"] = True  # fresh KeyboardInterrupt, no stop of this check as its context)
    except BaseException as e:  # anything else, a BaseException of the learner's own too, is the function's failure
        value, error = None, e
    finally:
        state["done"] = True
        if itimer:
            signal.setitimer(signal.ITIMER_REAL, 0)
        now_trace = sys.gettrace()
        registered = _WATCHED.pop(ident, None) is state or not watch  # emptied in place: the watch was off
        sys.settrace(old_trace)
        wake.set()  # Python calls only now that the tracer is off (it would raise a stop into them)
        torch.set_grad_enabled(grad_was)  # a stop raised inside `with torch.no_grad():`'s enter leaves it off
        if dog is not None and dog.ident is not None:
            dog.join()  # no SIGINT after this; one still pending is taken by signal.signal below, at "done"
        now_thread_trace = threading.gettrace()
        threading.settrace(old_thread_trace)
        for signum, old_handler in handlers.items():
            signal.signal(signum, old_handler)
        # the error's own __str__ (the learner's code) runs in describe: before the put-back, which runs here so that
        # an interrupt too leaves the library as it was
        left_on = _pop_torch_modes(modes)  # before describe: a mode left on would run in the error's __str__
        described = describe(error) if error is not None else None
        changed = _restore_globals(saved)
    if sys.exc_info()[1] is not handled[1]:  # here, past the finally: an except or a finally would put it back
        _set_handled_exception(handled)
    if state.get("interrupted"):  # the stop button, which the function swallowed: the check stops all the same
        raise KeyboardInterrupt
    if described is not None and not state["stop"]:
        state["stop"] = described
    refused = (state["stop"] or "").startswith("refused")
    if left_on and not refused:
        state["stop"] = (f"refused: your function left {left_on} on (taken off): the check would run it when it "
                         "reads your answer; compute the answer without")
    elif changed and not refused:
        state["stop"] = (f"refused: your function rebound {', '.join(changed[:3])} (put back): a check reads its "
                         "truth there; compute the answer without changing the library, torch or Python's builtins")
    elif watch and not refused and (not registered or now_thread_trace is not thread_started or any(
            c.cell_contents is not v for c, v in zip(tracer.__closure__, cells))
            or now_trace is not tracer and state["stop"] is None):  # a stop raised by the tracer took it off
        state["stop"] = "refused: your function changed the check's trace function or its state; run it without"
    if state["stop"]:  # raised into the function, or swallowed by it
        return None, state["stop"]
    return value, None


class Seal:
    """A checker's truths, sealed before a learner's function runs: a salted digest of them, nothing more.

    While the learner's code runs, no truth sits in a frame or an object it can reach (``sys._getframe``,
    ``gc.get_objects``): the checker holds only the seal, and computes each truth again once the learner's answers
    are in. ``matches`` then says whether the truths computed again are the sealed ones; a learner's code that
    changed what a truth is computed with (a module outside ``mla_edu``, which ``run_learner`` does not put back)
    makes them differ. The digest covers all the truths together, so it cannot be searched one small truth at a
    time."""

    __slots__ = ("_salt", "_digest")  # no instance attribute of the learner's (seal.matches = ...) can shadow ours

    def __init__(self, truths: Iterable):
        self._salt = secrets.token_bytes(16)
        self._digest = self._of(truths)

    def _of(self, truths: Iterable) -> bytes:
        h = _sha256(self._salt)
        for t in truths:
            h.update(repr(sorted(t) if isinstance(t, (set, frozenset)) else t).encode() + b"\0")
        return h.digest()

    def matches(self, truths: Iterable) -> bool:
        return _compare_digest(self._of(truths), self._digest)


#: what a checker says when ``Seal.matches`` is false
SEAL_BROKEN = ("refused: the check's truths came out different after your function ran: it changed code the check "
               "computes them with; compute the answer without changing Python's or the library's modules")


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
    compared = ("the check wants the measured int exactly" if exact else
                f"the check wants the measured value within a relative {tolerance:.2g}")
    return report(False, f"{question}: not {show(prediction)}; {hint or compared + ': recheck how you got it'}")


def print_options(options: dict) -> None:
    """Print a multiple-choice question's ``options`` ({"a": text, ...}) as "(a) text", one a line, before the
    learner answers."""
    for key, text in options.items():
        print(f"({key}) {text}")


def check_choice(question: str, prediction, options: dict, truth) -> ExerciseResult:
    """``prediction``: a key of ``options`` ("a", "b", ... or True / False) against the measured ``truth``. A wrong
    option is told only that the run contradicts it (never which other option the run supports)."""
    truth = meaning(truth)  # a 0-d bool tensor means its bool
    if type(truth) not in (str, bool) or not any(type(o) is type(truth) and o == truth for o in options):
        # the notebook's bug, not the learner's: every answer would be told the run contradicts it
        raise ValueError(f"{question}: the measured answer {truth!r} is none of the options {list(options)}")
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
    if isinstance(prediction, Iterator):  # read inside the check, after the run: it could read the measured answer
        return report(False, f"{question}: a prediction is a value written before the run: a set or a list, not a "
                             f"{type(prediction).__name__} (an iterator is read only now, after the measurement)")
    got, err = as_items(prediction)  # by its exact type: a class of one's own, with its own __iter__, is refused unread
    if err:
        return report(False, f"{question}: {err}")
    truth = frozenset(truth)
    if got == truth:
        return report(True, f"{question}: {sorted(truth) if truth else 'none'}")
    why = (mistakes or {}).get(got) or hint or ("the check wants exactly the measured set (order and repeats do not "
                                                "matter): recheck which items the question asks for")
    return report(False, f"{question}: not {show(sorted(got, key=repr))}; {why}")


__all__ = ["LEARNER_SECONDS", "MAX_ITEMS", "UNREADABLE", "ExerciseResult", "Refusal", "as_float", "as_int",
           "as_items", "check_choice", "check_items", "check_number", "describe", "library_kind", "meaning",
           "not_answered", "option_key", "read_only", "report", "run_learner", "show"]
