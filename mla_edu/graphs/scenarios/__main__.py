"""``python -m mla_edu.graphs.scenarios``: every scenario's outcome as a table, optionally the checker's verdicts
(the library: ``mla_edu.graphs.scenarios``)."""

from __future__ import annotations

import argparse

import torch

from mla_edu import cli
from mla_edu.device import default_device
from mla_edu.graphs import scenarios
from mla_edu.graphs.scenarios import PROBLEMS, SCENARIOS, check_problem, format_table, run_all


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m mla_edu.graphs.scenarios",
                                 description=scenarios.__doc__.splitlines()[0])
    ap.add_argument("--mode", default="auto", choices=["auto", "cuda", "emulated"])
    ap.add_argument("--device", type=cli.device, default=None)
    ap.add_argument("--check", action="store_true", help="also run the checker on every problem")
    ap.add_argument("--schedules", type=cli.positive_int, default=3, help="checker: random schedules per problem")
    args = ap.parse_args(argv)
    if torch.cuda.is_available():
        print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__}")
    else:
        print(f"# CPU | torch {torch.__version__}")
    dev = torch.device(args.device) if args.device else default_device()
    names = [n for n in SCENARIOS if n != "sync_in_capture"]  # a refused CUDA capture goes last
    rows = run_all(dev, args.mode, names)
    checks = []
    if args.check:
        for name in [n for n in PROBLEMS if n != "sync_in_capture"] + ["sync_in_capture"]:
            if name == "sync_in_capture":
                rows += run_all(dev, args.mode, ["sync_in_capture"])
            reports = [check_problem(PROBLEMS[name](dev), seed=k, mode=args.mode) for k in range(args.schedules)]
            bad = next((r for r in reports if not r.ok), None)
            checks.append((name, name.endswith(":fixed") or name == "static_buffers",
                           "".join("." if r.ok else "F" for r in reports), (bad.hint or "")[:90] if bad else ""))
    else:
        rows += run_all(dev, args.mode, ["sync_in_capture"])
    print(format_table(rows))
    if checks:
        print(f"\nchecker, {args.schedules} random schedules per problem ('.' = safe, 'F' = flagged)")
        print("| problem | safe | verdicts | first hint |\n|---|---|---|---|")
        for c in checks:
            print("| " + " | ".join(map(str, c)) + " |")


if __name__ == "__main__":
    main()
