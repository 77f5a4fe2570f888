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
# # 05 · CUDA graphs and their pitfalls
#
# **You will learn** why serving engines replay decode steps as CUDA graphs, the rules a graph
# imposes (what is frozen at capture, what is not), and six ways those rules break a decode
# backend (five silently, one with an error at capture), each shown failing and caught by a checker,
# and the five silent ones fixed. One of them is the bug behind SGLang PR #6998 (cutlass MLA: GSM8K 0.060
# with graphs, 0.910 to 0.920 over five runs without).
#
# **You need** a CPU. Without a GPU, `mla_edu.graphs` runs an *[emulator](../docs/glossary.md#graph-emulator)* of CUDA graphs; with a GPU,
# the same code captures real `torch.cuda.CUDAGraph`s. Every pitfall below was also run on an H200
# with real graphs (`results/graph_scenarios_h200_cuda.md`), with the same outcome. Run All
# takes seconds on a 2-core CPU (the measured time is in README's table of notebooks).
#
# The rules come from PyTorch's notes on CUDA graphs (docs.pytorch.org, `notes/cuda.html`, section
# "CUDA Graphs") and `torch/cuda/graphs.py`; the facts about SGLang from its code at the commits
# named below. Every source is listed in `docs/sources.md`.

# %%
import inspect

import torch

import mla_edu
from mla_edu.graphs import FreedMemoryError, Graph, GraphCaptureError, graph, is_emulated
from mla_edu.graphs import scenarios as sc
from mla_edu.graphs.plots import launch_overhead, load_launch_results, narrow_view_reads

DEVICE = mla_edu.default_device()
_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. Why graphs: launch overhead (core)
#
# A decode step of a large model launches hundreds of small kernels per token, each doing little
# work. Launched one by one from Python, the GPU waits for the CPU. A CUDA graph records the
# launches once and [replays](../docs/glossary.md#replay) them with one call. `python -m tools.launch_bench` times a toy
# decoder step (per layer: RMSNorm, a matmul, SiLU, the residual add: 9 kernels) eagerly and as
# a graph. The H200 numbers below are read from the committed run.

# %%
h200 = load_launch_results("graph_launch_h200.json")
cpu = load_launch_results("graph_bench_cpu.json")
print(h200["device"])
print(f"{'kernels':>8} {'eager ms':>9} {'replay ms':>10} {'speed-up':>9}")
for r in h200["rows"]:
    print(f"{r['kernels']:8d} {r['eager_ms']:9.3f} {r['replay_ms']:10.3f} {r['speedup']:8.1f}x")
row = min(h200["rows"], key=lambda r: abs(r["kernels"] - 120))
print(f"\nat {row['kernels']} kernels: {row['eager_ms'] / row['kernels'] * 1000:.1f} us per kernel eager, "
      f"{row['replay_ms'] / row['kernels'] * 1000:.1f} us replayed")
speedups = [r["speedup"] for r in h200["rows"]]
print(f"speed-up range: {min(speedups):.1f}x to {max(speedups):.1f}x")
assert min(speedups) > 4.5 and all(r["max_abs_err"] == 0 for r in h200["rows"])

# %% [markdown]
# Replay is 4.6x to 4.9x faster at every size, and the cost per kernel stays flat: eager pays about
# 9 us of Python and launch per kernel, replay about 2 us, so the time saved grows with the number
# of kernels.
#
# The emulator does not make anything faster: it exists so that the rules can be seen and tested
# on a laptop. Its replay costs about 1.3x an eager run (lower panel; target: at most 2x).

# %%
assert all(r["replay_over_eager"] <= 2.0 for r in cpu["rows"])
print(f"emulator replay / eager on CPU: {min(r['replay_over_eager'] for r in cpu['rows']):.1f}x "
      f"to {max(r['replay_over_eager'] for r in cpu['rows']):.1f}x")
fig = launch_overhead()

