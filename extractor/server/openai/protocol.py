"""Wire models of the OpenAI-compatible API (``/v1``): the subset of Chat Completions extractor serves.

Requests ignore fields they do not know, as OpenAI-compatible servers do; responses carry the
OpenAI fields plus an ``extractor`` object that the ``openai`` client keeps in ``model_extra``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from extractor.options import ExtractOptions
from extractor.results import Attempt, SpanModel

_LOOSE = ConfigDict(extra="ignore")


def _none(value: Any) -> bool:
    return value is None


class ContentPart(BaseModel):
    """One part of a message's content; only ``text`` parts are read."""

    model_config = _LOOSE

    type: str
    text: str | None = None


class FunctionCallIn(BaseModel):
    """A function call an earlier assistant turn made."""

    model_config = _LOOSE

    name: str = ""
    arguments: str = ""


class ToolCallIn(BaseModel):
    """A tool call of an earlier assistant turn."""

    model_config = _LOOSE

    id: str | None = None
    type: str = "function"
    function: FunctionCallIn


class MessageIn(BaseModel):
    """One chat message as clients send it."""

    model_config = _LOOSE

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallIn] | None = None


class JsonSchemaIn(BaseModel):
    """``response_format.json_schema``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str = "response"
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatIn(BaseModel):
    """``response_format``: ``text``, ``json_object`` (with an optional ``schema``) or ``json_schema``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaIn | None = None
    # older instructor versions send {"type": "json_object", "schema": {...}}
    object_schema: dict[str, Any] | None = Field(default=None, alias="schema")


class FunctionIn(BaseModel):
    """A tool's function: its name and its parameters' JSON Schema."""

    model_config = _LOOSE

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolIn(BaseModel):
    """One entry of ``tools``."""

    model_config = _LOOSE

    type: Literal["function"] = "function"
    function: FunctionIn


class NamedFunction(BaseModel):
    """``tool_choice.function``."""

    model_config = _LOOSE

    name: str


class NamedToolChoice(BaseModel):
    """A forced function call: ``{"type": "function", "function": {"name": ...}}``."""

    model_config = _LOOSE

    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptionsIn(BaseModel):
    """``stream_options``."""

    model_config = _LOOSE

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """Body of ``POST /v1/chat/completions``."""

    model_config = _LOOSE

    model: str
    messages: list[MessageIn] = Field(min_length=1)
    response_format: ResponseFormatIn | None = None
    tools: list[ToolIn] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=8192)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=8192)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    # one choice only: the document says so, and the translation's 400 says why (n=1 or leave it out)
    n: int | None = Field(default=None, json_schema_extra={"minimum": 1, "maximum": 1})
    stream: bool = False
    stream_options: StreamOptionsIn | None = None
    # extractor's own options (``extra_body={"extractor": {...}}``): attempts, grounding, ...
    extractor: ExtractOptions | None = None


class ModelOut(BaseModel):
    """One entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelsOut(BaseModel):
    """Body of ``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelOut]


class FunctionCallOut(BaseModel):
    """The function a tool call calls, and its JSON arguments."""

    name: str
    arguments: str


class ToolCallOut(BaseModel):
    """A tool call of the answer (the validated JSON as ``function.arguments``)."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class MessageOut(BaseModel):
    """``choices[0].message``."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ToolCallOut] | None = Field(default=None, exclude_if=_none)


class ChoiceOut(BaseModel):
    """One choice (extractor answers one)."""

    index: int = 0
    message: MessageOut
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class UsageOut(BaseModel):
    """Tokens, summed over every attempt."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ExtractorInfo(BaseModel):
    """The ``extractor`` extension of a response: what validation, grounding and re-asking did."""

    task: str
    attempts: list[Attempt]
    spans: list[SpanModel]
    removed: list[SpanModel]
    latency_ms: float
    grounded_decoding: str
    confidence: float | None = Field(default=None, description="the lowest confidence of any value (see spans)")
    confidences: dict[str, float] = Field(default_factory=dict, description="every value's confidence, by pointer")
    calibrated: bool = False


class ChatCompletionOut(BaseModel):
    """Body of a non-streamed ``POST /v1/chat/completions``."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChoiceOut]
    usage: UsageOut
    extractor: ExtractorInfo | None = Field(default=None, exclude_if=_none)


class FunctionDelta(BaseModel):
    """A piece of a streamed tool call's function."""

    name: str | None = Field(default=None, exclude_if=_none)
    arguments: str


class ToolCallDelta(BaseModel):
    """A piece of a streamed tool call (the first piece names it)."""

    index: int = 0
    id: str | None = Field(default=None, exclude_if=_none)
    type: Literal["function"] | None = Field(default=None, exclude_if=_none)
    function: FunctionDelta


class DeltaOut(BaseModel):
    """``choices[0].delta`` of a stream chunk."""

    role: Literal["assistant"] | None = Field(default=None, exclude_if=_none)
    content: str | None = Field(default=None, exclude_if=_none)
    tool_calls: list[ToolCallDelta] | None = Field(default=None, exclude_if=_none)


class ChunkChoiceOut(BaseModel):
    """The one choice of a stream chunk."""

    index: int = 0
    delta: DeltaOut
    finish_reason: Literal["stop", "length"] | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a streamed ``POST /v1/chat/completions``."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoiceOut]
    usage: UsageOut | None = Field(default=None, exclude_if=_none)
    extractor: ExtractorInfo | None = Field(default=None, exclude_if=_none)


class ErrorDetail(BaseModel):
    """``error`` of an OpenAI-shaped error body; ``attempts`` when every attempt failed."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None
    attempts: list[Attempt] | None = Field(default=None, exclude_if=_none)


class ErrorBody(BaseModel):
    """Every error of ``/v1``: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail
