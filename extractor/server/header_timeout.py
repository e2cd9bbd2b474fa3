"""A bound on how long a client may take to send a request line and headers, which uvicorn lacks.

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) and h11 bounds the size of
incomplete headers, but nothing bounds their *time*: a client sending one byte a second, or a
connection that never sends anything, is held for as long as it likes. :func:`protocol` wraps
the HTTP protocol uvicorn would pick (httptools or h11) so that a request's line and headers must
be complete within ``timeout_s`` of their first byte (of the connection, for its first request);
past it the server answers 408 and closes the connection (a connection that sent nothing is
closed without an answer, as uvicorn closes an idle keep-alive connection). The body has its own bound
(``body_timeout_s``, in the HTTP gate).

Only what every uvicorn HTTP protocol has is used: ``data_received``, ``connection_made``,
``connection_lost``, ``transport``, ``loop``, and ``cycle`` (the request being answered, replaced
when a new request's headers are complete).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from extractor.errors import HeaderTimeoutError
from extractor.server.errors import error_body


def _answer(timeout_s: float) -> bytes:
    error = HeaderTimeoutError(
        f"the request line and headers did not arrive within {timeout_s:g} s (EXTRACTOR_HEADER_TIMEOUT_S)"
    )
    status, body = error_body(error)
    content = json.dumps(body.model_dump(mode="json", exclude_none=True)).encode()
    head = f"HTTP/1.1 {status} Request Timeout\r\ncontent-type: application/json\r\n"
    return f"{head}content-length: {len(content)}\r\nconnection: close\r\n\r\n".encode() + content


def protocol(timeout_s: float, *, http: type[asyncio.Protocol] | None = None) -> type[asyncio.Protocol]:
    """``http`` (default: the one uvicorn picks) with the header timeout, for ``uvicorn.Config(http=...)``."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = http or AutoHTTPProtocol  # httptools when installed, else h11: both are subclassed the same way
    timed_out = _answer(timeout_s)

    class HeaderTimeoutProtocol(base):  # type: ignore[misc]
        _timer: asyncio.TimerHandle | None = None
        _partial = False  # some of the request has arrived

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._arm(partial=False)

        def data_received(self, data: bytes) -> None:
            answering = self.cycle
            super().data_received(data)
            if self.cycle is not answering:  # a new request's headers are complete
                self._disarm()
            elif self._timer is None and (self.cycle is None or self.cycle.response_complete):
                self._arm(partial=True)  # the first bytes of the next request on a kept-alive connection
            elif self._timer is not None:
                self._partial = True

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self, *, partial: bool) -> None:
            self._partial = partial
            self._timer = self.loop.call_later(timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expired(self) -> None:
            self._timer = None
            if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
                return
            if self._partial:
                self.transport.write(timed_out)
            self.transport.close()

    return HeaderTimeoutProtocol