# %% [markdown]
# ## 2. The rules, seen on a small step (core)
#
# `Graph` is one API for both worlds: `torch.cuda.CUDAGraph` on a GPU, the emulator on CPU.
# `with graph(g): ...` captures, `g.replay()` replays. On CPU, capture records every aten op with
# the tensors it touched; replay runs the recorded ops again on the *same memory*.

# %%
x = torch.arange(4.0, device=DEVICE)  # a static input buffer
host_calls = []


def step():
    host_calls.append("ran")  # host Python
    return (x[:n_host] * 10).sum(dim=0, keepdim=True)  # the slice uses the Python int


def capture_step():
    """A new graph of ``step`` on the starting input; each cell below builds its own, so that it can be re-run."""
    global n_host
    x.copy_(torch.arange(4.0))
    n_host = 2  # a Python int the host computed
    host_calls.clear()
    g = Graph(device=DEVICE)
    with graph(g):
        out = step()
    return g, out


g, out = capture_step()
print("backend:", g.backend, "| emulated:", is_emulated(g))
if is_emulated(g):
    print("recorded ops:", g.recorded_ops())

# %% [markdown]
# **Rule 1: capture only records.** On a GPU nothing runs during capture; the emulator does the
# same (it undoes writes to old buffers and fills new ones with poison, NaN for floats). Read
# outputs only after a replay.

# %%
g, out = capture_step()
print("output right after capture is NaN:", bool(torch.isnan(out).all()))
g.replay()
print("after replay:", out.item())
assert out.item() == 10.0  # (0 + 1) * 10

# %% [markdown]
# **Rule 2: host code does not run at replay.** New inputs go in by *copying into the captured
# buffer*. A Python value the host computes (here `n_host`) was used once, at capture.

# %%
g, out = capture_step()
x.copy_(torch.tensor([5.0, 6.0, 7.0, 8.0]))
n_host = 4
g.replay()
print("host code ran", len(host_calls), "time(s); replay output:", out.item(), "| eager output:", step().item())
assert out.item() == 110.0  # still x[:2]: the slice was frozen at capture

# %% [markdown]
# **Rule 3: memory is addressed, not owned.** A graph keeps the address of every buffer it used,
# but no reference to it. What a dropped buffer becomes depends on when it was allocated
# (PyTorch's notes, "Graph memory management"):
#
# - *during capture*: PyTorch serves capture-time allocations from a private memory pool that lives
#   as long as the graph. Dropped after capture, the block goes back to that pool, not to the
#   general cache: ordinary allocations never get it, but a later capture that shares the pool
#   (`pool=`) can, and then two graphs write the same bytes (pitfall 3);
# - *before capture* (SGLang's workspace: the backend's capture hook, host code, allocates it in GPU
#   memory, and the runner enters `torch.cuda.graph` only after the hook and two warm-up runs):
#   dropped, the block goes back to the general cache, where any later allocation can take it; and
#   entering the next `torch.cuda.graph` calls `torch.cuda.empty_cache()`, which can hand it back to
#   the driver (if nothing else lives in its segment).
#
# Either way the graph still writes there at every replay. The emulator poisons memory its graph
# used and the host dropped before every replay, or, with `strict=True`, refuses to replay. The
# cell below shows the first case above, the shorter one: its step allocates while capturing.

# %%
holder = {}


def step_with_workspace():
    holder["ws"] = torch.empty(4, device=DEVICE)  # allocated while capturing
    torch.mul(x, 2.0, out=holder["ws"])
    return holder["ws"] + 1


gs, _ = Graph.capture(step_with_workspace, warmup=0, strict=True)  # on a GPU: strict implies tracking
gs.replay()
print("replay while the host holds the workspace: OK, output", holder["ws"].tolist())
holder.clear()  # the host replaces / drops the workspace
try:
    gs.replay()
except FreedMemoryError as e:
    print("strict replay refused:", str(e)[:160], "...")

