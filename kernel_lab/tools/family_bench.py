"""Families of decode batches at every head count a server runs, mla_edu's schedules against FlashMLA and SGLang:
``python -m kernel_lab.tools.family_bench --out DIR``, on a Hopper GPU.

DeepSeek-V3's 128 query heads are 64, 32 and 16 per GPU at tensor parallel 2, 4 and 8, so every problem runs at
h_q 16, 32, 64 and 128. The batches (``family_lengths``, seeded, B in ``BATCHES``): log-normal lengths (sigma 0.5,
1 and 1.5), normal (standard deviation half the mean, mean 4K and 16K), bimodal (short chat turns and one document
in eight), one giant request among short ones, and uniform random lengths; then the uniform grid (``UNIFORM``).

Per problem, every option is timed once per round and the rounds repeat (``--rounds``, A B A B order, so a slow
stretch of the GPU touches every option alike; in runs after ``69707eb`` each round starts at another option,
``round_order``, so that no option always follows the same one, and the json's info says so): mla_edu at each split
count of ``SPLITS`` up to the table's width and at the split rule's count (``triton_num_kv_splits``, the table as
wide as the longest request), the balanced schedule (``schedule="balanced"``), FlashMLA (``get_mla_metadata``
outside the timed call) and SGLang's Triton kernel with its own per-request split counts (outside the timed call).
bf16, page 64, ``kernel_bench.graph_us`` (median CUDA-graph replay), the same cache bytes for every kernel. In round
0, each path's output against float64 on the first, last and longest request. After each problem, the GPU's clocks,
temperature, power and slowdown reasons from ``nvidia-smi`` (``gpu_state``): the GPU's state once, just after the
problem's last timed call, not the clock during the timed rounds. Writes ``family_bench.json`` after every problem
(a crash or the ``--deadline`` keeps what was measured); ``--render`` writes its markdown, no GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

from mla_edu.files import check_out_dir, read_json, write_atomic

HEADS = (16, 32, 64, 128)
BATCHES = (16, 64, 128, 256)
UNIFORM = ((1, 4, 16, 64, 128), (1024, 4096, 16384))  # (B, L) of the uniform grid
SPLITS = (1, 2, 4, 8, 16, 32)
PAGE = 64
SEED = 0
#: name -> (what it is, for the tables). ``family_lengths`` draws each.
FAMILIES = {
    "lognormal_0.5": "log-normal, median 2048, sigma 0.5",
    "lognormal_1": "log-normal, median 2048, sigma 1",
    "lognormal_1.5": "log-normal, median 1024, sigma 1.5",
    "normal_4k": "normal, mean 4096, sd 2048",
    "normal_16k": "normal, mean 16384, sd 8192",
    "bimodal": "7 in 8 chat turns (128-1024), 1 in 8 documents (8K-32K)",
    "giant": "one 65536 among short ones (512)",
    "uniform_random": "uniform random in [1, 8192]",
}
MAX_LEN = 65536


def family_lengths(family: str, batch: int, seed: int = SEED) -> list[int]:
    """Seeded lengths (host ints in [1, MAX_LEN]) of one batch of ``family`` (``FAMILIES``)."""
    if family not in FAMILIES:
        raise ValueError(f"expected a family of {list(FAMILIES)}, got {family!r}")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"expected a batch size >= 1, got {batch!r}")
    g = torch.Generator().manual_seed(seed * 1000 + batch)
    z = torch.randn(batch, generator=g, dtype=torch.float64)
    u = torch.rand(batch, generator=g, dtype=torch.float64)
    if family.startswith("lognormal_"):
        sigma = float(family.split("_")[1])
        median = 1024 if sigma > 1 else 2048
        x = median * torch.exp(sigma * z)
    elif family.startswith("normal_"):
        mean = {"normal_4k": 4096, "normal_16k": 16384}[family]
        x = mean + mean / 2 * z
    elif family == "bimodal":
        doc = torch.arange(batch) % 8 == 7  # one in eight, spread through the batch
        x = torch.where(doc, 8192 + u * (32768 - 8192), 128 + u * (1024 - 128))
    elif family == "giant":
        x = torch.full((batch,), 512.0)
        x[batch // 2] = MAX_LEN
    else:
        x = 1 + u * 8191
    return [min(max(1, round(float(v))), MAX_LEN) for v in x]


def problems(heads=HEADS, batches=BATCHES, families=tuple(FAMILIES), uniform=UNIFORM):
    """(set, family, h_q, lengths) of each problem in the bench's order: the families by B, family, h_q (a run
    cut short keeps whole batch sizes of every family), then the uniform grid by B, L, h_q."""
    for b in batches:
        for fam in families:
            lens = family_lengths(fam, b)
            for h in heads:
                yield "family", fam, h, lens
    for b in uniform[0]:
        for ln in uniform[1]:
            for h in heads:
                yield "uniform", f"L{ln}", h, [ln] * b


def measure(lens: list[int], heads: int, sms: int, flash_mla, sglang, sglang_rule, rounds: int) -> dict:
    """One problem's row: ``us[option]`` = the times of every round (option: "split_S", "balanced", "flashmla",
    "sglang_own"), ``rule_splits``, the errors of round 0."""
    from mla_edu.kernels import mla_decode, peers
    from mla_edu.kernels import schedule as sc
    from mla_edu.kernels.workspace import triton_num_kv_splits
    from tools.kernel_bench import D_LAT, bench_workspace, f64_reference, graph_us, make_ragged_problem, rel_err

    q_nope, q_pe, cache, seq_lens, table = make_ragged_problem(lens, heads, PAGE, seed=SEED)
    b, width = table.shape
    scale = 1 / math.sqrt(192)
    rule = triton_num_kv_splits(PAGE * width, b, heads, PAGE, sms)
    splits = sorted({s for s in SPLITS if s <= width} | {rule})
    parts = sc.num_parts(heads, sms, b, width)
    ws = bench_workspace(PAGE * width, b, heads, sms, max(splits), sc.workspace_bytes(b, heads, D_LAT, parts))
    options = {f"split_{s}": (lambda s=s: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, s,
                                                     impl="triton", sm_count=sms)) for s in splits}
    options["balanced"] = lambda: mla_decode(q_nope, q_pe, cache, seq_lens, table, ws, scale, -1, impl="triton",
                                             sm_count=sms, schedule="balanced")
    held = []
    if flash_mla is not None:
        held.append(peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale))
        options["flashmla"] = held[-1].run
    own = None
    if sglang is not None and sglang_rule is not None and cache.numel() < 2**31:  # its int32 offsets wrap past 2^31
        held.append(peers.SGLangTriton(sglang, q_nope, q_pe, cache, seq_lens, table, scale, 32))
        own = held[-1].own_splits(sglang_rule, sms)
        options["sglang_own"] = lambda peer=held[-1]: peer.run_splits(own)
    check = sorted({0, b - 1, max(range(b), key=lambda i: lens[i])})
    ref = f64_reference(q_nope, q_pe, cache, seq_lens, table, scale, check)
    row = {"heads": heads, "batch": b, "lens": lens, "tokens": sum(lens), "rule_splits": rule, "parts": parts,
           "err": {k: rel_err(fn()[check], ref) for k, fn in options.items()}, "us": {k: [] for k in options}}
    if own is not None:
        row["sglang_own_splits"] = sorted(set(own.tolist()))
    for i in range(rounds):
        for k in round_order(list(options), i, rounds):
            row["us"][k].append(graph_us(options[k]))
    return row


def round_order(names: list[str], i: int, rounds: int) -> list[str]:
    """The options' order in round ``i`` of ``rounds``: the list rotated by ``i`` of ``rounds`` equal steps, so that no
    option always follows the same one (a kernel's clock and power depend on what ran just before it)."""
    shift = i * len(names) // rounds
    return names[shift:] + names[:shift]


#: nvidia-smi's query fields for ``gpu_state``. The last is a bit mask of why the clock is below its maximum (NVML's
#: nvmlClocksEventReasons); ``SLOWDOWN`` holds the bits that slow a kernel: 0x4 the software power cap, 0x8 a
#: hardware slowdown, 0x20 and 0x40 software and hardware thermal slowdown, 0x80 the hardware power brake (0x1, the GPU
#: idle, 0x2, an application clock setting, 0x10 sync boost and 0x100 the display clock are not counted). Older
#: drivers call the field clocks_throttle_reasons.active. ``power.draw`` is nvidia-smi's average over about a second.
SMI_FIELDS = ("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw", "power.limit", "clocks_event_reasons.active")
SLOWDOWN = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def parse_gpu_state(text: str) -> dict:
    """nvidia-smi's ``--format=csv,noheader,nounits`` line for ``SMI_FIELDS``: {sm_mhz, mem_mhz, temp_c, power_w,
    power_limit_w, reasons}; ValueError naming what came where it is not six numbers."""
    parts = [p.strip() for p in text.strip().splitlines()[0].split(",")] if text.strip() else []
    try:
        sm, mem, temp, power, limit, reasons = parts
        return {"sm_mhz": int(sm), "mem_mhz": int(mem), "temp_c": int(temp), "power_w": round(float(power), 1),
                "power_limit_w": round(float(limit), 1), "reasons": int(reasons, 16)}
    except ValueError:
        raise ValueError(f"nvidia-smi: expected {len(SMI_FIELDS)} values ({', '.join(SMI_FIELDS)}), got "
                         f"{text.strip()!r}") from None


def gpu_state() -> dict:
    """GPU 0's clocks now (``parse_gpu_state``), or {"error": why} where nvidia-smi is missing or answers otherwise."""
    fields = list(SMI_FIELDS)
    for _ in range(2):
        try:
            out = subprocess.run(["nvidia-smi", "-i", "0", f"--query-gpu={','.join(fields)}",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as e:
            return {"error": f"nvidia-smi: {e}"}
        if out.returncode == 0:
            try:
                return parse_gpu_state(out.stdout)
            except ValueError as e:
                return {"error": str(e)}
        fields[-1] = "clocks_throttle_reasons.active"
    return {"error": f"nvidia-smi exited {out.returncode}: {(out.stderr or out.stdout).strip()[:200]}"}


def slowed(rows: list[dict]) -> list[dict]:
    """The rows after whose problem a slowdown reason (``SLOWDOWN``) was set."""
    return [r for r in rows if r.get("gpu_after", {}).get("reasons", 0) & SLOWDOWN]


def clock_summary(rows: list[dict]) -> str:
    """One sentence on the clocks after each problem: the SM clock's range, the hottest, and the problems where a
    slowdown reason (``SLOWDOWN``) was set."""
    states = [r["gpu_after"] for r in rows if "sm_mhz" in r.get("gpu_after", {})]
    if not states:
        return "Clocks: not recorded in this run."
    named = [f"{r['family']} h{r['heads']} B{r['batch']} (0x{r['gpu_after']['reasons']:x})" for r in slowed(rows)]
    sm = [s["sm_mhz"] for s in states]
    return (f"Clocks after each of {len(states)} problems (nvidia-smi): SM {min(sm)}-{max(sm)} MHz, memory "
            f"{min(s['mem_mhz'] for s in states)}-{max(s['mem_mhz'] for s in states)} MHz, at most "
            f"{max(s['temp_c'] for s in states)} C and {max(s['power_w'] for s in states):.0f} W"
            + (f" (limit {min(s['power_limit_w'] for s in states if 'power_limit_w' in s):.0f} W)"
               if any("power_limit_w" in s for s in states) else "") + "; a slowdown reason "
            + (f"at {len(named)}: {', '.join(named[:8])}{' ...' if len(named) > 8 else ''}." if named
               else "at none."))


def median_us(row: dict, option: str) -> float:
    return statistics.median(row["us"][option])


def mla_options(row: dict) -> list[str]:
    """mla_edu's options of a row: its split counts and the balanced schedule."""
    return [k for k in row["us"] if k.startswith("split_") or k == "balanced"]


def best_option(row: dict) -> str:
    return min(mla_options(row), key=lambda k: median_us(row, k))


def table_width(row: dict) -> int:
    """The bench's page table's width for this batch: its longest request's pages."""
    return math.ceil(max(row["lens"]) / PAGE)


def rule_splits_now(row: dict, sm_count: int, width: int | None = None) -> int:
    """The split rule's count for this batch with the package as it is (the triton serving backend's
    ``auto_splits`` on a table ``width`` pages wide, default the bench's, ``table_width``), not the ``rule_splits``
    stored at run time: a run times every count of ``SPLITS`` up to the width, so it scores a later rule too."""
    from mla_edu.serving.backends.triton import auto_splits

    return auto_splits(row["batch"], row["heads"], sm_count, width or table_width(row), PAGE)


def choice_option(row: dict, sm_count: int, width: int | None = None) -> str:
    """The option the triton serving backend runs for this batch on a page table ``width`` pages wide (default the
    bench's, as wide as the batch's longest request): "balanced" where its ``auto_schedule`` takes the balanced
    schedule, else "split_S" at the rule's count (perhaps one the run did not time). A server's table is as wide as
    its context limit (``acceptance.served_choice``)."""
    from mla_edu.serving.backends.triton import auto_schedule

    width = width or table_width(row)
    if auto_schedule(row["lens"], row["heads"], sm_count, width, PAGE) == "balanced":
        return "balanced"
    return f"split_{rule_splits_now(row, sm_count, width)}"


def backend_choice(row: dict, sm_count: int) -> str:
    """What the triton serving backend runs for this batch today with a page table as wide as the batch's longest
    request (the bench's table, ``choice_option``). ValueError where that is a count the run did not time."""
    option = choice_option(row, sm_count)
    if option not in row["us"]:
        raise ValueError(f"the backend now takes {option.replace('_', ' ')} at h_q={row['heads']}, B={row['batch']}, "
                         f"but the run timed only {sorted(mla_options(row))}")
    return option


def x_flashmla(row: dict, option: str) -> tuple[float, float, float]:
    """(median, min, max) over rounds of FlashMLA's time / ``option``'s, round by round (above 1: mla_edu faster)."""
    x = [f / o for f, o in zip(row["us"]["flashmla"], row["us"][option])]
    return statistics.median(x), min(x), max(x)


def summary(data: dict) -> dict:
    """Per set and head count: geomean and min of x FlashMLA for the backend's choice and the best option; the
    backend's choice over the best (max, count within 5%)."""
    sms = data["info"]["sm_count"]
    out = {}
    for kind in ("family", "uniform"):
        for h in HEADS:
            rows = [r for r in data[kind] if r["heads"] == h and "flashmla" in r["us"]]
            if kind == "uniform":
                rows = [r for r in rows if r["batch"] >= 4]
            if not rows:
                continue
            choice = [x_flashmla(r, backend_choice(r, sms))[0] for r in rows]
            best = [x_flashmla(r, best_option(r))[0] for r in rows]
            regret = [median_us(r, backend_choice(r, sms)) / median_us(r, best_option(r)) for r in rows]
            out[f"{kind}_h{h}"] = {"problems": len(rows), "choice_geomean": statistics.geometric_mean(choice),
                                   "choice_min": min(choice), "best_geomean": statistics.geometric_mean(best),
                                   "best_min": min(best), "choice_over_best_max": max(regret),
                                   "choice_within_5pct": sum(v <= 1.05 for v in regret)}
    errs = [e for kind in ("family", "uniform") for r in data[kind] for e in r["err"].values()]
    if errs:
        out["max_rel_err"] = max(errs)
    return {k: {a: round(v, 3) for a, v in d.items()} if isinstance(d, dict) else round(d, 5) for k, d in out.items()}


def to_markdown(data: dict) -> str:
    info, sms = data["info"], data["info"]["sm_count"]
    lines = [f"# Families of decode batches on {info['gpu']} ({sms} SMs), every head count", "",
             f"Command: `{info['command']}`; torch {info['torch']}, triton {info['triton']}, Python {info['python']}. "
             f"FlashMLA: {info['flash_mla']}. SGLang: {info['sglang']}. Rounds: {info['rounds']}. "
             f"Wall time: {data.get('seconds', 0):.0f} s.", "",
             *([f"Setup: {info['setup']}", ""] if info.get("setup") else []),
             "bf16, page 64, median CUDA-graph replay (`kernel_bench.graph_us`), the same cache bytes for every "
             f"kernel; each option timed once per round, A B A B{', ' + info['order'] if info.get('order') else ''}. "
             "'choice' = what the triton backend runs today "
             "(`schedule.prefers_balanced`: the balanced schedule or the split rule's count); 'best' = the fastest of "
             "mla_edu's split counts and the balanced schedule; 'x FM' = FlashMLA's time / mla_edu's, the median over "
             "rounds of the round-by-round ratio [min-max]; above 1, mla_edu is faster. err = max |out - float64| / "
             "max |float64| of the worst path, first, last and longest request.", ""]
    for kind, title in (("family", "Families"), ("uniform", "Uniform lengths")):
        if not data[kind]:
            continue
        lines += [f"## {title}", "",
                  "| family | h_q | B | lengths min / median / max | choice | choice us | best | best us | "
                  "choice / best | FlashMLA us | x FM choice [min-max] | x FM best | SGLang own us | err |",
                  "|---" * 14 + "|"]
        for r in data[kind]:
            choice, best = backend_choice(r, sms), best_option(r)
            fm = "flashmla" in r["us"]
            xc = x_flashmla(r, choice) if fm else None
            lens = r["lens"]
            lines.append(
                f"| {r['family']} | {r['heads']} | {r['batch']} | {min(lens)} / {int(statistics.median(lens))} / "
                f"{max(lens)} | {choice} | {median_us(r, choice):.1f} | {best} | {median_us(r, best):.1f} | "
                f"{median_us(r, choice) / median_us(r, best):.2f} | "
                + (f"{median_us(r, 'flashmla'):.1f} | {xc[0]:.2f} [{xc[1]:.2f}-{xc[2]:.2f}] | "
                   f"{x_flashmla(r, best)[0]:.2f} | " if fm else "- | - | - | ")
                + (f"{median_us(r, 'sglang_own'):.1f} | " if "sglang_own" in r["us"] else "- | ")
                + f"{max(r['err'].values()):.1e} |")
        lines.append("")
    lines += [clock_summary(data["family"] + data["uniform"]), "", "Summary: " + json.dumps(summary(data))]
    return "\n".join(lines) + "\n"


def _write(out_dir: str, data: dict) -> None:
    write_atomic(os.path.join(out_dir, "family_bench.json"), json.dumps(data))
    write_atomic(os.path.join(out_dir, "family_bench.md"), to_markdown(data))


def run(out_dir: str, rounds: int, deadline_s: float, heads=HEADS, batches=BATCHES, families=tuple(FAMILIES),
        uniform=UNIFORM, setup: str = "") -> dict:
    import triton

    from mla_edu.kernels import peers
    from tools.kernel_bench import dist_version

    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    sglang, sglang_why = peers.load_sglang_decode()
    rule, rule_why = peers.load_sglang_split_rule()
    flash_mla, flash_why = peers.load_flash_mla()
    info = {"gpu": props.name, "sm_count": sms, "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "rounds": rounds, "setup": setup,
            "order": "the order rotated each round (round_order)",
            "command": "python -m kernel_lab.tools.family_bench " + " ".join(sys.argv[1:]),
            "sglang": sglang_why or rule_why or f"sglang {dist_version('sglang')}, its own split counts",
            "flash_mla": flash_why or "flash_mla importable (FlashMLA built from source on this machine)"}
    print(json.dumps(info), flush=True)
    data = {"info": info, "family": [], "uniform": [], "cut": None}
    for kind, fam, h, lens in problems(heads, batches, families, uniform):
        if time.time() - t0 > deadline_s:
            data["cut"] = f"--deadline {deadline_s:.0f} s passed before {kind} {fam} h{h} B{len(lens)}"
            break
        row = {"family": fam, **measure(lens, h, sms, flash_mla, sglang, rule, rounds), "gpu_after": gpu_state()}
        torch.cuda.empty_cache()
        data[kind].append(row)
        data["seconds"] = time.time() - t0
        print(kind, fam, h, len(lens), json.dumps(row["us"]), f"{data['seconds']:.0f} s", flush=True)
        _write(out_dir, data)
    data["seconds"] = time.time() - t0
    _write(out_dir, data)
    return data


def _ints(text: str) -> tuple:
    try:
        return tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for family_bench.json / .md")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per problem (the median is reported)")
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds after which no new problem starts")
    ap.add_argument("--heads", type=_ints, default=HEADS)
    ap.add_argument("--batches", type=_ints, default=BATCHES)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--no-uniform", action="store_true", help="the families only")
    ap.add_argument("--no-families", action="store_true", help="the uniform grid only")
    ap.add_argument("--uniform-batches", type=_ints, default=UNIFORM[0], help="B of the uniform grid")
    ap.add_argument("--uniform-lengths", type=_ints, default=UNIFORM[1], help="L of the uniform grid")
    ap.add_argument("--setup", default="", help="how the machine was set up (into the markdown)")
    ap.add_argument("--render", metavar="JSON", help="no GPU: write the markdown of a run's json into --out")
    args = ap.parse_args(argv)
    if args.render:
        data = read_json(args.render, "--render")
        check_out_dir(args.out, "--out")
        _write(args.out, data)
        return
    fams = tuple(f for f in args.families.split(",") if f)
    bad = [f for f in fams if f not in FAMILIES]
    if bad:
        ap.error(f"--families: expected names of {list(FAMILIES)}, got {bad}")
    bad = [x for x in args.uniform_batches + args.uniform_lengths if x < 1]
    if bad:
        ap.error(f"--uniform-batches, --uniform-lengths: expected ints >= 1, got {bad}")
    if args.rounds < 1:
        ap.error(f"--rounds: expected >= 1, got {args.rounds}")
    if not torch.cuda.is_available():
        raise SystemExit("python -m kernel_lab.tools.family_bench needs a CUDA GPU")
    check_out_dir(args.out, "--out")
    if args.no_uniform and args.no_families:
        ap.error("--no-uniform and --no-families: expected at most one of them (nothing would run)")
    run(args.out, args.rounds, args.deadline, args.heads, () if args.no_families else args.batches, fams,
        ((), ()) if args.no_uniform else (args.uniform_batches, args.uniform_lengths), args.setup)


if __name__ == "__main__":
    main()
