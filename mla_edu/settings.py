"""Settings as typed data: each field of a settings dataclass checked against its annotation by pydantic.

``check_fields(obj)`` validates every field whose annotation is not ``Any`` with pydantic in strict mode (no
``"false"`` for a bool, no ``True`` or ``640.5`` for an int, no ``nan`` where a bound is given), with the bounds of
``Annotated[int, Field(ge=...)]``; the error names the field, what was expected and what came. A settings class
calls it first in ``__post_init__``, so the parent and a child process built from JSON check the same way.
"""

from __future__ import annotations

import dataclasses
import functools
import typing

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

__all__ = ["PositiveFloat", "PositiveInt", "check_fields", "check_value"]

#: An int >= 1 (a count or a size).
PositiveInt = typing.Annotated[int, Field(ge=1)]
#: A float > 0, finite (strict mode refuses NaN and infinity).
PositiveFloat = typing.Annotated[float, Field(gt=0)]

_WORDS = {bool: "a bool", int: "an int", float: "a float", str: "a str", type(None): "None"}


def _expected(hint) -> str:
    """Plain words for a field's type: ``int | None`` -> "an int or None", bounds appended by pydantic."""
    if typing.get_origin(hint) is typing.Annotated:
        base, *extra = typing.get_args(hint)
        bounds = {}  # annotated_types.Ge(ge=2) -> {"ge": 2}
        for info in extra:
            for m in getattr(info, "metadata", []):
                bounds.update({k: getattr(m, k) for k in ("ge", "le", "gt", "lt") if hasattr(m, k)})
        if "ge" in bounds and "le" in bounds:
            return f"{_expected(base)} in [{bounds['ge']}, {bounds['le']}]"
        return _expected(base) + "".join(f" {op} {bounds[k]}" for k, op in (("ge", ">="), ("le", "<="),
                                                                              ("gt", ">"), ("lt", "<")) if k in bounds)
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (list, tuple, set, frozenset) and args:
        return f"a {typing.get_origin(hint).__name__} of {_expected(args[0]).split(' ', 1)[-1]}s"
    if typing.get_origin(hint) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and args:
        return " or ".join(_expected(a) for a in args)
    return _WORDS.get(hint, getattr(hint, "__name__", str(hint)))


@functools.lru_cache(maxsize=None)
def _hints(cls) -> dict:
    return typing.get_type_hints(cls, include_extras=True)


@functools.lru_cache(maxsize=None)
def _adapter(hint) -> TypeAdapter:
    return TypeAdapter(hint, config=ConfigDict(strict=True, allow_inf_nan=False))


def check_fields(obj) -> None:
    """TypeError (wrong type) or ValueError (out of range) for the first field of the dataclass ``obj`` that its
    annotation refuses; fields annotated ``typing.Any`` or with a dataclass are left to the class's own checks."""
    for name, hint in _hints(type(obj)).items():
        if hint is typing.Any or dataclasses.is_dataclass(hint) or name.startswith("_"):
            continue
        check_value(name, getattr(obj, name), hint)


def check_value(name: str, value, hint) -> None:
    """TypeError or ValueError (a bound) naming ``name`` unless pydantic, strict, takes ``value`` as ``hint``."""
    try:
        _adapter(hint).validate_python(value)
    except ValidationError as e:
        err = e.errors()[0]
        kind = ValueError if err["type"] in ("greater_than", "greater_than_equal", "less_than",
                                             "less_than_equal", "finite_number") else TypeError
        why = "" if kind is ValueError else f" ({err['msg']})"
        raise kind(f"{name}: expected {_expected(hint)}, got {value!r}{why}") from None
