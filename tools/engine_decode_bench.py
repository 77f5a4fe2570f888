"""The mini engine's decode on a GPU, with and without the balanced schedule: ``python -m tools.engine_decode_bench``.

The shipped model, the triton backend with ``num_kv_splits=-1``, CUDA graphs (``cuda_graph_bs`` 64 and 128),
``dtype`` bf16, the first ``--requests`` questions of the eval set (prompts of 102-508 tokens: a ragged
batch), ``--new-tokens`` greedy tokens each. Three settings on the same engine arguments: "rule" (one split
count for every request, ``triton_num_kv_splits``, for every batch), "balanced" (the balanced schedule,
``kernels.schedule``, for every batch) and "auto" (the backend's own choice per batch,
``schedule.prefers_balanced``, a graph captured for each path). Wall time of ``generate`` (prefill included, the
same in all), best of ``--reps`` after a warm-up, the settings interleaved; the path each replay took; and whether
all answered the same tokens.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

import torch


def kernel_times(fn, top: int = 8) -> list:
    """``fn()`` once under ``torch.profiler``: its CUDA kernels' total time in ms and launch counts, the ``top``
    longest first, as ``[name, ms, launches]``."""
    import collections

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    total, count = collections.defaultdict(float), collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name[:60]] += e.device_time / 1e3
            count[e.name[:60]] += 1
    return [[k, round(v, 3), count[k]] for k, v in sorted(total.items(), key=lambda kv: -kv[1])[:top]]


def counted(choose, counter: collections.Counter):
    """``choose`` (a backend's ``choose_graph_variant``), counting each answer's schedule in ``counter``."""

    def wrapped(bs, seq_lens_cpu):
        variant = choose(bs, seq_lens_cpu)  # (width, schedule)
        counter[variant[1]] += 1
        return variant

    return wrapped


def run(requests: int = 128, new_tokens: int = 64, reps: int = 3, profile: bool = False) -> dict:
    from mla_edu.model import load_pretrained
    from mla_edu.model.task import default_eval_set
    from mla_edu.serving import Engine
    from mla_edu.serving.backends.base import backend_names, register_backend
    from mla_edu.serving.backends.triton import TritonBackend

    class OnePathBackend(TritonBackend):
        """The triton backend with one path, ``PATH`` ("splits": the split rule; "balanced": the schedule), for
        every batch, on the table's full width: one graph per batch size, replayed at every step."""

        PATH = None

        def choose_step(self, lens, heads):
            return self.width, self.PATH

        def graph_variants(self):
            return ((self.width, self.PATH),)

    backends = {"rule": "triton_rule", "balanced": "triton_balanced", "auto": "triton"}
    for name, path in (("triton_rule", "splits"), ("triton_balanced", "balanced")):
        if name not in backend_names():
            register_backend(name)(type(name, (OnePathBackend,), {"PATH": path}))
    model = load_pretrained(device="cuda")
    prompts = [q.prompt_ids for q in default_eval_set()[:requests]]
    out = {"gpu": torch.cuda.get_device_name(0), "requests": requests, "new_tokens": new_tokens,
           "order": "all engines built first (graphs captured), one warm-up generate each, then the settings "
                    "interleaved, each rep starting one setting later (an earlier run timed them one after the "
                    "other, and each setting ran slower than the one before it)"}
    engines = {name: Engine(model, attention_backend=backend, num_kv_splits=-1, dtype="bfloat16", defects="none",
                            max_running_requests=requests) for name, backend in backends.items()}
    picks = {name: collections.Counter() for name in engines}
    for name, eng in engines.items():  # count the path of every replay
        eng.runner.backend.choose_graph_variant = counted(eng.runner.backend.choose_graph_variant, picks[name])
    tokens, times = {}, {name: [] for name in engines}
    run_one = lambda eng: eng.generate(prompts, max_new_tokens=new_tokens, stop_token_ids=())  # noqa: E731
    for name, eng in engines.items():
        tokens[name] = [r.output_ids for r in run_one(eng)]  # warm-up
        picks[name].clear()
    names = list(engines)
    for rep in range(reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run_one(engines[name])
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    for name, eng in engines.items():
        out[name] = {"best_s": min(times[name]), "times_s": times[name],
                     "decode_steps": eng.stats["decode_steps"] // (reps + 1),  # a generate's
                     "graph_steps": eng.stats["graph_steps"] // (reps + 1),
                     "replays_by_path": {str(k): v // reps for k, v in picks[name].items()}}
        print(name, json.dumps(out[name]), flush=True)
        if profile:  # where one more generate's GPU time goes, kernel by kernel (after the counts above)
            out[f"{name}_kernels_ms"] = kernel_times(lambda eng=eng: run_one(eng))
            print(name, "kernels [name, ms, launches]:", json.dumps(out[f"{name}_kernels_ms"]), flush=True)
    out["same_tokens"] = tokens["rule"] == tokens["balanced"] == tokens["auto"]
    for name in ("balanced", "auto"):
        out[f"{name}_over_rule"] = out[name]["best_s"] / out["rule"]["best_s"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for engine_decode_bench.json")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="also the CUDA kernels of one more generate per setting "
                    "(torch.profiler): total ms and launches of the longest")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("python -m tools.engine_decode_bench needs a CUDA GPU")
    out = run(args.requests, args.new_tokens, args.reps, args.profile)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "engine_decode_bench.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
