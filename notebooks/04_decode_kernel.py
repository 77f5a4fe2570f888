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
# # 04 · The MLA decode kernel: gather, split-KV, workspace
#
# **You will learn** what a paged MLA decode kernel computes and how it is organised: a naive
# gather through the page table, then *[split-KV](../docs/glossary.md#split)* (flash-decoding), where each request's pages
# are cut into splits processed in parallel and merged by log-sum-exp through a *[workspace](../docs/glossary.md#workspace)*.
# You will meet the exact contract of sgl-kernel's `cutlass_mla_decode`, the function behind
# SGLang's `cutlass_mla` backend, including the two host-side details notebooks 06 and 07 turn on: the page
# table's row stride (the bug) and the split count (which decides whether notebook 07's workspace defect does harm).
#
# **You need** a CPU; Run All takes seconds on a 2-core CPU (its measured time is in README's table of
# notebooks; Triton runs in its CPU interpreter). Section 1's two ceilings are read from a committed H200 run.
# Notebook 09, after the story, takes this kernel onto the H200: its speed against FlashMLA, its compiled code,
# ragged batches.

# %%
import math

import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 when there is no GPU)
from mla_edu import MLAConfig
from mla_edu.attention import cost
from mla_edu.kernels import (check_cutlass_args, cutlass_unavailable_reason, get_workspace_size, mla_decode,
                             num_kv_splits_for, triton_available)
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kernels.plots import load_bench
from mla_edu.workshop.stored import show_stored

_ = torch.manual_seed(0)
NB = "04_decode_kernel"
TRITON = triton_available()  # Triton has Linux wheels only: elsewhere its cells show the committed run's output
IMPL = "triton" if TRITON else "torch"  # the kernel of sections 6-8's demos: both print the same

# %% [markdown]
# ## 1. The contract (core)
#
# After weight absorption (notebook 02) decode is multi-query attention over the latent cache:
# every head's query has a 512-wide part `q_nope` (already multiplied by $W^{UK}$) and a 64-wide
# RoPE part `q_pe`; every cached token is one 576-wide row `[c_kv; k_pe]`; the value is `c_kv`.
#
# $$o_{b,h} = \sum_t \operatorname{softmax}_t\big(s \cdot [q^{nope}_{b,h}; q^{pe}_{b,h}] \cdot [c_t; k^{pe}_t]\big)\, c_t,
# \qquad s = \tfrac{1}{\sqrt{128 + 64}}\ (\times\ \text{YaRN } m^2)$$
#
# sgl-kernel's wrapper (`sgl-kernel/python/sgl_kernel/attention.py` as of SGLang PR #7184: PR #6929
# added `num_kv_splits`, #7145 split the query into `q_nope` and `q_pe`, #7184 added `sm_scale` and
# made one split the default; `docs/sources.md`):
#
# | argument | shape | dtype |
# |---|---|---|
# | `q_nope` | `[B, H, 512]`, H <= 128 (padded to 128 inside) | fp16 / bf16 |
# | `q_pe` | `[B, H, 64]` | same |
# | `kv_c_and_k_pe_cache` | `[num_pages, PAGE, 576]` | same |
# | `seq_lens` | `[B]` | int32 |
# | `page_table` | `[B, block_num]`, `block_num % (128 / PAGE) == 0` | int32 |
# | `workspace` | bytes from `cutlass_mla_get_workspace_size` | uint8 |
# | `sm_scale`, `num_kv_splits` | float, int (1 by default, -1 = auto) | |
#
# `mla_edu.kernels.mla_decode` has the same signature, plus `impl=` (reference, torch, triton,
# cutlass), `stride_policy=`, `checked=`.
#
# How much work is one call? Notebook 02 counted it (`cost.attention_core_cost`, "What each order
# costs"): 228 FLOP per byte at 128 heads and 30 at 16 for 64 requests of 4096 tokens. The floors
# below are what a kernel running at the two measured ceilings would take; notebook 09 times this one
# against them on the H200.

