"""Thin routes: wire model in, service call, wire model out. Errors go to server.errors."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from extractor.catalog.tasks import Task
from extractor.errors import ExtractorError, TaskError
from extractor.results import ExtractionResult
from extractor.server.admission import Ticket
from extractor.server.errors import error_body
from extractor.server.metrics import CONTENT_TYPE
from extractor.server.protocol import (
    BatchItemOut,
    BatchOut,
    BatchRequest,
    ChatRequest,
    ChatResponse,
    ErrorOut,
    ExtractOut,
    ExtractRequest,
    FieldOut,
    PromptOut,
    ReadyOut,
    ReloadOut,
    TaskDetailOut,
    TaskErrorOut,
    TaskOut,
    TasksOut,
)
from extractor.server.reloading import CatalogReloader
from extractor.server.service import Service

router = APIRouter()
CHAT_SEPARATOR = b"\0"
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": text}
    for status, text in [
        (
            400,
            "the body is not JSON we accept: not UTF-8, malformed, a duplicate key, NaN or Infinity, "
            "a number over 100 characters, nesting over 32 levels",
        ),
        (404, "unknown task"),
        (408, "the body did not arrive within body_timeout_s"),
        (413, "body, text or document over the limit (pages, characters, a DOCX's unpacked size)"),
        (415, "a document of a type extractor does not read (PDF, HTML, DOCX and text only)"),
        (
            422,
            "bad body, no valid result after every attempt, or a document that cannot be read "
            "(corrupt, encrypted, no text layer)",
        ),
        (429, "over the admission limit (see Retry-After)"),
        (502, "the remote engine's servers failed on every try"),
        (503, "engine not ready, or the review queue's database unavailable (a result sent to review)"),
        (504, "past the per-request timeout"),
    ]
}


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


@router.post("/extract/{task}", response_model=ExtractOut, responses=_ERRORS)
async def extract(task: str, body: ExtractRequest, request: Request) -> Any:
    """Extract ``task`` from ``body.text`` or ``body.document`` (sent to review when asked, or under the threshold).

    Also takes ``multipart/form-data``: a ``file`` part (the document), optional ``options`` (JSON)
    and ``review`` (true/false) parts.
    """
    done = await _service(request).extract(task, body.text, body.options, review=body.review, document=body.document)
    fields = {name: getattr(done.result, name) for name in ExtractionResult.model_fields}
    return ExtractOut.model_construct(**fields, review_id=done.review_id)


@router.post("/extract/{task}/batch", response_model=BatchOut, responses=_ERRORS)
async def extract_batch(task: str, body: BatchRequest, request: Request) -> BatchOut:
    """Extract ``task`` from each item: one result or one error record per item, in order."""
    outcomes = await _service(request).extract_batch(task, body.items, body.options, review=body.review)
    results = []
    for item, outcome in zip(body.items, outcomes, strict=True):
        if isinstance(outcome, ExtractorError):
            status, error = error_body(outcome)
            results.append(BatchItemOut(id=item.id, status=status, error=error))
        else:
            results.append(BatchItemOut(id=item.id, status=200, result=outcome.result, review_id=outcome.review_id))
    return BatchOut(results=results)


def _task_out(task: Task, error: TaskError | None = None, *, model: str = "") -> TaskOut:
    return TaskOut(
        name=task.name,
        title=task.title,
        description=task.description,
        fields=[
            FieldOut(name=f.name, description=f.description, type=f.type, required=f.required) for f in task.fields
        ],
        examples=len(task.examples),
        pool=len(task.pool) if task.pool is not None else 0,
        examples_per_request=task.examples_per_request,
        model=task.settings.model or model,
        warnings=list(task.warnings),
        version=task.version,
        stale=error is not None,
        error=_error_out(error) if error is not None else None,
    )


def _error_out(error: TaskError) -> TaskErrorOut:
    return TaskErrorOut(file=error.path, pointer=error.pointer, message=error.reason)


@router.get("/tasks", response_model=TasksOut)
async def tasks(request: Request) -> TasksOut:
    """The loaded tasks, and the tasks left out with their load errors."""
    service = _service(request)
    catalog = service.extractor.catalog  # one version of the catalog for the whole answer
    model = service.settings.model
    return TasksOut(
        tasks=[_task_out(catalog.tasks[name], catalog.stale.get(name), model=model) for name in catalog.names()],
        errors=[_error_out(e) for e in catalog.errors],
    )


@router.post("/tasks/reload", response_model=ReloadOut)
async def reload_tasks(request: Request) -> ReloadOut:
    """Reload the catalog from its files now (the engine keeps running); what changed."""
    reloader: CatalogReloader = request.app.state.reloader
    report = await reloader.reload("http")
    catalog = _service(request).extractor.catalog
    return ReloadOut(
        generation=reloader.generation,
        added=list(report.added),
        changed=list(report.changed),
        removed=list(report.removed),
        stale=list(report.stale),
        errors=[_error_out(e) for e in catalog.errors],
        duration_ms=round(report.seconds * 1000, 2),
    )


@router.get("/tasks/{task}", response_model=TaskDetailOut, responses={404: _ERRORS[404]})
async def task_detail(task: str, request: Request) -> TaskDetailOut:
    """One task: schema, prompt variables, settings, warnings (a task left out: 404 with why)."""
    service = _service(request)
    catalog = service.extractor.catalog
    spec = service.task(task, catalog)
    return TaskDetailOut(
        **_task_out(spec, catalog.stale.get(spec.name), model=service.settings.model).model_dump(),
        schema=dict(spec.source_schema or spec.schema),
        engine_schema=dict(spec.engine_schema),
        prompt=PromptOut(
            file=spec.prompt_path.name,
            variables=service.prompt_variables(spec),
            layout="instruction" if spec.instruction_only else "turns",
        ),
        settings=dataclasses.asdict(spec.settings),
        example_texts=[e.text for e in (*spec.examples, *(spec.pool.examples[:8] if spec.pool else ()))],
    )


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive (says nothing about the engine: see /readyz)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=ReadyOut, responses={503: {"model": ReadyOut}})
async def readyz(request: Request) -> JSONResponse:
    """200 when the engine answers a 1-token canary generation (cached a few seconds), else 503."""
    service = _service(request)
    ok, reason = await service.readiness()
    body = ReadyOut(ready=ok, model=service.extractor.engine.model_name, reason=reason)
    headers = None if ok else {"retry-after": "5"}
    return JSONResponse(status_code=200 if ok else 503, content=body.model_dump(), headers=headers)


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus metrics."""
    return Response(_service(request).metrics.render(), media_type=CONTENT_TYPE)


