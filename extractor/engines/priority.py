"""The CPU engine's processes at a lower scheduling priority than the service that feeds them.

On a CPU host vLLM's engine core and workers keep every core busy while they generate. The
service's own work (a 429 or 503 at the door, ``/healthz``, parsing the next request) is small but
waits behind them at equal priority: on 2 cores a refusal took up to 69 ms. Raising the engine's
nice value lets that work run first; the engine keeps whatever the service leaves idle, which is
nearly all of it. Linux only (nice is per thread there: each thread is set); elsewhere a no-op.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger("extractor.engine")


def threads_of(pids: Iterable[int]) -> list[int]:
    """The thread ids of ``pids`` (Linux's /proc); a process that ended has none."""
    found: list[int] = []
    for pid in pids:
        try:
            found += [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
    return found


def children() -> list[int]:
    """The descendants of this process (vLLM's engine core and its workers)."""
    import psutil

    return [child.pid for child in psutil.Process().children(recursive=True)]


def lower(pids: Iterable[int], nice: int) -> int:
    """Raise every thread of ``pids`` to at least ``nice`` (never lowers one); how many were changed."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return 0
    changed = 0
    for tid in threads_of(pids):
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                changed += 1
        except OSError:  # the thread ended, or another user's
            continue
    return changed


def lower_engine(nice: int) -> None:
    """:func:`lower` for this process's children, logged."""
    if nice <= 0:
        return
    pids = children()
    changed = lower(pids, nice)
    log.info("engine processes %s: %d threads at nice %d (EXTRACTOR_ENGINE_NICE)", pids, changed, nice)