# %%
bench = load_bench()
ceil = bench["ceilings"]
print(f"ceilings measured on the H200: copy {ceil['copy_TBps']:.2f} TB/s, "
      f"bf16 matmul {ceil['matmul_bf16_TFLOPs']:.0f} TFLOP/s, "
      f"ridge {ceil['matmul_bf16_TFLOPs'] / ceil['copy_TBps']:.0f} FLOP/byte")
intensity = {}
for heads in (16, 128):
    b, length = cost.QUOTED_BATCH, cost.QUOTED_LEN
    dims = MLAConfig.deepseek_v3().replace(num_attention_heads=heads)
    work = cost.attention_core_cost(dims, [length] * b)  # FLOPs and bytes: cache, q in, o out
    intensity[heads] = cost.decode_intensity(dims)
    t_mem = work.bytes / (ceil["copy_TBps"] * 1e12) * 1e6
    t_cmp = work.flops / (ceil["matmul_bf16_TFLOPs"] * 1e12) * 1e6
    print(f"h_q={heads:3d}, B={b}, L={length}: {work.bytes / 1e6:.0f} MB, {work.flops / 1e9:.1f} GFLOP, "
          f"intensity {intensity[heads]:.0f} FLOP/B -> floor {max(t_mem, t_cmp):.0f} us "
          f"({'memory' if t_mem > t_cmp else 'compute'}-bound)")
assert (round(intensity[128]), round(intensity[16])) == (228, 30)  # as quoted here and in notebook 02

# %% [markdown]
# ## 2. A test problem, built like FlashMLA's tests (core)
#
# Pages are handed out in a random permutation; every page no request owns, and every slot past
# a request's length, holds NaN; every page-table entry past a request's pages holds an
# out-of-range id, one of three kinds (-1, a large negative, a large positive: 1073741824 = 2^30), so
# that a kernel guarding against one kind still trips on the others. A kernel that reads anything it
# should not returns NaN. The case has pages of 16 tokens and a table 6 wide, which the cutlass contract
# above refuses (`block_num` a multiple of 8 at page 16): the torch and Triton kernels take any page size
# and width, and only `impl="cutlass"` checks that contract. Unlike notebook 03's allocator, this one
# hands out page 0 too.

# %%
DEVICE = mla_edu.default_device()  # the GPU when there is one: Triton then runs natively
case = random_decode_case(0, heads=8, page_size=16, lens=[1, 16, 50, 37], extra_cols=2, device=DEVICE)
print("seq_lens  ", case.seq_lens.tolist())
print("page_table", case.page_table.tolist())
print("cache", tuple(case.cache.shape), "| NaN rows:", int(case.cache.isnan().any(-1).sum()), "of",
      case.cache.shape[0] * case.cache.shape[1])


def dense_f64(case):
    """Ground truth in float64 from each request's own slots (not from the page table)."""
    rows = case.cache.reshape(-1, 576).double()
    out = []
    for b, slots in enumerate(case.token_slots):
        q = torch.cat([case.q_nope[b], case.q_pe[b]], -1).double()  # [H, 576]
        k = rows[slots]  # [L, 576]
        out.append(torch.softmax(q @ k.T * case.sm_scale, -1) @ k[:, :512])  # [H, 512]
    return torch.stack(out)


truth = dense_f64(case)


def rel_err(x):
    return ((x.double() - truth).norm() / truth.norm()).item()


# %% [markdown]
# ## 3. Naive gather (core)
#
# The simplest correct kernel: per request, look its `ceil(len / PAGE)` pages up in the table,
# gather their rows, keep the first `len`, attend. Ten lines; the `"reference"` impl is this.

# %%
def naive_decode(q_nope, q_pe, cache, seq_lens, page_table, sm_scale):
    page = cache.size(1)
    out = []
    for b, n in enumerate(seq_lens.tolist()):
        pages = page_table[b, : math.ceil(n / page)].long()  # [n_pages]
        kv = cache[pages].reshape(-1, cache.size(-1))[:n].float()  # [L, 576]
        q = torch.cat([q_nope[b], q_pe[b]], -1).float()  # [H, 576]
        out.append(torch.softmax(q @ kv.T * sm_scale, -1) @ kv[:, :512])  # [H, 512]
    return torch.stack(out)


