"""``mla_edu.kernels.sm90``: stage 1 compiled for sm_90a on this machine, and the facts notebook 09 and
``docs/kernel_essay.md`` state about it (the same with Triton 3.6.0, 3.7.1 and 3.9.0). The kernel lab's variant
patches are compiled by ``kernel_lab/tests/test_variants.py``."""

import pytest

pytestmark = pytest.mark.triton  # its kernels are Triton's (tests/conftest.py: skipped without Triton)
pytest.importorskip("triton", reason="needs Triton, which is not installed here (Linux wheels only)")

from mla_edu.kernels import sm90
from mla_edu.kernels import split_kv_seesaw as seesaw

@pytest.fixture(scope="module")
def reports():
    return sm90.compile_stage1()


def test_the_tl_kernel_computes_every_score_twice(reports):
    # Triton lays the score dot out with every warp along M (it feeds the P V dot); M is 64 heads, so each
    # warpgroup computes all 64 tokens' scores: 2 x 36 m64n32k16 per tile, then 4 m64n256k16 for P V
    tl = reports["tl"]
    assert tl["mma_layouts"] == ["warps [4, 2], instr [16, 256, 16]", "warps [8, 1], instr [16, 32, 16]"]
    assert tl["wgmma"] == {"m64n32k16": 2 * 576 // 16, "m64n256k16": 64 // 16}


@pytest.mark.parametrize("kind", ["cp.async", "tma"])
def test_the_gluon_kernel_computes_each_score_once(reports, kind):
    r = reports[kind]
    assert r["mma_layouts"] == ["warps [4, 2], instr [16, 256, 16]", "warps [4, 2], instr [16, 32, 16]"]
    assert r["wgmma"] == {"m64n32k16": 576 // 16, "m64n256k16": 64 // 16}


@pytest.mark.parametrize("kind", ["cp.async", "tma"])
def test_the_gluon_kernel_fits_an_sm(reports, kind):
    # q (64 KB + 8 KB) + 2 page tiles (2 x 72 KB) + P (8 KB) + the compiler's reduction scratch (+ mbarriers)
    r = reports[kind]
    assert 224 * 1024 < r["shared_bytes"] <= sm90.MAX_SHARED
    assert r["registers"] <= 255 and r["spill_bytes"] == 0 and not r["wgmma_serialized"]


def test_the_tma_kernel_issues_each_tile_from_two_copy_instructions(reports):
    # one for the 512 latent columns (Triton splits the box into 8 of 64 columns, the 128-byte swizzle's
    # width, one per warp), one for the 64 rope columns; once in the prologue, once in the loop
    assert reports["tma"]["ptx"].count("cp.async.bulk.tensor.2d") == 2 * 2
    assert "cp.async.bulk.tensor" not in reports["cp.async"]["ptx"]


@pytest.mark.parametrize("heads", [128, 16])
def test_the_persistent_tma_kernels_do_not_spill(heads):
    # the balanced schedule's persistent variants (kernels.schedule): the walk over a part's requests carries
    # scalars only: with the batch plan's vectors kept live across the tile loop, registers spill
    r = sm90.compile_stage1(["tma"], heads=heads, scheduled=True)["tma"]
    assert r["spill_bytes"] == 0 and not r["wgmma_serialized"]
    assert r["wgmma"] == ({"m64n32k16": 36, "m64n256k16": 4} if heads == 128 else {"m64n16k16": 68})


SEESAW_VARIANTS = [(False, False), (True, False), (False, True)]  # (scheduled, final): partials, persistent, one split


@pytest.fixture(scope="module")
def seesaw_reports():
    return {v: sm90.compile_stage1(["seesaw"], scheduled=v[0], final=v[1])["seesaw"] for v in SEESAW_VARIANTS}


@pytest.mark.parametrize("scheduled, final", SEESAW_VARIANTS)
def test_the_seesaw_kernel_scores_a_whole_tile_in_each_warpgroup(seesaw_reports, scheduled, final):
    # split_kv_seesaw: warpgroup 0 scores tile 0 of a pair, warpgroup 1 tile 1, n = 64 (36 m64n64k16 each: 32 for
    # the latent columns, 4 for the rope ones); each multiplies its own P and the other's by its 256 output
    # columns (2 x 4 m64n256k16). Two partitions of 4 warps: layouts and counts are per warpgroup
    r = seesaw_reports[(scheduled, final)]
    assert r["mma_layouts"] == ["warps [4, 1], instr [16, 256, 16]", "warps [4, 1], instr [16, 64, 16]"]
    assert r["wgmma"] == {"m64n64k16": 576 // 16, "m64n256k16": 2 * 64 // 16}
    # q_nope (64 KB) + 2 page tiles (2 x 72 KB) + P0, P1 (2 x 8 KB) + statistics and mbarriers; q_pe in registers
    assert 224 * 1024 < r["shared_bytes"] <= sm90.MAX_SHARED
    # its register budget, and no spill: with each slot's role fixed the compiler hoisted the pair loop's wgmma
    # descriptors out of it and spilled them (536 bytes, 2,340 in the persistent variant) until the loop took its
    # shared-memory operands at an index it cannot see is 0 (split_kv_seesaw._opaque_zero)
    assert r["registers"] <= seesaw.REGISTERS.value and r["spill_bytes"] == 0
    # and ptxas kept its wgmma asynchronous: short of registers it serializes them, every product of the kernel waited
    # for alone, with no spill reported (kernel_lab/tests/test_variants.py)
    assert not r["wgmma_serialized"]
    # tile halves by TMA, each from the warpgroup that reloads it: the left halves (warpgroup 0) in one copy, the
    # right halves and rope columns (warpgroup 1) in two; at the segment's start and in the loop, for each slot.
    # Then q_nope in two blocks of 256 columns at the segment's start and, in the persistent variant, the next
    # segment's at the end of this one
    assert r["ptx"].count("cp.async.bulk.tensor.2d.shared") == 2 * 2 * (1 + 2) + 2 * (1 + scheduled)
    # final output rows by TMA store, one [64, 256] block per warpgroup: with one split, and in the persistent
    # variant at a part's last request; never a split's float32 partials
    assert r["ptx"].count("cp.async.bulk.tensor.2d.global") == 2 * (scheduled or final)
    assert r["ptx"].count("mbarrier.init") == seesaw.NUM_BARRIERS.value


def exponentials_under_products(ptx: str) -> list[int]:
    """For each P V product (a group of m64n256k16 wgmmas, then its commit) in ``ptx``, in order: the ``ex2``
    instructions between its commit and the next ``wgmma.wait_group``, the work a warpgroup does while the tensor
    cores run that product."""
    counts, open_, product = [], False, False
    for line in ptx.splitlines():
        if "wgmma.mma_async" in line:
            product = "m64n256k16" in line
        elif "wgmma.commit_group" in line and product:
            counts.append(0)
            open_ = True
        elif "wgmma.wait_group" in line:
            open_ = False
        elif open_ and "ex2.approx" in line:
            counts[-1] += 1
    return counts


@pytest.mark.parametrize("scheduled, final", SEESAW_VARIANTS)
def test_the_seesaw_takes_p1s_exponentials_under_p0_v0_right(seesaw_reports, scheduled, final):
    # warpgroup 1 issues P0 V0_right, then computes P1 = 2^(S1 - m1) while the tensor cores
    # run it: 64 x 64 exponentials over 128 threads, 32 ex2 each, all between that product's commit and its wait.
    # Each warpgroup's other products have none under them
    counts = exponentials_under_products(seesaw_reports[(scheduled, final)]["ptx"])
    assert len(counts) == 4 and sorted(counts) == [0, 0, 0, seesaw.BLOCK_H * seesaw.BLOCK_N // (32 * seesaw.WARPS)]


@pytest.mark.parametrize("scheduled, final", SEESAW_VARIANTS)
def test_the_seesaw_skips_each_rescale_where_no_max_moved(seesaw_reports, scheduled, final):
    # each warpgroup rescales its [64, 256] float32 output twice a pair, 64 x 256 / 128 = 128
    # multiplies a thread each; each sits behind a branch on one warp reduction of "some row's scale is not 1"
    # (split_kv_seesaw._rescaled), taken only where a max moved past RESCALE_THRESHOLD. The persistent variant
    # reduces integers elsewhere too (the partition), without such a block
    assert [n for n in sm90.skipped_multiplies(seesaw_reports[(scheduled, final)]["ptx"]) if n] == [
        seesaw.BLOCK_H * 256 // (32 * seesaw.WARPS)] * 4


@pytest.mark.parametrize("scheduled, final", SEESAW_VARIANTS)
def test_the_seesaw_scales_each_score_inside_its_exponential(seesaw_reports, scheduled, final):
    # P = 2^(S qk_scale - m), one fused multiply-add an entry, S unscaled from the wgmma (split_kv_seesaw._scores);
    # each warpgroup exponentiates one 64 x 64 tile a pair, 32 entries a thread
    assert sm90.exponentials_of_an_fma(seesaw_reports[(scheduled, final)]["ptx"]) == 2 * (
        seesaw.BLOCK_H * seesaw.BLOCK_N // (32 * seesaw.WARPS))


@pytest.fixture(scope="module")
def swapped():
    return sm90.compile_stage1(["cp.async", "tma"], heads=16)


@pytest.mark.parametrize("kind", ["cp.async", "tma"])
def test_the_swapped_kernel_puts_heads_on_n(swapped, kind):
    # 16 heads a program, one warpgroup: scores S^T = K q^T as 576 / 16 = 36 m64n16k16 (64 tokens x 16 heads),
    # output O^T = V^T P^T as 512 / 64 = 8 row blocks x 64 / 16 = 4 k-steps = 32 m64n16k16; no M padding
    r = swapped[kind]
    assert r["mma_layouts"] == ["warps [4, 1], instr [16, 16, 16]"]
    assert r["wgmma"] == {"m64n16k16": 576 // 16 + (512 // 64) * (64 // 16)}
    # q (18 KB) + 2 page tiles (144 KB) + P (2 KB) + scratch: one program an SM, as the split rule assumes
    assert sm90.MAX_SHARED // 2 < r["shared_bytes"] <= sm90.MAX_SHARED
    assert r["registers"] <= 255 and r["spill_bytes"] == 0 and not r["wgmma_serialized"]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match=r"kinds must be a non-empty selection of \('tl', 'cp.async', 'tma', "
                                         r"'seesaw'\), got \('wgmma',\)"):
        sm90.compile_stage1(["wgmma"])
    with pytest.raises(ValueError, match="dtype must be 'bf16' or 'fp16', got 'fp32'"):
        sm90.compile_stage1(dtype="fp32")
    with pytest.raises(ValueError, match=r"heads must be one of \(16, 32, 64, 128\), got 20"):
        sm90.compile_stage1(heads=20)


def test_the_command_line_as_a_user_runs_it(tmp_path):
    # on a CPU machine mla_edu turns Triton's interpreter on; the command compiles in a child process without it
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-m", "mla_edu.kernels.sm90", "tl", "--md", str(tmp_path / "t.md")],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["tl"]["wgmma"] == {"m64n32k16": 72, "m64n256k16": 4}
    table = (tmp_path / "t.md").read_text()
    assert "| tl | warps [4, 2], instr [16, 256, 16]; warps [8, 1], instr [16, 32, 16] |" in table
