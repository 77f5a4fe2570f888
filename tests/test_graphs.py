"""The graph API and the CPU emulator: replay equals eager for safe code; CUDA's rules hold."""

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)
from mla_edu.device import HAS_CUDA, TRITON_INTERPRET, triton_available
from mla_edu.graphs import (EmulatedPool, FreedMemoryError, Graph, GraphCaptureError, graph, is_emulated,
                            is_poison, poison_, poison_value)
from markers import CPU_TRITON


# The emulator's tests run on CPU tensors. Their Triton parts need Triton's interpreter, the default
# without a GPU; on a GPU machine Triton compiles for the GPU, and the real-graph tests cover it.
cpu_triton = CPU_TRITON
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


TRITON = triton_available()  # the tests of Triton launches are marked triton (skipped without it)

# ---- a tiny Triton kernel, raw and as a custom op ---------------------------------------------
if TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _axpy_kernel(x_ptr, y_ptr, n, a, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(y_ptr + i, tl.load(y_ptr + i, mask=m) + a * tl.load(x_ptr + i, mask=m), mask=m)


def axpy_raw(x, y, a):
    """y += a * x with a raw Triton launch."""
    _axpy_kernel[(triton.cdiv(x.numel(), 32),)](x, y, x.numel(), a, BLOCK=32)


@torch.library.custom_op("mla_edu_test_graphs::axpy", mutates_args=("y",))
def axpy_op(x: torch.Tensor, y: torch.Tensor, a: float) -> None:
    axpy_raw(x, y, a)


# ---- random safe programs ---------------------------------------------------------------------
def _make_state(rng: random.Random, n=6, d=8, device="cpu"):
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    state = {
        "x": torch.randn(n, d, generator=g),
        "w": torch.randn(d, d, generator=g),
        "idx": torch.randint(0, n, (n,), generator=g),
        "acc": torch.randn(n, d, generator=g),  # persistent, updated in place
    }
    return {k: v.to(device) for k, v in state.items()}


def _random_program(rng: random.Random, use_triton: bool):
    """A list of op names; `_run` applies them. Only device work: safe under a graph."""
    ops = ["matmul", "softmax", "index", "inplace_slice", "acc_update", "masked", "cat", "gelu_view"]
    prog = [rng.choice(ops) for _ in range(rng.randint(3, 8))]
    if use_triton:
        prog.insert(rng.randrange(len(prog) + 1), rng.choice(["triton_op", "triton_raw"]))
    return prog


def _run(prog, s):
    h = s["x"]
    for op in prog:
        if op == "matmul":
            h = h @ s["w"]
        elif op == "softmax":
            h = torch.softmax(h, dim=-1)
        elif op == "index":
            h = h.index_select(0, s["idx"]) + h
        elif op == "inplace_slice":
            h = h.clone()
            h[:, 1:3].mul_(0.5)
            h[0].add_(1.0)
        elif op == "acc_update":
            s["acc"].mul_(0.9).add_(h)
            h = s["acc"] * 1.0
        elif op == "masked":
            h = h.masked_fill(h > 0.5, 0.25)
        elif op == "cat":
            h = torch.cat([h[:, :4], h[:, 4:].flip(-1)], dim=1)
        elif op == "gelu_view":
            h = torch.nn.functional.gelu(h.t()).t().contiguous()
        elif op == "triton_op":
            h = h.contiguous().clone()
            axpy_op(s["x"], h, 2.0)
        elif op == "triton_raw":
            h = h.contiguous().clone()
            axpy_raw(s["x"], h, -1.5)
    return h


def _replay_matches_eager(g, prog, out, static, eager, seeds):
    """For each seed: new input into the static buffer and the eager state, replay, compare."""
    for seed in seeds:
        new_x = torch.randn(static["x"].shape, generator=torch.Generator().manual_seed(seed)).to(static["x"].device)
        static["x"].copy_(new_x)
        eager["x"].copy_(new_x)
        ref = _run(prog, eager)
        g.replay()
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(static["acc"], eager["acc"], rtol=1e-5, atol=1e-5)


# replay semantics, not warm-up: capture runs first on purpose
@pytest.mark.filterwarnings("ignore::mla_edu.graphs.GraphWarmupWarning")
@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), use_triton=st.booleans())
def test_replay_equals_eager_on_random_programs(seed, use_triton):
    rng = random.Random(seed)
    use_triton = use_triton and rng.random() < 0.3 and TRITON_INTERPRET and bool(TRITON)  # the interpreter is slow
    prog = _random_program(rng, use_triton)
    state = _make_state(rng)
    static = {k: v.clone() for k, v in state.items()}
    eager = {k: v.clone() for k, v in state.items()}
    g = Graph(device="cpu")
    with graph(g):
        out = _run(prog, static)
    for k in state:  # capture only records: old buffers hold what they held
        assert torch.equal(static[k], state[k]), k
    _replay_matches_eager(g, prog, out, static, eager, seeds=[seed + t for t in range(3)])


