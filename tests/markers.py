"""Skip marks that several test modules share, each with the reason a run's summary shows."""

import pytest

from mla_edu.device import TRITON_INTERPRET

# Triton's CPU interpreter is chosen once, when triton is first imported (mla_edu.device): without a GPU it is on;
# on a GPU machine the process runs Triton's GPU kernels, and impl="triton" refuses CPU tensors there.
CPU_TRITON = pytest.mark.skipif(not TRITON_INTERPRET, reason="Triton on CPU tensors needs TRITON_INTERPRET=1 set "
                                "before triton is imported (on a GPU machine Triton runs on the GPU)")
