"""GPU benchmark of ``mla_decode(impl="triton")``: ``python -m tools.kernel_bench --out DIR``.

Measures, in one run on one GPU: the two ceilings (a large device-to-device copy, counting
bytes read plus written; a large bf16 matmul), a correctness check of the Triton kernel
against float64, then the grid bf16, page {64, 128} (``--pages``), h_q {16, 128}, B {1, 8, 64,
128}, L {512 .. 32768}: median CUDA-graph replay time of every split count in ``SPLIT_CHOICES``
(so the split rule ``triton_num_kv_splits`` is seen next to the best split and sgl-kernel's
auto split), achieved TB/s (latent cache bytes + q + out) and TFLOP/s
(``2 * B * L * h_q * (576 + 512)``) as fractions of the measured ceilings, and the error of the
first and last request against float64. Peers on the same cache bytes in the same process
(``mla_edu.kernels.peers``): SGLang's Triton MLA decode kernel at its best split when the sglang
wheel is installed, FlashMLA when ``flash_mla`` is importable (page 64), and at a few sizes the
float32 reference impl and a ``torch.compile``d dense gather + attention. Writes
``kernel_bench.json`` and ``kernel_bench.md`` into ``--out``. On sm90 'mla_edu' runs the Gluon stage 1 by
TMA (``stage1.DEFAULT_GLUON``); ``--kernels`` also times the other stage-1 kernels (the tl kernel, the
Gluon kernel by cp.async) at every split where they differ, in a table of its own. ``--once H,B,L`` runs
each kernel once (for ``ncu``); ``--rerule JSON`` recomputes the rule's columns of a run on the CPU.
``plot_bench(json, png)`` draws the figure (CPU is fine). Ragged batches and the balanced schedule
(``schedule="balanced"``) against the split rule, FlashMLA and SGLang: ``tools/schedule_bench.py``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import torch

from mla_edu.files import check_out_dir, write_atomic
from mla_edu.kernels.plots import summary
from mla_edu.kernels.workspace import D_LATENT, D_ROPE, get_workspace_size, num_kv_splits_for
from mla_edu.util import cdiv

PAGES = (64, 128)
HEADS = (16, 128)
BATCHES = (1, 8, 64, 128)
LENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
PEER_POINTS = [(b, l) for b, l in ((8, 4096), (64, 4096), (128, 2048))]
D_LAT = D_LATENT  # the latent width, as the tables and tools.schedule_bench name it


def _median_ms(fn, warmup=25, rep=100):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def graph_us(fn, target_ms: float = 2.0, reps: int = 7, warm_ms: float = 25.0) -> float:
    """Median time (us) of one call of ``fn``, from CUDA-graph replays (launch overhead removed, as in
    serving): ``fn`` is captured ``n`` times in one graph (``n`` so that a replay takes about ``target_ms``,
    sized from a graph of one call, not an eager one whose host overhead makes ``n`` small), the graph is
    replayed for ``warm_ms``, then ``reps`` times between CUDA events; median over replays / n. Sized from an
    eager call and not warmed, the same kernel timed twice in one row read 19.2 and 15.0 us on the H200; this way
    the two agree to 0.1 us (``docs/kernel_essay.md``)."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def replays(graph, count: int) -> list[float]:
        times = []
        for _ in range(count):
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return times

    one = torch.cuda.CUDAGraph()
    with torch.cuda.graph(one):
        fn()
    n = max(1, min(200, int(target_ms / max(min(replays(one, 3)), 1e-3))))
    del one
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            fn()
    replays(graph, max(1, math.ceil(warm_ms / target_ms)))
    times = [t / n for t in replays(graph, reps)]
    del graph
    return statistics.median(times) * 1e3


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


