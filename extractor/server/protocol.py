"""Wire models of the HTTP API, apart from the logic behind them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from extractor.results import Attempt


class ExtractOptions(BaseModel):
    """Per-request overrides of the task's settings."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(default=None, ge=0, le=2)
    max_attempts: int | None = Field(default=None, ge=1, le=3)
    max_tokens: int | None = Field(default=None, ge=1, le=8192)
    grounding: Literal["strict", "flag", "off"] | None = None


class ExtractRequest(BaseModel):
    """Body of ``POST /extract/{task}``."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, description="the text to extract from")
    options: ExtractOptions = Field(default_factory=ExtractOptions)


class FieldOut(BaseModel):
    """One top-level field of a task."""

    name: str
    description: str
    type: str
    required: bool


class TaskOut(BaseModel):
    """A task as listed by ``GET /tasks``."""

    name: str
    title: str
    description: str
    fields: list[FieldOut]
    examples: int
    warnings: list[str]


class TaskErrorOut(BaseModel):
    """A task left out of the catalog, and why."""

    file: str
    pointer: str
    message: str


class TasksOut(BaseModel):
    """Body of ``GET /tasks``."""

    tasks: list[TaskOut]
    errors: list[TaskErrorOut]


class ErrorOut(BaseModel):
    """Body of every error response."""

    error: str = Field(description="a stable machine-readable code")
    message: str
    attempts: list[Attempt] | None = None
    detail: Any = None
