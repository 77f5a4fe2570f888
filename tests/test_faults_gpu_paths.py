"""What the GPU paths do with inputs the host cannot read there, emulated on the CPU (an audit found each): positions
outside the rotary table, and shapes whose int32 index arithmetic in the Triton kernels would wrap. Each bound is
tested at its edge: the last value that fits passes, the next is refused by name."""

from __future__ import annotations

import pytest
import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET before anything imports triton)
from mla_edu import rope
from mla_edu.config import MLAConfig
from mla_edu.kernels import contract, schedule

INT32_MAX = 2**31 - 1
CFG = MLAConfig.tiny()


def test_positions_outside_the_table_give_nan_where_the_host_cannot_read_them(monkeypatch):
    # on a GPU (or in a capture) the range check cannot run: cos(-1) was cos(1), a rotation of another position
    limit = CFG.max_position_embeddings
    positions = torch.tensor([-2**40, -1, 0, 1, limit - 1, limit, 2**40])
    monkeypatch.setattr(rope, "values_readable", lambda *t: False)
    cos, sin = rope.cos_sin(CFG, positions)
    outside = [True, True, False, False, False, True, True]
    inside = ~torch.tensor(outside)
    assert cos.isnan().all(-1).tolist() == sin.isnan().all(-1).tolist() == outside
    assert cos[inside].isfinite().all()
    monkeypatch.undo()
    torch.testing.assert_close(cos[inside], rope.cos_sin(CFG, positions[inside])[0], rtol=0, atol=0)
    with pytest.raises(ValueError, match=rf"positions: expected each in \[0, {limit}\)"):
        rope.cos_sin(CFG, positions)  # on the host: refused, as before


def _plan(rows: int, width: int):
    """make_plan on ``rows`` requests whose table rows are ``width`` entries apart (one row of storage, expanded:
    the "size" policy reads row b at b * width), pages of one token, one split."""
    table = torch.zeros(1, width, dtype=torch.int32).expand(rows, width)
    q_nope, q_pe = torch.zeros(rows, 1, 8), torch.zeros(rows, 1, 4)
    return contract.make_plan(q_nope, q_pe, torch.zeros(1, 1, 12), torch.ones(rows, dtype=torch.int32), table,
                              torch.zeros(0, dtype=torch.uint8), 1, sm_count=1)


@pytest.mark.parametrize("width", [2**24, 2**24 - 1])
def test_a_table_whose_last_row_is_past_int32_indices_is_refused(width):
    # the kernels compute program id x row stride in int32: 2**31 // width rows fit, one more wrapped to row 0
    fits = 2**31 // width  # rows: the last entry read, (rows - 1) * width + width - 1, <= INT32_MAX
    assert _plan(fits, width).batch == fits
    with pytest.raises(ValueError, match=rf"page_table: request {fits}'s row starts at entry {fits * width} "
                                         rf"\({fits + 1} rows {width} entries apart\).* past int32 indices"):
        _plan(fits + 1, width)


def test_the_balanced_partition_refuses_a_line_past_int32():
    # the partition sums each request's page-times over the batch in int32 (partition.batch_plan)
    parts, max_pages, over = 132, 1000, schedule.FIXED_OVERHEAD_PAGES
    line = lambda b: b * (max_pages + over) + over + parts  # noqa: E731
    batch = (INT32_MAX - over - parts) // (max_pages + over)
    assert line(batch) <= INT32_MAX < line(batch + 1)
    schedule.check_line_fits(batch, max_pages, parts, 64)
    with pytest.raises(ValueError, match=rf"B={batch + 1} requests of up to {max_pages} pages make a line of "
                                         rf"{line(batch + 1)} page-times, past the int32 sums"):
        schedule.check_line_fits(batch + 1, max_pages, parts, 64)


@pytest.mark.parametrize("page_size", [3, 64])
def test_the_balanced_partition_refuses_rows_whose_rounded_lengths_pass_int32(page_size):
    # a length clamped to the row's tokens, then rounded up to whole pages: (max_pages + 1) * page_size - 1
    widest = (INT32_MAX + 1) // page_size - 1
    assert (widest + 1) * page_size - 1 <= INT32_MAX < (widest + 2) * page_size - 1
    schedule.check_line_fits(1, widest, 1, page_size)
    with pytest.raises(ValueError, match=rf"rows of {widest + 1} pages of {page_size} tokens, rounded up to whole "
                                         r"pages, are past int32 positions"):
        schedule.check_line_fits(1, widest + 1, 1, page_size)


def test_partials_past_int32_indices_are_refused():
    contract.check_partials_fit(INT32_MAX + 1, "edge")  # the last index, INT32_MAX, fits
    with pytest.raises(ValueError, match=r"workspace: 2147483649 float32 partial outputs \(B=1\) reach past int32"):
        contract.check_partials_fit(INT32_MAX + 2, "B=1")


def test_a_serving_batch_whose_partials_fit_is_not_refused():
    # the kernels index o_acc [B, H, S, D_latent], not the larger workspace of sgl-kernel's formula at small h_q:
    # B=512 at h_q=16 with 256 splits fits; at h_q=128, 64 splits end exactly at INT32_MAX and 65 pass it
    for heads, splits in ((16, 256), (128, 64)):
        contract.check_partials_fit(512 * heads * splits * 512, "serving")
    with pytest.raises(ValueError, match="reach past int32"):
        contract.check_partials_fit(512 * 128 * 65 * 512, "B=512, H=128, 65 splits")
