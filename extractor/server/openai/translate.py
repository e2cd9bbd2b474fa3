"""OpenAI Chat Completions <-> extractor, both ways. Pure: no engine, no HTTP.

A request becomes a :class:`Job`: an extraction (a catalog task named by ``model``, or a task
built from ``response_format`` / a forced tool's parameters, the chat sent as given) or a plain
chat (neither). A result becomes a completion, or the chunks of a stream; an error becomes the
OpenAI error shape with the service's status code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from extractor.catalog.tasks import Task
from extractor.catalog.templating import compact_json
from extractor.engines.base import Message
from extractor.errors import (
    BadRequestError,
    ExtractionFailed,
    ExtractorError,
    TaskError,
    UnknownTaskError,
)
from extractor.options import ExtractOptions, Options
from extractor.results import ExtractionResult
from extractor.server.errors import error_body as service_error_body
from extractor.server.errors import error_headers
from extractor.server.openai.protocol import (
    ChatCompletionChunk,
    ChatCompletionOut,
    ChatCompletionRequest,
    ChoiceOut,
    ChunkChoiceOut,
    DeltaOut,
    ErrorBody,
    ErrorDetail,
    ExtractorInfo,
    FunctionCallOut,
    FunctionDelta,
    MessageIn,
    MessageOut,
    ToolCallDelta,
    ToolCallOut,
    UsageOut,
)

STREAM_PIECE_CHARS = 32  # the validated JSON goes out in pieces of this many characters
CHAT_TEMPERATURE = 1.0  # OpenAI's default for a plain chat
OBJECT_SCHEMA: dict[str, object] = {"type": "object"}
_ROLES: dict[str, Literal["system", "user", "assistant"]] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "user",
    "function": "user",
}

# (name, schema, where) -> the checked task; raises TaskError for a bad schema.
TaskFactory = Callable[[str, object, str], Task]


@dataclass(frozen=True)
class Job:
    """What one request asks for."""

    kind: Literal["extract", "chat"]
    messages: list[Message]
    options: Options
    task: Task | None = None
    text: str = ""
    label: str = "-"  # the metrics task label: a catalog name, or "-"
    tool: str | None = None  # answer as a call of this function


def content_text(message: MessageIn, index: int) -> str:
    """A message's text: its string content, or its text parts joined; another part is a 400."""
    content = message.content
    if content is None:
        calls = message.tool_calls or []
        return "\n".join(c.function.arguments for c in calls)
    if isinstance(content, str):
        return _valid_unicode(content, index)
    texts = []
    for number, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise BadRequestError(
                f"messages[{index}].content[{number}]: only text parts are read, not {part.type!r}",
                param=f"messages[{index}].content",
            )
        texts.append(part.text)
    return _valid_unicode("\n".join(texts), index)


def _valid_unicode(text: str, index: int) -> str:
    # JSON may carry lone UTF-16 surrogates, which no tokenizer takes.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise BadRequestError(
            f"messages[{index}].content holds an invalid character at {error.start} (a lone UTF-16 surrogate)",
            param=f"messages[{index}].content",
        ) from None
    return text


def engine_messages(messages: Sequence[MessageIn]) -> list[Message]:
    """The chat as the engine takes it (developer turns are system turns, tool results user turns)."""
    return [{"role": _ROLES[m.role], "content": content_text(m, i)} for i, m in enumerate(messages)]


def last_user_text(messages: Sequence[MessageIn]) -> str:
    """The text to extract from: the last user message's content."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return content_text(messages[index], index)
    raise BadRequestError("messages: no user message holds a text to extract from", param="messages")


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)


def _forced_tool(body: ChatCompletionRequest) -> tuple[str, object] | None:
    """The forced function's name and parameters, or None when no call is forced."""
    tools = body.tools or []
    choice = body.tool_choice
    if not tools or choice is None or choice in ("none", "auto"):
        return None
    if choice == "required":
        if len(tools) != 1:
            raise BadRequestError("tool_choice 'required' needs exactly one tool; name it instead", param="tool_choice")
        function = tools[0].function
    else:
        assert not isinstance(choice, str)
        named = [t.function for t in tools if t.function.name == choice.function.name]
        if not named:
            raise BadRequestError("tool_choice names a function that is not in tools", param="tool_choice")
        function = named[0]
    schema = function.parameters if function.parameters is not None else OBJECT_SCHEMA
    return function.name, strictly(schema, function.strict)