@pytest.mark.triton
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [1, 2])
def test_replay_equals_eager_on_random_programs_with_triton(seed, device):
    if device == "cpu" and not TRITON_INTERPRET:
        pytest.skip("Triton on CPU tensors needs TRITON_INTERPRET=1")
    rng = random.Random(seed)
    prog = _random_program(rng, use_triton=False)
    prog[rng.randrange(len(prog)):rng.randrange(len(prog))] = ["triton_op", "acc_update", "triton_raw"]
    state = _make_state(rng, device=device)
    static = {k: v.clone() for k, v in state.items()}
    eager = {k: v.clone() for k, v in state.items()}
    if device == "cuda":  # real capture: compile the kernels and initialise cuBLAS eagerly first
        _run(prog, {k: v.clone() for k, v in state.items()})
        torch.cuda.synchronize()
    g = Graph(device=device)
    with graph(g):
        out = _run(prog, static)
    if g.backend == "emulated":
        assert "mla_edu_test_graphs.axpy.default" in g.recorded_ops()
        assert "triton launch _axpy_kernel" in g.recorded_ops()
    _replay_matches_eager(g, prog, out, static, eager, seeds=[100, 101])


# ---- the rules, one by one --------------------------------------------------------------------
def test_host_python_runs_only_at_capture_and_values_freeze():
    calls = []
    x = torch.arange(8.0)
    n_host = 3  # a host int, e.g. a length read on the host before capture

    def step():
        calls.append(1)
        return x[:n_host].sum() * 1.0

    g, out = Graph.capture(step, warmup=0, device="cpu")
    x.copy_(torch.arange(8.0) * 10)
    n_host = 8  # noqa: F841  (changing it after capture changes nothing)
    g.replay()
    g.replay()
    assert len(calls) == 1
    assert out.item() == pytest.approx(0 + 10 + 20)  # still the first 3 entries


def test_capture_records_but_does_not_run():
    buf = torch.ones(4)

    def step():
        buf.add_(1.0)
        return buf * 2

    g, out = Graph.capture(step, warmup=0, device="cpu")
    assert torch.equal(buf, torch.ones(4))  # the add_ did not happen yet
    assert is_poison(out).all()  # captured output: garbage until the first replay
    g.replay()
    assert torch.equal(buf, torch.full((4,), 2.0)) and torch.equal(out, torch.full((4,), 4.0))
    g.replay()  # buffers persist between replays
    assert torch.equal(buf, torch.full((4,), 3.0)) and torch.equal(out, torch.full((4,), 6.0))


