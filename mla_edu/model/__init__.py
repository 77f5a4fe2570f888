"""The tiny DeepSeek-style model, its recall task, its training, and the shipped weights.

    from mla_edu.model import load_pretrained, task
    model = load_pretrained()                      # TinyDeepseek, eval mode, checksum verified
    q = task.default_eval_set()[0]
    task.decode(model.generate(q.prompt_ids))      # e.g. "40"

- ``tiny``: ``TinyDeepseek`` and its config
- ``task``: the key-value recall task and its evaluation set
- ``pretrained``: the shipped weights, their manifest, ``load_pretrained``
- ``train``: ``python -m mla_edu.model.train``
"""

from mla_edu.model import task
from mla_edu.model.pretrained import (MANIFEST_FILE, VARIANTS, WEIGHTS_DIR, WEIGHTS_FILE, config_sha256,
                                      load_manifest, load_pretrained, sha256_file)
from mla_edu.model.tiny import TinyDeepseek, TinyDeepseekConfig

__all__ = ["MANIFEST_FILE", "TinyDeepseek", "TinyDeepseekConfig", "VARIANTS", "WEIGHTS_DIR", "WEIGHTS_FILE",
           "config_sha256", "load_manifest", "load_pretrained", "sha256_file", "task"]
