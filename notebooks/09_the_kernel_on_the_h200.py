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
# # 09 · The decode kernel on the H200
#
# **You will learn**, as a GPU engineer, what notebook 04's split-KV kernel does on a Hopper GPU: how fast it runs
# against the two ceilings and against FlashMLA and SGLang's own Triton kernel; what Triton's compiler made of it,
# read off the compiled code (why plain Triton computes the scores twice at 128 heads, and the Gluon kernels that
# do not); and how a persistent, balanced schedule computed from the lengths inside the kernels serves ragged
# batches under a CUDA graph, and how the serving backend chooses it.
#
# **You need** notebook 04: the contract, and split-KV (sections 4-5), whose stage 1 writes each split's partial
# output and its LSE into the workspace and whose stage 2 merges them; and a CPU:
# the GPU numbers are read from committed H200 runs, and section 2 compiles for the H200 here (Triton compiles for
# sm_90a on any Linux machine). Without Triton (macOS, Windows) the cells of sections 2 and 3 that need it show
# the committed run's output. This notebook is for the GPU track and for reading at home: no workshop track
# includes it, so every section is marked (optional). Where the kernel stands today, and what was tried:
# [the kernel lab's essay](../docs/kernel_essay.md).

# %%
import math

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 when there is no GPU)
from mla_edu.kernels import triton_available
from mla_edu.kernels.plots import kernel_bench_figure, load_bench
from mla_edu.workshop.stored import show_stored

NB = "09_the_kernel_on_the_h200"
TRITON = triton_available()  # Triton has Linux wheels only: elsewhere its cells show the committed run's output
bench = load_bench()  # results/kernel_bench_h200.json: the H200 run of tools.kernel_bench
ceil = bench["ceilings"]  # measured in the same run, as notebook 04 section 1 printed them
ridge = ceil["matmul_bf16_TFLOPs"] / ceil["copy_TBps"]  # FLOP per byte where the two ceilings meet
print(f"the two ceilings: copy {ceil['copy_TBps']:.2f} TB/s, bf16 matmul {ceil['matmul_bf16_TFLOPs']:.0f} TFLOP/s; "
      f"ridge {ridge:.0f} FLOP/byte")
assert round(ridge) == 165  # as notebook 02 quotes it

