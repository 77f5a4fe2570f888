"""Versions of the seesaw stage 1 timed in one process, on a Hopper GPU:
``python -m kernel_lab.tools.stage1_ab OLD.py ...``.

``OLD.py``: an earlier ``mla_edu/kernels/split_kv_seesaw.py`` (``git show REV:mla_edu/kernels/split_kv_seesaw.py >
OLD.py``), against the working tree's ("new"); with several, each. For each shape of ``SHAPES`` (h_q=128,
page 64, bf16; uniform or seeded ragged lengths) and each path the triton backend has (the split rule, the
balanced schedule): each old version's outputs compared with the new one's bit for bit (a change in how bytes
move must not change the arithmetic), then each version timed twice by ``kernel_bench.graph_us``, the order
reversed the second time, the best of the two kept; FlashMLA beside where it is installed. One line per shape;
``x``: that version's time / the new one's. ``--aa``: the working tree's file loaded a second time, as version "aa",
timed first: its ``x`` is how far apart the same code reads in this run, at each shape (``docs/kernel_essay.md``),
the margin an old version's ``x`` must clear.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import pathlib
import re
import sys

SHAPES = [("u", 16, 1024), ("u", 64, 1024), ("u", 64, 4096), ("u", 128, 1024),
          ("r", 16, 2048), ("r", 64, 1024), ("r", 64, 2048), ("r", 128, 1024), ("r", 128, 2048)]
HEADS = 128


def load_old(path: str, name: str):
    """The module at ``path``, under a name of its own (its kernels compile beside the current ones)."""
    spec = importlib.util.spec_from_file_location(f"mla_edu.kernels.split_kv_seesaw_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def as_kind(mod):
    """The registry entry (``kernels.stage1``) that runs ``mod`` as kind "seesaw": its module under its own name in
    ``sys.modules``, and its ``STAGE1`` (an earlier file without one gets one from its own ``applies`` and
    ``launch``)."""
    from mla_edu.kernels import split_kv_wgmma as wg
    from mla_edu.kernels.stage1 import Stage1Impl, Stage1Kind

    sys.modules[mod.__name__] = mod
    if not hasattr(mod, "STAGE1"):
        def launch(kind, config, c):
            mod.launch(c.q_nope, c.q_pe, c.cache, c.seq_lens, c.table_flat, c.o_acc, c.lse_acc, c.out, c.sm_scale,
                       c.row_stride, c.max_pages, c.num_splits, c.final, c.num_parts)

        mod.STAGE1 = Stage1Impl(applies=lambda kind, block_h, cache: mod.applies(block_h, cache),
                                launch_config=wg.STAGE1.launch_config, launch=launch)
    return Stage1Kind(mod.__name__, gluon=True, fallback="tma")


def run(old_paths: list[str], progress: bool = False, aa: bool = False) -> None:
    import torch

    from mla_edu.kernels import peers
    from mla_edu.kernels import schedule as sc
    from mla_edu.kernels import split_kv_seesaw as new
    from mla_edu.kernels import stage1
    from tools.kernel_bench import backend_calls, graph_us

    if not old_paths and not aa:
        raise ValueError("nothing to time against the working tree's kernel: name an old file, or aa=True")
    names = [pathlib.Path(p).stem for p in old_paths]
    if len(set(names)) < len(names) or "new" in names or (aa and "aa" in names):
        raise ValueError(f"the old versions need distinct file names other than new.py{' and aa.py' * aa}, got "
                         f"{old_paths}")
    if aa:  # the working tree's kernel under a second name: the same code, compiled and timed as an old version
        names, old_paths = ["aa"] + names, [new.__file__] + list(old_paths)
    versions = {**{n: load_old(p, n) for n, p in zip(names, old_paths)}, "new": new}
    kept = stage1.KINDS["seesaw"]
    entries = {n: as_kind(m) for n, m in versions.items() if n != "new"} | {"new": kept}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flash_mla, why = peers.load_flash_mla()
    print("FlashMLA:", why or "installed", flush=True)
    scale = 1 / math.sqrt(192)
    for kind, b, size in SHAPES:
        lens = sc.lognormal_lengths(b, size, 0) if kind == "r" else [size] * b
        (q_nope, q_pe, cache, seq_lens, table), rule, parts, calls = backend_calls(lens, HEADS, sms, scale)
        text = []
        try:
            for path, fn in calls.items():
                outs, times = {}, {k: [] for k in versions}
                for rep in range(2):
                    for name in (list(versions) if rep == 0 else list(versions)[::-1]):
                        if progress:  # where a hung kernel hangs: the last of these lines
                            print(f"  {kind} B{b} {size} {path} {name}, rep {rep}", file=sys.stderr, flush=True)
                        stage1.KINDS["seesaw"] = entries[name]  # this run's "seesaw": the version
                        outs[name] = fn().clone()
                        times[name].append(graph_us(fn))
                best = {k: min(v) for k, v in times.items()}
                same = {n: torch.equal(outs[n], outs["new"]) for n in names}
                old = " ".join(f"{n} {best[n]:.1f} ({best[n] / best['new']:.3f}x, same={same[n]})" for n in names)
                text.append(f"{path}: {old} new {best['new']:.1f}")
        finally:
            stage1.KINDS["seesaw"] = kept
        fm = (graph_us(peers.FlashMLA(flash_mla, q_nope, q_pe, cache, seq_lens, table, scale).run) if flash_mla
              else float("nan"))
        print(f"{kind} B{b} {size} h{HEADS} rule{rule} parts{parts}: {'  '.join(text)}  FlashMLA {fm:.1f}",
              flush=True)


def _entries(text: str):
    """(shape, path, version, us, x) for each time in this tool's output: x is that version's time over the new
    one's (None for "new" itself); FlashMLA's as path "FlashMLA", version "FlashMLA", x None."""
    for line in text.splitlines():
        head = re.match(r"([ur] B\d+ \d+) h\d+ rule\d+ parts\d+: (.*)", line)
        if not head:
            continue
        for path, body in re.findall(r"(rule|balanced): (.*?)(?= balanced: | FlashMLA)", head[2] + " FlashMLA"):
            for version, us, x in re.findall(r"(\w+) ([\d.]+)(?: \(([\d.]+)x, same=\w+\))?", body):
                yield head[1], path, version, float(us), float(x) if x else None
        peer = re.search(r"FlashMLA ([\d.]+|nan)$", head[2])
        if peer:
            yield head[1], "FlashMLA", "FlashMLA", float(peer[1]), None


def parse(text: str) -> dict:
    """``{(shape, path, version): x}`` from this tool's output (``x``: that version's time / the new one's; shape as
    printed, e.g. ``"r B64 2048"``; path "rule" or "balanced")."""
    return {(shape, path, v): x for shape, path, v, _, x in _entries(text) if x is not None}


def times(text: str) -> dict:
    """``{(shape, path, version): us}`` from this tool's output, "new" and FlashMLA's (path "FlashMLA") too."""
    return {(shape, path, v): us for shape, path, v, us, _ in _entries(text)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", nargs="*", help="earlier split_kv_seesaw.py files, distinct names")
    ap.add_argument("--progress", action="store_true", help="to stderr, each version before it runs (a kernel that "
                    "never returns is the last one named)")
    ap.add_argument("--aa", action="store_true", help="the working tree's file again, as version 'aa' (same code)")
    args = ap.parse_args(argv)
    if not args.old and not args.aa:
        ap.error("name at least one earlier split_kv_seesaw.py, or --aa")
    run(args.old, args.progress, args.aa)


if __name__ == "__main__":
    main()