naive = naive_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.sm_scale)
print("naive gather matches float64 (rel. err < 1e-6):", rel_err(naive) < 1e-6)
print("no NaN, so no stray read:", bool(torch.isfinite(naive).all()))
assert rel_err(naive) < 1e-6 and torch.isfinite(naive).all()

# %% [markdown]
# On a GPU this is one program per request: with few, long requests most of the chip idles.
#
# ## 4. Split-KV (core)
#
# Cut request `b`'s pages into `S` splits. Each split `s` computes its own normalized partial
# output $o_s$ and log-sum-exp $\ell_s = \log \sum_{t \in s} e^{x_t}$, where $x_t$ is token $t$'s score
# $s \cdot [q^{nope}; q^{pe}] \cdot [c_t; k^{pe}_t]$; since
# $\operatorname{softmax}$ over all tokens weights split `s` by $e^{\ell_s} / \sum_{s'} e^{\ell_{s'}}$,
#
# $$o = \sum_s w_s\, o_s, \qquad w_s = e^{\ell_s - \max \ell} \big/ \textstyle\sum_{s'} e^{\ell_{s'} - \max \ell}.$$
#
# Stage 1 writes the $o_s$ and $\ell_s$ for all (request, head, split) into a scratch buffer, the
# **workspace**; stage 2 merges. Checked on request 2 (50 tokens) cut at token 32:

# %%
b = 2
kv = case.cache.reshape(-1, 576)[case.token_slots[b]].double()  # [50, 576]
x = torch.cat([case.q_nope[b], case.q_pe[b]], -1).double() @ kv.T * case.sm_scale  # [H, 50] scores
parts = []
for lo, hi in ((0, 32), (32, 50)):
    lse = torch.logsumexp(x[:, lo:hi], -1)  # [H]
    o = torch.softmax(x[:, lo:hi], -1) @ kv[lo:hi, :512]  # [H, 512], normalized within the split
    parts.append((o, lse))
lses = torch.stack([p[1] for p in parts])  # [S, H]
w = torch.softmax(lses, 0)  # [S, H]
merged = sum(w[s][:, None] * parts[s][0] for s in range(2))
print("merge of 2 splits equals the full softmax:", torch.allclose(merged, truth[b], atol=1e-12))
assert torch.allclose(merged, truth[b], atol=1e-12)

# %% [markdown]
# ## 5. How many splits, and how big a workspace (core)
#
# sgl-kernel decides the split count **on the host, from shapes only**
# (`MLA::set_split_kv` in `sgl-kernel/csrc/attention/cutlass_sm100_mla/device/sm100_mla.hpp`):
# with `max_seq_len = PAGE * page_table.size(1)`,
# `max_splits = ceil(max_seq_len / 128)`, `heur = min(max_splits, max(1, sm_count // B))`,
# `split = ceil(max_splits / ceil(max_splits / heur))`. The workspace holds fp32
# `o_acc [B, 128, split, 512]` and then `lse_acc [B, split, 128]`
# (`kernel/sm100_fmha_mla_tma_warpspecialized.hpp`, `to_underlying_arguments`): 262,656 bytes per
# (batch, split). `mla_edu`'s kernels keep their [LSE](../docs/glossary.md#lse) as `[B, H, split]` and write only the real
# heads: the same layout per head, with the head and split axes of the LSE swapped, and fewer bytes when
# H < 128 (sgl-kernel's holds 128 heads whatever H is).

# %%
print(" B | max_seq_len | auto split | workspace MiB")
for bsz in (1, 8, 64, 128):
    for msl in (128, 4224):
        s = num_kv_splits_for(msl, bsz, 132, -1)
        print(f"{bsz:3d} | {msl:11d} | {s:10d} | {get_workspace_size(msl, bsz, 132, -1) / 2**20:8.1f}")
assert get_workspace_size(128, 1, 132, 1) == 262_656
assert [b for b in range(1, 129) if num_kv_splits_for(4224, b, 132, -1) > 1] == list(range(1, 67))

