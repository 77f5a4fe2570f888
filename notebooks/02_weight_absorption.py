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
# # 02 · Weight absorption: attention inside the latent
#
# **You will learn** how MLA avoids rebuilding every head's keys and values at each decode step,
# why that forces RoPE into a separate part of each head, why the softmax scale stays
# $1/\sqrt{192}$, and what the two computation orders cost in FLOPs and bytes.
#
# **You need** a CPU (Run All takes seconds on a 2-core CPU: its measured time is in README's table of
# notebooks). Notebook 01 first.

# %%
import copy
import math
import time

import torch

from mla_edu import AbsorbedMLA, ContiguousLatentCache, MLAConfig, NaiveMLA
from mla_edu.attention import cost
from mla_edu.attention.plots import h200_ceilings, naive_vs_absorbed_cost
from mla_edu.rope import apply_rope, cos_sin

torch.manual_seed(0)


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


# %% [markdown]
# ## The identity (core)
#
# The content part of head $i$'s score between a query and a cached token is
# $$ (q^C_i)^\top k^C_{j,i} = (q^C_i)^\top W^{UK}_i c^{KV}_j = \big((W^{UK}_i)^\top q^C_i\big)^\top c^{KV}_j .$$
# Multiply the query by $(W^{UK}_i)^\top$ once, and it can be dotted straight with the 512-number
# latent of every cached token: no per-head key is ever built. The value side works the same
# way: $\sum_j p_j W^{UV}_i c^{KV}_j = W^{UV}_i \sum_j p_j c^{KV}_j$, so attention averages
# latents, and $W^{UV}_i$ is applied once, to the result.
#
# Checked on random numbers at DeepSeek-V3's head size:

# %%
dn, r, L = 128, 512, 1000
q_nope = torch.randn(dn, dtype=torch.float64)
w_uk = torch.randn(dn, r, dtype=torch.float64) / r ** 0.5
c_kv = torch.randn(L, r, dtype=torch.float64)

literal = (c_kv @ w_uk.T) @ q_nope          # rebuild L keys [L, dn], then dot: L*dn*r + L*dn multiply-adds
absorbed = c_kv @ (w_uk.T @ q_nope)         # absorb once [r], then dot:        dn*r + L*r
print(f"same scores: {torch.allclose(literal, absorbed)}; "
      f"multiply-adds {L * dn * r + L * dn:,} vs {dn * r + L * r:,}")
assert torch.allclose(literal, absorbed)

# %% [markdown]
# ## Why RoPE has to be decoupled (core)
#
# Suppose positions were applied to the content key itself, $k_j = R_j W^{UK} c^{KV}_j$, with $R_j$
# the rotation for position $j$. Then
# $q^\top R_j W^{UK} c_j = \big((W^{UK})^\top R_j^\top q\big)^\top c_j$: the absorbed query now
# depends on **the key's** position $j$, so it would have to be recomputed for every cached token,
# which is exactly the work [absorption](../docs/glossary.md#weight-absorption) was meant to remove. The paper (section 2.1.3) therefore
# keeps the content part position-free and adds a small, separately rotated part, $q^R$ and the
# shared $k^R$.
#
# Watch it happen: absorb the query once, as if every key sat at position 0, and the scores
# against keys at other positions come out wrong.

# %%
cfg = MLAConfig.tiny(qk_nope_head_dim=8, qk_rope_head_dim=8)
q = torch.randn(8, dtype=torch.float64)
w = torch.randn(8, 16, dtype=torch.float64)
c = torch.randn(5, 16, dtype=torch.float64)                          # 5 cached latents, positions 0..4
cos, sin = cos_sin(cfg, torch.arange(5))


def rotate(x, pos):
    return apply_rope(x, cos[pos].double(), sin[pos].double(), interleave=True)


rope_on_content = torch.stack([q @ rotate(w @ c[j], j) for j in range(5)])     # what we would need
absorbed_once = c @ (w.T @ q)                  # one absorbed query (R_0 is the identity, so right at position 0)
print("position 0 right:", torch.allclose(rope_on_content[0], absorbed_once[0]),
      "| positions 1-4 right:", torch.allclose(rope_on_content[1:], absorbed_once[1:]))
