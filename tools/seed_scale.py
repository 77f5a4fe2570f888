"""Eager decode accuracy: cutlass_mla with and without the bug-era kernel's scale, and triton.

    .venv/bin/python -m tools.seed_scale > results/scale_cpu.txt
"""
from mla_edu.model import load_pretrained, task
from mla_edu.serving import Engine
from tools.seed_dp_multiprocess import accuracy, start


def main(argv=None) -> int:
    start("tools.seed_scale", __doc__, "minutes on a CPU (2 models x 3 kernels x 256 questions)", argv)
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
            acc = accuracy(reqs, qs)
            print(f"{name:9s} (model scale {scale:.4f}, kernel x{scale * 192 ** 0.5:.2f}) {label:32s} {acc:.3f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
