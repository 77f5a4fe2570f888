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
# # 07 · The fix
#
# **You will learn** what SGLang's merged fix (PR #6998, commit `e58423b2b`) changed and why each
# piece matters, measured piece by piece; why a second, latent defect (the workspace) did no harm in
# the seed's runs and when it would; how a [poison fill](../docs/glossary.md#poison-fill) turns silent garbage into a loud failure;
# what the automated PR summary and the review got right and wrong; and how to catch this class of
# bug before it reaches a benchmark.
#
# **You need** a CPU (Run All: about a minute on a 2-core CPU; README's table of notebooks has the
# measured time) and notebook 06. On a GPU the same cells capture real CUDA graphs and run in bf16.
#
# Facts about SGLang come from its
# `python/sglang/srt/layers/attention/cutlass_mla_backend.py` at `7059ae16f` (before) and
# `e58423b2b` (after); every source is listed in `docs/sources.md`. The mini engine's `cutlass_mla` backend has each pre-fix defect behind a
# switch: `width` (capture hands the kernel the view `cuda_graph_kv_indices[:bs, :1]`) and
# `workspace` (capture and replay allocate workspaces the graph does or does not use). Like SGLang,
# before and after the fix, it never resets the index rows, so stale page ids stay. `poison_fill=True`
# is a teaching instrument SGLang never had (section 4): it fills the buffer with an out-of-range
# page id before every fill and runs the kernel checked.

# %%
import torch

import mla_edu
from mla_edu.case_study import diagnose as dg
from mla_edu.case_study import plots
from mla_edu.graphs import scenarios as sc
from mla_edu.model import load_pretrained, task
from mla_edu.serving import MERGED_FIX, PRE_FIX

torch.set_num_threads(1)
DEVICE = mla_edu.default_device()
DTYPE = dg.default_dtype(DEVICE)
TOL = 1e-3 if DTYPE == "float32" else 0.5
model = load_pretrained()
questions = task.default_eval_set()
N = 64
run = dg.accuracy_runs(model, questions, N, DTYPE)  # the seed's flags: W = 33, DP 8 x 16 rows, graphs 64/128
eager = run(disable_cuda_graph=True, defects=PRE_FIX)
print(f"{N} questions, eager accuracy {eager['accuracy']:.3f}")

# %% [markdown]
# ## 1. The merged fix, piece by piece (core)
#
# The diff of [`e58423b2b`](https://github.com/duihuhu/sglang/commit/e58423b2b9f2b037e208ba4ec346bab5cc1eafe8)
# (PR [#6998](https://github.com/sgl-project/sglang/pull/6998); the link is to the fork `duihuhu/sglang`
# because it holds the upstream squash merge `e58423b2b` and its parent `7059ae16f`, where this project
# read them: `docs/sources.md`) in
# `python/sglang/srt/layers/attention/cutlass_mla_backend.py` is small (+2/-19), in the two graph hooks:
#
# ```diff
#  def init_forward_metadata_capture_cuda_graph(...):
# -    max_seqlen_pad = triton.cdiv(seq_lens.max().item(), PAGE_SIZE)
# +    max_seqlen_pad = self.cuda_graph_kv_indices.shape[1]
#      create_flashmla_kv_indices_triton[(bs,)](...)
# -    workspace_size = cutlass_mla_get_workspace_size(max_seqlen_pad * PAGE_SIZE, bs)
# -    self.cuda_graph_mla_workspace = torch.empty(workspace_size, device="cuda", dtype=torch.uint8)
#      self.forward_metadata = CutlassMLADecodeMetadata(
#          self.cuda_graph_mla_workspace, self.cuda_graph_kv_indices[:bs, :max_seqlen_pad])
#
#  def init_forward_metadata_replay_cuda_graph(...):
#      seq_lens = seq_lens[:bs]
# -    seq_lens_cpu = seq_lens_cpu[:bs]
# -    max_seqlen_pad = triton.cdiv(seq_lens_cpu.max().item(), PAGE_SIZE)
#      create_flashmla_kv_indices_triton[(bs,)](...)
# -    workspace_size = cutlass_mla_get_workspace_size(max_seqlen_pad * PAGE_SIZE, bs)
# -    self.cuda_graph_mla_workspace = torch.empty(workspace_size, device="cuda", dtype=torch.uint8)
# -    self.forward_metadata.workspace = self.cuda_graph_mla_workspace
# -    self.forward_metadata.block_kv_indices = self.cuda_graph_kv_indices[:bs, :max_seqlen_pad]
# ```
#
# The mini backend keeps each removed line under a switch, so the same code runs before and after
# the fix: a `-` line above runs when its defect is in `defects`, the `+` line when it is not (the
# `self.poison_fill` lines are section 4's poison fill, off unless asked for).

