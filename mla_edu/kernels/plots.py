"""Figures for notebooks 04 and 09 and figures/: the committed H200 benchmark."""

from __future__ import annotations

import json
from pathlib import Path

from mla_edu import palette, plotstyle
from mla_edu.paths import RESULTS_DIR

BENCH_JSON = RESULTS_DIR / "kernel_bench_h200.json"


def load_bench(path: Path | str = BENCH_JSON) -> dict:
    with open(path) as f:
        return json.load(f)


def summary(data: dict) -> dict:
    """The acceptance numbers of a bench run (``python -m tools.kernel_bench``; also printed at the end of
    its markdown): shapes, the split rule against the best split, peers, the B=64, L=4096 points."""
    ceil, rows = data["ceilings"], data["results"]
    rule = [r["triton_rule_us"] / r["triton_best_us"] for r in rows]
    out = {"shapes": len(rows), "rule_within_10pct": sum(x <= 1.10 for x in rule), "rule_worst_ratio": max(rule),
           "max_rel_err": max(r[k] for r in rows for k in ("triton_rel_err", "sglang_rel_err", "flashmla_rel_err")
                              if k in r)}
    sg = [r["sglang_us"] / r["triton_us"] for r in rows if "sglang_us" in r]
    if sg:
        out.update(faster_than_sglang=sum(x > 1 for x in sg), sglang_shapes=len(sg), min_speedup_vs_sglang=min(sg))
    for r in rows:
        if r["page"] == 64 and r["batch"] == 64 and r["seq_len"] == 4096:
            key = f"h{r['heads']}_B64_L4096"
            out[key] = {"us": r["triton_us"], "pct_copy": 100 * r["frac_copy"], "pct_matmul": 100 * r["frac_matmul"]}
            if "flashmla_us" in r:
                out[key].update(flashmla_us=r["flashmla_us"], speed_vs_flashmla=r["flashmla_us"] / r["triton_us"],
                                flashmla_pct_copy=100 * r["bytes"] / r["flashmla_us"] / 1e6 / ceil["copy_TBps"],
                                flashmla_pct_matmul=100 * r["flops"] / r["flashmla_us"] / 1e6
                                / ceil["matmul_bf16_TFLOPs"])
            if "sglang_us" in r:
                out[key].update(sglang_us=r["sglang_us"], speed_vs_sglang=r["sglang_us"] / r["triton_us"])
    return out


REGIMES = {16: ("TBps", "copy_TBps", "TB/s", "memory"), 128: ("TFLOPs", "matmul_bf16_TFLOPs", "TFLOP/s", "compute")}


