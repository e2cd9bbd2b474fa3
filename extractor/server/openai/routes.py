"""Thin routes of ``/v1``: parse the body, run the job, answer in OpenAI's shapes (errors included)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Mapping

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from extractor.errors import ExtractorError
from extractor.server.admission import Ticket
from extractor.server.middleware import METRICS_LABELS
from extractor.server.openai import translate
from extractor.server.openai.protocol import ChatCompletionOut, ChatCompletionRequest, ErrorBody, ErrorDetail, ModelsOut
from extractor.server.openai.serving import OpenAIFront

PREFIX = "/v1"
router = APIRouter(prefix=PREFIX)
ROUTE_LABEL = "openai"
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def _front(request: Request) -> OpenAIFront:
    front: OpenAIFront = request.app.state.openai
    return front


def error_response(error: ExtractorError) -> JSONResponse:
    """One of our errors in OpenAI's shape, with the service's status code."""
    status, body, headers = translate.error(error)
    return JSONResponse(status_code=status, content=body.model_dump(mode="json"), headers=headers)


def http_error(status: int, detail: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """A routing error under ``/v1`` (unknown path 404, wrong method 405) in OpenAI's shape."""
    found = status != 404
    message = detail if found else "no such route under /v1: GET /v1/models, POST /v1/chat/completions"
    detail_out = ErrorDetail(message=message, type="invalid_request_error", code="not_found" if not found else None)
    return JSONResponse(
        status_code=status, content=ErrorBody(error=detail_out).model_dump(mode="json"), headers=headers
    )


class _AdmittedStream(StreamingResponse):
    """A streamed chat: however it ends, its engine request stops and its admission is given back."""

    def __init__(self, events: AsyncGenerator[bytes, None], ticket: Ticket) -> None:
        super().__init__(events, media_type="text/event-stream", headers=_SSE_HEADERS)
        self._events = events
        self._ticket = ticket

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._events.aclose()
            self._ticket.release()


def _replay(events: Iterable[bytes]) -> StreamingResponse:
    return StreamingResponse(iter(list(events)), media_type="text/event-stream", headers=_SSE_HEADERS)


@router.get("/models", response_model=ModelsOut)
async def models(request: Request) -> ModelsOut:
    """The engine's model and one entry per catalog task (a task's name is a ``model``)."""
    return _front(request).models()


@router.post(
    "/chat/completions",
    response_model=ChatCompletionOut,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "a completion; with `stream: true`, server-sent `chat.completion.chunk` events, then [DONE]",
        },
        400: {"model": ErrorBody},
        404: {"model": ErrorBody},
        422: {"model": ErrorBody, "description": "no valid result after every attempt (x-should-retry: false)"},
        429: {"model": ErrorBody},
    },
)
async def chat_completions(request: Request) -> Response:
    """Chat Completions: validated, grounded, re-asked JSON for a task or a schema; else a plain chat."""
    labels = request.scope[METRICS_LABELS] = {"route": ROUTE_LABEL}
    try:
        body = ChatCompletionRequest.model_validate_json(await request.body())
    except ValidationError as invalid:
        problems = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in invalid.errors(include_url=False)]
        return JSONResponse(status_code=400, content=translate.bad_body(problems).model_dump(mode="json"))
    front = _front(request)
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    try:
        job = front.plan(body)
        labels["task"] = job.label
        if job.kind == "chat" and body.stream:
            chat = front.chat_request(job)
            ticket = await front.admit_chat()
            return _AdmittedStream(front.chat_events(chat, model=body.model, include_usage=include_usage), ticket)
        if job.kind == "chat":
            out = await front.chat(job, model=body.model)
        else:
            out = await front.extract(job, model=body.model)
    except ExtractorError as error:
        return error_response(error)
    if body.stream:  # the answer is validated whole first, then streamed
        chunks = translate.stream_chunks(out, include_usage=include_usage)
        return _replay([*(translate.sse(c) for c in chunks), translate.SSE_DONE])
    return Response(out.model_dump_json(), media_type="application/json")
