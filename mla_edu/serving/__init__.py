"""A mini SGLang-style serving engine: paged latent cache, continuous batching, a CUDA-graph
runner, and attention backends in SGLang's protocol (``cutlass_mla`` pre-fix/fixed, ``triton``).

    from mla_edu.serving import Engine
    engine = Engine(model, attention_backend="cutlass_mla", defects="width,workspace,stale")
    reqs = engine.generate([prompt_ids, ...], max_new_tokens=3, stop_token_ids=(EOS,))
"""

from mla_edu.serving.args import BACKENDS, DEFECTS, MERGED_FIX, PRE_FIX, ROW_ORDERS, ServerArgs, parse_defects
from mla_edu.serving.batch import ForwardBatch
from mla_edu.serving.engine import Engine, Req, run_requests

__all__ = ["BACKENDS", "DEFECTS", "MERGED_FIX", "PRE_FIX", "ROW_ORDERS", "Engine", "ForwardBatch", "Req",
           "ServerArgs", "parse_defects", "run_requests"]