# %% [markdown]
# Read the `max_seq_len = 128` rows as "a page table one page wide". That is what SGLang's
# cutlass backend captured before PR #6998: dummy lengths of 1 at capture gave
# [`max_seqlen_pad = 1`](../docs/glossary.md#max_seqlen_pad), a table view `[:bs, :1]`, one split and a workspace sized for it. A CUDA
# graph freezes all of that. With 4224 (33 pages, the full buffer width at context 4096) a batch
# of up to 66 requests gets more splits on 132 [SMs](../docs/glossary.md#sm) (from 67 on, `sm_count // B` is 1 and so is the
# split) and needs a bigger workspace: a workspace sized at capture for one split is too small for
# them. `mla_decode` raises instead of writing past its end:

# %%
ws_small = torch.empty(get_workspace_size(16 * case.page_table.size(1), 4, 132, 1), dtype=torch.uint8, device=DEVICE)
try:
    mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws_small, case.sm_scale, 4,
               impl="torch")
except ValueError as e:
    print("ValueError:", str(e).split(";")[0])
else:
    raise AssertionError("expected a ValueError: the workspace is sized for one split")

# %% [markdown]
# ## 6. Four implementations, one answer (optional)
#
# | impl | what it is | graph-safe |
# |---|---|---|
# | `reference` | float32, loop over requests (section 3) | no: reads lengths on the host |
# | `torch` | split-KV in torch ops, stage 1 one custom op `mla_edu::mla_decode_torch_stage1` (16 requests at a time); partials go through the workspace bytes | yes: one op to the graph; on CUDA fixed shapes and no host sync inside it (on CPU it gathers only the tokens the lengths need, as a kernel's loop does) |
# | `triton` | two Triton kernels: stage 1 grid `(B, head blocks, splits)`, stage 2 merge; custom ops `mla_edu::mla_decode_stage1/2` | yes |
# | `cutlass` | `sgl_kernel.cutlass_mla_decode` | yes (SM100 only) |
#
# The Triton version follows SGLang's own Triton MLA decode (`triton_ops/decode_attention.py`):
# grid `(B, ceil(H / BLOCK_H), splits)`, online softmax over blocks of tokens, partial output and
# LSE out, then a merge kernel. Here it runs in Triton's CPU interpreter.
#
# Triton has wheels for Linux only. Where it is not installed (macOS, Windows), a cell that needs it says so
# in one line and shows the output of the committed run instead, and the demos of sections 6-8 run the torch
# kernel (`IMPL`), which prints the same.

# %%
# stored output: impls
for impl in ("reference", "torch", "triton") if TRITON else ("reference", "torch"):
    for splits in (1, 3, -1):
        ws = case.workspace(splits)
        out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale,
                         splits, impl=impl)
        print(f"{impl:9s} splits={splits:2d}: finite {bool(torch.isfinite(out).all())}, "
              f"matches float64 (rel. err < 1e-5) {rel_err(out) < 1e-5}")
        assert rel_err(out) < 1e-5
if not TRITON:
    show_stored(NB, "impls", lines_from="triton")

# %% [markdown]
# With more than one split the partials really travel through the workspace, as in the real
# kernel. This package's kernels write the real heads only: `o_acc [B, H, S, 512]` then
# `lse_acc [B, H, S]`, float32, at the front of the workspace (sgl-kernel's kernel reserves 128 heads,
# which is why `get_workspace_size` asks for more). To count what a launch writes, fill every
# float32 word with a sentinel no result can equal, a NaN (the partials of finite inputs are finite, or
# $-\infty$ for an empty split's LSE), then count the words that changed:

# %%
SENTINEL = 0x7FC0FFEE  # float32 bit pattern of a NaN: finite inputs give no NaN partial
for splits in (1, 3):
    ws = case.workspace(splits)
    ws.view(torch.int32).fill_(SENTINEL)
    mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws, case.sm_scale, splits,
               impl=IMPL)
    written = int((ws.view(torch.int32) != SENTINEL).sum())
    b, h, d_latent = case.q_nope.shape
    expected = b * h * splits * (d_latent + 1) if splits > 1 else 0  # o_acc + lse, in float32 words
    print(f"splits={splits}: {written} float32 words written; B*H*S*(512+1) = {expected}")
    assert written == expected

