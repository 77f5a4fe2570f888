"""SGLang's attention-backend protocol (``python/sglang/srt/layers/attention/base_attn_backend.py``) and the
registry of backends.

The engine calls, in this order:
- eager: ``init_forward_metadata(batch)`` then, per layer, ``forward_decode(...)``;
- graphs: once ``init_cuda_graph_state(max_bs)``; per captured size
  ``init_forward_metadata_capture_cuda_graph(bs, req_pool_indices, seq_lens)`` then the
  captured step; before each replay ``init_forward_metadata_replay_cuda_graph(bs, ...)``,
  which may only change the *contents* of buffers the graph already points at.
- mla_edu's one addition: a backend whose step takes one of several kernel paths per batch lists them in
  ``graph_variants()``; the runner captures each size once per variant (``set_graph_variant`` around it) and,
  after the replay hook, replays the graph ``choose_graph_variant(bs, seq_lens_cpu)`` names. Every backend but
  the triton one with auto splits has one variant, None.

A backend registers itself with ``@register_backend(name)`` (as SGLang's ``@register_attention_backend``
in ``python/sglang/srt/layers/attention/attention_registry.py``) and declares what it supports as class
attributes; ``ServerArgs``, the CLIs, the panel and the case study ask the class (``backend_class(name)``).
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

import torch

from mla_edu.kernels import DEFAULT_SM_COUNT, num_kv_splits_for
from mla_edu.serving.batch import ForwardBatch
from mla_edu.util import PAGE_SIZE, check_int

#: name -> backend class, in registration order (``--attention-backend``'s choices)
BACKEND_CLASSES: dict[str, type[AttentionBackend]] = {}


def register_backend(name: str):
    """Class decorator: register an ``AttentionBackend`` subclass as ``--attention-backend name``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"backend name: expected a non-empty str, got {name!r}")

    def register(cls):
        if not (isinstance(cls, type) and issubclass(cls, AttentionBackend)):
            raise TypeError(f"register_backend({name!r}): expected an AttentionBackend subclass, got {cls!r}")
        if name in BACKEND_CLASSES:
            raise ValueError(f"register_backend: {name!r} is already registered ({BACKEND_CLASSES[name].__name__})")
        check_declarations(cls, name)
        if "name" not in vars(cls):  # a class registered twice is an alias: it keeps its first name
            cls.name = name
        BACKEND_CLASSES[name] = cls
        return cls

    return register


#: What every backend implements: the engine calls these (the module docstring's order).
REQUIRED_METHODS = ("graph_index_buffer", "init_forward_metadata", "init_cuda_graph_state",
                    "init_forward_metadata_capture_cuda_graph", "init_forward_metadata_replay_cuda_graph",
                    "forward_decode")


def check_declarations(cls, name: str) -> None:
    """TypeError/ValueError, at registration, for a backend class that leaves a required method to the base
    class (named) or declares a capability of the wrong type, or a page size the engine does not run."""
    missing = [m for m in REQUIRED_METHODS if getattr(cls, m) is getattr(AttentionBackend, m)]
    if missing:
        raise TypeError(f"register_backend({name!r}): {cls.__name__} must implement {', '.join(missing)} "
                        "(the engine calls them); got the base class's")
    defects = cls.switchable_defects
    if not isinstance(defects, tuple) or not all(isinstance(d, str) and d for d in defects):
        raise TypeError(f"register_backend({name!r}): switchable_defects: expected a tuple of defect names (str), "
                        f"got {defects!r}")
    for flag in ("supports_poison_fill", "freezes_a_view"):
        if not isinstance(getattr(cls, flag), bool):
            raise TypeError(f"register_backend({name!r}): {flag}: expected a bool, got {getattr(cls, flag)!r}")
    if type(cls.page_size) is not int or cls.page_size != PAGE_SIZE:
        raise ValueError(f"register_backend({name!r}): page_size: the engine's pools run {PAGE_SIZE}-token pages "
                         f"(PAGE_SIZE, cutlass_mla's), expected {PAGE_SIZE}, got {cls.page_size!r}")


def backend_names() -> tuple:
    """The registered backends' names, in registration order."""
    return tuple(BACKEND_CLASSES)


