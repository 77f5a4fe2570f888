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
# # 01 · Multi-head Latent Attention, from the paper
#
# **You will learn** what DeepSeek's Multi-head Latent Attention (MLA) computes, why its KV cache is
# under 2% of multi-head attention's, and how to check an implementation against the reference one
# in Hugging Face `transformers`, number for number.
#
# **You need** a CPU. Nothing here uses a GPU. Run All takes seconds on a 2-core CPU
# (its measured time is in README's table of notebooks; notebook 00 predicts it for your machine).
#
# The source is section 2.1 of the DeepSeek-V2 paper ([arXiv 2405.04434](https://arxiv.org/abs/2405.04434)).
# DeepSeek-V3's attention has exactly DeepSeek-V2's shapes (128 heads, $d_c = 512$, $d_c' = 1536$,
# head widths 128 / 64 / 128); only the model around it grows: hidden size 7168 instead of 5120,
# 61 layers instead of 60 (and YaRN's `mscale_all_dim` is 1.0 instead of 0.707). Sources: `docs/sources.md`.

# %%
import torch
from einops import einsum, rearrange

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET=1 when there is no GPU)
from mla_edu import ContiguousLatentCache, MLAConfig, NaiveMLA
from mla_edu.attention import cost
from mla_edu.attention.plots import kv_cache_bytes_per_token

torch.manual_seed(0)
torch.set_printoptions(precision=4)

# %% [markdown]
# ## The symbols (core)
#
# | symbol | name in `transformers` | DeepSeek-V3 |
# |---|---|---|
# | $d$ | `hidden_size` | 7168 |
# | $n_h$ | `num_attention_heads` | 128 |
# | $d_c'$ | `q_lora_rank` (query latent) | 1536 |
# | $d_c$ | `kv_lora_rank` (key/value [latent](../docs/glossary.md#latent)) | 512 |
# | $d_h$ | `qk_nope_head_dim` | 128 |
# | $d_h^R$ | `qk_rope_head_dim` | 64 |
# | $d_v$ | `v_head_dim` | 128 |
#
# `MLAConfig` holds them; presets carry the published values.

# %%
for preset in (MLAConfig.deepseek_v3(), MLAConfig.deepseek_v2(), MLAConfig.deepseek_v2_lite()):
    c = preset
    print(f"{c.name:17s} hidden={c.hidden_size:5d} heads={c.num_attention_heads:3d} "
          f"q_lora_rank={str(c.q_lora_rank):5s} kv_lora_rank={c.kv_lora_rank} "
          f"nope={c.qk_nope_head_dim} rope={c.qk_rope_head_dim} v={c.v_head_dim} "
          f"cached/token={c.kv_cache_dim}")