# %%
import inspect

from mla_edu.serving.backends.cutlass_mla import CutlassMLABackend

capture = inspect.getsource(CutlassMLABackend.init_forward_metadata_capture_cuda_graph)
replay = inspect.getsource(CutlassMLABackend.init_forward_metadata_replay_cuda_graph)
print(capture)
print(replay)
assert "max_seqlen_pad = self.cuda_graph_kv_indices.shape[1]" in capture  # the + line: full width W
assert 'if "width" in self.defects' in capture and 'if "workspace" in self.defects' in replay

# %% [markdown]
# In words:
#
# 1. **width**: the capture hook sets `max_seqlen_pad = self.cuda_graph_kv_indices.shape[1]`, so the
#    captured view is the full width `W` and its `size(1)` equals its real row stride;
# 2. **workspace**: the capture and replay hooks no longer allocate workspaces; the one
#    `init_cuda_graph_state` allocates, sized for the largest graph (`max_bs`), is the only one, and every
#    graph keeps using it (big enough for the seed's graphs, not for every size: section 3);
# 3. it does **not** reset the index rows (stale tails stay). The last row below adds this project's
#    poison fill on top (`poison_fill=True`, not in SGLang).
#
# Each piece applied on top of the previous one, accuracy after each:

# %%
piece = [(name, run(**server_args)) for name, server_args in dg.MERGED_FIX_STEPS]
print(f"{'cutlass_mla with graphs':44s} {'accuracy':>8s} {'invalid':>8s} {'failed loudly':>14s}")
print(f"{'(eager, for reference)':44s} {eager['accuracy']:8.3f} {eager['invalid']:8.3f} {eager['errors']:14d}")
for name, r in piece:
    print(f"{name:44s} {r['accuracy']:8.3f} {r['invalid']:8.3f} {r['errors']:14d}")
accs = [r["accuracy"] for _, r in piece]
assert accs[0] < 0.25 * eager["accuracy"]
assert all(abs(a - eager["accuracy"]) <= 0.03 for a in accs[1:])
assert all(r["errors"] == 0 for _, r in piece)
fig = plots.piece_by_piece_figure(run)  # the runs above (memoized), drawn as figures/ draws them

# %% [markdown]
# The pre-fix row is not notebook 06's pre-fix number: this row runs the model's softmax scale, 06's the
# bug-era kernel's hard-coded one (the pre-fix numbers the project quotes, and what ran each:
# [`docs/results.md`](../docs/results.md#the-pre-fix-numbers-side-by-side)). The width alone brings accuracy back; the workspace fix and the poison fill
# change nothing *here*. What the
# width fix changed in the launch, on the same batch as notebook 06:

# %%
prompts, earlier = dg.example_batch(questions)  # 6 requests, after 8 longer ones finished
d_fix = dg.diagnose_step(model, prompts, earlier=earlier, defects=MERGED_FIX, cuda_graph_bs=(4, 8), dtype=DTYPE,
                         context_length=4096)  # the seed's --context-length, as in notebook 06
print(f"frozen at capture: width {d_fix.captured.width}, row stride {d_fix.captured.row_stride} "
      f"(the buffer's {d_fix.captured.buffer_row_stride}), max_seq_len {d_fix.captured.max_seq_len}")
print("rows reading their own pages:", d_fix.rows_reading_own_pages[: len(d_fix.seq_lens)])
print(f"entries not written for this step (stale ids or the initial 1): "
      f"{int(dg.stale_entries(d_fix).sum())}; every row's logits match eager: {max(d_fix.row_err) < TOL}")
assert d_fix.captured.width == d_fix.captured.row_stride == d_fix.captured.buffer_row_stride
assert all(d_fix.rows_reading_own_pages) and max(d_fix.row_err) < TOL and dg.stale_entries(d_fix).any()

