"""Token slots for requests: the ``req_to_token`` pool and a page allocator.

Vocabulary follows SGLang (``python/sglang/srt/mem_cache/memory_pool.py``):
``req_to_token[req, pos]`` is the cache slot of token ``pos`` of request ``req``;
a slot is ``page * page_size + offset``. Both classes are host-side bookkeeping
(Python lists), run outside any captured graph.
"""

from __future__ import annotations

import torch
from mla_edu.device import check_device
from mla_edu.util import INT32_MAX, check_int, is_int


class PoolExhausted(RuntimeError):
    """Raised when a pool or allocator has fewer free entries than asked for."""


def _as_index_list(name: str, indices) -> list[int]:
    if isinstance(indices, torch.Tensor):
        if indices.dtype.is_floating_point or indices.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers, got a {indices.dtype} tensor")
        return [int(i) for i in indices.reshape(-1).tolist()]
    if is_int(indices):
        return [indices]
    try:
        items = list(indices)
    except TypeError:
        raise TypeError(f"{name} must be an int, a list of ints or an int tensor, "
                        f"got {type(indices).__name__}") from None
    for i in items:  # True is an int to Python, 1.9 would become 1: both refused
        if not is_int(i):
            raise TypeError(f"{name} must hold ints, got {i!r} ({type(i).__name__})")
    return items


class ReqToTokenPool:
    """``size`` request rows, each mapping token positions to cache slots.

    ``req_to_token`` is int32 ``[size, max_context_len]``, zero-filled (slot 0 lives on the
    reserved page 0, see ``PagedAllocator``). ``alloc(n)`` hands out row indices, lowest first.
    """

    def __init__(self, size: int, max_context_len: int, device="cpu"):
        check_int("size", size, 1)
        check_int("max_context_len", max_context_len, 1)
        self.size = size
        self.max_context_len = max_context_len
        self.device = check_device("device", device)
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32, device=self.device)
        self._free = list(range(size))

    def available(self) -> int:
        return len(self._free)

    def is_allocated(self, index: int) -> bool:
        """True if row ``index`` was handed out by ``alloc`` and not freed since."""
        return is_int(index) and 0 <= index < self.size and index not in self._free

    def alloc(self, n: int = 1) -> list[int]:
        check_int("n", n, 0)
        if n > len(self._free):
            raise PoolExhausted(f"ReqToTokenPool: asked for {n} request rows, "
                                f"only {len(self._free)} of {self.size} free")
        out, self._free = self._free[:n], self._free[n:]
        return out

    def free(self, indices) -> None:
        idx = _as_index_list("indices", indices)
        free = set(self._free)
        for i in idx:
            if not 0 <= i < self.size:
                raise ValueError(f"ReqToTokenPool.free: row index must be in [0, {self.size}), got {i}")
            if i in free:
                raise ValueError(f"ReqToTokenPool.free: row {i} is already free (double free)")
            free.add(i)
        self._free = sorted(free)