# %% [markdown]
# ## 7. The row-stride policy (core)
#
# The kernel reads page `j` of request `b` at flat index `b * row_stride + j` of the table's
# storage. `stride_policy="size"` is the cutlass wrapper (`row_stride = page_table.size(1)`,
# from `page_table.sizes()[1]` in `cutlass_mla_kernel.cu`); `"stride"` is FlashMLA
# (`block_table.stride(0)`). Every impl here defaults to `"size"`, the contract it mirrors. Put
# the table in a wider persistent buffer and hand over the narrow view `[:B, :1]`:

# %%
w = case.page_table.size(1)
buf = torch.full((6, w + 4), 1, dtype=torch.int32, device=DEVICE)  # persistent buffer, initialised to 1 like SGLang's
buf[:4, :w] = case.page_table
for name, table, policy in (("narrow view [:B, :1]", buf[:4, :1], "size"),
                            ("narrow view [:B, :1]", buf[:4, :1], "stride"),
                            ("full width [:B]     ", buf[:4], "size")):
    out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, table, case.workspace(1), case.sm_scale,
                     impl=IMPL, stride_policy=policy)
    ok = [bool(((out[i].double() - truth[i]).norm() / truth[i].norm()) < 1e-5) for i in range(4)]
    print(f"{name} policy={policy!r:9s} per-request correct: {ok}")
    assert ok == ([True, False, False, False] if policy == "size" and table.size(1) == 1 else [True] * 4)

# %% [markdown]
# Only request 0 survives the `"size"` policy on the narrow view; `"stride"` or a full-width view
# is right. That is the trigger of the bug SGLang PR #6998 fixes, in one cell; notebook 06 shows it inside a CUDA graph.
#
# ## 8. Checked mode (optional)
#
# The real kernel reads whatever memory an out-of-range page id points at. Without `checked`, the
# impls here clamp such an id to the last page; `checked=True` turns the read into NaN for that
# request (clamp + mask, no host sync) and leaves the others alone. To see the difference, the last
# page must hold what a real cache holds there, another request's tokens, not poison: copy request
# 2's first page into it. Then point request 3's second page at id $10^6$:

# %%
bad = case.page_table.clone()
bad[3, 1] = 10**6
last = case.cache.size(0) - 1
assert last not in case.page_table.flatten().tolist()  # the last page belongs to no request
cache = case.cache.clone()
cache[last] = case.cache[case.page_table[2, 0]]  # 16 finite tokens of request 2
for checked in (False, True):
    out = mla_decode(case.q_nope, case.q_pe, cache, case.seq_lens, bad, case.workspace(2), case.sm_scale, 2,
                     impl=IMPL, checked=checked)
    err3 = ((out[3].double() - truth[3]).norm() / truth[3].norm()).item()
    others_right = rel_err(torch.cat([out[:3], truth[3:].to(out.dtype)])) < 1e-5
    print(f"checked={checked!s:5s}: request 3 NaN {bool(out[3].isnan().any())}, "
          f"request 3 right {err3 < 1e-5}, requests 0-2 right {others_right}")
    assert others_right and bool(out[3].isnan().any()) == checked and not err3 < 1e-5

# %% [markdown]
# Unchecked, request 3 gets a finite answer computed partly over request 2's tokens: silently
# wrong. Checked, the same request is NaN, and the three others are unchanged.

# %% [markdown]
# ## 9. The real kernel, and why it cannot run here (optional)
#
# `impl="cutlass"` calls `sgl_kernel.cutlass_mla_decode`. That kernel is CUTLASS's SM100 MLA
# (`sm100_fmha_mla_tma_warpspecialized.hpp`: tcgen05 tensor-core instructions and tensor memory),
# which exists only on Blackwell GPUs (B200, GB200). It does not run on Hopper (H100/H200) nor on
# a CPU; the Hopper counterpart is FlashMLA. The argument checks run everywhere:

# %%
args = [torch.zeros(2, 16, 512, dtype=torch.bfloat16), torch.zeros(2, 16, 64, dtype=torch.bfloat16),
        torch.zeros(8, 64, 576, dtype=torch.bfloat16), torch.ones(2, dtype=torch.int32),
        torch.zeros(2, 4, dtype=torch.int32), torch.empty(get_workspace_size(256, 2), dtype=torch.uint8)]
check_cutlass_args(*args)
print("valid bf16 arguments, page 64, block_num 4: accepted")
for label, changes in (("block_num 3 with page 64", {4: torch.zeros(2, 3, dtype=torch.int32)}),
                       ("float32 tensors", {0: torch.zeros(2, 16, 512), 1: torch.zeros(2, 16, 64),
                                            2: torch.zeros(8, 64, 576)}),
                       ("129 heads", {0: torch.zeros(2, 129, 512, dtype=torch.bfloat16),
                                      1: torch.zeros(2, 129, 64, dtype=torch.bfloat16)}),
                       ("page 48", {2: torch.zeros(8, 48, 576, dtype=torch.bfloat16)})):
    bad_args = list(args)
    for i, value in changes.items():
        bad_args[i] = value
    try:
        check_cutlass_args(*bad_args)
    except (ValueError, TypeError) as e:
        print(f"{label}: {type(e).__name__}: {e}")
    else:
        raise AssertionError(f"{label}: expected check_cutlass_args to refuse it")

# %%
# NBVAL_IGNORE_OUTPUT
print("here:", cutlass_unavailable_reason() or "cutlass_mla_decode can run")
try:
    mla_decode(*args, 1 / math.sqrt(192), impl="cutlass")
except RuntimeError as e:
    print("RuntimeError:", e)

# %% [markdown]
# ## What we saw (core)
#
# - Decode is a gather through the page table plus multi-query attention over 576-wide rows;
#   float64 ground truth agrees with all three CPU impls, and NaN-poisoned unused pages prove that
#   nothing outside a request's pages is read.
# - Split-KV computes normalized partials + LSE per split and merges them exactly; the partials
#   live in the workspace, whose size and the split count come from shapes on the host.
# - The page table's row stride is a host-side decision: `size(1)` (cutlass) or `stride(0)`
#   (FlashMLA). With a narrow view only request 0 reads its own pages.
# - `cutlass_mla_decode` is Blackwell-only; its argument contract is checked everywhere.
#
# The same kernel on the H200, against FlashMLA, read off its compiled code, and on ragged batches:
# notebook 09, after the story (00-08), for the GPU track or for reading at home.
#
# ## Exercises (optional)
#
# Predict, then run: write your prediction in the variable (it is `...` until you do), then run the
# cell after it, which runs the experiment and checks your prediction (`mla_edu.workshop.checks`). The
# instructor hands out the answers, with the why, after the exercise.
#
# **1.** Using the formula of section 5 (automatic splits) on a GPU with 148 SMs (a B200, where sgl-kernel's
# cutlass decode runs; section 5 used 132), what is the smallest batch size at which a table of
# `max_seq_len = 4096` (32 pages of 128) gets only one split?

# %%
ex1_first_single_split_batch = ...  # an int

# %%
from mla_edu.kernels.contract import pages_read  # noqa: E402
from mla_edu.workshop import checks  # noqa: E402

first_single = next(bsz for bsz in range(1, 1000) if num_kv_splits_for(4096, bsz, 148, -1) == 1)
r1 = checks.check_number("exercise 1", ex1_first_single_split_batch, first_single, mistakes={
    first_single - 1: "compute the formula at that batch size, step by step: heur, then split",
    67: "that is 132 SMs' answer (section 5): redo it with sm_count = 148",
    149: "heur has a floor of 1: find the batch size where heur first equals 1, not where sm_count // B is 0"})

