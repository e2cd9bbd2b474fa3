"""The MCP server mounted in the HTTP app at ``/mcp`` (the SDK's streamable HTTP transport).

The app's gates apply as to every route: the API key (``Authorization: Bearer``, 401 before any
body is read), the body limit and body timeout (413, 408), strict JSON (400), the request metrics.
The SDK's own limits are set to the service's: its body limit to ``max_body_bytes``, and, on a
loopback bind, its DNS-rebinding check (a web page must not reach a local server through a host
name it controls), as the SDK's own app does.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from extractor.config import Settings
from extractor.errors import EngineNotReadyError
from extractor.server.errors import error_response
from extractor.server.mcp.server import TaskTools
from extractor.server.reloading import CatalogReloader
from extractor.server.service import Service

PATH = "/mcp"
_LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
_LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def _security(settings: Settings) -> TransportSecuritySettings | None:
    host = settings.host.strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return None  # reached by name through a proxy or a balancer: the Host header is theirs
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=_LOOPBACK_HOSTS, allowed_origins=_LOOPBACK_ORIGINS
    )


class McpEndpoint:
    """The ASGI app at ``/mcp``: the SDK's session manager, running while the app runs."""

    def __init__(self, tools: TaskTools, settings: Settings) -> None:
        self.tools = tools
        self.manager = StreamableHTTPSessionManager(
            app=tools.server,
            security_settings=_security(settings),
            max_request_body_size=settings.max_body_bytes,
        )
        self._running = False

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve MCP sessions (the app's lifespan); on exit, end every session and listen stream."""
        async with self.manager.run():
            self._running = True
            try:
                yield
            finally:
                self._running = False
                self.tools.listen.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._running:  # an app driven without its lifespan (a bare ASGI client): 503, not the SDK's 500
            refused = EngineNotReadyError("the MCP endpoint runs once the app has started (its lifespan)")
            await error_response(refused)(scope, receive, send)
            return
        await self.manager.handle_request(scope, receive, send)


def endpoint(service: Service, reloader: CatalogReloader) -> McpEndpoint:
    """The MCP endpoint of ``service``, told of ``reloader``'s reloads; :func:`mount` it, run it in the lifespan."""
    tools = TaskTools(service)
    tools.follow(reloader)
    return McpEndpoint(tools, service.settings)


def mount(app: FastAPI, mcp: McpEndpoint) -> None:
    """Serve ``mcp`` at ``/mcp`` (GET: the server's stream, POST: messages, DELETE: end a session)."""
    app.router.routes.append(Route(PATH, endpoint=mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False))
