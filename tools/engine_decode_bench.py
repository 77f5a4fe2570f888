"""The mini engine's decode on a GPU, before and after the balanced schedule: ``python -m tools.engine_decode_bench``.

The shipped model, the triton backend with ``num_kv_splits=-1``, CUDA graphs (``cuda_graph_bs`` 64 and 128),
``dtype`` bf16, the first ``--requests`` questions of the eval set (prompts of 100-508 tokens: a ragged
batch), ``--new-tokens`` greedy tokens each. Two settings on the same engine arguments: "balanced" (the
balanced schedule, ``kernels.schedule``, taken whatever the table's width) and "rule" (one split count for
every request, ``triton_num_kv_splits``). The engine's own page table holds 768 tokens (its context length is
640), below ``schedule.BALANCED_ABOVE_TOKENS``, so its triton backend takes the rule. Wall time of
``generate`` (prefill included, the same in both), best of ``--reps`` after a warm-up, and whether both
answered the same tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch


def run(requests: int = 128, new_tokens: int = 64, reps: int = 3) -> dict:
    from mla_edu.model import load_pretrained
    from mla_edu.model.task import default_eval_set
    from mla_edu.serving import Engine
    from mla_edu.serving.backends.base import backend_names, register_backend
    from mla_edu.serving.backends.triton import TritonBackend

    class TritonRuleBackend(TritonBackend):
        """The triton backend with one split count for every request."""

        def uses_balanced_schedule(self) -> bool:
            return False

    class TritonBalancedBackend(TritonBackend):
        """The triton backend with the balanced schedule for auto splits, whatever its table's width."""

        def uses_balanced_schedule(self) -> bool:
            return self.num_kv_splits == -1 and self.kernel_impl == "triton"

    for name, cls in (("triton_rule", TritonRuleBackend), ("triton_balanced", TritonBalancedBackend)):
        if name not in backend_names():
            register_backend(name)(cls)
    model = load_pretrained(device="cuda")
    prompts = [q.prompt_ids for q in default_eval_set()[:requests]]
    out = {"gpu": torch.cuda.get_device_name(0), "requests": requests, "new_tokens": new_tokens}
    tokens = {}
    for name in ("rule", "balanced"):
        eng = Engine(model, attention_backend=f"triton_{name}", num_kv_splits=-1,
                     dtype="bfloat16", defects="none", max_running_requests=requests)
        times = []
        for _ in range(reps + 1):  # the first captures the graphs
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            reqs = eng.generate(prompts, max_new_tokens=new_tokens, stop_token_ids=())
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        tokens[name] = [r.output_ids for r in reqs]
        out[name] = {"best_s": min(times[1:]), "times_s": times[1:], "decode_steps": eng.stats["decode_steps"],
                     "graph_steps": eng.stats["graph_steps"]}
        print(name, json.dumps(out[name]), flush=True)
    out["same_tokens"] = tokens["rule"] == tokens["balanced"]
    out["balanced_over_rule"] = out["balanced"]["best_s"] / out["rule"]["best_s"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for engine_decode_bench.json")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("python -m tools.engine_decode_bench needs a CUDA GPU")
    out = run(args.requests, args.new_tokens, args.reps)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "engine_decode_bench.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
