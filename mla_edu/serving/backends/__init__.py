"""Attention backends in SGLang's protocol, each registered by name (``base.register_backend``): ``cutlass_mla``
(pre-fix / fixed) and ``triton``. A new backend is one module and its import here (``docs/CONTRIBUTING.md``)."""

from mla_edu.serving.backends.base import (BACKEND_CLASSES, AttentionBackend, backend_class, backend_names,
                                           create_backend, known_defects, page_table_width, register_backend)
from mla_edu.serving.backends.cutlass_mla import BUG_ERA_SM_SCALE, POISON_PAGE, CutlassMLABackend
from mla_edu.serving.backends.triton import TritonBackend

__all__ = ["AttentionBackend", "BACKEND_CLASSES", "BUG_ERA_SM_SCALE", "CutlassMLABackend", "POISON_PAGE",
           "TritonBackend", "backend_class", "backend_names", "create_backend", "known_defects", "page_table_width",
           "register_backend"]
