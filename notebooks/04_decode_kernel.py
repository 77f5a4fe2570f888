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
# SGLang's `cutlass_mla` backend, including the two host-side details the bug of notebook 06
# hinges on: the page table's row stride and the split count.
#
# **You need** a CPU; Run All takes seconds on a 2-core CPU (its measured time is in README's table of
# notebooks; Triton runs in its CPU interpreter; section 11 compiles for the H200). GPU numbers are read from a committed H200 run.

# %%
import math

import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 when there is no GPU)
from mla_edu import MLAConfig
from mla_edu.attention import cost
from mla_edu.kernels import (check_cutlass_args, cutlass_unavailable_reason, get_workspace_size, mla_decode,
                             num_kv_splits_for, triton_available)
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kernels.plots import kernel_bench_figure, load_bench
from mla_edu.workshop.stored import show_stored

_ = torch.manual_seed(0)
NB = "04_decode_kernel"
TRITON = triton_available()  # Triton has Linux wheels only: elsewhere its cells show the committed run's output
IMPL = "triton" if TRITON else "torch"  # the kernel of sections 6-8's demos: both print the same

# %% [markdown]
# ## 1. The contract (core)
#
# After weight absorption (notebook 02) decode is multi-query attention over the latent cache:
# every head's query has a 512-wide part `q_nope` (already multiplied by $W_{UK}$) and a 64-wide
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
# How much work is one call? Bytes: the cache rows read (576 x 2 bytes per token in bf16).
# FLOPs: `2 * L * H * (576 + 512)` per request. Intensity: `mla_edu.attention.cost.decode_intensity`,
# the function notebook 02 prints too (the cache, q in and o out all counted), 228 FLOP per byte at
# 128 heads and 30 at 16 for 64 requests of 4096 tokens: about $1.89\, H$.

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
# out-of-range id. A kernel that reads anything it should not returns NaN.

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

# %% [markdown]
# On a GPU this is one program per request: with few, long requests most of the chip idles.
#
# ## 4. Split-KV (core)
#
# Cut request `b`'s pages into `S` splits. Each split `s` computes its own normalized partial
# output $o_s$ and log-sum-exp $\ell_s = \log \sum_{t \in s} e^{x_t}$; since
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

# %% [markdown]
# ## 5. How many splits, and how big a workspace (core)
#
# sgl-kernel decides the split count **on the host, from shapes only**
# (`MLA::set_split_kv` in `sgl-kernel/csrc/attention/cutlass_sm100_mla/device/sm100_mla.hpp`):
# with `max_seq_len = PAGE * page_table.size(1)`,
# `max_splits = ceil(max_seq_len / 128)`, `heur = min(max_splits, max(1, sm_count // B))`,
# `split = ceil(max_splits / ceil(max_splits / heur))`. The workspace holds fp32
# `o_acc [B, 128, split, 512]` and then `lse [B, split, 128]`
# (`kernel/sm100_fmha_mla_tma_warpspecialized.hpp`, `to_underlying_arguments`): 262,656 bytes per
# (batch, split). `mla_edu`'s kernels keep their [LSE](../docs/glossary.md#lse) as `[B, H, split]`; the byte count is the same.

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
# of up to 66 requests gets more splits on 132 SMs (from 67 on, `sm_count // B` is 1 and so is the
# split) and needs a bigger workspace: a workspace sized at capture for one split is too small for
# them. `mla_decode` raises instead of writing past its end:

# %%
ws_small = torch.empty(get_workspace_size(16 * case.page_table.size(1), 4, 132, 1), dtype=torch.uint8, device=DEVICE)
try:
    mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, ws_small, case.sm_scale, 4,
               impl="torch")
except ValueError as e:
    print("ValueError:", str(e).split(";")[0])

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
# `lse [B, H, S]`, float32, at the front of the workspace (sgl-kernel's kernel reserves 128 heads,
# which is why `get_workspace_size` asks for more). To count what a launch writes, fill every
# float32 word with a sentinel no result can equal, a quiet NaN with payload `0xFFEE` (arithmetic
# only ever makes the canonical NaN), then count the words that changed:

# %%
SENTINEL = 0x7FC0FFEE  # float32 bit pattern: a NaN that no computation produces
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

# %% [markdown]
# Only request 0 survives the `"size"` policy on the narrow view; `"stride"` or a full-width view
# is right. That is SGLang #6998's trigger in one cell; notebook 06 shows it inside a CUDA graph.
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

# %%
# NBVAL_IGNORE_OUTPUT
print("here:", cutlass_unavailable_reason() or "cutlass_mla_decode can run")
try:
    mla_decode(*args, 1 / math.sqrt(192), impl="cutlass")
except RuntimeError as e:
    print("RuntimeError:", e)

# %% [markdown]
# ## 10. On the H200 (optional)
#
# `python -m tools.kernel_bench --pages 64` ran the Triton kernel on one H200 (through this
# project's device tool) in bf16 over h_q {16, 128}, B {1, 8, 64, 128}, L {512 ... 32768}, page 64,
# measuring the two ceilings in the same run, and two peers on the same cache bytes in the same
# process: SGLang's own Triton MLA decode kernel (`decode_attention_fwd` from the sglang 0.4.7 wheel,
# the kernel behind its `triton` backend) and FlashMLA (DeepSeek's Hopper kernel, built from source
# on that machine). Times are CUDA-graph [replays](../docs/glossary.md#replay). Every split count the rule below can pick was
# timed, so the table shows the rule's split next to the best one. The results:
# `results/kernel_bench_h200.md` (table) and `.json` (all numbers).
#
# **The split rule.** sgl-kernel's heuristic (section 5) looks at B and the SM count only. The Triton
# kernel has its own, `triton_num_kv_splits`: a program is one (request, head block, split); on the
# H200 one program fits on an SM (two 72 KB page tiles in shared memory); the rule counts whole waves
# of programs times the pages each walks, plus the cost of the merge, and takes the cheapest split.
# The triton serving backend uses it for `num_kv_splits=-1`; the cutlass backend keeps sgl-kernel's
# heuristic, whose choice is also in the table ("cutlass auto").
#
# **Which kernel.** On a Hopper GPU stage 1 is not the plain-Triton kernel of section 6 but a Gluon
# kernel, `mla_edu/kernels/split_kv_wgmma.py` (section 11 says why and what it does differently);
# `--kernels` timed the plain-Triton one ("tl") on the same problems too.

