"""The app factory and the one place that maps errors to HTTP status codes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from extractor.api import Extractor
from extractor.errors import (
    EngineError,
    ExtractionFailed,
    ExtractorError,
    InputError,
    UnknownTaskError,
)
from extractor.server.protocol import ErrorOut
from extractor.server.routes import router

NOT_FOUND_MESSAGE = "no such task or route; GET /tasks lists the tasks"
_STATUS: list[tuple[type[ExtractorError], int, str]] = [
    (UnknownTaskError, 404, "not_found"),
    (ExtractionFailed, 422, "extraction_failed"),
    (InputError, 422, "bad_input"),
    (EngineError, 503, "engine_unavailable"),
    (ExtractorError, 500, "internal"),
]


def error_response(error: ExtractorError) -> JSONResponse:
    """The status code and body for one of our errors."""
    status, code = next((s, c) for kind, s, c in _STATUS if isinstance(error, kind))
    message = str(error)
    if isinstance(error, UnknownTaskError):
        # Never echo the name or anything from disk: the catalog answers, not the file system.
        message = NOT_FOUND_MESSAGE
    body = ErrorOut(
        error=code,
        message=message,
        attempts=error.attempts if isinstance(error, ExtractionFailed) else None,
    )
    return JSONResponse(status_code=status, content=body.model_dump(mode="json", exclude_none=True))


def create_app(extractor: Extractor, *, start_engine: bool = True) -> FastAPI:
    """A FastAPI app serving ``extractor``; the engine starts with the app unless told not to."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if start_engine:
            await extractor.astart()
        yield

    app = FastAPI(title="extractor", version="0.1.0", lifespan=lifespan)
    app.state.extractor = extractor
    app.include_router(router)

    @app.exception_handler(ExtractorError)
    async def on_extractor_error(request: Request, error: ExtractorError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(HTTPException)
    async def on_http_error(request: Request, error: HTTPException) -> JSONResponse:
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
        detail: Any = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in error.errors()]
        body = ErrorOut(error="bad_request", message="the request body is invalid; see detail", detail=detail)
        return JSONResponse(status_code=422, content=body.model_dump(mode="json", exclude_none=True))

    return app
