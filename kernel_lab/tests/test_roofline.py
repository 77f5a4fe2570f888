"""kernel_lab.tools.roofline: its committed output, the floor of a batch by hand, and its --out errors."""

from __future__ import annotations

import pytest

from kernel_lab.tools import roofline as rf


def test_the_committed_markdown_is_the_tools_output():
    assert rf.OUT.read_text(encoding="utf-8") == rf.render(rf.OUT), (
        "kernel_lab/results/roofline_h200.md is stale: python -m kernel_lab.tools.roofline "
        "--out kernel_lab/results/roofline_h200.md")


def test_the_floor_is_the_read_or_the_math_whichever_is_longer():
    # 1000 tokens: 1.152 MB at 1 TB/s = 1.152 us; at 16 heads 2 * 16 * 1000 * 1088 flops at 1 PFLOP/s = 0.0348 us
    assert rf.floor_us([600, 400], 16, 1.0, 1000.0) == pytest.approx(1.152)
    # at 128 heads and 100 TFLOP/s: 2 * 128 * 1000 * 1088 / 1e14 s = 2.785 us, past the read
    assert rf.floor_us([1000], 128, 1.0, 100.0) == pytest.approx(2.78528)


def test_every_family_batch_that_flashmla_timed_has_a_row():
    table = rf.rows()
    assert len(table) == 128 and {(r.heads, r.batch) for r in table} == {(h, b) for h in (16, 32, 64, 128)
                                                                        for b in (16, 64, 128, 256)}
    assert all(0 < r.fm < 1.1 and 0 < r.best < 1.1 and r.needs == pytest.approx(1.05 * r.fm) for r in table)


def test_an_out_in_a_missing_folder_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        rf.main(["--out", str(tmp_path / "no" / "x.md")])
    assert "--out: expected a file in an existing folder" in capsys.readouterr().err
