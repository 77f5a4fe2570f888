"""A graph-safety checker: replay a captured step against eager on randomized inputs.

    report = check(step, make_inputs, static_inputs={"seq_lens": seq_lens, ...},
                   prepare=fill_metadata, reference=eager_step, persistent=[kv_indices, workspace])
    print(report); assert report.ok

For each trial: new inputs are copied into the leading slice of the static buffers, the
eager reference runs (on a snapshot of the state and of the graph's outputs, restored afterwards:
an output the replay does not wholly write must not keep eager's answer), the persistent
buffers are poisoned (NaN / int max), the host ``prepare`` hook refills what it owns, and the
graph replays twice. The first divergence is reported with a hint at its cause; when the two
replays on the same inputs differ from each other, the cause is state leaking between replays
(an accumulating buffer), whatever replay 0 looked like.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

from mla_edu.graphs.capture import Graph, graph, warm_up
from mla_edu.graphs.emulator import FreedMemoryError, GraphCaptureError
from mla_edu.graphs.poison import poison_
from mla_edu.util import check_finite

__all__ = ["check", "CheckReport", "HINTS"]

HINTS = {
    "wrong: rows>0": "row 0 matches but rows 1.. differ: a launch parameter (row stride / table width) "
                     "was frozen at capture; capture with full-width buffers and let the kernel read "
                     "lengths from device memory",
    "wrong: all rows": "every row differs: a host value (Python int/float, .item(), a shape or slice) was "
                       "frozen at capture, or the host rebuilt an input into a new tensor instead of "
                       "copying it into the captured buffer",
    "wrong: some rows": "some rows differ: padded slots or stale per-row entries leak into real rows "
                        "(pad with a safe length and dummy indices)",
    "NaN": "NaN after poisoning {buffers}: the step reads entries it never writes this step (stale state)",
    "stale": "the second replay on the same inputs differs from the first: state leaks between replays "
             "(a buffer accumulates and is never reset inside the graph)",
    "freed": "freed memory used at replay: {what}. Allocate it once, before capture, "
             "and keep it alive as long as the graph",
    "capture": "capture refused: {what}",
    "replay error": "replay raised {what}",
}


@dataclass
class CheckReport:
    """What :func:`check` found. ``ok`` is True when no trial diverged."""

    ok: bool
    backend: str
    trials: int  # trials completed without divergence
    failure: str | None = None  # "trial 3 (batch 2), replay 1: wrong: rows>0 ..."
    hint: str | None = None
    details: dict = field(default_factory=dict)

    def __str__(self) -> str:
        head = f"CheckReport[{self.backend}]: " + ("OK" if self.ok else "UNSAFE")
        lines = [head, f"  trials passed: {self.trials}"]
        if not self.ok:
            lines += [f"  first divergence: {self.failure}", f"  hint: {self.hint}"]
        return "\n".join(lines)

    __repr__ = __str__


def _flat_tensors(x) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


class _Inputs(dict):
    """One trial's inputs; notes which names were read (by ``prepare`` and ``reference``)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.read: set = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self.read.add(k)
        return super().get(k, default)

    def items(self):
        self.read.update(self.keys())
        return super().items()

    def values(self):
        self.read.update(self.keys())
        return super().values()


def _copy_leading(name: str, dst: torch.Tensor, src: torch.Tensor) -> None:
    if not torch.can_cast(src.dtype, dst.dtype):
        raise TypeError(f"input {name!r} is {src.dtype} but its static buffer is {dst.dtype}: copying it would "
                        "truncate the values (a float into an int buffer); expected the buffer's dtype")
    if src.dim() != dst.dim() or any(s > d for s, d in zip(src.shape, dst.shape)):
        raise ValueError(f"input of shape {tuple(src.shape)} does not fit its static buffer {tuple(dst.shape)}")
    dst[tuple(slice(0, s) for s in src.shape)].copy_(src)


