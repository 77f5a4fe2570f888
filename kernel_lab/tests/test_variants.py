"""The kernel lab's variant patches (kernel_lab/results/seesaw_variants/) applied to a copy of the seesaw kernel and
compiled for sm_90a on this machine: what the variants measured slower do to the compiled code."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mla_edu.kernels import split_kv_seesaw as seesaw

VARIANTS = Path(__file__).resolve().parents[1] / "results" / "seesaw_variants"
SEESAW_VARIANTS = [(False, False), (True, False), (False, True)]  # (scheduled, final): partials, persistent, one split


@pytest.mark.parametrize("scheduled, final", SEESAW_VARIANTS)
@pytest.mark.parametrize("patch", ["s0_ahead_zeroing", "s0_ahead_whole"])
def test_the_report_refuses_the_variants_measured_slower(tmp_path, patch, scheduled, final):
    # warpgroup 0 scoring the next pair's tile 0 behind its last product, FlashMLA's order, with a partial tile's
    # rows zeroed under that product (s0_ahead_zeroing) or not (s0_ahead_whole): ptxas runs short of registers and,
    # with Triton 3.7.1, serializes every wgmma of the kernel in both, in every variant. On the H200 both were slower
    # than the kept kernel (kernel_lab/results/seesaw_ab_h200_v17.md)
    dst = tmp_path / "mla_edu" / "kernels" / "split_kv_seesaw.py"
    dst.parent.mkdir(parents=True)
    shutil.copy(seesaw.__file__, dst)
    applied = subprocess.run(["git", "apply", str(VARIANTS / f"{patch}.patch")], cwd=tmp_path, capture_output=True,
                             text=True)
    assert applied.returncode == 0, f"{patch}.patch no longer applies to split_kv_seesaw.py: {applied.stderr}"
    r = compile_variant(dst, scheduled, final)
    assert r["wgmma"] == {"m64n64k16": 576 // 16 * 3 // 2, "m64n256k16": 2 * 64 // 16}  # its tile-0 scores twice
    assert r["wgmma_serialized"]  # what tests/test_sm90.py refuses of the kept kernel


#: Compiles a variant of the seesaw kernel (the file argv[1]) for sm_90a: loaded under a name of its own, its
#: compile spec handed to ``sm90.compile_report``, in a process without Triton's interpreter.
COMPILE_VARIANT = """
import importlib.util, json, sys
from mla_edu.kernels import sm90
spec = importlib.util.spec_from_file_location("seesaw_variant", sys.argv[1])
variant = importlib.util.module_from_spec(spec)
spec.loader.exec_module(variant)
scheduled, final = sys.argv[2] == "1", sys.argv[3] == "1"
compile_spec = variant.STAGE1.compile_spec("seesaw", 64, "bf16", final, sm90.HEADS, scheduled, sm90.BATCH,
                                           sm90.N_PAGES)
print(json.dumps(sm90.compile_report(compile_spec)))
"""


def compile_variant(path, scheduled: bool, final: bool) -> dict:
    run = subprocess.run([sys.executable, "-c", COMPILE_VARIANT, str(path), str(int(scheduled)), str(int(final))],
                         env={**os.environ, "TRITON_INTERPRET": "0"}, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout)
