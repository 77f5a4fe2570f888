"""One graph API for every machine: ``torch.cuda.CUDAGraph`` on a GPU, the emulator on CPU.

    g = Graph()                      # mode="auto": "cuda" on a CUDA device, else "emulated"
    with graph(g):                   # like torch.cuda.graph(g)
        static_out = step(static_in)
    static_in.copy_(new_in); g.replay(); use(static_out)

    g, out = Graph.capture(lambda: step(static_in), warmup=1)   # warm-up, then capture

Share a memory pool between graphs that replay one at a time with
``graph(g2, pool=g1.pool())`` (on CUDA the pool handle of ``CUDAGraph.pool()``; emulated,
an :class:`~mla_edu.graphs.emulator.EmulatedPool`).
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

from mla_edu.device import default_device
from mla_edu.graphs.emulator import EmulatedPool, GraphCaptureError, Program, Recorder, is_host_tensor, watch_warmup
from mla_edu.util import is_int

__all__ = ["Graph", "graph", "is_emulated", "warm_up"]

_MODES = ("auto", "cuda", "emulated")


def _resolve_device(device) -> torch.device:
    if device is None:
        return default_device()
    if isinstance(device, (str, int)):
        return torch.device(device if isinstance(device, str) else f"cuda:{device}")
    if isinstance(device, torch.device):
        return device
    raise TypeError(f"device must be None, a str or a torch.device, got {type(device).__name__}")


class Graph:
    """A captured sequence of device work that ``replay()`` runs again.

    Args:
        device: where the work runs (default: ``cuda`` if present, else ``cpu``).
        mode: ``"auto"`` (real graph on CUDA, emulator elsewhere), ``"cuda"`` or ``"emulated"``.
        strict: replay raises :class:`FreedMemoryError` instead of poisoning memory freed after
            capture (on CUDA: needs ``track``).
        track: CUDA only: also record which storages the graph uses (a dispatch mode beside the
            real capture), so that ``freed_uses()`` and ``strict`` work there too. The emulator
            always tracks.
    """

    def __init__(self, device=None, mode: str = "auto", strict: bool = False, track: bool = False) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        if not isinstance(strict, bool) or not isinstance(track, bool):
            raise TypeError(f"strict and track must be bools, got {type(strict).__name__} and {type(track).__name__}")
        self.device = _resolve_device(device)
        if mode == "auto":
            mode = "cuda" if self.device.type == "cuda" else "emulated"
        if mode == "cuda" and (self.device.type != "cuda" or not torch.cuda.is_available()):
            raise ValueError(f"mode='cuda' needs a CUDA device, got device {self.device} "
                             f"(CUDA available: {torch.cuda.is_available()}); use mode='emulated'")
        if self.device.type == "cuda" and not torch.cuda.is_available():  # the emulator would take every CPU tensor
            raise ValueError(f"device: expected cpu (CUDA is not available here), got {self.device}: the emulator "
                             "records only work on the graph's device, and would replay none of it")
        self.backend = mode
        self.strict = strict
        self._captured = False
        self._capturing = False
        if mode == "cuda":
            self._cuda = torch.cuda.CUDAGraph()
            self._program = Program(strict=strict, observe=True, device_type="cuda") if (track or strict) else None
            self._pool = None
        else:
            self._cuda = None
            self._program = Program(strict=strict, device_type=self.device.type)
            self._pool = EmulatedPool()

    # ---- replay and pools --------------------------------------------------------------
    def replay(self) -> None:
        """Run the captured work again, on the same memory, with the same launch parameters."""
        if not self._captured:
            raise RuntimeError("Graph.replay(): nothing captured yet (use `with graph(g): ...` or Graph.capture)")
        if self._program is not None:
            self._program.replay()  # emulated: runs the ops; tracked CUDA: only checks freed memory
        if self._cuda is not None:
            self._cuda.replay()

    def pool(self):
        """A handle to share this graph's memory pool: ``graph(other, pool=g.pool())``."""
        return self._cuda.pool() if self._cuda is not None else self._pool

    @property
    def num_ops(self) -> int:
        """Emulated: ops recorded at capture (views and allocations included). CUDA: -1 (unknown)."""
        return len(self._program.ops) if self._program is not None else -1

    @property
    def num_replay_steps(self) -> int:
        """Emulated: closures replay runs (views and allocations cost nothing). CUDA: -1."""
        return len(self._program.steps) if self.backend == "emulated" else -1

    @property
    def captured_bytes(self) -> int:
        """Emulated: bytes allocated during capture that the graph keeps (its private pool: every
        temporary of every recorded op, as a CUDA graph's pool keeps them). CUDA: -1 (unknown)."""
        if self.backend != "emulated":
            return -1
        return sum(b.nbytes for b in self._program.blocks.values() if b.origin == "capture")

    def recorded_ops(self) -> list[str]:
        """The names of the recorded ops, in order (emulated, or CUDA with ``track=True``)."""
        if self._program is None:
            raise RuntimeError("recorded_ops() needs an emulated graph or Graph(..., track=True)")
        return list(self._program.ops)

    def freed_uses(self) -> list[str]:
        """Memory freed after capture that the last replay touched (emulated, or CUDA with track)."""
        return list(self._program.freed_uses) if self._program is not None else []

    def __repr__(self) -> str:
        state = "captured" if self._captured else "empty"
        return f"Graph(backend={self.backend!r}, device={str(self.device)!r}, {state})"

    # ---- capture -----------------------------------------------------------------------
    @classmethod
    def capture(cls, fn: Callable[[], Any], *, warmup: int = 1, pool=None, device=None,
                mode: str = "auto", strict: bool = False, track: bool = False) -> tuple["Graph", Any]:
        """Run ``fn`` ``warmup`` times eagerly (on a side stream on CUDA), then capture it.

        Returns ``(graph, outputs)``; ``outputs`` are the static tensors ``fn`` returned at capture:
        read them after each ``replay()``. A host number among them (``int``, ``float``, ``bool``, a
        numpy scalar) is refused with a TypeError: it was computed once, at capture, and no replay
        would ever change it.
        """
        if not callable(fn):
            raise TypeError(f"Graph.capture expects a callable, got {type(fn).__name__}")
        if not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
        g = cls(device=device, mode=mode, strict=strict, track=track)
        warm_up(fn, warmup, g.device, real_cuda=g.backend == "cuda")
        with graph(g, pool=pool):
            outputs = fn()
        leaves = tree_flatten(outputs)[0]
        frozen = [(i, v) for i, v in enumerate(leaves) if isinstance(v, numbers.Number)]
        if frozen:
            i, v = frozen[0]
            raise TypeError(f"Graph.capture: expected fn to return tensors, got {type(v).__name__} {v!r} (output "
                            f"leaf {i} of {len(leaves)}), a host number: it was computed once, at capture, and "
                            "replay never changes it. Return a tensor that device ops compute, and read it after "
                            "replay()")
        host = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor) and (
            is_host_tensor(v) or g.device.type == "cuda" and v.device.type == "cpu")]
        if host:
            raise TypeError(f"Graph.capture: expected fn to return tensors on the graph's device, got a host tensor "
                            f"(output leaf {host[0]} of {len(leaves)}): host work runs once, at capture, and replay "
                            "never changes it. Compute it with device ops, and read it after replay()")
        return g, outputs