def strictly(schema: object, strict: bool | None) -> object:
    """``schema`` under the task setting ``strict_enforcement`` when the client asks ``strict: true``.

    OpenAI's strict mode promises an answer the schema holds, so a keyword decoding cannot enforce
    is a 400 naming it; without it the keyword is checked after generation, as for catalog tasks.
    """
    if strict is not True or not isinstance(schema, dict):
        return schema
    settings = schema.get("x-extractor", {})
    if not isinstance(settings, dict) or "allow_unenforced" in settings:
        return schema  # the client's own setting stands (a bad one is the task's 400)
    return {**schema, "x-extractor": {**settings, "strict_enforcement": True}}


def plan(body: ChatCompletionRequest, *, catalog: dict[str, Task], engine_model: str, adhoc: TaskFactory) -> Job:
    """The job a request asks for; 400 for what extractor cannot do, 404 for an unknown model."""
    if body.n not in (None, 1):
        raise BadRequestError("n: extractor answers one choice; send n=1 or leave it out", param="n")
    # temperature and max_tokens are OpenAI's own fields: the extension's copies of them are not read
    options = Options.of(
        body.extractor or ExtractOptions(),
        temperature=body.temperature,
        max_tokens=body.max_completion_tokens or body.max_tokens,
        top_p=body.top_p,
        seed=body.seed,
        stop=_stops(body.stop),
    )
    forced = _forced_tool(body)
    tool = forced[0] if forced is not None else None
    task = catalog.get(body.model)
    if task is not None:
        return Job("extract", [], options, task, last_user_text(body.messages), label=task.name, tool=tool)
    if body.model != engine_model:
        raise UnknownTaskError(body.model, sorted(catalog))
    messages = engine_messages(body.messages)
    fmt = body.response_format
    if forced is not None:
        name, schema = forced
        built = adhoc(name, schema, "tools[].function.parameters")
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.json_schema is None:
            raise BadRequestError("response_format.json_schema.schema is missing", param="response_format")
        schema = strictly(fmt.json_schema.json_schema, fmt.json_schema.strict)
        built = adhoc(fmt.json_schema.name, schema, "response_format.json_schema.schema")
    elif fmt is not None and fmt.type == "json_object":
        built = adhoc("json_object", fmt.object_schema or OBJECT_SCHEMA, "response_format.schema")
    else:
        return Job("chat", messages, options)
    # The chat is sent as given, so the text is not cut into chunks.
    task = dataclasses.replace(built, conversation=tuple(messages))
    text = last_user_text(body.messages)
    return Job("extract", messages, options.model_copy(update={"chunk": False}), task, text, tool=tool)


