"""The laptops' locks install on their platforms (``make check-platforms``; needs the network).

For macOS on Apple silicon and Windows, three things a Linux machine can check:

1. ``pip install --dry-run --no-deps --only-binary=:all: --platform P`` of the platform's lock and this package
   (what ``make`` installs there) finds a wheel for every pin. ``--no-deps`` because pip evaluates the
   dependencies' environment markers for the machine it runs on, not for ``--platform``: without it, this Linux
   machine would ask for Triton and torch's CUDA libraries on a Mac.
2. ``uv pip install --dry-run --python-platform`` of the lock and this package with the dev, lab and book extras
   (not the ``gpu`` extra, sgl-kernel) resolves with that platform's markers, to exactly the lock's pins.
3. On an Intel Mac the newest torch pip finds is older than the lock's (docs/setup.md says what such a Mac
   gets instead).

    python -m tools.check_platforms [--uv .venv-uv/bin/uv]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.11"  # the locks' (Makefile LOCK_ARGS)
EXTRAS = "dev,lab,book"  # what a workshop attendee installs: not gpu (sgl-kernel)
#: lock -> (pip's platform tag, uv's --python-platform)
PLATFORMS = {
    "macos-arm64": ("macosx_14_0_arm64", "aarch64-apple-darwin"),
    "windows-amd64": ("win_amd64", "x86_64-pc-windows-msvc"),
}
INTEL_MAC = "macosx_14_0_x86_64"
MACOS_TARGET = "14.0"  # uv's macOS version for --python-platform (torch 2.13's wheels are macosx_14_0)
_PIN = re.compile(r"^([A-Za-z0-9][\w.\-]*)==([^\s;#]+)", flags=re.M)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lock: Path) -> dict[str, str]:
    """``{normalized name: version}`` of a lock's ``name==version`` lines."""
    pins = {normalize(m[1]): m[2] for m in _PIN.finditer(lock.read_text())}
    if not pins:
        raise ValueError(f"{lock}: expected 'name==version' lines, found none")
    return pins


def _run(cmd: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"FAILED ({proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc


def _pip_dry_run(tag: str, *requirements: str) -> list[dict]:
    """pip's report (``install`` entries) of a binary-only dry run for platform ``tag``."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
              "--target", str(Path(tmp) / "target"), "--only-binary=:all:", "--platform", tag,
              "--python-version", PYTHON_VERSION, "--implementation", "cp", "--abi", "cp311",
              "--disable-pip-version-check", "--quiet", "--report", str(report), *requirements])
        return json.loads(report.read_text())["install"]


def check_wheels(lock: str, tag: str) -> int:
    """Every pin of ``requirements/<lock>.txt`` and this package: one wheel for ``tag`` (or pure Python)."""
    pins = read_pins(ROOT / "requirements" / f"{lock}.txt")
    installs = _pip_dry_run(tag, "-r", f"requirements/{lock}.txt", ".")
    got = {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    expected = {**pins, "mla-edu": got.get("mla-edu")}
    if got != expected:
        differ = sorted(set(got.items()) ^ set(expected.items()))
        raise SystemExit(f"{lock}: pip would install other versions than the lock's: {differ}")
    for i in installs:  # pip picked each among the wheels its tags allow for --platform
        name, url = normalize(i["metadata"]["name"]), i["download_info"]["url"]
        if name != "mla-edu" and not url.endswith(".whl"):
            raise SystemExit(f"{lock}: {name} comes from {url}, not a wheel")
    print(f"{lock}: pip --only-binary=:all: --platform {tag}: a wheel for each of the {len(pins)} pins, "
          f"and mla-edu {got['mla-edu']}")
    return len(pins)


def check_resolution(lock: str, uv_platform: str, uv: str) -> None:
    """uv resolves the lock and ``.[dev,lab,book]`` with the platform's markers to exactly the lock's pins."""
    pins = read_pins(ROOT / "requirements" / f"{lock}.txt")
    with tempfile.TemporaryDirectory() as tmp:
        proc = _run([uv, "pip", "install", "--no-config", "--dry-run", "--target", tmp, "--python-platform",
                     uv_platform, "--python-version", PYTHON_VERSION, "--only-binary", ":all:",
                     "-r", f"requirements/{lock}.txt", f".[{EXTRAS}]"], env={"MACOSX_DEPLOYMENT_TARGET": MACOS_TARGET})
    planned = {normalize(m[1]): m[2] for m in re.finditer(r"^ \+ ([\w.\-]+)==(\S+)", proc.stdout + proc.stderr,
                                                            flags=re.M)}
    planned = {n: v for n, v in planned.items() if n != "mla-edu"}
    if planned != pins:
        differ = sorted(set(planned.items()) ^ set(pins.items()))
        raise SystemExit(f"{lock}: uv resolves .[{EXTRAS}] for {uv_platform} to other pins than the lock: {differ}")
    print(f"{lock}: uv resolves .[{EXTRAS}] for {uv_platform} to the lock's {len(pins)} pins")


def intel_mac_torch() -> str:
    """The newest torch that pip finds for an Intel Mac."""
    (install,) = _pip_dry_run(INTEL_MAC, "torch")
    return install["metadata"]["version"]


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.match(r"\d+(?:\.\d+)*", version)[0].split("."))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uv", default=str(ROOT / ".venv-uv" / "bin" / "uv"), help="the uv of make lock")
    args = parser.parse_args(argv)
    for lock, (tag, uv_platform) in PLATFORMS.items():
        check_wheels(lock, tag)
        check_resolution(lock, uv_platform, args.uv)
    locked = read_pins(ROOT / "requirements" / "cpu.txt")["torch"].split("+")[0]
    newest = intel_mac_torch()
    if _release(newest) >= _release(locked):
        raise SystemExit(f"an Intel Mac now gets torch {newest} (the lock's is {locked}): add a lock for it "
                         "and update docs/setup.md")
    print(f"Intel Mac ({INTEL_MAC}): newest torch {newest}, older than the lock's {locked}: no lock (docs/setup.md)")


if __name__ == "__main__":
    main()