@pytest.mark.parametrize("whole_write", [None, "before", "after"])
def test_capture_leaves_scattered_rows_of_an_old_buffer_as_they_were(whole_write, monkeypatch):
    # a KV-cache-like write (index_copy_ into a few rows), twice to the same row, mixed with a write to
    # the whole buffer: after capture every byte is back; replay does all of it
    cache = torch.arange(40.0).view(10, 4)
    loc, new = torch.tensor([3, 7]), torch.full((2, 4), -1.0)

    def step():
        if whole_write == "before":
            cache.mul_(2)
        cache.index_copy_(0, loc, new)
        cache.index_copy_(0, loc[:1], new[:1] * 5)
        if whole_write == "after":
            cache.add_(1)
        return cache.sum()

    expected = cache.clone()
    step()
    after_one_step = cache.clone()
    cache.copy_(expected)
    copied = []  # whole storages the capture copied to restore them afterwards
    clone = torch.UntypedStorage.clone
    monkeypatch.setattr(torch.UntypedStorage, "clone", lambda st: copied.append(st.nbytes()) or clone(st))
    g, out = Graph.capture(step, warmup=0, device="cpu")
    monkeypatch.undo()
    assert torch.equal(cache, expected)
    assert copied.count(cache.untyped_storage().nbytes()) == (whole_write is not None)  # rows only, if it can
    g.replay()
    assert torch.equal(cache, after_one_step) and out.item() == after_one_step.sum().item()

    def failing():
        cache.index_copy_(0, loc, new)
        raise RuntimeError("boom")

    cache.copy_(expected)
    with pytest.raises(RuntimeError, match="boom"):
        Graph.capture(failing, warmup=0, device="cpu")
    assert torch.equal(cache, expected)  # a failed capture gives the rows back too


def test_views_are_frozen_and_inplace_on_views_replays():
    table = torch.zeros(4, 6, dtype=torch.int32)
    vals = torch.arange(4, dtype=torch.int32)
    width = 2  # a narrow view taken at capture

    def step():
        view = table[:, :width]
        view[:, 1].copy_(vals)
        return view.sum(dim=1)

    g, out = Graph.capture(step, warmup=0, device="cpu")
    vals.copy_(torch.tensor([7, 8, 9, 10], dtype=torch.int32))
    g.replay()
    assert table[:, 1].tolist() == [7, 8, 9, 10] and table[:, 2:].abs().sum().item() == 0
    assert out.tolist() == [7, 8, 9, 10]


def test_random_ops_draw_fresh_numbers_each_replay():
    g, out = Graph.capture(lambda: torch.rand(16), warmup=0, device="cpu")
    g.replay()
    first = out.clone()
    g.replay()
    assert not torch.equal(first, out)


@pytest.mark.triton
@cpu_triton
def test_custom_op_is_one_op_and_raw_triton_launch_is_recorded():
    x, y = torch.randn(40), torch.zeros(40)

    def step():
        axpy_op(x, y, 2.0)
        axpy_raw(x, y, 1.0)

    g, _ = Graph.capture(step, warmup=0, device="cpu")
    assert g.recorded_ops() == ["mla_edu_test_graphs.axpy.default", "triton launch _axpy_kernel"]
    assert torch.equal(y, torch.zeros(40))  # capture did not run the kernels
    g.replay()
    torch.testing.assert_close(y, 3.0 * x)


def test_views_and_allocations_cost_nothing_at_replay():
    x = torch.randn(4, 8)
    g, _ = Graph.capture(lambda: (x.view(8, 4).t()[:2] + 1).unsqueeze(0)[:, 1:], warmup=0, device="cpu")
    assert g.num_ops >= 4 and g.num_replay_steps == 1  # only the add launches work


@pytest.mark.parametrize("what, fn", [
    ("item", lambda x: x.sum().item()),
    ("bool", lambda x: bool(x.sum() > 0)),
    ("tolist", lambda x: x.tolist()),
    ("cpu", lambda x: x.cpu()),
    ("numpy", lambda x: x.numpy()),
    ("print", lambda x: print(x)),
    ("nonzero", lambda x: torch.nonzero(x)),
    ("mask", lambda x: x[x > 0]),
    ("mask_put", lambda x: x.__setitem__(x > 0, 0.0)),
    ("tensor", lambda x: torch.tensor([1.0, 2.0])),
])
def test_syncing_calls_raise_during_capture(what, fn):
    x = torch.randn(5)
    with pytest.raises(GraphCaptureError, match="capture"):
        with graph(Graph(device="cpu")):
            fn(x)
    assert "tensor" in repr(x) and len(x.tolist()) == 5  # patched methods are restored


