import sys
from pathlib import Path

import pytest
import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU before anything imports triton)

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def one_thread():
    """Small ops: one torch thread is faster on a shared 2-core machine (restored afterwards)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