attention_dims = ("num_attention_heads", "q_lora_rank", "kv_lora_rank",
                  "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
assert all(getattr(MLAConfig.deepseek_v3(), k) == getattr(MLAConfig.deepseek_v2(), k) for k in attention_dims)

# %% [markdown]
# ## The equations (core)
#
# For the token at position $t$ with hidden state $h_t$:
#
# **Keys and values go through a small latent.**
# $$c^{KV}_t = W^{DKV} h_t \in \mathbb{R}^{d_c}, \qquad
#   k^C_{t,i} = W^{UK}_i c^{KV}_t, \qquad v^C_{t,i} = W^{UV}_i c^{KV}_t$$
#
# **Queries too** (DeepSeek-V2-Lite skips this and uses $q_t = W^Q h_t$):
# $$c^Q_t = W^{DQ} h_t \in \mathbb{R}^{d_c'}, \qquad q^C_{t,i} = W^{UQ}_i c^Q_t$$
#
# **Position goes in a separate, small part** ([decoupled](../docs/glossary.md#decoupled-rope) RoPE). Each head gets its own rotated
# query part, but the rotated key part $k^R_t$ is *one vector shared by all heads*:
# $$q^R_{t,i} = \mathrm{RoPE}(W^{QR}_i c^Q_t), \qquad k^R_t = \mathrm{RoPE}(W^{KR} h_t)$$
#
# **Each head attends as usual** on the concatenations $q_{t,i} = [q^C_{t,i}; q^R_{t,i}]$ and
# $k_{j,i} = [k^C_{j,i}; k^R_j]$:
# $$o_{t,i} = \sum_{j \le t} \mathrm{softmax}_j\!\Big(\frac{q_{t,i}^\top k_{j,i}}{\sqrt{d_h + d_h^R}}\Big)\, v^C_{j,i},
#   \qquad u_t = W^O [o_{t,1}; \dots; o_{t,n_h}]$$
#
# In DeepSeek's checkpoints an RMSNorm sits on each latent (`q_a_layernorm`, `kv_a_layernorm`),
# and $W^{DKV}$ and $W^{KR}$ are one matrix, `kv_a_proj_with_mqa`. $W^{UK}$ and $W^{UV}$ are one
# matrix too, `kv_b_proj`. `q_a_proj` is $W^{DQ}$; `q_b_proj` stacks each head's $W^{UQ}_i$ and $W^{QR}_i$.
#
# **Only $c^{KV}_t$ and $k^R_t$ need caching**: $d_c + d_h^R = 512 + 64 = 576$ numbers per token
# per layer. Every head's keys and values can be rebuilt from them.
#
# The code names the vectors as sgl-kernel's decode kernel does ([`q_nope`, `q_pe`](../docs/glossary.md#q_nope-q_pe), and a cache of
# `[c_kv; k_pe]` rows, notebook 04):
#
# | symbol | in the code | size |
# |---|---|---|
# | $c^{KV}_t$ | `c_kv` | $d_c$ |
# | $k^R_t$ | `k_pe` | $d_h^R$ |
# | $q^C_{t,i}$ | `q_nope` | $d_h$ per head ($d_c$ once absorbed, notebook 02) |
# | $q^R_{t,i}$ | `q_pe` | $d_h^R$ per head |
# | $k^C_{t,i}$, $v^C_{t,i}$ | `k_nope`, `v` | $d_h$, $d_v$ per head |

# %% [markdown]
# ## Building it by hand, one equation at a time (core)
#
# A tiny config keeps every tensor printable. `NaiveMLA` holds the weights under the names
# `transformers` uses; here we only borrow them.

# %%
config = MLAConfig.tiny()
layer = NaiveMLA(config).eval()
for name, p in layer.named_parameters():
    torch.nn.init.normal_(p, std=0.2) if p.dim() > 1 else torch.nn.init.ones_(p)
    print(f"{name:28s} {list(p.shape)}")

# %%
B, T = 2, 6
h = torch.randn(B, T, config.hidden_size)                  # [B, T, d]
positions = torch.arange(T).expand(B, T)                   # [B, T]
H, r = config.num_attention_heads, config.kv_lora_rank
dn, dr, dv = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim

# %% [markdown]
# **Compress** the keys and values into $c^{KV}$, and make the shared positional key $k^R$:

# %%
from mla_edu.rope import apply_rope, cos_sin

kv_a = layer.kv_a_proj_with_mqa(h)                          # [B, T, r + dr]
c_kv, k_pe = kv_a.split([r, dr], dim=-1)                    # [B, T, r], [B, T, dr]
c_kv = layer.kv_a_layernorm(c_kv)
cos, sin = cos_sin(config, positions)                       # [B, T, dr/2] each
k_pe = apply_rope(k_pe, cos, sin, config.rope_interleave)   # one rotated key part per token, shared by heads
print("cached per token:", c_kv.shape[-1] + k_pe.shape[-1], "numbers")

# %% [markdown]
# **Queries**: compress, decompress per head, rotate the positional part.

# %%
q = layer.q_b_proj(layer.q_a_layernorm(layer.q_a_proj(h)))  # [B, T, H * (dn + dr)]
q = rearrange(q, "b t (h d) -> b t h d", h=H)               # [B, T, H, dn + dr]
q_nope, q_pe = q.split([dn, dr], dim=-1)                    # [B, T, H, dn], [B, T, H, dr]
q_pe = apply_rope(q_pe, cos[:, :, None], sin[:, :, None], config.rope_interleave)

# %% [markdown]
# **Decompress** every head's keys and values from the latent. `kv_b_proj` stacks $W^{UK}_i$ and
# $W^{UV}_i$ for each head.

# %%
w_kv_b = rearrange(layer.kv_b_proj.weight, "(h d) r -> h d r", h=H)   # [H, dn + dv, r]
w_uk, w_uv = w_kv_b.split([dn, dv], dim=1)                            # [H, dn, r], [H, dv, r]
k_nope = einsum(c_kv, w_uk, "b t r, h d r -> b t h d")                # [B, T, H, dn]
v = einsum(c_kv, w_uv, "b t r, h d r -> b t h d")                     # [B, T, H, dv]

# %% [markdown]
# **Attend.** The score is the sum of the two parts; the scale is $1/\sqrt{d_h + d_h^R}$ (no YaRN
# here, so `config.softmax_scale` is exactly that).

# %%
assert config.softmax_scale == (dn + dr) ** -0.5  # no YaRN here: m = 1
scores = (einsum(q_nope, k_nope, "b t h d, b s h d -> b h t s")
          + einsum(q_pe, k_pe, "b t h d, b s d -> b h t s")) / (dn + dr) ** 0.5
causal = torch.ones(T, T, dtype=torch.bool).tril()
p = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)         # [B, H, T, T]
o = einsum(p, v, "b h t s, b s h d -> b t h d")                        # [B, T, H, dv]
u_by_hand = layer.o_proj(rearrange(o, "b t h d -> b t (h d)"))         # [B, T, d]