# %% [markdown]
# **Rule 4: warm up before capturing.** Some libraries set themselves up on first use, and that
# setup is not allowed while a stream captures: cuBLAS creates its handle at the first matmul.
# Capturing a step whose first matmul runs inside the capture fails on the H200 with
# `CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate(handle)`, then
# `cudaErrorStreamCaptureInvalidated` at capture end (measured: `results/graph_capture_errors_h200.md`). PyTorch's rule
# (https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs): run the step a few times on a
# side stream before capturing it. The emulator cannot fail as cuBLAS does; it warns instead
# (`GraphWarmupWarning`) when a capture runs a matmul that no warm-up ran on that device.

# %%
import warnings  # noqa: E402

from mla_edu.graphs import GraphWarmupWarning, forget_warmups  # noqa: E402

forget_warmups()  # forget earlier warm-ups (a fresh process has none), so that a re-run warns too
w = torch.eye(4, device=DEVICE) * 3


def matmul_step():
    return x[None] @ w  # [1, 4]: the first matmul this process runs on DEVICE


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with graph(Graph(device=DEVICE, mode="emulated")):  # no warm-up
        matmul_step()
cold = [str(c.message) for c in caught if c.category is GraphWarmupWarning]
print("GraphWarmupWarning:", cold[0][:118], "...")
assert len(cold) == 1 and "warm up on a side stream" in cold[0]

# %% [markdown]
# **Fix:** `Graph.capture(fn, warmup=1)` runs `fn` once eagerly (on a side stream on a GPU), then
# captures it; `mla_edu.graphs.warm_up(fn)` does the same before a `with graph(g):` block.

# %%
with warnings.catch_warnings():
    warnings.simplefilter("error")  # any warning would fail this cell
    gw, out_w = Graph.capture(matmul_step, warmup=1)
gw.replay()
print("captured after a warm-up, replay:", out_w.tolist())
assert out_w.tolist() == [[15.0, 18.0, 21.0, 24.0]]

# %% [markdown]
# On a GPU, the next cell starts a fresh Python process (nothing initialised yet) that captures a
# matmul with no warm-up, and prints the real error; without a GPU it prints the H200's.

# %%
# NBVAL_IGNORE_OUTPUT
import subprocess  # noqa: E402
import sys  # noqa: E402

COLD_CAPTURE = """
import torch
x = torch.randn(64, 64, device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    y = x @ x
"""
if torch.cuda.is_available():
    run = subprocess.run([sys.executable, "-c", COLD_CAPTURE], capture_output=True, text=True)
    lines = [ln for ln in run.stderr.splitlines() if "CUBLAS" in ln or "cudaError" in ln]
    print(f"exit status {run.returncode}:", *lines[-2:], sep="\n")
else:
    print("no GPU here; on the H200:\nCUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate(handle)\n"
          "cudaErrorStreamCaptureInvalidated")

# %% [markdown]
# ## 3. A toy paged decode, and six pitfalls (core)
#
# `mla_edu.graphs.scenarios` builds the smallest decode that shows each pitfall: a latent cache of
# pages of 4 tokens, SGLang's `req_to_token`, a persistent page table `kv_indices [4, 8]` filled
# with 1 (as SGLang's `cuda_graph_kv_indices`), and a kernel that sums each request's cached
# vectors, reading page `j` of request `b` at flat index `b * page_table.size(1) + j`: the row stride
# is taken from the *size*, as sgl-kernel's cutlass MLA wrapper does.
#
# Each scenario captures on SGLang's dummy batch (4 requests of length 1), then replays two real
# batches, each twice, and compares with an eager computation. The H200 column is read from the
# committed run of `python -m mla_edu.graphs.scenarios --mode cuda`.

# %%
import re  # noqa: E402

from mla_edu.kernels import triton_available  # noqa: E402
from mla_edu.paths import RESULTS_DIR as RESULTS  # noqa: E402
from mla_edu.workshop.stored import show_stored  # noqa: E402

