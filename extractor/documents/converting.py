"""Documents converted beside the pipeline: in a worker thread, or in worker processes.

pypdfium2 holds the GIL while it reads a page, so a PDF converted in a thread stalls the
pipeline's own thread as much as converted on it: on an H100 host, 0.08 s of the 0.21 s a
Kleister contract costs that thread (``bench/results/documents.md``), the thread that also renders
every other document's prompts and reads their answers. In worker processes
(``EXTRACTOR_CONVERSION_PROCESSES``) a conversion runs on a core of its own.

A worker started by ``spawn`` imports the caller's main module again, as vLLM's engine core does:
a script needs ``if __name__ == "__main__":`` either way. The workers die with their owner
(``extractor``'s lifeline guard runs in each: :mod:`extractor.engines.lifeline`). A worker that
dies on a document (a crash inside a PDF, DOCX or HTML library) fails that document with a
:class:`~extractor.errors.DocumentError`, and the next conversion starts a new pool: the service
and the other documents go on.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from extractor.documents import Document, Limits, convert, read
from extractor.errors import ConfigError, DocumentError

log = logging.getLogger("extractor.documents")


class Converter:
    """Converts documents off the caller's event loop; ``processes`` 0: in a worker thread.

    ``fallback``: workers that cannot start (a script without ``if __name__ == "__main__":``) leave
    a warning and a thread to convert in, rather than a :class:`~extractor.errors.ConfigError`: for
    a count the machine chose, not one the user set.
    """

    def __init__(self, processes: int = 0, *, fallback: bool = False) -> None:
        if processes < 0:
            raise ValueError("processes must be >= 0")
        self.processes = processes
        self.fallback = fallback
        self._pool: ProcessPoolExecutor | None = None
        self._probe: Future[bool] = Future()  # the current pool's start check
        self._lock = threading.Lock()

    async def read(
        self, source: str | Path | bytes, *, media_type: str | None = None, name: str | None = None, limits: Limits
    ) -> Document:
        """:func:`extractor.documents.read` (a path is read where it is converted)."""
        if isinstance(source, Path):
            source = str(source)
        return await self._run(read, source, media_type=media_type, name=name, limits=limits)

    async def convert(
        self, data: bytes, *, media_type: str | None = None, name: str | None = None, limits: Limits
    ) -> Document:
        """:func:`extractor.documents.convert`."""
        return await self._run(convert, data, media_type=media_type, name=name, limits=limits)

    async def _run(self, function: object, source: str | bytes, **arguments: object) -> Document:
        pool = await self._started() if self.processes else None
        if pool is None:
            return await asyncio.to_thread(function, source, **arguments)  # type: ignore[arg-type]
        try:
            return await asyncio.wrap_future(pool.submit(function, source, **arguments))  # type: ignore[arg-type]
        except BrokenProcessPool:
            self._forget(pool)
            name = arguments.get("name") or (source if isinstance(source, str) else "the document")
            raise DocumentError(
                f"{name}: the process converting it died (a crash in its PDF, DOCX or HTML library); "
                "check that the file is complete, or convert it to PDF again"
            ) from None

    async def astart(self) -> None:
        """Start every worker now, not at the first document; idempotent (nothing to start for a thread).

        A spawned worker imports extractor and its libraries before its first conversion: on an H100
        host, four actors' eight workers, started by the first contracts, held those contracts for
        the first 6-7 s of a 21.7 s batch while the GPU waited (``bench/results/documents.md``).
        Started beside the engine, that import is over before the first document comes.
        """
        if self.processes:
            await self._started()

    async def _started(self) -> ProcessPoolExecutor | None:
        """The pool, its first worker checked to start: a worker that cannot start is no document's fault.

        Every caller awaits the same check, so a document sent while the workers are still starting
        waits for them and, if they cannot start, gets the setting's error rather than its own
        (None with ``fallback``: convert in a thread).
        """
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"))
                # a check per worker: each sent before any worker is idle starts one more, so all import at once
                checks = [self._pool.submit(_ready) for _ in range(self.processes)]
                self._probe = checks[0]  # the others' workers start as well; the first answers for the pool
            pool, probe = self._pool, self._probe
        try:
            await asyncio.wrap_future(probe)
        except BrokenProcessPool:
            self._forget(pool)
            if self.fallback:
                if self.processes:
                    log.warning(
                        "the document conversion workers could not start (a script that starts them needs "
                        '`if __name__ == "__main__":`); documents convert in a thread '
                        "(EXTRACTOR_CONVERSION_PROCESSES=0 says so and skips the attempt)"
                    )
                self.processes = 0
                return None
            raise ConfigError(
                "EXTRACTOR_CONVERSION_PROCESSES: the conversion workers could not start (a script that starts "
                'them needs `if __name__ == "__main__":`, and cannot be read from stdin); set it to 0 to '
                "convert in a thread"
            ) from None
        return pool

    def _forget(self, pool: ProcessPoolExecutor) -> None:
        """A broken pool is dropped (the next conversion starts another); its workers are gone already."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the workers (a conversion in flight fails); idempotent. The next conversion starts them again."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _ready() -> bool:
    """A worker's start check: sent by reference, it makes the worker import what converting needs, now."""
    return True
