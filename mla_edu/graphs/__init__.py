"""CUDA graphs on any machine: one API (real ``torch.cuda.CUDAGraph`` on a GPU, an emulator on CPU).

* :class:`Graph`, :func:`graph`, :func:`is_emulated`: capture and replay (``capture.py``).
* The emulator and its semantics: ``emulator.py``; poison values: ``poison.py``.
"""

from mla_edu.graphs.capture import Graph, graph, is_emulated
from mla_edu.graphs.emulator import EmulatedPool, FreedMemoryError, GraphCaptureError, host_tensor, is_host_tensor
from mla_edu.graphs.poison import is_poison, poison_, poison_value

__all__ = ["Graph", "graph", "is_emulated", "EmulatedPool", "FreedMemoryError", "GraphCaptureError", "host_tensor", "is_host_tensor",
           "poison_", "poison_value", "is_poison"]