# %% [markdown]
# Full width: `size(1) = stride(0) = W`, so row `b` starts at `b * W`, its own row. The kernel reads
# `ceil(len / 128)` entries per row from device memory (`seq_lens`), so the graph never needed the
# real lengths on the host; `max_seq_len = 128 W` is simply the maximum. The stale tails are still
# there, and no row reads them.
#
# ## 2. The ablation: each defect alone, at one split and at the automatic split count (optional)
#
# One split is what the seed most likely ran: the sgl-kernel wheel SGLang pinned at `7059ae16f`
# (0.1.7) hard-codes one split, and the backend's call passes no split count. That is an inference
# from the pin, not something the PR says: a source build at `7059ae16f` has sgl-kernel's newer
# Python API, where PR #6929 (`18efb5e8e`, already an ancestor of `7059ae16f`) added `num_kv_splits`
# with default -1. The pre-fix result holds either way (with the frozen `max_seq_len = 128` the
# automatic rule gives one split); under the fix a source build would have split, through the one
# workspace the fix allocates (big enough for the seed's graphs, 64 and 128: section 3). The `auto` rows
# model that automatic count, not the pinned
# wheel. With `-1` the kernel picks the split count on the host from `max_seq_len`, the batch size
# and the SM count (sgl-kernel's heuristic), and writes split partials through the workspace.

# %%
from mla_edu.case_study.repro import ABLATION  # (label, defects, poison_fill): the rows repro runs

print("; ".join(f"{label}: defects {sorted(d)}, poison fill {p}" for label, d, p in ABLATION))
ablation = []
for label, defects, poison_fill in ABLATION:
    for splits in (1, -1):
        r = run(defects=frozenset(defects), poison_fill=poison_fill, num_kv_splits=splits)
        ablation.append((label, splits, r))
print(f"{'defects':26s} {'splits':>6s} {'max used':>8s} {'in graphs':>9s} {'accuracy':>8s} {'failed loudly':>14s}")
for label, splits, r in ablation:
    if r["crashed"]:  # only on a GPU: see section 3
        print(f"{label:26s} {'auto' if splits == -1 else '1':>6s}  crashed: {r['crashed'][:60]}")
        continue
    print(f"{label:26s} {'auto' if splits == -1 else '1':>6s} {r['max_splits_used']:8d} "
          f"{r['max_splits_captured']:9d} {r['accuracy']:8.3f} {r['errors']:14d}")
res = {(label, s): r for label, s, r in ablation}
e = eager["accuracy"]
for label in ("width", "width+workspace (pre-fix)"):  # silent: wrong answers, no error
    assert res[label, 1]["errors"] == 0 and res[label, 1]["accuracy"] < 0.25 * e
assert res["width + poison fill", 1]["accuracy"] < 0.25 * e and res["width + poison fill", 1]["errors"] > 0
for s in (1, -1):
    assert abs(res["none (merged fix)", s]["accuracy"] - e) <= 0.03
w1 = res["width + poison fill", 1]
print(f"over {N} questions, width alone with the poison fill: {w1['errors']} requests failed loudly")
assert abs(res["workspace", 1]["accuracy"] - e) <= 0.03
ws_auto = res["workspace", -1]
if DEVICE.type == "cuda":  # harmless, or a crash of the whole CUDA context, depending on the allocator
    assert ws_auto["crashed"] or abs(ws_auto["accuracy"] - e) <= 0.03
else:
    assert abs(ws_auto["accuracy"] - e) <= 0.03 and ws_auto["max_splits_captured"] > 1
pre_auto = res["width+workspace (pre-fix)", -1]
assert pre_auto["max_splits_captured"] == 1  # every graph froze 1 split: max_seq_len = 128 at capture

