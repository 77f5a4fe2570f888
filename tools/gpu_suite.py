"""The whole suite on a GPU machine with its own Python (``make test-gpu``; ``make gpu-wheels`` first, where pip works).

The H200 this project runs on has Python 3.12 with torch and triton preinstalled and no network. So:

- ``python -m tools.gpu_suite wheels``, here: the test stack pinned in ``requirements/cpu.txt`` (``ROOTS`` and every
  package they need, by the lock's ``# via`` lines), as Python 3.12 manylinux x86_64 wheels in ``.whl/``. Never the
  accelerator stack or numpy (``NOT_CARRIED``): the machine's compiled packages were built against its own.
- ``python -m tools.gpu_suite run [unit] [nbval]``, there: installs ``.whl/`` into ``/tmp/site``, then runs every
  unit test, and every notebook under ``--nbval-lax``, each in ONE pytest process (no xdist: the tests share one
  GPU), with the carried stack first on the path and the lock check off (``MLA_EDU_UNLOCKED=1``: the machine's
  torch is not the lock's). Each part leaves ``build/gpu_suite/<part>.xml`` (junit), ``.log`` and ``.json``
  (command, seconds, exit status, versions), then the report is written from every part found there.
- ``python -m tools.gpu_suite report``: ``results/gpu_suite_h200.md`` from ``build/gpu_suite/`` (also after the
  parts ran in separate calls, or elsewhere): the commands, the versions of Python, torch, triton and the GPU,
  passed / failed / errors / skipped per part, the skips grouped by reason, every failure, and the time.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "cpu.txt"
WHEELS, SITE, RUNS = ROOT / ".whl", Path("/tmp/site"), ROOT / "build" / "gpu_suite"
REPORT = ROOT / "results" / "gpu_suite_h200.md"
# The dev extra but what the GPU suite does not run (the lab UI, the linter, xdist), nbclient (tests/test_faults_*
# run notebooks with it), ipywidgets (the panel) and pydantic (the settings): the runtime dependencies that the
# H200's image lacks.
ROOTS = ("pytest", "hypothesis", "nbval", "nbclient", "jupytext", "ipykernel", "colorspacious", "ipywidgets",
         "pydantic")
NOT_CARRIED = ("torch", "triton", "numpy", "nvidia-*")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
PARTS = {  # pytest's arguments for each part; plugins named, so that the machine's own pytest plugins stay out
    "unit": ["-p", "_hypothesis_pytestplugin", "tests"],
    "nbval": ["-p", "nbval.plugin", "--nbval-lax", *sorted(f"notebooks/{p.name}" for p in
                                                           (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))],
}


def lock_graph(text: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """A uv/pip-compile lock's ``{name: version}`` and ``{name: [what needs it]}`` (its ``# via`` lines), names
    lower-case."""
    pins, via, name = {}, {}, None
    for line in text.splitlines():
        if m := re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line):
            name = m.group(1).lower()
            pins[name], via[name] = m.group(2), []
        elif name and (m := re.match(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9_.\-]+)\s*(?:\(|$)", line)):
            if m.group(1) != "via":
                via[name].append(m.group(1).lower())
    return pins, via


def carried(text: str, roots=ROOTS, not_carried=NOT_CARRIED) -> dict[str, str]:
    """``{name: version}``: ``roots`` and every package the lock says one of them needs, less ``not_carried``
    (fnmatch patterns) and what a package of those alone needs."""
    pins, via = lock_graph(text)
    missing = [r for r in roots if r not in pins]
    if missing:
        raise ValueError(f"{missing} not pinned in the lock (expected each of {list(roots)})")
    keep = set(roots)
    while grown := {p for p, needs in via.items() if p not in keep and keep.intersection(needs)
                    and not any(fnmatch.fnmatch(p, pat) for pat in not_carried)}:
        keep |= grown
    return {p: pins[p] for p in sorted(keep)}


def download(pins: dict[str, str], dest: Path = WHEELS) -> list[list[str]]:
    """pip's commands that fetch each pin as a cp312 manylinux x86_64 (or pure-Python) wheel into ``dest``."""
    base = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
            "3.12", "--implementation", "cp", *(x for p in PLATFORMS for x in ("--platform", p)), "-d", str(dest)]
    return [base + [f"{name}=={version}"] for name, version in pins.items()]


