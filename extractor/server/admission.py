"""Admission control: at most ``max_in_flight`` engine jobs run, ``max_queued`` more wait, the rest get 429.

A job is one extraction (a batch of n items is n jobs) or one chat. Jobs are admitted whole at
the door (:meth:`Admission.admit`), then each takes one of the in-flight slots in turn
(:meth:`Admission.slot`). The engine batches whatever is in flight (continuous batching).

The HTTP gate asks :meth:`Admission.refusal` before it reads a body (a 429 then costs almost
nothing), and once the body is read it holds room for one job (:meth:`Admission.holding`) while
the request is parsed: the request's own :meth:`Admission.admit` takes that room over. Without
the hold, a burst of requests would all pass the gate before any was admitted, and the
rejected ones would pay for parsing and validation after all. :meth:`Admission.idle` waits until
nothing is admitted or held (a drain).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from types import TracebackType

from extractor.errors import OverloadedError

_MAX_RETRY_AFTER_S = 60
# The room held for the request running in this context (and the tasks it starts): see Admission.holding.
_HELD: ContextVar[Ticket | None] = ContextVar("extractor_admission_held", default=None)


class Ticket:
    """Room for ``jobs`` admitted jobs; release it exactly once (idempotent)."""

    def __init__(self, admission: Admission, jobs: int) -> None:
        self.admission = admission
        self.jobs = jobs

    def release(self) -> None:
        """Give the room back."""
        if self.jobs:
            self.admission.give_back(self.jobs)
            self.jobs = 0

    def __enter__(self) -> Ticket:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class Admission:
    """Counts admitted jobs and hands out in-flight slots, first come first served."""

    def __init__(self, *, max_in_flight: int, max_queued: int) -> None:
        self.max_in_flight = max_in_flight
        self.capacity = max_in_flight + max_queued
        self.admitted = 0
        self.in_flight = 0
        self._slots = asyncio.Semaphore(max_in_flight)
        self._idle = asyncio.Event()  # set while nothing is admitted
        self._idle.set()
        self._job_s = 1.0  # moving average of a job's time in its slot, for Retry-After

    @property
    def queued(self) -> int:
        """Admitted jobs waiting for a slot."""
        return self.admitted - self.in_flight

    def refusal(self, jobs: int = 1) -> OverloadedError | None:
        """The 429 that :meth:`admit` would raise for ``jobs`` more jobs, or None when they fit."""
        if self.admitted + jobs <= self.capacity:
            return None
        return OverloadedError(
            f"over the admission limit: {self.in_flight} in flight and {self.queued} queued "
            f"(EXTRACTOR_MAX_IN_FLIGHT + EXTRACTOR_MAX_QUEUED = {self.capacity}); retry later",
            retry_after=self.retry_after(),
        )

    def admit(self, jobs: int = 1) -> Ticket:
        """Room for ``jobs`` more jobs, or :class:`OverloadedError` (429) when they do not fit.

        Room held for this request (:meth:`holding`) counts towards them, and is handed over.
        """
        held = _HELD.get()
        have = held.jobs if held is not None and held.admission is self else 0
        refused = self.refusal(jobs - have)
        if refused is not None:
            raise refused
        self.admitted += jobs - have
        if held is not None and have:
            held.jobs = 0
        if jobs:
            self._idle.clear()
        return Ticket(self, jobs)

    @contextmanager
    def holding(self, ticket: Ticket) -> Iterator[None]:
        """Hold ``ticket``'s room for the request running in this context until the first :meth:`admit`.

        Tasks started inside inherit the hold (they copy the context); what is not handed over is
        released at the end.
        """
        token = _HELD.set(ticket)
        try:
            yield
        finally:
            _HELD.reset(token)
            ticket.release()

    def give_back(self, jobs: int) -> None:
        """``jobs`` admitted jobs are done (through :meth:`Ticket.release`)."""
        self.admitted -= jobs
        if not self.admitted:
            self._idle.set()

    async def idle(self) -> None:
        """Return once no job is admitted (at once when none is)."""
        await self._idle.wait()

    def retry_after(self) -> int:
        """Seconds until the queue has likely moved on: queued jobs over slots, times a job's time."""
        rounds = (self.queued + 1) / self.max_in_flight
        return max(1, min(_MAX_RETRY_AFTER_S, math.ceil(rounds * self._job_s)))

    @asynccontextmanager
    async def slot(self, *, deadline: float | None = None) -> AsyncIterator[None]:
        """Wait for an in-flight slot (``TimeoutError`` past the loop-time ``deadline``); hold it for the job."""
        async with asyncio.timeout_at(deadline):
            await self._slots.acquire()
        self.in_flight += 1
        started = time.perf_counter()
        try:
            yield
        finally:
            self.in_flight -= 1
            self._slots.release()
            self._job_s = 0.9 * self._job_s + 0.1 * (time.perf_counter() - started)