# %% [markdown]
# Each row, from the mechanism:
#
# - **width alone**: the frozen row stride 1 sends rows 1.. into row 0's entries (`W = 33`, at most
#   16 rows a rank): row 0's own pages, then its stale ids or the initial 1: silently wrong, as the
#   pre-fix code (at one split the workspace does nothing). With `-1` the frozen `max_seq_len = 128`
#   makes the automatic split count 1 in every graph ("in graphs"; "max used" counts eager steps too,
#   and is more if one ran: under DP attention a rank's prefill makes every rank decode eagerly, with
#   the real lengths).
# - **width with the poison fill**: row 0's entries past those written for the step now hold the
#   poison id: requests that reach them fail loudly (NaN logits, reported as errors); those whose
#   reads stay inside row 0's written entries read row 0's pages and answer wrong.
# - **workspace alone**: at one split the kernel never touches the workspace, so a dangling one is
#   harmless. At the automatic split count a graph that takes more than one split (here the graph for
#   64 requests: 2 splits at `W = 33`; the graph for 128 takes one) writes its partials through a
#   workspace the host dropped after capture; the answers stay right because each replay writes every
#   partial before it reads it back. The harm lands elsewhere (section 3).
# - **both** (the pre-fix code): silent and wrong. With `-1` the frozen `max_seq_len = 128` makes the
#   automatic split count 1 in every replay too, so even then the workspace is never touched.
# - **none** (the merged fix): stale tails are still in the buffer, but with the right stride the
#   kernel reads only the `ceil(len / 128)` entries that were just written. Harmless.
#
# ## 3. The workspace hazard, made real (optional)
#
# Correct width, automatic splits, and the pre-fix workspace handling: the graphs are captured
# largest first, each capture stores a fresh workspace on the backend and so drops the one the
# previous (larger) graph writes. `workspace_hazard` captures graphs for 4 and 8, then decodes six
# requests with the graph for 8.
#
# On a GPU this is not a thought experiment. The caching allocator can hand the dropped block to a
# later allocation that fits, and every replay writes into it: on the H200,
# `python -m tools.workspace_reuse` (`results/workspace_reuse_h200.md`) got the very address of the
# graph's dropped workspace for a new 10.5 MB tensor, and one replay overwrote 3.1% of its bytes
# while the graph's own logits matched eager. Once, in a process that had run other configurations
# first, a replay died instead with "an illegal memory access" (seen once; the likely explanation is
# that the block had gone back to the driver, since `torch.cuda.graph` empties the allocator's cache
# as each capture starts), which poisons
# the whole CUDA context (`results/workspace_hazard_h200.md`); so `run_bench` runs such a setting in
# a child process. Here the CPU emulator takes the hazard apart, handing the block to a new owner
# explicitly so that it happens every time. (These engines run the model's own context, 512 tokens:
# a table `W = 5` pages wide, not the seed's 33, so the split count differs from the table below.)

# %%
if DEVICE.type == "cuda":
    print("skipped on the GPU: see python -m tools.workspace_reuse (a fresh process)")
    print(f"the same setting in a child process: {ws_auto['crashed'] or 'ran through this time (allocator luck)'}")
else:
    hz = dg.workspace_hazard(model, prompts, cuda_graph_bs=(4, 8), dtype=DTYPE)
    ok = dg.workspace_hazard(model, prompts, defects=frozenset(), cuda_graph_bs=(4, 8), dtype=DTYPE)
    for name, h in (("workspace defect", hz), ("fixed", ok)):
        print(f"{name:16s}: splits frozen in graph 8: {h.splits}; backend still holds its workspace: "
              f"{h.graph_workspace_held}; logits match eager: {max(h.row_err) < TOL}")
    print("a new owner of the dropped workspace's bytes: one replay overwrote part of its data:",
          hz.owner_bytes_changed > 0)
    assert hz.splits > 1 and not hz.graph_workspace_held and ok.graph_workspace_held
    assert hz.owner_bytes_changed > 0 and max(hz.row_err) < TOL

# %%
# NBVAL_IGNORE_OUTPUT
# what the graph layer itself reports (the CPU emulator tracks storages; a plain CUDA graph does not),
# and how much of the new owner's data one replay overwrote (depends on the kernel's workspace layout)
if DEVICE.type != "cuda":
    print(hz.freed_uses[0])
    print(f"overwritten: {hz.owner_bytes_changed:.1%} of the owner's bytes")
    assert hz.freed_uses and not ok.freed_uses

# %% [markdown]
# After capture the backend no longer holds the workspace the graph for 8 writes. On a GPU the
# caching allocator hands such a block to the next allocation that fits; here we hand it to a new
# owner explicitly, so it happens every time. Every replay then writes split partials into the new
# owner's data. The graph's own answers stay right (it writes each partial before reading it back);
# the corruption is someone else's: a tensor of the next request, a buffer of another graph. With
# one split the kernel never writes the workspace, which is why the seed's runs (one split, by the
# pinned wheel) did not show it.
#
# The fix allocates one workspace before any capture, sized in `init_cuda_graph_state` as
# `cutlass_mla_get_workspace_size(W * PAGE_SIZE, max_bs)`, and never replaces it. A graph for `B` requests
# at `split` splits needs `(4 * 512 + 4) * 128 * split * B` bytes, and `set_split_kv` gives a smaller batch
# more splits, so `split * B` at a smaller captured size can exceed `split * B` at `max_bs`. At the
# seed's `W = 33`, in units of one (request, split) pair:

# %%
from mla_edu.kernels.workspace import num_kv_splits_for  # noqa: E402
from mla_edu.util import PAGE_SIZE  # noqa: E402

SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
for sms, gpu in ((148, "B200"), (132, "H200")):
    need = {bs: bs * num_kv_splits_for(33 * PAGE_SIZE, bs, sms, -1) for bs in SIZES}  # split * B
    over = [bs for bs in SIZES if need[bs] > need[128]]
    print(f"{sms} SMs ({gpu}): split * B = {need}; allocated for max_bs 128: {need[128]}; too small for {over}")
    assert 64 not in over and 4 in over
# the engine refuses such a capture: the fix's workspace, automatic splits, graphs for 4 and 8
try:
    dg.make_engine(model, frozenset(), num_kv_splits=-1, cuda_graph_bs=(4, 8), context_length=4096, sm_count=132)
    raise AssertionError("the graph for 4 fit the workspace sized for 8")
except ValueError as e:
    print(f"{type(e).__name__}: {e}")
    assert "need 34670592 bytes (B=4" in str(e) and "got 23113728" in str(e)

# %% [markdown]
# With 33 splits at `B = 4` the graph for 4 needs 132 units (34,670,592 bytes); the workspace sized for
# `max_bs = 8` (11 splits) holds 88. The real kernel does not check: it would write past the end. So the
# fix was right for the seed's sizes (64 and 128 fit) only. PR #7184 (`ab1a4fa5c`, "fix
# cutlass_mla_backend with cuda_graph") set `num_kv_splits=1` at the backend's three call sites (both
# workspace sizings and the decode) and made 1 sgl-kernel's default, with the comment "Set to 1 to avoid
# cuda_graph issue by default"; it does not say that this sizing was the issue, but one split removes it (`docs/sources.md`).
#
# ## 4. The poison fill: silent garbage becomes a loud failure (core)
#
# FlashMLA's tests fill unused table entries with an out-of-range id and unused pages with NaN, so
# any stray read shows. The same idea here, as an option SGLang never had (`poison_fill=True`,
# `--poison-fill`): before every fill, the index buffer is filled with an out-of-range page id
# (`POISON_PAGE`) and the kernel runs checked, giving NaN to a request that reads one. Same batch
# and the same `--context-length 4096` (`W = 33`) as notebook 06, the pre-fix code, unused entries
# as SGLang leaves them or poisoned:

# %%
seed_step = dict(earlier=earlier, defects=PRE_FIX, cuda_graph_bs=(4, 8), dtype=DTYPE, context_length=4096)
d_silent = dg.diagnose_step(model, prompts, **seed_step)
d_loud = dg.diagnose_step(model, prompts, poison_fill=True, **seed_step)
for name, d in (("stale rows (pre-fix)", d_silent), ("poison fill", d_loud)):
    wrong = sum(e > TOL for e in d.row_err)
    print(f"{name:20s}: rows wrong {wrong} of {len(d.seq_lens)}, NaN rows {sum(d.nan_rows)}")
print("which rows read a poison entry:", [dg.POISON_PAGE in r for r in d_loud.read[: len(d_loud.seq_lens)]])
assert sum(d_silent.nan_rows) == 0 and sum(e > TOL for e in d_silent.row_err) == len(d_silent.seq_lens) - 1
assert d_loud.nan_rows == [dg.POISON_PAGE in r for r in d_loud.read[: len(d_loud.seq_lens)]] and any(d_loud.nan_rows)