class PagedAllocator:
    """Hands out whole pages of ``page_size`` token slots.

    Page 0 is reserved and never handed out: like SGLang's slot 0, it is the padding page
    that dummy requests (graph padding, capture-time dummies) may point at, so writes for
    padded rows never land in a live request's page. ``num_pages - 1`` pages are usable.

    Freed pages go to the front of the free list (LIFO), so they are reused first and
    pages of one request are generally not contiguous. ``seed`` shuffles the initial order,
    which makes non-contiguity show up from the first allocation (tests and notebooks).
    """

    def __init__(self, num_pages: int, page_size: int, device="cpu", seed: int | None = None):
        check_int("num_pages", num_pages, 2)
        check_int("page_size", page_size, 1)
        if page_size & (page_size - 1):
            raise ValueError(f"page_size must be a power of two, got {page_size}")
        if num_pages * page_size > INT32_MAX + 1:
            raise ValueError(f"num_pages * page_size must be at most 2**31 slots (req_to_token holds int32 slots), "
                             f"got {num_pages} * {page_size} = {num_pages * page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.device = check_device("device", device)
        free = list(range(1, num_pages))
        if seed is not None:
            g = torch.Generator().manual_seed(seed)
            free = [free[i] for i in torch.randperm(len(free), generator=g).tolist()]
        self._free = free
        self._used: set[int] = set()

    def available_pages(self) -> int:
        return len(self._free)

    def available_slots(self) -> int:
        return len(self._free) * self.page_size

    def alloc_pages(self, n: int) -> torch.Tensor:
        """``n`` free pages as an int64 tensor ``[n]``; ``PoolExhausted`` if too few are free."""
        check_int("n", n, 0)
        if n > len(self._free):
            raise PoolExhausted(
                f"PagedAllocator: asked for {n} pages, only {len(self._free)} of {self.num_pages - 1} usable pages free"
            )
        pages, rest = self._free[:n], self._free[n:]
        out = torch.tensor(pages, dtype=torch.int64, device=self.device)
        # the free list and the used set change last: an interrupt while the result is built leaves every page free
        used = self._used | set(pages)
        self._free, self._used = rest, used
        return out

    def free_pages(self, pages) -> None:
        idx = _as_index_list("pages", pages)
        if len(set(idx)) != len(idx):
            raise ValueError(f"PagedAllocator.free_pages: pages listed twice (double free): {idx}")
        for p in idx:
            if p == 0:
                raise ValueError("PagedAllocator.free_pages: "
                                 "page 0 is the reserved padding page and is never allocated")
            if p not in self._used:
                raise ValueError(f"PagedAllocator.free_pages: page {p} is not allocated (double free or foreign page)")
        for p in idx:
            self._used.discard(p)
        self._free = list(reversed(idx)) + self._free

    def slots_for(self, req_to_token_row: torch.Tensor, old_len: int, new_len: int) -> torch.Tensor:
        """Assign cache slots to token positions ``[old_len, new_len)`` of one request.

        Positions on the request's last, partly filled page reuse that page (read back from
        ``req_to_token_row[old_len - 1]``); the rest get fresh pages. Writes the slots into
        ``req_to_token_row[old_len:new_len]`` and returns them (int64 ``[new_len - old_len]``),
        ready for ``LatentKVCache.set_kv(layer, loc, ...)``. Works for prefill (old_len=0) and
        for each decode step (new_len = old_len + 1). Host-side: call it outside graphs.
        """
        return slots_for(req_to_token_row, old_len, new_len, self)

    def pages_of(self, req_to_token_row: torch.Tensor, length: int) -> torch.Tensor:
        """The pages holding positions ``[0, length)`` of a request (int64), e.g. to free them."""
        _check_row(req_to_token_row, writable=False)
        check_int("length", length, 0)
        if length > req_to_token_row.numel():
            raise ValueError(f"length: expected at most the row's {req_to_token_row.numel()} positions "
                             f"(max_context_len), got {length}")
        if length == 0:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        first_slots = req_to_token_row[: length : self.page_size].to(torch.int64)
        return first_slots // self.page_size


def _check_row(row, writable: bool = True) -> None:
    """TypeError/ValueError unless ``row`` is one row of ``req_to_token``: a 1-D int32 or int64 tensor (a narrower
    dtype would wrap slot ids) that, for ``writable``, can be written in place (no expanded, zero-stride view,
    no inference tensor outside inference mode)."""
    if not isinstance(row, torch.Tensor) or row.dim() != 1:
        got = type(row).__name__ + (f" of shape {tuple(row.shape)}" if isinstance(row, torch.Tensor) else "")
        raise TypeError(f"req_to_token_row: expected a 1-D tensor (one row of req_to_token), got {got}")
    if row.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"req_to_token_row: expected an int32 or int64 tensor (slot ids), got {row.dtype}")
    if writable and row.numel() > 1 and row.stride(0) == 0:
        raise ValueError("req_to_token_row: expected a writable row, got an expanded view (stride 0: every "
                         "position is one element)")
    if writable and row.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError("req_to_token_row: expected a writable row, got an inference tensor outside "
                         "torch.inference_mode()")


