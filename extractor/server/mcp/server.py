"""The MCP server of a service: one tool per task, calls through the service's guards, told of every reload.

Built on the official SDK's low-level ``Server`` (the tools change with the catalog, so they are
listed from it at each ``tools/list``, not registered one by one). A call runs
:meth:`Service.extract`, the path of ``POST /extract/{task}``: the same text and document limits,
admission, deadline, metrics and review queue; every refusal is a tool error (``isError``).

A reload that adds, changes or removes a task tells the clients, in both eras of the protocol:
clients of 2026-07-28 get ``notifications/tools/list_changed`` on the ``subscriptions/listen``
streams they opened (the SDK's ``ListenHandler`` and bus); clients of the handshake era (2025-11-25
and before, what most assistants speak) get it on their connection's own channel (stdio, or the
HTTP session's GET stream), once they have sent a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import mcp_types as types
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from extractor.catalog.reload import ReloadReport
from extractor.catalog.tasks import Catalog
from extractor.errors import ExtractorError
from extractor.server.mcp import tools
from extractor.server.reloading import CatalogReloader
from extractor.server.service import Service

log = logging.getLogger("extractor.server.mcp")
NAME = "extractor"
INSTRUCTIONS = (
    "Each tool is one extraction task: give it `text` (or a base64 `document`) and it returns the task's "
    "fields as its output schema describes them, each value found in the text. A tool error says what to fix."
)
_NOTIFY_TIMEOUT_S = 2.0  # a client that stopped reading must not hold a reload up
PROGRESS_EVERY_S = 5.0  # while a call waits for the engine's start (stdio)


class _TaskServer(Server[Any]):
    """The SDK's server, advertising ``tools.listChanged`` on every transport (HTTP asks with no options)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions
        )


class TaskTools:
    """One service's tasks as MCP tools.

    With ``wait_for_engine`` (stdio: one client, which started the process, and whose first call
    may come the moment it did), a call made while the engine starts waits for the start to end,
    however long the model takes to load (minutes on a CPU), telling a client that asked for
    progress every few seconds; the client's own time limit, if it has one, cancels the wait. The
    request's time limit (``request_timeout_s``) then runs from the engine being ready, as for any
    call; a start that failed is the call's tool error. Without (HTTP), a call during the start
    gets the tool error of a 503, as ``POST /extract`` would.
    """

    def __init__(self, service: Service, *, wait_for_engine: bool = False) -> None:
        self.service = service
        self.wait_for_engine = wait_for_engine
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus, max_subscriptions=256)
        self._listed: tuple[Catalog, list[types.Tool]] | None = None
        # handshake-era connections that sent a request: told of reloads on their own channel
        self._connections: dict[int, Connection] = {}
        self.server = _TaskServer(
            NAME,
            version="0.1.0",
            title="extractor: extraction tasks as tools",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=self.listen,
            get_tool_input_schema=self._input_schema,
        )
        self.server.middleware.append(self._remember)

    @property
    def catalog(self) -> Catalog:
        return self.service.extractor.catalog

    def listed(self) -> list[types.Tool]:
        """The tools of the catalog serving now (built once per catalog: a reload swaps it whole)."""
        catalog = self.catalog
        if self._listed is None or self._listed[0] is not catalog:
            self._listed = (catalog, tools.tools(catalog))
        return self._listed[1]

    def follow(self, reloader: CatalogReloader) -> None:
        """Tell the clients after each reload of ``reloader`` that changed the tools."""
        reloader.listeners.append(self._reloaded)

    async def _reloaded(self, report: ReloadReport) -> None:
        if report.added or report.changed or report.removed:
            await self.tools_changed()

    async def tools_changed(self) -> None:
        """Send ``notifications/tools/list_changed`` to every client that can take it (best effort)."""
        await self.bus.publish(ToolsListChanged())
        for connection in list(self._connections.values()):
            with contextlib.suppress(Exception):  # a connection gone or not reading: it refetches on return
                async with asyncio.timeout(_NOTIFY_TIMEOUT_S):
                    await connection.send_tool_list_changed()

    async def _remember(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: note a handshake-era connection (its requests' sessions share it) until it closes."""
        # The SDK hands handlers a per-request session; the connection behind it is what outlives the
        # request and carries unsolicited notifications, and only the session holds it.
        connection = getattr(ctx.session, "_connection", None)
        if (
            isinstance(connection, Connection)
            and connection.protocol_version not in MODERN_PROTOCOL_VERSIONS
            and id(connection) not in self._connections
        ):
            key = id(connection)
            self._connections[key] = connection
            connection.exit_stack.callback(self._connections.pop, key, None)
        return await call_next(ctx)

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        return tools.input_schema() if name in self.catalog.tasks else None

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.listed())

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        catalog = self.catalog
        try:
            task = self.service.task(name, catalog)  # 404 first, as over HTTP
        except ExtractorError as error:
            return tools.error(error, catalog=catalog, name=name)
        body = tools.request(params.arguments)
        if isinstance(body, str):
            return tools.failure(body)
        if self.wait_for_engine:
            await self._engine_started(ctx)
        try:
            done = await self.service.extract(name, body.text, body.options, review=body.review, document=body.document)
        except ExtractorError as error:
            return tools.error(error, catalog=catalog, name=name)
        except Exception:  # a bug must still answer the call: a tool error, never a protocol crash
            log.exception("tool %s failed", name)
            return tools.failure("internal error; see the server's log", kind="internal", status=500)
        if done.result.task_version != task.version:  # reloaded between the lookup and the run
            task = self.catalog.tasks.get(name, task)
        return tools.success(task, done.result, review_id=done.review_id)

    async def _engine_started(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Until the engine's start ends (ready, or failed), a progress report every few seconds."""
        start = self.service.begin_start()
        waited = 0.0
        while not start.done():
            await asyncio.wait({start}, timeout=PROGRESS_EVERY_S)  # never cancels the start itself
            if not start.done():
                waited += PROGRESS_EVERY_S
                with contextlib.suppress(Exception):  # a client that went away: the call ends anyway
                    await ctx.session.report_progress(waited, None, f"the engine is starting ({waited:.0f} s so far)")