def rows_label(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> str:
    """'matches eager', 'wrong: rows>0', 'NaN', 'wrong: all rows' or 'wrong: some rows'."""
    out, ref = out.detach().float().cpu(), ref.detach().float().cpu()
    close = torch.isclose(out, ref, atol=atol, rtol=rtol, equal_nan=True)
    if out.dim() == 0:
        out, ref, close = out[None], ref[None], close[None]
    ok = close.reshape(out.shape[0], -1).all(dim=1)  # [rows]
    if bool(ok.all()):
        return "matches eager"
    if out.shape[0] > 1 and bool(ok[0]) and not bool(ok[1:].any()):
        return "wrong: rows>0"
    if torch.isnan(out).any() and not torch.isnan(ref).any():
        return "NaN"
    return "wrong: all rows" if not bool(ok.any()) else "wrong: some rows"


def _compare(outs, refs, atol, rtol) -> tuple[str, str]:
    if len(outs) != len(refs):
        raise ValueError(f"the step returned {len(outs)} tensors but the reference {len(refs)}")
    for i, (o, r) in enumerate(zip(outs, refs)):
        if r.dim() != o.dim() or any(rs > os for rs, os in zip(r.shape, o.shape)):
            raise ValueError(f"reference output {i} of shape {tuple(r.shape)} does not fit the graph's "
                             f"output {tuple(o.shape)}")
        view = o[tuple(slice(0, s) for s in r.shape)]
        label = rows_label(view, r, atol, rtol)
        if label != "matches eager":
            err = (view.float() - r.float()).abs().max().item()  # nan where the output is NaN
            return label, f"output {i}, max abs err {err:.3g}"
    return "matches eager", ""


def check(step: Callable[[], Any], make_inputs: Callable[[torch.Generator, int], dict], *,
          static_inputs: dict[str, torch.Tensor], prepare: Callable[[dict], None] | None = None,
          reference: Callable[[dict], Any] | None = None, persistent=(), model_state=(),
          n_trials: int = 8, poison: bool = True, seed: int = 0, device=None, mode: str = "auto",
          atol: float = 1e-3, rtol: float = 1e-4) -> CheckReport:
    """Capture ``step`` once, then replay it against eager over ``n_trials`` randomized inputs.

    Args:
        step: the function to capture; reads only ``static_inputs`` and persistent state.
        make_inputs: ``(generator, trial) -> dict``; ``trial == -1`` gives the capture inputs.
            Tensors under a key of ``static_inputs`` are copied into that buffer's leading slice
            (a smaller batch); other entries are passed on to ``prepare`` and ``reference``.
        static_inputs: the captured input buffers, at maximum size.
        prepare: host work before each replay (fill metadata from the static inputs, pad).
        reference: eager answer for the real rows, ``inputs -> tensor(s)``; default: ``step()``
            run eagerly. Outputs are compared on the reference's (leading) shape.
        persistent: buffers a replay must not depend on: poisoned before each replay.
        model_state: buffers eager and graph both update (e.g. a KV cache): restored after the
            eager reference so that both start from the same state.
        poison: poison ``persistent`` before each replay.

    ``static_inputs``, ``persistent`` and ``model_state`` are put back as they came when check() returns or
    raises (an interrupt too): the poison of a replay does not outlive it.

    The checker compares something or says it cannot (ValueError/TypeError): a tensor input under a name no
    static input has and neither ``prepare`` nor ``reference`` reads (a misspelled key), a step or reference that
    returns no tensor, a tolerance that is not a finite number >= 0 (``atol=inf`` accepts anything), an input
    that its static buffer's dtype would truncate (floats into an int32 buffer).
    """
    if not callable(step) or not callable(make_inputs):
        raise TypeError("check expects callables for step and make_inputs, got "
                        f"{type(step).__name__} and {type(make_inputs).__name__}")
    if not isinstance(static_inputs, dict) or not all(isinstance(v, torch.Tensor) for v in static_inputs.values()):
        raise TypeError("static_inputs must be a dict of name -> torch.Tensor")
    if not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"n_trials must be an int >= 1, got {n_trials!r}")
    for name, tol in (("atol", atol), ("rtol", rtol)):
        check_finite(name, tol, "a tolerance of inf accepts any output")
    persistent, model_state = list(persistent), list(model_state)
    if device is None and static_inputs:
        device = next(iter(static_inputs.values())).device
    gen = torch.Generator().manual_seed(seed)
    names = {id(t): f"persistent[{i}] {str(t.dtype).replace('torch.', '')}{list(t.shape)}"
             for i, t in enumerate(persistent)}
    state = [*static_inputs.values(), *persistent, *model_state]

    def feed(inputs):
        for k, v in dict.items(inputs):  # not counted as read: a name no static input has is read by nobody here
            if k in static_inputs and isinstance(v, torch.Tensor):
                _copy_leading(k, static_inputs[k], v.to(static_inputs[k].device))
        if prepare is not None:
            prepare(inputs)

    def unread(inputs: _Inputs) -> None:
        unused = sorted(k for k, v in dict.items(inputs)  # a tensor meant for a static buffer under another name
                        if isinstance(v, torch.Tensor) and k not in static_inputs and k not in inputs.read)
        if unused:
            raise ValueError(f"make_inputs gave {unused}, which no static input, prepare or reference read: expected "
                             f"names from static_inputs {sorted(static_inputs)} (or inputs prepare/reference use)")

    outs: list[torch.Tensor] = []  # the graph's outputs, once captured

    def eager(inputs):
        # the outputs too: the default reference (the step, eagerly) writes its answer into the graph's own output
        # buffers, where it stood in for the rows a replay never writes (a slice frozen at capture passed)
        kept = [*state, *outs]
        saved = [t.clone() for t in kept]
        try:
            out = reference(inputs) if reference is not None else step()
            return [t.clone() for t in _flat_tensors(out)]
        finally:
            for t, s in zip(kept, saved):
                t.copy_(s)

    entry = [t.clone() for t in state]  # the caller's buffers as they came: put back however check() ends
    try:
        # warm up eagerly (compiles kernels), then capture on the capture inputs
        cap = _Inputs(make_inputs(gen, -1))
        feed(cap)
        g = Graph(device=device, mode=mode, track=(mode != "emulated"))
        saved = [t.clone() for t in state]
        try:
            warm_up(step, 1, g.device, real_cuda=g.backend == "cuda")
        except GraphCaptureError:
            pass
        for t, s in zip(state, saved):
            t.copy_(s)
        backend = g.backend
        try:
            with graph(g):
                outs[:] = _flat_tensors(step())
            if not outs:
                raise ValueError("the step returned no tensor (None?): the checker has nothing to compare; expected "
                                 "the step to return its output tensor(s)")
        except (GraphCaptureError, RuntimeError) as e:
            if not (isinstance(e, GraphCaptureError) or "captur" in str(e)):
                raise
            root = e  # CUDA: the refused call's error is the context of capture_end's error
            while root.__context__ is not None and isinstance(root.__context__, RuntimeError):
                root = root.__context__
            msg = str(root).strip().splitlines()[0][:200]
            return CheckReport(False, backend, 0, f"capture: {msg}", HINTS["capture"].format(what=msg))

        vague = None  # a "some rows" divergence: keep looking for a more telling one
        for trial in range(n_trials):
            inputs = _Inputs(make_inputs(gen, trial))
            report = _trial(g, backend, trial, inputs, feed, eager, outs, persistent, names, poison, atol, rtol)
            if trial == 0:
                unread(inputs)
            if report is None:
                continue
            if report.details.get("label") != "wrong: some rows":
                return report
            vague = vague or report
        return vague or CheckReport(True, backend, n_trials)
    finally:  # replays poison persistent buffers and feed overwrites the inputs: none of it outlives check()
        for t, s in zip(state, entry):
            t.copy_(s)


