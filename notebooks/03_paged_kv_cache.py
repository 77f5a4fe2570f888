# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · The paged latent KV cache
#
# **You will learn** how a serving engine stores MLA's latent cache: token slots grouped into
# [pages](../docs/glossary.md#page), a [`req_to_token`](../docs/glossary.md#req_to_token) table that maps each request's positions to slots, and the small
# *[page table](../docs/glossary.md#page-table)* a decode kernel reads. You will see why pages beat one contiguous block per
# request, what "[stale](../docs/glossary.md#stale-entry)" entries in a reused page table are, and how a page table read with the
# wrong [row stride](../docs/glossary.md#row-stride) hands a request somebody else's pages: the mechanism of the bug that SGLang PR #6998 fixes.
#
# **You need** a CPU (Run All takes seconds on a 2-core CPU: its measured time is in README's table of
# notebooks). Triton runs in its CPU interpreter here.
#
# Vocabulary follows SGLang (`python/sglang/srt/mem_cache/memory_pool.py`,
# `python/sglang/srt/layers/attention/utils.py`), so you can read this next to its code.

# %%
import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 when there is no GPU)
from mla_edu.kvcache import LatentKVCache, PagedAllocator, PoolExhausted, ReqToTokenPool, fill_page_table
from mla_edu.kernels import pages_read, triton_available
from mla_edu.kvcache.plots import page_table_figure, page_table_scenario
from mla_edu.workshop.stored import show_stored

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. What one token costs (core)
#
# MLA caches, per token and per layer, the compressed KV `c_kv` (`kv_lora_rank` = 512 numbers)
# and the shared RoPE key `k_pe` (64 numbers): one row of 576. SGLang stores them side by side
# in one tensor per layer of shape `[slots + PAGE, 1, 576]` (`MLATokenToKVPool`: one row per token
# slot, plus one page of padding), and its cutlass backend hands the kernel the view
# `[num_pages, PAGE, 576]` of it as `kv_c_and_k_pe_cache`.

