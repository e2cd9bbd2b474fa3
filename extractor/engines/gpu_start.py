"""Engines that share a GPU start one at a time.

vLLM sizes an engine's KV cache at its start from what its profiling run saw: the memory its
share of the card (``gpu_memory_utilization``) allows, less what the card's used memory grew by
while it profiled. That growth is counted for the whole device, so an engine started beside
another that is taking its own memory at the same moment counts the other's memory as its own:
on one H100, four engines of ``extractor batch --ray --actors 4 --gpus-per-actor 0.25`` started
together each stopped with "No available memory for the cache blocks" (2026-12-07), where each
quarter was ample for the model.

:func:`one_at_a_time` holds a lock file under the home for the length of a start, one per set of
visible devices (``CUDA_VISIBLE_DEVICES``: Ray gives every actor on a shared GPU the same one), so
that the next engine profiles only once the one before has taken its memory. Engines on other
GPUs, and an engine started alone, never wait.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)


def lock_path(home: Path, devices: str | None) -> Path:
    """The lock file of the devices ``devices`` (``CUDA_VISIBLE_DEVICES``; None or empty: every device)."""
    name = re.sub(r"[^0-9A-Za-z,-]", "_", devices or "") or "all"
    return home / "run" / "gpu-start" / f"{name}.lock"


@contextlib.contextmanager
def one_at_a_time(home: Path, devices: str | None = None) -> Iterator[float]:
    """Hold the start lock of these devices (default: this process's); yields the seconds waited for it."""
    if devices is None:
        devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    path = lock_path(home, devices)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        started = time.monotonic()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another engine is starting on this GPU (%s): this one starts after it", path.name)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield time.monotonic() - started
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
