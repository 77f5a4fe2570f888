"""``schedule.host_segments`` (the partition in plain Python, which the cost fit replays) equals ``schedule.segments``
(the Triton kernel, here in Triton's interpreter) row for row: every part's requests, tokens and flag, so every part's
pages and segments and every request's partials. Enumerated: every family of the family bench at B=16 and 64 on the
H200's parts at each head count, and edge batches on a few parts (the arithmetic is the same at any part count)."""

from functools import cache

import pytest

from kernel_lab.tools import cost_fit as cf
from kernel_lab.tools import family_bench as fb
from kernel_lab.tools import long_tail as lt
from mla_edu.kernels import schedule as sc
from mla_edu.util import cdiv

SMS = 132  # the H200's, as the family bench ran
PAGE = fb.PAGE


@cache
def kernel(lens: tuple[int, ...], page: int, max_pages: int, parts: int, pieces: int,
           overhead: int) -> list[sc.Segment]:
    """``schedule.segments`` in the interpreter (~8 ms a part) at ``FIXED_OVERHEAD_PAGES`` = ``overhead``. Its rows
    depend on the heads only through the piece cap (``max_pieces``, a compile-time parameter), so each cap runs
    once, at a head count that gives it."""
    heads = next(h for h in (16, 64, 128) if sc.max_pieces(len(lens), h, parts) == pieces)
    return sc.segments(list(lens), page, max_pages, parts, heads)


def check(lens: list[int], page: int, max_pages: int, parts: int, heads: int) -> list[sc.Segment]:
    """The host's rows, asserted equal to the kernel's."""
    want = kernel(tuple(lens), page, max_pages, parts, sc.max_pieces(len(lens), heads, parts),
                  sc.FIXED_OVERHEAD_PAGES)
    got = sc.host_segments(lens, page, max_pages, parts, heads)
    assert got == want, (lens, page, max_pages, parts, heads)
    return got


@pytest.mark.parametrize("batch", [16, 64])
@pytest.mark.parametrize("family", list(fb.FAMILIES))
def test_the_family_batches_at_every_head_count(family, batch):
    lens = fb.family_lengths(family, batch)
    max_pages = max(cdiv(x, PAGE) for x in lens)
    for heads in fb.HEADS:
        parts = sc.num_parts(heads, SMS, batch, max_pages)
        segs = check(lens, PAGE, max_pages, parts, heads)
        pieces = [sum(s.request == b for s in segs) for b in range(batch)]
        assert cf.ours(tuple(lens), heads, SMS).partials == sum(k for k in pieces if k > 1)


def _chunk(lens: list[int], page: int, max_pages: int, parts: int, heads: int) -> tuple[int, int]:
    """(the parts' share, the chunk with the piece cap) of a batch, on the host."""
    w = [min(cdiv(x, page), max_pages) + sc.FIXED_OVERHEAD_PAGES for x in lens if x > 0]
    return sc.balanced_chunk(w, parts, 0), sc.balanced_chunk(w, parts, sc.max_pieces(len(lens), heads, parts))


