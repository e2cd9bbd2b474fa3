"""Where an extraction's time goes: wall time per pipeline stage, by wrapping the stage functions.

Synchronous stages (render, constraint, parse/validate, grounding, journal writes) run on the event
loop one at a time, so their sums are real time spent; ``generate`` is the time requests wait on the
engine, summed over concurrent requests (it overlaps itself: compare it with the run's wall time,
not with the other stages).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from extractor import pipeline
from extractor.jobs import batch

# (module, attribute, stage): what the pipeline and batch call, by the name they call it.
_SYNC = [
    (pipeline, "render", "render (prompt + example selection)"),
    (pipeline.grounded_decoding, "constrain", "constraint (grammar build)"),
    (pipeline, "parse_and_validate", "parse + validate"),
    (pipeline.grounding, "locate", "grounding"),
    (batch._Writer, "flush", "journal writes (fsync)"),
]


@contextmanager
def timed(engine: Any) -> Iterator[dict[str, float]]:
    """Patch the stage functions (and ``engine.generate``) for the block; yields seconds per stage."""
    seconds: dict[str, float] = defaultdict(float)
    restore: list[tuple[Any, str, Any]] = []

    def wrap_sync(func: Callable[..., Any], stage: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                seconds[stage] += time.perf_counter() - start

        return wrapper

    for module, name, stage in _SYNC:
        if hasattr(module, name):
            original = getattr(module, name)
            restore.append((module, name, original))
            setattr(module, name, wrap_sync(original, stage))
    generate = engine.generate

    async def timed_generate(request: Any) -> Any:
        start = time.perf_counter()
        try:
            return await generate(request)
        finally:
            seconds["generate (engine, overlapping)"] += time.perf_counter() - start

    engine.generate = timed_generate
    try:
        yield seconds
    finally:
        engine.generate = generate
        for module, name, original in restore:
            setattr(module, name, original)
