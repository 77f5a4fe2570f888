"""Peer MLA decode kernels for the GPU benchmark, each run on the same cache bytes as ``mla_decode``.

* SGLang's Triton decode kernel: ``decode_attention_fwd`` in
  ``python/sglang/srt/layers/attention/triton_ops/decode_attention.py`` (sglang 0.4.7, the kernel
  behind SGLang's ``--attention-backend triton`` for MLA: its grouped path, 16 heads per program).
  The module is loaded from the installed ``sglang`` package (``pip install --no-deps sglang==0.4.7``:
  pure Python) without importing the ``sglang`` package itself, whose ``__init__`` needs the whole
  serving stack; the one helper it imports, ``sglang.srt.utils.is_hip``, comes from a stub module
  that answers ``False`` (this is a CUDA run). It reads tokens through ``kv_indptr``/``kv_indices``
  (one index per token), so the page table is expanded to token slots outside the timed call.
* FlashMLA (DeepSeek's Hopper kernel, ``flash_mla_with_kvcache``), when ``flash_mla`` is importable:
  page 64 only, its own split scheduler (``get_mla_metadata``, computed outside the timed call).

Nothing here is needed by ``mla_decode``; each loader returns None with the reason when its peer
is not installed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types

import torch

from mla_edu.kernels.contract import pages_read

SGLANG_MODULE = "sglang/srt/layers/attention/triton_ops/decode_attention.py"


def _sglang_file(module: str = SGLANG_MODULE) -> str | None:
    for root in sys.path:
        path = os.path.join(root or ".", module)
        if os.path.isfile(path):
            return path
    return None


def load_sglang_decode():
    """(module, None) with SGLang's ``decode_attention`` module, or (None, reason)."""
    path = _sglang_file()
    if path is None:
        return None, f"sglang is not installed ({SGLANG_MODULE} not found on sys.path)"
    stub = types.ModuleType("sglang.srt.utils")
    stub.is_hip = lambda: False  # the only name decode_attention.py imports from sglang.srt.utils
    saved = sys.modules.get("sglang.srt.utils")
    sys.modules["sglang.srt.utils"] = stub
    try:
        spec = importlib.util.spec_from_file_location("mla_edu_peer_sglang_decode_attention", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        if saved is None:
            sys.modules.pop("sglang.srt.utils", None)
        else:
            sys.modules["sglang.srt.utils"] = saved
    return mod, None


def load_flash_mla():
    """(flash_mla module, None), or (None, reason)."""
    try:
        import flash_mla
    except ImportError as e:
        return None, f"flash_mla is not importable ({e})"
    return flash_mla, None


#: SGLang's per-request split rule for its Triton backend (sglang 0.4.7), a Triton kernel in this file.
SGLANG_BACKEND = "sglang/srt/layers/attention/triton_backend.py"
#: ``--triton-attention-num-kv-splits``'s default on CUDA (sglang 0.4.7 ``server_args.py``; 16 on ROCm).
SGLANG_MAX_KV_SPLITS = 8


def load_sglang_split_rule():
    """(``get_num_kv_splits_triton``, None) from the installed sglang's Triton backend, or (None, reason). The
    module itself imports the serving stack, so only this one function's source is taken (with ``ast``) into
    a module of its own, whose only imports are triton and triton.language (all the function uses)."""
    import ast
    import tempfile

    path = _sglang_file(SGLANG_BACKEND)
    if path is None:
        return None, f"sglang is not installed ({SGLANG_BACKEND} not found on sys.path)"
    with open(path) as f:
        src = f.read()
    node = next((n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)
                 and n.name == "get_num_kv_splits_triton"), None)
    if node is None:
        return None, f"get_num_kv_splits_triton not found in {path}"
    lines = src.splitlines()[node.decorator_list[0].lineno - 1: node.end_lineno]
    folder = tempfile.mkdtemp(prefix="mla_edu_sglang_rule_")
    with open(os.path.join(folder, "sglang_split_rule.py"), "w") as f:  # Triton's JIT reads the source file
        f.write("import triton\nimport triton.language as tl\n\n\n" + "\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location("mla_edu_peer_sglang_split_rule",
                                                  os.path.join(folder, "sglang_split_rule.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_num_kv_splits_triton, None


def check_peer_inputs(seq_lens: torch.Tensor, page_table: torch.Tensor, cache: torch.Tensor) -> None:
    """ValueError unless every request's pages lie in its table row and in the cache: the peers' kernels take
    lengths and tables as given and read past them (a host sync; the peers are set up once per bench problem)."""
    page, num_pages = cache.size(1), cache.size(0)
    lens = seq_lens.long().cpu()
    if seq_lens.dim() != 1 or page_table.dim() != 2 or page_table.size(0) != lens.numel():
        raise ValueError(f"seq_lens [B] and page_table [B, W] must agree on B, got {tuple(seq_lens.shape)} and "
                         f"{tuple(page_table.shape)}")
    width = page_table.size(1) * page
    bad = [(i, int(n)) for i, n in enumerate(lens.tolist()) if not 0 <= n <= width]
    if bad:
        raise ValueError(f"seq_lens must lie in [0, page_table.size(1) * page = {width}], got (request, length) "
                         f"{bad[:4]}")
    n_pages = ((lens + page - 1) // page).tolist()
    table = page_table.cpu()  # read with its own row stride (a GPU view comes back a dense copy)
    ids = [p for row in pages_read(table, n_pages, row_stride=table.stride(0)) for p in row]
    if ids and not (0 <= min(ids) and max(ids) < num_pages):
        raise ValueError(f"the page ids the lengths read must lie in [0, {num_pages}) (the cache's pages), got "
                         f"[{min(ids)}, {max(ids)}]")


class SGLangTriton:
    """SGLang's Triton MLA decode on our paged cache: ``run(num_kv_splits)`` -> out [B, H, 512]."""

    def __init__(self, mod, q_nope, q_pe, cache, seq_lens, page_table, sm_scale: float, max_splits: int):
        check_peer_inputs(seq_lens, page_table, cache)
        b, h, dl = q_nope.shape
        page = cache.size(1)
        self.mod, self.sm_scale, self.max_splits = mod, float(sm_scale), int(max_splits)
        self.q = torch.cat([q_nope, q_pe], dim=-1).contiguous()  # [B, H, 576]: SGLang's MLA query
        self.k_buffer = cache.view(-1, 1, cache.size(-1))  # [slots, 1, 576]: the same bytes
        self.v_buffer = self.k_buffer[..., :dl]  # [slots, 1, 512]: a view, as SGLang's MLA backend passes
        lens = seq_lens.long()
        self.kv_indptr = torch.zeros(b + 1, dtype=torch.int32, device=q_nope.device)
        self.kv_indptr[1:] = torch.cumsum(lens, 0).to(torch.int32)
        slots = page_table.long()[:, :, None] * page + torch.arange(page, device=q_nope.device)  # [B, W, PAGE]
        width = slots.size(1) * page
        keep = torch.arange(width, device=q_nope.device)[None, :] < lens[:, None]
        self.kv_indices = slots.reshape(b, width)[keep].to(torch.int32)  # [sum(seq_lens)]
        self.o = torch.empty(b, h, dl, dtype=q_nope.dtype, device=q_nope.device)
        self.attn_logits = torch.empty(b, h, self.max_splits, dl, dtype=torch.float32, device=q_nope.device)
        self.attn_lse = torch.empty(b, h, self.max_splits, dtype=torch.float32, device=q_nope.device)
        self.splits = {s: torch.full((b,), s, dtype=torch.int32, device=q_nope.device)
                       for s in range(1, self.max_splits + 1)}

    def own_splits(self, rule, sm_count: int) -> torch.Tensor:
        """int32 ``[B]``: each request's split count by SGLang's own rule (``load_sglang_split_rule``), as its
        Triton backend computes it for MLA (one KV head, ``max_kv_splits = SGLANG_MAX_KV_SPLITS``)."""
        b, h = self.q.shape[:2]
        lens = self.kv_indptr[1:] - self.kv_indptr[:-1]
        splits = torch.empty(b, dtype=torch.int32, device=self.q.device)
        rule[(1,)](splits, lens, b, 1, h, 1, SGLANG_MAX_KV_SPLITS, sm_count,
                   MAX_NUM_SEQ=max(256, 1 << (b - 1).bit_length()))  # SCHEDULE_SEQ, as get_num_kv_splits sets it
        return splits

    def run_splits(self, splits: torch.Tensor) -> torch.Tensor:
        """Every request its own split count (``splits`` int32 [B], each <= max_splits): SGLang's default mode."""
        self.mod.decode_attention_fwd(self.q, self.k_buffer, self.v_buffer, self.o, self.kv_indptr, self.kv_indices,
                                      self.attn_logits, self.attn_lse, splits, self.max_splits, self.sm_scale)
        return self.o

    def run(self, num_kv_splits: int) -> torch.Tensor:
        # every request gets num_kv_splits; max_kv_splits is the grid's split dimension (as SGLang sizes it)
        self.mod.decode_attention_fwd(self.q, self.k_buffer, self.v_buffer, self.o, self.kv_indptr, self.kv_indices,
                                      self.attn_logits[:, :, :num_kv_splits], self.attn_lse[:, :, :num_kv_splits],
                                      self.splits[num_kv_splits], num_kv_splits, self.sm_scale)
        return self.o


class FlashMLA:
    """FlashMLA on our paged cache (page 64): ``run()`` -> out [B, H, 512]."""

    def __init__(self, mod, q_nope, q_pe, cache, seq_lens, page_table, sm_scale: float):
        if cache.size(1) != 64:
            raise ValueError(f"FlashMLA reads pages of 64 tokens, got {cache.size(1)}")
        check_peer_inputs(seq_lens, page_table, cache)
        b, h, _ = q_nope.shape
        self.mod, self.sm_scale = mod, float(sm_scale)
        self.q = torch.cat([q_nope, q_pe], dim=-1).view(b, 1, h, -1).contiguous()  # [B, s_q=1, H, 576]
        self.k_cache = cache.view(cache.size(0), 64, 1, cache.size(-1))  # [pages, 64, h_kv=1, 576]
        self.page_table, self.seq_lens = page_table, seq_lens
        self.metadata, self.num_splits = mod.get_mla_metadata(seq_lens, h, 1)
        self.dl = q_nope.size(-1)

    def run(self) -> torch.Tensor:
        out, _ = self.mod.flash_mla_with_kvcache(self.q, self.k_cache, self.page_table, self.seq_lens, self.dl,
                                                 self.metadata, self.num_splits, softmax_scale=self.sm_scale,
                                                 causal=True)
        return out[:, 0]
