"""SGLang's Triton-backend style: graph-safe by construction.

As ``python/sglang/srt/layers/attention/triton_backend.py`` does, every buffer the graph
touches is allocated once at its maximum size before any capture; a graph's launch shapes never
depend on the lengths it replays with: the page table is read through its real row stride
(``stride_policy="stride"``), and the split count is a host int (SGLang's static-split mode; its default computes
per-request counts into a device tensor, which is graph-safe for the same reason: the grid never changes). With a
fixed ``num_kv_splits``, or the torch kernel, every step reads the table's full width with the count for the maximum
context.

With ``num_kv_splits=-1`` and the Triton kernel, a step reads the table's first ``step_width`` columns: the
narrowest of ``table_widths`` (powers of two pages, and the full width) that holds the batch's longest request,
padded up as the graph runner pads the batch size. On that width each batch takes the balanced schedule
(``kernels.schedule``: each request's parts from the lengths, on the device) or the kernel's own split rule
(``kernels.triton_num_kv_splits``), whichever ``schedule.prefers_balanced`` models faster for its lengths. A graph
fixes its kernels at capture, so the graph runner captures a graph per batch size for each width and schedule
(``graph_variants``: ``2 * len(table_widths(W))``, 24 at 163,840 tokens) and this backend names the one to replay
from the host's copy of the lengths (``choose_graph_variant``): a step mla_edu adds to SGLang's protocol. SGLang's
cutlass backend also hands its kernel the table's first columns, ``cuda_graph_kv_indices[:bs, :max_seqlen_pad]``, but
one width computed at capture and frozen in the graph (``cutlass_mla_backend.py`` at 7059ae16f, lines 148-181); here
each width has its graph, and a replay takes one that holds its batch. Another impl takes the rule; the cutlass
backend keeps sgl-kernel's heuristic, as SGLang does.
"""

from __future__ import annotations

import torch

from mla_edu import kernels, kvcache
from mla_edu.kernels import schedule
from mla_edu.serving.backends.base import AttentionBackend, page_table_width, register_backend
from mla_edu.serving.batch import ForwardBatch
from mla_edu.util import PAGE_SIZE, cdiv, check_int


def auto_splits(bs: int, heads: int, sm_count: int, width: int, page_size: int = PAGE_SIZE) -> int:
    """Auto splits' count for ``bs`` requests: the Triton kernel's own rule (``kernels.triton_num_kv_splits``, which
    counts head blocks and waves) on a page table ``width`` pages wide, whatever the batch's lengths (a graph fixes
    it at capture). A split divides a request's own pages."""
    return kernels.triton_num_kv_splits(width * page_size, bs, heads, page_size, sm_count)


def auto_schedule(lens: list, heads: int, sm_count: int, width: int, page_size: int = PAGE_SIZE) -> str:
    """ "balanced" or "splits" for a batch of requests of ``lens`` tokens (host ints) on a table ``width`` pages
    wide: ``schedule.prefers_balanced``, the two paths' modelled makespans against ``auto_splits``' count."""
    splits = auto_splits(len(lens), heads, sm_count, width, page_size)
    return "balanced" if schedule.prefers_balanced(lens, page_size, heads, sm_count, splits, width) else "splits"


def table_widths(width: int) -> tuple[int, ...]:
    """The widths a step may read of a table ``width`` pages wide, narrowest first: each power of two below
    ``width``, then ``width`` (1, 2, 4, ..., 1024, 1281 at 163,840 tokens of 128)."""
    check_int("width", width, 1)
    return tuple(1 << k for k in range((width - 1).bit_length())) + (width,)


def step_width(lens: list, widths: tuple, page_size: int = PAGE_SIZE) -> int:
    """The narrowest of ``widths`` (``table_widths``) that holds the longest of ``lens`` (host ints, tokens) in
    pages of ``page_size`` tokens. ValueError if a request is longer than the widest holds."""
    pages = cdiv(max(lens, default=0), page_size)
    for w in widths:
        if w >= pages:
            return w
    raise ValueError(f"step_width: expected requests of at most {widths[-1] * page_size} tokens ({widths[-1]} "
                     f"pages), got one of {max(lens)}")


