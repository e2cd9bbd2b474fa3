"""The HTTP gate, a plain ASGI middleware: early refusals, body limit, client disconnects, request metrics.

- A body over ``max_body_bytes`` gets 413 from its ``Content-Length`` or while it is read,
  before any parsing; a body still incomplete ``body_timeout_s`` after the request began gets
  408 and the connection is closed (a slow-loris client holds nothing for long).
- The ``door`` (the app's, for engine-bound routes) may refuse a request before its body is read:
  503 while the service drains, 429 over the admission limit. Once the body is read, the door
  holds room for the request while it is parsed, or refuses it then. A refused request costs
  neither JSON parsing nor validation, so refusals stay fast however many clients retry.
- Once the body is read, the request runs in a task of its own while the gate listens for the
  client going away: a disconnect cancels the task, and cancelling aborts the engine request.
- Every request is counted by route template, task (a catalog name or ``-``) and status
  (499 for a client that left).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extractor.errors import BodyTimeoutError, ExtractorError, PayloadTooLargeError
from extractor.server.errors import error_response
from extractor.server.metrics import Metrics

CLIENT_GONE = 499  # nginx's code for a client that closed the connection before the answer
# A handler may set ``scope[METRICS_LABELS] = {"route": ..., "task": ...}`` to name its request
# in the metrics otherwise than by route template and ``{task}`` path parameter (the OpenAI front).
METRICS_LABELS = "extractor.metrics_labels"
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class Door(Protocol):
    """Who may pass the gate to an engine-bound route."""

    def refusal(self, scope: Scope) -> ExtractorError | None:
        """The answer to give before the body is read, or None."""

    def hold(self, scope: Scope) -> AbstractContextManager[None] | None:
        """Room held for the request while the app runs (raises :class:`ExtractorError` when refused)."""


class _ClientGone(Exception):  # noqa: N818 - control flow inside this module
    """The client disconnected while sending its body."""


class HttpGate:
    """Wraps the app; see the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        max_body_bytes: int,
        task_label: Callable[[Any], str],
        error_shapes: Sequence[tuple[str, Callable[[ExtractorError], Response]]] = (),
        body_timeout_s: float | None = None,
        door: Door | None = None,
    ) -> None:
        self.app = app
        self.door = door
        self.body_timeout_s = body_timeout_s
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.task_label = task_label
        # (path prefix, error response) for APIs with an error shape of their own (the OpenAI front's)
        self.error_shapes = tuple(error_shapes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def tracked_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if scope["method"] in _WITH_BODY:
                if not await self._call_with_body(scope, receive, tracked_send):
                    status = CLIENT_GONE
            else:
                await self.app(scope, receive, tracked_send)
        finally:
            route = scope.get("route")
            named = scope.get(METRICS_LABELS, {})
            self.metrics.observe_request(
                route=named.get("route") or getattr(route, "path", "-"),
                task=self.task_label(named.get("task", scope.get("path_params", {}).get("task"))),
                status=status,
                seconds=time.perf_counter() - started,
            )

    async def _call_with_body(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Run the app on the whole body; False when the client left before the answer."""
        refused = self._refusal(scope)
        if refused is not None:
            await self._answer(scope, receive, send, refused)
            return True
        try:
            body = await self._read_body(scope, receive, send)
        except _ClientGone:
            return False
        if body is None:
            return True  # answered 413 or 408
        try:
            held = self.door.hold(scope) if self.door is not None else None
        except ExtractorError as error:
            await self._answer(scope, receive, send, error)
            return True
        with held or nullcontext():
            return await self._run(scope, body, receive, send)

    async def _run(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> bool:
        gone = asyncio.Event()
        replayed = answered = False

        async def answering(message: Message) -> None:
            nonlocal answered
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = True  # a disconnect from now on is the normal end, not a client leaving

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def run() -> None:
            await self.app(scope, replay, answering)

        handler = asyncio.create_task(run())

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            if not answered:
                handler.cancel()

        watcher = asyncio.create_task(watch())
        try:
            await handler
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not gone.is_set() or (current is not None and current.cancelling()):
                raise
            return False
        finally:
            watcher.cancel()
        return True

    def _refusal(self, scope: Scope) -> ExtractorError | None:
        """The answer to give before reading the body (413 from ``Content-Length``, then the door's)."""
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return self._too_large()
        return self.door.refusal(scope) if self.door is not None else None

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s if self.body_timeout_s is not None else None
        while True:
            try:
                message = await asyncio.wait_for(receive(), None if deadline is None else deadline - loop.time())
            except TimeoutError:
                error = BodyTimeoutError(
                    f"the request body did not arrive within {self.body_timeout_s} s (EXTRACTOR_BODY_TIMEOUT_S)"
                )
                await self._answer(scope, receive, send, error, close=True)
                return None
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._answer(scope, receive, send, self._too_large())
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"the request body is over {self.max_body_bytes} bytes (EXTRACTOR_MAX_BODY_BYTES); "
            "send less, or split a batch"
        )

    def _shaped(self, scope: Scope, error: ExtractorError) -> Response:
        """The error in the shape of the route asked (the OpenAI front's under /v1), else the service's."""
        path = str(scope.get("path", ""))
        respond = next((r for prefix, r in self.error_shapes if path.startswith(prefix)), error_response)
        return respond(error)

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, error: ExtractorError, *, close: bool = False
    ) -> None:
        """Answer ``error`` without running the app; after a 413 or with ``close``, end the connection."""
        response = self._shaped(scope, error)
        if close or isinstance(error, PayloadTooLargeError):  # the rest of a large body is never read
            response.headers["connection"] = "close"
        with contextlib.suppress(OSError):
            await response(scope, receive, send)