h200_outcomes = {}
for line in (RESULTS / "graph_scenarios_h200_cuda.md").read_text().splitlines():
    m = re.match(r"\|\s*cuda\s*\|\s*cuda\s*\|\s*(\S+)\s*\|\s*(.+?)\s*\|$", line)
    if m:
        h200_outcomes[m.group(1)] = m.group(2)


print(f"{sc.count()} pitfalls in {len(sc.PITFALLS)} records (mla_edu.graphs.scenarios.pitfalls; -: no pitfall)")
for p in sc.PITFALLS.values():
    print(f"  {p.number or '-'}  {p.name:20s} under a graph: {p.outcome_cuda:32s} fix: {'yes' if p.fix else 'none'}")


def show(name):
    if sc.scenario(name).needs_triton and not triton_available():  # Linux wheels only: the committed run's line
        return show_stored("05_cuda_graphs_and_their_pitfalls", "narrow-view", lines_from=f"{name:26s} here:")
    here = sc.run_scenario(name, DEVICE, "auto")
    print(f"{name:26s} here: {here:32s} H200 (real graphs): {h200_outcomes[name]}")
    assert here == h200_outcomes[name]


# %% [markdown]
# ### Pitfall 1: a host value frozen at capture
#
# The step reads the batch's longest length from the host copy `seq_lens_cpu` and loops over that
# many tokens. At capture every length is 1, so every replay reads one token per request.
# **Fix:** size the loop for the maximum context; mask by the lengths in device memory.

# %%
print(inspect.getsource(sc.frozen_scalar))  # the step, as the graph captures it
show("frozen_scalar")
show("frozen_scalar:fixed")

# %% [markdown]
# ### Pitfall 2: a narrow view with a size-derived stride (SGLang #6998)
#
# The pre-fix cutlass backend handed the kernel `kv_indices[:bs, :max_seqlen_pad]` with
# `max_seqlen_pad` computed from capture's dummy lengths: 1 page. The view's real row stride is 8,
# but the kernel derives it from `size(1)` = 1, and that launch parameter is frozen into the graph.
# Request `b` reads page `j` at flat index `b + j`: request 0 reads its own row, request 1 reads
# request 0's row shifted by one, and so on. Shown with the torch kernel and a Triton kernel
# (registered with `torch.library.custom_op`, so the emulator records it as one op).
# **Fix (SGLang's merged fix, commit e58423b2b):** capture with the full width.

# %%
# stored output: narrow-view
print(inspect.getsource(sc.narrow_view))  # the step, as the graph captures it
for name in ["narrow_view/torch", "narrow_view/triton", "narrow_view/torch:fixed", "narrow_view/triton:fixed"]:
    show(name)

# %% [markdown]
# Which pages did each request read? Fill the table for a real batch, then read it through the
# full table (stride 8) and through the captured 1-wide view (stride 1):

# %%
print(inspect.getsource(sc.narrow_view_pages))
intended, read = sc.narrow_view_pages(DEVICE)  # [4, W] page ids each, -1 = unused
print("intended pages (-1 = unused):\n", intended.tolist())
print("read through the 1-wide view:\n", read.tolist())
row_ok = (intended == read).all(dim=1).tolist()
print("rows reading the right pages:", row_ok)
assert row_ok == [True, False, False, False]
fig = narrow_view_reads(DEVICE)

# %% [markdown]
# ### Pitfall 3: memory freed after capture, handed to the next capture
#
# The pre-fix backend allocated a workspace in its capture hook, before each capture, and replaced
# it when the next batch size was captured (SGLang captures the largest size first; the last graph's
# workspace went at the first replay, whose hook allocates yet another): the graph keeps writing a
# workspace the host dropped. In SGLang that block went back to the general cache (rule 3's second
# path), and what took it next depended on the run. The scenario below takes the path that can be
# shown every time: its step allocates the workspace while capturing, the block is handed to graph 2
# through the shared pool, and every replay of graph 1 overwrites graph 2's output. In SGLang
# this did no harm only because the kernel touched the workspace only when `split_kv > 1`. (The
# allocator paths and line numbers: [`docs/sources.md`](../docs/sources.md#sglang-and-sgl-kernel).)
# **Fix:** allocate the workspace once, before any capture, large enough for every graph that will
# use it. SGLang's merged fix sized it for the largest graph; with automatic splits a smaller graph
# can need more (notebook 07, section 3), and PR #7184 then pinned one split.

