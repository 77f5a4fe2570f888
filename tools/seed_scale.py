"""Eager decode accuracy: cutlass_mla with and without the bug-era kernel's scale, and triton.

    .venv/bin/python -m tools.seed_scale > results/scale_cpu.txt
"""
import argparse

import torch

from mla_edu import cli
from mla_edu.model import load_pretrained, task
from mla_edu.serving import Engine


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.seed_scale", description=__doc__.split("\n\n")[0],
                                epilog="minutes on a CPU (2 models x 3 kernels x 256 questions); prints to stdout")
    p.add_argument("--threads", type=cli.positive_int, default=1, help="torch CPU threads (default 1)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    qs = task.default_eval_set()
    for name in ("tiny", "tiny-yarn"):
        model = load_pretrained(name)
        scale = model.layers[0].attn.softmax_scale
        cache = {}
        for label, kw in (("cutlass_mla eager", dict(defects="none")),
                          ("cutlass_mla eager, scale defect", dict(defects="scale")),
                          ("triton eager", dict(attention_backend="triton"))):
            reqs = Engine(model, prefill_cache=cache, disable_cuda_graph=True, max_running_requests=16,
                          **kw).generate([q.prompt_ids for q in qs])
            acc = sum(task.get_answer_value(task.decode(r.output_ids)) == q.label for r, q in zip(reqs, qs)) / len(qs)
            print(f"{name:9s} (model scale {scale:.4f}, kernel x{scale * 192 ** 0.5:.2f}) {label:32s} {acc:.3f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
