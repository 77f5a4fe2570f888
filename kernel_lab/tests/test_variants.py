"""The kernel lab's variant patches applied to a copy of their kernel and compiled for sm_90a on this machine: what the
seesaw variants measured slower (kernel_lab/results/seesaw_variants/) do to the compiled code, and what the next A/B's
swapped-kernel variant (kernel_lab/results/tma_variants/) compiles to."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mla_edu.kernels import sm90
from mla_edu.kernels import split_kv_seesaw as seesaw
from mla_edu.kernels import split_kv_wgmma as wg

VARIANTS = Path(__file__).resolve().parents[1] / "results" / "seesaw_variants"
TMA_VARIANTS = VARIANTS.parent / "tma_variants"
SEESAW_VARIANTS = [(False, False), (True, False), (False, True)]  # (scheduled, final): partials, persistent, one split


@pytest.mark.parametrize("scheduled, final", SEESAW_VARIANTS)
@pytest.mark.parametrize("patch", ["s0_ahead_zeroing", "s0_ahead_whole"])
def test_the_report_refuses_the_variants_measured_slower(tmp_path, patch, scheduled, final):
    # warpgroup 0 scoring the next pair's tile 0 behind its last product, FlashMLA's order, with a partial tile's
    # rows zeroed under that product (s0_ahead_zeroing) or not (s0_ahead_whole): ptxas runs short of registers and,
    # with Triton 3.7.1, serializes every wgmma of the kernel in both, in every variant. On the H200 both were slower
    # than the kept kernel (kernel_lab/results/seesaw_ab_h200_v17.md)
    dst = patched_copy(tmp_path, seesaw.__file__, VARIANTS / f"{patch}.patch")
    r = compile_variant(dst, scheduled, final)
    assert r["wgmma"] == {"m64n64k16": 576 // 16 * 3 // 2, "m64n256k16": 2 * 64 // 16}  # its tile-0 scores twice
    assert r["wgmma_serialized"]  # what tests/test_sm90.py refuses of the kept kernel


@pytest.mark.parametrize("heads", [16, 32])
def test_segment_ahead_compiles_as_the_kept_swapped_kernel(tmp_path, heads):
    # the balanced schedule's walk with the next segment's first tile and q in flight under the current segment's
    # end (segment_ahead.patch, kernel_lab/results/tma_variants/README.md; timed on the H200 and rejected): the
    # scheduled TMA kernel at 16 and 32 heads a program (B=64) has no spill, fits the H200's shared memory and keeps
    # the kept kernel's wgmma per tile; the split rule's code (not scheduled) is the kept kernel's
    dst = patched_copy(tmp_path, wg.__file__, TMA_VARIANTS / "segment_ahead.patch")
    kept_copy = tmp_path / "kept" / "split_kv_wgmma.py"
    kept_copy.parent.mkdir()
    shutil.copy(wg.__file__, kept_copy)
    for scheduled in (True, False):
        kept = compile_variant(kept_copy, scheduled, False, "tma", heads)
        r = compile_variant(dst, scheduled, False, "tma", heads)
        assert r["wgmma"] == kept["wgmma"] == {f"m64n{heads}k16": 576 // 16 + 512 // 64 * 64 // 16}
        assert r["spill_bytes"] == 0 and not r["wgmma_serialized"]
        assert r["shared_bytes"] <= sm90.MAX_SHARED
        if scheduled:
            assert code(r["ptx"]) != code(kept["ptx"])  # the patch is there
        else:
            assert code(r["ptx"]) == code(kept["ptx"])


def patched_copy(root: Path, source, patch: Path) -> Path:
    """A copy of the package's file ``source`` at its place under ``root``, with ``patch`` applied."""
    dst = root / "mla_edu" / "kernels" / Path(source).name
    dst.parent.mkdir(parents=True)
    shutil.copy(source, dst)
    # no repository above root: inside one, git apply skips the paths outside root's folder without a word
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.resolve().parent)}
    applied = subprocess.run(["git", "apply", str(patch)], cwd=root, capture_output=True, text=True, env=env)
    assert applied.returncode == 0, f"{patch.name} no longer applies to {dst.name}: {applied.stderr}"
    return dst


def code(ptx: str) -> list[str]:
    """The instructions of a PTX, without its line table and debug sections (which move with the source's lines)."""
    body = ptx.split(".section")[0]
    return [ln.split("//")[0].rstrip() for ln in body.splitlines()
            if ln.strip() and not ln.lstrip().startswith((".loc", ".file", "//", "$L__tmp"))]