def wheels(args) -> int:
    pins = carried(LOCK.read_text())
    args.dest.mkdir(exist_ok=True)
    stale = [w for w in args.dest.glob("*.whl") if _wheel_name(w) not in pins or _wheel_version(w) != pins[
        _wheel_name(w)]]
    for w in stale:  # two versions of one package stop the install there
        w.unlink()
    for cmd in download(pins, args.dest):
        print(" ".join(cmd[-1:]), flush=True)
        if not args.dry_run:
            subprocess.run(cmd, check=True)
    if not args.dry_run:
        got = {_wheel_name(w) for w in args.dest.glob("*.whl")}
        if got != set(pins):
            raise SystemExit(f"{args.dest}: wheels of {sorted(got)}, expected {sorted(pins)}")
        size = sum(w.stat().st_size for w in args.dest.glob("*.whl")) / 2 ** 20
        print(f"{len(pins)} wheels, {size:.1f} MiB in {args.dest}")
    return 0


def _wheel_name(path: Path) -> str:
    return path.name.split("-")[0].lower().replace("_", "-")


def _wheel_version(path: Path) -> str:
    return path.name.split("-")[1]


def versions() -> dict[str, str]:
    """Python, torch (and its CUDA), triton and the GPU of this machine."""
    import torch

    out = {"python": platform.python_version(), "torch": f"{torch.__version__} (CUDA {torch.version.cuda})"}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = "not installed"
    out["gpu"] = (f"{torch.cuda.get_device_name(0)} (sm{''.join(map(str, torch.cuda.get_device_capability(0)))}), "
                  f"{torch.cuda.device_count()} visible" if torch.cuda.is_available() else "none")
    return out


def run(args) -> int:
    """Installs the carried wheels, runs each part in its own pytest process, then writes the report."""
    whl = sorted(args.wheels.glob("*.whl"))
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--no-cache-dir", "--upgrade", "--target", str(args.site), *map(str, whl)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(args.site), str(ROOT)]), "MLA_EDU_UNLOCKED": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONUNBUFFERED": "1"}
    args.runs.mkdir(parents=True, exist_ok=True)
    if not whl:
        print(f"no wheels in {args.wheels}: the machine's own packages only (make gpu-wheels carries the lock's)")
    elif args.dry_run:
        print(" ".join(install[:12]), f"... ({len(whl)} wheels)")
    else:
        subprocess.run(install, check=True)
    status = 0
    for part in args.parts or list(PARTS):
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={args.runs / (part + '.xml')}", *PARTS[part]]
        shown = "python3 -m pytest " + " ".join(a for a in cmd[3:] if not a.startswith("--junitxml"))
        if len(shown) > 300:
            shown = shown[:shown.index(" notebooks/")] + " notebooks/[0-9][0-9]_*.ipynb"
        print(f"== {part}: {shown}", flush=True)
        if args.dry_run:
            continue
        t0 = time.monotonic()
        # line-buffered: a run cut short (a device's time running out) leaves every line it printed in its log
        with open(args.runs / f"{part}.log", "w", buffering=1) as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                log.write(line)
            rc = proc.wait()
        meta = {"part": part, "command": shown, "seconds": round(time.monotonic() - t0, 1), "exit_status": rc,
                "versions": versions(), "carried": [w.name for w in whl],
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        (args.runs / f"{part}.json").write_text(json.dumps(meta, indent=1) + "\n")
        status = status or rc
    if not args.dry_run:
        report(argparse.Namespace(runs=args.runs, out=args.out, commit=args.commit))
    return status


# ---- the report ----------------------------------------------------------------------------------------------
def junit_counts(xml_text: str) -> dict:
    """pytest's junit xml: ``{"passed", "failed", "errors", "skipped": n, "skips": Counter(reason),
    "failures": [(test id, first line of the message)]}``."""
    root = ET.fromstring(xml_text)
    out = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "skips": Counter(), "failures": []}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag: child for child in case if child.tag in ("failure", "error", "skipped")}
        if "failure" in kinds or "error" in kinds:
            kind = "failure" if "failure" in kinds else "error"
            out["failed" if kind == "failure" else "errors"] += 1
            message = (kinds[kind].get("message") or kinds[kind].text or "").strip().splitlines()
            out["failures"].append((name, (message[0] if message else "")[:200]))
        elif "skipped" in kinds:
            out["skipped"] += 1
            reason = kinds["skipped"].get("message") or ""
            out["skips"][re.sub(r"^(Skipped|SKIP):\s*", "", reason).strip()[:200] or "(no reason given)"] += 1
        else:
            out["passed"] += 1
    return out


