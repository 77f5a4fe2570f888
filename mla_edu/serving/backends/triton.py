"""SGLang's Triton-backend style: graph-safe by construction.

As ``python/sglang/srt/layers/attention/triton_backend.py`` does, every buffer the graph
touches is allocated once at its maximum size before any capture; launch shapes never depend
on the batch's lengths: the page table is full width and read through its real row stride
(``stride_policy="stride"``), and the split count is fixed for the maximum context (SGLang's
static-split mode; its default computes per-request counts into a device tensor, which is
graph-safe for the same reason: the grid never changes). With ``num_kv_splits=-1`` and the Triton
kernel, the balanced schedule (``kernels.schedule``: each request's parts from the lengths, on the
device) where the page table holds more than ``schedule.BALANCED_ABOVE_TOKENS`` tokens; with a
narrower table or another impl the Triton kernel's own rule (``kernels.triton_num_kv_splits``); the
cutlass backend keeps sgl-kernel's heuristic, as SGLang does.
"""

from __future__ import annotations

import torch

from mla_edu import kernels, kvcache
from mla_edu.kernels import schedule
from mla_edu.kernels.workspace import D_LATENT
from mla_edu.serving.backends.base import AttentionBackend, page_table_width, register_backend
from mla_edu.serving.batch import ForwardBatch
from mla_edu.util import PAGE_SIZE



@register_backend("triton")
class TritonBackend(AttentionBackend):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.width = page_table_width(self.max_context_len)
        self.page_table = None
        self.workspace = None
        self.max_bs = 0

    def _splits(self, bs: int, heads: int) -> int:
        """A fixed ``num_kv_splits`` as given; auto (-1): the Triton kernel's own rule
        (``kernels.triton_num_kv_splits``, which counts head blocks and waves), not sgl-kernel's."""
        if self.num_kv_splits == -1:
            return kernels.triton_num_kv_splits(self.width * PAGE_SIZE, bs, heads, PAGE_SIZE, self.sm_count)
        return self.splits_for(self.width * PAGE_SIZE, bs)

    def uses_balanced_schedule(self) -> bool:
        """Auto splits (-1) with the Triton kernel and a page table of more than ``BALANCED_ABOVE_TOKENS`` tokens:
        the balanced schedule (``kernels.schedule``: each request's parts from the batch's lengths, on the device,
        so a graph follows them at every replay); with a narrower table, the split rule (``_splits``)."""
        return (self.num_kv_splits == -1 and self.kernel_impl == "triton"
                and schedule.uses_balanced(self.width * PAGE_SIZE))

    def _alloc(self, max_bs: int):
        self.max_bs = max_bs
        self.page_table = torch.full((max_bs, self.width), -1, dtype=torch.int32, device=self.device)
        # sized before the head count is known: the most splits any batch size and head count up to 128 gets
        # (get_workspace_size counts 128 heads per split)
        splits = max(self._splits(b, h) for b in range(1, max_bs + 1) for h in (1, 16, 32, 64, 128))
        size = kernels.get_workspace_size(self.width * PAGE_SIZE, max_bs, self.sm_count, splits)
        if self.uses_balanced_schedule():  # its partials, for any batch size and head count up to 128
            size = max([size] + [schedule.workspace_bytes(b, h, D_LATENT, schedule.num_parts(h, self.sm_count, b,
                                                                                                   self.width))
                                 for b in range(1, max_bs + 1) for h in (1, 16, 32, 64, 128)])
        self.workspace = torch.empty(size, dtype=torch.uint8, device=self.device)

    def graph_index_buffer(self) -> torch.Tensor:
        return self.page_table

    def init_forward_metadata(self, batch: ForwardBatch):
        bs = batch.batch_size
        if self.page_table is None or bs > self.max_bs:
            self._alloc(max(bs, self.max_bs))
        kvcache.fill_page_table(self.req_to_token, batch.req_pool_indices, batch.seq_lens,
                                self.page_table[:bs], PAGE_SIZE)
        self.forward_metadata = bs

    def init_cuda_graph_state(self, max_bs: int):
        self._alloc(max_bs)

    def init_forward_metadata_capture_cuda_graph(self, bs, req_pool_indices, seq_lens):
        kvcache.fill_page_table(self.req_to_token, req_pool_indices, seq_lens, self.page_table[:bs], PAGE_SIZE)
        self.forward_metadata = bs

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_cpu):
        kvcache.fill_page_table(self.req_to_token, req_pool_indices[:bs], seq_lens[:bs],
                                self.page_table[:bs], PAGE_SIZE)

    def forward_decode(self, q_nope, q_pe, layer_id, batch):
        bs, heads = q_nope.shape[:2]
        splits = -1 if self.uses_balanced_schedule() else self._splits(bs, heads)
        if splits != -1:  # the balanced schedule's counts are on the device, per request
            self.splits_used.add(splits)
        return kernels.mla_decode(
            q_nope, q_pe, self.kv_cache.kv_buffer[layer_id], batch.seq_lens, self.page_table[:bs],
            self.workspace, self.sm_scale, splits, impl=self.kernel_impl,
            stride_policy="stride", schedule="balanced" if self.uses_balanced_schedule() else "splits")
