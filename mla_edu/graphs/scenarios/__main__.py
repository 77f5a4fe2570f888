"""``python -m mla_edu.graphs.scenarios``: every scenario's outcome as a table, optionally the checker's verdicts
(the library: ``mla_edu.graphs.scenarios``)."""

from __future__ import annotations

import argparse

import torch

from mla_edu import cli
from mla_edu.device import default_device
from mla_edu.graphs import Graph, scenarios
from mla_edu.graphs.scenarios.registry import scenarios as all_scenarios
from mla_edu.graphs.scenarios.report import checker_row, format_checks, format_table
from mla_edu.graphs.scenarios.runner import run_all


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
    rows, checks = [], []
    refused = [s for s in all_scenarios() if s.refuses_capture]  # a refused CUDA capture goes last
    try:
        Graph(device=dev, mode=args.mode)  # a mode the device cannot run (--mode cuda without CUDA): a usage error
    except ValueError as e:
        ap.error(str(e))
    for group in ([s for s in all_scenarios() if not s.refuses_capture], refused):
        rows += run_all(dev, args.mode, group)
        if args.check:
            checks += [checker_row(s, dev, args.schedules, args.mode) for s in group]
    print(format_table(rows))
    if checks:
        print("\n" + format_checks(checks, args.schedules))


if __name__ == "__main__":
    main()