def usage(prompt_tokens: int, completion_tokens: int) -> UsageOut:
    """The usage object."""
    return UsageOut(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


def _finish(reason: str) -> Literal["stop", "length"]:
    return "length" if reason == "length" else "stop"


def info(result: ExtractionResult) -> ExtractorInfo:
    """The ``extractor`` extension of a response."""
    return ExtractorInfo(
        task=result.task,
        attempts=result.attempts,
        spans=result.spans,
        removed=result.removed,
        latency_ms=result.latency_ms,
        grounded_decoding=result.grounded_decoding,
        confidence=result.confidence,
        confidences=result.confidences,
        calibrated=result.calibrated,
    )


def completion(result: ExtractionResult, *, job: Job, model: str, ident: str, created: int) -> ChatCompletionOut:
    """The completion of an extraction: the validated JSON as content, or as the tool call's arguments."""
    answer = compact_json(result.data)
    if job.tool is not None:
        call_id = "call_" + ident.removeprefix("chatcmpl-")[:24]
        call = ToolCallOut(id=call_id, function=FunctionCallOut(name=job.tool, arguments=answer))
        message = MessageOut(content=None, tool_calls=[call])
    else:
        message = MessageOut(content=answer)
    last = result.attempts[-1].finish_reason if result.attempts else "stop"
    return ChatCompletionOut(
        id=ident,
        created=created,
        model=model,
        choices=[ChoiceOut(message=message, finish_reason=_finish(last))],
        usage=usage(result.usage.prompt_tokens, result.usage.completion_tokens),
        extractor=info(result),
    )


def chat_completion(
    text: str, *, finish_reason: str, prompt_tokens: int, completion_tokens: int, model: str, ident: str, created: int
) -> ChatCompletionOut:
    """The completion of a plain chat."""
    return ChatCompletionOut(
        id=ident,
        created=created,
        model=model,
        choices=[ChoiceOut(message=MessageOut(content=text), finish_reason=_finish(finish_reason))],
        usage=usage(prompt_tokens, completion_tokens),
    )


@dataclass(frozen=True)
class Head:
    """What every chunk of one stream repeats."""

    ident: str
    created: int
    model: str

    def chunk(
        self,
        delta: DeltaOut,
        *,
        finish_reason: Literal["stop", "length"] | None = None,
        extension: ExtractorInfo | None = None,
    ) -> ChatCompletionChunk:
        """One stream chunk with one choice."""
        return ChatCompletionChunk(
            id=self.ident,
            created=self.created,
            model=self.model,
            choices=[ChunkChoiceOut(delta=delta, finish_reason=finish_reason)],
            extractor=extension,
        )


def stream_chunks(out: ChatCompletionOut, *, include_usage: bool) -> list[ChatCompletionChunk]:
    """A finished completion as a stream: role, the answer in pieces, the finish (+ the usage chunk)."""
    head = Head(out.id, out.created, out.model)
    message = out.choices[0].message
    chunks = [head.chunk(DeltaOut(role="assistant", content=""))]
    if message.tool_calls:
        call = message.tool_calls[0]
        named = FunctionDelta(name=call.function.name, arguments="")
        chunks.append(head.chunk(DeltaOut(tool_calls=[ToolCallDelta(id=call.id, type="function", function=named)])))
        for piece in _pieces(call.function.arguments):
            delta = DeltaOut(tool_calls=[ToolCallDelta(function=FunctionDelta(arguments=piece))])
            chunks.append(head.chunk(delta))
    else:
        chunks += [head.chunk(DeltaOut(content=piece)) for piece in _pieces(message.content or "")]
    chunks.append(head.chunk(DeltaOut(), finish_reason=out.choices[0].finish_reason, extension=out.extractor))
    if include_usage:
        chunks.append(usage_chunk(out.usage, head))
    return chunks


def usage_chunk(used: UsageOut, head: Head) -> ChatCompletionChunk:
    """The last chunk of a stream with ``include_usage``: no choices, the usage."""
    return ChatCompletionChunk(id=head.ident, created=head.created, model=head.model, choices=[], usage=used)


def _pieces(text: str) -> list[str]:
    return [text[i : i + STREAM_PIECE_CHARS] for i in range(0, len(text), STREAM_PIECE_CHARS)] or [""]


def sse(event: ChatCompletionChunk | ErrorBody) -> bytes:
    """One server-sent event."""
    return b"data: " + event.model_dump_json().encode("utf-8") + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def _error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def error(error: ExtractorError) -> tuple[int, ErrorBody, dict[str, str]]:
    """Status code (the service's mapping), OpenAI-shaped body and headers for one of our errors.

    An extraction that failed every attempt says ``x-should-retry: false``: the attempts were
    made server-side, and a client's own retries would only multiply them.
    """
    status, out = service_error_body(error)
    message, code, param = out.message, out.error, getattr(error, "param", None)
    if isinstance(error, UnknownTaskError):
        message, code, param = "no such model; GET /v1/models lists the models and tasks", "model_not_found", "model"
    if isinstance(error, TaskError):
        param = error.path  # the request field that held the schema
    headers = error_headers(error)
    if isinstance(error, ExtractionFailed):
        headers["x-should-retry"] = "false"
    detail = ErrorDetail(message=message, type=_error_type(status), param=param, code=code, attempts=out.attempts)
    return status, ErrorBody(error=detail), headers


def bad_body(problems: Sequence[tuple[str, str]]) -> ErrorBody:
    """The 400 body of a request that does not parse (each problem: field, message)."""
    listed = "; ".join(f"{loc}: {msg}" for loc, msg in problems[:3])
    param = problems[0][0] if problems else None
    return ErrorBody(
        error=ErrorDetail(
            message=f"the request body is invalid: {listed}", type="invalid_request_error", param=param, code=None
        )
    )