#: Compiles a variant of a stage-1 kernel (the file argv[1], the kind argv[4] at argv[5] heads) for sm_90a: loaded
#: under a name of its own, its compile spec handed to ``sm90.compile_report``, in a process without Triton's
#: interpreter.
COMPILE_VARIANT = """
import importlib.util, json, sys
from mla_edu.kernels import sm90
spec = importlib.util.spec_from_file_location("stage1_variant", sys.argv[1])
variant = importlib.util.module_from_spec(spec)
spec.loader.exec_module(variant)
scheduled, final = sys.argv[2] == "1", sys.argv[3] == "1"
compile_spec = variant.STAGE1.compile_spec(sys.argv[4], 64, "bf16", final, int(sys.argv[5]), scheduled, sm90.BATCH,
                                           sm90.N_PAGES)
print(json.dumps(sm90.compile_report(compile_spec)))
"""


def compile_variant(path, scheduled: bool, final: bool, kind: str = "seesaw", heads: int = sm90.HEADS) -> dict:
    run = subprocess.run([sys.executable, "-c", COMPILE_VARIANT, str(path), str(int(scheduled)), str(int(final)), kind,
                          str(heads)], env={**os.environ, "TRITON_INTERPRET": "0"}, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout)


STAGE2_VARIANTS = VARIANTS.parent / "stage2_variants"

#: Compiles stage 2 of the balanced schedule (``stage2_scheduled_kernel`` of the file argv[1]) for sm_90a at h_q=128,
#: B=128, 66 parts, with the config argv[2] (``STAGE2_FEW_WIDE`` or ``STAGE2_MANY``) and ``PDL`` argv[3]; prints
#: its PTX.
COMPILE_STAGE2 = """
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
from mla_edu.kernels import schedule, sm90
spec = importlib.util.spec_from_file_location("stage2_variant", sys.argv[1])
variant = importlib.util.module_from_spec(spec)
spec.loader.exec_module(variant)
cfg = getattr(variant, sys.argv[2])
k = variant.stage2_scheduled_kernel
consts = dict(PAGE=64, **schedule.plan_constexprs(128, schedule.max_pieces(128, 128, 66)), DL=512,
              BLOCK_DL=min(cfg.block_d, 512), BLOCK_H=cfg.block_h, BLOCK_S=cfg.block_s,
              PIPELINED=cfg == variant.STAGE2_FEW_WIDE, PDL=sys.argv[3] == "1")
sig, attrs = sm90.signature(k, "bf16", consts, {})
print(triton.compile(ASTSource(k, sig, consts, attrs), target=GPUTarget("cuda", 90, 32)).asm["ptx"])
"""


@pytest.mark.parametrize("config", ["STAGE2_FEW_WIDE", "STAGE2_MANY"])
def test_stage2_with_pdl_waits_after_the_lengths_and_before_the_partials(tmp_path, config):
    # pdl_partition_first.patch (kernel_lab/results/stage2_variants/): stage 2 launched with programmatic dependent
    # launch, as FlashMLA's combine kernel; a program reads seq_lens (written before stage 1 started) and computes its
    # request's parts, then waits for stage 1 only where there are partials to merge. In the PTX: one
    # griddepcontrol.wait, after the lengths' load and before every load of the workspace (ld.global or cp.async);
    # without PDL, none, and the kept kernel's instructions
    dst = patched_copy(tmp_path, Path(seesaw.__file__).with_name("split_kv_triton.py"),
                       STAGE2_VARIANTS / "pdl_partition_first.patch")

    def ptx(path, pdl: bool) -> list[str]:
        run = subprocess.run([sys.executable, "-c", COMPILE_STAGE2, str(path), config, str(int(pdl))],
                             env={**os.environ, "TRITON_INTERPRET": "0"}, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-4000:]
        return code(run.stdout)

    lines = ptx(dst, True)
    waits = [i for i, ln in enumerate(lines) if "griddepcontrol.wait" in ln]
    loads = [i for i, ln in enumerate(lines) if "ld.global" in ln or "cp.async.ca" in ln or "cp.async.cg" in ln]
    assert len(waits) == 1 and loads[0] < waits[0] < loads[1], (waits, loads[:3])
    assert not any("griddepcontrol" in ln for ln in ptx(dst, False))