assert torch.allclose(rope_on_content[0], absorbed_once[0])
assert not torch.allclose(rope_on_content[1:], absorbed_once[1:])

# %% [markdown]
# ## `AbsorbedMLA` (core)
#
# Same weights as `NaiveMLA` (the state dicts are interchangeable), different order:
#
# ```
# q_nope  [.., H, dn]  --(W_UK^T per head)-->  q_nope [.., H, r]     # absorbed_query
# scores = q_nope . c_kv + q_pe . k_pe          over the cache        # keys are [c_kv; k_pe]: 576 wide
# o_latent = softmax(scores * scale) @ c_kv     [.., H, r]            # values are c_kv: 512 wide
# out = o_proj(W_UV o_latent)                                        # output
# ```
#
# From here on `q_nope` means the absorbed query, $r$ wide (512 in DeepSeek-V3), as in the decode kernels'
# signatures (`mla_decode(q_nope, q_pe, ...)`, sgl-kernel's `cutlass_mla_decode`); before
# absorption it was the per-head $q^C$, $d_n$ wide (128).
#
# Decode is now **multi-query attention**: all H heads read the same 576-number key per token,
# and the value is the first 512 numbers of that key. That is the shape of every MLA decode
# kernel (FlashMLA, SGLang's Triton and cutlass backends, notebook 04).

# %%
yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
        "mscale": 1.0, "mscale_all_dim": 0.8}
config = MLAConfig.tiny(rope_scaling=yarn, max_position_embeddings=256)
naive = NaiveMLA(config)
with torch.no_grad():
    for p in naive.parameters():
        p.normal_(0, 0.2) if p.dim() > 1 else p.fill_(1.0)
absorbed = AbsorbedMLA(config)
absorbed.load_state_dict(naive.state_dict())

h = torch.randn(2, 50, config.hidden_size)
positions = torch.arange(50).expand(2, 50)
with torch.no_grad():
    exact = NaiveMLA(config).double()
    exact.load_state_dict(naive.state_dict())
    reference = exact(h.double(), positions)
    for dtype in (torch.float32, torch.bfloat16):  # copies: .to() casts a module's weights in place
        out_n = copy.deepcopy(naive).to(dtype)(h.to(dtype), positions)
        out_a = copy.deepcopy(absorbed).to(dtype)(h.to(dtype), positions)
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        print(f"{str(dtype):15s} absorbed vs naive < {tol:.0e}: {rel_err(out_a, out_n) < tol}   "
              f"both vs float64 < {tol:.0e}: {max(rel_err(out_n, reference), rel_err(out_a, reference)) < tol}")
        assert rel_err(out_a, out_n) < tol and rel_err(out_a, reference) < tol
        if dtype == torch.float32:
            assert rel_err(out_a, reference) < 1e-6  # fp32: under 10^-6
        else:
            assert 1e-3 < rel_err(out_a, reference) < 1e-2  # bf16: between 10^-3 and 10^-2

# %% [markdown]
# bf16 stores 7 mantissa bits (an 8-bit significand, counting the implicit leading 1), so each
# rounding is off by up to $2^{-8} \approx 4 \cdot 10^{-3}$, and the layer's error against float64 comes
# out between $10^{-3}$ and $10^{-2}$. fp32 has a 24-bit significand ($2^{-24} \approx 6 \cdot 10^{-8}$ per
# rounding); over this layer's sums its error stays under $10^{-6}$, well inside the $10^{-5}$ checked.
#
# ## The softmax scale does not change (optional)
#
# Absorption computes *the same number* $q_i^\top k_{j,i}$ in another order, so the scale stays
# $1/\sqrt{d_h + d_h^R} = 1/\sqrt{192}$, times [YaRN](../docs/glossary.md#yarn)'s temperature $m^2$ with
# $m = 0.1 \cdot \text{mscale\_all\_dim} \cdot \ln(\text{factor}) + 1$. It is **not**
# $1/\sqrt{576}$, although 576 is the key width the kernel sees. A kernel that derives its scale
# from the key width gets it wrong silently (FlashMLA's default is $1/\sqrt{576}$, and sgl-kernel's
# cutlass decode hard-coded $1/\sqrt{192}$, ignoring YaRN, until sgl-kernel gained an `sm_scale`
# parameter (SGLang PR #7184, `ab1a4fa5c`) and the backend passed `layer.scaling` to it (PR #7186,
# `ed89837cf`); sources in `docs/sources.md`).