def test_freed_memory_is_poisoned_or_raises_in_strict_mode():
    x = torch.arange(6.0)
    holder = {}

    def step():
        ws = torch.empty(6)  # workspace allocated during capture...
        holder["ws"] = ws  # ...kept by the host, as an attribute
        torch.mul(x, 2.0, out=ws)
        return ws + 1

    g, out = Graph.capture(step, warmup=0, device="cpu")
    g.replay()
    assert g.freed_uses() == [] and torch.equal(out, x * 2 + 1)
    del holder["ws"]  # the host drops the workspace: the graph still writes it
    g.replay()
    assert len(g.freed_uses()) == 1 and "aten.mul.out" in g.freed_uses()[0]
    assert torch.equal(out, x * 2 + 1)  # written before read in the same replay: still right

    gs, _ = Graph.capture(step, warmup=0, strict=True, device="cpu")
    gs.replay()
    del holder["ws"]
    with pytest.raises(FreedMemoryError, match="aten.mul.out"):
        gs.replay()


def test_freed_buffer_read_before_write_sees_poison():
    state = {"cache": torch.full((3,), 5, dtype=torch.int32), "f": torch.ones(3)}
    cache, f = state["cache"], state["f"]
    g, (o1, o2) = Graph.capture(lambda: (cache + 1, f * 2), warmup=0, device="cpu")
    del cache, f
    state.clear()  # buffers created before capture, dropped after it
    g.replay()
    assert o1.tolist() == [poison_value(torch.int32) + 1 - 2**32] * 3  # int32 max + 1 wraps
    assert torch.isnan(o2).all() and len(g.freed_uses()) == 2


def test_freed_block_is_handed_to_the_next_capture_in_the_same_pool():
    x1, x2 = torch.arange(16.0), torch.full((16,), 100.0)
    out1 = torch.zeros(16)
    holder = {}

    def step1():
        holder["ws"] = torch.empty(16)
        torch.mul(x1, 2.0, out=holder["ws"])
        torch.add(holder["ws"], 1.0, out=out1)

    g1 = Graph(device="cpu")
    with graph(g1):
        step1()
    holder.clear()  # the next batch size's capture replaces the attribute
    g2 = Graph(device="cpu")
    with graph(g2, pool=g1.pool()):
        out2 = x2 + 3.0  # gets the freed workspace's memory
    assert isinstance(g1.pool(), EmulatedPool) and g2.pool() is g1.pool()
    g2.replay()
    assert torch.equal(out2, x2 + 3.0)
    g1.replay()  # writes its workspace = out2's memory
    assert torch.equal(out1, x1 * 2 + 1) and torch.equal(out2, x1 * 2)

    g3 = Graph(device="cpu")  # without sharing the pool, the memory is not reused
    with graph(g3):
        out3 = x2 + 3.0
    g3.replay()
    g1.replay()
    assert torch.equal(out3, x2 + 3.0)


def test_poison_values_and_errors():
    assert poison_value(torch.int64) == 2**63 - 1 and poison_value(torch.bool) is True
    assert is_poison(poison_(torch.zeros(3, dtype=torch.bfloat16))).all()
    with pytest.raises(TypeError, match="torch.dtype"):
        poison_value("float32")
    with pytest.raises(TypeError, match="torch.Tensor"):
        poison_([1.0])


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="mode must be one of"):
        Graph(mode="fast")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs a CUDA device"):
            Graph(mode="cuda")
    with pytest.raises(TypeError, match="strict and track must be bools"):
        Graph(strict=1)
    with pytest.raises(TypeError, match="device must be"):
        Graph(device=3.5)
    with pytest.raises(TypeError, match="expects a mla_edu.graphs.Graph"):
        with graph(object()):
            pass
    with pytest.raises(TypeError, match="EmulatedPool"):
        with graph(Graph(device="cpu"), pool=(0, 1)):
            pass
    with pytest.raises(RuntimeError, match="nothing captured"):
        Graph(device="cpu").replay()
    with pytest.raises(TypeError, match="callable"):
        Graph.capture(3)
    with pytest.raises(ValueError, match="warmup"):
        Graph.capture(lambda: None, warmup=-1)
    g, _ = Graph.capture(lambda: None, warmup=0, device="cpu")
    assert is_emulated(g) == (g.backend == "emulated")
    with pytest.raises(RuntimeError, match="already captured"):
        with graph(g):
            pass
    with pytest.raises(TypeError, match="is_emulated expects"):
        is_emulated("g")