# %% [markdown]
# `NaiveMLA` is the same computation, packaged. They agree to rounding:

# %%
with torch.no_grad():
    u = layer(h, positions)
err = ((u - u_by_hand).norm() / u.norm()).item()
print(f"NaiveMLA vs by hand: relative error < 1e-6: {err < 1e-6}")
assert err < 1e-6

# %% [markdown]
# ## Checking against `transformers` (core)
#
# Matching our own hand-written version proves little. The test that matters (as minGPT's single
# test does for GPT-2) is to load the weights of the reference implementation and get the same
# numbers: here `transformers`' `DeepseekV3Attention`, with rope interleaving and YaRN scaling on.
# (DeepSeek-V2 and V3 use YaRN, which also multiplies the softmax scale by a
# temperature $m^2$, notebook 02; `NaiveMLA` takes its scale from `config.softmax_scale`, which includes it.)

# %%
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
config = MLAConfig.tiny(rope_scaling=yarn, max_position_embeddings=256)
hf_config = config.to_hf(version=3)
hf_attn = DeepseekV3Attention(hf_config, layer_idx=0).eval()
with torch.no_grad():
    for p in hf_attn.parameters():
        p.normal_(0, 0.2) if p.dim() > 1 else p.fill_(1.0)
rotary = DeepseekV3RotaryEmbedding(hf_config)

T = 40
h = torch.randn(1, T, config.hidden_size)
positions = torch.arange(T)[None]
mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
with torch.no_grad():
    reference = hf_attn(h, position_embeddings=rotary(h, positions), attention_mask=mask)[0]
    ours = NaiveMLA.from_hf(hf_attn)(h, positions)
err = ((ours - reference).norm() / reference.norm()).item()
print(f"NaiveMLA vs transformers DeepseekV3Attention (fp32, YaRN): relative error < 1e-5: {err < 1e-5}")
assert err < 1e-5

# %% [markdown]
# The test suite (`tests/test_attention.py`) does the same for configurations with and without
# query compression, both RoPE layouts, YaRN and DeepSeek-V2's module; on random configurations
# drawn by Hypothesis it checks the absorbed order against the naive one, and decode against prefill.
#
# ## Decoding with the latent cache (core)
#
# At decode time each new token attends to everything before it. MLA caches only $c^{KV}$ and
# $k^R$; `ContiguousLatentCache` holds them. Prefill 30 tokens, then decode the last 10 one at a time: the
# outputs equal the full causal pass above.

