"""The app factory: routes, the HTTP gate, error handlers, and the engine starting in the background."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import Scope

from extractor.api import Extractor
from extractor.errors import ExtractorError
from extractor.server import access, openai, pages, playground, review
from extractor.server.errors import NOT_FOUND_MESSAGE, error_response
from extractor.server.middleware import METRICS_LABELS, HttpGate
from extractor.server.openai.routes import ROUTE_LABEL as OPENAI_ROUTE
from extractor.server.protocol import ErrorOut
from extractor.server.reloading import CatalogReloader
from extractor.server.reviewing import ReviewDesk
from extractor.server.routes import router
from extractor.server.service import Service
from extractor.server.strict_json import StrictJsonGate
from extractor.server.uploads import UploadGate

__all__ = ["NOT_FOUND_MESSAGE", "create_app", "error_response"]
# The routes that admit engine jobs (POST): the gate asks the service before reading their bodies.
_ENGINE_BOUND = re.compile(r"/extract/(?P<task>[^/]+)(?P<batch>/batch)?|/chat|" + openai.PREFIX + "/chat/completions")


def create_app(
    extractor: Extractor, *, start_engine: bool = True, close_engine: bool = False, watch: bool = False
) -> FastAPI:
    """A FastAPI app serving ``extractor``.

    With ``start_engine``, the engine starts in the background when the app starts: ``/healthz``
    answers at once, ``/readyz`` turns 200 once a canary generation succeeds, and engine-bound
    requests get 503 until then. Without a lifespan (or with ``start_engine=False``), the first
    engine-bound request starts it and waits. With ``close_engine``, the engine is closed when
    the app shuts down (after uvicorn has drained the requests in flight). With ``watch``, the
    catalog reloads when its files change (SIGHUP and ``POST /tasks/reload`` reload it always).
    The review queue's database is migrated when the app starts (without a lifespan: on first use).
    The tasks are MCP tools at ``/mcp`` (:mod:`extractor.server.mcp`), served while the lifespan runs.
    """
    # the MCP server: an interface beside this one, built on the same service (imported here, once the
    # server package is whole: extractor.server.mcp imports its service and reloader)
    from extractor.server.mcp import http as mcp_http

    service = Service(extractor)
    reloader = CatalogReloader(extractor, service.metrics)
    mcp = mcp_http.endpoint(service, reloader)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(service.review.open)  # a database that cannot be reached stops the start
        if start_engine:
            service.begin_start()
        reloader.start(watch=watch)
        async with mcp.run():
            yield
        await reloader.stop()
        await service.stop()
        service.review.close()
        if close_engine:
            await extractor.aclose()

    app = FastAPI(title="extractor", version="0.1.0", lifespan=lifespan)
    app.state.extractor = extractor
    app.state.service = service
    app.state.reloader = reloader
    app.state.review = ReviewDesk(service, reloader)
    app.include_router(router)
    app.include_router(review.router)
    app.include_router(pages.router)
    openai.install(app, service)
    mcp_http.mount(app, mcp)
    if extractor.settings.playground:
        app.include_router(playground.router)
    app.add_middleware(StrictJsonGate)  # inside the gate: it sees the body once the gate has read it
    app.add_middleware(UploadGate)  # a multipart upload becomes its JSON body, before the JSON checks
    app.add_middleware(
        HttpGate,
        metrics=service.metrics,
        max_body_bytes=extractor.settings.max_body_bytes,
        task_label=service.task_label,
        error_shapes=[(openai.PREFIX + "/", openai.error_response)],
        body_timeout_s=extractor.settings.body_timeout_s,
        door=_EngineDoor(service),
    )
    access.install(app, extractor.settings)  # outermost: API keys before any body is read, CORS

    @app.exception_handler(ExtractorError)
    async def on_extractor_error(request: Request, error: ExtractorError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(HTTPException)
    async def on_http_error(request: Request, error: HTTPException) -> JSONResponse:
        if request.url.path.startswith(openai.PREFIX + "/"):  # /v1: OpenAI's error shape, even here
            return openai.http_error(error.status_code, str(error.detail), error.headers)
        # Unknown routes answer exactly like unknown tasks, whatever the path held.
        if error.status_code == 404:
            body = ErrorOut(error="not_found", message=NOT_FOUND_MESSAGE)
        else:
            body = ErrorOut(error="http_error", message=str(error.detail))
        return JSONResponse(
            status_code=error.status_code,
            content=body.model_dump(mode="json", exclude_none=True),
            headers=error.headers,
        )

    @app.exception_handler(RequestValidationError)
    async def on_bad_body(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = [(".".join(str(p) for p in e.get("loc", ())), _problem(e)) for e in error.errors()]
        detail: Any = [{"loc": loc.split("."), "msg": msg} for loc, msg in problems]
        listed = "; ".join(f"{loc}: {msg}" for loc, msg in problems[:3])
        message = f"the request body is invalid: {listed}"
        if not any(loc.startswith("body") for loc, _ in problems):  # a query or path parameter
            message = f"the request is invalid: {listed}"
        elif "json" not in request.headers.get("content-type", ""):
            message = "the request body must be JSON, sent with `content-type: application/json`"
        body = ErrorOut(error="bad_request", message=message, detail=detail)
        return JSONResponse(status_code=422, content=body.model_dump(mode="json", exclude_none=True))

    return app


class _EngineDoor:
    """The HTTP gate's door to the engine-bound routes: the service refuses (503, 429) or holds room.

    An unknown task is left to the routes (404 comes first, whatever the load). A request refused
    here never reaches a route, so it is labelled for the metrics here.
    """

    def __init__(self, service: Service) -> None:
        self.service = service

    def _labels(self, scope: Scope) -> dict[str, str | None] | None:
        """The metrics labels of an engine-bound request, or None for any other."""
        found = _ENGINE_BOUND.fullmatch(scope["path"]) if scope["method"] == "POST" else None
        if found is None:
            return None
        task = found["task"]
        if task is None:
            return {"route": "/chat" if scope["path"] == "/chat" else OPENAI_ROUTE, "task": None}
        if task not in self.service.extractor.catalog.tasks:
            return None
        return {"route": "/extract/{task}/batch" if found["batch"] else "/extract/{task}", "task": task}

    def refusal(self, scope: Scope) -> ExtractorError | None:
        labels = self._labels(scope)
        refused = self.service.refusal() if labels is not None else None
        if refused is not None:
            scope[METRICS_LABELS] = labels
        return refused

    def hold(self, scope: Scope) -> AbstractContextManager[None] | None:
        labels = self._labels(scope)
        if labels is None:
            return None
        try:
            ticket = self.service.hold()
        except ExtractorError:
            scope[METRICS_LABELS] = labels
            raise
        return self.service.admission.holding(ticket)


def _problem(error: Any) -> str:
    if error.get("type") == "json_invalid":
        position = error.get("loc", ("", "?"))[-1]
        return f"not valid JSON (at character {position}): {error.get('ctx', {}).get('error', '')}".rstrip(": ")
    return str(error.get("msg", ""))