# %% [markdown]
# As SGLang leaves the buffer, every wrong row is silently wrong. With the poison fill, a row that
# reads past the entries written this step gets NaN, and the engine ends that request with an
# error: the bug announces itself. At `W = 33` row `b` reads row 0's entries from entry `b` on: a row
# that starts inside row 0's written entries reads row 0's own pages, then its tail; a row that starts
# past them reads only the tail. A row short enough to stay inside row 0's pages reads only live
# entries and is still silently wrong,
# which is why poisoning helps but does not replace a graph-vs-eager test (section 6).
#
# ## 5. What the PR summary and the review got right and wrong (optional)
#
# PR #6998's conversation on GitHub holds an automated summary of the PR (gemini-code-assist) and
# an automated review. Checked against the diff (`7059ae16f` vs `e58423b2b`; the later version of
# the file at PR #7186, `ed89837cf`, the one that passes `sm_scale=layer.scaling`, still has
# `max_seqlen_pad = self.cuda_graph_kv_indices.shape[1]` at capture, no workspace allocation in the
# hooks and no reset in the replay hook) and against the measurements above:
#
# | claim | verdict | evidence |
# |---|---|---|
# | summary: capture now takes `max_seqlen_pad` from the pre-allocated buffer | right | the diff; section 1: that piece alone restores accuracy |
# | summary: adds "initialization of `cuda_graph_kv_indices` to -1" before replay | wrong about the merged code | the diff has no such line (a revision of the PR may have had it: the review comments on one); section 1: merged fix right with stale entries still in the buffer |
# | summary: removes workspace allocation in the capture and replay hooks | right | the diff; section 3: why it matters |
# | review: replay must recompute `max_seqlen_pad`, else "incorrect attention results" | wrong | replay cannot change a launch parameter; the pre-fix replay hook did recompute it, to no effect (notebook 06 section 6, and below) |
# | review: resetting the buffer prevents stale indices from interfering | half right | stale entries only matter through a wrong stride (section 2, "none"); a reset to an *invalid* id with a checked kernel makes stray reads loud (section 4) |
#
# The review's recompute claim, tested: the pre-fix replay hook computes `max_seqlen_pad` from the
# real lengths and stores a matching view in the metadata. What did the graph use?

# %%
print(f"replay hook's view width: {d_silent.extra['metadata_width_after_replay']}; width frozen in the graph: "
      f"{d_silent.captured.width}; host kernel plans during replay: {d_silent.launches_during_replay}")
assert d_silent.extra["metadata_width_after_replay"] == d_silent.needed.width > d_silent.captured.width
assert d_silent.launches_during_replay == 0

# %% [markdown]
# The recomputed value reached the metadata object and nothing else: under replay the Python that
# would read it does not run. The author's own remark, "non-cuda-graph still has bug", is a separate
# matter: sgl-kernel's kernel then hard-coded the softmax scale `1/sqrt(128 + 64)`, ignoring YaRN's
# mscale. PR #7184 (`ab1a4fa5c`, "add sm_scale for sgl-kernel cutlass_mla") added the `sm_scale`
# parameter to the kernel; PR #7186 (`ed89837cf`) made the backend pass `layer.scaling` to it.
# `results/seed_config_cpu.md` measures that defect in the miniature (the `scale` defect).
#
# ## 6. How to catch this class of bug (core)
#
# **A graph-safety checker.** `mla_edu.graphs.check` captures a step once, then replays it against
# eager on random batches, poisoning persistent buffers before each replay, and names the first
# divergence with a hint. Here on the toy version of this very bug (a paged sum reading the table
# with `size(1)` as row stride; notebook 05) and on a workspace allocated during capture:

# %%
for name in ("narrow_view/torch", "narrow_view/torch:fixed", "freed_pool_reuse", "freed_pool_reuse:fixed"):
    rep = sc.check_problem(sc.scenario(name).build(DEVICE), n_trials=4)
    print(f"{name:24s} {'OK' if rep.ok else 'UNSAFE'}  {(rep.hint or '')[:95]}")
    assert rep.ok == sc.scenario(name).safe

# %% [markdown]
# **A differential test on the engine.** The test that would have caught #6998 before a benchmark:
# decode the same batch by graph replay and eagerly, at batch sizes between the captured ones, and
# compare row by row, for each backend configuration. Two batches (3 and 6 requests, padded to 4
# and 8):

# %%
print(f"{'cutlass_mla (section 1)':44s} {'batch':>5s} {'rows != eager':>13s} {'NaN rows':>8s}")
verdict = {}
for name, server_args in dg.MERGED_FIX_STEPS:
    bad = 0
    for ps in (prompts[:3], prompts):
        d = dg.diagnose_step(model, ps, earlier=earlier, cuda_graph_bs=(4, 8), dtype=DTYPE, context_length=4096,
                             **server_args)
        n_bad = sum(e > TOL for e in d.row_err)
        bad += n_bad
        print(f"{name:44s} {len(ps):5d} {n_bad:13d} {sum(d.nan_rows):8d}")
    verdict[name] = bad
pre_fix = dg.MERGED_FIX_STEPS[0][0]
assert verdict[pre_fix] > 0 and all(verdict[k] == 0 for k in verdict if k != pre_fix)