# %%
from mla_edu.kernels.plots import summary  # noqa: E402

info = bench["info"]
print(f"{info['gpu']}, {info['sm_count']} SMs, torch {info['torch']}, triton {info['triton']}")
print("peers:", info["sglang"].split(":")[0], "|", info["flash_mla"].split(" (")[0])
sm = summary(bench)
print(f"{sm['shapes']} shapes; the rule's split within 10% of the best split at {sm['rule_within_10pct']} "
      f"(worst {sm['rule_worst_ratio']:.2f}x)")
print(f"faster than SGLang's Triton kernel at {sm['faster_than_sglang']} of the {sm['sglang_shapes']} shapes it "
      f"runs (at least {sm['min_speedup_vs_sglang']:.2f}x)")
print("every output within 2e-2 of float64 (bf16):", sm["max_rel_err"] < 2e-2)
for h in (16, 128):
    p = sm[f"h{h}_B64_L4096"]
    print(f"h_q={h:3d}, B=64, L=4096: {p['us']:.0f} us = {p['pct_copy']:.0f}% of copy, "
          f"{p['pct_matmul']:.0f}% of matmul;"
          f" FlashMLA {p['flashmla_us']:.0f} us ({p['flashmla_pct_copy']:.0f}% / {p['flashmla_pct_matmul']:.0f}%),"
          f" mla_edu at {p['speed_vs_flashmla']:.2f}x its speed; SGLang {p['sglang_us']:.0f} us")
h128, h16 = sm["h128_B64_L4096"], sm["h16_B64_L4096"]
assert h128["pct_matmul"] > 50 and h16["pct_copy"] > 80  # over half the matmul rate; over 80% of the copy rate
assert sm["faster_than_sglang"] == sm["sglang_shapes"]
# the rule's split is within 10% of the best at every shape but one (the text below says why)
slow = [(r["heads"], r["batch"], r["seq_len"]) for r in bench["results"]
        if r["triton_rule_us"] > 1.1 * min(r["triton_split_us"].values())]
assert slow == [(128, 1, 2048)] and sm["rule_within_10pct"] == sm["shapes"] - 1

# %%
figs = kernel_bench_figure()  # three figures: h_q = 16 (memory-bound), h_q = 128 (compute-bound), the roofline

# %% [markdown]
# Reading the plot. **h_q = 16** is memory-bound (30 FLOP per byte, far under the ridge). At
# B = 64 and 128 with L >= 4096 the kernel streams at 90-107% of the copy ceiling (a stream that
# only reads can pass a copy's read + write rate), 1.00-1.03x FlashMLA's speed; FlashMLA leads at
# large batch and short context (0.83x at B = 128, L = 512). **h_q = 128** is compute-bound (228 FLOP
# per byte): at B >= 64 and L >= 2048 the kernel reaches 57-66% of the matmul ceiling, FlashMLA
# 87-98% on the same bytes (mla_edu at 0.64-0.71x its speed), the plain-Triton kernel 31-35%. All
# three hold 64 heads per program at h_q = 128, one program per SM. The differences are in how the
# two warpgroups share a tile of 64 tokens:
#
# - FlashMLA (`csrc/kernels/splitkv_mla.cu` at commit 9edee0c: `wg0_subroutine`, `wg1_subroutine`):
#   the program walks two 64-token blocks per step; warpgroup 0 computes the scores of the first,
#   warpgroup 1 those of the second, in phases over the nine 64-wide slices of the 576, each slice
#   waited for as TMA brings it in. Each warpgroup owns one half of the 512 output columns for P V
#   and reads the other's P from shared memory. While one warpgroup runs its softmax the other
#   keeps the tensor cores busy.
# - Plain Triton: `tl.dot` lets the compiler place the warps. Because the scores feed a second dot,
#   it lays Q K^T out over the rows (the flash-attention layout), and with only 64 rows both
#   warpgroups compute the same 64 x 64 score tile: Q K^T is done twice. The profiler (`ncu`,
#   `results/kernel_profile_h200_ncu.txt`) showed the tensor pipe busy 36% of the time and DRAM at
#   20% of its peak: neither roof reached, the kernel bound by its serial chain.
# - The Gluon kernel: the scores split between the warpgroups (each its own 32 tokens), P through
#   shared memory, P V split by output columns as FlashMLA does, pages brought in by TMA. It still
#   runs load, scores, softmax and P V one after another in both warpgroups, which is what is left
#   between it and FlashMLA (`docs/kernel_essay.md`).
#
# The rule's one miss, h_q = 128, B = 1, L = 2048: it takes 16 splits where 32 ran 1.21x faster in this run. Its
# stage 2 cost (the second launch, the merge's partials) was fitted on every H200 timing of the split counts; to
# that model this shape is alike to h_q = 64, B = 4, L = 1024, which today's stage 1 runs fastest at 8 splits, half
# of 16 (`kernel_lab/results/split_model_fit_h200.md`). This run timed an earlier stage 1.
#
# SGLang's Triton kernel is slower at every shape it runs (1.14x and more; its 16-head programs
# read every page 8 times at h_q = 128; its int32 offsets cannot address a cache of 2^31 elements,
# the two largest B = 128 shapes). The cutlass-auto column shows what sgl-kernel's heuristic costs:
# at h_q = 128, B = 64 it picks 2 splits where one wave of 128 programs is already there.
#
# ## 11. What the compiler made of it (optional)
#
# A GPU engineer checks a claim like "Q K^T is done twice" in the compiled code, and Triton compiles
# for the H200 on any machine: `mla_edu.kernels.sm90` runs Triton's compiler and the `ptxas` it ships
# for sm_90a, on the kernel as the JIT would see it at h_q = 128 (64-head programs, 8 warps), and
# reads two things. The layout of each wgmma result (`warps [m, n]`: how the 8 warps, two
# warpgroups of 4, tile the output; `instr [16, n, 16]`: the instruction's shape), and the wgmma
# instructions in the PTX, which are the tile loop's, per warpgroup.
#
# Triton's rule (`AccelerateMatmul.cpp`, `warpsPerTileV3`, in `docs/sources.md`): a dot whose result
# feeds another dot gets every warp along M. The scores feed P V, M is 64 heads, and 8 warps along
# 64 rows means both warpgroups cover all of them. `mla_edu/kernels/split_kv_wgmma.py` writes the
# same kernel in Gluon, Triton's dialect with explicit layouts: scores `[4, 2]` (each warpgroup its 32
# of the tile's 64 tokens), P through shared memory, P V `[4, 2]` (each warpgroup its 256 of the 512
# columns, as FlashMLA splits them).

