"""Runs the model: prefill one request at a time, batched decode through the attention backend.

The decode step (``decode_forward``) is the whole step, all layers, embedding to greedy token:
it is what the graph runner captures. It is built from the model's pieces (``embed_tokens``,
``layers[i].attn_norm / attn / mlp_norm / mlp``, ``final_logits``) as
``TinyDeepseek.decode_step`` documents, with the attention over the paged cache done by the
backend; it avoids ``model.embed``'s range check, whose ``int(tensor)`` is a device sync that
graph capture forbids.
"""

from __future__ import annotations

import copy
import os

import torch
from torch.nn import functional as F

from mla_edu import default_device, kvcache
from mla_edu.kernels import DEFAULT_SM_COUNT
from mla_edu.kernels.workspace import BYTES_PER_BATCH_SPLIT
from mla_edu.serving.args import ServerArgs
from mla_edu.serving.backends import create_backend
from mla_edu.serving.batch import ForwardBatch
from mla_edu.serving.graph_runner import GraphRunner
from mla_edu.util import PAGE_SIZE, cdiv

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def free_bytes(device: torch.device) -> int | None:
    """Memory free on ``device`` now: the GPU's (``torch.cuda.mem_get_info``) or the machine's available RAM
    (physical RAM where the system does not say what is available, as macOS; None where it says neither)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    for name in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            return os.sysconf(name) * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            continue
    return None


def memory_needed(args: ServerArgs, config, num_pages: int, dtype: torch.dtype) -> dict:
    """A lower bound, in bytes, of what the engine allocates for ``args``: ``req_to_token`` (int32
    ``[max_running_requests, context_length]``), the latent cache (``num_pages`` pages of every layer) and, with
    graphs, the largest graph's logits (``[max(cuda_graph_bs), vocab]``), page table and split-KV workspace
    (sgl-kernel's size, ``BYTES_PER_BATCH_SPLIT`` a row and split)."""
    mla, item = config.mla, torch.finfo(dtype).bits // 8
    need = {"req_to_token": args.max_running_requests * args.context_length * 4,
            "latent cache": num_pages * PAGE_SIZE * (mla.kv_lora_rank + mla.qk_rope_head_dim) * config.num_hidden_layers
            * item}
    if not args.disable_cuda_graph:
        bs = max(args.cuda_graph_bs)
        need["graph buffers"] = bs * (config.vocab_size * item + args.page_table_width * 4
                                      + BYTES_PER_BATCH_SPLIT * max(1, args.num_kv_splits))
    return need


class SettingsError(ValueError):
    """Settings that are valid but cannot run here (more memory or pages than there are): a command line reports
    it as a usage error."""


def check_memory(args: ServerArgs, config, num_pages: int, dtype: torch.dtype, device: torch.device) -> None:
    """SettingsError (a ValueError), before any allocation, when ``memory_needed`` exceeds the device's free
    memory."""
    need = memory_needed(args, config, num_pages, dtype)
    free = free_bytes(device)
    if free is not None and sum(need.values()) > free:
        parts = ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in need.items())
        raise SettingsError(f"these settings need at least {sum(need.values()) / 2**30:.2f} GiB ({parts}; "
                         f"context_length={args.context_length}, max_running_requests={args.max_running_requests}, "
                         f"cuda_graph_bs={args.cuda_graph_bs}), but {device} has {free / 2**30:.2f} GiB free")