class _ChatStream(StreamingResponse):
    """A streamed chat: when it ends, however it ends, its engine request stops and its admission is given back."""

    def __init__(self, chunks: AsyncGenerator[bytes, None], ticket: Ticket) -> None:
        super().__init__(chunks, media_type="text/plain; charset=utf-8")
        self._chunks = chunks
        self._ticket = ticket

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._chunks.aclose()
            self._ticket.release()


def _chunk(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8") + CHAT_SEPARATOR


async def _chat_chunks(texts: AsyncGenerator[str, None]) -> AsyncGenerator[bytes, None]:
    text = ""
    async with aclosing(texts):
        try:
            async for text in texts:
                yield _chunk({"text": text})
        except ExtractorError as error:  # the status line is gone: the error goes in the stream
            _, out = error_body(error)
            yield _chunk({"text": text, **out.model_dump(mode="json", exclude_none=True)})


@router.post(
    "/chat",
    response_model=ChatResponse,
    responses={**_ERRORS, 200: {"content": {"text/plain": {}}, "description": "stream: JSON objects, each + \\0"}},
)
async def chat(body: ChatRequest, request: Request) -> Response:
    r"""The seed's chat: ``stream: true`` sends cumulative ``{"text"}`` objects, each followed by ``\0``."""
    service = _service(request)
    ticket = await service.admit_chat()
    streaming = False
    try:
        request_ = service.chat_request(body)
        if body.stream:
            streaming = True
            return _ChatStream(_chat_chunks(service.chat(request_)), ticket)
        answer = await service.chat_reply(request_)
        return JSONResponse(ChatResponse(text=answer.text).model_dump())
    finally:
        if not streaming:
            ticket.release()