# %%
print(inspect.getsource(sc.freed_pool_reuse))  # the step, as the graph captures it
show("freed_pool_reuse")
show("freed_pool_reuse:fixed")

# %% [markdown]
# ### Pitfall 4: a buffer that is never reset inside the graph
#
# Split partial sums accumulate into a persistent buffer that was zeroed once, eagerly, before
# capture. The first replay is right; every later one adds to the last. **Fix:** zero it inside
# the graph. Same class in the wild: ROCm/aiter PR #4715 (open) fixes a split-K semaphore that was
# zeroed once before capture and never again at replay; there the symptom is a hang.

# %%
print(inspect.getsource(sc.stale_buffer))  # the step, as the graph captures it
show("stale_buffer")
show("stale_buffer:fixed")

# %% [markdown]
# ### Pitfall 5: padded batch slots
#
# A real batch of 3 is padded to the captured 4. If the padded row keeps last step's
# `out_cache_loc`, it writes a stale token into a cache slot that now belongs to a live request.
# **Fix (SGLang's `replay_prepare` in `cuda_graph_runner.py`, at `7059ae16f` lines 546-548):** padded
# rows get `seq_lens.fill_(1)` and `out_cache_loc.zero_()`; slot 0 is a dummy no request owns
# ("The padded slot 0 is used for writing dummy outputs from padded tokens", SGLang's allocators:
# `mem_cache/memory_pool.py` for page size 1 and, for cutlass_mla's 128-token pages,
# `PagedTokenToKVPoolAllocator.clear` in `mem_cache/paged_allocator.py`; both hand out slots or pages
# from 1).

# %%
print(inspect.getsource(sc.padded_slots))  # the step, as the graph captures it
show("padded_slots")
show("padded_slots:fixed")

# %% [markdown]
# ### The correct pattern
#
# Every buffer at maximum size before capture, full-width tables, lengths read from device memory,
# inputs copied into the captured buffers:

# %%
print(inspect.getsource(sc.static_buffers))  # the step, as the graph captures it
show("static_buffers")

# %% [markdown]
# ## 4. Catching them: the graph-safety checker (optional)
#
# `check(step, make_inputs, static_inputs=..., prepare=..., reference=..., persistent=...)`
# captures the step once, then for each random batch (sizes between capture buckets, lengths 1 to
# 32): copies the inputs into the static buffers, computes the eager reference, **poisons the
# persistent buffers** (NaN, or int max for page ids, which the checked kernel turns into NaN),
# lets the host refill what it owns, replays twice and compares. It reports the first divergence
# with a hint. On a GPU it also tracks which memory the graph uses, so the freed workspace is
# found there too.

# %%
rep = sc.check_problem(sc.scenario("narrow_view/torch").build(DEVICE), n_trials=4, seed=0)
print(rep)
assert not rep.ok and "row stride" in rep.hint
print(sc.check_problem(sc.scenario("narrow_view/torch:fixed").build(DEVICE), n_trials=4, seed=0))

# %%
# stored output: checker
print(f"{'problem':26s} {'safe':5s} {'checker':8s} hint")
for s in sc.scenarios():
    if s.refuses_capture:
        continue  # section 5
    if s.needs_triton and not triton_available():  # Linux wheels only: the committed run's line
        show_stored("05_cuda_graphs_and_their_pitfalls", "checker", lines_from=f"{s.name:26s} ")
        continue
    r = sc.check_problem(s.build(DEVICE), n_trials=4, seed=1)
    print(f"{s.name:26s} {str(s.safe):5s} {'OK' if r.ok else 'UNSAFE':8s} {(r.hint or '')[:60]}")
    assert r.ok == s.safe

