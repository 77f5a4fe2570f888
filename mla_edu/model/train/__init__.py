"""Train the tiny DeepSeek-style model on key-value recall, on CPU.

    python -m mla_edu.model.train --out DIR [--force] [--steps N] [--seed S]     (the flags: __main__.py)

The training itself (curriculum, batches, loss, evaluation, the manifest): ``training.py``.
"""

from mla_edu.model.train.training import (CURRICULUM, answer_loss, check_finite, check_out, evaluate, lr_at,
                                          make_batch, parse_curriculum, parse_facts, run, save, stage_length,
                                          yarn_rope_scaling)

__all__ = ["CURRICULUM", "answer_loss", "check_finite", "check_out", "evaluate", "lr_at", "make_batch",
           "parse_curriculum", "parse_facts", "run", "save", "stage_length", "yarn_rope_scaling"]
