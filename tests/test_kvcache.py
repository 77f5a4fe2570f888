import pytest
import torch

import mla_edu  # noqa: F401
from mla_edu.kvcache import (LatentKVCache, PagedAllocator, PoolExhausted, ReqToTokenPool, fill_page_table,
                             slots_of)
from op_log import OpLog


def test_req_to_token_pool_alloc_free_reuse():
    pool = ReqToTokenPool(4, 32)
    assert pool.req_to_token.shape == (4, 32) and pool.req_to_token.dtype == torch.int32
    a = pool.alloc(3)
    assert a == [0, 1, 2] and pool.available() == 1
    pool.free([1])
    assert pool.available() == 2
    assert pool.alloc(2) == [1, 3]
    with pytest.raises(PoolExhausted, match="asked for 1 request rows, only 0"):
        pool.alloc(1)
    pool.free(0)
    with pytest.raises(ValueError, match="already free"):
        pool.free(0)
    with pytest.raises(ValueError, match=r"in \[0, 4\)"):
        pool.free(7)


def test_paged_allocator_reuses_freed_pages_last_in_first_out():
    # the docstring's LIFO: freed pages go to the front of the free list, last freed first, while other pages
    # are still free (an exhausted pool cannot tell front from back)
    alloc = PagedAllocator(8, 16)
    p = alloc.alloc_pages(3)
    assert p.tolist() == [1, 2, 3] and alloc.available_pages() == 4
    alloc.free_pages(p)
    assert alloc.alloc_pages(3).tolist() == list(reversed(p.tolist()))
    assert alloc.alloc_pages(1).tolist() == [4]  # then the pages never handed out, in order


def test_paged_allocator_reserves_page0_and_reuses():
    alloc = PagedAllocator(6, 16)
    assert alloc.available_pages() == 5
    p = alloc.alloc_pages(5)
    assert p.dtype == torch.int64 and 0 not in p.tolist() and sorted(p.tolist()) == [1, 2, 3, 4, 5]
    with pytest.raises(PoolExhausted, match="asked for 1 pages"):
        alloc.alloc_pages(1)
    alloc.free_pages([4, 2])
    assert alloc.alloc_pages(2).tolist() == [2, 4]  # freed pages come back first
    with pytest.raises(ValueError, match="reserved padding page"):
        alloc.free_pages([0])
    with pytest.raises(ValueError, match="double free"):
        alloc.free_pages(torch.tensor([2, 2]))
    alloc.free_pages([2])
    with pytest.raises(ValueError, match="not allocated"):
        alloc.free_pages([2])
    with pytest.raises(ValueError, match="power of two"):
        PagedAllocator(8, 12)
    with pytest.raises(TypeError, match="num_pages must be an int"):
        PagedAllocator(8.0, 16)