@register_backend("triton")
class TritonBackend(AttentionBackend):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.width = page_table_width(self.max_context_len)
        # Two sets of buffers, as SGLang's Triton backend keeps (its eager steps allocate their own, its graphs
        # read the cuda_graph_* ones): an eager step never replaces what a captured graph reads.
        self.graph_buffers = None  # (page_table [max_bs, W], workspace): allocated once, before any capture
        self.eager_buffers = None  # the same for eager steps, grown with the batch
        self.page_table = None  # the pair the next decode step reads: one of the two above
        self.workspace = None
        self.step_schedule = None  # an eager step's (width, schedule), chosen at its first layer for all

    def splits(self, bs: int, heads: int, width: int | None = None) -> int:
        """A fixed ``num_kv_splits`` as given; auto (-1): the Triton kernel's own rule
        (``kernels.triton_num_kv_splits``, which counts head blocks and waves), not sgl-kernel's, on a step reading
        ``width`` columns (default the table's)."""
        if self.num_kv_splits == -1:
            return auto_splits(bs, heads, self.sm_count, width or self.width)
        return self.splits_for(self.width * PAGE_SIZE, bs)

    def chooses_schedule(self) -> bool:
        """Auto splits (-1) with the Triton kernel: each batch's width and schedule chosen from its lengths
        (``choose_step``), a graph captured for each; otherwise the full width and the split count of ``splits``."""
        return self.num_kv_splits == -1 and self.kernel_impl == "triton"

    def widths(self) -> tuple[int, ...]:
        """The widths a step may read: ``table_widths`` of the table's with a choice (``chooses_schedule``), else
        the table's alone."""
        return table_widths(self.width) if self.chooses_schedule() else (self.width,)

    def choose_schedule(self, lens: list, heads: int, width: int | None = None) -> str:
        """ "balanced" (``kernels.schedule``: each request's parts from the lengths, on the device) or "splits" (the
        split rule's count for every request) for a batch of requests of ``lens`` tokens (host ints) on a step
        reading ``width`` columns (default ``step_width``'s), with auto splits only: ``auto_schedule``."""
        if self.num_kv_splits != -1:
            raise ValueError(f"choose_schedule: the schedule is chosen with auto splits (-1), got num_kv_splits="
                             f"{self.num_kv_splits}")
        return auto_schedule(lens, heads, self.sm_count, width or step_width(lens, self.widths()))

    def choose_step(self, lens: list, heads: int) -> tuple[int, str]:
        """(width, schedule) for a batch of requests of ``lens`` tokens: the narrowest captured width that holds
        the longest (``step_width``) and ``choose_schedule`` on it; the full width and "splits" without a
        choice."""
        if not self.chooses_schedule():
            return self.width, "splits"
        width = step_width(lens, self.widths())
        return width, self.choose_schedule(lens, heads, width)

    def graph_variants(self) -> tuple:
        """(width, schedule) for each width of ``widths`` and each schedule, with a choice; else (None,)."""
        if not self.chooses_schedule():
            return (None,)
        return tuple((w, s) for w in self.widths() for s in schedule.SCHEDULES)

    def choose_graph_variant(self, bs: int, seq_lens_cpu: torch.Tensor):
        if not self.chooses_schedule():
            return None
        return self.choose_step(seq_lens_cpu[:bs].tolist(), self.num_heads)

    def _alloc(self, max_bs: int) -> tuple:
        """A page table [max_bs, W] and a workspace for any batch of up to ``max_bs`` requests at any width."""
        page_table = torch.full((max_bs, self.width), -1, dtype=torch.int32, device=self.device)
        # the most any batch size and width takes at the model's head count and latent width: the split rule's
        # partials, and with a choice the balanced schedule's on this backend's SMs (a narrower width may take more
        # splits or parts than the table's)
        h, dl = self.num_heads, self.kv_cache.kv_lora_rank
        sizes = [(b, w) for b in range(1, max_bs + 1) for w in self.widths()]
        size = max(kernels.split_workspace_bytes(b, h, self.splits(b, h, w), dl) for b, w in sizes)
        if self.chooses_schedule():
            size = max([size] + [schedule.workspace_bytes(b, h, dl, schedule.num_parts(h, self.sm_count, b, w))
                                 for b, w in sizes])
        return page_table, torch.empty(size, dtype=torch.uint8, device=self.device)

    def graph_index_buffer(self) -> torch.Tensor:
        return self.graph_buffers[0] if self.graph_buffers is not None else self.page_table

    def _use(self, buffers: tuple):
        self.page_table, self.workspace = buffers

    def init_forward_metadata(self, batch: ForwardBatch):
        self.check_eager_batch(batch)
        bs = batch.batch_size
        if self.eager_buffers is None or bs > self.eager_buffers[0].shape[0]:
            self.eager_buffers = self._alloc(bs)
        self._use(self.eager_buffers)
        kvcache.fill_page_table(self.req_to_token, batch.req_pool_indices, batch.seq_lens,
                                self.page_table[:bs], PAGE_SIZE)
        self.forward_metadata = bs
        self.step_schedule = None

    def init_cuda_graph_state(self, max_bs: int):
        self.graph_buffers = self._alloc(max_bs)

    def init_forward_metadata_capture_cuda_graph(self, bs, req_pool_indices, seq_lens):
        self._use(self.graph_buffers)
        kvcache.fill_page_table(self.req_to_token, req_pool_indices, seq_lens, self.page_table[:bs], PAGE_SIZE)
        self.forward_metadata = bs

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_cpu):
        self._use(self.graph_buffers)
        kvcache.fill_page_table(self.req_to_token, req_pool_indices[:bs], seq_lens[:bs],
                                self.page_table[:bs], PAGE_SIZE)

    def forward_decode(self, q_nope, q_pe, layer_id, batch):
        bs, heads = q_nope.shape[:2]
        self.check_heads(heads)  # the workspace is sized for the model's head count
        width, chosen = self.width, "splits"
        if self.chooses_schedule():  # capturing: the graph's variant; eager: this batch's own, once a step
            step = self.graph_variant or self.step_schedule
            if step is None:
                lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens.cpu()
                step = self.step_schedule = self.choose_step(lens[:bs].tolist(), heads)
            width, chosen = step
        splits = -1 if chosen == "balanced" else self.splits(bs, heads, width)
        if splits != -1:  # the balanced schedule's counts are on the device, per request
            self.splits_used.add(splits)
        # the first ``width`` columns: a view with the table's row stride, read through it
        return kernels.mla_decode(
            q_nope, q_pe, self.kv_cache.kv_buffer[layer_id], batch.seq_lens, self.page_table[:bs, :width],
            self.workspace, self.sm_scale, splits, impl=self.kernel_impl, stride_policy="stride", schedule=chosen,
            sm_count=self.sm_count)  # the SMs the workspace and the choice counted on
