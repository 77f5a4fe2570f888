"""Variants of the balanced schedule's constants on a GPU, one run:
``python -m kernel_lab.tools.schedule_variants --out DIR``.

For exploring, not the committed bench (``tools/schedule_bench.py``): each variant sets module constants of
``kernels.schedule`` / ``kernels.split_kv_triton`` (``VARIANTS``), then every problem of ``PROBLEMS`` (the bench's
12 ragged batches and 9 uniform shapes) is measured as ``schedule_bench.measure(..., quick=True)`` does: the rule,
the balanced schedule and FlashMLA, CUDA-graph replay. Prints one line per problem and the ragged geomean per
variant, and writes ``variants.json``; ``--render JSON...`` writes the markdown of earlier runs (CPU is fine).
The runs behind ``docs/kernel_essay.md`` are in ``kernel_lab/results/schedule_variants_h200.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from mla_edu.files import check_out_dir, read_json, write_atomic

RAGGED = [("ragged", b, m, h) for h in (16, 128) for b in (16, 64, 128) for m in (1024, 2048)]
UNIFORM = [("uniform", b, L, 16) for b, L in ((1, 4096), (16, 1024), (64, 4096), (128, 1024))]
UNIFORM += [("uniform", b, L, 128) for b, L in ((4, 4096), (16, 1024), (64, 1024), (64, 4096), (128, 1024))]
PROBLEMS = RAGGED + UNIFORM
#: name -> {(module name, constant): value}; "A" is the code as it is.
VARIANTS = {
    "A": {},
    "stage2_8x8": {("split_kv_triton", "stage2_config"): lambda *batch: (8, 8, 128, 4)},
    "overhead_10": {("schedule", "FIXED_OVERHEAD_PAGES"): 10},
    "min_part_4": {("schedule", "MIN_PART_PAGES"): 4},
}


def run(out_dir: str) -> dict:
    import torch

    from mla_edu.kernels import peers
    from mla_edu.kernels import schedule, split_kv_triton
    from tools import schedule_bench

    modules = {"schedule": schedule, "split_kv_triton": split_kv_triton}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flash_mla, _ = peers.load_flash_mla()
    orig = {k: getattr(modules[k[0]], k[1]) for v in VARIANTS.values() for k in v}
    out = {}
    for name, patch in VARIANTS.items():
        for (mod, const), value in {**orig, **patch}.items():
            setattr(modules[mod], const, value)
        for kind, b, size, h in PROBLEMS:
            lens = schedule.lognormal_lengths(b, size, schedule_bench.SEED) if kind == "ragged" else [size] * b
            r = schedule_bench.measure(lens, h, sms, flash_mla, None, None, quick=True)
            key = f"{kind} h{h} B{b} {size}"
            out.setdefault(key, {"rule": r["rule_us"], "fm": r.get("flashmla_us")})[name] = (r["balanced_us"],
                                                                                           r["balanced_err"])
            torch.cuda.empty_cache()
    for (mod, const), value in orig.items():
        setattr(modules[mod], const, value)
    write_atomic(os.path.join(out_dir, "variants.json"), json.dumps(out, indent=1))
    print(render([out], ["this run"]))
    return out


def render(runs: list[dict], titles: list[str]) -> str:
    """Markdown: per run, one row per problem (us, and FlashMLA's time / the variant's), the ragged geomeans."""
    lines = []
    for data, title in zip(runs, titles):
        names = [n for n in next(iter(data.values())) if n not in ("rule", "fm")]
        lines += [f"## {title}", "", "| problem | rule us | FlashMLA us | " + " | ".join(names) + " |",
                  "|---" * (3 + len(names)) + "|"]
        for key, d in data.items():
            lines.append(f"| {key} | {d['rule']:.1f} | {d['fm']:.1f} | "
                         + " | ".join(f"{d[n][0]:.1f} ({d['fm'] / d[n][0]:.2f}x)" for n in names) + " |")
        geo = {n: statistics.geometric_mean(d["fm"] / d[n][0] for k, d in data.items() if k.startswith("ragged"))
               for n in names}
        lines += ["", "Ragged geomean x FlashMLA: " + ", ".join(f"{n} {g:.3f}" for n, g in geo.items()), ""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for variants.json")
    ap.add_argument("--render", nargs="+", metavar="JSON", help="no GPU: print the markdown of these runs")
    args = ap.parse_args(argv)
    if args.render:
        try:
            runs = [read_json(p, "--render") for p in args.render]
        except ValueError as e:
            ap.error(str(e))
        for p, run_ in zip(args.render, runs):
            if not isinstance(run_, dict) or not run_ or not all(isinstance(d, dict) for d in run_.values()):
                ap.error(f"--render: expected a variants.json (problem -> times), got {p}, which holds none")
        print(render(runs, args.render))
        return
    try:  # before the GPU work
        check_out_dir(args.out, "--out")
    except ValueError as e:
        ap.error(str(e))
    run(args.out)


if __name__ == "__main__":
    main()
