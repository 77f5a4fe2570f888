"""kernel_lab.tools.long_tail: its committed output, its pieces against the kernels' walk, the capped and landed
partitions against FlashMLA's, the A/B's groups, and apply_patch in a folder inside a git repository. The landed
partition's cover of every page and its output against float64 are tests/test_kernels_schedule.py's."""

from __future__ import annotations

import difflib
import subprocess

import pytest

from kernel_lab.tools import family_bench as fb
from kernel_lab.tools import long_tail as lt
from mla_edu.files import read_json
from mla_edu.kernels import flashmla_schedule as fs
from mla_edu.kernels import schedule as sc
from mla_edu.kernels.workspace import HALF_BLOCK_BATCH
from mla_edu.util import cdiv


@pytest.fixture(scope="module")
def table():
    return lt.rows()


def test_the_committed_markdown_is_the_tools_output():
    assert lt.OUT.read_text(encoding="utf-8") == lt.render(out=lt.OUT), (
        "kernel_lab/results/long_tail_h200.md is stale: python -m kernel_lab.tools.long_tail "
        "--out kernel_lab/results/long_tail_h200.md")


@pytest.mark.parametrize("batch, heads", [(16, 16), (64, 64), (64, 128), (256, 64), (256, 16)])
def test_pieces_of_the_longest_request_are_the_kernels_walk(table, batch, heads):
    lens = fb.family_lengths("giant", batch)
    row = next(r for r in table if (r.family, r.heads, r.batch) == ("giant", heads, batch))
    width = max(cdiv(x, lt.PAGE) for x in lens)
    assert row.parts == sc.num_parts(heads, 132, batch, width)
    segs = sc.segments(lens, lt.PAGE, width, row.parts, heads)
    assert sum(s.request == batch // 2 for s in segs) == row.now_pieces
    assert row.fm_pieces == fs.pieces_per_request(lens, row.fm_parts)[batch // 2]


def test_capped_is_the_package_where_the_cap_holds(table):
    for r in table:
        if r.cap_kept:
            assert r.cut == r.capped
        else:
            assert r.cut <= r.capped
        if r.half:  # two 16-head programs a part on half the parts, in the rule's page-times
            assert r.heads == 32 and r.batch <= HALF_BLOCK_BATCH and r.parts == 132
        else:
            assert r.now == r.cut  # so 'now' differs from 'capped' by the cap or by the 16-head programs
            if r.cap_kept:
                assert r.now_pieces == r.pieces
    assert all(r.cut == r.capped for r in table if r.batch < sc.PIECE_CAP_BATCH)  # B=1 and 4 untouched
    assert {(r.family, r.batch) for r in table if r.half} >= {(f, 16) for f in fb.FAMILIES}


def test_the_16_head_programs_model_the_chunk_of_half_the_parts(table):
    rows = {(r.family, r.heads, r.batch): r for r in table}
    for b in read_json(str(lt.FAMILY_BENCH), "--family-bench")["family"]:
        r = rows.get((b["family"], b["heads"], b["batch"]))
        if r is None or not r.half:
            continue
        w = [cdiv(x, lt.PAGE) + sc.FIXED_OVERHEAD_PAGES for x in b["lens"] if x > 0]
        chunk = sc.balanced_chunk(w, r.parts // 2, sc.max_pieces(r.batch, r.heads, r.parts // 2))
        assert r.now == pytest.approx(sc.HALF_BLOCK_PAGE_COST * (chunk + sc.FIXED_OVERHEAD_PAGES))
        assert r.now_pieces == lt.pieces_of_longest(b["lens"], chunk)


def test_the_piece_cap_set_the_giant_batches_and_now_holds_only_where_stage2_merges_one_at_a_time(table):
    giant = [r for r in table if r.family == "giant"]
    differ = [r for r in giant if r.differ]
    assert len(differ) == 11 and {r.capped for r in differ} == {39}  # the chunk ceil(1029 / 31) and one overhead
    assert all(r.pieces < sc.MAX_PIECES < r.fm_pieces for r in differ)
    # as landed (e79b3dc): kept at 64 heads or more with at most 4 partials a request on average
    assert {(r.heads, r.batch) for r in differ if r.kept_as_landed} == {(64, 64), (64, 128), (128, 64)}
    # now: kept at 64 heads or more where few_partials holds (at most 2), at none of these
    assert all(r.cap_kept == (r.heads >= 64 and sc.few_partials(r.batch, r.parts, r.heads)) for r in differ)
    assert not any(r.cap_kept for r in differ)
    assert all(r.now == r.fm for r in differ if not r.half)  # FlashMLA's makespan
    assert {(r.heads, r.batch) for r in differ if r.half} == {(32, 16)}


def test_the_ab_groups_and_the_landed_rule():
    ab = lt.ab_numbers()
    assert (ab["changed"]["n"], ab["control"]["n"]) == (21, 27)
    assert ab["kept"]["n"] + ab["lifted"]["n"] == ab["changed"]["n"]
    assert (ab["loss"]["family"], ab["loss"]["heads"], ab["loss"]["batch"]) == ("giant", 64, 64)
    assert ab["loss"]["kept"] and ab["loss"]["x"] < 0.9
    assert {(r["heads"], r["batch"]) for r in ab["kept"]["rows"]} == {(64, 64), (64, 128), (64, 256), (128, 64)}
    assert ab["giant"]["lo"] > 1.15 and ab["giant"]["n"] == 8
    assert ab["landed"] > ab["changed"]["geomean"]


def test_the_patch_takes_in_a_folder_inside_a_git_repository(tmp_path):
    # git apply, run in a subfolder of a repository, skips every path outside it without a word
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    name = lt.PATCHED_FILES[0]
    old = (lt.REPO_ROOT / name).read_text(encoding="utf-8").splitlines(keepends=True)
    patch = tmp_path / "small.patch"  # a line added at the end of schedule.py
    patch.write_text("".join(difflib.unified_diff(old, [*old, "# patched\n"], f"a/{name}", f"b/{name}")))
    copy = lt.patched_copy(tmp_path / "inside", patch)
    assert (copy / name).read_text(encoding="utf-8").endswith("\n# patched\n")
    assert lt.apply_patch(copy, patch).returncode  # applied once: a second time fails


@pytest.mark.parametrize("tool", ["long_tail", "choice_fit"])
@pytest.mark.parametrize("argv, says", [
    (["--out", "/no/such/folder/x.md"], "--out: expected a file in an existing folder"),
    (["--family-bench", "/no/such.json"], "--family-bench: expected an existing file"),
])
def test_the_lab_clis_refuse_bad_paths_with_what_was_expected(tool, argv, says, capsys):
    import importlib

    with pytest.raises(SystemExit):
        importlib.import_module(f"kernel_lab.tools.{tool}").main(argv)
    assert says in capsys.readouterr().err


def test_the_changes_read_right_with_nothing_changed(table):
    import dataclasses

    same = [dataclasses.replace(r, now=r.capped, cut=r.capped, half=False, now_pieces=r.pieces) for r in table]
    text = " ".join(lt.family_bench_changes(same))
    assert "differs from 'capped' at 0 of 142" in text and "changes none of them" in text
    assert "None changes by the 16-head programs" in text and "0 now model at FlashMLA's makespan" in text
    assert "()" not in text and "B >= " not in text and "The cap holds at none of them" in text
    text = " ".join(lt.family_bench_changes(table))
    assert "the package's 'now' differs from 'capped' at 27 of 142" in text and "lifts the cap at 11" in text
    assert "runs two 16-head programs a part on half the parts, where the bench ran one 32-head program a part: 11 " \
        "models" in text and "The rule as landed at e79b3dc kept the cap at 3 of these" in text


@pytest.mark.parametrize("argv, says", [
    (["--uniform-batches", "0,4"], "--uniform-batches, --uniform-lengths: expected ints >= 1, got [0]"),
    (["--uniform-lengths", "1024,-1"], "--uniform-batches, --uniform-lengths: expected ints >= 1, got [-1]"),
    (["--uniform-lengths", "1k"], "expected comma-separated ints, got '1k'"),
])
def test_the_family_bench_refuses_a_bad_uniform_grid_before_it_needs_a_gpu(argv, says, capsys):
    with pytest.raises(SystemExit):
        fb.main(argv)
    assert says in capsys.readouterr().err