def test_warmup_runs_eagerly_before_capture():
    counter = torch.zeros(1)
    g, _ = Graph.capture(lambda: counter.add_(1.0), warmup=2, device="cpu")
    assert counter.item() == 2.0  # two eager warm-ups; capture itself changed nothing
    g.replay()
    assert counter.item() == 3.0


def test_track_mode_flags_only_memory_freed_after_capture():
    """The observe-only recorder that runs beside a real CUDA capture (here on CPU tensors)."""
    from mla_edu.graphs.emulator import Program, Recorder

    x = torch.arange(6.0)
    holder = {}

    def step():
        t = torch.arange(6)  # a temporary made by a factory: graph-internal, never "freed"
        holder["ws"] = torch.empty(6)  # kept by the host, dropped later
        torch.mul(x, t, out=holder["ws"])
        return holder["ws"] + 1

    prog = Program(observe=True, device_type="cpu")
    with Recorder(prog):
        out = step()
    prog.end_capture()
    assert not prog.steps and torch.equal(out, x * torch.arange(6) + 1)  # observe: nothing replayable
    prog.replay()
    assert prog.freed_uses == []
    holder.clear()
    prog.replay()
    assert len(prog.freed_uses) == 1 and "aten.mul.out" in prog.freed_uses[0]


# replay semantics, not warm-up: capture runs first on purpose
@pytest.mark.filterwarnings("ignore::mla_edu.graphs.GraphWarmupWarning")
@pytest.mark.parametrize("capture_inference, replay_inference", [(True, False), (False, True), (True, True)])
def test_inference_mode_on_either_side(capture_inference, replay_inference):
    w = torch.randn(4, 4)
    with torch.inference_mode(capture_inference):
        x, acc = torch.randn(3, 4), torch.zeros(3, 4)
        g, out = Graph.capture(lambda: torch.softmax(acc.add_(x @ w), -1), warmup=0, device="cpu")
    with torch.inference_mode(replay_inference):
        g.replay()
        g.replay()
    torch.testing.assert_close(acc, 2 * (x @ w))
    torch.testing.assert_close(out, torch.softmax(2 * (x @ w), -1))


def test_host_tensors_are_read_at_capture_only():
    from mla_edu.graphs import host_tensor, is_host_tensor

    seq_lens_cpu = host_tensor(torch.tensor([3, 5, 2], dtype=torch.int32))  # plays SGLang's seq_lens_cpu
    x = torch.arange(8.0)

    def step():
        n = int(seq_lens_cpu.max())  # allowed: host memory; frozen into the graph
        return x[:n].sum(dim=0, keepdim=True)

    g, out = Graph.capture(step, warmup=0, device="cpu")
    assert is_host_tensor(seq_lens_cpu) and not is_host_tensor(x)
    seq_lens_cpu[0] = 8
    g.replay()
    assert out.item() == sum(range(5))  # still the capture-time max (5)
    assert all("max" not in op for op in g.recorded_ops())  # host work is not recorded
    with pytest.raises(TypeError, match="torch.Tensor"):
        host_tensor([1, 2])


def test_capture_into_a_shared_pool_with_the_convenience_form():
    a, b = torch.ones(4), torch.ones(4)
    g1, o1 = Graph.capture(lambda: a * 2, warmup=0, device="cpu")
    g2, o2 = Graph.capture(lambda: b * 3, warmup=0, pool=g1.pool(), device="cpu")
    assert g2.pool() is g1.pool()
    g1.replay()
    g2.replay()
    assert o1.tolist() == [2.0] * 4 and o2.tolist() == [3.0] * 4  # live outputs are never reused


