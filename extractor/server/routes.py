"""Thin routes: wire model in, pipeline call, result out. Errors go to app.error_response."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from extractor.api import Extractor
from extractor.results import ExtractionResult
from extractor.server.protocol import ExtractRequest, FieldOut, TaskErrorOut, TaskOut, TasksOut

router = APIRouter()


def _extractor(request: Request) -> Extractor:
    extractor: Extractor = request.app.state.extractor
    return extractor


@router.post("/extract/{task}", response_model=ExtractionResult)
async def extract(task: str, body: ExtractRequest, request: Request) -> Any:
    """Extract ``task`` from ``body.text``."""
    extractor = _extractor(request)
    extractor.task(task)  # 404 before any work
    options = body.options
    return await extractor.aextract(
        task,
        body.text,
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        max_attempts=options.max_attempts,
        grounding=options.grounding,
    )


@router.get("/tasks", response_model=TasksOut)
async def tasks(request: Request) -> TasksOut:
    """The loaded tasks, and the tasks left out with their load errors."""
    catalog = _extractor(request).catalog
    return TasksOut(
        tasks=[
            TaskOut(
                name=t.name,
                title=t.title,
                description=t.description,
                fields=[
                    FieldOut(name=f.name, description=f.description, type=f.type, required=f.required) for f in t.fields
                ],
                examples=len(t.examples),
                warnings=list(t.warnings),
            )
            for t in (catalog.tasks[name] for name in catalog.names())
        ],
        errors=[TaskErrorOut(file=e.path, pointer=e.pointer, message=e.reason) for e in catalog.errors],
    )
