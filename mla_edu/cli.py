"""argparse ``type=`` validators shared by the command-line tools: a bad flag is a one-line
``error: argument --x: ...`` from argparse (exit status 2) before anything runs, never a traceback."""

from __future__ import annotations

import argparse

__all__ = ["device", "float_at_least", "float_above", "int_at_least", "kv_splits", "positive_float", "positive_int"]


def int_at_least(minimum: int):
    """A ``type=`` for ints >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an int >= {minimum}, got {value}")
        return value

    parse.__name__ = f"int >= {minimum}"
    return parse


positive_int = int_at_least(1)


def positive_float(text: str) -> float:
    """A ``type=`` for finite floats > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text}")
    return value


def float_at_least(minimum: float):
    """A ``type=`` for finite floats >= ``minimum`` (nan and inf refused)."""
    def parse(text: str) -> float:
        value = _finite(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a finite number >= {minimum:g}, got {text}")
        return value

    parse.__name__ = f"float >= {minimum:g}"
    return parse


def float_above(bound: float):
    """A ``type=`` for finite floats > ``bound`` (nan and inf refused)."""
    def parse(text: str) -> float:
        value = _finite(text)
        if not value > bound:
            raise argparse.ArgumentTypeError(f"expected a finite number > {bound:g}, got {text}")
        return value

    parse.__name__ = f"float > {bound:g}"
    return parse


def kv_splits(text: str) -> int:
    """A split count the kernel contract accepts: -1 (auto) or 1..MAX_SPLITS (checked before allocating)."""
    from mla_edu.kernels.contract import MAX_SPLITS  # here: the kernels (torch, Triton) load only for this flag

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected -1 (auto) or an int in [1, {MAX_SPLITS}], got {text!r}") from None
    if not (value == -1 or 1 <= value <= MAX_SPLITS):
        raise argparse.ArgumentTypeError(f"expected -1 (auto) or an int in [1, {MAX_SPLITS}], got {value}")
    return value


def device(text: str) -> str:
    """A torch device string that exists here: ``cpu``, or ``cuda[:N]`` with CUDA present (``check_device``)."""
    from mla_edu.device import check_device

    try:
        check_device("device", text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("device: ")) from None
    return text


def check_context_length(parser: argparse.ArgumentParser, context_length: int, questions) -> None:
    """``parser.error`` unless ``--context-length`` holds the longest of ``questions``' prompts and its new tokens:
    the engine would refuse those requests, and an accuracy of wrong answers would look like the bug."""
    from mla_edu.model import task

    longest = max(len(q.prompt_ids) for q in questions)
    if context_length < longest + task.MAX_NEW_TOKENS:
        parser.error(f"argument --context-length: expected at least {longest + task.MAX_NEW_TOKENS} (the longest "
                     f"prompt of the {len(questions)} questions, {longest} tokens, + {task.MAX_NEW_TOKENS} new "
                     f"tokens), got {context_length}")
