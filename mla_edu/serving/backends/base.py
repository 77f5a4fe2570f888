"""SGLang's attention-backend protocol (``python/sglang/srt/layers/attention/base_attn_backend.py``).

The engine calls, in this order:
- eager: ``init_forward_metadata(batch)`` then, per layer, ``forward_decode(...)``;
- graphs: once ``init_cuda_graph_state(max_bs)``; per captured size
  ``init_forward_metadata_capture_cuda_graph(bs, req_pool_indices, seq_lens)`` then the
  captured step; before each replay ``init_forward_metadata_replay_cuda_graph(bs, ...)``,
  which may only change the *contents* of buffers the graph already points at.
"""

from __future__ import annotations

import torch

from mla_edu.kernels import num_kv_splits_for
from mla_edu.serving.batch import ForwardBatch


class AttentionBackend:
    """Shared state: the pools, the latent cache, the kernel choice."""

    page_size: int = 128

    def __init__(self, req_to_token_pool, kv_cache, *, sm_scale: float, max_context_len: int,
                 num_kv_splits: int = 1, kernel_impl: str = "torch", sm_count: int = 132):
        self.req_to_token = req_to_token_pool.req_to_token  # [pool, max_context_len] int32
        self.kv_cache = kv_cache
        self.sm_scale = float(sm_scale)
        self.max_context_len = int(max_context_len)
        self.num_kv_splits = int(num_kv_splits)
        self.kernel_impl = kernel_impl
        self.sm_count = int(sm_count)
        self.device = self.req_to_token.device
        self.forward_metadata = None
        self.splits_used: set = set()  # split counts the kernel was launched with (host ints)

    def splits_for(self, max_seq_len: int, batch: int) -> int:
        """The split count the kernel's host wrapper picks for these launch shapes (sgl-kernel's
        heuristic for -1): a host int, so a graph freezes it at capture."""
        return num_kv_splits_for(int(max_seq_len), int(batch), self.sm_count, self.num_kv_splits)

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return 1

    def init_forward_metadata(self, batch: ForwardBatch):
        raise NotImplementedError

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
