"""A mini SGLang-style serving engine: paged latent cache, continuous batching, a CUDA-graph
runner, and attention backends in SGLang's protocol (``cutlass_mla`` pre-fix/fixed, ``triton``).

    from mla_edu.serving import Engine
    engine = Engine(model, attention_backend="cutlass_mla", defects="width,workspace")
    reqs = engine.generate([prompt_ids, ...], max_new_tokens=3, stop_token_ids=(EOS,))
"""

from mla_edu.serving.args import ROW_ORDERS, STALE_REMOVED, ServerArgs, parse_defects
from mla_edu.serving.backends import backend_class, backend_names, known_defects, page_table_width
from mla_edu.serving.backends.cutlass_mla import (ALL_DEFECTS, DEFECTS, KERNEL_DEFECTS, MERGED_FIX, PRE_FIX,
                                                  SEED_PRE_FIX)
from mla_edu.serving.batch import ForwardBatch
from mla_edu.serving.engine import Engine, Req
from mla_edu.serving.model_runner import SettingsError

from mla_edu.serving.dp import DPEngine, DPRank, run_dp_multiprocess

__all__ = ["ALL_DEFECTS", "DEFECTS", "KERNEL_DEFECTS", "MERGED_FIX", "PRE_FIX", "ROW_ORDERS",
           "SEED_PRE_FIX", "STALE_REMOVED", "DPEngine", "DPRank", "Engine", "ForwardBatch", "Req", "ServerArgs",
           "SettingsError",
           "backend_class", "backend_names", "known_defects", "page_table_width", "parse_defects",
           "run_dp_multiprocess"]
