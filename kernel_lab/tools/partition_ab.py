"""The balanced schedule with and without a partition patch, timed on the same batches in alternating processes:
``python -m kernel_lab.tools.partition_ab --out DIR``, on a Hopper GPU.

The patch (``--patch``, default ``long_tail.PATCH``: the piece cap in small batches only) is applied to a copy of the
package (``long_tail.patched_copy``); then ``--pairs`` pairs of processes run the bench's batches (``family_bench``'s
families) in the order base, patched, base, patched, ... (each process its own Triton build of its own partition
kernel, so one process cannot time both). Per process and batch: ``--rounds`` CUDA-graph medians of the balanced
schedule (``kernel_bench.graph_us``), and in its first round the output of the first, last and longest request against
float64. Each process appends to ``DIR/partition_ab.json``; the markdown (``--render JSON`` rewrites it, no GPU) gives
per batch the base's and the patch's median over every round of their processes and 'base / patched' (above 1: the
patch is faster) with the min-max of the pairs' ratios, and marks the batches whose modelled makespan the patch
changes (``schedule.makespans`` of each copy, stored in the json's ``info["model"]`` before the processes run, so that
the markdown does not depend on the patch still applying). Where a patch changes the partition only, the others are
the run's control, where only noise can differ; a patch that changes stage 2 as well (``many_uncapped.patch``) changes
them too.

The default patch, ``piece_cap.patch``, was timed at 5a3b22c (``kernel_lab/results/partition_ab_h200.md``) and no
longer applies: the package's ``schedule.max_pieces`` superseded it. ``--patch`` names the next one.
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
import tempfile
import time
from pathlib import Path

from kernel_lab.tools import family_bench as fb
from kernel_lab.tools import rel
from kernel_lab.tools import long_tail as lt
from mla_edu.files import check_in_file, check_out_dir, read_json, write_atomic
from mla_edu.kernels import schedule as sc
from mla_edu.kernels.workspace import triton_num_kv_splits
from mla_edu.paths import REPO_ROOT

#: The H200 run of piece_cap.patch (its markdown: the same name, .md).
RESULT = lt.AB
FAMILIES = ("giant", "bimodal", "lognormal_1.5")
BATCHES = (16, 64, 128, 256)
VARIANTS = ("base", "patched")


def problems(families=FAMILIES, batches=BATCHES, heads=fb.HEADS) -> list[tuple[str, int, list[int]]]:
    """(family, h_q, lengths) of each batch, in ``family_bench``'s order."""
    return [(fam, h, lens) for _, fam, h, lens in fb.problems(heads, batches, families, uniform=((), ()))]


def time_balanced(lens: list[int], heads: int, sms: int, rounds: int) -> dict:
    """One batch: the balanced schedule's CUDA-graph medians (us) of ``rounds`` rounds and its error against
    float64 (max |out - ref| / max |ref| over the first, last and longest request)."""
    from mla_edu.kernels import mla_decode
    from tools.kernel_bench import D_LAT, bench_workspace, f64_reference, graph_us, make_ragged_problem, rel_err

    q_nope, q_pe, cache, seq_lens, page_table = make_ragged_problem(lens, heads, fb.PAGE, seed=fb.SEED)
    b, width = page_table.shape
    scale = 1 / math.sqrt(192)
    parts = sc.num_parts(heads, sms, b, width)
    ws = bench_workspace(fb.PAGE * width, b, heads, sms, 1, sc.workspace_bytes(b, heads, D_LAT, parts))

    def call():
        return mla_decode(q_nope, q_pe, cache, seq_lens, page_table, ws, scale, -1, impl="triton", sm_count=sms,
                          schedule="balanced")

    check = sorted({0, b - 1, max(range(b), key=lambda i: lens[i])})
    err = rel_err(call()[check], f64_reference(q_nope, q_pe, cache, seq_lens, page_table, scale, check))
    return {"us": [graph_us(call) for _ in range(rounds)], "err": err}


def run_variant(variant: str, json_path: Path, rounds: int, families, batches, heads) -> None:
    """One process's part of the A/B: every batch, appended to ``json_path`` as one entry of its ``runs``."""
    import torch
    import triton

    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    import mla_edu

    entry = {"variant": variant, "package": str(Path(mla_edu.__file__).parent), "rows": []}
    t0 = time.time()
    for fam, h, lens in problems(families, batches, heads):
        entry["rows"].append({"family": fam, "heads": h, "batch": len(lens), **time_balanced(lens, h, sms, rounds)})
        torch.cuda.empty_cache()
        print(variant, fam, h, len(lens), entry["rows"][-1], flush=True)
    entry["seconds"] = round(time.time() - t0, 1)
    data = read_json(json_path, "partition A/B json")
    data["info"].update(gpu=props.name, sm_count=sms, torch=torch.__version__, triton=triton.__version__,
                        python=platform.python_version())
    data["runs"].append(entry)
    write_atomic(json_path, json.dumps(data))


