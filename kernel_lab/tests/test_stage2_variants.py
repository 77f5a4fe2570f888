"""The stage-2 patches kept for an H200 A/B (``kernel_lab/results/stage2_variants/``: ``few_wide_pipelined.patch``, the
merge loop's loads pipelined in ``STAGE2_FEW_WIDE``; ``long_pipelined.patch``, the same only for a request of more than
4 partials) apply to the package and, in Triton's interpreter, merge every stage-2 config against float64 as the
package does (the interpreter ignores the pipelining; a GPU times it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernel_lab.tools import long_tail as lt
from mla_edu.paths import REPO_ROOT
from tests import test_kernels_schedule as t

VARIANTS = REPO_ROOT / "kernel_lab" / "results" / "stage2_variants"
CHECK = """
import inspect
import mla_edu.kernels.split_kv_triton as skt
assert skt.__file__.startswith({copy!r}), skt.__file__
assert "PIPELINED" in inspect.signature(skt.stage2_scheduled_kernel.fn).parameters
import tests.test_kernels_schedule as t
for config in t.STAGE2_CONFIGS:
    t.test_each_stage2_config_matches_float64(config)
print("merged", len(t.STAGE2_CONFIGS), "configs")
"""


@pytest.mark.parametrize("patch", ["few_wide_pipelined.patch", "long_pipelined.patch"])
def test_the_pipelined_patch_applies_and_matches_float64(tmp_path, patch):
    assert ([1500, 3, 5, 0], 16) in t.INTERP_CASES  # one request in 15 partials: the long branch runs
    copy = lt.patched_copy(tmp_path, VARIANTS / patch, package=True)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # tests/ from the repository, mla_edu from the copy (cwd)
    run = subprocess.run([sys.executable, "-c", CHECK.format(copy=str(copy))], cwd=copy, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "merged 3 configs" in run.stdout