def slots_of(pages, start: int, end: int, page_size: int) -> torch.Tensor:
    """The cache slots of positions ``[start, end)`` of a request whose ``i``-th page is ``pages[i]``:
    ``pages[pos // page_size] * page_size + pos % page_size`` (int64 ``[end - start]``, on the CPU). The one place
    a slot is made from a page; ``slots_for`` and the serving engine both call it."""
    check_int("page_size", page_size, 1)
    check_int("start", start, 0)
    check_int("end", end, start)
    if isinstance(pages, torch.Tensor) and pages.dim() != 1:
        raise ValueError(f"pages: expected a 1-D list of page ids, got shape {tuple(pages.shape)}")
    ids = _as_index_list("pages", pages)  # ints only: 1.9 or True refused
    if ids and min(ids) < 1:
        raise ValueError(f"pages: expected page ids >= 1 (page 0 is the reserved padding page), got {min(ids)}")
    if end > len(ids) * page_size:
        raise ValueError(f"pages: expected at least ceil(end / page_size) = {-(-end // page_size)} pages, "
                         f"got {len(ids)}")
    pages = torch.tensor(ids, dtype=torch.int64)  # [n_pages]
    pos = torch.arange(start, end, dtype=torch.int64)  # [n]
    return pages[pos // page_size] * page_size + pos % page_size


def slots_for(req_to_token_row: torch.Tensor, old_len: int, new_len: int, allocator: PagedAllocator) -> torch.Tensor:
    """See ``PagedAllocator.slots_for``. Everything is checked before a page is taken; fresh pages go back to the
    allocator if anything after fails (an exception or an interrupt)."""
    _check_row(req_to_token_row)
    check_int("old_len", old_len, 0)
    check_int("new_len", new_len, old_len)
    if new_len > req_to_token_row.numel():
        raise ValueError(f"new_len must be <= max_context_len={req_to_token_row.numel()}, got {new_len}")
    page = allocator.page_size
    if new_len == old_len:
        return torch.empty(0, dtype=torch.int64, device=req_to_token_row.device)
    first_new_page = (old_len + page - 1) // page  # page index (within the request) of the first fresh page
    last_page = (new_len - 1) // page
    n_fresh = max(0, last_page - first_new_page + 1)
    # the request's pages so far (positions [0, old_len)): each must be one the allocator handed out and has not
    # taken back, or the cache would read a padding page or another request's
    held = (req_to_token_row[:old_len:page].to(torch.int64) // page).tolist() if old_len else []
    for i, held_page in enumerate(held):
        if held_page not in allocator._used:
            pos = min(old_len - 1, (i + 1) * page - 1)
            raise ValueError(f"req_to_token_row[{i * page}:{pos + 1}]: expected slots on a page allocated to the "
                             f"request (old_len={old_len} continues it), got page {held_page}"
                             + (", the reserved padding page (a row never filled?)" if held_page == 0 else
                                ", which is not allocated (freed?)"))
    current = held[-1] if old_len % page != 0 else None  # the request's last page, partly filled: reused
    fresh = allocator.alloc_pages(n_fresh)
    try:
        base = old_len // page  # the first page the new positions touch: `current` if any, else the first fresh
        window = ([current] if current is not None else []) + fresh.tolist()  # its pages from logical page `base` on
        slots = slots_of(window, old_len - base * page, new_len - base * page, page)  # [n]
        slots = slots.to(req_to_token_row.device)
        req_to_token_row[old_len:new_len] = slots.to(req_to_token_row.dtype)
    except BaseException:  # an exception or an interrupt after the pages were taken: give them back
        allocator.free_pages(fresh.tolist()[::-1])  # reversed: the free list is back as it was
        raise
    return slots