def to_markdown(parts: list[dict], commit: str | None) -> str:
    """The report of each part's ``.json`` (plus its junit counts under ``"counts"``)."""
    if not parts:
        raise ValueError("no part ran: expected build/gpu_suite/<unit|nbval>.json and .xml (run ... gpu_suite run)")
    v = parts[0]["versions"]
    lines = ["# The whole suite on the GPU machine, one pytest process per part", "",
             "Written by `python -m tools.gpu_suite` (`make test-gpu`), from the repository root"
             + (f" at `{commit}`" if commit else "") + f", {parts[0]['date']}. Python {v['python']}, torch "
             f"{v['torch']}, triton {v['triton']}, GPU: {v['gpu']}. The test stack (pytest, nbval, ...) is the lock's,"
             f" carried as {len(parts[0]['carried'])} wheels into /tmp/site (`make gpu-wheels`); `MLA_EDU_UNLOCKED=1`"
             " (the machine's torch is not the lock's); the machine's own pytest plugins are not loaded.", "",
             "| part | command | passed | failed | errors | skipped | time | exit status |",
             "|---|---|---|---|---|---|---|---|"]
    for p in parts:
        c = p["counts"]
        lines.append(f"| {p['part']} | `{p['command']}` | {c['passed']} | {c['failed']} | {c['errors']} | "
                     f"{c['skipped']} | {p['seconds']:.0f} s | {p['exit_status']} |")
    total = sum(p["seconds"] for p in parts)
    lines += ["", f"In all: {sum(p['counts']['passed'] for p in parts)} passed, "
              f"{sum(p['counts']['failed'] for p in parts)} failed, {sum(p['counts']['errors'] for p in parts)} "
              f"errors, {sum(p['counts']['skipped'] for p in parts)} skipped in {total / 60:.1f} min (the parts' times "
              "added)."]
    for p in parts:
        c = p["counts"]
        if c["failures"]:
            lines += ["", f"## {p['part']}: failed and errors", ""]
            lines += [f"- `{name}`: {message}" for name, message in c["failures"]]
        if c["skips"]:
            lines += ["", f"## {p['part']}: skipped, by reason", "", "| tests | reason |", "|---|---|"]
            lines += [f"| {n} | {reason.replace('|', '/')} |" for reason, n in
                      sorted(c["skips"].items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines) + "\n"


def report(args) -> int:
    parts = []
    for part in PARTS:
        meta, xml = args.runs / f"{part}.json", args.runs / f"{part}.xml"
        if meta.is_file() and xml.is_file():
            parts.append({**json.loads(meta.read_text()), "counts": junit_counts(xml.read_text())})
    args.out.write_text(to_markdown(parts, args.commit))
    print(f"wrote {args.out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    w = sub.add_parser("wheels", help="download the carried wheels (here, where pip reaches PyPI)")
    w.add_argument("--dest", type=Path, default=WHEELS)
    w.add_argument("--dry-run", action="store_true", help="print what would be downloaded")
    r = sub.add_parser("run", help="install the wheels and run the parts (on the GPU machine)")
    r.add_argument("parts", nargs="*", help=f"of {list(PARTS)} (default: all, in this order)")
    r.add_argument("--wheels", type=Path, default=WHEELS)
    r.add_argument("--site", type=Path, default=SITE)
    r.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    for p in (r, sub.add_parser("report", help="write the report from build/gpu_suite/")):
        p.add_argument("--runs", type=Path, default=RUNS)
        p.add_argument("--out", type=Path, default=REPORT)
        p.add_argument("--commit", default=os.environ.get("COMMIT") or None, help="the commit that ran")
    args = ap.parse_args(argv)
    if args.verb == "run" and set(args.parts) - set(PARTS):
        ap.error(f"parts must be of {list(PARTS)}, got {args.parts}")
    return {"wheels": wheels, "run": run, "report": report}[args.verb](args)


if __name__ == "__main__":
    sys.exit(main())