# %%
v3 = MLAConfig.deepseek_v3()
yarn = v3.rope_scaling  # DeepSeek-V3's YaRN: factor 40, mscale_all_dim 1.0
mscale = 0.1 * yarn["mscale_all_dim"] * math.log(yarn["factor"]) + 1
print(f"YaRN factor {yarn['factor']:g}, mscale_all_dim {yarn['mscale_all_dim']:g}")
print(f"DeepSeek-V3: 1/sqrt(192) = {192 ** -0.5:.5f}, YaRN m^2 = {mscale ** 2:.4f}, "
      f"softmax_scale = {v3.softmax_scale:.5f}, 1/sqrt(576) = {576 ** -0.5:.5f}")
assert abs(v3.softmax_scale - 192 ** -0.5 * mscale ** 2) < 1e-12

# how wrong is the output with the wrong scale?
absorbed = absorbed.float()
with torch.no_grad():
    right = absorbed(h, positions)
    absorbed.softmax_scale = (config.kv_lora_rank + config.qk_rope_head_dim) ** -0.5
    wrong = absorbed(h, positions)
    absorbed.softmax_scale = config.softmax_scale
print(f"tiny layer, scale 1/sqrt(r + dr) instead of the right one: relative error {rel_err(wrong, right):.2f}")
assert rel_err(wrong, right) > 0.05

# %% [markdown]
# ## What each order costs (core)
#
# `mla_edu.attention.cost` counts one layer of one decode step (projections both orders share
# are left out). At DeepSeek-V3 dims, batch 64, 4,096 tokens each:

# %%
v3 = MLAConfig.deepseek_v3()  # DeepSeek-V3's shapes (the optional section above made it too)
lens = [cost.QUOTED_LEN] * cost.QUOTED_BATCH  # 64 requests of 4096 tokens: the shape notebook 04 quotes too
for order in ("naive", "absorbed"):
    c = cost.decode_cost(v3, lens, order)
    print(f"{order:9s} {c.flops / 1e9:8.1f} GFLOP  {c.bytes / 1e6:6.1f} MB  {c.intensity:7.1f} FLOP/byte")
core = cost.attention_core_cost(v3, lens)
print(f"absorbed attention core alone: {core.flops / 1e9:.1f} GFLOP "
      f"over {1152 * sum(lens) / 1e6:.0f} MB of latent cache")
assert round(core.flops / 1e9) == 73 and round(cost.decode_cost(v3, lens, "absorbed").intensity, 1) == 220.6
ratio = cost.decode_cost(v3, lens, "naive").flops / cost.decode_cost(v3, lens, "absorbed").flops
print(f"naive / absorbed arithmetic: {ratio:.0f}x")
assert ratio > 100

# %% [markdown]
# The bytes counted here are the least each order must move: the latent cache once, plus
# `kv_b_proj`. The naive order reaches that minimum only in an idealized kernel that rebuilds each
# key and value in registers and uses it at once. `NaiveMLA` (like `transformers`) does not: it
# writes the rebuilt per-head `k_nope` and `v` to memory and reads them back; at this size that
# write alone is about fifty times the minimum:

# %%
B, H, dn, dv = len(lens), v3.num_attention_heads, v3.qk_nope_head_dim, v3.v_head_dim
written = 2 * B * lens[0] * H * (dn + dv)  # bf16 k_nope [B, L, H, dn] and v [B, L, H, dv]
least = cost.decode_cost(v3, lens, "naive").bytes
print(f"NaiveMLA writes {written / 1e9:.1f} GB of per-head keys and values per layer; "
      f"the least any order must move is {least / 1e9:.2f} GB: {written / least:.0f} times")
assert round(written / 1e9, 1) == 17.2 and round(least / 1e9, 2) == 0.34 and round(written / least, -1) == 50