# %%
v3 = LatentKVCache(num_layers=61, num_pages=1, page_size=1, dtype=torch.bfloat16)
print("DeepSeek-V3, bf16: bytes per token, all 61 layers:", v3.bytes_per_token())
print("per layer:", v3.bytes_per_token() // 61)
assert v3.bytes_per_token() == 61 * 576 * 2
print("a 4096-token request:", round(4096 * v3.bytes_per_token() / 2**20, 1), "MiB")

# %% [markdown]
# ## 2. Why pages (core)
#
# A naive engine reserves `max_context_len` slots per request up front. Requests are ragged,
# so most of that is never used. Paging hands out fixed-size pages on demand: the only waste is
# the unfilled tail of each request's last page, under one page per request. With lengths spread evenly,
# that tail is equally likely to be any of 0 to PAGE - 1 slots: (PAGE - 1)/2 on average. Let's measure
# both on 1000 requests with lengths uniform in [1, 4096].

# %%
g = torch.Generator().manual_seed(0)
lens = torch.randint(1, 4097, (1000,), generator=g)
used = lens.sum().item()
contiguous = 1000 * 4096
print(f"contiguous reservation: {used / contiguous:.3f} of the slots hold tokens")
for page in (1, 16, 64, 128):
    slots = (torch.div(lens + page - 1, page, rounding_mode="floor") * page).sum().item()
    print(f"page {page:3d}: {used / slots:.4f} of the allocated slots hold tokens, "
          f"waste per request {(slots - used) / 1000:.1f} slots (about (PAGE - 1)/2 = {(page - 1) / 2})")

# %% [markdown]
# Small pages waste less but make the table longer and the kernel's gathers smaller. Kernels
# pick a page size they can read efficiently: FlashMLA uses 64; SGLang's cutlass_mla backend uses 128 (sgl-kernel's
# kernel takes any power of two up to 128, notebook 04's `check_cutlass_args`).
#
# ## 3. The request pool and the page allocator (core)
#
# `ReqToTokenPool` owns `req_to_token`, an int32 `[size, max_context_len]` table: row `r` lists
# the cache slot of every position of the request living in row `r`. `PagedAllocator` hands out
# whole pages; slot = `page * PAGE + offset`. Page 0 is reserved as the padding page (SGLang
# reserves slot 0 for [padded](../docs/glossary.md#padded-rows) tokens in the same way), so a dummy request may always point there.

# %%
PAGE = 4
pool = ReqToTokenPool(size=3, max_context_len=16)
alloc = PagedAllocator(num_pages=9, page_size=PAGE, seed=1)  # seed: shuffled free list, pages not in order
rows = pool.alloc(2)
print("request rows:", rows, "| free pages:", alloc.available_pages())

# prefill: 6 and 3 tokens
for r, n in zip(rows, (6, 3)):
    loc = alloc.slots_for(pool.req_to_token[r], 0, n)
    print(f"row {r} prefill slots {loc.tolist()}  pages {sorted(set((loc // PAGE).tolist()))}")

# three decode steps: one token each
lens_now = [6, 3]
for step in range(3):
    for i, r in enumerate(rows):
        alloc.slots_for(pool.req_to_token[r], lens_now[i], lens_now[i] + 1)
        lens_now[i] += 1
for i, r in enumerate(rows):
    print(f"row {r} len {lens_now[i]}: req_to_token = {pool.req_to_token[r, :lens_now[i]].tolist()}")
print("free pages left:", alloc.available_pages())

# %% [markdown]
# Position `p` of a request always sits at offset `p % PAGE` of its page, and every page of a
# request is whole: that is what lets a kernel read a page table (one id per page) instead of
# one slot per token. Let's check it for both requests.

# %%
for i, r in enumerate(rows):
    slots = pool.req_to_token[r, : lens_now[i]].long()
    assert torch.equal(slots % PAGE, torch.arange(lens_now[i]) % PAGE)
    pages = slots // PAGE
    for j in range(0, lens_now[i], PAGE):
        assert (pages[j : j + PAGE] == pages[j]).all()
print("every position sits at offset p % PAGE of one page per PAGE positions: True")

# %% [markdown]
# When a request finishes its pages go back to the front of the free list, last freed first (the list
# is a stack), so the next request reuses them. After some churn a request's pages are
# scattered: that is the permuted page table the kernels must handle.

# %%
first = pool.req_to_token[rows[0], : lens_now[0]]
freed = alloc.pages_of(first, lens_now[0])
alloc.free_pages(freed)
pool.free(rows[0])
new_row = pool.alloc(1)[0]
loc = alloc.slots_for(pool.req_to_token[new_row], 0, 10)
got = (loc[::PAGE] // PAGE).tolist()  # the first slot of each page, in order
print("freed pages", freed.tolist(), "-> the new request got pages", got)
assert got == freed.flip(0).tolist()  # the freed pages come back first, last freed first
try:
    alloc.alloc_pages(100)
except PoolExhausted as e:
    print("PoolExhausted:", e)
else:
    raise AssertionError("expected PoolExhausted: the pool has fewer than 100 free pages")

# %% [markdown]
# ## 4. Writing a step's latents (optional)
#
# Each layer writes the new tokens' `c_kv` and `k_pe` into their slots `loc` (SGLang's
# [`out_cache_loc`](../docs/glossary.md#out_cache_loc)) with one `index_copy_`.
# No host sync, so this runs inside a [captured](../docs/glossary.md#capture) CUDA graph.

# %%
cache = LatentKVCache(num_layers=2, num_pages=9, page_size=PAGE, kv_lora_rank=8, qk_rope_head_dim=4)
c_kv, k_pe = torch.randn(10, 8), torch.randn(10, 4)
cache.set_kv(1, loc, c_kv, k_pe)
rows_l1 = cache.get_kv_buffer(1).view(-1, 12)
print("kv_buffer[1] shape:", tuple(cache.get_kv_buffer(1).shape))
print("written rows equal the inputs:", torch.equal(rows_l1[loc], torch.cat([c_kv, k_pe], -1)))
print("rows written:", int((rows_l1.abs().sum(-1) > 0).sum()), "of", rows_l1.size(0))

# %% [markdown]
# ## 5. The page table (core)
#
# Decode kernels read a page table: int32 [`[B, block_num]`](../docs/glossary.md#block_num), row `b` listing request `b`'s pages.
# SGLang builds it with a small Triton kernel, `create_flashmla_kv_indices_triton`: one program
# per request writes
#
# $$\text{table}[b, p] = \text{req\_to\_token}[\text{req}_b,\ p \cdot \text{PAGE}]\ /\!/\ \text{PAGE}
# \quad\text{for } p < \lceil \text{len}_b / \text{PAGE} \rceil$$
#
# and **leaves every other entry of the row untouched**. That is the kernel at SGLang commit
# `7059ae16f` (the parent of the #6998 fix): its store mask is `paged_offset_out < num_paged`, so
# exactly $\lceil \text{len}_b / \text{PAGE} \rceil$ entries are written (before PR #6109 it was
# `<=`, one entry more). Under CUDA graphs the rows live in a persistent buffer allocated once,
# SGLang's `cuda_graph_kv_indices` `[max_bs, W]` (filled with 1, `W = (max_context_len + 128) // 128`
# in the cutlass backend): the **page-table buffer**, whose rows are reused step after step. The view
# of it handed to the kernel ([`block_kv_indices`](../docs/glossary.md#block_kv_indices) in the backend's metadata) is the kernel's
# `page_table` argument. `fill_page_table` implements the `7059ae16f` kernel twice: in vectorized
# torch ops, and in Triton, registered as the custom op `mla_edu::fill_page_table`.

# %%
sc = page_table_scenario()
buf = sc["buf"]
print("page-table buffer", tuple(buf.shape), "| page size", sc["page_size"], "| seq_lens", sc["seq_lens"].tolist(),
      "| pages each", sc["n_pages"])
for b in range(4):
    print(f"row {b}: {buf[b].tolist()}")

# %% [markdown]
# The scenario's pages hold 64 tokens (section 3's toy allocator had 4; the cutlass backend's have 128)
# and its context is 512 tokens: its buffer keeps the backend's `+ 128` but counts this toy's 64-token pages,
# `(512 + 128) // 64 = 10` columns wide, two more than a
# 512-token request needs. It first served four long requests in rows 0-3, then four shorter ones reused the
# rows. Only the first `ceil(len / 64)` entries of each row were rewritten: the rest are
# *stale* ids of freed pages (some already handed to other requests) or the initial 1.
# Harmless, as long as the kernel reads exactly `ceil(len / PAGE)` entries of the right row.
#
# The torch and Triton fills agree, write through a non-contiguous row-slice of the buffer, and
# touch nothing else:

# %%
# stored output: fill
dev = mla_edu.default_device()  # Triton runs natively on a GPU, in its interpreter on CPU
for impl in ("torch", "triton") if triton_available() else ("torch",):
    b2 = torch.full_like(buf, -7, device=dev)
    view = b2[:4, 2:]  # a view whose row stride (10) is not its width (8)
    fill_page_table(sc["req_to_token"].to(dev), sc["req_pool_indices"].to(dev), sc["seq_lens"].to(dev), view, 64,
                    impl=impl)
    live = [view[b, : n].tolist() for b, n in enumerate(sc["n_pages"])]
    untouched = int((b2 == -7).sum())
    print(f"{impl:6s} live entries {live}  untouched entries {untouched} of {b2.numel()}")
    assert live == [buf[b, : n].tolist() for b, n in enumerate(sc["n_pages"])]
    assert untouched == b2.numel() - sum(sc["n_pages"])
if not triton_available():  # Linux wheels only: the committed run's line
    show_stored("03_paged_kv_cache", "fill", lines_from="triton")

# %% [markdown]
# ## 6. Reading the table with the wrong row stride (core)
#
# A kernel finds page `j` of request `b` at flat index `b * row_stride + j` of the table's
# storage. sgl-kernel's `cutlass_mla_decode` takes `row_stride = page_table.size(1)` (its C++
# wrapper builds the stride from `page_table.sizes()[1]`, `sgl-kernel/csrc/attention/cutlass_mla_kernel.cu`);
# FlashMLA takes `block_table.stride(0)`. For a contiguous table both are the same. For the
# narrow view `buf[:bs, :1]`, which SGLang's cutlass backend captured in its CUDA graph
# before PR #6998, they differ: width 1, real stride 10.

# %%
right = pages_read(buf, sc["n_pages"], row_stride=buf.size(1))
wrong = pages_read(buf, sc["n_pages"], row_stride=1)
for b in range(4):
    print(f"request {b}: needs {right[b]}, reads {wrong[b]}, correct: {right[b] == wrong[b]}")
assert right[0] == wrong[0] and all(right[b] != wrong[b] for b in range(1, 4))

# %% [markdown]
# Request 0 reads its own row. Every other request reads request 0's row shifted by `b`, then
# whatever follows in memory: stale ids and other requests' pages. The picture:

# %%
fig = page_table_figure()

# %% [markdown]
# ## What we saw (core)
#
# - MLA caches 576 numbers per token per layer (70,272 bytes per token for all of DeepSeek-V3 in bf16).
# - Paging wastes under one page per request; contiguous reservation wasted half of the memory here.
# - `req_to_token` maps positions to slots; position `p` sits at offset `p % PAGE` of one page, so a
#   page table with one id per page is enough. Freed pages are reused first, so tables are permuted.
# - The page-table fill writes `ceil(len / PAGE)` entries per row and leaves the rest stale.
# - Read with the row stride of a narrow view (`size(1)` instead of `stride(0)`), only request 0
#   gets its own pages. Notebook 04 runs the decode kernel on such a table; notebooks 06-07 show
#   the whole bug under CUDA graphs.
#
# ## Exercises (core)
#
# Predict, then run: write your prediction in the variable (it is `...` until you do), then run the
# cell after it, which runs the experiment and checks your prediction (`mla_edu.workshop.checks`). The
# instructor hands out the answers, with the why, after the exercise.
#
# **1.** With page 128 and lengths uniform over the integers 1 to 512, what fraction of the allocated
# slots is wasted (allocated but holding no token)? Compute it; the check counts every length once.

# %%
ex1_wasted_fraction = ...  # a number in [0, 1], three significant digits (within 0.25%)

# %%
from mla_edu.workshop import checks  # noqa: E402

every_len = torch.arange(1, 513)
allocated = (torch.div(every_len + 127, 128, rounding_mode="floor") * 128).sum().item()
used_slots = every_len.sum().item()
from_zero = torch.arange(0, 512)  # lengths 0 to 511: an off-by-one in the range
allocated_0 = (torch.div(from_zero + 127, 128, rounding_mode="floor") * 128).sum().item()
r1 = checks.check_number("exercise 1", ex1_wasted_fraction, 1 - used_slots / allocated, tolerance=0.0025,
                         mistakes={(allocated - used_slots) / used_slots:
                                   "that is the waste over the slots used; the question is over the slots allocated",
                                   1 - from_zero.sum().item() / allocated_0: "the lengths run 1 to 512, both "
                                                                              "included"})

# %% [markdown]
# **2.** `pages_read(..., clamp=False)` (`mla_edu.kernels`) gives `None` for a read outside the
# buffer's storage. Take section 5's buffer (`buf`: 6 rows of `W = 10`, of which section 5 printed 4) and a batch of
# 6 requests of 8 pages each (the most a 512-token context holds at section 5's 64 tokens a page). Read with row stride 1: how many reads fall outside the buffer?
# Read with row stride 11 (one more than the width, as a kernel handed another buffer's stride would):
# which request (its row `b`) is the first to read outside?

# %%
ex2_outside_at_stride_1 = ...  # an int
ex2_first_outside_at_stride_11 = ...  # a row index

# %%
six = [8] * 6
outside_1 = sum(page is None for row in pages_read(buf, six, 1, clamp=False) for page in row)
first_11 = next(b for b, row in enumerate(pages_read(buf, six, 11, clamp=False)) if None in row)
r2 = [checks.check_number("exercise 2, stride 1", ex2_outside_at_stride_1, outside_1),
      checks.check_number("exercise 2, stride 11", ex2_first_outside_at_stride_11, first_11,
                          mistakes={4: "compute the last flat index that row reads and compare it with the buffer's size"})]

# %% [markdown]
# **3.** Poison a copy of the buffer (fill it with `-1`) and redo section 5's fill into it. Then read it
# with row stride 1 for section 5's four requests: how many of their reads hit a `-1`?

# %%
ex3_reads_of_poison = ...  # an int

# %%
poisoned = torch.full_like(buf, -1)
fill_page_table(sc["req_to_token"], sc["req_pool_indices"], sc["seq_lens"], poisoned[:4], sc["page_size"])
loud = sum(page == -1 for row in pages_read(poisoned, sc["n_pages"], 1) for page in row)
r3 = checks.check_number("exercise 3", ex3_reads_of_poison, loud,
                         mistakes={0: "the fill does not write whole rows, only each request's own pages: what is "
                                      "left of row 0 past its first pages?"})