# %%
layer = NaiveMLA.from_hf(hf_attn)
cache = ContiguousLatentCache()
with torch.no_grad():
    outputs = [layer(h[:, :30], positions[:, :30], cache)]
    for t in range(30, T):
        outputs.append(layer(h[:, t:t + 1], positions[:, t:t + 1], cache))
decoded = torch.cat(outputs, dim=1)
err = ((decoded - reference).norm() / reference.norm()).item()
print(f"cache holds c_kv {list(cache.c_kv.shape)} and k_pe {list(cache.k_pe.shape)}")
print(f"step-by-step decode vs one causal pass: relative error < 1e-5: {err < 1e-5}")
assert err < 1e-5

# %% [markdown]
# Notice what each decode step did: it rebuilt $k^C$ and $v^C$ for **every cached token and every
# head** from the latent, then threw them away. That is the price of caching so little, and
# notebook 02 removes it.
#
# ## What the small cache buys (core)
#
# Bytes cached per token per layer in bf16, at DeepSeek-V3's sizes, for multi-head attention,
# grouped-query attention with 8 KV heads, multi-query attention, and MLA. Mind the key widths:
# the MHA row caches DeepSeek's full 192-wide key (RoPE part included), the GQA and MQA rows the
# usual 128-wide heads, and MLA one 576-wide row whose first 512 numbers are also the value.

# %%
v3 = MLAConfig.deepseek_v3()
sizes = cost.kv_cache_bytes_per_token(v3)
print(f"{'scheme':6s} {'KV heads':>8s} {'K width':>7s} {'V width':>7s} {'bytes':>7s} {'of MHA':>7s} {'x MQA':>6s}")
for scheme, (kv_heads, k_width, v_width) in cost.kv_cache_layout(v3).items():
    nbytes = sizes[scheme]
    print(f"{scheme:6s} {kv_heads:8d} {k_width:7d} {v_width:7d} {nbytes:7,d} {nbytes / sizes['MHA']:7.2%} "
          f"{nbytes / sizes['MQA']:6.2f}")
layers = 61
print(f"MLA over DeepSeek-V3's {layers} layers: {sizes['MLA'] * layers / 1000:.1f} KB per token")
for scheme in ("MLA", "MHA"):
    print(f"a 4,096-token request, {scheme}: {sizes[scheme] * layers * 4096 / 1e9:.2f} GB")
assert sizes["MLA"] == 1152 and round(sizes["MLA"] / sizes["MHA"], 3) == 0.014
assert sizes["MLA"] / sizes["MQA"] == 2.25

# %% [markdown]
# The paper's Table 1 counts MHA's cache as $2 n_h d_h$ numbers per token and layer, keys as wide
# as values (128), without the 64 RoPE numbers. On that basis MLA's share is a little larger:

# %%
mha_paper = 2 * v3.num_attention_heads * v3.qk_nope_head_dim  # 2 n_h d_h = 32,768 numbers
print(f"MLA / MHA, paper's basis: {v3.kv_cache_dim} / {mha_paper:,} = {v3.kv_cache_dim / mha_paper:.2%}; "
      f"with the 192-wide key: {sizes['MLA'] / sizes['MHA']:.2%}")
assert round(v3.kv_cache_dim / mha_paper, 4) == 0.0176

# %%
fig = kv_cache_bytes_per_token()