def kernel_bench_regime_figure(heads: int, path: Path | str = BENCH_JSON):
    """Achieved TB/s (``heads`` = 16) or TFLOP/s (128) against L, each batch and page size a line, the peers of the
    same run at B=64, and the ceiling measured in the same run."""
    if heads not in REGIMES:
        raise ValueError(f"heads: expected one of {sorted(REGIMES)}, got {heads!r}")
    key, ceil_key, unit, bound = REGIMES[heads]
    data = load_bench(path)
    ceil_v = data["ceilings"][ceil_key]
    batches = sorted({r["batch"] for r in data["results"]})
    fig, ax = plotstyle.subplots(figsize=(8, 5.2))
    for page, style in ((64, "--"), (128, "-")):
        for i, b in enumerate(batches):  # batch: colour and marker; page: line style
            rows = [r for r in data["results"] if r["heads"] == heads and r["page"] == page and r["batch"] == b]
            if rows:
                ax.plot([r["seq_len"] for r in rows], [r[key] for r in rows], style, marker=palette.MARKERS[i],
                        color=palette.SERIES[i], ms=4, label=f"page {page}, B={b}")
    for peer, style in (("flashmla_us", ":"), ("sglang_us", "-.")):  # peers of the same run, B=64, page 64
        rows = [r for r in data["results"]
                if r["heads"] == heads and r["page"] == 64 and r["batch"] == 64 and peer in r]
        if rows:
            r_unit = "bytes" if key == "TBps" else "flops"
            ax.plot([r["seq_len"] for r in rows], [r[r_unit] / r[peer] / 1e6 for r in rows], style,
                    color=palette.GREY, marker="s", ms=4,
                    label=f"{'FlashMLA' if peer == 'flashmla_us' else 'SGLang Triton'}, B=64")
    ax.axhline(ceil_v, color=palette.OKABE_ITO["black"], lw=1)
    ax.text(512, ceil_v * 0.93, f"measured ceiling {ceil_v:.1f} {unit}", fontsize=plotstyle.MIN_FONT_PT)
    ax.set_xscale("log", base=2)
    # room above the ceiling: a read-only stream can pass the copy ceiling, which counts a read and a write
    ax.set_ylim(0, max([ceil_v, *(max(ln.get_ydata()) for ln in ax.lines)]) * 1.05)
    ax.set_xlabel("context length L (tokens per request)")
    ax.set_ylabel(unit)
    ax.set_title(f"split-KV MLA decode on {data['info']['gpu']} (bf16), h_q = {heads}: {bound}-bound")
    ax.legend(fontsize=plotstyle.MIN_FONT_PT, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    return fig


def kernel_roofline_figure(path: Path | str = BENCH_JSON):
    """The roofline of the measured ceilings with the B=64, L=4096 points of each kernel."""
    data = load_bench(path)
    fig, ax = plotstyle.subplots(figsize=(8, 5))
    _roofline(ax, data)
    fig.tight_layout()
    return fig


def kernel_bench_figure(path: Path | str = BENCH_JSON) -> tuple:
    """Notebook 04's three figures of the committed H200 bench: the memory-bound regime (h_q = 16), the
    compute-bound one (h_q = 128), the roofline (figures/kernel_bench_h200_*.png)."""
    return kernel_bench_regime_figure(16, path), kernel_bench_regime_figure(128, path), kernel_roofline_figure(path)


def _roofline(ax, data: dict) -> None:
    """Roofline of the measured ceilings, with the B=64, L=4096, page 64 points of each kernel."""
    ceil = data["ceilings"]
    copy, mm = ceil["copy_TBps"], ceil["matmul_bf16_TFLOPs"]
    xs = [2.0 ** k for k in range(2, 11)]
    ax.plot(xs, [min(copy * x, mm) for x in xs], "k-", lw=1, label="measured roof (copy, matmul)")
    rows = [r for r in data["results"] if r["page"] == 64 and r["batch"] == 64 and r["seq_len"] == 4096]
    times = {"mla_edu": lambda r: r["triton_us"],  # and the plain-Triton stage 1 where the bench timed it too
             "mla_edu, plain-Triton stage 1": lambda r: r.get("kernels", {}).get("tl", {}).get("best_us"),
             "FlashMLA": lambda r: r.get("flashmla_us"), "SGLang Triton": lambda r: r.get("sglang_us")}
    for (name, us), marker, color in zip(times.items(), "oxs^", palette.SERIES):
        pts = [(r["flops"] / r["bytes"], r["flops"] / us(r) / 1e6, r["heads"]) for r in rows if us(r)]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, color=color, ls="none", label=name)
            for x, y, h in pts if name == "mla_edu" else ():
                ax.annotate(f"h_q={h}", (x, y), textcoords="offset points", xytext=(5, -10),
                            fontsize=plotstyle.MIN_FONT_PT)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=10)
    ax.set_xlabel("FLOP per byte (cache, q and o: attention.cost.decode_intensity)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"roofline on {data['info']['gpu']}, B = 64, L = 4096")
    ax.legend(fontsize=plotstyle.MIN_FONT_PT, loc="lower right")


def schedule_gantt(lens: list[int], page_size: int, heads: int, sm_count: int, num_splits: int):
    """Which SM runs what when, for one batch of ``lens``, stacked: above, ``num_splits`` for every request, the
    grid's programs placed by the block scheduler's rule (the next program to the first free SM,
    ``schedule.simulate``); below, the balanced schedule, one persistent program per part walking its
    segments in order (``schedule.part_timeline``, from the kernels' own arithmetic). The longest request is
    highlighted (colour and hatch); time in page-times (one page read by one program), each program or
    segment also paying ``schedule.FIXED_OVERHEAD_PAGES``."""

    from mla_edu.kernels import schedule

    longest = max(range(len(lens)), key=lens.__getitem__)
    programs = schedule.pages_per_program(lens, page_size, heads, sm_count, num_splits)
    rule_bars, rule_span = schedule.simulate(programs, sm_count)
    part_bars, part_span = schedule.part_timeline(lens, page_size, heads, sm_count)
    parts = schedule.num_parts(heads, sm_count, len(lens), max(-(-max(x, 0) // page_size) for x in lens))
    fig, axes = plotstyle.subplots(2, 1, figsize=(7, 6.4), sharex=True, sharey=True)  # stacked
    panels = ((axes[0], rule_bars, f"{num_splits} splits for every request: {len(programs)} programs, "
                                   f"done after {rule_span:.0f} page-times"),
              (axes[1], part_bars, f"balanced schedule: {parts} parts, done after {part_span:.0f} page-times"))
    for ax, bars, title in panels:
        for hot in (False, True):
            sel = [(s, e, slot) for s, e, slot, req in bars if (req == longest) == hot]
            ax.barh([slot for _, _, slot in sel], [e - s for s, e, _ in sel], left=[s for s, _, _ in sel],
                    height=0.85, color=palette.HIGHLIGHT if hot else palette.GREY, hatch="////" if hot else None,
                    edgecolor=palette.HATCH_COLOR if hot else "none", linewidth=0,
                    label=f"request {longest} ({lens[longest]} tokens)" if hot else "the other requests")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("SM")
    axes[1].set_xlabel(f"time (page-times; each program or segment also costs {schedule.FIXED_OVERHEAD_PAGES})")
    axes[0].legend(loc="upper right", fontsize=plotstyle.MIN_FONT_PT)
    fig.tight_layout()
    return fig
