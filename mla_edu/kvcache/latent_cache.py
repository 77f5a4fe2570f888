"""The paged latent KV cache: per layer ``[num_pages, page_size, kv_lora_rank + qk_rope_head_dim]``.

One row per token slot holds ``c_kv`` (the compressed KV, 512 numbers at DeepSeek dims)
followed by ``k_pe`` (the shared RoPE key, 64 numbers): 576 numbers, SGLang's
``kv_c_and_k_pe_cache`` layout that ``cutlass_mla_decode`` reads.
"""

from __future__ import annotations

import torch
from mla_edu.device import check_device, values_readable
from mla_edu.util import is_int


class LatentKVCache:
    def __init__(
        self,
        num_layers: int,
        num_pages: int,
        page_size: int,
        kv_lora_rank: int = 512,
        qk_rope_head_dim: int = 64,
        dtype: torch.dtype = torch.float32,
        device="cpu",
    ):
        for name, v in (("num_layers", num_layers), ("num_pages", num_pages), ("page_size", page_size),
                        ("kv_lora_rank", kv_lora_rank), ("qk_rope_head_dim", qk_rope_head_dim)):
            if not is_int(v):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
            if v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        self.num_layers = num_layers
        self.num_pages = num_pages
        self.page_size = page_size
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim
        self.head_dim = kv_lora_rank + qk_rope_head_dim
        self.dtype = dtype
        self.device = check_device("device", device)
        # one tensor per layer: [num_pages, page_size, kv_lora_rank + rope]
        self.kv_buffer = [
            torch.zeros((num_pages, page_size, self.head_dim), dtype=dtype, device=self.device)
            for _ in range(num_layers)
        ]

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    def bytes_per_token(self) -> int:
        """Bytes one token occupies across all layers."""
        return self.num_layers * self.head_dim * torch.empty((), dtype=self.dtype).element_size()

    def get_kv_buffer(self, layer: int) -> torch.Tensor:
        """``kv_c_and_k_pe_cache`` of ``layer``: ``[num_pages, page_size, kv_lora_rank + rope]``."""
        self._check_layer(layer)
        return self.kv_buffer[layer]

    def c_kv(self, layer: int) -> torch.Tensor:
        """View ``[num_slots, kv_lora_rank]`` of the latent part."""
        return self.get_kv_buffer(layer).view(-1, self.head_dim)[:, : self.kv_lora_rank]

    def k_pe(self, layer: int) -> torch.Tensor:
        """View ``[num_slots, qk_rope_head_dim]`` of the RoPE part."""
        return self.get_kv_buffer(layer).view(-1, self.head_dim)[:, self.kv_lora_rank :]

    def set_kv(self, layer: int, loc: torch.Tensor, c_kv: torch.Tensor, k_pe: torch.Tensor) -> None:
        """Write ``c_kv [N, kv_lora_rank]`` and ``k_pe [N, rope]`` into token slots ``loc [N]``.

        Pure tensor ops (``index_copy_``), no host sync: safe inside a captured graph. On the CPU outside a capture,
        slots outside the pool are refused (ValueError) before anything is written. A slot may repeat: a padded
        batch's rows all write the padding slot.
        """
        self._check_layer(layer)
        is_tensor = isinstance(loc, torch.Tensor)
        if not is_tensor or loc.dim() != 1 or loc.dtype.is_floating_point or loc.dtype == torch.bool:
            got = f"{type(loc).__name__} {loc.dtype} {tuple(loc.shape)}" if is_tensor else type(loc).__name__
            raise TypeError(f"loc must be a 1-D integer tensor of slots, got {got}")
        n = loc.numel()
        for name, t, d in (("c_kv", c_kv, self.kv_lora_rank), ("k_pe", k_pe, self.qk_rope_head_dim)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
            if tuple(t.shape) != (n, d):
                raise ValueError(f"{name} must have shape [{n}, {d}] (N = len(loc)), got {tuple(t.shape)}")
            if not t.dtype.is_floating_point:
                raise TypeError(f"{name} must be floating point, got {t.dtype}")
        if values_readable(loc):  # on the CPU outside a capture (a GPU would wait here: its index_copy_ asserts)
            wide = loc.to(torch.int64)
            bad = wide[(wide < 0) | (wide >= self.num_slots)]
            if bad.numel():
                raise ValueError(f"loc: expected slots in [0, {self.num_slots}) (num_slots), got "
                                 f"{bad[:4].tolist()}")
        rows = self.kv_buffer[layer].view(-1, self.head_dim)  # [num_slots, 576]
        loc = loc.to(device=rows.device, dtype=torch.int64)
        new = torch.cat([c_kv.to(self.dtype), k_pe.to(self.dtype)], dim=-1)  # [N, 576]
        rows.index_copy_(0, loc, new)

    def _check_layer(self, layer: int) -> None:
        if not is_int(layer):
            raise TypeError(f"layer must be an int, got {type(layer).__name__}")
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be in [0, {self.num_layers}), got {layer}")