# %% [markdown]
# The poisoning matters: without it, a stale page-table tail goes unnoticed whenever it happens to
# hold a valid page id (exercise 2 asks what is left to catch the stale buffer then). FlashMLA's
# tests use the same idea (NaN pages, out-of-range ids).

# %% [markdown]
# ## 5. Syncs are refused during capture (optional)
#
# (Last, because on a GPU a refused capture is the end of that capture.) `.item()`, `.tolist()`,
# printing a tensor, `torch.nonzero`, boolean masks: anything that needs the host to wait for the
# device. CUDA raises `operation not permitted when stream is capturing`; the emulator raises
# `GraphCaptureError` with an explanation.

# %%
for name, bad in [(".item()", lambda: x.sum().item()), ("x[x > 5]", lambda: x[x > 5]),
                  ("print(x)", lambda: print(x))]:
    try:
        with graph(Graph(device=DEVICE)):
            bad()
    except (GraphCaptureError, RuntimeError) as e:
        print(f"{name:9s} -> {type(e).__name__}: {str(e)[:78]}...")
    if DEVICE.type == "cuda":
        break  # one refused capture is enough on a GPU

# %% [markdown]
# ### Pitfall 6: a sync inside the captured region
#
# `.item()` to size a loop on the host: CUDA refuses the capture, and so does the emulator, and the
# checker reports it.

# %%
print(inspect.getsource(sc.sync_in_capture))  # the step, as the graph captures it
show("sync_in_capture")
r = sc.check_problem(sc.scenario("sync_in_capture").build(DEVICE), n_trials=2)
print(r.hint[:100])
assert not r.ok

# %% [markdown]
# ## What we saw (core)
#
# - A graph replays recorded launches with recorded arguments on recorded memory: 4.7x faster than
#   eager for a 117-kernel step on an H200, because launches, not math, dominate small decode steps.
# - What ran on the host during capture (Python ints, `.item()`, slices, launch parameters derived
#   from shapes) is frozen; only the contents of captured buffers can change between replays.
# - The six pitfalls end the same on the emulator and on real CUDA graphs (the emulator differs
#   elsewhere: exercise 4 finds where); the SGLang #6998
#   trigger is pitfall 2: only request 0 reads its own pages.
# - Poisoned buffers and a replay-vs-eager differential test catch all of them; none of the fixed
#   versions raises a false alarm (tested over more than 100 random schedules in
#   `tests/test_graphs_check.py`).
#
# ## Exercises (core)
#
# Predict, then run: write your prediction in the variable (it is `...` until you do), then run the
# cell after it, which runs the experiment and checks your prediction (`mla_edu.workshop.checks`). The
# instructor hands out the answers, with the why, after the exercise.
#
# **1.** In `sc.narrow_view`, capture the view 2 pages wide instead of 1 (the kernel then steps rows by 2
# instead of 1; the buffer's real stride is 8). Which rows of the first replay batch read their own pages
# now? (A set of rows.)

# %%
ex1_right_rows = ...  # a set of rows in 0..3

# %%
from mla_edu.graphs.check import HINTS  # noqa: E402
from mla_edu.workshop import checks  # noqa: E402

toy = sc.ToyServer(DEVICE)
reqs1, lens1 = sc.REPLAY_BATCHES[0]
toy.set_batch(reqs1, lens1)
toy.fill_page_table(toy.kv_indices, len(reqs1))
own = sc.pages_through_view(toy.kv_indices[:, :sc.W], toy.seq_lens)  # [4, W] through the full width
two_wide = sc.pages_through_view(toy.kv_indices[:, :2], toy.seq_lens)  # through a 2-wide view: row stride 2
r1 = checks.check_items("exercise 1", ex1_right_rows, {b for b in range(4) if bool((own[b] == two_wide[b]).all())},
                        mistakes={frozenset({0, 1}): "follow row 1's reads: at row stride 2, which flat entries does it read, and whose are they?"})