def warm_up(fn: Callable[[], Any], n: int = 1, device=None, *, real_cuda: bool | None = None) -> None:
    """Run ``fn`` ``n`` times eagerly before a capture, as PyTorch's CUDA-graph notes ask.

    On CUDA the runs go on a side stream (https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs:
    "warm up on a side stream before capture"): lazy initialisation such as cuBLAS's handle happens
    there, not inside the capture. The emulator also notes which ops ran, so that a later capture of
    a matmul that never ran eagerly on this device warns (``GraphWarmupWarning``).
    """
    if not callable(fn):
        raise TypeError(f"warm_up expects a callable, got {type(fn).__name__}")
    if not is_int(n) or n < 0:
        raise ValueError(f"warm-up runs must be an int >= 0, got {n!r}")
    device = _resolve_device(device)
    if real_cuda is None:
        real_cuda = device.type == "cuda"
    if not n:
        return
    with watch_warmup():
        if real_cuda:
            side = torch.cuda.Stream(device=device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(n):
                    fn()
            torch.cuda.current_stream(device).wait_stream(side)
        else:
            for _ in range(n):
                fn()


def is_emulated(g: Graph) -> bool:
    """True when ``g`` runs on the emulator (not a real CUDA graph)."""
    if not isinstance(g, Graph):
        raise TypeError(f"is_emulated expects a mla_edu.graphs.Graph, got {type(g).__name__}")
    return g.backend == "emulated"


@contextlib.contextmanager
def _no_gc_collection():
    """Python's cyclic garbage collector off for the block, restored after on any exit. A dead reference cycle
    that holds a captured CUDA graph, collected in the middle of another capture, destroys that graph there;
    the destructor's reset is a CUDA call that a capture forbids, and the capture is invalidated ("operation
    failed due to a previous error during capture", seen on the H200 in notebook 08). Paused, the collector
    frees such cycles after the capture. (``torch.cuda.graph`` collected on entry once; it now does so only
    with ``TORCH_CUDAGRAPH_GC=1``, ``torch.compiler.config.force_cudagraph_gc``, default off.)"""
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def graph(g: Graph, pool=None):
    """Capture the work done inside the block into ``g`` (like ``torch.cuda.graph``), with Python's
    garbage collector paused (``_no_gc_collection``). The returned context is single-use."""
    return _GraphContext(g, pool)


class _GraphContext:
    """``graph(g)``'s context: ``_capture`` on the first entry; a second entry is refused by name
    (contextlib's own context would fail with ``AttributeError: ... 'args'``)."""

    def __init__(self, g, pool):
        self.g, self.pool, self.cm = g, pool, None

    def __call__(self, *args, **kwargs):
        raise TypeError(f"graph({self.g!r}) is a context manager, not a decorator: expected `with graph(g): ...` "
                        "around the work to capture, or Graph.capture(fn) for a function")

    def __enter__(self):
        if self.cm is not None:
            raise RuntimeError(f"this graph({self.g!r}) context was already entered; expected a new "
                               "`with graph(Graph()):` for a new capture")
        self.cm = _capture(self.g, self.pool)
        return self.cm.__enter__()

    def __exit__(self, *exc):
        return self.cm.__exit__(*exc)


@contextlib.contextmanager
def _capture(g: Graph, pool=None):
    if not isinstance(g, Graph):
        raise TypeError(f"graph() expects a mla_edu.graphs.Graph, got {type(g).__name__}")
    if g._captured or g._capturing:
        raise RuntimeError(f"{g!r} was already captured; make a new Graph for a new capture")
    if _CAPTURING:
        raise GraphCaptureError(
            f"nested capture: {g!r} cannot start capturing while {_CAPTURING[-1]!r} is capturing. CUDA "
            "refuses it too: torch.cuda.graph synchronizes the device on entry, and on the H200 that fails with "
            "'operation not permitted when stream is capturing' (cudaErrorStreamCaptureUnsupported), which "
            "invalidates the outer capture. Capture the two graphs one after the other.")
    if g.backend == "cuda":
        if pool is not None and isinstance(pool, EmulatedPool):
            raise TypeError("pool: a CUDA graph needs a CUDA pool handle (cuda_graph.pool()), "
                            "got an EmulatedPool")
        with _capturing(g), _no_gc_collection():
            with torch.cuda.graph(g._cuda, pool=pool):
                if g._program is not None:
                    with Recorder(g._program):
                        yield g
                else:
                    yield g
            if g._program is not None:  # inside the guard: an error here (a warning made an error) aborts
                g._program.end_capture()
        g._captured = True
        return
    if pool is not None and not isinstance(pool, EmulatedPool):
        raise TypeError(f"pool: an emulated graph needs an EmulatedPool (other_graph.pool()), "
                        f"got {type(pool).__name__}")
    if pool is not None:
        g._pool = pool
    recorder = Recorder(g._program, pool=g._pool)
    with _capturing(g), _no_gc_collection():  # as on CUDA, so both backends behave alike
        with recorder:
            yield g
        g._program.end_capture()  # inside the guard: if it raises, the capture's writes are undone, nothing kept
    g._pool.add(g._program)
    g._captured = True


_CAPTURING: list[Graph] = []  # graphs being captured now (at most one: nesting is refused)


@contextlib.contextmanager
def _capturing(g: Graph):
    """Mark ``g`` as capturing; if the capture fails, give ``g`` a fresh, empty recording.

    A failed capture records nothing usable (CUDA invalidates it), so nothing it recorded may
    leak into the next capture of the same ``Graph``; buffers it wrote get their old bytes back.
    """
    g._capturing = True
    _CAPTURING.append(g)
    try:
        yield
    except BaseException:
        if g._program is not None:
            g._program.abort_capture()
            g._program = Program(strict=g.strict, observe=g._program.observe, device_type=g._program.device_type)
        if g._cuda is not None:
            g._cuda = torch.cuda.CUDAGraph()
        raise
    finally:
        g._capturing = False
        _CAPTURING.remove(g)