# %% [markdown]
# A 4,096-token request holds 0.29 GB of MLA cache; with DeepSeek-V3's real MHA dimensions
# (128 heads $\times$ 320 numbers $\times$ 2 bytes $\times$ 61 layers per token) it would hold
# 20.5 GB. MLA's cache is 2.25 times an MQA cache of 128-wide heads (1,152 against 512 bytes; the
# paper puts it as "equal to GQA with only 2.25 groups"), yet every head still gets its own keys
# and values.
#
# ## What we saw (core)
#
# - MLA caches one 512-number latent and one 64-number positional key per token and layer; each
#   head's keys and values are linear functions of that latent.
# - Our `NaiveMLA` reproduces `transformers`' `DeepseekV3Attention` to $10^{-5}$ in fp32, with
#   YaRN, in prefill and in step-by-step decode.
# - The literal form decompresses the whole cache for every head at every step.
#
# ## Exercises (optional)
#
# Predict, then run: write your prediction in the variable (it is `...` until you do), then run the
# cell after it, which runs the experiment and checks your prediction (`mla_edu.workshop.checks`). The
# instructor hands out the answers, with the why, after the exercise.
#
# **1.** Set `rope_interleave=False` in `MLAConfig.tiny(...)` and re-run the `transformers` check with
# the same weights. Does `NaiveMLA` still agree with `DeepseekV3Attention` to $10^{-5}$, when the
# cached `k_pe` is laid out differently? (`True` or `False`; then say why.)

# %%
ex1_still_agrees = ...  # True or False

# %%
from mla_edu.workshop import checks  # noqa: E402

flat_config = MLAConfig.tiny(rope_scaling=yarn, max_position_embeddings=256, rope_interleave=False)
hf_flat = DeepseekV3Attention(flat_config.to_hf(version=3), layer_idx=0).eval()
hf_flat.load_state_dict(hf_attn.state_dict())  # the same weights, the other rope layout
with torch.no_grad():
    flat_ref = hf_flat(h, position_embeddings=DeepseekV3RotaryEmbedding(hf_flat.config)(h, positions),
                       attention_mask=mask)[0]
    flat_err = ((NaiveMLA.from_hf(hf_flat)(h, positions) - flat_ref).norm() / flat_ref.norm()).item()
r1 = checks.check_choice("exercise 1", ex1_still_agrees, {True: "they still agree", False: "they disagree"},
                         flat_err < 1e-5)

# %% [markdown]
# **2.** DeepSeek-V2-Lite has `q_lora_rank=None`. Which parameters of `NaiveMLA` disappear, and which
# appear, against `MLAConfig.tiny()` (which compresses the query)? Give two sets of names as
# `named_parameters()` spells them (e.g. `"o_proj.weight"`; the uncompressed $W^Q$ is `q_proj`).

# %%
ex2_disappear = ...  # a set of parameter names
ex2_appear = ...  # a set of parameter names

# %%
with_q_lora = {name for name, _ in NaiveMLA(MLAConfig.tiny()).named_parameters()}
without_q_lora = {name for name, _ in NaiveMLA(MLAConfig.deepseek_v2_lite().replace(hidden_size=64)).named_parameters()}
r2 = [checks.check_items("exercise 2, disappear", ex2_disappear, with_q_lora - without_q_lora),
      checks.check_items("exercise 2, appear", ex2_appear, without_q_lora - with_q_lora)]

# %% [markdown]
# **3.** How many bytes would one request of 128K = 131,072 tokens cache in DeepSeek-V3 (61 layers,
# bf16) with MLA? With MHA (DeepSeek's real widths, as in the table above)?

# %%
ex3_mla_bytes = ...  # an int
ex3_mha_bytes = ...  # an int

# %%
tokens = 128 * 1024
r3 = []
for scheme, prediction in [("MLA", ex3_mla_bytes), ("MHA", ex3_mha_bytes)]:
    per_layer = sizes[scheme]  # bytes per token per layer, bf16
    r3.append(checks.check_number(
        f"exercise 3, {scheme}", prediction, per_layer * layers * tokens, unit=" bytes",
        mistakes={per_layer * tokens: "that is one layer: every one of the 61 layers caches its own",
                  2 * per_layer * layers * tokens: "that is 4 bytes a number: the cache is bf16 (2 bytes)",
                  per_layer * layers * 128_000: "128K is 128 * 1024 tokens here",
                  2 * v3.num_attention_heads * 128 * 2 * layers * tokens:
                      "that counts 128-wide keys: DeepSeek's MHA key is 192 wide (its RoPE part included)"}))