class ModelRunner:
    """Owns the pools (``req_to_token``, pages, latent cache), the backend and the decode step."""

    def __init__(self, model, args: ServerArgs, prefill_cache: dict | None = None):
        self.args = args
        self.prefill_cache = prefill_cache
        self.device = torch.device(args.device) if args.device else default_device()
        self.dtype = DTYPES[args.dtype]
        # what a prefill's logits and latents depend on besides the prompt: the weights (the caller's model object,
        # held by the key so its id is never reused), the dtype and the device
        self.prefill_key = (model, self.dtype, self.device)
        # a copy: the caller's model keeps its device, dtype and mode (``.to`` would convert it in place)
        self.model = copy.deepcopy(model).to(self.device, self.dtype).eval()
        mla = model.config.mla
        self.num_layers = len(model.layers)
        self.context_length = args.context_length
        self.page_size = PAGE_SIZE
        self.pages_per_req = cdiv(self.context_length, self.page_size)
        # ``max_running_requests`` rows, as SGLang sizes ``req_to_token`` even under DP attention
        # (model_runner.py at 7059ae16f, lines 915-917); a context's worth of pages for each request
        # this scheduler may run (``max_running_requests_per_rank``), plus page 0, which the
        # allocator never hands out: padded graph rows write their latents there (slot 0)
        running = args.max_running_requests_per_rank
        num_pages = running * self.pages_per_req + 1
        if args.max_total_pages is not None and num_pages > args.max_total_pages:
            raise SettingsError(
                f"too many running requests: max_running_requests={args.max_running_requests}"
                + (f" // dp_size {args.dp_size} = {running}" if args.enable_dp_attention else "") + " x "
                f"{self.pages_per_req} pages (context {self.context_length}) + the padding page need {num_pages} "
                f"pages, but max_total_pages is {args.max_total_pages}")
        check_memory(args, model.config, num_pages, self.dtype, self.device)
        self.req_to_token_pool = kvcache.ReqToTokenPool(args.max_running_requests, self.context_length, self.device)
        self.allocator = kvcache.PagedAllocator(num_pages, self.page_size, self.device)
        self.kv_cache = kvcache.LatentKVCache(self.num_layers, num_pages, self.page_size,
                                              kv_lora_rank=mla.kv_lora_rank, qk_rope_head_dim=mla.qk_rope_head_dim,
                                              dtype=self.dtype, device=self.device)
        self.pad_loc = 0  # slot 0, on the reserved page 0
        impl = args.kernel_impl or ("triton" if self.device.type == "cuda" else "torch")
        sm_count = args.sm_count
        if sm_count is None:
            sm_count = (torch.cuda.get_device_properties(self.device).multi_processor_count
                        if self.device.type == "cuda" else DEFAULT_SM_COUNT)
        self.backend = create_backend(
            args.attention_backend, self.req_to_token_pool, self.kv_cache,
            sm_scale=model.layers[0].attn.softmax_scale, max_context_len=self.context_length,
            num_heads=mla.num_attention_heads,
            num_kv_splits=args.num_kv_splits, kernel_impl=impl, sm_count=sm_count, defects=args.defects,
            poison_fill=args.poison_fill)
        self.graph_runner = None
        if not args.disable_cuda_graph:
            self.graph_runner = GraphRunner(self, args.cuda_graph_bs)

    # --- memory -----------------------------------------------------------------------------
    def assign_slots(self, req_pool_idx: int, pages: list, start: int, end: int) -> torch.Tensor:
        """Write ``req_to_token[req, start:end]`` from the request's pages; returns the slots [end-start]. Refuses a
        row that is not allocated (it would write another request's row, or none)."""
        if not self.req_to_token_pool.is_allocated(req_pool_idx):
            raise ValueError(f"req_pool_idx: expected an allocated req_to_token row, got {req_pool_idx!r}")
        locs = kvcache.slots_of(pages, start, end, self.page_size)  # [n]
        self.req_to_token_pool.req_to_token[req_pool_idx, start:end] = locs.to(self.device, torch.int32)
        return locs.to(self.device)

    # --- prefill: one request, contiguous attention; latents go into the paged cache ------------
    @torch.no_grad()
    def prefill_forward(self, tokens: torch.Tensor):
        """Causal forward of one prompt ``tokens [T]`` -> (last logits ``[vocab]``, latents ``[L, T, r + dr]``).

        The model's own ``prefill`` computes attention in the 512-wide latent space (the absorbed
        order, O(T^2 r)); a serving engine prefills in the naive order (keys and values
        decompressed per head, then a fused causal attention), which is much cheaper for long
        prompts. Same weights, same function: ``tests/test_serving.py`` checks it against
        ``model.prefill``.
        """
        model = self.model
        pos = torch.arange(tokens.shape[0], device=tokens.device)  # [T]
        h = model.embed_tokens(tokens)  # [T, D]
        latents = []
        for layer in model.layers:
            attn = layer.attn
            x = layer.attn_norm(h)
            c_kv, k_pe = attn.latent_kv(x, pos)  # [T, r], [T, dr]
            latents.append(torch.cat([c_kv, k_pe], dim=-1))  # [T, r + dr]
            q_nope, q_pe = attn.query(x, pos)  # [T, H, dn], [T, H, dr]
            w_uk, w_uv = attn.w_uk_uv()  # [H, dn, r], [H, dv, r]
            k_nope = torch.einsum("tr,hdr->htd", c_kv, w_uk)  # [H, T, dn]
            v = torch.einsum("tr,hdr->htd", c_kv, w_uv)  # [H, T, dv]
            n_heads = q_nope.shape[1]
            q = torch.cat([q_nope, q_pe], dim=-1).transpose(0, 1)  # [H, T, dn + dr]
            k = torch.cat([k_nope, k_pe[None].expand(n_heads, -1, -1)], dim=-1)  # [H, T, dn + dr]
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=attn.softmax_scale)  # [H, T, dv]
            h = h + attn.o_proj(o.transpose(0, 1).reshape(tokens.shape[0], -1))
            h = h + layer.mlp(layer.mlp_norm(h))
        logits = model.final_logits(h[-1:])[0]  # [vocab]
        return logits, torch.stack(latents)  # [vocab], [L, T, r + dr]

    @torch.no_grad()
    def prefill(self, prompt_ids: list, req_pool_idx: int, pages: list) -> torch.Tensor:
        """Prefill one request into its pages; returns the logits of its last prompt token ``[vocab]``.

        With a ``prefill_cache`` (a dict shared by engines over the same model, as the repro
        does), a prompt seen before reuses its logits and latents: prefill is eager and
        contiguous in every configuration, so it is the same computation each time. The key is
        ``(model, dtype, device, prompt)`` (``prefill_key``): engines of another model, dtype or
        device sharing the dict compute their own (the model by identity: change its weights in
        place and a shared cache keeps the old logits).
        """
        key = (*self.prefill_key, tuple(prompt_ids))
        hit = self.prefill_cache.get(key) if self.prefill_cache is not None else None
        if hit is None:
            tokens = torch.tensor(prompt_ids, dtype=torch.int64, device=self.device)  # [T]
            hit = self.prefill_forward(tokens)
            if self.prefill_cache is not None:
                self.prefill_cache[key] = hit
        logits, latents = hit
        locs = self.assign_slots(req_pool_idx, pages, 0, len(prompt_ids))
        r = self.kv_cache.kv_lora_rank
        for layer_id in range(self.num_layers):
            self.kv_cache.set_kv(layer_id, locs, latents[layer_id, :, :r], latents[layer_id, :, r:])
        return logits

    # --- the decode step ----------------------------------------------------------------------
    @torch.no_grad()  # as prefill: a step outside no_grad would also chain the pool into an autograd graph
    def decode_forward(self, batch: ForwardBatch):
        """Whole decode step -> (next token ids [B] int64, non-finite-logits flags [B] bool, logits [B, vocab])."""
        model, backend = self.model, self.backend
        positions = batch.positions
        h = model.embed_tokens(batch.input_ids)  # [B, D]
        for layer_id, layer in enumerate(model.layers):
            x = layer.attn_norm(h)
            c_kv, k_pe = layer.attn.latent_kv(x, positions)  # [B, r], [B, dr]
            self.kv_cache.set_kv(layer_id, batch.out_cache_loc, c_kv, k_pe)
            q_nope, q_pe = layer.attn.absorbed_query(x, positions)  # [B, H, r], [B, H, dr]
            o_latent = backend.forward_decode(q_nope, q_pe, layer_id, batch)  # [B, H, r]
            h = h + layer.attn.output(o_latent.to(h.dtype))
            h = h + layer.mlp(layer.mlp_norm(h))
        logits = model.final_logits(h).float()  # [B, vocab]
        bad = ~torch.isfinite(logits).all(dim=-1)  # [B]
        return logits.argmax(dim=-1), bad, logits

    def check_decode(self, batch_size: int, graph_bs: int | None, eager: bool) -> None:
        """ValueError for ``decode``'s arguments that cannot run together, before any work: ``graph_bs`` with
        ``eager=True``, ``graph_bs`` without graphs, or a ``graph_bs`` that was not captured or is too small."""
        if graph_bs is None:
            return
        if eager:
            raise ValueError("decode: pass graph_bs or eager=True, not both")
        if self.graph_runner is None:
            raise ValueError(f"graph_bs: expected None with disable_cuda_graph=True (no graph was captured), "
                             f"got {graph_bs!r}")
        self.graph_runner.check_size(batch_size, graph_bs)

    @torch.no_grad()
    def decode(self, batch: ForwardBatch, graph_bs: int | None = None, eager: bool = False):
        """One decode step, by graph replay when a captured size fits, else eagerly.

        ``graph_bs``: replay the graph of that size (DP attention: the size the ranks agreed on);
        ``eager=True``: run eagerly whatever fits (DP attention: some rank is prefilling).
        """
        self.check_decode(batch.batch_size, graph_bs, eager)
        if graph_bs is not None:
            return self.graph_runner.replay(batch, graph_bs)
        if not eager and self.graph_runner is not None and self.graph_runner.can_run(batch.batch_size):
            return self.graph_runner.replay(batch)
        self.backend.init_forward_metadata(batch)
        return self.decode_forward(batch)
