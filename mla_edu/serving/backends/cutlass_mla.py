"""SGLang's ``cutlass_mla`` backend, before and after PR #6998, each defect switchable.

Read against ``python/sglang/srt/layers/attention/cutlass_mla_backend.py`` at the buggy
parent 7059ae16f and at the fix e58423b2b. The kernel is called with the cutlass contract
(``stride_policy="size"``: row stride and ``max_seq_len`` come from ``page_table.size(1)``).

Defects (``defects`` is any subset):
- ``width``: capture computes ``max_seqlen_pad`` from the dummy lengths (1 page) and hands
  the kernel the narrow view ``cuda_graph_kv_indices[:bs, :1]``; the graph freezes that shape.
  Fixed: ``max_seqlen_pad = W``, the full width, so size(1) equals the real row stride.
- ``workspace``: the capture hook (host code, run before the capture begins) allocates a workspace
  sized for the capture-time shapes and stores it on ``self`` (the next capture replaces it,
  dropping the one the previous graph uses);
  replay allocates a new one and assigns it to metadata the graph never reads.
  Fixed: one workspace for the maximum, allocated in ``init_cuda_graph_state``.
- ``scale`` (the bug-era kernel contract, not a graph defect): sgl-kernel 0.1.7, pinned by
  SGLang at 7059ae16f, had no ``sm_scale`` argument: ``cutlass_mla_kernel.cu`` (at 6c0a48282,
  lines 115-116) hard-codes ``scale = 1/sqrt(D_non_latent + D_rope)`` with ``D_non_latent = 128``,
  i.e. ``1/sqrt(192)``, and ``split_kv = 1`` (line 157); the backend passed neither (lines
  270-276 at 7059ae16f). So decode attention, eager and graph alike, ignored ``layer.scaling``
  (DeepSeek-V3's YaRN ``mscale**2 / sqrt(192)``). Prefill is not affected (SGLang's cutlass
  backend prefills through FlashInfer MLA with ``layer.scaling``). Fixed by #7184 (ab1a4fa5c,
  the kernel parameter) and #7186 (ed89837cf, ``sm_scale=layer.scaling``).

Not a defect: the index buffer is never reset, before or after the fix, so entries past a
request's pages keep stale page ids (harmless once the row stride is right).

``poison_fill`` (not in SGLang; a teaching instrument): the buffer is filled with an
out-of-range page id (``POISON_PAGE``) before every graph fill and the kernel runs checked, so a
read of an unused entry gives NaN for that request (loud) instead of a stale page (silent).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from mla_edu import kernels, kvcache
from mla_edu.serving.backends.base import AttentionBackend, page_table_width, register_backend
from mla_edu.serving.batch import ForwardBatch
from mla_edu.util import PAGE_SIZE, cdiv

BUG_ERA_SM_SCALE = 1.0 / math.sqrt(128 + 64)  # sgl-kernel 0.1.7's hard-coded scale
POISON_PAGE = 2**30  # far past any page id: a read of it is out of range
# The pre-fix backend's graph defects (PR #6998, cutlass_mla_backend.py at 7059ae16f): the page
# table's width frozen at capture, and the capture-time workspace freed.
DEFECTS = ("width", "workspace")
# The bug-era kernel contract: sgl-kernel 0.1.7, which SGLang pinned at 7059ae16f
# (python/pyproject.toml, "sgl-kernel==0.1.7"), hard-coded the softmax scale 1/sqrt(128 + 64)
# and split_kv = 1 (sgl-kernel/csrc/attention/cutlass_mla_kernel.cu at 6c0a48282, the v0.1.7
# bump #6963, lines 115-116 and 157). PR #7184 (ab1a4fa5c) added the sm_scale parameter;
# PR #7186 (ed89837cf) made the backend pass layer.scaling.
KERNEL_DEFECTS = ("scale",)
ALL_DEFECTS = DEFECTS + KERNEL_DEFECTS
# SGLang's merged fix (PR #6998, e58423b2b) fixed both: no defect left. It does not reset the index
# rows (stale entries stay), which is harmless once the row stride is right; SGLang never had a
# poison fill (``ServerArgs.poison_fill`` is this project's teaching instrument).
PRE_FIX = frozenset(DEFECTS)
MERGED_FIX = frozenset()
# The seed's pre-fix run: the graph defects plus the bug-era kernel's scale (and one split).
SEED_PRE_FIX = PRE_FIX | {"scale"}


@dataclass
class CutlassMLADecodeMetadata:
    workspace: torch.Tensor
    block_kv_indices: torch.Tensor  # [bs, max_seqlen_pad] int32 (a view in graph mode)


@register_backend("cutlass_mla")
class CutlassMLABackend(AttentionBackend):
    switchable_defects = ALL_DEFECTS
    supports_poison_fill = True
    freezes_a_view = True  # the pre-fix capture hands the kernel a narrow view of the buffer

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        # the scale the decode kernel uses: the model's, or the bug-era kernel's constant
        self.kernel_sm_scale = BUG_ERA_SM_SCALE if "scale" in self.defects else self.sm_scale
        self.cuda_graph_kv_indices = None
        self.cuda_graph_mla_workspace = None

    @classmethod
    def check_args(cls, args) -> None:
        super().check_args(args)
        if "scale" in args.defects and args.num_kv_splits != 1:
            raise ValueError(f"defects 'scale' is sgl-kernel 0.1.7's contract, which hard-coded split_kv = 1; "
                             f"got num_kv_splits={args.num_kv_splits}")

    @classmethod
    def may_drop_a_live_workspace(cls, defects, num_kv_splits: int) -> bool:
        """The pre-fix workspace handling with split partials: each capture replaces the workspace the
        previous graph writes (``results/workspace_hazard_h200.md``)."""
        return "workspace" in defects and num_kv_splits != 1

    def graph_index_buffer(self) -> torch.Tensor:
        return self.cuda_graph_kv_indices

    def metadata_after_replay(self) -> dict:
        md = self.forward_metadata
        return {"metadata_width_after_replay": md.block_kv_indices.size(1),
                "metadata_workspace_ptr_after_replay": md.workspace.data_ptr()}

    @contextlib.contextmanager
    def reading(self, table: torch.Tensor, impl: str):
        bs, width = table.shape
        splits = self.splits_for(PAGE_SIZE * width, bs)
        ws = torch.empty(kernels.get_workspace_size(PAGE_SIZE * width, bs, self.sm_count, splits),
                         dtype=torch.uint8, device=self.device)
        saved = self.forward_metadata, self.kernel_impl
        self.forward_metadata, self.kernel_impl = CutlassMLADecodeMetadata(ws, table.to(self.device)), impl
        try:
            yield
        finally:
            self.forward_metadata, self.kernel_impl = saved

    # --- workspace: bytes for split partials, sized by sgl-kernel's formula -----------------
    def _workspace(self, max_seq_len: int, bs: int) -> torch.Tensor:
        splits = self.splits_for(max_seq_len, bs)
        size = kernels.get_workspace_size(max_seq_len, bs, self.sm_count, splits)
        return torch.empty(size, dtype=torch.uint8, device=self.device)

    def _fill(self, req_pool_indices, seq_lens, table):
        """SGLang's create_flashmla_kv_indices_triton: one row per request, rows [:bs] of ``table``."""
        bs = req_pool_indices.shape[0]
        kvcache.fill_page_table(self.req_to_token, req_pool_indices, seq_lens, table[:bs], PAGE_SIZE)

    # --- eager: a fresh contiguous table every step (right, whatever the defects) -------------
    def init_forward_metadata(self, batch: ForwardBatch):
        self.check_eager_batch(batch)
        bs = batch.batch_size
        lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens  # the host copy is optional
        max_seqlen_pad = cdiv(int(lens.max()), PAGE_SIZE)
        block_kv_indices = torch.full((bs, max_seqlen_pad), -1, dtype=torch.int32, device=self.device)
        self._fill(batch.req_pool_indices, batch.seq_lens, block_kv_indices)
        workspace = self._workspace(max_seqlen_pad * PAGE_SIZE, bs)
        self.forward_metadata = CutlassMLADecodeMetadata(workspace, block_kv_indices)

    # --- graphs ----------------------------------------------------------------------------------
    def init_cuda_graph_state(self, max_bs: int):
        width = page_table_width(self.max_context_len)  # W, SGLang's formula
        self.cuda_graph_kv_indices = torch.full((max_bs, width), 1, dtype=torch.int32, device=self.device)
        self.cuda_graph_mla_workspace = self._workspace(width * PAGE_SIZE, max_bs)

    def init_forward_metadata_capture_cuda_graph(self, bs, req_pool_indices, seq_lens):
        if "width" in self.defects:
            max_seqlen_pad = cdiv(int(seq_lens.max().item()), PAGE_SIZE)  # dummy lengths: 1
        else:
            max_seqlen_pad = self.cuda_graph_kv_indices.shape[1]
        if self.poison_fill:
            self.cuda_graph_kv_indices.fill_(POISON_PAGE)
        self._fill(req_pool_indices, seq_lens, self.cuda_graph_kv_indices)
        if "workspace" in self.defects:
            # replaces (and so drops) the workspace the previously captured graph points at
            self.cuda_graph_mla_workspace = self._workspace(max_seqlen_pad * PAGE_SIZE, bs)
        self.forward_metadata = CutlassMLADecodeMetadata(
            self.cuda_graph_mla_workspace, self.cuda_graph_kv_indices[:bs, :max_seqlen_pad])

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_cpu):
        seq_lens = seq_lens[:bs]
        if self.poison_fill:
            self.cuda_graph_kv_indices.fill_(POISON_PAGE)
        self._fill(req_pool_indices[:bs], seq_lens, self.cuda_graph_kv_indices)
        if "width" in self.defects or "workspace" in self.defects:
            max_seqlen_pad = cdiv(int(seq_lens_cpu[:bs].max()), PAGE_SIZE)
        if "workspace" in self.defects:
            # a new workspace, assigned where the graph will never look
            self.cuda_graph_mla_workspace = self._workspace(max_seqlen_pad * PAGE_SIZE, bs)
            self.forward_metadata.workspace = self.cuda_graph_mla_workspace
        if "width" in self.defects:
            self.forward_metadata.block_kv_indices = self.cuda_graph_kv_indices[:bs, :max_seqlen_pad]

    def forward_decode(self, q_nope, q_pe, layer_id, batch):
        md = self.forward_metadata
        table = md.block_kv_indices
        # host wrapper: launch shapes (and so the split count) from the table's size
        splits = self.splits_for(PAGE_SIZE * table.size(1), q_nope.shape[0])
        self.splits_used.add(splits)
        return kernels.mla_decode(
            q_nope, q_pe, self.kv_cache.kv_buffer[layer_id], batch.seq_lens, table, md.workspace,
            self.kernel_sm_scale, splits, impl=self.kernel_impl, stride_policy="size", checked=self.poison_fill)