def backend_class(name) -> type[AttentionBackend]:
    """The class registered as ``name``; ValueError naming the registered ones otherwise."""
    if not isinstance(name, str) or name not in BACKEND_CLASSES:
        raise ValueError(f"attention_backend: expected one of {backend_names()}, got {name!r}")
    return BACKEND_CLASSES[name]


def create_backend(name: str, *args, defects=frozenset(), **kw) -> AttentionBackend:
    """Build the backend registered as ``name`` (``--attention-backend``) with the ``defects`` it applies."""
    cls = backend_class(name)
    return cls(*args, defects=cls.active_defects(defects), **kw)


def known_defects() -> tuple:
    """Every defect some registered backend can switch on, in registration order."""
    return tuple(dict.fromkeys(d for cls in BACKEND_CLASSES.values() for d in cls.switchable_defects))


def page_table_width(context_length: int, page_size: int = PAGE_SIZE) -> int:
    """W, the page table's columns: ``(max_context_len + PAGE_SIZE) // PAGE_SIZE`` (``page_size``: another page
    size's, e.g. FlashMLA's 64 tokens).

    SGLang's ``CutlassMLABackend.init_cuda_graph_state`` (cutlass_mla_backend.py at 7059ae16f,
    line 132), where ``max_context_len`` is ``model_config.context_len``, i.e.
    ``--context-length`` when given (flashinfer_mla_backend.py line 78, model_config.py line 153).
    ``--context-length 4096`` gives 33.
    """
    return (int(context_length) + page_size) // page_size