def bench_workspace(max_seq_len: int, batch: int, heads: int, sms: int, splits: int, at_least: int = 0,
                    device="cuda"):
    """A workspace for ``mla_decode`` at up to ``splits`` splits: the larger of sgl-kernel's bytes and this
    package's (o_acc and one LSE float per request, head and split), and at least ``at_least`` bytes."""
    size = max(get_workspace_size(max_seq_len, batch, sms, splits), batch * heads * splits * (D_LAT + 1) * 4, at_least)
    return torch.empty(size, dtype=torch.uint8, device=device)


def make_problem(batch, heads, page, length, dtype=torch.bfloat16, seed=0):
    """``make_ragged_problem`` for ``batch`` requests of ``length`` tokens each."""
    return make_ragged_problem([length] * batch, heads, page, dtype, seed)


def make_ragged_problem(lens: list[int], heads: int, page: int, dtype=torch.bfloat16, seed: int = 0,
                        device="cuda"):
    """(q_nope, q_pe, cache, seq_lens, table) for requests of ``lens`` tokens: each request its own pages in a
    random permutation, the table as wide as the longest request (entries past a request's pages: page 0)."""
    g = torch.Generator(device=device).manual_seed(seed)
    n = [math.ceil(x / page) for x in lens]
    width, total = max(n), sum(n)
    cache = torch.randn(total + 1, page, D_LAT + D_ROPE, device=device, dtype=dtype, generator=g)
    perm = (torch.randperm(total, device=device, generator=g) + 1).to(torch.int32)
    table = torch.zeros(len(lens), width, dtype=torch.int32, device=device)
    start = 0
    for b, k in enumerate(n):
        table[b, :k] = perm[start:start + k]
        start += k
    b = len(lens)
    q_nope = torch.randn(b, heads, D_LAT, device=device, dtype=dtype, generator=g)
    q_pe = torch.randn(b, heads, D_ROPE, device=device, dtype=dtype, generator=g)
    return q_nope, q_pe, cache, torch.tensor(lens, dtype=torch.int32, device=device), table


def backend_calls(lens: list[int], heads: int, sms: int, sm_scale: float, page: int = 64, dtype=torch.bfloat16,
                  device="cuda"):
    """The triton backend's two paths on one problem (``make_ragged_problem(lens, heads, page, dtype)``):
    ``(problem, rule, parts, {"rule": call, "balanced": call})``, ``rule`` the split rule's count from the table's
    width, ``parts`` the balanced schedule's, a workspace large enough for both (what ``kernel_lab.tools.stage1_ab`` and
    ``kernel_lab.tools.schedule_profile`` time)."""
    from mla_edu.kernels import mla_decode
    from mla_edu.kernels import schedule as sc
    from mla_edu.kernels.workspace import triton_num_kv_splits

    problem = q_nope, q_pe, cache, seq_lens, table = make_ragged_problem(lens, heads, page, dtype, device=device)
    width, b = table.size(1), len(lens)
    parts = sc.num_parts(heads, sms, b, width)
    ws = bench_workspace(page * width, b, heads, sms, 32, sc.workspace_bytes(b, heads, D_LAT, parts), device)
    rule = triton_num_kv_splits(page * width, b, heads, page, sms)
    calls = {"rule": lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, sm_scale, rule, impl="triton",
                                        sm_count=sms),
             "balanced": lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, sm_scale, -1, impl="triton",
                                            sm_count=sms, schedule="balanced")}
    return problem, rule, parts, calls


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
        ref = case.dense_f64()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        rows.append({"page": page, "heads": heads, "splits": splits, "rel_err_vs_f64": err,
                     "finite": bool(torch.isfinite(out).all())})
    return rows