# %% [markdown]
# Poisoned buffers make such a test stronger: a stray read that happens to hit a plausible page id is
# silent, one that hits the poison id is NaN. The PR's author ran GSM8K, which caught the bug only
# as an accuracy number; a row-by-row comparison names the rows (row 0 right, the rest wrong) and
# so points at the stride.
#
# **The same bug elsewhere.** Launch parameters derived on the host from capture-time dummy lengths:
#
# | where | what was frozen | reference |
# |---|---|---|
# | SGLang `trtllm_mla` backend | the capture hook computed the padded block count from the dummy `seq_lens.max()` and handed the kernel `decode_cuda_graph_kv_indices[:bs, :max_seqlen_pad]` (line 211), the same shape as here | SGLang PR #9675 (`ff9b56181`); at its parent, `trtllm_mla_backend.py` lines 210-211 compute `max_seqlen_pad = self._calc_padded_blocks(seq_lens.max().item())` in the capture hook |
# | Hugging Face `transformers` continuous batching | `max_seqlen_q` / `max_seqlen_k`, Python ints baked into graphs as FlashAttention launch constants; a graph was reused for batches with another `max_seqlen_k`; GSM8K fell from about 0.45 to 0.23 | transformers PR #45323 "[CB] Fix capture of max_seqlen" |
# | FlashInfer `trtllm_batch_decode_with_kv_cache` | output depends on the host `max_seq_len` argument, so eager and full-CUDA-graph runs differ | flashinfer issue #4647 |
# | FlashAttention varlen under graphs | "max_seqlen_k is a variable on CPU. After the kernel is capture, changing this value will have no effect" (T. Dao, sic) | Dao-AILab/flash-attention issue #1164 |
#
# ## What we saw (core)
#
# - The merged fix's first piece (full-width capture: `size(1)` equals the row stride) alone restores
#   accuracy; the workspace piece matters only with splits; SGLang did not add a reset.
# - The ablation, row by row, follows from the mechanism: width is the trigger; workspace is latent at
#   one split; stale entries are harmless with a correct stride.
# - With automatic splits a dropped capture-time workspace is written by every replay: someone else's
#   data is overwritten while the graph's own answers look fine. The fix's one workspace, sized for the
#   largest graph, fits the seed's graphs (64, 128) but not a smaller one under automatic splits; PR #7184
#   pinned one split.
# - A poison fill turns stray reads into NaN and errors; reads of live foreign entries stay silent.
# - The automated summary invented a reset; the review asked for a recompute that a graph cannot use.
# - A graph-vs-eager differential test with poisoned buffers catches the whole class; the checker
#   flags the toy versions with hints that point at the cause.
#
# ## Exercises (core)
#
# Predict, then run: write your prediction in the variable (it is `...` until you do), then run the
# cell after it, which runs the experiment and checks your prediction (`mla_edu.workshop.checks`). The
# instructor hands out the answers, with the why, after the exercise.
#
# **1.** The merged fix, automatic splits (`num_kv_splits=-1`), one graph, for 8 (`cuda_graph_bs=(8,)`), at
# `--context-length 8192` (`W = 65`). Which split count does that graph freeze for the six requests of `prompts`
# (section 1's batch, decoded as `d_fix` was), on this machine's SM count (`workspace.device_sm_count()`: 132 on an
# H100 SXM or an H200, and on the CPU, which takes an H200's)? (Hint: the `max_seq_len` the full-width view gives, then
# notebook 04's rule.)

# %%
ex1_frozen_splits = ...  # an int

# %%
from mla_edu.kernels.workspace import device_sm_count, num_kv_splits_for  # noqa: E402
from mla_edu.util import PAGE_SIZE  # noqa: E402
from mla_edu.workshop import checks  # noqa: E402

SMS = device_sm_count()
d_8k = dg.diagnose_step(model, prompts, earlier=earlier, defects=MERGED_FIX, num_kv_splits=-1, cuda_graph_bs=(8,),
                        dtype=DTYPE, context_length=8192)
