"""Where the code runs (CUDA or CPU), whether Triton is there, and the setting that must happen before Triton is
imported.

Without a GPU, Triton kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``).
The variable is read when ``triton`` is first imported, so this module is imported first
by ``mla_edu/__init__.py``. Set ``TRITON_INTERPRET`` yourself to override.

Triton is optional: it publishes wheels for Linux only, so on macOS and Windows it is absent and everything runs
on the torch implementations (``impl="torch"``, the CPU default). ``triton_available`` says whether it is
importable and why not; ``require_triton`` is the one error a Triton-only path raises without it.
"""

import contextlib
import importlib.util
import os
import platform
from dataclasses import dataclass

import numpy as np

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def quiet(on_gpu: bool):
    """Around a Triton launch: the interpreter computes with numpy, which warns on NaN/inf arithmetic, and NaN
    poison is expected in this package's kernels (checked calls, empty rows); nothing to quiet on a GPU."""
    return contextlib.nullcontext() if on_gpu else np.errstate(invalid="ignore", over="ignore", divide="ignore")


def default_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if HAS_CUDA else "cpu")


def check_device(name: str, device) -> torch.device:
    """``device`` as a ``torch.device`` that exists here (``cpu``, or ``cuda[:N]`` with that GPU present); else
    ValueError naming ``name``, what was expected and what came (torch's own error for ``cuda`` without CUDA is an
    AssertionError from its lazy init, at the first allocation)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{name}: expected a device such as cpu, cuda or cuda:0, got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: expected cpu or cuda[:N], got {device!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}: expected cpu (CUDA is not available here, torch {torch.__version__}), "
                             f"got {device!r}")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{name}: expected cuda:0..cuda:{torch.cuda.device_count() - 1} (the GPUs here), "
                             f"got {device!r}")
    return dev


#: What each system is called in ``TritonStatus.reason`` (``platform.system()``'s names).
_SYSTEMS = {"Darwin": "macOS", "Windows": "Windows", "Linux": "Linux"}


@dataclass(frozen=True)
class TritonStatus:
    """Whether Triton can be imported here, and in words why not (true as a bool where it can)."""

    available: bool
    reason: str

    def __bool__(self) -> bool:
        return self.available


def triton_available() -> TritonStatus:
    """Whether ``import triton`` works on this machine (found without importing it), with the reason where not."""
    if importlib.util.find_spec("triton") is not None:
        return TritonStatus(True, "Triton is installed")
    system = _SYSTEMS.get(platform.system(), platform.system() or "this system")
    if system == "Linux":
        return TritonStatus(False, "Triton is not installed (it has Linux wheels: pip install triton)")
    return TritonStatus(False, f"Triton has no wheel for {system} ({platform.machine()})")


def require_triton(what: str) -> None:
    """RuntimeError naming the platform and the torch path to use instead, where Triton is missing; ``what``: the
    Triton-only thing asked for (``impl="triton"``, the balanced schedule, ...)."""
    status = triton_available()
    if not status:
        raise RuntimeError(f"{what} needs Triton: {status.reason}. Use impl=\"torch\" (the CPU default), which "
                           "computes the same attention with torch ops")


def values_readable(*tensors: torch.Tensor) -> bool:
    """Whether the host may read these tensors' values now without waiting for a device: all on the CPU and no
    emulated graph capture recording (there a read is refused, as CUDA refuses it). Value checks (a pool index
    inside the pool) run only then; on a GPU the kernels mask what they cannot check."""
    from mla_edu.graphs.emulator import capturing  # imported here: graphs imports this module

    return all(t.device.type == "cpu" for t in tensors) and not capturing()
