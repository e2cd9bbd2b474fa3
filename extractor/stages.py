"""Where a document's time goes: seconds per stage of the pipeline, summed over one document.

A :class:`Clock` is set for the work of one document (:func:`measuring`); each stage the pipeline
runs adds its seconds to it (:func:`stage`), through a context variable, so that the concurrent
requests of one document (its passages, its fields) add to the same clock and the requests of
other documents do not. Stages on the event loop (rendering, tokenizing, grammar, reading) add
up to the loop time they took; ``engine`` is the time spent waiting on the engine, summed over
requests that overlap, so it may exceed the document's wall time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

STAGES = (
    "conversion",  # the document to text (PDF, HTML, DOCX; OCR)
    "splitting",  # the text cut into chunks or passages that fit the window
    "ranking",  # each field's passages chosen
    "rendering",  # prompts rendered (examples, hints, feedback)
    "tokenizing",  # prompts counted against the window
    "grammar",  # what decoding is held to, per request
    "engine",  # waiting on the engine (summed over concurrent requests)
    "reading",  # answers parsed, repaired, typed, validated and grounded
    "merging",  # chunks' and passages' answers merged
)


@dataclass
class Clock:
    """Seconds per stage for one document."""

    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to stage ``name``."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def rounded(self) -> dict[str, float]:
        """The stages in :data:`STAGES` order, to the millisecond."""
        return {name: round(self.seconds[name], 3) for name in STAGES if name in self.seconds}


_CURRENT: ContextVar[Clock | None] = ContextVar("extractor_stage_clock", default=None)


@contextmanager
def measuring() -> Iterator[Clock]:
    """A fresh clock for the work done inside the block (and the tasks it starts)."""
    clock = Clock()
    token = _CURRENT.set(clock)
    try:
        yield clock
    finally:
        _CURRENT.reset(token)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Add the block's seconds to stage ``name`` of the current clock (none set: nothing is kept)."""
    clock = _CURRENT.get()
    if clock is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        clock.add(name, time.perf_counter() - started)


def total(clocks: Iterator[Mapping[str, float]] | list[Mapping[str, float]]) -> dict[str, float]:
    """Stage seconds summed over documents, in :data:`STAGES` order."""
    summed: dict[str, float] = {}
    for seconds in clocks:
        for name, value in seconds.items():
            summed[name] = summed.get(name, 0.0) + float(value)
    return {name: round(summed[name], 3) for name in STAGES if name in summed}