@pytest.mark.parametrize("device", DEVICES)
def test_garbage_collection_pauses_during_capture_and_resumes_on_any_exit(device):
    # A dead cycle holding a captured CUDA graph, collected mid-capture, would destroy that graph inside the
    # capture and invalidate it (seen on the H200): graph() keeps the collector off while it captures.
    import gc

    class Holder:  # a reference cycle around a captured graph, dropped before the next capture
        def __init__(self):
            self.me = self
            self.graph, self.out = Graph.capture(lambda: x + 1, warmup=1, device=device)

    x = torch.zeros(4, device=device)
    Holder()
    old_threshold = gc.get_threshold()
    gc.set_threshold(1)  # a collection at nearly every allocation, were the collector on
    try:
        g = Graph(device=device)
        with graph(g):
            assert not gc.isenabled()
            y = x * 2
            for _ in range(200):
                [object() for _ in range(10)]  # allocations that would trigger it
        g.replay()
        assert gc.isenabled() and y.tolist() == [0.0] * 4
        with pytest.raises(KeyError), graph(Graph(device=device)):
            raise KeyError
        assert gc.isenabled()
    finally:
        gc.set_threshold(*old_threshold)


def test_the_toy_triton_kernel_without_triton_is_a_clear_error_and_its_scenario_is_skipped(monkeypatch):
    # where Triton is missing (macOS, Windows) the toy's Triton kernel names what it needs instead of a NameError,
    # and run_all reports its scenario skipped: both ask device.triton_available at the call
    import mla_edu.device
    from mla_edu.graphs.scenarios import paged_sum_triton, run_all, scenarios
    from mla_edu.graphs.scenarios import runner

    missing = mla_edu.device.TritonStatus(False, "Triton has no wheel for macOS (arm64)")
    monkeypatch.setattr(mla_edu.device, "triton_available", lambda: missing)
    monkeypatch.setattr(runner, "triton_available", lambda: missing)
    with pytest.raises(RuntimeError, match=r"paged_sum_triton .* needs Triton: Triton has no wheel for macOS"):
        paged_sum_triton(torch.zeros(2, 8, dtype=torch.int32), torch.ones(2, dtype=torch.int32), torch.zeros(33, 4, 8))
    only = [sc for sc in scenarios() if sc.needs_triton]
    assert only and [r[3] for r in run_all("cpu", only=only)] == ["skipped: no triton"] * len(only)


KERNEL_MADE_IN_CAPTURE = '''
import sys
import torch
from mla_edu.graphs import Graph, graph

assert "triton" not in sys.modules
x, y = torch.zeros(4), torch.ones(4)
g = Graph(device="cpu")
with graph(g):
    from kernel_in_capture import add  # Triton imported, its interpreter loaded, its kernel made, here

    add[(1,)](x, y)
print(g.recorded_ops())
y.fill_(2.0)
g.replay()
print(x.tolist())
'''
KERNEL_MODULE = '''
import triton
import triton.language as tl


@triton.jit
def add(x, y):
    i = tl.arange(0, 4)
    tl.store(x + i, tl.load(x + i) + tl.load(y + i))
'''


@pytest.mark.triton
@CPU_TRITON
def test_a_triton_kernel_first_made_inside_a_capture_is_recorded(tmp_path):
    """A capture patches Triton's interpreter where it is loaded, else as it loads (asking nothing of the machine):
    a kernel first made inside the capture, Triton imported there, is recorded, and runs at replay (x + y with the
    new y; the capture itself left x as it was)."""
    import os
    import subprocess
    import sys

    (tmp_path / "made_in_capture.py").write_text(KERNEL_MADE_IN_CAPTURE)
    (tmp_path / "kernel_in_capture.py").write_text(KERNEL_MODULE)
    out = subprocess.run([sys.executable, str(tmp_path / "made_in_capture.py")], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "TRITON_INTERPRET": "1"}, cwd=tmp_path)
    assert out.stdout.splitlines() == ["['triton launch add']", "[2.0, 2.0, 2.0, 2.0]"], out.stdout + out.stderr
