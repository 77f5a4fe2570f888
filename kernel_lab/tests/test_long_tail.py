"""kernel_lab.tools.long_tail: its committed output, its pieces against the kernels' walk, and the piece-cap patch
(kernel_lab/results/partition_variants/piece_cap.patch) applied to a copy of the package: the cover of every page, the
host chunk the kernels', and the output against float64 (Triton's interpreter on CPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kernel_lab.tools import family_bench as fb
from kernel_lab.tools import long_tail as lt
from mla_edu.kernels import flashmla_schedule as fs
from mla_edu.kernels import schedule as sc
from mla_edu.util import cdiv


@pytest.fixture(scope="module")
def table():
    return lt.rows()


def test_the_committed_markdown_is_the_tools_output():
    assert lt.OUT.read_text(encoding="utf-8") == lt.render(out=lt.OUT), (
        "kernel_lab/results/long_tail_h200.md is stale: python -m kernel_lab.tools.long_tail "
        "--out kernel_lab/results/long_tail_h200.md")


def test_the_patch_applies_cleanly_to_the_current_files(tmp_path):
    for name in lt.PATCHED_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((lt.REPO_ROOT / name).read_bytes())
    check = subprocess.run(["git", "apply", "--check", str(lt.PATCH)], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, f"{lt.PATCH.name} no longer applies to {lt.PATCHED_FILES}: {check.stderr}"


@pytest.mark.parametrize("batch, heads", [(16, 16), (64, 128), (256, 64)])
def test_pieces_of_the_longest_request_are_the_kernels_walk(table, batch, heads):
    lens = fb.family_lengths("giant", batch)
    row = next(r for r in table if (r.family, r.heads, r.batch) == ("giant", heads, batch))
    segs = sc.segments(lens, lt.PAGE, max(cdiv(x, lt.PAGE) for x in lens), row.parts)
    assert sum(s.request == batch // 2 for s in segs) == row.pieces
    assert row.fm_pieces == fs.pieces_per_request(lens, row.fm_parts)[batch // 2]


def test_the_piece_cap_sets_the_giant_batches_and_the_patch_closes_it(table):
    giant = [r for r in table if r.family == "giant"]
    differ = [r for r in giant if r.differ]
    assert len(differ) == 11 and {r.ours for r in differ} == {39}  # the chunk ceil(1029 / 31) and one overhead
    assert all(r.pieces < sc.MAX_PIECES < r.fm_pieces for r in differ)
    assert all(r.patched == r.fm for r in differ)  # the patch models each at FlashMLA's makespan
    assert all(r.patched == r.ours for r in table if r.batch < lt.variant_cap_batch())  # B=1 and 4 untouched
    assert all(r.patched <= r.ours for r in table)


#: Run in a copy of the package with the patch applied (Triton's interpreter on CPU): a giant request among short
#: ones at B >= 16 is cut as the share falls, every token covered once, the host chunk the kernels'; at B=1 the cap
#: stays; and a ragged batch of 16 with a giant request against float64, every unused cache slot NaN.
PATCHED_CHECK = """
import torch
from mla_edu.kernels import flashmla_schedule as fs, mla_decode, schedule as sc
from mla_edu.kernels.cases import random_decode_case
from mla_edu.util import cdiv

for batch, parts in ((16, 132), (16, 66), (64, 132), (1, 132)):
    lens = [512] * batch
    lens[batch // 2] = 65536
    n = [cdiv(x, 64) for x in lens]
    w = [k + sc.FIXED_OVERHEAD_PAGES for k in n]
    chunk = sc.balanced_chunk(w, parts, batch)
    segs = sc.segments(lens, 64, max(n), parts)
    assert max(s.part for s in segs) == (sum(w) - 1) // chunk, (batch, parts)
    for p in range(parts):
        mine = [cdiv(s.t_end - s.t_start, 64) for s in segs if s.part == p]
        assert sum(mine) + len(mine) * sc.FIXED_OVERHEAD_PAGES <= chunk + sc.FIXED_OVERHEAD_PAGES
    for b, x in enumerate(lens):
        mine = [s for s in segs if s.request == b]
        assert [t for s in mine for t in range(s.t_start, s.t_end)] == list(range(x)), (batch, parts, b)
        assert all(s.flag == (sc.DIRECT if len(mine) == 1 else sc.PARTIAL) for s in mine)
    pieces = sum(s.request == batch // 2 for s in segs)
    if batch >= sc.PIECE_CAP_BATCH:
        assert pieces > sc.MAX_PIECES and abs(pieces - fs.pieces_per_request(lens, parts)[batch // 2]) <= 1
    else:
        assert pieces < sc.MAX_PIECES

lens = [40] * 15 + [4000]
lens[5] = 0
case = random_decode_case(21, heads=4, page_size=16, lens=lens, dtype=torch.float32, device="cpu", d_latent=32,
                          d_rope=16)
b, h, dl = case.q_nope.shape
parts = sc.num_parts(h, 64, b, case.page_table.size(1))
assert sum(s.request == 15 for s in sc.segments(lens, 16, case.page_table.size(1), parts)) > sc.MAX_PIECES
ws = torch.full((sc.workspace_bytes(b, h, dl, parts),), 0xFF, dtype=torch.uint8)
out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, -1,
                 impl="triton", schedule="balanced", sm_count=64)
ref = case.dense_f64()
assert torch.isfinite(out).all()
assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5
print("ok")
"""


def test_the_patched_partition_covers_every_page_and_matches_float64(tmp_path):
    pytest.importorskip("triton", reason="the partition runs as a Triton kernel (the interpreter on CPU)")
    root = lt.patched_copy(tmp_path, package=True)
    run = subprocess.run([sys.executable, "-c", PATCHED_CHECK], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root), "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-4000:]


def test_the_patch_takes_in_a_folder_inside_a_git_repository(tmp_path):
    # git apply, run in a subfolder of a repository, skips every path outside it without a word
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    copy = lt.patched_copy(tmp_path / "inside")
    assert "PIECE_CAP_BATCH" in (copy / lt.PATCHED_FILES[0]).read_text()