def _trial(g, backend, trial, inputs, feed, eager, outs, persistent, names, poison, atol, rtol):
    """One trial: None if graph and eager agree, else the report of the divergence."""
    feed(inputs)
    refs = eager(inputs)
    if not refs:
        raise ValueError("the reference returned no tensor: the checker has nothing to compare it with")
    clean = [t.clone() for t in persistent]
    for rep in range(2):
        if poison:
            for t in persistent:
                poison_(t)
            feed(inputs)
        try:
            g.replay()
        except (FreedMemoryError, IndexError, RuntimeError) as e:
            msg = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            return CheckReport(False, backend, trial, f"trial {trial}, replay {rep}: {msg}",
                               HINTS["replay error"].format(what=msg))
        if g.freed_uses():
            return CheckReport(False, backend, trial, f"trial {trial}, replay {rep}: freed memory",
                               HINTS["freed"].format(what=g.freed_uses()[0]), {"freed_uses": g.freed_uses()})
        label, where = _compare(outs, refs, atol, rtol)
        if rep == 0:
            first = None if label == "matches eager" else (label, where, [o.clone() for o in outs])
            continue
        if first is None:  # replay 0 on the same inputs matched
            if label == "matches eager":
                return None
            return CheckReport(False, backend, trial, f"trial {trial}, replay 1: {label} ({where})", HINTS["stale"],
                               {"label": label})
        label, where, outs0 = first
        failure = f"trial {trial}, replay 0: {label} ({where})"
        if not all(torch.allclose(a.float(), b.float(), atol=atol, rtol=rtol, equal_nan=True)
                   for a, b in zip(outs, outs0)):  # replays on the same inputs differ: accumulating state
            return CheckReport(False, backend, trial, failure + "; replay 1 differs from replay 0", HINTS["stale"],
                               {"label": "stale"})
        hint = HINTS[label]
        if label == "NaN":
            culprits = _nan_culprits(g, persistent, clean, outs, feed, inputs, refs, atol, rtol) if poison else []
            hint = hint.format(buffers=", ".join(names[id(t)] for t in culprits) or "persistent buffers")
        return CheckReport(False, backend, trial, failure, hint, {"label": label})
    return None


def _nan_culprits(g, persistent, clean, outs, feed, inputs, refs, atol, rtol):
    """Which persistent buffers, poisoned alone, make the replay NaN."""
    culprits = []
    for t in persistent:
        for buf, c in zip(persistent, clean):
            buf.copy_(c)
        poison_(t)
        feed(inputs)
        g.replay()
        if _compare(outs, refs, atol, rtol)[0] == "NaN":
            culprits.append(t)
    return culprits
