"""What ``EXTRACTOR_ADAPTER_SERVING=auto`` serves: an engine per merged adapter, or one engine with vLLM's multi-LoRA.

Pure but for :func:`gpu_total_bytes`. Chosen from the figures of ``bench/many_adapters.py``
(``bench/results/many_adapters.md``; SNIPS dev, 256 clients, the default model):

- 2 CPU cores: per-request LoRA decodes 3-5x slower (plain-PyTorch LoRA, torch.compile off for the
  whole engine): merged, always.
- one H200: 4 adapters merged (5 engines) answered 329 docs/s against 65 with LoRA (5.1x, the same
  F1), but the 5 engines took 323 s to start against 123 s, and each further merged engine adds
  60-80 s and a copy of the weights: 8 adapters merged had not started after 9 minutes, while
  LoRA served 8 in one engine (317 s with a cold compile cache, 43 docs/s).

So on a GPU: merged up to :data:`MERGED_MAX_ON_GPU` adapters, when each engine's memory share
holds its copy of the weights with room to spare; LoRA beyond.
"""

from __future__ import annotations

import logging

log = logging.getLogger("extractor.engine")

# More merged engines than this start too slowly on a GPU (60-80 s each, one after another)
MERGED_MAX_ON_GPU = 4
# A merged engine's memory share must hold its weights this many times over (the rest: KV cache)
WEIGHTS_SHARE_ROOM = 2


def choose(
    *, adapters: int, cuda: bool, weights_bytes: int, gpu_bytes: int | None, memory_utilization: float
) -> tuple[str, str]:
    """``("merged" | "lora", why)`` for ``adapters`` adapters the tasks need, none merged into the model yet.

    ``gpu_bytes``: the GPU's memory (None: unknown, the count alone decides).
    """
    if not cuda:
        return "merged", "on CPU, per-request LoRA decodes 3-5x slower than a merged model"
    if adapters > MERGED_MAX_ON_GPU:
        return "lora", f"{adapters} adapters: more than {MERGED_MAX_ON_GPU} merged engines start too slowly"
    if gpu_bytes is not None:
        share = memory_utilization * gpu_bytes / (adapters + 1)
        if weights_bytes * WEIGHTS_SHARE_ROOM > share:
            return "lora", (
                f"{adapters + 1} engines' memory shares ({share / 2**30:.1f} GiB each) cannot hold "
                f"{WEIGHTS_SHARE_ROOM}x the weights ({weights_bytes / 2**30:.1f} GiB)"
            )
    return "merged", f"{adapters} adapter(s): merged engines serve them faster than LoRA on a GPU"


def gpu_total_bytes() -> int | None:
    """The first GPU's memory, from NVML (no CUDA context in this process); None when NVML is missing."""
    try:
        import pynvml  # type: ignore[import-not-found]  # nvidia-ml-py: a dependency of vLLM on CUDA only

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML library or no GPU: the count alone decides
        return None
