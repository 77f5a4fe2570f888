"""A graph runner like SGLang's ``CudaGraphRunner`` (python/sglang/srt/model_executor/cuda_graph_runner.py).

- Static input buffers at the largest captured size; ``seq_lens`` starts filled with the
  backend's fill value (1).
- ``capture``: every size in ``cuda_graph_bs``, largest first (SGLang reverses the list "to
  enable better memory sharing across cuda graphs"); for each: the backend's capture hook on
  the host, warm-up runs (two on a GPU, as SGLang; one on the emulator, which has no lazy
  initialisation to get out of the way), then the whole decode step under ``mla_edu.graphs.graph``.
- ``replay``: pick the smallest captured size >= the real batch (``bisect_left``); when padding,
  ``seq_lens`` is refilled with the fill value and ``out_cache_loc`` zeroed (slot 0: the
  engine's reserved pad page); ``req_pool_indices`` of padded rows keep whatever they held.
  Copy the real rows in, run the backend's replay hook, replay, slice the outputs.

Real ``torch.cuda.CUDAGraph`` on a GPU, the CPU emulator otherwise (``mla_edu.graphs``).
"""

from __future__ import annotations

import bisect

import torch

from mla_edu import graphs
from mla_edu.serving.batch import ForwardBatch


class GraphRunner:
    def __init__(self, runner, cuda_graph_bs, num_warmup: int | None = None):
        self.runner = runner
        self.capture_bs = sorted(set(int(b) for b in cuda_graph_bs))
        self.max_bs = self.capture_bs[-1]
        backend = runner.backend
        backend.init_cuda_graph_state(self.max_bs)
        self.seq_len_fill_value = backend.get_cuda_graph_seq_len_fill_value()
        dev = runner.device
        self.input_ids = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.req_pool_indices = torch.zeros(self.max_bs, dtype=torch.int32, device=dev)
        self.seq_lens = torch.full((self.max_bs,), self.seq_len_fill_value, dtype=torch.int32, device=dev)
        self.seq_lens_cpu = torch.full((self.max_bs,), self.seq_len_fill_value, dtype=torch.int32)
        self.out_cache_loc = torch.full((self.max_bs,), runner.pad_loc, dtype=torch.int64, device=dev)
        self.num_warmup = num_warmup if num_warmup is not None else (2 if dev.type == "cuda" else 1)
        self.graphs, self.outputs = {}, {}
        self.pool = None
        self.capture()

    def static_batch(self, bs: int) -> ForwardBatch:
        """The first ``bs`` rows of the persistent input buffers the graphs were captured on."""
        return ForwardBatch(bs, self.input_ids[:bs], self.positions[:bs], self.req_pool_indices[:bs],
                            self.seq_lens[:bs], self.out_cache_loc[:bs], self.seq_lens_cpu[:bs])

    @torch.no_grad()
    def capture(self):
        """A graph per captured size and per variant of the backend's step (``graph_variants``: one for most
        backends), all in one memory pool (they replay one at a time)."""
        backend = self.runner.backend
        before = set(backend.splits_used)
        backend.splits_used.clear()
        backend.splits_captured = frozenset()  # set again once every graph is captured
        try:
            for bs in reversed(self.capture_bs):
                for variant in backend.graph_variants():
                    backend.set_graph_variant(variant)
                    batch = self.static_batch(bs)
                    backend.init_forward_metadata_capture_cuda_graph(bs, batch.req_pool_indices, batch.seq_lens)
                    graphs.warm_up(lambda: self.runner.decode_forward(batch), self.num_warmup, self.runner.device)
                    g = graphs.Graph(device=self.runner.device)
                    with graphs.graph(g, pool=self.pool):
                        out = self.runner.decode_forward(batch)
                    self.pool = g.pool()
                    self.graphs[bs, variant], self.outputs[bs, variant] = g, out
            backend.splits_captured = frozenset(backend.splits_used)  # the split counts the graphs froze
        finally:
            backend.splits_used |= before
            backend.set_graph_variant(None)

    def can_run(self, bs: int) -> bool:
        return bs <= self.max_bs

    def padded_size(self, raw_bs: int) -> int:
        return self.capture_bs[bisect.bisect_left(self.capture_bs, raw_bs)]

    def check_size(self, raw_bs: int, bs: int | None = None) -> None:
        """ValueError unless a batch of ``raw_bs`` rows can replay (padded to ``bs``, or to the smallest size that
        fits when None): the real rows must fit the largest captured graph."""
        if bs is None and not self.can_run(raw_bs):
            raise ValueError(f"replay: expected a batch of at most max_bs={self.max_bs} rows (cuda_graph_bs "
                             f"{tuple(self.capture_bs)}), got {raw_bs}; run it eagerly")
        if bs is not None and (bs not in self.capture_bs or bs < raw_bs):
            raise ValueError(f"replay: expected a captured size >= {raw_bs} from {self.capture_bs}, got {bs}")

    @torch.no_grad()
    def replay(self, batch: ForwardBatch, bs: int | None = None):
        """Replay for ``batch``; ``bs``: the captured size to pad to (default: the smallest that fits).

        Under DP attention SGLang pads to the size that fits the SUM of all ranks' tokens
        (``bisect_left(capture_bs, sum(global_num_tokens_cpu))``, cuda_graph_runner.py at
        7059ae16f, lines 539-545), so a rank's rows may be padded far past its own batch; a rank
        with no request replays with every row padded (SGLang's idle batch).
        """
        raw_bs = batch.batch_size
        self.check_size(raw_bs, bs)
        if bs is None:
            bs = self.padded_size(raw_bs)
        if bs != raw_bs:
            self.seq_lens.fill_(self.seq_len_fill_value)
            self.seq_lens_cpu.fill_(self.seq_len_fill_value)
            self.out_cache_loc.fill_(self.runner.pad_loc)
        self.input_ids[:raw_bs].copy_(batch.input_ids)
        self.positions[:raw_bs].copy_(batch.positions)
        self.req_pool_indices[:raw_bs].copy_(batch.req_pool_indices)
        self.seq_lens[:raw_bs].copy_(batch.seq_lens)
        # the host copy is optional in a ForwardBatch, as in the eager backends: read the lengths then
        self.seq_lens_cpu[:raw_bs].copy_(batch.seq_lens if batch.seq_lens_cpu is None else batch.seq_lens_cpu)
        self.out_cache_loc[:raw_bs].copy_(batch.out_cache_loc)
        backend = self.runner.backend
        backend.init_forward_metadata_replay_cuda_graph(bs, self.req_pool_indices, self.seq_lens, self.seq_lens_cpu)
        key = bs, backend.choose_graph_variant(bs, self.seq_lens_cpu)
        self.graphs[key].replay()
        return tuple(t[:raw_bs].clone() for t in self.outputs[key])  # next ids, bad flags, logits