def makespans_now(families, batches, heads, sms: int, schedule=sc) -> list[list]:
    """``[family, heads, batch, makespan]`` per batch: the balanced schedule's modelled makespan (page-times,
    ``makespans`` of ``schedule``, by default the module of the ``mla_edu`` this process imports)."""
    rows = []
    for fam, h, lens in problems(families, batches, heads):
        n_pages = max(-(-x // fb.PAGE) for x in lens)
        rule = triton_num_kv_splits(fb.PAGE * n_pages, len(lens), h, fb.PAGE, sms)
        rows.append([fam, h, len(lens), schedule.makespans(lens, fb.PAGE, h, sms, rule)[1]])
    return rows


def model_of_copy(root: Path, info: dict) -> list[list]:
    """``makespans_now`` by the package copy under ``root`` (a process whose working folder is ``root``, so that
    every module of the copy counts: a patch of ``workspace.py`` changes the head block and the parts)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "kernel_lab.tools.partition_ab", "--model", str(info["sm_count"]), "--families",
           ",".join(info["families"]), "--batches", ",".join(map(str, info["batches"])), "--heads",
           ",".join(map(str, info["heads"]))]
    return json.loads(subprocess.run(cmd, env=env, cwd=root, check=True, capture_output=True, text=True).stdout)


def modelled(data: dict, patch: Path) -> dict:
    """``(family, heads, batch) -> (base, patched)`` for a run's json that stored no model: the package's
    ``schedule.makespans`` and that of its ``schedule.py`` with ``patch`` applied (only that file's change counts)."""
    info = data["info"]
    args = (info["families"], info["batches"], info["heads"], info["sm_count"])
    return {(f, h, b): (base, patched) for (f, h, b, base), (*_, patched)
            in zip(makespans_now(*args), makespans_now(*args, schedule=lt.patched_schedule(patch)))}


def table(data: dict, patch: Path) -> list[dict]:
    """Per batch: base and patched medians over every round of their runs, 'base / patched' (median, min and max
    of the pairs' ratios of process medians), the modelled makespans (the run's ``info["model"]``, else computed
    with ``patch`` applied to the package's files now), the worst error."""
    stored = data["info"].get("model")
    model = {(f, h, b): (base, patched) for f, h, b, base, patched in stored} if stored else modelled(data, patch)
    by = {v: [r for r in data["runs"] if r["variant"] == v] for v in VARIANTS}
    pairs = min(len(by["base"]), len(by["patched"]))
    out = []
    for i, row in enumerate(by["base"][0]["rows"] if pairs else []):
        key = (row["family"], row["heads"], row["batch"])
        runs = {v: [r["rows"][i] for r in by[v][:pairs]] for v in VARIANTS}
        assert all((r["family"], r["heads"], r["batch"]) == key for v in VARIANTS for r in runs[v]), key
        med = {v: statistics.median(t for r in runs[v] for t in r["us"]) for v in VARIANTS}
        ratios = [statistics.median(b["us"]) / statistics.median(p["us"]) for b, p in zip(runs["base"],
                                                                                        runs["patched"])]
        out.append({"family": key[0], "heads": key[1], "batch": key[2], "base_us": med["base"],
                    "patched_us": med["patched"], "x": statistics.median(ratios), "x_min": min(ratios),
                    "x_max": max(ratios), "model": model[key], "changed": model[key][0] != model[key][1],
                    "err": max(r["err"] for v in VARIANTS for r in runs[v])})
    return out


def to_markdown(data: dict, patch: Path) -> str:
    info, rows = data["info"], table(data, patch)
    lines = [f"# The balanced schedule with and without `{rel(patch)}` ({info.get('gpu', '?')})", "",
             f"Command: `{info['command']}`; torch {info.get('torch')}, triton {info.get('triton')}, Python "
             f"{info.get('python')}. {len(data['runs'])} processes in the order "
             f"{', '.join(r['variant'] for r in data['runs'])}, {info['rounds']} rounds each.", "",
             *([info["note"], ""] if info.get("note") else []),
             "bf16, page 64, the balanced schedule only (`schedule=\"balanced\"`), median CUDA-graph replay "
             "(`kernel_bench.graph_us`). 'base' / 'patched' = the median over every round of that variant's "
             "processes; 'base / patched' = the median of the pairs' ratios of process medians [min-max] (above 1: "
             "the patch is faster). 'model' = the balanced schedule's modelled makespan in page-times "
             "(`schedule.makespans`), base -> patched. Where the patch changes the partition only, the batches whose "
             "model stays are the control (only noise differs); a patch that also changes stage 2 changes them too. "
             "err = the worst max |out - float64| / max |float64| of both variants (first, last and longest "
             "request).", ""]
    for changed, title in ((True, "Batches the patch changes"),
                           (False, "Batches whose modelled partition it leaves alone")):
        sel = [r for r in rows if r["changed"] == changed]
        if not sel:
            continue
        lines += [f"## {title}", "",
                  f"{len(sel)} batches, base / patched geomean "
                  f"{statistics.geometric_mean([r['x'] for r in sel]):.3f}, range "
                  f"{min(r['x'] for r in sel):.3f}-{max(r['x'] for r in sel):.3f}.", "",
                  "| family | h_q | B | model | base us | patched us | base / patched [min-max] | err |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in sel:
            lines.append(f"| {r['family']} | {r['heads']} | {r['batch']} | "
                         f"{r['model'][0]:.4g} -> {r['model'][1]:.4g} | "
                         f"{r['base_us']:.1f} | {r['patched_us']:.1f} | {r['x']:.3f} [{r['x_min']:.3f}-"
                         f"{r['x_max']:.3f}] | {r['err']:.1e} |")
        lines.append("")
    return "\n".join(lines)


def _write_md(json_path: Path, out_dir: Path, patch: Path) -> None:
    write_atomic(out_dir / "partition_ab.md", to_markdown(read_json(json_path, "partition A/B json"), patch))


def run(out_dir: Path, patch: Path, pairs: int, rounds: int, families, batches, heads, patched=None) -> Path:
    """The whole A/B: a patched copy of the package (``patched``: a folder holding one made already), then the
    processes, then the markdown."""
    json_path = out_dir / "partition_ab.json"
    info = {"command": "python -m kernel_lab.tools.partition_ab " + " ".join(sys.argv[1:]), "patch": rel(patch),
            "rounds": rounds, "families": list(families), "batches": list(batches), "heads": list(heads)}
    with tempfile.TemporaryDirectory() as tmp:
        if patched is None:
            lt.patched_copy(Path(tmp), patch, package=True)
        else:
            tmp = str(Path(patched).resolve())
        import torch

        # the model of both copies, kept with the run: the patch may not apply to a later package
        info["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
        base = makespans_now(families, batches, heads, info["sm_count"])
        info["model"] = [[*b, p[3]] for b, p in zip(base, model_of_copy(Path(tmp), info))]
        write_atomic(json_path, json.dumps({"info": info, "runs": []}))
        for variant in VARIANTS * pairs:
            # python -m puts its working folder first on the path: the patched copy's mla_edu comes before the
            # repository's, whose kernel_lab and tools the process finds through PYTHONPATH
            where = Path(tmp) if variant == "patched" else REPO_ROOT
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
            cmd = [sys.executable, "-m", "kernel_lab.tools.partition_ab", "--variant", variant, "--json",
                   str(json_path.resolve()), "--patch", str(patch.resolve()), "--rounds", str(rounds), "--families",
                   ",".join(families), "--batches", ",".join(map(str, batches)), "--heads", ",".join(map(str, heads))]
            subprocess.run(cmd, env=env, cwd=where, check=True)
            ran = Path(read_json(json_path, "partition A/B json")["runs"][-1]["package"])
            if ran != where / "mla_edu":
                raise RuntimeError(f"the {variant} process imported mla_edu from {ran}, expected {where / 'mla_edu'}")
            _write_md(json_path, out_dir, patch)
    return json_path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for partition_ab.json / .md")
    ap.add_argument("--patch", type=Path, default=lt.PATCH, help="a patch of mla_edu/kernels/{schedule,partition}.py")
    ap.add_argument("--pairs", type=int, default=2, help="pairs of processes (base, patched)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per batch and process")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--batches", type=fb._ints, default=BATCHES)
    ap.add_argument("--heads", type=fb._ints, default=fb.HEADS)
    ap.add_argument("--render", metavar="JSON", help="no GPU: write the markdown of a run's json into --out")
    ap.add_argument("--patched", metavar="DIR", help="a folder whose mla_edu has the patch applied already (made "
                    "with long_tail.patched_copy where git is; a machine without git)")
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one process of the A/B (run's)
    ap.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--model", type=int, metavar="SMS", help=argparse.SUPPRESS)  # model_of_copy's process
    args = ap.parse_args(argv)
    families = tuple(f for f in args.families.split(",") if f)
    for f in families:
        if f not in fb.FAMILIES:
            ap.error(f"--families: expected names of {list(fb.FAMILIES)}, got {f!r}")
    if args.model:  # before the checks of paths, which this process (in a package copy) does not read
        print(json.dumps(makespans_now(families, args.batches, args.heads, args.model)))
        return
    if args.pairs < 1 or args.rounds < 1:
        ap.error(f"--pairs and --rounds: expected at least 1, got {args.pairs} and {args.rounds}")
    try:
        check_in_file(args.patch, "--patch")
        out = check_out_dir(args.out, "--out")
        if args.patched and not (Path(args.patched) / "mla_edu" / "__init__.py").is_file():
            raise ValueError(f"--patched: expected a folder holding mla_edu/, got {args.patched}")
        if args.render:
            _write_md(Path(args.render), out, args.patch)
            return
    except ValueError as e:
        ap.error(str(e))
    if args.variant:
        run_variant(args.variant, args.json, args.rounds, families, args.batches, args.heads)
        return
    run(out, args.patch, args.pairs, args.rounds, families, args.batches, args.heads, args.patched)


if __name__ == "__main__":
    main()
