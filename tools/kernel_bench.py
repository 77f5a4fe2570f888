"""GPU benchmark of ``mla_decode(impl="triton")``: ``python -m tools.kernel_bench --out DIR``.

Measures, in one run on one GPU: the two ceilings (a large device-to-device copy, counting
bytes read plus written; a large bf16 matmul), a correctness check of the Triton kernel
against float64, then the sweep bf16, page {64, 128}, h_q {16, 128}, B {1, 8, 64, 128},
L {512 .. 32768}: median time (CUDA events via ``triton.testing.do_bench``), achieved TB/s
(latent cache bytes + q + out) and TFLOP/s (``2 * B * L * h_q * (576 + 512)``), as fractions
of the measured ceilings. Peers on a subset in the same run: the float32 reference impl and
a ``torch.compile``d dense gather + attention. Writes ``kernel_bench.json`` and
``kernel_bench.md`` into ``--out``. ``plot_bench(json, png)`` draws the figure (CPU is fine).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

import torch

from mla_edu.kernels.workspace import num_kv_splits_for

PAGES = (64, 128)
HEADS = (16, 128)
BATCHES = (1, 8, 64, 128)
LENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
PEER_POINTS = [(b, l) for b, l in ((8, 4096), (64, 4096), (128, 2048))]
D_LAT, D_ROPE = 512, 64


def _median_ms(fn, warmup=25, rep=100):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def graph_us(fn) -> float:
    """Median replay time (us) of ``fn`` captured in a CUDA graph: launch overhead removed, as in serving."""
    import triton.testing

    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median") * 1e3


def tune(sms: int) -> dict:
    """Pick (BLOCK_N, num_warps, num_stages) per head block and a split multiplier on B=64, L=4096, page 64."""
    from mla_edu.kernels import get_workspace_size, mla_decode
    from mla_edu.kernels import split_kv_triton as skt

    scale = 1 / math.sqrt(192)
    chosen, log = {}, []
    for heads in (16, 128):
        block_h = skt.gpu_block_h(heads)
        q_nope, q_pe, cache, seq_lens, table = make_problem(64, heads, 64, 4096)
        best = None
        cfgs = ([(32, 4, 2), (32, 4, 3), (64, 4, 2), (64, 8, 3), (16, 4, 3)] if heads == 16 else
                [(32, 8, 2), (32, 8, 3), (64, 8, 2), (32, 4, 2)])
        for cfg in cfgs:
            skt.TUNED[block_h] = (block_h, *cfg)
            for splits in ((2, 8) if heads == 16 else (2, 4)):
                ws = torch.empty(get_workspace_size(64 * table.size(1), 64, sms, splits), dtype=torch.uint8,
                                 device="cuda")
                try:
                    us = graph_us(lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, splits,
                                                      impl="triton", sm_count=sms))
                except Exception as e:  # a config that does not compile (shared memory, registers)
                    log.append({"heads": heads, "cfg": cfg, "splits": splits, "error": type(e).__name__})
                    break
                log.append({"heads": heads, "cfg": cfg, "splits": splits, "us": us})
                print("tune", json.dumps(log[-1]), flush=True)
                if best is None or us < best[0]:
                    best = (us, cfg, splits)
        skt.TUNED[block_h] = (block_h, *best[1])
        chosen[block_h] = {"cfg": best[1], "splits_at_B64_L4096": best[2], "us": best[0]}
        del q_nope, q_pe, cache, seq_lens, table
        torch.cuda.empty_cache()
    return {"chosen": chosen, "log": log}


def ceilings() -> dict:
    n = 1 << 30  # 1 Gi bf16 elements = 2 GiB per buffer
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src))
    copy_tbs = 2 * src.numel() * 2 / (ms * 1e-3) / 1e12
    del src, dst
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    ms = _median_ms(lambda: a @ b)
    mm_tflops = 2 * m**3 / (ms * 1e-3) / 1e12
    torch.cuda.empty_cache()
    return {"copy_TBps": copy_tbs, "matmul_bf16_TFLOPs": mm_tflops}


def make_problem(batch, heads, page, length, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    n_pages = math.ceil(length / page)
    num_pages = batch * n_pages + 1
    cache = torch.randn(num_pages, page, D_LAT + D_ROPE, device="cuda", dtype=dtype, generator=g)
    perm = torch.randperm(num_pages - 1, device="cuda", generator=g) + 1
    table = perm[: batch * n_pages].view(batch, n_pages).to(torch.int32)
    q_nope = torch.randn(batch, heads, D_LAT, device="cuda", dtype=dtype, generator=g)
    q_pe = torch.randn(batch, heads, D_ROPE, device="cuda", dtype=dtype, generator=g)
    seq_lens = torch.full((batch,), length, device="cuda", dtype=torch.int32)
    return q_nope, q_pe, cache, seq_lens, table


def gather_attention(q_nope, q_pe, cache, seq_lens, page_table, sm_scale: float):
    """The peer: dense gather of every table page, then masked attention (what torch.compile sees)."""
    b, w = page_table.shape
    page = cache.size(1)
    kv = cache[page_table.long()].view(b, w * page, cache.size(-1))  # [B, T, 576]
    q = torch.cat([q_nope, q_pe], dim=-1)  # [B, H, 576]
    s = torch.einsum("bhd,btd->bht", q, kv).float() * sm_scale  # [B, H, T]
    mask = torch.arange(w * page, device=q.device)[None, :] < seq_lens[:, None]
    s = s.masked_fill(~mask[:, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1).to(kv.dtype)
    return torch.einsum("bht,btd->bhd", p, kv[..., : q_nope.size(-1)])  # [B, H, 512]


def check_correctness() -> list[dict]:
    from mla_edu.kernels import mla_decode
    from mla_edu.kernels.cases import random_decode_case

    rows = []
    for seed, (page, heads, splits) in enumerate([(64, 16, 1), (64, 128, -1), (128, 16, 4), (128, 128, 1),
                                                   (16, 16, 3), (128, 20, -1)]):
        case = random_decode_case(seed, batch=6, heads=heads, page_size=page, max_len=900, dtype=torch.bfloat16,
                                  device="cuda")
        out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(splits),
                         case.sm_scale, splits, impl="triton", checked=True)
        rows_ = case.cache.reshape(-1, case.cache.size(-1)).double()
        ref = torch.stack([
            torch.softmax(torch.cat([case.q_nope[b], case.q_pe[b]], -1).double() @ rows_[s].T * case.sm_scale, -1)
            @ rows_[s][:, :D_LAT] for b, s in enumerate(case.token_slots)])
        err = ((out.double() - ref).norm() / ref.norm()).item()
        rows.append({"page": page, "heads": heads, "splits": splits, "rel_err_vs_f64": err,
                     "finite": bool(torch.isfinite(out).all())})
    return rows


def run(out_dir: str, quick: bool = False) -> dict:
    import triton

    from mla_edu.kernels import cutlass_unavailable_reason, get_workspace_size, mla_decode
    from mla_edu.kernels import split_kv_triton as skt

    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    info = {"gpu": props.name, "sm_count": sms, "capability": ".".join(map(str, torch.cuda.get_device_capability())),
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "command": "python -m tools.kernel_bench " + " ".join(sys.argv[1:]),
            "cutlass": cutlass_unavailable_reason() or "available"}
    print(json.dumps(info), flush=True)
    ceil = ceilings()
    print("ceilings", json.dumps(ceil), flush=True)
    checks = check_correctness()  # default configs
    tuning = tune(sms)
    print("tuned", json.dumps(tuning["chosen"]), flush=True)
    checks += check_correctness()  # tuned configs
    for c in checks:
        print("check", json.dumps(c), flush=True)
    assert all(c["finite"] and c["rel_err_vs_f64"] < 2e-2 for c in checks), "Triton kernel is wrong on this GPU"
    compiled = torch.compile(gather_attention, dynamic=True)
    scale = 1 / math.sqrt(192)
    results = []
    lens = LENS if not quick else (512, 4096)
    batches = BATCHES if not quick else (8, 64)
    for page in PAGES:
        for heads in HEADS:
            for b in batches:
                for length in lens:
                    q_nope, q_pe, cache, seq_lens, table = make_problem(b, heads, page, length)
                    max_seq_len = page * table.size(1)
                    kv_bytes = b * length * (D_LAT + D_ROPE) * 2
                    io_bytes = kv_bytes + b * heads * (D_LAT + D_ROPE) * 2 + b * heads * D_LAT * 2
                    flops = 2 * b * length * heads * (D_LAT + D_LAT + D_ROPE)
                    row = {"page": page, "heads": heads, "batch": b, "seq_len": length, "bytes": io_bytes,
                           "flops": flops}
                    auto = num_kv_splits_for(max_seq_len, b, sms, -1)
                    hb = math.ceil(heads / skt._config(heads, on_gpu=True)[0])  # head blocks per request
                    max_splits = math.ceil(max_seq_len / page)
                    wide = min(max_splits, max(1, math.ceil(4 * sms / (b * hb))), 64)
                    best = None
                    for name, splits in (("auto", auto), ("wide", wide)):
                        ws = torch.empty(max(get_workspace_size(max_seq_len, b, sms, splits),
                                             b * heads * splits * (D_LAT + 1) * 4), dtype=torch.uint8, device="cuda")
                        fn = lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, splits,  # noqa: E731
                                                impl="triton", sm_count=sms)
                        us = graph_us(fn)
                        row[f"triton_{name}_splits"] = splits
                        row[f"triton_{name}_us"] = us
                        if name == "auto" and (b, length) in PEER_POINTS:
                            row["triton_auto_eager_us"] = _median_ms(fn) * 1e3
                        best = us if best is None else min(best, us)
                    row["triton_us"] = best
                    row["TBps"] = io_bytes / (best * 1e-6) / 1e12
                    row["TFLOPs"] = flops / (best * 1e-6) / 1e12
                    row["frac_copy"] = row["TBps"] / ceil["copy_TBps"]
                    row["frac_matmul"] = row["TFLOPs"] / ceil["matmul_bf16_TFLOPs"]
                    if (b, length) in PEER_POINTS:
                        ws = torch.empty(get_workspace_size(max_seq_len, b, sms, 1), dtype=torch.uint8, device="cuda")
                        row["reference_us"] = _median_ms(
                            lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, 1, impl="reference"),
                            warmup=1, rep=20) * 1e3
                        t0 = time.time()
                        ref = compiled(q_nope, q_pe, cache, seq_lens, table, scale)
                        row["compile_s"] = time.time() - t0
                        peer = lambda: compiled(q_nope, q_pe, cache, seq_lens, table, scale)  # noqa: E731
                        try:
                            row["compiled_us"] = graph_us(peer)
                        except Exception as e:  # fall back to eager timing if the compiled peer cannot be captured
                            row["compiled_graph_error"] = type(e).__name__
                            row["compiled_us"] = _median_ms(peer) * 1e3
                        ours = mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, 1, impl="triton")
                        row["compiled_vs_triton_rel_err"] = ((ours.float() - ref.float()).norm()
                                                             / ref.float().norm()).item()
                    results.append(row)
                    print("row", json.dumps(row), flush=True)
                    _write(out_dir, {"info": info, "ceilings": ceil, "checks": checks, "tuning": tuning,
                                     "results": results, "partial": True})
                    del q_nope, q_pe, cache, seq_lens, table
                    torch.cuda.empty_cache()
    data = {"info": info, "ceilings": ceil, "checks": checks, "tuning": tuning, "results": results}
    _write(out_dir, data)
    print(to_markdown(data))
    return data


def _write(out_dir: str, data: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "kernel_bench.json"), "w") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(out_dir, "kernel_bench.md"), "w") as f:
        f.write(to_markdown(data))


def to_markdown(data: dict) -> str:
    info, ceil = data["info"], data["ceilings"]
    lines = [
        f"# mla_decode(impl=\"triton\") on {info['gpu']} ({info['sm_count']} SMs, sm{info['capability'].replace('.', '')})",
        "",
        f"Command: `{info['command']}`; torch {info['torch']}, triton {info['triton']}, Python {info['python']}.",
        f"cutlass_mla_decode: {info['cutlass']}.",
        "",
        f"Ceilings measured in the same run: device copy {ceil['copy_TBps']:.2f} TB/s (read + write), "
        f"bf16 matmul 8192^3 {ceil['matmul_bf16_TFLOPs']:.0f} TFLOP/s.",
        "",
        "bf16, uniform lengths, random page permutation. Triton time = median CUDA-graph replay "
        "(triton.testing.do_bench_cudagraph: launch overhead removed, as in serving), best of the cutlass auto "
        "split and a wider split (both listed); 'eager' = the same call without a graph (host overhead included, "
        "triton.testing.do_bench). Bytes = latent cache + q + out. Peers: reference impl (float32 loop, eager) and "
        "a torch.compile'd dense gather + attention (graph replay).",
        "",
        f"Launch configs after the tuning pass (BLOCK_H: (BLOCK_N, num_warps, num_stages)): "
        f"{ {k: v['cfg'] for k, v in data.get('tuning', {}).get('chosen', {}).items()} }",
        "",
        "| page | h_q | B | L | splits auto/wide | triton us graph (auto / wide) | eager us | TB/s | % copy | TFLOP/s | % matmul | reference us | torch.compile us |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["results"]:
        ref = f"{r['reference_us']:.0f}" if "reference_us" in r else ""
        comp = f"{r['compiled_us']:.0f}" if "compiled_us" in r else ""
        eager = f"{r['triton_auto_eager_us']:.0f}" if "triton_auto_eager_us" in r else ""
        lines.append(
            f"| {r['page']} | {r['heads']} | {r['batch']} | {r['seq_len']} | {r['triton_auto_splits']}/{r['triton_wide_splits']} "
            f"| {r['triton_auto_us']:.1f} / {r['triton_wide_us']:.1f} | {eager} "
            f"| {r['TBps']:.2f} | {100 * r['frac_copy']:.0f}% "
            f"| {r['TFLOPs']:.1f} | {100 * r['frac_matmul']:.0f}% | {ref} | {comp} |")
    lines.append("")
    lines.append("Correctness on this GPU (bf16, checked mode, vs float64 dense): " + ", ".join(
        f"page {c['page']} h{c['heads']} split {c['splits']}: {c['rel_err_vs_f64']:.1e}" for c in data["checks"]))
    return "\n".join(lines) + "\n"


def plot_bench(json_path: str, png_path: str) -> None:
    """Draw ``mla_edu.kernels.plots.kernel_bench_figure`` from ``json_path`` into ``png_path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mla_edu.kernels.plots import kernel_bench_figure

    fig = kernel_bench_figure(json_path)
    fig.savefig(png_path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for kernel_bench.json / .md")
    ap.add_argument("--quick", action="store_true", help="a few sizes only")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("python -m tools.kernel_bench needs a CUDA GPU; the committed results are in "
                         "results/kernel_bench_h200.md")
    run(args.out, args.quick)


if __name__ == "__main__":
    main()
