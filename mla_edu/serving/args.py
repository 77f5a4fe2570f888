"""Server arguments of the mini engine, named after SGLang's ``ServerArgs`` flags."""

from __future__ import annotations

from dataclasses import dataclass, field

from mla_edu.kernels.contract import MAX_SPLITS
from mla_edu.util import is_int

BACKENDS = ("cutlass_mla", "triton")
DEFECTS = ("width", "workspace", "stale")
ROW_ORDERS = ("append", "prepend")
# SGLang's merged fix (PR #6998, e58423b2b) fixed the width and the workspace, not the stale rows.
PRE_FIX = frozenset(DEFECTS)
MERGED_FIX = frozenset({"stale"})


def parse_defects(spec) -> frozenset:
    """``"width,workspace,stale"`` | ``"none"`` | iterable of names -> frozenset of defect names."""
    if spec is None:
        return PRE_FIX
    if isinstance(spec, str):
        spec = spec.strip()
        names = [] if spec in ("", "none") else [s.strip() for s in spec.split(",") if s.strip()]
    else:
        names = list(spec)
    bad = [n for n in names if n not in DEFECTS]
    if bad:
        raise ValueError(f"defects: expected names from {DEFECTS} or 'none', got {bad}")
    return frozenset(names)


@dataclass
class ServerArgs:
    """What the engine is launched with (``python -m sglang.launch_server`` style).

    ``defects`` applies to ``cutlass_mla`` only: the pre-fix code has all three;
    ``{"stale"}`` is SGLang's merged fix; ``none`` adds the poison fill.
    ``row_order``: where joining requests go in the running batch: ``append`` is SGLang's
    ``merge_batch`` (finished rows are filtered out in order, new requests go last);
    ``prepend`` puts them first.
    """

    attention_backend: str = "cutlass_mla"
    disable_cuda_graph: bool = False
    cuda_graph_bs: tuple = (64, 128)
    max_running_requests: int = 128
    context_length: int = 640
    defects: frozenset = field(default_factory=lambda: PRE_FIX)
    num_kv_splits: int = 1
    row_order: str = "append"
    kernel_impl: str | None = None  # None: "triton" on GPU, "torch" on CPU
    sm_count: int | None = None  # None: the GPU's, or 132 (an H200's) on CPU
    dtype: str = "float32"
    device: str | None = None
    max_total_pages: int | None = None  # KV pool size cap; None: whatever max_running_requests needs

    def __post_init__(self):
        if self.attention_backend not in BACKENDS:
            raise ValueError(f"attention_backend: expected one of {BACKENDS}, got {self.attention_backend!r}")
        self.defects = parse_defects(self.defects)
        splits = self.num_kv_splits
        if not is_int(splits) or not (splits == -1 or 1 <= splits <= MAX_SPLITS):
            raise ValueError(f"num_kv_splits: expected -1 (auto) or an int in [1, {MAX_SPLITS}] (the kernel "
                             f"contract's limit), got {splits!r}")
        if self.sm_count is not None and (not is_int(self.sm_count)
                                          or self.sm_count < 1):
            raise ValueError(f"sm_count: expected None (the GPU's) or an int >= 1, got {self.sm_count!r}")
        bs = tuple(int(b) for b in self.cuda_graph_bs)
        if not bs or any(b < 1 for b in bs):
            raise ValueError(f"cuda_graph_bs: expected positive batch sizes, got {self.cuda_graph_bs!r}")
        self.cuda_graph_bs = tuple(sorted(set(bs)))
        if not isinstance(self.max_running_requests, int) or self.max_running_requests < 1:
            raise ValueError(f"max_running_requests: expected an int >= 1, got {self.max_running_requests!r}")
        if self.context_length < 2:
            raise ValueError(f"context_length: expected >= 2, got {self.context_length}")
        if self.row_order not in ROW_ORDERS:
            raise ValueError(f"row_order: expected one of {ROW_ORDERS}, got {self.row_order!r}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype: expected float32, bfloat16 or float16, got {self.dtype!r}")
        if self.max_total_pages is not None and (not isinstance(self.max_total_pages, int) or self.max_total_pages < 2):
            raise ValueError(f"max_total_pages: expected an int >= 2 or None, got {self.max_total_pages!r}")
        if self.kernel_impl not in (None, "torch", "triton", "reference"):
            raise ValueError(f"kernel_impl: expected torch, triton or reference, got {self.kernel_impl!r}")
