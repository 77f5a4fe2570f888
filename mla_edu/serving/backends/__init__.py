"""Attention backends in SGLang's protocol, each registered by name (``base.register_backend``): ``cutlass_mla``
(pre-fix / fixed) and ``triton``. A new backend is one module and its import here (``docs/CONTRIBUTING.md``)."""

from mla_edu.serving.backends.base import (BACKEND_CLASSES, AttentionBackend, backend_class, backend_names,
                                           known_defects, page_table_width, register_backend)
from mla_edu.serving.backends.cutlass_mla import BUG_ERA_SM_SCALE, POISON_PAGE, CutlassMLABackend
from mla_edu.serving.backends.triton import TritonBackend


def create_backend(name: str, *args, defects=frozenset(), **kw) -> AttentionBackend:
    """Build the backend registered as ``name`` (``--attention-backend``) with the ``defects`` it applies."""
    cls = backend_class(name)
    return cls(*args, defects=cls.active_defects(defects), **kw)


__all__ = ["AttentionBackend", "BACKEND_CLASSES", "BUG_ERA_SM_SCALE", "CutlassMLABackend", "POISON_PAGE",
           "TritonBackend", "backend_class", "backend_names", "create_backend", "known_defects", "page_table_width",
           "register_backend"]
