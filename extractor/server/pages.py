"""``POST /documents/pages/{page}``: a PDF's page as a PNG, so a client (the playground) can draw a span's boxes on it.

The body is the PDF itself (``application/pdf`` or ``application/octet-stream``: the content
decides), as uploaded for extraction; the image's longer side is at most 2,400 px, and a box's
points map onto it by ``pixels / points`` of the page's size (``result.document.pages``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response

from extractor import documents
from extractor.documents.pdf import render_page
from extractor.errors import DocumentError
from extractor.server.protocol import ErrorOut

router = APIRouter()
_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the PDF itself, as uploaded for extraction (its content decides, not its content-type)",
        "content": {
            kind: {"schema": {"type": "string", "format": "binary", "contentMediaType": "application/pdf"}}
            for kind in ("application/pdf", "application/octet-stream")
        },
    }
}


@router.post(
    "/documents/pages/{page}",
    response_class=Response,
    openapi_extra=_BODY,
    responses={
        200: {"content": {"image/png": {}}, "description": "the page, drawn"},
        413: {"model": ErrorOut, "description": "body over the limit, or more pages than the limit"},
        415: {"model": ErrorOut, "description": "a zip or legacy Office file, not a PDF"},
        422: {
            "model": ErrorOut,
            "description": "a body that is not a PDF (bad_document), an unreadable or encrypted PDF, or no such page",
        },
    },
)
async def page_image(request: Request, page: int = Path(ge=1, le=100_000)) -> Response:
    """Page ``page`` (1-based) of the PDF sent as the body, as a PNG."""
    data = await request.body()
    if documents.media_type_of(data, declared=request.headers.get("content-type")) != documents.PDF:
        raise DocumentError("the body is not a PDF: send the PDF itself as the body (content-type: application/pdf)")
    limits = documents.Limits.from_settings(request.app.state.extractor.settings)
    image = await asyncio.to_thread(render_page, data, page=page, limits=limits)
    return Response(image, media_type="image/png", headers={"cache-control": "no-store"})
