"""An event loop of the engine's own, on a background thread.

vLLM's AsyncLLM and httpx's connection pool are bound to the loop they were created on. Giving
an engine its own loop lets one engine serve any caller: a sync CLI (a fresh ``asyncio.run`` per
call), pytest's per-test loops, or uvicorn's loop. Cancelling the caller cancels the engine-side
task, which aborts the engine's request.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from extractor.errors import EngineError

T = TypeVar("T")


class LoopThread:
    """A running event loop on a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Run ``coro`` on this loop; await the result from the caller's loop."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def run(self, coro: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """Run ``coro`` on this loop and block until it is done (never call it from this loop)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=timeout)

    async def stream(self, source: Callable[[], AsyncIterator[T]]) -> AsyncGenerator[T, None]:
        """Iterate ``source()`` on this loop, yielding its items on the caller's loop.

        Closing this generator cancels the iteration on the engine's side.
        """
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        caller = asyncio.get_running_loop()

        def put(kind: str, value: Any) -> None:
            caller.call_soon_threadsafe(queue.put_nowait, (kind, value))

        async def pump() -> None:
            try:
                async for item in source():
                    put("item", item)
            except BaseException as error:  # noqa: BLE001 - handed over to the consumer
                put("error", error)
            finally:
                put("end", None)

        future = self.submit(pump())
        try:
            while True:
                kind, value = await queue.get()
                if kind == "end":
                    return
                if kind == "error":
                    if isinstance(value, EngineError):
                        raise value
                    raise EngineError(f"generation failed: {value}") from value
                yield value
        finally:
            future.cancel()

    def stop(self, *, timeout: float = 10.0) -> None:
        """Cancel what still runs on the loop, then stop it and join the thread."""
        # Let background tasks (vLLM's, probes) see their cancellation before the loop goes away.
        with contextlib.suppress(Exception):
            self.run(_cancel_pending(), timeout=timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=timeout)
        if not self.loop.is_running():
            self.loop.close()


async def _cancel_pending() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
