"""Tasks as MCP tools, pure: a task's tool definition, a call's arguments, a result or an error as a tool result.

No I/O here (the server in :mod:`extractor.server.mcp.server` does it), so every shape is tested in milliseconds.

- ``inputSchema`` is the body of ``POST /extract/{task}`` (:class:`ExtractRequest`): ``text`` or
  ``document`` (base64 ``content`` + ``media_type``), ``options`` and ``review``.
- ``outputSchema`` is the task's schema. MCP wants an object there (through protocol 2025-11-25),
  so a task whose top level is not an object gets the schema the pipeline decodes: the analyst's
  schema under ``value`` (``{"type": "object", "properties": {"value": ...}}``, see
  :mod:`extractor.constraints.wrapping`), and its ``structuredContent`` is ``{"value": data}``. A
  top level that is plainly an object is given as written.
- ``structuredContent`` is ``data``; the evidence (spans, confidences, notes, attempts, usage) is in
  ``_meta["extractor/result"]``, and the text content is the whole result as JSON (what ``POST
  /extract`` answers), for a client that reads only text.
- An error is a result with ``isError`` whose text names what to fix, never a protocol error: an
  agent reads it and tries again.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from pydantic import ValidationError

from extractor.catalog.tasks import TASK_NAME, Catalog, Task
from extractor.errors import EngineNotReadyError, ExtractionFailed, ExtractorError, OverloadedError, UnknownTaskError
from extractor.results import ExtractionResult
from extractor.server.errors import error_body
from extractor.server.protocol import ExtractRequest

RESULT_META = "extractor/result"  # `_meta` key of the evidence beside `structuredContent`
ERROR_META = "extractor/error"  # `_meta` key of an error's kind and HTTP-equivalent status
_INPUT_SCHEMA: dict[str, Any] = ExtractRequest.model_json_schema()


def input_schema() -> dict[str, Any]:
    """Every tool's ``inputSchema``: the body ``POST /extract/{task}`` takes."""
    return copy.deepcopy(_INPUT_SCHEMA)  # a copy: the SDK may keep and change what it is given


def output_schema(task: Task) -> dict[str, Any]:
    """The task's schema with an object top level: as written when it is one, else as decoded (wrapped)."""
    written = dict(task.source_schema or task.schema)
    if task.wrapped is None and written.get("type") == "object":
        return written
    return dict(task.schema)  # 2020-12, the top level an object: wrapped, or the target of a top-level $ref


def describe(task: Task) -> str:
    """The tool's description: the task's, and what the tool guarantees."""
    lead = task.description or task.title
    return (
        f"{lead.rstrip('.')}. Extracts `{task.name}` from `text` (or a base64 `document`: PDF, HTML, DOCX, "
        "text); the result validates against the output schema, and each value is located in the text "
        f"(spans, confidences and attempts in _meta[{RESULT_META!r}])."
    )


def tool(task: Task) -> types.Tool:
    """The MCP tool of one task."""
    return types.Tool(
        name=task.name,
        title=task.title,
        description=describe(task),
        input_schema=input_schema(),
        output_schema=output_schema(task),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )


def tools(catalog: Catalog) -> list[types.Tool]:
    """One tool per loaded task, in the catalog's order."""
    return [tool(catalog.tasks[name]) for name in catalog.names()]


def request(arguments: Mapping[str, Any] | None) -> ExtractRequest | str:
    """A call's arguments as the body of ``POST /extract``, or what is wrong with them (the tool error's text)."""
    try:
        return ExtractRequest.model_validate(dict(arguments or {}))
    except ValidationError as error:
        problems = [
            f"{_where(e['loc']) or 'arguments'}: {e['msg']}"
            for e in error.errors(include_url=False, include_input=False)
            if e["msg"] != "Input should be None"  # the other arm of `str | None`: says nothing to fix
        ]
        return "bad arguments: " + "; ".join(problems[:5]) + " (send `text`, or `document` with base64 `content`)"


def _where(loc: tuple[int | str, ...]) -> str:
    """A field's path, without the union arms pydantic names in it (``document.DocumentIn.content``)."""
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and (p[:1].isupper() or p in _ARMS)))


_ARMS = frozenset({"str", "none", "constrained-str"})


def structured(task: Task, data: Any) -> Any:
    """``data`` as the output schema describes it (under ``value`` when the top level is wrapped)."""
    return {task.wrapped: data} if task.wrapped is not None else data


def success(task: Task, result: ExtractionResult, *, review_id: int | None = None) -> types.CallToolResult:
    """A result as a tool result: ``data`` structured, the evidence in ``_meta``, the whole result as text."""
    whole = result.model_dump(mode="json")
    whole["review_id"] = review_id
    evidence = {key: value for key, value in whole.items() if key != "data"}
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(whole, ensure_ascii=False))],
        structured_content=structured(task, result.data),
        _meta={RESULT_META: evidence},
    )


def failure(message: str, *, kind: str = "bad_request", status: int = 400, **extra: Any) -> types.CallToolResult:
    """A tool error: ``isError`` with ``message`` as its text (what to fix), kind and status in ``_meta``."""
    return types.CallToolResult(
        content=[types.TextContent(text=message)],
        is_error=True,
        _meta={ERROR_META: {"error": kind, "status": status, **extra}},
    )


def unknown(name: str, catalog: Catalog) -> types.CallToolResult:
    """The tool error for a name that is no task: it lists the tools there are."""
    names = catalog.names()
    listed = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    shown = repr(name) if TASK_NAME.match(name) else "of that name"  # echo a task-shaped name only
    return failure(f"no tool {shown}; the tools are: {listed or 'none'} (tools/list)", kind="not_found", status=404)


def error(error: ExtractorError, *, catalog: Catalog | None = None, name: str = "") -> types.CallToolResult:
    """One of the service's errors as a tool error, with the status ``POST /extract`` would answer."""
    if isinstance(error, UnknownTaskError) and catalog is not None:
        return unknown(name, catalog)
    status, body = error_body(error)
    extra: dict[str, Any] = {}
    message = body.message
    if isinstance(error, OverloadedError | EngineNotReadyError):  # a 429 or a 503: a retry may succeed
        extra["retry_after"] = error.retry_after
        message += f" (retry in {error.retry_after} s)"
    if isinstance(error, ExtractionFailed):
        extra["attempts"] = [a.model_dump(mode="json") for a in error.attempts]
    if body.detail is not None:
        extra["detail"] = body.detail
    return failure(message, kind=body.error, status=status, **extra)