assert d_8k.captured.width == 65 and d_8k.captured.max_seq_len == 65 * 128  # the full width, as the fix captures
r1 = checks.check_number("exercise 1", ex1_frozen_splits, d_8k.captured.num_splits, mistakes={
    d_8k.needed.num_splits: "that is what this batch needs eagerly; the graph keeps capture's count",
    1: "that is the 1-wide view's count; the merged fix captures the full width",
    65: "that is max_splits; the rule then caps it by the SMs per request",
    min(65, max(1, SMS // 8)): "that is heur, the SMs per request; the rule then rounds the splits to whole waves",
    num_kv_splits_for(33 * PAGE_SIZE, 8, SMS, -1): "that is the count at the seed's context, 4096 (W = 33); here "
                                                   "W = 65"})

# %% [markdown]
# **2.** Make the poison value 1 (the buffer's initial fill, a real page id) instead of `POISON_PAGE`.
# Which rows of section 4's batch still fail loudly (NaN)? (A set of rows.)

# %%
ex2_loud_rows = ...  # a set of rows

# %%
from unittest import mock  # noqa: E402

import mla_edu.serving.backends.cutlass_mla as cutlass_backend  # noqa: E402

with mock.patch.object(cutlass_backend, "POISON_PAGE", 1):  # the poison fill now writes page id 1
    d_one = dg.diagnose_step(model, prompts, poison_fill=True, **seed_step)
loud = {b for b, nan in enumerate(d_one.nan_rows) if nan}
r2 = checks.check_items("exercise 2", ex2_loud_rows, loud, mistakes={
    frozenset(b for b, nan in enumerate(d_loud.nan_rows) if nan): "those read a poison entry with the out-of-range "
                                                                  "id; page 1 is a page the kernel can read"})

# %% [markdown]
# **3.** A backend could keep the pre-fix 1-wide view and still pass section 6's differential test, if the
# kernel took its row stride from one more argument instead of the view's width (`size(1)`). Whatever the kernel
# takes as its row stride is frozen at capture, as the width is. Used as the row stride, which option below still
# gives every row its own pages at every replay?

# %%
OPTIONS3 = {"a": "the longest request's page count (from seq_lens)", "b": "the table's stride(0)",
            "c": "the batch size"}
checks.print_options(OPTIONS3)

# %%
ex3_instead_of_width = ...  # "a", "b" or "c" (the options printed above)

# %%
from mla_edu.kernels import pages_read  # noqa: E402
from mla_edu.util import PAGE_SIZE, cdiv  # noqa: E402

view1 = d_silent.captured_table  # the 1-wide view the pre-fix graph captured
pages1 = [cdiv(n, PAGE_SIZE) for n in d_silent.seq_lens]
own_pages = [list(p) for p in d_silent.intended[: len(pages1)]]
by_size = pages_read(view1, pages1, view1.size(1)) == own_pages  # what the cutlass wrapper does
# the row stride each option freezes at capture: (a) from capture's dummy lengths, one page; (c) the graph's size
strides = {"a": 1, "b": view1.stride(0), "c": d_silent.captured.bs}
right = [k for k, st in strides.items() if pages_read(view1, pages1, st) == own_pages]
assert not by_size and len(right) == 1  # the width reads other rows' pages; exactly one option reads each row's own
r3 = checks.check_choice("exercise 3", ex3_instead_of_width, OPTIONS3, right[0])

# %% [markdown]
# **4.** The seed captured graphs for 64 and 128 and ran 8 DP-attention ranks of 16 requests each. When
# every rank decodes 16 requests, which captured graph does each rank replay, and how many of its rows are
# padded?

# %%
ex4_graph_bs = ...  # 64 or 128
ex4_padded_rows = ...  # an int

# %%
import types  # noqa: E402

from mla_edu.case_study.repro import SEED_CONFIG  # noqa: E402
from mla_edu.serving.graph_runner import GraphRunner  # noqa: E402

per_rank = SEED_CONFIG["max_running_requests"] // SEED_CONFIG["dp_size"]
runner = types.SimpleNamespace(capture_bs=sorted(SEED_CONFIG["cuda_graph_bs"]))
graph_bs = GraphRunner.padded_size(runner, per_rank * SEED_CONFIG["dp_size"])  # DP: the ranks' summed tokens
r4 = [checks.check_number("exercise 4, graph", ex4_graph_bs, graph_bs, mistakes={
          GraphRunner.padded_size(runner, per_rank): "that fits one rank's rows; under DP attention the size is "
                                                     "chosen for the ranks' summed tokens"}),
      checks.check_number("exercise 4, padded rows", ex4_padded_rows, graph_bs - per_rank, mistakes={
          GraphRunner.padded_size(runner, per_rank) - per_rank: "that pads to the graph fitting one rank's rows",
          graph_bs - per_rank * SEED_CONFIG["dp_size"]: "each rank replays the graph with its own rows only, not "
                                                        "the ranks' summed ones"})]

