"""Server arguments of the mini engine, named after SGLang's ``ServerArgs`` flags."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

import torch
from pydantic import Field

from mla_edu.kernels import IMPLS
from mla_edu.kernels.contract import MAX_SPLITS
from mla_edu.serving.backends import backend_class, known_defects, page_table_width
from mla_edu.serving.backends.cutlass_mla import PRE_FIX
from mla_edu.settings import check_fields
from mla_edu.util import is_int

#: The longest context: token positions and slots are int32 (``req_to_token``), with a page to spare.
MAX_CONTEXT_LENGTH = 2**31 - 1 - 128

ROW_ORDERS = ("append", "prepend")


STALE_REMOVED = ("'stale' is no longer a defect: SGLang's merged fix (e58423b2b) left stale entries in the "
                 "page table, harmless with the right row stride; use poison_fill=True (--poison-fill) to make "
                 "reads of them loud")


def parse_defects(spec) -> frozenset:
    """``"width,workspace"`` | ``"none"`` | iterable of names -> frozenset of defect names."""
    if spec is None:
        return PRE_FIX
    if isinstance(spec, str):
        spec = spec.strip()
        names = [] if spec in ("", "none") else [s.strip() for s in spec.split(",") if s.strip()]
    elif isinstance(spec, (set, frozenset, list, tuple)) and all(isinstance(n, str) for n in spec):
        names = list(spec)
    else:
        raise TypeError(f"defects: expected 'none', a comma-separated str or a set of names from {known_defects()}, "
                        f"got {spec!r}")
    if "stale" in names:
        raise ValueError(f"defects: {STALE_REMOVED}")
    bad = [n for n in names if n not in known_defects()]
    if bad:
        raise ValueError(f"defects: expected names from {known_defects()} or 'none', got {bad}")
    return frozenset(names)


@dataclass(frozen=True)
class ServerArgs:
    """What the engine is launched with (``python -m sglang.launch_server`` style).

    ``defects`` applies to ``cutlass_mla`` only: the pre-fix code has the two graph defects
    (``PRE_FIX``: ``width`` and ``workspace``); ``none`` (``MERGED_FIX``) is SGLang's merged fix.
    ``"scale"`` is the bug-era kernel contract (sgl-kernel 0.1.7): the decode kernel uses
    ``1/sqrt(128 + 64)`` whatever the model's scale, and one split (so ``num_kv_splits`` must be 1).
    ``SEED_PRE_FIX`` is the seed's pre-fix run: the two graph defects and ``scale``. Another backend runs
    with the default (left unapplied) or ``none``; a defect it cannot switch on, named, is refused.

    ``poison_fill`` (``cutlass_mla`` only; not in SGLang): a teaching instrument. Off (SGLang's
    behaviour, before and after the fix), the index buffer is never reset, so entries past a
    request's pages keep stale page ids. On, the buffer is filled with ``POISON_PAGE`` before every
    graph fill and the kernel runs checked, so a read of an unused entry gives NaN for that request
    (loud) instead of silently reading a stale page.

    ``context_length``: SGLang's ``--context-length``; the page table is
    ``page_table_width(context_length)`` columns wide (33 for 4096).
    ``dp_size`` / ``enable_dp_attention``: SGLang's ``--dp N --enable-dp-attention``: N attention
    ranks (``mla_edu.serving.dp``), each running at most ``max_running_requests // N`` requests
    (tp_worker.py at 7059ae16f, lines 119-127) while its ``req_to_token`` pool keeps
    ``max_running_requests`` rows (model_runner.py lines 915-917) and so its graphs keep the
    ``cuda_graph_bs`` sizes up to that.
    ``row_order``: where joining requests go in the running batch: ``append`` is SGLang's
    ``merge_batch`` (finished rows are filtered out in order, new requests go last);
    ``prepend`` puts them first.

    Frozen: the fields are checked once, in ``__post_init__``; change one with
    ``dataclasses.replace(args, field=value)``, which checks the new value.
    """

    # types and bounds checked by pydantic (``mla_edu.settings``); ``Any``: checked below by the field's own rule
    attention_backend: str = "cutlass_mla"
    disable_cuda_graph: bool = False
    cuda_graph_bs: Any = (64, 128)  # a list or tuple of ints, kept as a sorted tuple
    max_running_requests: Annotated[int, Field(ge=1)] = 128
    context_length: Annotated[int, Field(ge=2, le=MAX_CONTEXT_LENGTH)] = 640
    defects: Any = field(default_factory=lambda: PRE_FIX)  # parse_defects: a str or a set of names
    poison_fill: bool = False
    num_kv_splits: int = 1
    row_order: str = "append"
    kernel_impl: str | None = None  # None: "triton" on GPU, "torch" on CPU
    sm_count: int | None = None  # None: the GPU's, or 132 (an H200's) on CPU
    dtype: str = "float32"
    device: str | None = None  # a torch.device is kept as its str (what to_json writes)
    max_total_pages: Annotated[int, Field(ge=2)] | None = None  # KV pool size cap; None: as many as needed
    dp_size: Annotated[int, Field(ge=1)] = 1
    enable_dp_attention: bool = False

    @property
    def page_table_width(self) -> int:
        """W = ``(context_length + 128) // 128`` (SGLang's formula, see ``page_table_width``)."""
        return page_table_width(self.context_length)

    def to_json(self) -> str:
        """The fields as a JSON object (sets and tuples as lists), what ``from_json`` reads back: how a child
        process gets the settings (``case_study.accuracy``), as data rather than as command-line flags."""
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, default=sorted)  # default: the sets

    @classmethod
    def from_json(cls, text: str) -> ServerArgs:
        """``ServerArgs`` from ``to_json``'s text, validated as any other (TypeError for an unknown field)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"ServerArgs.from_json: expected a JSON object, got {type(data).__name__}")
        return cls(**data)

    @property
    def max_running_requests_per_rank(self) -> int:
        """Requests one scheduler runs: ``max_running_requests // dp_size`` under DP attention."""
        return self.max_running_requests // (self.dp_size if self.enable_dp_attention else 1)

    def __post_init__(self):
        if isinstance(self.device, torch.device):
            object.__setattr__(self, "device", str(self.device))  # frozen: __post_init__ sets its normal forms
        check_fields(self)
        if self.device is not None:
            try:
                torch.device(self.device)
            except RuntimeError:
                raise ValueError(f"device: expected None or a device such as cpu, cuda or cuda:0, got "
                                 f"{self.device!r}") from None
        backend = backend_class(self.attention_backend)
        object.__setattr__(self, "defects", parse_defects(self.defects))
        splits = self.num_kv_splits
        if not is_int(splits) or not (splits == -1 or 1 <= splits <= MAX_SPLITS):
            raise ValueError(f"num_kv_splits: expected -1 (auto) or an int in [1, {MAX_SPLITS}] (the kernel "
                             f"contract's limit), got {splits!r}")
        if self.sm_count is not None and (not is_int(self.sm_count)
                                          or self.sm_count < 1):
            raise ValueError(f"sm_count: expected None (the GPU's) or an int >= 1, got {self.sm_count!r}")
        bs = self.cuda_graph_bs
        if not isinstance(bs, (list, tuple)) or not all(is_int(b) for b in bs):
            raise TypeError(f"cuda_graph_bs: expected a list or tuple of int batch sizes, got {bs!r}")
        if not bs or any(b < 1 for b in bs):
            raise ValueError(f"cuda_graph_bs: expected positive batch sizes, got {self.cuda_graph_bs!r}")
        object.__setattr__(self, "cuda_graph_bs", tuple(sorted(set(bs))))
        if self.row_order not in ROW_ORDERS:
            raise ValueError(f"row_order: expected one of {ROW_ORDERS}, got {self.row_order!r}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype: expected float32, bfloat16 or float16, got {self.dtype!r}")
        if self.enable_dp_attention and self.dp_size < 2:
            # SGLang: "Please set a dp-size > 1" (server_args.py at 7059ae16f, line 352)
            raise ValueError(f"enable_dp_attention: expected dp_size > 1, got dp_size={self.dp_size}")
        if self.dp_size > 1 and not self.enable_dp_attention:
            raise ValueError(f"dp_size={self.dp_size}: the mini engine runs data parallelism only as DP attention; "
                             "pass enable_dp_attention=True")
        if self.max_running_requests_per_rank < 1:
            raise ValueError(f"max_running_requests={self.max_running_requests} over dp_size={self.dp_size} "
                             "leaves a rank no request; expected max_running_requests >= dp_size")
        unknown = sorted(self.defects - set(backend.switchable_defects))
        if unknown and self.defects != PRE_FIX:  # the default (cutlass_mla's pre-fix code) is left unapplied
            raise ValueError(f"defects: the {backend.name} backend switches on "
                             f"{', '.join(backend.switchable_defects) or 'none'}, got {unknown}; pass defects='none'")
        backend.check_args(self)  # what only this backend's class knows (poison fill, its defects' rules)
        if self.kernel_impl is not None and self.kernel_impl not in IMPLS:
            raise ValueError(f"kernel_impl: expected None or one of {tuple(IMPLS)}, got {self.kernel_impl!r}")
