"""Eager vs graph replay of a decode-like step made of many small kernels.

    python -m tools.launch_bench [--device cpu|cuda] [--out results.json]

On a GPU: eager launches vs ``torch.cuda.CUDAGraph`` replay (CUDA events, median).
On CPU: eager vs the emulator's replay (the emulator's cost; target: at most 2x eager), one
thread, the two timed alternately and the fastest of each kept (a shared CPU is noisy).
Kernels per step are counted by recording one step with the emulator (ops that launch work).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from mla_edu import cli
from mla_edu.files import check_out_file, write_atomic
from mla_edu.device import default_device
from mla_edu.graphs.capture import Graph, graph, warm_up

LAYERS = (1, 2, 4, 8, 13, 16, 27)


def make_step(n_layers: int, batch: int = 8, hidden: int = 256, device="cpu", seed: int = 0):
    """A toy decoder step: per layer RMSNorm, a matmul, SiLU and the residual add (9 kernels)."""
    g = torch.Generator().manual_seed(seed)
    w = [(torch.randn(hidden, hidden, generator=g) / hidden**0.5).to(device) for _ in range(n_layers)]
    norm_w = [torch.ones(hidden, device=device) for _ in range(n_layers)]
    x = torch.randn(batch, hidden, generator=g).to(device)  # static input

    def step():
        h = x
        for wl, nl in zip(w, norm_w):
            r = h
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * nl  # [B, H]
            h = torch.nn.functional.silu(h @ wl) + r  # [B, H]
        return h

    return step, x


def count_kernels(n_layers: int, device="cpu") -> int:
    step, _ = make_step(n_layers, device=device)
    warm_up(step, 1, device, real_cuda=False)
    g = Graph(device=device, mode="emulated")
    with graph(g):
        step()
    return g.num_replay_steps


def _median_ms_cpu(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _median_ms_cuda(fn, reps: int, inner: int = 20) -> float:
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def run(device="cpu", layers=LAYERS, reps: int = 30) -> list[dict]:
    dev = torch.device(device)
    rows = []
    for n in layers:
        step, x = make_step(n, device=dev)
        kernels = count_kernels(n, device=dev)
        g, out = Graph.capture(step, warmup=3, device=dev)
        x.copy_(torch.randn_like(x))
        g.replay()
        ref = step()
        err = float((out - ref).abs().max())
        if dev.type == "cuda":
            eager = _median_ms_cuda(step, reps)
            replay = _median_ms_cuda(g.replay, reps)
        else:  # a shared CPU is noisy: alternate the two, keep the fastest of each
            for _ in range(3):
                step(), g.replay()
            pairs = [(_median_ms_cpu(step, 1), _median_ms_cpu(g.replay, 1)) for _ in range(reps)]
            eager, replay = min(p[0] for p in pairs), min(p[1] for p in pairs)
        rows.append({"layers": n, "kernels": kernels, "eager_ms": eager, "replay_ms": replay,
                     "speedup": eager / replay, "replay_over_eager": replay / eager,
                     "max_abs_err": err, "backend": g.backend})
    return rows


def format_rows(rows, device_name: str) -> str:
    lines = [f"device: {device_name}, torch {torch.__version__}",
             "| layers | kernels | eager ms | replay ms | eager/replay | replay/eager | max abs err |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layers']} | {r['kernels']} | {r['eager_ms']:.4f} | {r['replay_ms']:.4f} | "
                     f"{r['speedup']:.2f} | {r['replay_over_eager']:.2f} | {r['max_abs_err']:.1e} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", type=cli.device, default=None)
    ap.add_argument("--reps", type=cli.positive_int, default=30)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.out:
        try:
            check_out_file(args.out, "--out")
        except ValueError as e:
            ap.error(str(e))
    dev = torch.device(args.device) if args.device else default_device()
    if dev.type == "cpu":
        torch.set_num_threads(1)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    rows = run(dev, reps=args.reps)
    print(format_rows(rows, name))
    if args.out:
        write_atomic(args.out, json.dumps({"device": name, "torch": torch.__version__, "batch": 8, "hidden": 256,
                                           "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