# %% [markdown]
# **2.** Make `naive_decode` read the page table through a `row_stride`: request `b`'s page `j` at flat
# index `b * row_stride + j` (what `pages_read` computes). Feed it section 7's narrow view `[:4, :1]` with
# `row_stride = size(1)`. Section 7 showed that only request 0 comes out right. Which of the others come
# out NaN, a loud failure, rather than finite and silently wrong? The cell clamps an id outside the cache
# to the nearest page, 0 or the last, as an unchecked kernel reads whatever lies there. (Section 2
# printed the table; a set of request rows.)

# %%
ex2_nan_requests = ...  # a set of request rows

# %%
buf7 = torch.full((6, case.page_table.size(1) + 4), 1, dtype=torch.int32, device=DEVICE)  # section 7's buffer
buf7[:4, : case.page_table.size(1)] = case.page_table
view = buf7[:4, :1]  # its narrow view
n_pages = [math.ceil(n / case.cache.size(1)) for n in case.seq_lens.tolist()]
read = pages_read(view, n_pages, row_stride=view.size(1))  # the page ids each request reads
strided_table = torch.tensor([row + [0] * (max(n_pages) - len(row)) for row in read], dtype=torch.int32,
                             device=DEVICE).clamp(0, case.cache.size(0) - 1)  # out-of-range ids clamped into the cache
strided = naive_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, strided_table, case.sm_scale)
right_rows = {i for i in range(4) if ((strided[i].double() - truth[i]).norm() / truth[i].norm()) < 1e-5}
assert right_rows == {0}  # section 7's result, from the reference gather
nan_rows = {i for i in range(4) if strided[i].isnan().any()}
r2 = checks.check_items("exercise 2", ex2_nan_requests, nan_rows, mistakes={
    frozenset(): "list the flat indices each request reads, then what the clamp makes of the ids there; which "
                 "pages does section 2 fill with NaN?",
    frozenset(range(4)): "request 0 reads its own page: it is right, so finite"})

# %% [markdown]
# **3.** In section 4, cut request 2 into three splits, `(0, 32)`, `(32, 32)` (empty) and `(32, 50)`. What
# are the empty split's `lse` and `o`, computed as section 4's cell computes a split (`torch.logsumexp` and
# `torch.softmax` over its scores, in float64)? And does the merge still equal the full softmax? (A kernel that
# divides its accumulator by its row sum would get 0/0 there: what it must guard is the point.)

# %%
ex3_empty_lse = ...  # "-inf", "0" or "nan"
ex3_empty_o = ...  # "zeros" or "nan"
ex3_merge_right = ...  # True or False

# %%
kv2 = case.cache.reshape(-1, 576)[case.token_slots[2]].double()  # request 2's 50 rows, as in section 4
x2 = torch.cat([case.q_nope[2], case.q_pe[2]], -1).double() @ kv2.T * case.sm_scale  # [H, 50]
parts3 = []
for lo, hi in ((0, 32), (32, 32), (32, 50)):
    parts3.append((torch.softmax(x2[:, lo:hi], -1) @ kv2[lo:hi, :512], torch.logsumexp(x2[:, lo:hi], -1)))
empty_o, empty_lse = parts3[1]
w3 = torch.softmax(torch.stack([lse for _, lse in parts3]), 0)  # [S, H]: the empty split's weight is 0
merged3 = sum(w3[s][:, None] * parts3[s][0] for s in range(3))


def kind(t):
    return "nan" if bool(t.isnan().any()) else "-inf" if bool((t == -math.inf).all()) else \
        "zeros" if bool((t == 0).all()) else "0" if t.numel() == 0 else "other"


r3 = [checks.check_choice("exercise 3, lse", ex3_empty_lse, {"-inf": "log 0", "0": "zero", "nan": "not a number"},
                          {"zeros": "0"}.get(kind(empty_lse), kind(empty_lse))),  # the lse's option for zeros is "0"
      checks.check_choice("exercise 3, o", ex3_empty_o, {"zeros": "all zeros", "nan": "not a number"}, kind(empty_o)),
      checks.check_choice("exercise 3, merge", ex3_merge_right, {True: "right", False: "wrong"},
                          torch.allclose(merged3, truth[2], atol=1e-12))]