# %% [markdown]
# Even at its idealized minimum of bytes, the naive order spends over 100 times the arithmetic
# rebuilding keys and values that absorption never builds.
#
# **Is absorbed decode memory- or compute-bound?** Each cached row (576 bf16 numbers, 1,152 bytes) is
# used by every head: 576 multiply-adds for its score and 512 for its value, 2 FLOPs each. So a cached
# byte carries $2 n_h (576 + 512) / 1152 \approx 1.89\, n_h$ FLOPs: 242 at 128 heads and 30.2 at 16
# (`cost.cached_byte_intensity`, the limit of a long context). Reading q and writing o cost bytes
# too: at this shape they bring the [intensity](../docs/glossary.md#intensity) of the attention core
# (`cost.decode_intensity`, the one function notebook 04 prints too) down to 228 FLOP per byte and 30.
# The 220.6 printed above is lower still: it is the whole absorbed order, which also counts
# `kv_b_proj`'s weights and its two small products (q times $W^{UK}$, the output times $W^{UV}$).
# The shorthand one often meets, "about $2 n_h$" (256 and 32), rounds 1088/576 up to 2. The ceilings come from the project's committed H200
# benchmark (`results/kernel_bench_h200.json`, notebook 04): dense bf16 matmul and a
# device-to-device copy, measured in the same run. Their ratio is the [ridge](../docs/glossary.md#ridge). 128 heads (one GPU
# holding all heads) are compute-bound and 16 heads (a tensor-parallel shard of 8) are memory-bound:

# %%
flop_per_s, bytes_per_s = h200_ceilings()
print(f"H200, measured: {flop_per_s / 1e12:.0f} TFLOP/s bf16 matmul, {bytes_per_s / 1e12:.2f} TB/s copy, "
      f"ridge {flop_per_s / bytes_per_s:.0f} FLOP/byte")
ridge = flop_per_s / bytes_per_s
intensity = {}
for heads in (128, 16):
    c = cost.attention_core_cost(v3.replace(num_attention_heads=heads), lens)
    intensity[heads] = cost.decode_intensity(v3.replace(num_attention_heads=heads))
    assert intensity[heads] == c.intensity  # the same function, at the same shape
    bound = "compute" if c.intensity > ridge else "memory"
    floor_us = max(c.flops / flop_per_s, c.bytes / bytes_per_s) * 1e6
    print(f"h_q={heads:3d}: {c.intensity:6.1f} FLOP/byte -> {bound}-bound, "
          f"floor {floor_us:5.1f} us per layer on the H200")
assert intensity[128] > ridge > intensity[16]
assert (round(intensity[128]), round(intensity[16])) == (228, 30)  # as the text above quotes them
limit = {h: cost.cached_byte_intensity(v3.replace(num_attention_heads=h)) for h in (128, 16)}
assert (round(limit[128]), round(limit[16], 1)) == (242, 30.2)

# %% [markdown]
# Across context lengths (above: the arithmetic; below: the time floor on the H200):

# %%
fig = naive_vs_absorbed_cost()

# %% [markdown]
# Prefill is the other way round: there every token is a query, the rebuilt keys and values are
# shared by all T queries, and the naive order does less arithmetic (a 4,096-token prompt):

# %%
for order in ("naive", "absorbed"):
    c = cost.prefill_cost(v3, 4096, order)
    print(f"prefill {order:9s} {c.flops / 1e12:6.2f} TFLOP per layer")
assert cost.prefill_cost(v3, 4096, "naive").flops < cost.prefill_cost(v3, 4096, "absorbed").flops

# %% [markdown]
# This is why serving engines (vLLM's `MLACommonImpl` docstring spells it out; SGLang's
# `dispatch_attn_forward_method` does the same for a prefill with no cached prefix) run prefill in the decompressed, compute-friendly order and decode in the absorbed,
# data-movement-friendly order.
#
# ## Measured on this machine (optional)
#
# One decode step of a DeepSeek-V2-Lite-sized layer (16 heads) over 2,048 cached tokens, on the CPU:

# %%
# NBVAL_IGNORE_OUTPUT
lite = MLAConfig.deepseek_v2_lite()
layers = {"naive": NaiveMLA(lite).eval(), "absorbed": AbsorbedMLA(lite).eval()}
layers["absorbed"].load_state_dict(layers["naive"].state_dict())
h_all = torch.randn(1, 2049, lite.hidden_size) * 0.02
pos = torch.arange(2049)[None]
timings = {}
with torch.no_grad():
    for name, layer in layers.items():
        cache = ContiguousLatentCache()
        layer(h_all[:, :2048], pos[:, :2048], cache)
        best = float("inf")
        for _ in range(5):
            snapshot = ContiguousLatentCache()
            snapshot.c_kv, snapshot.k_pe = cache.c_kv, cache.k_pe
            t0 = time.perf_counter()
            out = layer(h_all[:, 2048:], pos[:, 2048:], snapshot)
            best = min(best, time.perf_counter() - t0)
        timings[name] = (best, out)
    for name, (seconds, _) in timings.items():
        print(f"{name:9s} {seconds * 1e3:7.2f} ms per decode step")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"absorbed is {timings['naive'][0] / timings['absorbed'][0]:.1f}x faster here")

# %%
print(f"same output: {rel_err(timings['absorbed'][1], timings['naive'][1]) < 1e-4}")
assert rel_err(timings["absorbed"][1], timings["naive"][1]) < 1e-4

# %% [markdown]
# Wall-clock times on a shared laptop CPU move around; the arithmetic ratio counted above is the
# robust fact.
#
# %% [markdown]
# ## Should the products be pre-multiplied? (optional)
#
# One can go further and store $W^{UQ\top} W^{UK}$ (query side) and $W^{O} W^{UV}$ (output side)
# as single matrices. It is a real trade-off, not a free win: the products are bigger than the
# factors (exercise 3 counts by how much), so they cost more memory traffic. One public study (madsys-dev/deepseekv2-profile) measured
# materialised products to be slower than applying the low-rank factors in sequence; FlashInfer
# PR #551 chose the other way. `AbsorbedMLA` applies the factors in sequence.
#
# ## What we saw (core)
#
# - Absorption is the associativity of matrix products: the scores and outputs are the same
#   numbers (fp32 to $10^{-5}$, bf16 to $2\cdot 10^{-2}$), but no per-head key or value is built.
# - It works only because the position-dependent rotation lives in a separate part of each head.
# - Decode becomes multi-query attention over a 576-wide key and a 512-wide value; its intensity
#   tends to $1.89\, n_h$ FLOP/byte for long contexts (228 at 128 heads and 30 at 16 at the shape above), so 128 heads are compute-bound on
#   an H200 and 16 heads memory-bound.
# - The scale is $1/\sqrt{192}$ (times YaRN's $m^2$), never $1/\sqrt{576}$.
#
# ## Exercises (core)
#
# Predict, then run: write your prediction in the variable (it is `...` until you do), then run the
# cell after it, which runs the experiment and checks your prediction (`mla_edu.workshop.checks`). The
# instructor hands out the answers, with the why, after the exercise.
#
# **1.** In the "why decoupled" cell, absorb the query as $W^\top R_3^\top q$ instead of $W^\top q$.
# Which of the five positions' scores come out right now? (A set of positions.) Then: why can no single
# absorbed query get them all?

# %%
ex1_right_positions = ...  # a set of positions in 0..4

# %%
from mla_edu.workshop import checks  # noqa: E402

gen = torch.Generator().manual_seed(1)
q1, w1, latents = (torch.randn(shape, generator=gen, dtype=torch.float64) for shape in [(8,), (8, 16), (5, 16)])
cos5, sin5 = cos_sin(cfg, torch.arange(5))
want = torch.stack([q1 @ apply_rope(w1 @ latents[j], cos5[j].double(), sin5[j].double(), interleave=True)
                    for j in range(5)])  # rope on the content key, position j
q_back = apply_rope(q1, cos5[3].double(), -sin5[3].double(), interleave=True)  # R_3^T q: rotate back by 3
absorbed_at_3 = latents @ (w1.T @ q_back)
right = {j for j in range(5) if torch.allclose(want[j], absorbed_at_3[j])}
r1 = checks.check_items("exercise 1", ex1_right_positions, right, mistakes={
    frozenset({0}): "that is the query absorbed with R_0, the identity; R_3 moves the match elsewhere",
    frozenset(range(5)): "one absorbed query carries one rotation; each key position needs its own"})

