"""Poison values: what the emulator writes into memory nobody may read.

A real GPU hands freed memory to the next allocation, so a stray read returns *someone
else's* numbers: silent garbage. The emulator makes such reads loud instead:

| dtype            | poison                                  | why                                   |
|------------------|-----------------------------------------|---------------------------------------|
| float / complex  | NaN                                     | spreads through every sum it touches   |
| signed / unsigned int | the dtype's max (2147483647 for int32) | an index far out of range            |
| bool             | True                                    |                                       |
"""

from __future__ import annotations

import torch


def poison_value(dtype: torch.dtype) -> float | int | bool:
    """The poison for ``dtype`` (see the module docstring)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"poison_value expects a torch.dtype, got {type(dtype).__name__}")
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    return torch.iinfo(dtype).max


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` in place with its dtype's poison; returns ``t``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"poison_ expects a torch.Tensor, got {type(t).__name__}")
    return t.fill_(poison_value(t.dtype))


def is_poison(t: torch.Tensor) -> torch.Tensor:
    """Boolean mask of the entries of ``t`` that hold the poison of its dtype."""
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.isnan(t)
    return t == poison_value(t.dtype)
