"""Multipart uploads: a ``multipart/form-data`` body on the extract routes becomes the JSON body it stands for.

One wire model, two encodings: ``POST /extract/{task}`` with a ``file`` part (and optional
``options``, a JSON object, and ``review``, true or false) is the JSON body
``{"document": {"content": <base64>, "media_type": <the part's type>, "name": <its filename>}, ...}``;
``/batch`` takes several ``file`` parts, each an item whose id is its filename. The gate runs
inside the HTTP gate (the body limit has already applied) and before the strict JSON gate, so
the route sees one JSON body either way and checks it as any other. The form is parsed by
python-multipart (through Starlette), never by hand.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extractor.errors import BadRequestError, ExtractorError
from extractor.server.errors import error_response

_ROUTES = re.compile(r"/extract/[^/]+(?P<batch>/batch)?")
MAX_FILES = 256  # a batch's files (EXTRACTOR_MAX_BATCH_ITEMS still applies to the items)


class UploadGate:
    """Wraps the app; see the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _ROUTES.fullmatch(scope.get("path", "")) if scope["type"] == "http" else None
        content_type = dict(scope.get("headers", [])).get(b"content-type", b"").decode("latin-1").lower()
        if found is None or scope["method"] != "POST" or not content_type.startswith("multipart/form-data"):
            await self.app(scope, receive, send)
            return
        try:
            body = await _json_body(Request(scope, receive), batch=found["batch"] is not None)
        except ExtractorError as error:
            await error_response(error)(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"content-type", b"content-length")]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app({**scope, "headers": headers}, replay, send)


async def _json_body(request: Request, *, batch: bool) -> bytes:
    if "boundary=" not in request.headers.get("content-type", "").lower():
        raise BadRequestError("a multipart/form-data body needs a boundary in its content-type")
    try:
        form = await request.form(max_files=MAX_FILES, max_fields=16)
    except (MultiPartException, ValueError, KeyError) as error:
        raise BadRequestError(f"the multipart body cannot be read: {error}") from None
    try:
        files = [part for part in form.getlist("file") if isinstance(part, UploadFile)]
        if not files:
            raise BadRequestError("a multipart body needs a `file` part (the document)", param="file")
        if len(files) > 1 and not batch:
            raise BadRequestError("one `file` per request; send several to /extract/{task}/batch", param="file")
        body: dict[str, Any] = {}
        documents = [await _document(part) for part in files]
        if batch:
            body["items"] = [{"id": d.get("name") or i, "document": d} for i, d in enumerate(documents)]
        else:
            body["document"] = documents[0]
        options = form.get("options")
        if isinstance(options, str) and options.strip():
            try:
                body["options"] = json.loads(options)
            except json.JSONDecodeError as error:
                raise BadRequestError(f"the `options` part is not JSON: {error.msg}", param="options") from None
        review = form.get("review")
        if isinstance(review, str) and review:
            if review.lower() not in ("true", "false"):
                raise BadRequestError("the `review` part must be true or false", param="review")
            body["review"] = review.lower() == "true"
        return json.dumps(body, ensure_ascii=False).encode()
    finally:
        await form.close()


async def _document(part: UploadFile) -> dict[str, Any]:
    data = await part.read()
    document: dict[str, Any] = {"content": base64.b64encode(data).decode("ascii")}
    if part.content_type:
        document["media_type"] = part.content_type[:200]
    if part.filename:
        document["name"] = part.filename[:255]
    return document