# %% [markdown]
# **2.** By hand, from the counts above: the decode intensity (FLOP per byte of the attention core, q in and o
# out counted) at the same shape, 64 requests of 4096 tokens, with `num_attention_heads=64`. Then: on which side
# of the H200's ridge does it lie, `"memory"` (below) or `"compute"` (above)?

# %%
ex2_intensity = ...  # FLOP per byte, within 0.1%
ex2_bound = ...  # "memory" or "compute"

# %%
v3_64 = v3.replace(num_attention_heads=64)
at_64 = cost.decode_intensity(v3_64)
core_64 = cost.attention_core_cost(v3_64, lens)
q_bytes = 2 * len(lens) * 64 * (v3.kv_lora_rank + v3.qk_rope_head_dim)  # bf16 q [B, H, r + dr] in
o_bytes = 2 * len(lens) * 64 * v3.kv_lora_rank  # bf16 o [B, H, r] out
assert at_64 == core_64.intensity and lens == [4096] * 64  # the shape the prose names
q_pe_bytes = 2 * len(lens) * 64 * v3.qk_rope_head_dim  # the rope part of q
r2 = [checks.check_number("exercise 2, intensity", ex2_intensity, at_64, tolerance=0.001, unit=" FLOP/byte",
                          mistakes={128.0: "you rounded the FLOP-per-byte ratio of one head up to 2; keep it exact",
                                    # 119.0 and 119.2 (0.17% apart): two keys, one hint
                                    core_64.flops / (core_64.bytes - o_bytes): "reading q and writing o cost bytes "
                                                                               "too; your count leaves one out",
                                    core_64.flops / (core_64.bytes - q_bytes): "reading q and writing o cost bytes "
                                                                               "too; your count leaves one out",
                                    core_64.flops / (core_64.bytes - q_pe_bytes): "q in is 576 wide: q_nope "
                                                                                  "absorbed (512) and q_pe (64)",
                                    core_64.flops / (core_64.bytes + q_pe_bytes): "o out is the 512-wide latent: "
                                                                                  "no rope part",
                                    cost.cached_byte_intensity(v3_64): "that is the long-context limit, the cache's "
                                                                       "bytes only; at this shape reading q and "
                                                                       "writing o cost bytes too"}),
      checks.check_choice("exercise 2, side of the ridge", ex2_bound,
                          {"memory": "below the ridge: memory-bound", "compute": "above the ridge: compute-bound"},
                          "compute" if at_64 > ridge else "memory")]

# %% [markdown]
# **3.** Count the bytes of $W^{UQ\top} W^{UK}$ for all 128 heads of DeepSeek-V3 in bf16 (per head
# $W^{UQ}_i$ is `[128, q_lora_rank]`, $W^{UK}_i$ is `[128, kv_lora_rank]`), and the bytes of the two
# factors.

# %%
ex3_product_bytes = ...  # an int
ex3_factor_bytes = ...  # an int

# %%
heads, d_nope, d_q, d_kv = v3.num_attention_heads, v3.qk_nope_head_dim, v3.q_lora_rank, v3.kv_lora_rank
product, factors = heads * d_q * d_kv * 2, heads * (d_nope * d_q + d_nope * d_kv) * 2
r3 = [checks.check_number("exercise 3, product", ex3_product_bytes, product, unit=" bytes", mistakes={
          2 * product: "that is 4 bytes a number: bf16 is 2", product // heads: "that is one head; count all 128"}),
      checks.check_number("exercise 3, factors", ex3_factor_bytes, factors, unit=" bytes", mistakes={
          2 * factors: "that is 4 bytes a number: bf16 is 2", factors // heads: "that is one head; count all 128",
          heads * (v3.qk_head_dim * d_q + d_nope * d_kv) * 2:
              "that counts the 64 rope rows of the query projection; only the 128 content rows meet W^UK"})]
if all(r.passed for r in r3):  # the ratio would answer the exercise
    print(f"the product is {product / factors:.0f} times the factors")