def f64_reference(q_nope, q_pe, cache, seq_lens, page_table, sm_scale: float, rows) -> torch.Tensor:
    """float64 dense attention for requests ``rows`` only: ``[len(rows), H, 512]`` (cheap at any size)."""
    out = []
    for b in rows:
        n = int(seq_lens[b])
        page = cache.size(1)
        kv = cache[page_table[b, : cdiv(n, page)].long()].reshape(-1, cache.size(-1))[:n].double()  # [n, 576]
        q = torch.cat([q_nope[b], q_pe[b]], dim=-1).double()  # [H, 576]
        out.append(torch.softmax(q @ kv.T * sm_scale, dim=-1) @ kv[:, : q_nope.size(-1)])
    return torch.stack(out)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref| / max |ref|, with NaN counted as a failure (inf)."""
    d = (out.double() - ref).abs().max().item()
    return d / ref.abs().max().item() if math.isfinite(d) else math.inf


def _us_per_split(fn_of_splits, splits) -> dict:
    return {s: graph_us(lambda: fn_of_splits(s)) for s in splits}


def run(out_dir: str, quick: bool = False, pages=PAGES, kernels: bool = False) -> dict:
    import triton

    from mla_edu.kernels import cutlass_unavailable_reason, get_workspace_size, mla_decode, peers
    from mla_edu.kernels import split_kv_triton as skt
    from mla_edu.kernels import stage1
    from mla_edu.kernels.contract import STAGE1_KINDS
    from mla_edu.kernels.stage1 import tl as stage1_tl
    from mla_edu.kernels.workspace import SPLIT_CHOICES, triton_num_kv_splits

    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    sglang, sglang_why = peers.load_sglang_decode()
    flash_mla, flash_why = peers.load_flash_mla()
    info = {"gpu": props.name, "sm_count": sms, "capability": ".".join(map(str, torch.cuda.get_device_capability())),
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "command": "python -m tools.kernel_bench " + " ".join(sys.argv[1:]),
            "cutlass": cutlass_unavailable_reason() or "available",
            "sglang": sglang_why or f"sglang {dist_version('sglang')}: {peers.SGLANG_MODULE}",
            "flash_mla": flash_why or "flash_mla importable (FlashMLA built from source on this machine)",
            "configs": {k: stage1_tl.launch_config(k, on_gpu=True) for k in (16, 128)},
            "split_choices": list(SPLIT_CHOICES), "stage1": stage1.DEFAULT_GLUON}
    print(json.dumps(info), flush=True)
    ceil = ceilings()
    print("ceilings", json.dumps(ceil), flush=True)
    checks = check_correctness()
    for c in checks:
        print("check", json.dumps(c), flush=True)
    assert all(c["finite"] and c["rel_err_vs_f64"] < 2e-2 for c in checks), "Triton kernel is wrong on this GPU"
    compiled = torch.compile(gather_attention, dynamic=True)
    scale = 1 / math.sqrt(192)
    results = []
    lens = LENS if not quick else (512, 4096)
    batches = BATCHES if not quick else (8, 64)
    for page in pages:
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
                    splits = [s for s in SPLIT_CHOICES if s <= cdiv(max_seq_len, page)]
                    auto = num_kv_splits_for(max_seq_len, b, sms, -1)
                    most = max(max(splits), auto)
                    ws = bench_workspace(max_seq_len, b, heads, sms, most)
                    ours = lambda s, kind=None: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws,  # noqa: E731
                                                           scale, s, impl="triton", sm_count=sms, stage1=kind)
                    per = _us_per_split(ours, splits)
                    row["triton_split_us"] = per
                    row["triton_best_splits"] = min(per, key=per.get)
                    row["triton_best_us"] = per[row["triton_best_splits"]]
                    rule = triton_num_kv_splits(max_seq_len, b, heads, page, sms)
                    row["triton_rule_splits"], row["triton_rule_us"] = rule, per[rule]
                    row["triton_auto_splits"] = auto
                    row["triton_auto_us"] = per[auto] if auto in per else graph_us(lambda: ours(auto))
                    us = row["triton_us"] = row["triton_rule_us"]  # what the triton backend runs
                    row["TBps"] = io_bytes / (us * 1e-6) / 1e12
                    row["TFLOPs"] = flops / (us * 1e-6) / 1e12
                    row["frac_copy"] = row["TBps"] / ceil["copy_TBps"]
                    row["frac_matmul"] = row["TFLOPs"] / ceil["matmul_bf16_TFLOPs"]
                    check_rows = sorted({0, b - 1})
                    ref = f64_reference(q_nope, q_pe, cache, seq_lens, table, scale, check_rows)
                    row["triton_rel_err"] = max(rel_err(ours(s)[check_rows], ref) for s in (1, rule, max(splits)))
                    gluon = skt.wgmma_applies(q_nope, q_pe, cache, table.size(1), False)
                    row["stage1"] = stage1_name(stage1.DEFAULT_GLUON if gluon else "tl", heads, b, table.size(1), cache)
                    others = [k for k in STAGE1_KINDS if stage1_name(k, heads, b, table.size(1), cache) != row["stage1"]
                              ] if kernels and gluon else []  # each other kernel (not the default's under a name)
                    for kind in others:  # another stage-1 kernel, every split timed
                        per = _us_per_split(lambda s, kind=kind: ours(s, kind), splits)
                        errs = [rel_err(ours(s, kind)[check_rows], ref) for s in (1, rule, max(splits))]
                        best = min(per, key=per.get)
                        row.setdefault("kernels", {})[stage1_name(kind, heads, b, table.size(1), cache)] = {
                            "split_us": per, "rule_us": per[rule], "best_splits": best, "best_us": per[best],
                            "rel_err": max(errs)}
                    if sglang is not None and cache.numel() >= 2**31:
                        # its int32 offsets (token slot * 576) wrap past 2^31 elements: an illegal address
                        row["sglang_skipped"] = "cache of 2^31 elements or more (int32 offsets in the kernel)"
                    elif sglang is not None:
                        peer = peers.SGLangTriton(sglang, q_nope, q_pe, cache, seq_lens, table, scale, max(splits))
                        per = _us_per_split(peer.run, [s for s in splits if s & (s - 1) == 0])  # 1, 2, 4, .., 32
                        row["sglang_split_us"] = per
                        row["sglang_best_splits"] = min(per, key=per.get)
                        row["sglang_us"] = per[row["sglang_best_splits"]]
                        row["sglang_rel_err"] = rel_err(peer.run(row["sglang_best_splits"])[check_rows], ref)
                        del peer
                    if flash_mla is not None and page == 64:
                        peer = peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale)
                        row["flashmla_us"] = graph_us(peer.run)
                        row["flashmla_rel_err"] = rel_err(peer.run()[check_rows], ref)
                        del peer
                    if (b, length) in PEER_POINTS:
                        row["triton_eager_us"] = _median_ms(lambda: ours(rule)) * 1e3
                        ws1 = torch.empty(get_workspace_size(max_seq_len, b, sms, 1), dtype=torch.uint8, device="cuda")
                        row["reference_us"] = _median_ms(
                            lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws1, scale, 1, impl="reference"),
                            warmup=1, rep=20) * 1e3
                        t0 = time.time()
                        out = compiled(q_nope, q_pe, cache, seq_lens, table, scale)
                        row["compile_s"] = time.time() - t0
                        row["compiled_rel_err"] = rel_err(out[check_rows], ref)
                        peer = lambda: compiled(q_nope, q_pe, cache, seq_lens, table, scale)  # noqa: E731
                        try:
                            row["compiled_us"] = graph_us(peer)
                        except Exception as e:  # fall back to eager timing if the compiled peer cannot be captured
                            row["compiled_graph_error"] = type(e).__name__
                            row["compiled_us"] = _median_ms(peer) * 1e3
                    results.append(row)
                    print("row", json.dumps(row), flush=True)
                    _write(out_dir, {"info": info, "ceilings": ceil, "checks": checks, "results": results,
                                     "partial": True})
                    del q_nope, q_pe, cache, seq_lens, table, ws
                    torch.cuda.empty_cache()
    data = {"info": info, "ceilings": ceil, "checks": checks, "results": results}
    _write(out_dir, data)
    print(to_markdown(data))
    return data


def stage1_name(kind, heads: int, batch: int, n_pages: int, cache=None) -> str:
    """Which stage-1 kernel runs: "tl", or the kind that runs ``kind`` (``stage1.running_kind``: "seesaw" where it
    applies, given ``cache``, else "tma"; without a cache its fallback) and its heads a program ("seesaw, 64
    heads", "tma, 16 heads (swapped)")."""
    from mla_edu.kernels import stage1
    from mla_edu.kernels.workspace import gpu_block_h

    if kind == "tl":
        return "tl"
    block_h = gpu_block_h(heads, batch, n_pages)
    ran = stage1.running_kind(kind, block_h, cache) if cache is not None else stage1.KINDS[kind].fallback or kind
    return f"{ran}, {block_h} heads" + (" (swapped)" if block_h < 64 else "")


BENCH_KEYS = {"ceilings": ("copy_TBps", "matmul_bf16_TFLOPs"), "info": ("sm_count",)}
ROW_KEYS = ("page", "seq_len", "batch", "heads", "bytes", "flops", "triton_split_us")


def read_bench_json(path) -> dict:
    """A bench run's ``kernel_bench.json``, checked for what ``apply_split_rule`` reads; ValueError
    naming the file and what it lacks otherwise."""
    want = f"expected a kernel_bench.json written by python -m tools.kernel_bench, got {path}"
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise ValueError(f"{want} ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{want}, which is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{want}, which holds a {type(data).__name__}, not an object")
    for key, inner in BENCH_KEYS.items():
        missing = [k for k in inner if not isinstance(data.get(key), dict) or k not in data[key]]
        if missing:
            raise ValueError(f"{want}, which has no {key}.{missing[0]}")
    rows = data.get("results")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{want}, which has no results")
    for i, r in enumerate(rows):
        missing = [k for k in ROW_KEYS if not isinstance(r, dict) or k not in r]
        if missing:
            raise ValueError(f"{want}, whose results[{i}] has no {missing[0]!r}")
    return data


def apply_split_rule(data: dict, note: str) -> dict:
    """Recompute the rule's columns of a bench run from its per-split times with the current
    ``triton_num_kv_splits`` (every split the rule can choose was timed), noting why in ``info``."""
    from mla_edu.kernels.workspace import triton_num_kv_splits

    ceil = data["ceilings"]
    for r in data["results"]:
        per = {int(k): v for k, v in r["triton_split_us"].items()}
        rule = triton_num_kv_splits(r["page"] * cdiv(r["seq_len"], r["page"]), r["batch"], r["heads"], r["page"],
                                    data["info"]["sm_count"])
        if rule not in per:
            raise ValueError(f"the rule picks {rule} splits at heads {r['heads']}, batch {r['batch']}, length "
                             f"{r['seq_len']}, page {r['page']}; expected a run that timed it, got splits "
                             f"{sorted(per)}")
        us = per[rule]
        r.update(triton_rule_splits=rule, triton_rule_us=us, triton_us=us, TBps=r["bytes"] / (us * 1e-6) / 1e12,
                 TFLOPs=r["flops"] / (us * 1e-6) / 1e12)
        r.update(frac_copy=r["TBps"] / ceil["copy_TBps"], frac_matmul=r["TFLOPs"] / ceil["matmul_bf16_TFLOPs"])
    data["info"]["rule_note"] = note
    return data


def dist_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _write(out_dir: str, data: dict) -> None:
    write_atomic(os.path.join(out_dir, "kernel_bench.json"), json.dumps(data, indent=1))
    write_atomic(os.path.join(out_dir, "kernel_bench.md"), to_markdown(data))


def _rounded(x):
    if isinstance(x, float):
        return round(x, 3)
    return {k: _rounded(v) for k, v in x.items()} if isinstance(x, dict) else x


def to_markdown(data: dict) -> str:
    info, ceil = data["info"], data["ceilings"]
    pct = lambda r, us: (100 * r["bytes"] / us / 1e6 / ceil["copy_TBps"],  # noqa: E731
                         100 * r["flops"] / us / 1e6 / ceil["matmul_bf16_TFLOPs"])
    lines = [
        f"# mla_decode(impl=\"triton\") on {info['gpu']} "
        f"({info['sm_count']} SMs, sm{info['capability'].replace('.', '')})",
        "",
        f"Command: `{info['command']}`; torch {info['torch']}, triton {info['triton']}, Python {info['python']}.",
        f"cutlass_mla_decode: {info['cutlass']}. SGLang peer: {info.get('sglang')}. FlashMLA peer: "
        f"{info.get('flash_mla')}. Stage 1: {_stage1_text(info)}",
        "",
        *([f"Split rule: {info['rule_note']}", ""] if info.get("rule_note") else []),
        *([f"Note: {info['note']}", ""] if info.get("note") else []),
        f"Ceilings measured in the same run: device copy {ceil['copy_TBps']:.2f} TB/s (read + write), "
        f"bf16 matmul 8192^3 {ceil['matmul_bf16_TFLOPs']:.0f} TFLOP/s.",
        "",
        "bf16, uniform lengths, random page permutation, the same cache bytes for every kernel. Times: median "
        "CUDA-graph replay (launch overhead removed, as in serving). 'mla_edu' = `mla_decode(impl=\"triton\")` at "
        "the split count of `triton_num_kv_splits` (the triton backend's rule), 'stage 1' = its stage-1 kernel "
        "there; 'best' = the fastest of the split "
        f"counts {info.get('split_choices')} (at most one per page); 'cutlass auto' = sgl-kernel's heuristic. "
        "SGLang = its Triton MLA decode kernel (`decode_attention_fwd`, sglang 0.4.7) at its best split of the "
        "powers of two among them (1 .. 32); FlashMLA = `flash_mla_with_kvcache` with its own scheduler "
        "(page 64 only). 'x SGLang' and "
        "'x FlashMLA' = their time / mla_edu's (above 1: mla_edu is faster). % copy / % matmul: bytes (latent "
        "cache + q + out) and FLOPs (`2 B L h_q (576 + 512)`) over the time, as fractions of the ceilings. "
        "err: max |out - float64| / max |float64| over the first and last request (mla_edu at 1, rule and most "
        "splits; each peer at its best).",
        "",
        "| page | h_q | B | L | mla_edu us (split) | stage 1 | best us (split) | rule / best | cutlass auto us (split) "
        "| SGLang us (split) | FlashMLA us | x SGLang | x FlashMLA | mla_edu % copy / matmul "
        "| FlashMLA % copy / matmul | err mla_edu / SGLang / FlashMLA |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["results"]:
        sg = (f"{r['sglang_us']:.1f} ({r['sglang_best_splits']})" if "sglang_us" in r else
              "cannot run: int32 offsets" if "sglang_skipped" in r else "")
        fm = f"{r['flashmla_us']:.1f}" if "flashmla_us" in r else ""
        xsg = f"{r['sglang_us'] / r['triton_us']:.2f}" if "sglang_us" in r else ""
        xfm = f"{r['flashmla_us'] / r['triton_us']:.2f}" if "flashmla_us" in r else ""
        fmp = "{:.0f}% / {:.0f}%".format(*pct(r, r["flashmla_us"])) if "flashmla_us" in r else ""
        errs = " / ".join(f"{r[k]:.1e}" if k in r else "-" for k in ("triton_rel_err", "sglang_rel_err",
                                                                     "flashmla_rel_err"))
        lines.append(
            f"| {r['page']} | {r['heads']} | {r['batch']} | {r['seq_len']} "
            f"| {r['triton_rule_us']:.1f} ({r['triton_rule_splits']}) | {r.get('stage1', 'tl')} "
            f"| {r['triton_best_us']:.1f} "
            f"({r['triton_best_splits']}) | {r['triton_rule_us'] / r['triton_best_us']:.2f} "
            f"| {r['triton_auto_us']:.1f} ({r['triton_auto_splits']}) | {sg} | {fm} | {xsg} | {xfm} "
            f"| {100 * r['frac_copy']:.0f}% / {100 * r['frac_matmul']:.0f}% | {fmp} | {errs} |")
    other = [(r, name, k) for r in data["results"] for name, k in r.get("kernels", {}).items()]
    if other:
        lines += ["", "The other stage-1 kernels (`--kernels`), same problems, where they differ from mla_edu's: "
                  "'tl' = `stage1.tl.stage1_kernel` (plain Triton), 'cp.async' = the Gluon kernel reading "
                  "pages as the tl kernel does. At their best split; 'x' = their best time / mla_edu's time at "
                  "its rule's split (above 1: mla_edu is faster).", "",
                  "| page | h_q | B | L | mla_edu us (split) | mla_edu's stage 1 | other kernel | its best us "
                  "(split) | x | its % copy / matmul | err |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r, name, k in other:
            us = k["best_us"]
            lines.append(f"| {r['page']} | {r['heads']} | {r['batch']} | {r['seq_len']} "
                         f"| {r['triton_rule_us']:.1f} ({r['triton_rule_splits']}) | {r.get('stage1', 'tl')} "
                         f"| {name} | {us:.1f} ({k['best_splits']}) | {us / r['triton_rule_us']:.2f} "
                         "| {:.0f}% / {:.0f}% ".format(*pct(r, us)) + f"| {k['rel_err']:.1e} |")
    peers = [r for r in data["results"] if "compiled_us" in r]
    if peers:
        lines += ["", "Other peers at a few sizes: the same call without a graph (eager, host overhead included), the "
                  "float32 reference impl (eager) and a `torch.compile`d dense gather + attention (graph replay).", "",
                  "| page | h_q | B | L | mla_edu us | eager us | reference us | torch.compile us "
                  "| torch.compile err |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in peers:
            lines.append(f"| {r['page']} | {r['heads']} | {r['batch']} | {r['seq_len']} | {r['triton_us']:.1f} "
                         f"| {r['triton_eager_us']:.0f} | {r['reference_us']:.0f} | {r['compiled_us']:.0f} "
                         f"| {r['compiled_rel_err']:.1e} |")
    lines.append("")
    lines.append("Correctness on this GPU (bf16, checked mode, vs float64 dense): " + ", ".join(
        f"page {c['page']} h{c['heads']} split {c['splits']}: {c['rel_err_vs_f64']:.1e}" for c in data["checks"]))
    sm = summary(data)
    lines += ["", "Summary: " + json.dumps(_rounded(sm))]
    return "\n".join(lines) + "\n"


def _stage1_text(info: dict) -> str:
    """Which stage 1 the run's 'mla_edu' column is (each row's is in its 'stage 1' column)."""
    configs = ", ".join(f"h_q {k}: {tuple(v)}" for k, v in info["configs"].items())
    tl = f"the tl kernel (launch configs, BLOCK_H, BLOCK_N, warps, stages: {configs})"
    if info.get("stage1", "tl") == "tl":  # a run before the Gluon kernels, or with the tl kernel as the default
        return f"{tl} throughout."
    if info["stage1"] == "seesaw":
        return ("default stage 1 (`stage1.DEFAULT_GLUON`) 'seesaw': the two-warpgroup Gluon kernel for "
                "64-head programs on a cache TMA reads, else the Gluon kernel reading pages by TMA (16 and 32 heads "
                f"swapped), wherever the Gluon kernels apply (a Hopper GPU), else {tl}.")
    return (f"default stage 1 (`stage1.DEFAULT_GLUON`) {info['stage1']!r}: the Gluon kernel reading pages "
            f"by {info['stage1']} "
            f"wherever it applies (a Hopper GPU; 64 heads a program, or 16 and 32 swapped), else {tl}.")


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
    ap.add_argument("--pages", default=",".join(map(str, PAGES)), help="page sizes, comma-separated (default 64,128)")
    ap.add_argument("--once", metavar="H,B,L", help="no benchmark: run mla_edu (its rule's split) and each installed "
                    "peer once at h_q=H, batch B, length L, page 64 (for a profiler such as ncu)")
    ap.add_argument("--kernels", action="store_true", help="also time the other stage-1 kernels (the tl "
                    "kernel; the Gluon kernel by cp.async) at every split where they differ, in their own table")
    ap.add_argument("--rerule", metavar="JSON", help="no GPU: recompute the split rule's columns of a bench run's "
                    "kernel_bench.json with the current rule, write --out (with --note saying why)")
    ap.add_argument("--note", default="", help="with --rerule: why the rule's columns were recomputed")
    args = ap.parse_args(argv)
    if not args.rerule and not torch.cuda.is_available():
        raise SystemExit("python -m tools.kernel_bench needs a CUDA GPU; the committed results are in "
                         "results/kernel_bench_h200.md")
    try:  # before any work: a rerule's input, then where the results go
        data = apply_split_rule(read_bench_json(args.rerule), args.note) if args.rerule else None
    except ValueError as e:
        ap.error(f"--rerule: {e}")
    if not args.once:
        try:
            check_out_dir(args.out, "--out")
        except ValueError as e:
            ap.error(str(e))
    if args.rerule:
        _write(args.out, data)
        print(to_markdown(data))
        return
    if args.once:
        run_once(*map(int, args.once.split(",")), kernels=args.kernels)
    else:
        run(args.out, args.quick, tuple(map(int, args.pages.split(","))), args.kernels)


def run_once(heads: int, batch: int, length: int, page: int = 64, kernels: bool = False) -> None:
    """One call of each kernel on one problem (after a warm-up call), for a profiler."""
    from mla_edu.kernels import mla_decode, peers
    from mla_edu.kernels.workspace import triton_num_kv_splits

    q_nope, q_pe, cache, seq_lens, table = make_problem(batch, heads, page, length)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = triton_num_kv_splits(page * table.size(1), batch, heads, page, sms)
    ws = bench_workspace(page * table.size(1), batch, heads, sms, splits)
    scale = 1 / math.sqrt(192)
    calls = {"mla_edu": lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, splits, impl="triton")}
    if kernels:
        from mla_edu.kernels.contract import STAGE1_KINDS
        from mla_edu.kernels.stage1 import DEFAULT_GLUON

        for kind in STAGE1_KINDS:
            if kind != DEFAULT_GLUON:
                calls[f"mla_edu_{kind}"] = lambda kind=kind: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws,
                                                                        scale, splits, impl="triton", stage1=kind)
    sglang, _ = peers.load_sglang_decode()
    if sglang is not None:
        sglang_peer = peers.SGLangTriton(sglang, q_nope, q_pe, cache, seq_lens, table, scale, 4)
        calls["sglang"] = lambda: sglang_peer.run(4)
    flash_mla, _ = peers.load_flash_mla()
    if flash_mla is not None:
        calls["flash_mla"] = peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale).run
    for name, fn in calls.items():
        for _ in range(2):  # a warm-up call (it compiles the Triton kernels), then the profiled one
            fn()
            torch.cuda.synchronize()
        print(f"ran {name} once (h_q={heads}, B={batch}, L={length}, page {page}, mla_edu splits {splits})")


if __name__ == "__main__":
    main()