# %%
from mla_edu.kernels import sm90  # noqa: E402

# stored output: sm90-compile
if TRITON:
    compiled = sm90.compile_stage1(["tl", "cp.async", "tma"])  # three compiles for sm_90a: a few seconds
    for kind, r in compiled.items():
        print(f"{kind:8s} {'; '.join(r['mma_layouts'])}")
        print(f"{'':8s} per tile and warpgroup: " + ", ".join(f"{n} x {shape}" for shape, n in r["wgmma"].items()))
        assert r["registers"] <= 255 and r["shared_bytes"] <= sm90.MAX_SHARED
    scores = {kind: r["wgmma"]["m64n32k16"] for kind, r in compiled.items()}
    assert scores["tl"] == 2 * scores["cp.async"] == 2 * 576 // 16  # 576 / 16 k-steps of one 64 x 32 score block
    macs = {kind: 64 * 32 * 16 * scores[kind] + 64 * 256 * 16 * r["wgmma"]["m64n256k16"] for kind, r in compiled.items()}
    print(f"tensor work per tile and warpgroup: tl {macs['tl'] / 1e6:.2f} M multiply-adds, "
          f"Gluon {macs['cp.async'] / 1e6:.2f} M ({macs['tl'] / macs['cp.async']:.2f}x less)")
else:
    show_stored(NB, "sm90-compile")

# %% [markdown]
# The tl kernel's score layout is `[8, 1]` with twice the score instructions of the Gluon kernel,
# whose two layouts are both `[4, 2]`; P V is the same in both. The Gluon kernel comes in two kinds
# that differ only in how a page tile reaches shared memory: `cp.async` (each thread copies 16-byte
# pieces, any page size) and TMA (the bulk copy engine: a few instructions move a whole tile, no
# per-thread addresses; one page per tile). On the H200 the TMA kind is the faster (169 against
# 196 us at h_q = 128, B = 64, L = 4096; the tl kernel 321 us): 1.53x less tensor work, 1.9x less
# time. It is what a Hopper GPU runs at 16 and 32 heads a program; at 64, section 11's two-warpgroup
# kernel replaced it (`stage1.DEFAULT_GLUON = "seesaw"`, the stage 1 the plan carries unless
# a call names another).
#
# At h_q = 16 the problem is the other way round. A wgmma's M is 64 rows; 16 heads as M would leave
# three quarters of every instruction empty (FlashMLA does pad so: its M is the request's query
# rows, in blocks of 64). The Gluon kernel for 16 and 32 heads a program, `stage1_swapped_kernel`,
# swaps the operands: the scores as `S^T = K q^T` (M = the tile's 64 tokens, n = 16 heads), the softmax
# down the columns, the output as `O^T = V^T P^T` (M = the 512 latent columns, read transposed from
# the same tile in shared memory). One warpgroup does it all:

# %%
# stored output: sm90-swapped
if TRITON:
    swapped = sm90.compile_stage1(["tl", "tma"], heads=16)
    for kind, r in swapped.items():
        ops = r["wgmma"] or {f"mma.sync {k} per warp": n for k, n in r["mma_sync"].items()}
        print(f"{kind:4s} {'; '.join(r['mma_layouts'])}: " + ", ".join(f"{n} x {k}" for k, n in ops.items()))
    assert swapped["tma"]["mma_layouts"] == ["warps [4, 1], instr [16, 16, 16]"]  # one warpgroup, heads as n
    assert swapped["tma"]["wgmma"] == {"m64n16k16": 576 // 16 + (512 // 64) * (64 // 16)}  # scores, then P V
else:
    show_stored(NB, "sm90-swapped")

# %% [markdown]
# The plain-Triton kernel falls back to the Ampere-style `mma.sync` (16 x 8 tiles, per warp) at 16
# heads. The swapped kernel issues 36 score and 32 output wgmma per tile, none of them padded, and
# with the same TMA ring it keeps the pages coming: 79 us at B = 64, L = 4096, 90% of the copy
# ceiling (the tl kernel 87 us).
#
# FlashMLA's answer at 128 heads (section 10: two warpgroups taking turns on pairs of tiles) is written in
# Gluon too, as the stage-1 kind `"seesaw"` (`mla_edu/kernels/split_kv_seesaw.py`): each warpgroup is its
# own partition (`gl.warp_specialize`), scores its own tile of the pair with n = 64, and multiplies its own
# P from registers and the other's from shared memory by its 256 output columns; the row max, its scales
# and the P tiles pass between them through shared memory, each hand-off an mbarrier. What it costs:

# %%
# stored output: sm90-seesaw
if TRITON:
    seesaw = sm90.compile_stage1(["seesaw"])["seesaw"]
    print(f"seesaw {'; '.join(seesaw['mma_layouts'])}")
    print("       per warpgroup and pair of tiles: " + ", ".join(f"{n} x {k}" for k, n in seesaw["wgmma"].items()))
    print(f"       {seesaw['registers']} registers a thread, {seesaw['spill_bytes']} bytes spilled, "
          f"{seesaw['shared_bytes']:,} of {sm90.MAX_SHARED:,} bytes of shared memory")
    assert seesaw["wgmma"] == {"m64n64k16": 576 // 16, "m64n256k16": 2 * 64 // 16}  # one tile scored, two multiplied
    assert seesaw["spill_bytes"] == 0 and sm90.MAX_SHARED - seesaw["shared_bytes"] < 2048  # full to its last 2 KB
else:
    show_stored(NB, "sm90-seesaw")

# %% [markdown]
# Two later changes trim the softmax between the products (`docs/kernel_essay.md`). A row's scale
# 2^(m_old - m_new) is exactly 1 wherever its max did not move, and the seesaw keeps a row's max until a score
# passes it by more than 8 in log2 units, FlashAttention-4's threshold for 16-bit inputs: P is then at most 2^8,
# and the sums, taken against the same max, are unchanged. After a request's first tiles almost every scale is
# 1, so each warpgroup tests "any scale not 1" with one warp reduction and skips the multiply of its 64 x 256
# float32 output, twice a pair. The price is in P's bf16 rounding: its largest entry is no longer exactly 1
# (`kernel_lab/tools/stale_max_error.py`). And each score is scaled inside its exponential, 2^(S qk_scale - m): one fused
# multiply-add. Both can be read in the PTX:

# %%
# stored output: sm90-seesaw-ptx
if TRITON:
    skipped = [n for n in sm90.skipped_multiplies(seesaw["ptx"]) if n]
    fused = sm90.exponentials_of_an_fma(seesaw["ptx"])
    print(f"rescales behind a branch: {len(skipped)}, each skipping {skipped[0]} multiplies a thread; "
          f"exponentials whose argument is one fma: {fused}")
    assert skipped == [64 * 256 // 128] * 4  # 2 a pair in each warpgroup: its [64, 256] float32 over 128 threads
    assert fused == 2 * 64 * 64 // 128  # each warpgroup's P tile, 64 x 64 over 128 threads
else:
    show_stored(NB, "sm90-seesaw-ptx")

# %% [markdown]
# The scores are n = 64 products now: 4 KB of shared-memory operands per 64K multiply-adds, where the
# lock-step kernel's n = 32 ones read 3 KB per 32K. The second P tile fills shared memory to its last
# 1.2 KB: q_pe (8 KB) had to move into each warpgroup's registers, as FlashMLA keeps one of its nine q
# pieces in registers.
#
# Do the hand-offs hide the softmax? The prediction, written before any run,
# was 120-145 us at B = 64, L = 4096, where the TMA kernel took 174. The H200's answer, every stage-1
# kernel timed on the same bytes in one run (`python -m tools.kernel_bench --quick --kernels --pages 64`,
# `results/kernel_bench_h200_stage1.md`; us):

# %%
from mla_edu.paths import RESULTS_DIR  # noqa: E402

stage1_bench = load_bench(RESULTS_DIR / "kernel_bench_h200_stage1.json")
for r in (r for r in stage1_bench["results"] if r["heads"] == 128):
    k = r["kernels"]
    print(f"h_q 128 B {r['batch']:2d} L {r['seq_len']:4d}: seesaw {r['triton_us']:6.1f}, "
          f"TMA {k['tma, 64 heads']['best_us']:6.1f}, tl {k['tl']['best_us']:6.1f}, FlashMLA {r['flashmla_us']:6.1f}")
big = next(r for r in stage1_bench["results"] if (r["heads"], r["batch"], r["seq_len"]) == (128, 64, 4096))
gain = big["kernels"]["tma, 64 heads"]["best_us"] / big["triton_us"]
print(f"B=64, L=4096: {gain:.2f}x the TMA kernel, {big['flashmla_us'] / big['triton_us']:.2f}x FlashMLA")
assert big["stage1"] == "seesaw, 64 heads" and 1.1 < gain  # the pairs pay where there are many tiles
assert big["triton_us"] > big["flashmla_us"]  # ... and FlashMLA is still ahead

# %% [markdown]
# The seesaw kernel takes 1.19x less time than the TMA kernel where each program walks 64 tiles, and
# about the same at the small shapes, where a program holds one or two pairs and the fixed costs
# dominate. It is the default at 64 heads now. FlashMLA is still 1.19x faster: Nsight Compute's stall
# sampling shows both kernels waiting alike for their tiles, and the seesaw's warpgroups waiting more often
# for their own tensor-core products to finish (`kernel_lab/results/kernel_stalls_h200_seesaw.md`).
#
# What the kernel does against FlashMLA, why it is fast, where FlashMLA is still ahead and why, and what was
# tried and did not help, each with its results file: [the kernel lab's essay](../docs/kernel_essay.md).
#
# ## 12. Ragged batches: a balanced schedule (optional)
#
# Every grid above gives each request the same split count, sized from the page table's width: the
# longest request a graph can see. A serving engine's decode batch is ragged: most requests short, a
# few long. Here is one such batch (seeded log-normal lengths, as `tools/schedule_bench.py` draws
# them), B = 64, 16 heads, page 64, on the H200's 132 SMs:

# %%
from collections import Counter  # noqa: E402
from mla_edu.kernels import schedule  # noqa: E402
from mla_edu.kernels.plots import schedule_gantt  # noqa: E402
from mla_edu.kernels.workspace import gpu_block_h, stage2_pages, triton_num_kv_splits  # noqa: E402
from statistics import geometric_mean  # noqa: E402

# stored output: schedule-spans
if TRITON:
    ragged = schedule.lognormal_lengths(64, 2048, seed=0)
    print(f"lengths: min {min(ragged)}, median {sorted(ragged)[32]}, max {max(ragged)}, total {sum(ragged)}")
    rule_splits = triton_num_kv_splits(64 * math.ceil(max(ragged) / 64), 64, 16, 64, 132)  # from the widest row
    rule_programs = schedule.pages_per_program(ragged, 64, 16, 132, rule_splits)  # (request, pages), grid (1, B, splits)
    spans = {"rule": schedule.simulate(rule_programs, 132)[1],  # the block scheduler: next program to the first free SM
             "balanced": schedule.part_timeline(ragged, 64, 16, 132)[1]}  # one persistent program per part and SM
    print(f"the rule's {rule_splits} splits: {len(rule_programs)} programs, done after {spans['rule']:.0f} page-times; "
          f"balanced: done after {spans['balanced']:.0f}")
    assert rule_splits == 2 and spans["balanced"] < spans["rule"] / 4
else:
    show_stored(NB, "schedule-spans")

# %% [markdown]
# The rule sees a 32768-token row and 64 requests: two splits each fill the GPU once. But request 53 is
# the only one that long, so its two programs read 256 pages each while the rest of the GPU sat idle
# long before.
#
# The balanced schedule (`mla_edu.kernels.schedule`) shares the batch's work out instead, the way FlashMLA
# does (below). Request b has $n_b$ pages and costs $w_b = n_b + 5$ page-times (the 5: its q load, the first
# pages in flight, its partial). Lay the 64 costs end to end on one line, request b at $[W_b, W_b + w_b)$
# with $W_b$ the sum of the costs before it: first its overhead, then its pages, page k at $W_b + 5 + k$.
# Cut the line into `num_parts` equal parts, one per SM here (16 heads are one head block, so a part is one
# program): part p takes the pages whose place falls in
# $[p \cdot \text{chunk}, (p + 1) \cdot \text{chunk})$, chunk = ceil(total / parts). The stage-1 grid is
# (parts, head blocks) and each program is persistent: it walks its part's requests in order, reading each
# one's segment of pages. So a long request is cut across several parts, and a part holds several short
# requests. A request that lands in one part is finished there and written to the output; a cut one leaves
# one partial per part, in workspace row p + b. Along the line the next segment is in the next part or of
# the next request, so p + b only grows: one row per segment, `parts + B - 1` rows in all, a size fixed by
# shapes. Stage 2 merges rows $p_{first}(b) + b$ to $p_{last}(b) + b$ by log-sum-exp, as section 4 merged
# splits. Parts 0 and 1, and the first pieces of request 53, from the kernels' own arithmetic
# (`schedule.segments`, here in Triton's interpreter):

# %%
# stored output: schedule-segments
if TRITON:
    max_pages = math.ceil(max(ragged) / 64)  # 512: the widest row
    parts = schedule.num_parts(16, 132, 64, max_pages)  # 132: one head block, one part per SM
    costs = [math.ceil(n / 64) + schedule.FIXED_OVERHEAD_PAGES for n in ragged]  # w_b, in page-times
    chunk = math.ceil(sum(costs) / parts)
    print(f"the line: {sum(costs)} page-times, {parts} parts of {chunk}")
    segs = schedule.segments(ragged, 64, max_pages, parts, 16)  # every part's walk, in workspace-row order
    longest = max(range(64), key=ragged.__getitem__)  # request 53
    print("part  request  tokens          writes   row p + b")
    for s in [s for s in segs if s.part <= 1] + [s for s in segs if s.request == longest][:3]:
        kind = "output" if s.flag == schedule.DIRECT else "partial"
        print(f"{s.part:4d} {s.request:8d}  [{s.t_start:5d}, {s.t_end:5d})  {kind:7s}  {s.part + s.request:9d}")
    pieces, per_part = Counter(s.request for s in segs), Counter(s.part for s in segs)
    print(f"request {longest}: {pieces[longest]} pieces; {sum(v == 1 for v in pieces.values())} of 64 requests whole; "
          f"at most {max(per_part.values())} requests in a part")
    for b, n in enumerate(ragged):  # every token of every request read once, by consecutive parts
        mine = [s for s in segs if s.request == b]
        assert [s.t_start for s in mine] == [0] + [s.t_end for s in mine[:-1]] and mine[-1].t_end == n
        assert [s.part for s in mine] == list(range(mine[0].part, mine[0].part + len(mine)))
        assert {s.flag for s in mine} == {schedule.DIRECT if len(mine) == 1 else schedule.PARTIAL}
    assert len(segs) <= schedule.workspace_rows(64, parts) and schedule.max_pieces(64, 16, parts) == 0  # chunk: the share
    assert chunk < spans["balanced"] <= chunk + schedule.FIXED_OVERHEAD_PAGES  # one fixed cost beyond the share, at most
else:
    show_stored(NB, "schedule-segments")

# %% [markdown]
# Every part holds 29 page-times of the line, yet the last part finishes after 34: a part whose first
# request began in an earlier part pays that request's fixed cost of 5 again, off its own stretch of the
# line. Every other cost it pays lies on its stretch, so no part runs past chunk + 5. (Spread the overhead
# over a request's pages instead, and a part cut on both ends pays nearly two: 38 here.) Below, which SM runs what when. Above, the rule's 128 programs, placed as the block scheduler places
# them (simulated: the next program to the first free SM); below, each SM's persistent program walking its
# part's segments (`schedule.part_timeline`). Request 53 is hatched:

# %%
# stored output: schedule-gantt
if TRITON:
    fig = schedule_gantt(ragged, 64, 16, 132, rule_splits)
else:
    show_stored(NB, "schedule-gantt")

# %% [markdown]
# Why every program computes this **on the device**: the lengths are a device tensor, and the partition
# depends on them. Computing it on the host would need a sync every step, and under a CUDA graph the
# host's answer would be frozen at capture, which is this repository's bug all over again. FlashMLA
# (`docs/sources.md`, at `9edee0c`) therefore has `get_mla_metadata`: one warp
# (`csrc/kernels/get_mla_metadata.cu` lines 8-75) sums the batch's 64-token blocks plus a fixed
# overhead of 5 per request (`csrc/kernels/config.h` line 11), gives each of `num_sm_parts` parts an
# equal payload (line 34: the share plus one overhead, since every piece of a cut request pays its own,
# lines 44-62, and never less than two overheads; `num_sm_parts = sm_count / h_k / ceil(h_q / 64)`,
# `csrc/flash_api.cpp` line 39) and writes where each part begins and ends. Its attention kernel is
# persistent, one CTA per part and 64-head block (`splitkv_mla.cu` line 1339),
# so the grid says nothing about the work: each CTA reads its begin and end from that tensor and walks
# the requests between (`csrc/kernels/splitkv_mla.cu` lines 1019-1039), and the combine kernel merges
# each request's own number of partials (`csrc/kernels/mla_combine.cu` lines 25-30).
#
# mla_edu keeps the idea and drops the kernel that runs first. FlashMLA's thread fills the parts one
# after the other (lines 38-67), so its answer has to be written down for the attention kernel to read.
# Cut the line at multiples of chunk instead, and every part's requests follow from the lengths alone:
# a prefix sum gives each request's place $W_b$, and its parts run from its first page's place,
# $(W_b + 5)$ // chunk, to its last page's, $(W_b + w_b - 1)$ // chunk. With the overhead before the
# pages, the line keeps FlashMLA's bound. So every stage-1 program loads `seq_lens` (one vector of B
# lengths), computes the same closed form and keeps its own part (`schedule.batch_plan`, `part_requests`,
# `segment`); stage 2, whose programs each merge one request's rows for 16 heads, computes it again to
# find those rows. Row p + b stands in for FlashMLA's per-request split offsets (lines 48-49). No table
# and no extra launch: the grid (parts x head blocks) and the workspace are fixed by shapes and the
# kernels read the lengths at every step, so a CUDA graph captured once follows new lengths at each
# replay (`test_graph_replay_follows_new_lengths` in `tests/test_kernels_schedule.py`, which passed on
# the H200 with every stage-1 kernel). The price: every program redoes a prefix sum over B lengths, a few
# vector operations next to its pages' loads.
#
# Does the closed form give up anything against FlashMLA's walk? Its walk, replayed in Python on the same
# batch (`flashmla_schedule.flashmla_parts`: each part's payload, whole requests while they fit, a piece of
# the next if more than its overhead is left), and on one request alone at 128 heads on the H200's 132 SMs,
# where the floor of two overheads sets the piece size:

# %%
from mla_edu.kernels import flashmla_schedule  # noqa: E402

# stored output: schedule-flashmla
if TRITON:
    walk = flashmla_schedule.flashmla_makespan(ragged, 64, parts)  # page-times of FlashMLA's slowest part
    print(f"slowest part: FlashMLA's walk {walk} page-times, the closed form {spans['balanced']:.0f}")
    assert spans["balanced"] <= walk  # the same bound, and no kernel that has to run first
else:
    show_stored(NB, "schedule-flashmla", lines_from="slowest part")
fm_parts = flashmla_schedule.num_sm_parts(128, 132)
one_request = {n: flashmla_schedule.pieces_per_request([n], fm_parts)[0] for n in (1024, 4096, 16384)}
print(f"h_q=128: {fm_parts} parts; one request cut into", ", ".join(f"{k} pieces at L={n}"
                                                              for n, k in one_request.items()))

# %% [markdown]
# On the H200 (`results/kernel_bench_h200_schedule.md`, one run with FlashMLA and SGLang's Triton kernel
# on the same bytes; time in us):

# %%
sched_bench = load_bench(RESULTS_DIR / "kernel_bench_h200_schedule.json")
for r in sched_bench["ragged"]:
    print(f"h_q {r['heads']:3d} B {r['batch']:3d} lengths {r['lens_min']:3d}..{r['lens_max']:5d}: "
          f"rule {r['rule_us']:6.1f}, best fixed split {r['best_us']:6.1f}, balanced {r['balanced_us']:6.1f}, "
          f"FlashMLA {r['flashmla_us']:6.1f}")
geo, geo_rule = (geometric_mean(r["flashmla_us"] / r[key] for r in sched_bench["ragged"])
                 for key in ("balanced_us", "rule_us"))
by_heads = {h: geometric_mean(r["flashmla_us"] / r["balanced_us"] for r in sched_bench["ragged"] if r["heads"] == h)
            for h in (16, 128)}
beats_best = sum(r["balanced_us"] < r["best_us"] for r in sched_bench["ragged"])
print(f"balanced vs FlashMLA: geomean {geo:.2f}x (rule: {geo_rule:.2f}x); h_q=16 {by_heads[16]:.2f}x, "
      f"h_q=128 {by_heads[128]:.2f}x; faster than the best fixed split at {beats_best} of 12 batches")
assert all(r["balanced_us"] < r["rule_us"] for r in sched_bench["ragged"])  # the schedule's gain, every batch
assert geo > 2 * geo_rule and beats_best >= 10  # ... and over the best single split count, chosen after the fact
assert all(r["flashmla_us"] / r["balanced_us"] > 0.92 for r in sched_bench["ragged"] if r["heads"] == 16)
assert by_heads[128] < by_heads[16]  # near FlashMLA at 16 heads; at 128 the kernel itself lags
uniform = next(r for r in sched_bench["uniform"] if (r["heads"], r["batch"], r["lens_max"]) == (128, 64, 4096))
print(f"uniform h_q 128, B 64, L 4096: rule {uniform['rule_us']:.1f} us, FlashMLA {uniform['flashmla_us']:.1f} us, "
      f"{uniform['flashmla_us'] / uniform['rule_us']:.2f}x")
assert uniform["rule_us"] < big["triton_us"]  # the seesaw's later versions, since section 11's run

# %% [markdown]
# The schedule takes the rule's 0.40x of FlashMLA on ragged batches to 1.05x, and beats the best single
# split count (chosen after the fact) at all 12 batches. At 16 heads, where decode reads memory, it is
# within 1% of FlashMLA or faster at every batch. At 128 heads it reaches 0.87-1.06x of FlashMLA. On uniform
# lengths, B = 64, L = 4096, where the backend runs the rule, the kernel runs at 0.98x FlashMLA's speed in this
# run, after the seesaw's later versions (its first was 0.84x in section 11); what the 128-head ragged batches
# lose beyond that is an open question of the kernel lab (`docs/kernel_essay.md`). The
# schedule's price is a fixed cost the split rule does not pay, seen at
# small uniform batches (1.1-1.7x the best split there): the merge's launch and the partials of requests
# cut at a part boundary. So the triton serving backend chooses per batch, from the lengths it has on the
# host at every step: the schedule for ragged batches, the rule for uniform ones.
#
# How does it choose? From the lengths alone it models each path's makespan in page-times
# (`schedule.makespans`): in stage 1 the schedule's slowest part is its share of the line plus one overhead; the
# rule's programs go to the GPU's program slots in launch order, each to the first slot that is free
# (`schedule.simulate`, the block scheduler's rule, as in the Gantt chart above). Each side then adds its stage 2
# (`workspace.stage2_pages`: the merge's launch and its partials' bytes; the rule's only when it splits). It takes
# the schedule when that makespan is `schedule.BALANCED_MARGIN` below the rule's. The order matters: the programs that launch
# last may run alone at the end. A model that spreads the rule's total evenly over the slots cannot see that
# tail, and the backend's first version of the choice used one. On 128 requests of log-normal lengths around
# 8K tokens at 128 heads:

# %%
batch = schedule.lognormal_lengths(128, 8192, seed=0, sigma=0.5)  # 128 requests, median 8192 tokens
splits = triton_num_kv_splits(64 * math.ceil(max(batch) / 64), 128, 128, 64, 132)
rule_span, balanced_span = schedule.makespans(batch, 64, 128, 132, splits)
costs = [pages + schedule.FIXED_OVERHEAD_PAGES for _, pages in schedule.pages_per_program(batch, 64, 128, 132, splits)]
merge = stage2_pages(128 * splits, 128, 132, 64) if splits > 1 else 0  # the rule's stage 2, as makespans adds it
even = max(max(costs), sum(costs) / 132) + merge  # stage 1 spread evenly over 132 slots (one 64-head program an SM)
print(f"rule at {splits} splits: {rule_span:.0f} page-times in launch order, {even:.0f} spread evenly; "
      f"balanced {balanced_span:.0f}")
print("the backend's choice:", "balanced" if schedule.prefers_balanced(batch, 64, 128, 132, splits) else "rule")
assert balanced_span < (1 - schedule.BALANCED_MARGIN) * rule_span  # the schedule, with the tail in the model
assert balanced_span > (1 - schedule.BALANCED_MARGIN) * even  # the rule, had the model spread it evenly

# %% [markdown]
# The lab measured both models against the H200 over families of batches (log-normal, normal, bimodal, one
# giant request among short ones, uniform random) at 16, 32, 64 and 128 heads, FlashMLA in the same run, and
# fitted the margin on some families and scored it on the others (`kernel_lab/results/choice_fit_h200.md`). Stage 2
# entered the model later: its constants and the margin fitted on every H200 timing of the split counts, then checked
# on runs timed after them, where the choice is within 5% of the best option at every family batch
# (`kernel_lab/results/split_model_fit_h200.md`).
# Where the kernel stands against FlashMLA at each head count, with the best option for every batch, and so
# how much is left to the kernel rather than the choice: [the essay](../docs/kernel_essay.md).
#
# The same A/Bs set the schedule's constants per head count (`kernel_lab/results/partition_ab_h200*.md`). Where
# a request has few partials on average (`schedule.few_partials`: at most 4 a request below 64 heads, 2 from 64
# up), stage 2 merges them one or two at a time; elsewhere it loads four at a time. The piece cap stays below 16
# requests, and at 64 heads or more where partials are few; elsewhere a request is cut as FlashMLA cuts it. And at
# 32 heads, in batches of at most 16 requests, the schedule runs two 16-head programs a part, on half as many
# parts (`HALF_BLOCK_BATCH`), faster there in the A/B; the choice then
# scales those programs' page-times (`schedule.HALF_BLOCK_PAGE_COST`), since its model counts the rule's
# programs of 32 heads. All of it from B, h_q and the SM count: host ints, the same at every replay.

# %%
for heads, b in [(32, 16), (32, 64), (64, 64), (64, 256)]:
    parts = schedule.num_parts(heads, 132, b, 64)
    cap = schedule.max_pieces(b, heads, parts) or "none"  # 0: no cap
    print(f"h_q {heads:3d}, B {b:3d}: {parts:3d} parts of {gpu_block_h(heads, b, 64, balanced=True)} heads; few "
          f"partials: {schedule.few_partials(b, parts, heads)!s:5}; piece cap: {cap}")
assert schedule.num_parts(32, 132, 16, 64) == 66 == schedule.num_parts(32, 132, 64, 64) // 2  # 16 heads a program
assert not schedule.few_partials(64, 132, 64) and schedule.few_partials(256, 132, 64)  # 195 rows > 2 x 64; 387 < 512

# %% [markdown]
# Does the choice cost the mini engine anything? `tools/engine_decode_bench.py` decodes the same 128
# questions with the rule forced, the schedule forced and the backend's own choice
# (`results/engine_decode_h200.json`). A lesson in measuring came with it: timed one setting after the
# other, each setting ran slower than the one before (rule 1.25 s, schedule 1.45 s, choice 2.16 s), which
# an earlier run had read as "the schedule is 1.26x slower". Timed interleaved, each rep starting one
# setting later:

# %%
engine = load_bench(RESULTS_DIR / "engine_decode_h200.json")
print(f"best of {len(engine['rule']['times_s'])}: rule {engine['rule']['best_s']:.2f} s, schedule "
      f"{engine['balanced_over_rule']:.2f}x, the backend's choice {engine['auto_over_rule']:.2f}x the rule's time; "
      f"the choice replayed {engine['auto']['replays_by_path']}")
assert engine["same_tokens"] and all(abs(engine[k] - 1) < 0.05 for k in ("auto_over_rule", "balanced_over_rule"))
assert engine["auto"]["replays_by_path"] == {"splits": engine["auto"]["decode_steps"]}  # the rule, at every step

# %% [markdown]
# All three within 2%, the same tokens. The engine's batches are small (prompts of 100-508 tokens, 1-5 pages
# of 128), so the backend keeps the rule at every step, and its step time is the host's, not the kernels'.
#
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
# - At 128 heads the plain-Triton kernel computes every score twice: the compiler's layout rule, read
#   off the compiled code. A Gluon kernel that chooses its layouts does half the score work and runs
#   1.9x faster on the H200 (62% of the matmul rate, 0.67x FlashMLA); at 16 heads it swaps the
#   operands so no wgmma row is padding (90% of copy, FlashMLA's speed). Two warpgroups taking turns on
#   pairs of tiles, as FlashMLA does, gain 1.19x more at 128 heads (0.84x FlashMLA; its later versions
#   0.98x at B = 64, L = 4096).
# - On ragged batches a balanced schedule, computed from the lengths inside the kernels, keeps every SM busy;
#   the serving backend chooses it or the split rule per batch from a model of both makespans.
#
# ## Exercises (optional)
#
# Predict, then run: write your prediction in the variable (it is `...` until you do), then run the
# cell after it, which runs the experiment and checks your prediction (`mla_edu.workshop.checks`). The
# instructor hands out the answers, with the why, after the exercise.
#
# **1.** Using the formula of section 5 (automatic splits, 132 SMs), what is the smallest batch size at
# which a 4096-token table gets only one split?

# %%
ex1_first_single_split_batch = ...  # an int

# %%
from mla_edu.kernels.contract import pages_read  # noqa: E402
from mla_edu.workshop import checks  # noqa: E402

first_single = next(bsz for bsz in range(1, 1000) if num_kv_splits_for(4096, bsz, 132, -1) == 1)
r1 = checks.check_number("exercise 1", ex1_first_single_split_batch, first_single, mistakes={
    first_single - 1: "compute the formula at that batch size, step by step: heur, then split",
    133: "heur has a floor of 1: find the batch size where heur first equals 1, not where sm_count // B is 0"})

# %% [markdown]
# **2.** Make `naive_decode` read the page table through a `row_stride`: request `b`'s page `j` at flat
# index `b * row_stride + j` (what `pages_read` computes). Feed it section 7's narrow view `[:4, :1]` with
# `row_stride = size(1)`. Which requests come out right? (A set of request rows.)

# %%
ex2_right_requests = ...  # a set of request rows

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
r2 = checks.check_items("exercise 2", ex2_right_requests, right_rows, mistakes={
    frozenset(range(4)): "that is the full-width view's result; a 1-wide view steps rows by 1",
    frozenset(): "where does request 0 start reading, whatever the stride?"})

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
                          kind(empty_lse)),
      checks.check_choice("exercise 3, o", ex3_empty_o, {"zeros": "all zeros", "nan": "not a number"}, kind(empty_o)),
      checks.check_choice("exercise 3, merge", ex3_merge_right, {True: "right", False: "wrong"},
                          torch.allclose(merged3, truth[2], atol=1e-12))]