# %% [markdown]
# **2.** Turn off the poisoning: `sc.check_problem(sc.scenario("stale_buffer").build(DEVICE), poison=False)`.
# Is the stale buffer still caught, and by which of the checker's tests?

# %%
OPTIONS2 = {"a": "NaN from a poisoned buffer", "b": "the second replay on the same inputs differs from the first",
            "c": "row 0 right, rows 1.. wrong (a frozen row stride)", "d": "not caught: the report is OK"}
checks.print_options(OPTIONS2)

# %%
ex2_caught_by = ...  # "a", "b", "c" or "d" (the options printed above)

# %%
rep2 = sc.check_problem(sc.scenario("stale_buffer").build(DEVICE), n_trials=4, seed=1, poison=False)
found = "d" if rep2.ok else "b" if rep2.hint == HINTS["stale"] else "a" if "NaN" in rep2.failure else "c"
r2 = checks.check_choice("exercise 2", ex2_caught_by, OPTIONS2, found)

# %% [markdown]
# **3.** Write a host `prepare` that rebuilds `seq_lens` as a new tensor
# (`server.seq_lens = torch.tensor(...)`) instead of copying into the captured buffer, on the correct
# pattern `sc.static_buffers`. The server held the only reference to the tensor the graph captured. What does
# `check` report?

# %%
OPTIONS3 = {"a": "OK: the graph reads the new tensor", "b": "wrong rows: the graph reads capture's lengths",
            "c": "memory the host freed, used at replay", "d": "capture refused"}
checks.print_options(OPTIONS3)

# %%
ex3_report = ...  # "a", "b", "c" or "d" (the options printed above)

# %%
problem3 = sc.static_buffers(DEVICE)
server3 = problem3.server


def rebuild_prepare(reqs, lens):
    server3.req_pool_indices[: len(reqs)].copy_(torch.tensor(reqs))
    server3.seq_lens = torch.tensor(lens + [1] * (sc.MAX_BS - len(lens)), dtype=torch.int32,
                                    device=DEVICE)  # a new tensor
    server3.fill_page_table(server3.kv_indices, len(reqs))


problem3.prepare = rebuild_prepare
rep3 = sc.check_problem(problem3, n_trials=4, seed=1)
r3 = checks.check_choice("exercise 3", ex3_report, OPTIONS3,
                         "a" if rep3.ok else "c" if "freed" in rep3.failure else "d" if "capture" in rep3.failure
                         else "b")

# %% [markdown]
# **4.** The emulator records the ops a step runs and replays that record; a custom op (a Triton kernel
# wrapped in `torch.library.custom_op`) is ONE recorded op. A real CUDA graph replays the kernel launches it
# recorded, grid and arguments as they were at capture. Predict: when such an op's own host code sizes
# its grid from the data (here, the longest length), does that host code run again at an emulated
# replay, with the new data? (`True` or `False`.) Then: which CUDA-graph behaviour can the emulator not
# show?

# %%
ex4_host_code_reruns = ...  # True or False

# %%
HOST_RUNS = []  # what the op's host code saw, one entry per time it ran
try:
    torch.ops.nb05.grid_sized_op
except AttributeError:
    @torch.library.custom_op("nb05::grid_sized_op", mutates_args=("out",))
    def grid_sized_op(lens: torch.Tensor, out: torch.Tensor) -> None:
        HOST_RUNS.append(int(lens.max()))  # host code: a launch grid sized from the data at hand
        out.copy_(lens * 2)
lens4, out4 = torch.ones(4, dtype=torch.int64), torch.zeros(4, dtype=torch.int64)
g4 = Graph(mode="emulated")
with graph(g4):
    torch.ops.nb05.grid_sized_op(lens4, out4)
lens4.copy_(torch.tensor([5, 9, 2, 7]))  # a longer batch than capture's
g4.replay()
r4 = checks.check_choice("exercise 4", ex4_host_code_reruns, {True: "it runs again", False: "it does not"},
                         HOST_RUNS[-1] == 9)

