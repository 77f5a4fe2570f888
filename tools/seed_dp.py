"""DP attention 8 x 16 rows, graphs 64/128, at the seed's context 4096 (W = 33), shipped model, 256 questions.

    .venv/bin/python -m tools.seed_dp > results/dp_cpu.txt

Each configuration's accuracy, global steps and the ranks' step counts (extend, decode, idle, graph
replays, decode steps run eagerly because a rank was prefilling or the sum exceeded the largest graph).
"""
import time

from mla_edu.case_study.seed import SEED_CONFIG
from mla_edu.model import load_pretrained, task
from mla_edu.serving import MERGED_FIX, PRE_FIX, SEED_PRE_FIX, DPEngine
from tools.seed_dp_multiprocess import accuracy, start


def main(argv=None) -> int:
    start("tools.seed_dp", __doc__, "several minutes and a few GB on a CPU", argv)
    qs = task.default_eval_set()
    model = load_pretrained()
    cache = {}
    for label, kw in (("cutlass_mla eager, scale defect", dict(disable_cuda_graph=True, defects="scale")),
                      ("cutlass_mla eager", dict(disable_cuda_graph=True, defects="none")),
                      ("pre-fix graphs (width,workspace)", dict(defects=PRE_FIX)),
                      ("pre-fix graphs + scale (bug-era kernel)", dict(defects=SEED_PRE_FIX)),
                      ("merged fix graphs (no defect)", dict(defects=MERGED_FIX)),
                      ("triton graphs", dict(attention_backend="triton"))):
        t0 = time.perf_counter()
        dp = DPEngine(model, prefill_cache=cache, **SEED_CONFIG, **kw)
        acc = accuracy(dp.generate([q.prompt_ids for q in qs]), qs)
        st = {k: sum(r.steps[k] for r in dp.ranks) for k in dp.ranks[0].steps}
        print(f"{label:42s} accuracy {acc:.3f}  steps {dp.global_steps}  rank-steps {st}  "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        del dp
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