@pytest.mark.parametrize("page", [1, 16, 64, 128])
def test_slots_for_grows_request_page_by_page(page):
    alloc = PagedAllocator(64, page, seed=page)
    pool = ReqToTokenPool(2, 4 * 128)
    row = pool.req_to_token[pool.alloc(1)[0]]
    lens = [0, 3, 3 + page, 3 + page + 1, 2 * page + 5, 2 * page + 6]
    seen = []
    for old, new in zip(lens[:-1], lens[1:]):
        loc = alloc.slots_for(row, old, new)
        assert loc.shape == (new - old,)
        seen.append(loc)
    slots = torch.cat(seen)
    n = lens[-1]
    assert torch.equal(row[:n].long(), slots)
    assert len(set(slots.tolist())) == n  # no slot handed out twice
    pages = slots // page
    offs = slots % page
    assert torch.equal(offs, torch.arange(n) % page)  # position p sits at offset p % PAGE
    # each logical page maps to exactly one physical page
    for j in range(-(-n // page)):
        assert len(set(pages[j * page : (j + 1) * page].tolist())) == 1
    owned = alloc.pages_of(row, n)
    assert owned.numel() == -(-n // page) and 0 not in owned.tolist()
    before = alloc.available_pages()
    alloc.free_pages(owned)
    assert alloc.available_pages() == before + owned.numel()


@pytest.mark.parametrize("page", [1, 3, 4])
def test_slots_of_every_window_of_a_three_page_request(page):
    """Every ``[start, end)`` inside three pages, each page boundary among them: position p sits on the request's
    page p // page, at offset p % page; one page short is refused."""
    pages = [7, 2, 5]
    for start in range(3 * page + 1):
        for end in range(start, 3 * page + 1):
            want = [pages[p // page] * page + p % page for p in range(start, end)]
            assert slots_of(pages, start, end, page).tolist() == want
    with pytest.raises(ValueError, match="at least ceil"):
        slots_of(pages[:2], 0, 2 * page + 1, page)
    with pytest.raises(ValueError, match="end must be >= 2"):
        slots_of(pages, 2, 1, page)
    with pytest.raises(ValueError, match="1-D"):
        slots_of(torch.tensor([pages]), 0, 1, page)
    with pytest.raises(TypeError, match="must hold ints"):
        slots_of([7, 2.9, 5], 0, 1, page)  # would have become page 2
    with pytest.raises(ValueError, match="page ids >= 1"):
        slots_of([7, 0, 5], 0, 1, page)  # the padding page
    with pytest.raises(ValueError, match="page ids >= 1"):
        slots_of([-1], 0, 1, page)


def test_slots_for_errors():
    alloc = PagedAllocator(4, 16)
    row = torch.zeros(32, dtype=torch.int32)
    with pytest.raises(ValueError, match="new_len must be >= 5"):
        alloc.slots_for(row, 5, 3)
    with pytest.raises(ValueError, match="max_context_len=32"):
        alloc.slots_for(row, 0, 40)
    with pytest.raises(TypeError, match="1-D tensor"):
        alloc.slots_for(torch.zeros(2, 3), 0, 1)


def test_latent_cache_set_kv_roundtrip():
    cache = LatentKVCache(2, 5, 4, kv_lora_rank=8, qk_rope_head_dim=4)
    assert cache.kv_buffer[1].shape == (5, 4, 12)
    loc = torch.tensor([3, 17, 4])
    c, k = torch.randn(3, 8), torch.randn(3, 4)
    cache.set_kv(1, loc, c, k)
    rows = cache.kv_buffer[1].view(-1, 12)
    assert torch.equal(rows[loc, :8], c) and torch.equal(rows[loc, 8:], k)
    assert torch.equal(cache.c_kv(1)[17], c[1]) and torch.equal(cache.k_pe(1)[4], k[2])
    assert torch.allclose(rows.abs().sum(), c.abs().sum() + k.abs().sum())  # nothing else written
    assert cache.kv_buffer[0].abs().sum() == 0
    assert LatentKVCache(61, 1, 1, dtype=torch.bfloat16).bytes_per_token() == 61 * 1152
    with pytest.raises(ValueError, match=r"c_kv must have shape \[3, 8\]"):
        cache.set_kv(0, loc, torch.randn(3, 9), k)
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\)"):
        cache.set_kv(2, loc, c, k)
    with pytest.raises(TypeError, match="loc must be a 1-D integer tensor"):
        cache.set_kv(0, loc.float(), c, k)


def _dense_fill(req_to_token, req_pool_indices, seq_lens, table, page):
    out = table.clone()
    for row, (req, n) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        for p in range(min(-(-n // page), table.size(1))):
            out[row, p] = req_to_token[req, p * page] // page
    return out


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("page", [1, 16, 64, 128])
def test_fill_page_table_matches_sglang_semantics(impl, page):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(page)
    ctx = 4 * 128
    pool_size, bs = 6, 4
    num_pages = (pool_size * ctx) // page + 1
    r2t = (torch.randperm(num_pages * page, generator=g)[: pool_size * ctx].view(pool_size, ctx)).to(torch.int32)
    # make each page-aligned run of a row point into one page, as an allocator does
    r2t = ((r2t // page) * page + torch.arange(ctx) % page).to(torch.int32)
    width = (ctx + 128) // page + 1
    buf = torch.full((bs + 2, width + 3), 7777, dtype=torch.int32)  # persistent buffer, stale ids
    view = buf[1 : 1 + bs, :width]  # row slice + column slice: non-contiguous, stride != width
    req_idx = torch.tensor([5, 0, 3, 3], dtype=torch.int32)
    lens = torch.tensor([1, page, ctx, 2 * page + 1], dtype=torch.int32)
    expected_buf = buf.clone()
    expected_buf[1 : 1 + bs, :width] = _dense_fill(r2t, req_idx, lens, view, page)
    buf_d = buf.to(dev)
    view_d = buf_d[1 : 1 + bs, :width]
    fill_page_table(r2t.to(dev), req_idx.to(dev), lens.to(dev), view_d, page, impl=impl)
    buf = buf_d.cpu()
    assert torch.equal(buf, expected_buf)  # written entries right, everything else untouched
    assert (buf[0] == 7777).all() and (buf[:, width:] == 7777).all()


def test_fill_page_table_errors():
    r2t = torch.zeros(2, 8, dtype=torch.int32)
    t = torch.zeros(2, 2, dtype=torch.int32)
    ok = dict(req_pool_indices=torch.tensor([0, 1]), seq_lens=torch.tensor([1, 2]), page_table=t, page_size=4)
    with pytest.raises(ValueError, match="impl must be"):
        fill_page_table(r2t, **ok, impl="cuda")
    with pytest.raises(TypeError, match="seq_lens must be an integer tensor"):
        fill_page_table(r2t, **{**ok, "seq_lens": torch.tensor([1.0, 2.0])})
    with pytest.raises(ValueError, match="one row per request"):
        fill_page_table(r2t, **{**ok, "page_table": torch.zeros(3, 2, dtype=torch.int32)})


@pytest.mark.triton
def test_fill_page_table_triton_is_one_custom_op():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    r2t = torch.arange(64, dtype=torch.int32, device=dev).view(2, 32)
    t = torch.zeros(2, 4, dtype=torch.int32, device=dev)
    with OpLog() as log:
        fill_page_table(r2t, torch.tensor([1, 0], device=dev), torch.tensor([17, 3], device=dev), t, 8, impl="triton")
    assert [s for s in log.ops if "mla_edu" in s] == ["mla_edu.fill_page_table.default"]
    assert t.tolist() == [[4, 5, 6, 0], [0, 0, 0, 0]]


def test_fill_page_table_torch_has_no_host_sync(monkeypatch):
    # the host value checks run only where values are readable without a sync (CPU, no capture): off here,
    # as for a GPU tensor, so the ops left are the device work
    monkeypatch.setattr("mla_edu.kvcache.page_table.values_readable", lambda *t: False)
    r2t = torch.arange(4 * 64, dtype=torch.int32).view(4, 64)
    buf = torch.full((5, 6), -1, dtype=torch.int32)
    with OpLog() as log:
        fill_page_table(r2t, torch.tensor([3, 1]), torch.tensor([33, 1]), buf[1:3], 16, impl="torch")
    assert not {"aten._local_scalar_dense", "aten.nonzero", "aten.item"} & set(log.packets)
    assert buf[1].tolist() == [12, 13, 14, -1, -1, -1] and buf[2].tolist() == [4, -1, -1, -1, -1, -1]
    assert (buf[0] == -1).all() and (buf[3:] == -1).all()


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(page=st.sampled_from([1, 2, 4, 16]), steps=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 9)),
                                                           min_size=1, max_size=25))
def test_allocator_invariants_under_random_growth_and_frees(page, steps):
    """Random prefill/decode growth and finishes across 3 rows: slots never shared, offsets right, pages recycled."""
    alloc = PagedAllocator(200, page, seed=page)
    pool = ReqToTokenPool(3, 96)
    lens = {}
    for row_pick, grow in steps:
        if row_pick not in lens:
            lens[row_pick] = 0
        row = pool.req_to_token[row_pick]
        new = min(lens[row_pick] + grow, 96)
        alloc.slots_for(row, lens[row_pick], new)
        lens[row_pick] = new
        if new == 96:  # finished: free its pages
            alloc.free_pages(alloc.pages_of(row, new))
            del lens[row_pick]
    live = [pool.req_to_token[r, :n].long() for r, n in lens.items()]
    all_slots = torch.cat(live) if live else torch.empty(0, dtype=torch.long)
    assert all_slots.unique().numel() == all_slots.numel()  # no slot owned twice
    for s in live:
        assert torch.equal(s % page, torch.arange(s.numel()) % page)
    used_pages = sum(-(-n // page) for n in lens.values())
    assert alloc.available_pages() == 199 - used_pages  # nothing leaked


def test_page_grid_colours_labels_and_frames():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure

    from mla_edu.kvcache.plots import GRID_COLORS, draw_index_buffer, draw_intended_and_read, draw_page_grid

    ax_int, ax_read, ax_buf = Figure().subplots(1, 3)
    intended = torch.tensor([[5, 6], [7, -1]])  # [2 requests, 2 page slots], -1 unused
    read = torch.tensor([[5, 6], [-3, -1]])  # row 1 read past the buffer
    draw_intended_and_read(ax_int, ax_read, intended, read, labels={-3: "X"})

    def cells(ax):  # (colour, label) per cell, row-major
        rgba = ax.get_images()[0].to_rgba(ax.get_images()[0].get_array())
        return [(tuple(rgba[b, j]), t.get_text()) for (b, j), t in
                zip([(b, j) for b in range(2) for j in range(2)], ax.texts)]

    c = {k: to_rgba(v) for k, v in GRID_COLORS.items()}
    assert cells(ax_int) == [(c["owned"], "5"), (c["owned"], "6"), (c["owned"], "7"), (c["unused"], "")]
    assert cells(ax_read) == [(c["right"], "5"), (c["right"], "6"), (c["wrong"], "X"), (c["unused"], "")]

    buffer = torch.tensor([[5, 1], [9, 42]])  # 42: the poison id
    draw_index_buffer(ax_buf, buffer, torch.tensor([[True, False], [True, False]]), poison=42, reads=[1, 2, 9])
    assert cells(ax_buf) == [(c["written"], "5"), (c["stale"], "1 x"), (c["written"], "9"), (c["poison"], "P")]
    assert [p.get_xy() for p in ax_buf.patches] == [(1 - 0.45, 0 - 0.45), (0 - 0.45, 1 - 0.45)]  # 9: past the end

    with pytest.raises(ValueError, match="expected names from"):
        draw_page_grid(ax_buf, buffer, [["owned", "fresh"], ["owned", "owned"]])
    with pytest.raises(ValueError, match=r"expected 2 rows of 2 names, got \[2\]"):
        draw_page_grid(ax_buf, buffer, [["owned", "owned"]])
    with pytest.raises(ValueError, match=r"pages: expected a \[rows, cols\] tensor"):
        draw_page_grid(ax_buf, torch.tensor([1, 2]), [["owned", "owned"]])
    with pytest.raises(ValueError, match="intended and read: expected one shape"):
        draw_intended_and_read(ax_int, ax_read, intended, read[:1])
    with pytest.raises(ValueError, match=r"text: expected 2 rows of 2 strings"):
        draw_page_grid(ax_buf, buffer, [["owned"] * 2] * 2, text=[["a", "b"]])
    with pytest.raises(ValueError, match=r"cells: expected \(b, j\) with b < 2, j < 2, got \[\(2, 0\)\]"):
        draw_page_grid(ax_buf, buffer, [["owned"] * 2] * 2, cells=[(2, 0)])
    with pytest.raises(ValueError, match=r"written: expected the buffer's shape \(2, 2\), got \(2,\)"):
        draw_index_buffer(ax_buf, buffer, torch.tensor([True, False]))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.complex64, torch.bool])
def test_fill_page_table_refuses_a_table_that_cannot_hold_its_ids(dtype):
    """A uint8 table turned the no-page id -1 into 255, a live page's id (an audit's find); floats are not ids."""
    table = torch.zeros(1, 4, dtype=dtype)
    with pytest.raises(TypeError, match=f"page_table must be an? (signed )?integer tensor.*got {dtype}"):
        fill_page_table(torch.arange(10).view(1, 10), torch.tensor([0]), torch.tensor([3]), table, 2)
    assert not table.any()  # nothing written