class AttentionBackend:
    """Shared state: the pools, the latent cache, the kernel choice; what the backend supports, declared."""

    name: ClassVar[str] = ""  # set by ``register_backend``
    page_size: ClassVar[int] = PAGE_SIZE
    #: defects (``ServerArgs.defects`` names) it can switch on; the others are not applied (``active_defects``)
    switchable_defects: ClassVar[tuple] = ()
    #: whether it implements ``ServerArgs.poison_fill``
    supports_poison_fill: ClassVar[bool] = False
    #: whether its captured launch reads a view of the index buffer frozen at capture, which
    #: ``case_study.diagnose`` checks by re-running the step on the predicted reads (``reading``)
    freezes_a_view: ClassVar[bool] = False

    def __init__(self, req_to_token_pool, kv_cache, *, sm_scale: float, max_context_len: int, num_heads: int,
                 num_kv_splits: int = 1, kernel_impl: str = "torch", sm_count: int = DEFAULT_SM_COUNT,
                 defects=frozenset(), poison_fill: bool = False):
        self.req_to_token = req_to_token_pool.req_to_token  # [pool, max_context_len] int32
        self.kv_cache = kv_cache
        self.sm_scale = float(sm_scale)
        # the query heads of a decode step, known before any capture, as SGLang's backends know them
        # (triton_backend.py at 7059ae16f, lines 215-217: num_attention_heads // the attention TP size)
        self.num_heads = check_int("num_heads", num_heads, 1)
        self.max_context_len = int(max_context_len)
        self.num_kv_splits = int(num_kv_splits)
        self.kernel_impl = kernel_impl
        self.sm_count = int(sm_count)
        self.defects = frozenset(defects)
        bad = sorted(self.defects - set(self.switchable_defects))
        if bad:
            raise ValueError(f"defects: the {self.name} backend switches on {self.switchable_defects}, got {bad}")
        if poison_fill and not self.supports_poison_fill:
            raise ValueError(f"poison_fill: the {self.name} backend does not implement it")
        self.poison_fill = bool(poison_fill)
        self.device = self.req_to_token.device
        self.forward_metadata = None
        self.splits_used: set = set()  # split counts the kernel was launched with (host ints)
        # those the graphs froze (set by the graph runner's capture; a balanced-schedule launch adds none)
        self.splits_captured: frozenset = frozenset()
        self.graph_variant = None  # the variant (``graph_variants``) a graph is being captured for; None otherwise

    @classmethod
    def active_defects(cls, defects) -> frozenset:
        """The defects of ``defects`` this backend applies (``ServerArgs.defects`` names the cutlass_mla
        backend's; another backend runs without them)."""
        return frozenset(d for d in defects if d in cls.switchable_defects)

    @classmethod
    def check_args(cls, args) -> None:
        """ValueError for a ``ServerArgs`` this backend cannot run (beyond the generic checks)."""
        if args.poison_fill and not cls.supports_poison_fill:
            names = [n for n, c in BACKEND_CLASSES.items() if c.supports_poison_fill]
            raise ValueError(f"poison_fill: applies to the {' and '.join(names)} backend{'s' * (len(names) > 1)} "
                             f"only, got attention_backend={cls.name!r}")

    @classmethod
    def may_drop_a_live_workspace(cls, defects, num_kv_splits: int) -> bool:
        """Whether a captured graph may keep writing a workspace Python has dropped (a crash on a GPU)."""
        return False

    def graph_index_buffer(self) -> torch.Tensor:
        """The persistent index buffer the graphs read, ``[max_bs, W]`` int32."""
        raise NotImplementedError

    def graph_variants(self) -> tuple:
        """The kernel paths a replay may need: the graph runner captures a graph per batch size and variant
        (``set_graph_variant`` around each capture) and replays the one ``choose_graph_variant`` names. One
        (None) for a backend whose captured step serves every batch."""
        return (None,)

    def set_graph_variant(self, variant) -> None:
        """The variant of ``graph_variants`` the next capture records (None after the captures)."""
        self.graph_variant = variant

    def choose_graph_variant(self, bs: int, seq_lens_cpu: torch.Tensor):
        """Which captured variant a replay of the first ``bs`` rows runs, from the host's copy of their lengths
        (called after ``init_forward_metadata_replay_cuda_graph``)."""
        return None

    def metadata_after_replay(self) -> dict:
        """What the replay hook left in metadata the graph never reads (for ``case_study.diagnose``)."""
        return {}

    @contextlib.contextmanager
    def reading(self, table: torch.Tensor, impl: str):
        """Inside the block an eager decode step reads ``table`` (int32 ``[bs, width]``) with kernel ``impl``
        (``freezes_a_view`` backends)."""
        raise NotImplementedError(f"the {self.name} backend's launch freezes no view to check")
        yield

    def splits_for(self, max_seq_len: int, batch: int) -> int:
        """The split count the kernel's host wrapper picks for these launch shapes (sgl-kernel's
        heuristic for -1): a host int, so a graph freezes it at capture."""
        return num_kv_splits_for(int(max_seq_len), int(batch), self.sm_count, self.num_kv_splits)

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return 1

    def init_forward_metadata(self, batch: ForwardBatch):
        raise NotImplementedError

    def check_eager_batch(self, batch: ForwardBatch) -> None:
        """ValueError for a batch an eager step cannot run, before ``init_forward_metadata`` touches anything: an
        empty one (SGLang's idle batch runs only as a graph replay, every row padded)."""
        if not isinstance(batch, ForwardBatch):
            raise TypeError(f"init_forward_metadata: expected a ForwardBatch, got {type(batch).__name__}")
        if batch.batch_size < 1:
            raise ValueError(f"init_forward_metadata: the {self.name} backend expected a batch of at least one row "
                             f"(an idle batch runs only as a graph replay), got batch_size={batch.batch_size}")

    def check_heads(self, heads: int) -> None:
        """ValueError unless a decode step's query has the backend's ``num_heads`` heads (its buffers are sized for
        them)."""
        if heads != self.num_heads:
            raise ValueError(f"forward_decode: the {self.name} backend was built for num_heads={self.num_heads} query "
                             f"heads (its workspace is sized for them), got q_nope with {heads}")

    def init_cuda_graph_state(self, max_bs: int):
        raise NotImplementedError

    def init_forward_metadata_capture_cuda_graph(self, bs: int, req_pool_indices: torch.Tensor,
                                                 seq_lens: torch.Tensor):
        raise NotImplementedError

    def init_forward_metadata_replay_cuda_graph(self, bs: int, req_pool_indices: torch.Tensor,
                                                seq_lens: torch.Tensor, seq_lens_cpu: torch.Tensor):
        raise NotImplementedError

    def forward_decode(self, q_nope: torch.Tensor, q_pe: torch.Tensor, layer_id: int,
                       batch: ForwardBatch) -> torch.Tensor:
        raise NotImplementedError