#: (lens, page, max_pages, parts, heads): each an edge the partition must get right.
EDGES = {
    "one token": ([1], 64, 1, 4, 16),
    "one request of one page": ([64], 64, 1, 1, 128),
    "one request cut, the cap binding": ([6400], 64, 100, 40, 16),
    "page boundaries": ([63, 64, 65, 127, 128, 129], 64, 3, 3, 16),
    "page of one token": ([40, 1, 39, 7], 1, 40, 3, 64),
    "empty requests": ([0, 64, 0, 65, 0], 64, 2, 2, 16),
    "all empty": ([0, 0, 0], 64, 1, 3, 16),
    "negative lengths": ([-5, 3, -1], 16, 20, 2, 16),
    "past the table": ([100, 1, 64, 65], 16, 4, 3, 16),
    "two requests, each filling a part": ([704, 704], 64, 11, 2, 16),
    "a cut request ending at a part's end": ([27 * 64, 11 * 64], 64, 27, 3, 16),
    "the cap at 64 heads, few partials, B >= 16": ([64] * 39 + [2000 * 64], 64, 2000, 40, 64),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_the_edge_batches(name):
    lens, page, max_pages, parts, heads = EDGES[name]
    segs = check(lens, page, max_pages, parts, heads)
    share, chunk = _chunk(lens, page, max_pages, parts, heads)
    n = [min(cdiv(max(x, 0), page), max_pages) for x in lens]
    assert [lt.pieces_per_request(n, chunk)[b] for b in range(len(lens))] == [
        sum(s.request == b for s in segs) for b in range(len(lens))]
    # each edge is what its name says
    if "cap binding" in name or "the cap at" in name:
        assert sc.max_pieces(len(lens), heads, parts) and chunk > share
    if "filling a part" in name:
        assert [(s.part, s.request, s.flag) for s in segs] == [(0, 0, sc.DIRECT), (1, 1, sc.DIRECT)]
        assert chunk == n[0] + sc.FIXED_OVERHEAD_PAGES
    if "part's end" in name:  # request 0's last page is part 1's last place on the line, request 1 fills part 2
        assert [(s.part, s.request) for s in segs] == [(0, 0), (1, 0), (2, 1)]
        assert n[0] + sc.FIXED_OVERHEAD_PAGES == 2 * chunk
    if "empty" in name or "negative" in name:
        assert {s.request for s in segs} == {b for b, k in enumerate(n) if k}
    if "past the table" in name:
        assert max(s.t_end for s in segs) == max_pages * page < max(lens)


@pytest.mark.parametrize("overhead", [2, 10])
@pytest.mark.parametrize("capped", [False, True])
def test_other_overheads_and_the_cap_everywhere(monkeypatch, overhead, capped):
    # test_results_prose's models charge 2-10 page-times a segment through schedule.part_timeline, with the piece
    # cap at every batch (its capped_everywhere): both sides read the same module constants at the call. At 16 heads
    # and B=16 the package has no cap (max_pieces 0), so the kernel runs both ways.
    monkeypatch.setattr(sc, "FIXED_OVERHEAD_PAGES", overhead)
    if capped:
        monkeypatch.setattr(sc, "max_pieces", lambda batch, heads, parts: sc.MAX_PIECES)
    assert sc.max_pieces(16, 16, 8) == (sc.MAX_PIECES if capped else 0)
    check(fb.family_lengths("bimodal", 16), PAGE, 512, 8, 16)
    check(*EDGES["a cut request ending at a part's end"])
    check(*EDGES["one request cut, the cap binding"])


@pytest.mark.parametrize("sizes, message", [((16, 4, 0, 16), "parts must be >= 1, got 0"),
                                            ((0, 4, 2, 16), "page_size must be >= 1, got 0"),
                                            ((16, 0, 2, 16), "max_pages must be >= 1, got 0"),
                                            ((16, 4, 2, 0), "heads must be >= 1, got 0")])
def test_bad_sizes_are_refused_as_the_kernels_are(sizes, message):
    for segments in (sc.host_segments, sc.segments):
        with pytest.raises(ValueError, match=message):
            segments([5, 40], *sizes)


def test_the_giant_batch_the_cost_fit_reads_where_the_cap_holds_at_b256():
    """Giant, h_q=64, B=256: few partials a request, so the piece cap holds (``schedule.max_pieces``) and the giant
    request is cut into its most pieces; the 255 short ones around it fill the parts."""
    lens = fb.family_lengths("giant", 256)
    max_pages = max(cdiv(x, PAGE) for x in lens)
    parts = sc.num_parts(64, SMS, 256, max_pages)
    assert sc.max_pieces(256, 64, parts) == sc.MAX_PIECES
    segs = check(lens, PAGE, max_pages, parts, 64)
    assert sum(s.request == lens.index(max(lens)) for s in segs) == 31
