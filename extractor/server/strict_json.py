"""Strict JSON bodies: one parser for every route, so hostile JSON is a 400 and never a 500 or a guess.

``json.loads`` accepts things no client means and some that cost the server: duplicate keys
(the last silently wins), ``NaN``/``Infinity`` (not JSON), 10,000-digit numbers (a ``ValueError``
deep in ``int``), nesting deep enough to exhaust the recursion limit. :func:`loads` refuses
each with a :class:`BadJsonError` naming the problem; :class:`StrictJsonGate` applies it to every
JSON request body before the app sees it (the app then parses the same bytes, now known good).
Lone surrogates parse, and are refused where a text is read (422 naming the field, per item of a batch).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extractor.errors import BadJsonError
from extractor.server.errors import error_response

MAX_DEPTH = 32  # arrays and objects inside one another
MAX_NUMBER_CHARS = 100  # digits (with sign, point and exponent) of one number
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise BadJsonError(f"the request body is not valid JSON: duplicate key {key[:80]!r}")
        value[key] = item
    return value


def _constant(name: str) -> Any:
    raise BadJsonError(f"the request body is not valid JSON: {name} is not a JSON number")


def _number(kind: type[int] | type[float]) -> Any:
    def parse(raw: str) -> int | float:
        if len(raw) > MAX_NUMBER_CHARS:
            raise BadJsonError(f"the request body has a number of {len(raw)} characters (at most {MAX_NUMBER_CHARS})")
        value = kind(raw)
        if value in (float("inf"), float("-inf")):
            raise BadJsonError(f"the request body has a number out of range: {raw}")
        return value

    return parse


def _check_tree(value: Any) -> None:
    # Depth, without recursion (json.loads has already bounded it by the recursion limit).
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise BadJsonError(f"the request body nests deeper than {MAX_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)


def loads(body: bytes) -> Any:
    """The JSON value of ``body``, or :class:`BadJsonError` saying what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadJsonError(f"the request body is not UTF-8 (byte {error.start})") from None
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_constant=_constant,
            parse_int=_number(int),
            parse_float=_number(float),
        )
    except json.JSONDecodeError as error:
        raise BadJsonError(
            f"the request body is not valid JSON (line {error.lineno} column {error.colno}): {error.msg}"
        ) from None
    except RecursionError:
        raise BadJsonError(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    _check_tree(value)
    return value


def _is_json(scope: Scope) -> bool:
    headers: dict[bytes, bytes] = dict(scope["headers"])
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    return content_type == b"application/json" or content_type.endswith(b"+json")


class StrictJsonGate:
    """ASGI middleware: a JSON request body that :func:`loads` refuses gets 400 before any route runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _WITH_BODY or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)  # the client left: the app sees it
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body:
            try:
                loads(body)
            except BadJsonError as error:
                await _refusal(scope, error)(scope, receive, send)
                return
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)


def _refusal(scope: Scope, error: BadJsonError) -> ASGIApp:
    """The 400 in the shape the route's document declares: OpenAI's under ``/v1``, ours elsewhere."""
    from extractor.server.openai import PREFIX
    from extractor.server.openai import error_response as openai_error

    if str(scope.get("path", "")).startswith(PREFIX + "/"):
        return openai_error(error)
    return error_response(error)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    async def replayed() -> Message:
        return messages.pop(0) if messages else await receive()

    return replayed
