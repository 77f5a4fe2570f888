"""Where the code runs (CUDA or CPU), and the setting that must happen before Triton is imported.

Without a GPU, Triton kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``).
The variable is read when ``triton`` is first imported, so this module is imported first
by ``mla_edu/__init__.py``. Set ``TRITON_INTERPRET`` yourself to override.
"""

import os

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def default_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if HAS_CUDA else "cpu")
