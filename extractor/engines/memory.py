"""The CPU KV cache's size, from the memory that is free when the user set none. Pure but for :func:`free_bytes`.

vLLM on CPU takes its KV cache up front (``VLLM_CPU_KVCACHE_SPACE`` GiB). A fixed default
(4 GiB) fails to start on a machine with less free memory; sized from what is free, the
engine starts, with a smaller cache (fewer sequences batched at once), and the log says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3
DEFAULT_KV_CACHE_GIB = 4
# Left free beside the weights and the cache: the activations, torch, the tokenizer, Python itself.
HEADROOM_BYTES = GIB


@dataclass(frozen=True)
class KvCacheSize:
    """How many GiB the CPU KV cache gets, and what the log should say about it (None: nothing to say)."""

    gib: int
    note: str | None = None


def cpu_kv_cache_size(*, requested: int | None, available_bytes: int, model_bytes: int) -> KvCacheSize:
    """``requested`` when the user set it; else the default, or less when the free memory cannot hold it.

    The cache gets what is free less the weights and :data:`HEADROOM_BYTES`, at most
    :data:`DEFAULT_KV_CACHE_GIB` and at least 1 GiB (below that vLLM would not start either way;
    the note says so).
    """
    if requested is not None:
        return KvCacheSize(requested)
    room = available_bytes - model_bytes - HEADROOM_BYTES
    fits = math.floor(room / GIB) if room > 0 else 0
    if fits >= DEFAULT_KV_CACHE_GIB:
        return KvCacheSize(DEFAULT_KV_CACHE_GIB)
    free = available_bytes / GIB
    if fits < 1:
        return KvCacheSize(
            1,
            f"only {free:.1f} GiB of memory is free: trying a 1 GiB CPU KV cache (the default is "
            f"{DEFAULT_KV_CACHE_GIB} GiB); the engine may fail to start: free memory, or set "
            "EXTRACTOR_KV_CACHE_SPACE_GIB",
        )
    return KvCacheSize(
        fits,
        f"{free:.1f} GiB of memory is free: the CPU KV cache gets {fits} GiB instead of the default "
        f"{DEFAULT_KV_CACHE_GIB} (fewer sequences batched at once); set EXTRACTOR_KV_CACHE_SPACE_GIB to choose",
    )


def free_bytes() -> int:
    """Memory available to new allocations now (psutil's ``available``)."""
    import psutil

    return int(psutil.virtual_memory().available)


def folder_bytes(folder: Path) -> int:
    """The size of the files in a model folder (what its weights take once loaded, about)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
