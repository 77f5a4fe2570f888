"""Paged latent KV cache: request rows, pages, the 576-wide latent cache, page-table fill."""

from mla_edu.kvcache.latent_cache import LatentKVCache
from mla_edu.kvcache.page_table import fill_page_table
from mla_edu.kvcache.pool import PagedAllocator, PoolExhausted, ReqToTokenPool, slots_for, slots_of

__all__ = [
    "LatentKVCache",
    "PagedAllocator",
    "PoolExhausted",
    "ReqToTokenPool",
    "fill_page_table",
    "slots_for",
    "slots_of",
]
