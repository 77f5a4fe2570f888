"""``mla_edu.kernels.flashmla_schedule``: FlashMLA's ``get_mla_metadata`` walk, replayed on the host, on cases chosen
at its edges (a cut, a leftover equal to the overhead, the floor of two overheads, idle parts), and the numbers the
library's docstrings take from it."""

import re

import pytest

from mla_edu.kernels import flashmla_schedule as fs
from mla_edu.paths import REPO_ROOT
from mla_edu.util import cdiv

O = fs.FIXED_OVERHEAD_NUM_BLOCKS
LENGTHS = [[1], [0], [-5, 3], [640], [192, 192], [4096] * 64, [1024] * 128, [205, 2043, 28562, 1, 64, 4096],
           [37000, 5, 128, 129, 255], [65] * 7]


def test_a_request_is_cut_where_a_part_s_payload_ends():
    # 10 blocks over 2 parts: payload max(ceil(15 / 2) + 5, 10) = 13, so 8 blocks (8 + 5) in part 0, 2 in part 1
    assert fs.payload([640], 2) == 13
    assert fs.flashmla_parts([640], 2) == [[fs.Piece(0, 0, 0, 8)], [fs.Piece(1, 0, 8, 10)]]
    assert fs.flashmla_makespan([640], 64, 2) == 13


def test_a_leftover_equal_to_the_overhead_takes_no_piece():
    # two requests of 3 blocks over 2 parts (payload 13): the first whole (8) leaves exactly 5, the overhead, which
    # is not more than it (line 55: remain - overhead > 0): the second goes whole to part 1
    assert fs.flashmla_parts([192, 192], 2) == [[fs.Piece(0, 0, 0, 3)], [fs.Piece(1, 1, 0, 3)]]


def test_the_payload_has_a_floor_of_two_overheads():
    # one block over 66 parts: ceil(6 / 66) + 5 = 6, raised to 10 (line 34: max(..., 2 * overhead))
    assert fs.payload([64], 66) == 2 * O
    assert fs.pieces_per_request([64], 66) == [1]
    # without the floor a request of L blocks would go in pieces of one block each: with it, pieces of five
    assert fs.pieces_per_request([64 * 20], 66) == [4]


@pytest.mark.parametrize("lens", LENGTHS)
@pytest.mark.parametrize("parts", [1, 2, 3, 66, 132])
def test_every_block_once_in_order_and_no_part_past_its_payload(lens, parts):
    walk = fs.flashmla_parts(lens, parts)
    assert len(walk) == parts and all(pc.part == p for p, mine in enumerate(walk) for pc in mine)
    pieces = [pc for mine in walk for pc in mine]
    for b, x in enumerate(lens):
        mine = [(pc.first, pc.end) for pc in pieces if pc.request == b]
        blocks = cdiv(max(x, 0), 64)
        assert [t for f, e in mine for t in range(f, e)] == list(range(blocks))
    assert [pc.request for pc in pieces] == sorted(pc.request for pc in pieces)  # requests walked in order
    assert max(fs.part_loads(lens, parts)) <= fs.payload(lens, parts)


def test_at_128_heads_on_the_h200_a_part_takes_whole_requests_at_b64_and_b128():
    parts = fs.num_sm_parts(128, 132)
    assert (parts, fs.num_sm_parts(16, 132), fs.num_sm_parts(64, 132, h_k=2)) == (66, 132, 66)
    assert fs.num_sm_parts(256, 132, h_k=2) == 33  # ceil(128 heads a key head / 64) = 2 blocks: 132 // 2 // 2
    for batch, length, each in ((64, 1024, 1), (64, 4096, 1), (128, 1024, 2)):
        walk = fs.flashmla_parts([length] * batch, parts)
        assert [len(m) for m in walk] == [each] * (batch // each) + [0] * (parts - batch // each)
        assert set(fs.pieces_per_request([length] * batch, parts)) == {1}


def test_the_schedule_docstring_quotes_the_walk():
    # schedule.MAX_PIECES's comment: one request at h_q=128 on 132 SMs, L = 1K, 4K, 16K
    pieces = [fs.pieces_per_request([n], fs.num_sm_parts(128, 132))[0] for n in (1024, 4096, 16384)]
    source = re.sub(r"\s*#:\s*", " ", (REPO_ROOT / "mla_edu" / "kernels" / "schedule.py").read_text(encoding="utf-8"))
    assert f"into {pieces[0]}, {pieces[1]} and {pieces[2]} pieces" in source, pieces


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="parts must be an int >= 1, got 0"):
        fs.flashmla_parts([10], 0)
    with pytest.raises(ValueError, match="h_q must be an int >= 1, got 0"):
        fs.num_sm_parts(0, 132)
    with pytest.raises(ValueError, match="132 SMs give no part at h_q=200, h_k=200"):
        fs.num_sm_parts(200, 132, h_k=200)
    with pytest.raises(ValueError, match="h_q must be a multiple of h_k.*h_q=128, h_k=3"):
        fs.num_sm_parts(128, 132, h_k=3)