# %% [markdown]
# ## 1. On the H200 (optional)
#
# `python -m tools.kernel_bench --pages 64` ran the Triton kernel on one H200 (through this
# project's device tool) in bf16 over h_q {16, 128}, B {1, 8, 64, 128}, L {512 ... 32768}, page 64,
# measuring the two ceilings (above) in the same run, and two peers on the same cache bytes in the same
# process: SGLang's own Triton MLA decode kernel (`decode_attention_fwd` from the sglang 0.4.7 wheel,
# the kernel behind its `triton` backend) and FlashMLA (DeepSeek's Hopper kernel, built from source
# on that machine). Times are CUDA-graph replays. Every split count the rule below can pick was
# timed, so the table shows the rule's split next to the best one. The results:
# `results/kernel_bench_h200.md` (table) and `.json` (all numbers).
#
# **The split rule.** sgl-kernel's heuristic (notebook 04, section 5) looks at shapes only (`max_seq_len`, B and the
# SM count), not at costs. The Triton
# kernel has its own, `triton_num_kv_splits`: a program is one (request, head block, split), a head block being
# the heads one program serves (64 at h_q = 128 except in the smallest grids, 16 at h_q = 16); on the
# H200 one program fits on an SM (two 72 KB page tiles in shared memory); the rule counts whole waves
# of programs times the pages each walks, plus the cost of the merge, and takes the cheapest split.
# The triton serving backend uses it for `num_kv_splits=-1`; the cutlass backend keeps sgl-kernel's
# heuristic, whose choice is also in the table ("cutlass auto").
#
# **Which kernel.** On a Hopper GPU stage 1 is not the plain-Triton kernel of notebook 04's section 6 but a Gluon
# kernel: in this run the TMA kind of `mla_edu/kernels/split_kv_wgmma.py`, at 64-head programs today the seesaw
# kernel of section 2 (which says why, and what each does differently); `--kernels` timed the plain-Triton one
# ("tl") on the same problems too.

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
# Reading the plot. **h_q = 16** is memory-bound (30 FLOP per byte, far under the ridge of 165). At
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
# SGLang's Triton kernel is slower at every shape it runs (1.14x and more; its programs take 16 heads each,
# `BLOCK_H = 16` and a grid of `cdiv(head_num, 16)` head blocks, so at h_q = 128 each page is loaded 8 times, L2
# serving some; its offsets `kv_loc * stride_buf_kbs` are int32 and cannot address a cache of 2^31 elements, the
# two largest B = 128 shapes: `decode_attention.py` of sglang 0.4.7, lines 324-335 and 444-450). The cutlass-auto column shows what sgl-kernel's heuristic costs:
# at h_q = 128, B = 64 it picks 2 splits where one wave of 128 programs is already there.
#
# ## 2. What the compiler made of it (optional)
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
# 196 us at h_q = 128, B = 64, L = 4096; the tl kernel 321 us; `results/kernel_bench_h200.md`): with 1.53x less
# tensor work, the cp.async kind takes 1.64x less time than the tl kernel and the TMA kind 1.9x. It is what a Hopper GPU runs at 16 and 32 heads a program; at 64, the two-warpgroup
# kernel below replaced it (`stage1.DEFAULT_GLUON = "seesaw"`, the default stage 1 of 64-head programs unless
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
# ceiling (the tl kernel 87 us, `results/kernel_bench_h200.md`).
#
# FlashMLA's answer at 128 heads (section 1: two warpgroups taking turns on pairs of tiles) is written in
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
# Do the hand-offs hide the softmax? The prediction, written before any run, was 120-145 us at B = 64,
# L = 4096, where the TMA kernel took 169 in section 1's run (168 in the run below). The H200's answer, every
# stage-1 kernel timed on the same bytes in one run (`python -m tools.kernel_bench --quick --kernels --pages 64`,
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
# dominate. It is the default at 64 heads now. In that run FlashMLA is still 1.19x faster: Nsight Compute's stall
# sampling shows both kernels waiting alike for their tiles, and the seesaw's warpgroups waiting more often
# for their own tensor-core products to finish (`kernel_lab/results/kernel_stalls_h200_seesaw.md`).
#
# What the kernel does against FlashMLA, why it is fast, where FlashMLA is still ahead and why, and what was
# tried and did not help, each with its results file: [the kernel lab's essay](../docs/kernel_essay.md).
#
# ## 3. Ragged batches: a balanced schedule (optional)
#
# Every grid above gives each request the same split count, sized from the page table's width: the
# longest request a graph can see. A serving engine's decode batch is ragged: most requests short, a
# few long. Here is one such batch (seeded log-normal lengths, as `tools/schedule_bench.py` draws
# them), B = 64, 16 heads, page 64, on the H200's 132 SMs. Time is counted in page-times: what a program takes to
# read one page of 64 tokens.

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
# the only one that long, so its two programs read 256 pages each while the rest of the GPU, long
# finished, sits idle.
#
# The balanced schedule (`mla_edu.kernels.schedule`) shares the batch's work out instead, the way FlashMLA
# does (below). Request b has $n_b$ pages and costs $w_b = n_b + 5$ page-times (the 5 is FlashMLA's overhead per
# piece; this project reads it as the q load, the first pages in flight and the partial). Lay the 64 costs end to end on one line, request b at $[W_b, W_b + w_b)$
# with $W_b$ the sum of the costs before it: first its overhead, then its pages, page k at $W_b + 5 + k$.
# Cut the line into `num_parts` equal parts, one per SM here (16 heads are one head block, so a part is one
# program): part p takes the pages whose place falls in
# $[p \cdot \text{chunk}, (p + 1) \cdot \text{chunk})$, chunk = ceil(total / parts). The stage-1 grid is
# (parts, head blocks) and each program is persistent: it walks its part's requests in order, reading each
# one's segment of pages. So a long request is cut across several parts, and a part holds several short
# requests. A request that lands in one part is finished there and written to the output; a cut one leaves
# one partial per part, in workspace row p + b. Along the line the next segment is in the next part or of
# the next request, so p + b only grows: one row per segment, `parts + B - 1` rows in all, a size fixed by
# shapes. Stage 2 merges rows $p_{first}(b) + b$ to $p_{last}(b) + b$ by log-sum-exp, as notebook 04's
# section 4 merged splits. Parts 0 and 1, and the first pieces of request 53, from the kernels' own arithmetic
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
# over a request's pages instead, and a part cut on both ends pays nearly two: 38 here.)
#
# The figure below shows which SM runs what when. Its top panel: the rule's 128 programs, placed as the block
# scheduler places them (simulated: the next program to the first free SM); its bottom panel: each SM's
# persistent program walking its part's segments (`schedule.part_timeline`). Request 53 is hatched:

# %%
# stored output: schedule-gantt
if TRITON:
    fig = schedule_gantt(ragged, 64, 16, 132, rule_splits)
else:
    show_stored(NB, "schedule-gantt")

