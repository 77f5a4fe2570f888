"""CUDA graphs on any machine: one API (real ``torch.cuda.CUDAGraph`` on a GPU, an emulator on CPU).

Capture and replay (``capture.py``)::

    g = Graph(device=None, mode="auto", strict=False, track=False)  # "auto": cuda on a GPU, else emulated
    with graph(g, pool=None):          # like torch.cuda.graph
        out = step()
    g.replay(); g.pool(); g.backend    # "cuda" or "emulated"; is_emulated(g)
    g, out = Graph.capture(step, warmup=1, pool=None, device=None, mode="auto", strict=False)
    warm_up(step, n=1, device=None)    # eager runs before a capture (side stream on CUDA)

A failed capture leaves ``g`` empty and usable; a capture inside another capture is refused;
a capture of a matmul with no warm-up on that device warns (``GraphWarmupWarning``; ``forget_warmups()``
makes it warn again, as in a fresh process).

The emulator (``emulator.py``) records aten ops and custom ops (one op each) with a
TorchDispatchMode and replays them on the same storages; its exact semantics are in that
module's docstring. Mark CPU tensors that play host memory (``seq_lens_cpu``) with
:func:`host_tensor` when the graph runs on CPU. Poison values: ``poison.py``.

Checking (``check.py``): ``check(step, make_inputs, static_inputs=..., prepare=..., reference=...,
persistent=..., model_state=...) -> CheckReport`` replays against eager on random inputs with
poisoned buffers. Pitfalls with their fixes: ``scenarios`` (``python -m mla_edu.graphs.scenarios``).
Launch overhead: ``python -m tools.launch_bench``.
"""

from mla_edu.graphs.capture import Graph, graph, is_emulated, warm_up
from mla_edu.graphs.check import CheckReport, check
from mla_edu.graphs.emulator import (EmulatedPool, FreedMemoryError, GraphCaptureError, GraphWarmupWarning,
                                     forget_warmups, host_tensor, is_host_tensor)
from mla_edu.graphs.poison import is_poison, poison_, poison_value

__all__ = ["Graph", "graph", "is_emulated", "warm_up", "check", "CheckReport", "EmulatedPool", "FreedMemoryError",
           "GraphCaptureError", "GraphWarmupWarning", "forget_warmups", "host_tensor", "is_host_tensor", "poison_",
           "poison_value", "is_poison"]
