"""Stage 1 of the split-KV decode: the registry of its kernels (``registry``) and the teaching kernel (``tl``,
imported where it runs: it needs Triton)."""

from mla_edu.kernels.stage1.registry import (DEFAULT_GLUON, KINDS, CompileSpec, Stage1Call, Stage1Impl,
                                             Stage1Kind, check_kind, impl, launch, running_kind)

__all__ = ["CompileSpec", "DEFAULT_GLUON", "KINDS", "Stage1Call", "Stage1Impl", "Stage1Kind", "check_kind",
           "impl", "launch", "running_kind"]