# %% [markdown]
# Why every program computes this **on the device**: the partition depends on the lengths, and under a CUDA
# graph it must reach the kernels through device memory, never as a launch parameter (frozen at capture: this
# repository's bug). The host has the lengths too (`seq_lens_cpu`, from which the backend chooses a path), so
# the replay hook could compute the partition there and copy it into a persistent buffer, at the cost of a
# copy a step; here each program recomputes it from the lengths instead, and FlashMLA
# (`docs/sources.md`, at `9edee0c`) runs a kernel of its own first, `get_mla_metadata`: one warp
# (`csrc/kernels/get_mla_metadata.cu` lines 8-75) sums the batch's 64-token blocks plus a fixed
# overhead of 5 per request (`csrc/kernels/config.h` line 11), gives each of `num_sm_parts` parts an
# equal payload (line 34: the share plus one overhead, since every piece of a cut request pays its own,
# lines 44-62, and never less than two overheads; `num_sm_parts = sm_count / h_k / ceil(h_q / h_k / 64)`, h_k = 1 in MLA,
# `csrc/flash_api.cpp` line 39) and writes where each part begins and ends. Its attention kernel is
# persistent, one CTA per part and 64-head block (`splitkv_mla.cu` line 1339),
# so the grid says nothing about the work: each CTA reads its begin and end from that tensor and walks
# the requests between (`csrc/kernels/splitkv_mla.cu` lines 1019-1039), and the combine kernel merges
# each request's own number of partials (`csrc/kernels/mla_combine.cu` lines 25-31).
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
assert fm_parts == 132 // math.ceil(128 / 64)  # FlashMLA's num_sm_parts: SMs / head blocks of 64 (h_k = 1)
overhead = flashmla_schedule.FIXED_OVERHEAD_NUM_BLOCKS  # 5 page-times a piece
assert one_request == {n: math.ceil(n // 64 / overhead) for n in one_request}  # 5 pages a piece, the floor's

# %% [markdown]
# At 128 heads FlashMLA runs 66 parts (132 SMs over two 64-head blocks). One request alone is far below 66
# shares, so the floor of two overheads sets each part's payload: 10 page-times, of which a piece pays 5 for its
# own overhead and reads 5 pages. So 16, 64 and 256 pages become 4, 13 and 52 pieces, each a partial for the
# combine kernel to merge.

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
assert all(r["flashmla_us"] / r["balanced_us"] > 0.98 for r in sched_bench["ragged"] if r["heads"] == 16)
assert sum(r["flashmla_us"] > r["balanced_us"] for r in sched_bench["ragged"] if r["heads"] == 16) == 4
small = [r["balanced_us"] / r["best_us"] for r in sched_bench["uniform"] if r["batch"] <= 4]
assert 1.05 <= min(small) and max(small) < 1.75  # the schedule's fixed cost at B = 1 and 4
assert by_heads[128] < by_heads[16]  # near FlashMLA at 16 heads; at 128 the kernel itself lags
uniform = next(r for r in sched_bench["uniform"] if (r["heads"], r["batch"], r["lens_max"]) == (128, 64, 4096))
print(f"uniform h_q 128, B 64, L 4096: rule {uniform['rule_us']:.1f} us, FlashMLA {uniform['flashmla_us']:.1f} us, "
      f"{uniform['flashmla_us'] / uniform['rule_us']:.2f}x")
assert uniform["rule_us"] < big["triton_us"]  # the seesaw's later versions, since section 2's run

# %% [markdown]
# In this run (12 ragged batches at 16 and 128 heads, each option timed once, before the kernel lab's later
# changes) the schedule takes the rule's 0.40x of FlashMLA on ragged batches to 1.05x, and beats the best single
# split count (chosen after the fact) at all 12 batches. At 16 heads, where decode reads memory,
# it runs at 0.98x FlashMLA or faster at every batch, ahead at four of six.
# At 128 heads it reaches 0.87-1.06x of FlashMLA. On uniform lengths, B = 64, L = 4096, where the backend runs the rule, the kernel runs at 0.98x FlashMLA's speed in this
# run, after the seesaw's later versions (its first was 0.84x in section 2); what the 128-head ragged batches
# lose beyond that is an open question of the kernel lab (`docs/kernel_essay.md`). The
# schedule's price is a fixed cost the split rule does not pay, seen at
# small uniform batches (1.1-1.7x the best split at B = 1 and 4): the merge's launch and the partials of requests
# cut at a part boundary. So the triton serving backend chooses per batch, from the lengths it has on the
# host at every step: the schedule for ragged batches, the rule for uniform ones.
#
# How does it choose? From the lengths alone it models each path's makespan in page-times
# (`schedule.makespans`): in stage 1 the schedule's slowest part is its share of the line plus one overhead; the
# rule's programs go to the GPU's program slots in launch order, each to the first slot that is free
# (`schedule.simulate`, the block scheduler's rule, as in the top panel of this section's figure). Each side then adds its stage 2
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
# Which width do the rule and the model count on? A graph fixes its launch, and a server's page table is as wide
# as its context limit, whatever the batch: DeepSeek-V3's 163,840 tokens are 2,561 columns of 64-token pages.
# Counted on that width, the rule sizes its splits for requests of 163,840 tokens. So the triton serving backend
# pads the width as the graph runner pads the batch size: a step reads the table's first columns, the narrowest
# power of two of pages that holds the longest request (`table_widths`, `step_width`), with a graph captured per
# width and path. The rule, the model and the kernels all count on that width.

# %%
from mla_edu.serving.backends.base import page_table_width  # noqa: E402
from mla_edu.serving.backends.triton import step_width, table_widths  # noqa: E402

widths = table_widths(page_table_width(163840, 64))  # 1, 2, 4, ..., 2048 pages, and the whole table
width = step_width(batch, widths, 64)
print(f"{len(widths)} widths, the whole table {widths[-1]} pages; the longest request {max(batch)} tokens "
      f"({math.ceil(max(batch) / 64)} pages): the step reads {width}")
print(f"the rule's splits counted on the whole table: {triton_num_kv_splits(64 * widths[-1], 128, 128, 64, 132)}; "
      f"on the step's width: {triton_num_kv_splits(64 * width, 128, 128, 64, 132)}")
assert width // 2 < math.ceil(max(batch) / 64) <= width and width & (width - 1) == 0

# %% [markdown]
# The lab measured both models against the H200 over families of batches (log-normal, normal, bimodal, one
# giant request among short ones, uniform random) at 16, 32, 64 and 128 heads, FlashMLA in the same run, and
# fitted the margin on some families and scored it on the others (`kernel_lab/results/choice_fit_h200.md`). Stage 2
# entered the model later: its constants and the margin fitted on every H200 timing of the split counts, then checked
# on runs timed after them, where the choice is within 5% of the best option at every family batch
# (`kernel_lab/results/split_model_fit_h200.md`).
# Where the kernel stands today against FlashMLA at each head count and batch size, from every run at the current
# rules: the table "At a glance" of `kernel_lab/results/acceptance_h200.md`; what is left to the kernel rather than
# the choice: [the essay](../docs/kernel_essay.md).
#
# The same A/Bs set the schedule's constants per head count (`kernel_lab/results/partition_ab_h200*.md`). Where
# a request has few partials on average (`schedule.few_partials`: at most 4 a request below 64 heads, 2 from 64
# up), stage 2 merges them one or two at a time; elsewhere it loads four at a time. A request's pieces are capped
# (`schedule.max_pieces`) in batches of fewer than 16 requests, and at 64 heads or more where partials are few;
# elsewhere a request is cut as FlashMLA cuts it. And at
# 32 heads, in batches of at most 16 requests, the schedule runs two 16-head programs a part, on half as many
# parts (`workspace.HALF_BLOCK_BATCH`), faster there in the A/B; the choice then
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
assert engine["same_tokens"] and all(abs(engine[k] - 1) < 0.03 for k in ("auto_over_rule", "balanced_over_rule"))
assert engine["auto"]["replays_by_path"] == {"splits": engine["auto"]["decode_steps"]}  # the rule, at every step

# %% [markdown]
# All three within 3%, the same tokens. The engine's batches are small (prompts of 102-508 tokens, 1-4 pages
# of 128, up to 5 with the 64 tokens it generates), so the backend keeps the rule at every step, and its step time is the host's, not the kernels'.

# %% [markdown]
# ## What we saw (optional)
#
# - At 128 heads the plain-Triton kernel computes every score twice: the compiler's layout rule, read
#   off the compiled code. A Gluon kernel that chooses its layouts does half the score work and, with TMA
#   loads, runs 1.9x faster on the H200 (1.64x with cp.async) (62% of the matmul rate, 0.67x FlashMLA); at 16 heads it swaps the
#   operands so no wgmma row is padding (90% of copy, FlashMLA's speed). Two warpgroups taking turns on
#   pairs of tiles, as FlashMLA does, gain 1.19x more at 128 heads (0.84x FlashMLA; its later versions
#   0.98x at B = 64, L = 4096).
# - On ragged batches a balanced schedule, computed from the lengths inside the kernels, keeps every SM busy;
#   the serving backend chooses it or the split rule per batch from a model of both makespans.
