"""Attention backends in SGLang's protocol: ``cutlass_mla`` (pre-fix / fixed) and ``triton``."""

from mla_edu.serving.backends.base import AttentionBackend
from mla_edu.serving.backends.cutlass_mla import BUG_ERA_SM_SCALE, POISON_PAGE, CutlassMLABackend
from mla_edu.serving.backends.triton import TritonBackend

BACKEND_CLASSES = {"cutlass_mla": CutlassMLABackend, "triton": TritonBackend}


def create_backend(name: str, *args, defects=frozenset(), poison_fill: bool = False, **kw) -> AttentionBackend:
    """Build the backend named ``name`` (``--attention-backend``)."""
    if name not in BACKEND_CLASSES:
        raise ValueError(f"attention backend: expected one of {sorted(BACKEND_CLASSES)}, got {name!r}")
    if name == "cutlass_mla":
        return CutlassMLABackend(*args, defects=defects, poison_fill=poison_fill, **kw)
    return BACKEND_CLASSES[name](*args, **kw)


__all__ = ["AttentionBackend", "BUG_ERA_SM_SCALE", "CutlassMLABackend", "TritonBackend", "POISON_PAGE",
           "create_backend", "BACKEND_CLASSES"]
