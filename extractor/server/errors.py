"""The one place that maps errors to HTTP status codes and error bodies."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from extractor.errors import (
    BadJsonError,
    BadRequestError,
    BodyTimeoutError,
    CorrectionError,
    DocumentError,
    DocumentTooLargeError,
    EncryptedDocumentError,
    EngineError,
    EngineNotReadyError,
    ExtractionFailed,
    ExtractorError,
    HeaderTimeoutError,
    InputError,
    NoTextLayerError,
    OcrUnavailableError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ReviewConflictError,
    ReviewNotFoundError,
    ReviewStoreError,
    ShuttingDownError,
    TaskError,
    TaskNotLoadedError,
    UnknownTaskError,
    UnsupportedDocumentError,
    UpstreamError,
    UpstreamTimeoutError,
)
from extractor.server.protocol import ErrorOut

NOT_FOUND_MESSAGE = "no such task or route; GET /tasks lists the tasks"
# First match wins: subclasses before their bases.
_STATUS: list[tuple[type[ExtractorError], int, str]] = [
    (UnknownTaskError, 404, "not_found"),
    (TaskNotLoadedError, 404, "not_loaded"),
    (ExtractionFailed, 422, "extraction_failed"),
    (ReviewNotFoundError, 404, "not_found"),
    (ReviewConflictError, 409, "conflict"),
    (CorrectionError, 422, "bad_correction"),
    (ReviewStoreError, 503, "review_unavailable"),
    (OcrUnavailableError, 503, "ocr_unavailable"),
    (DocumentTooLargeError, 413, "document_too_large"),
    (PayloadTooLargeError, 413, "too_large"),
    (UnsupportedDocumentError, 415, "unsupported_media_type"),
    (EncryptedDocumentError, 422, "encrypted_document"),
    (NoTextLayerError, 422, "no_text_layer"),
    (DocumentError, 422, "bad_document"),
    (BadRequestError, 400, "bad_request"),
    (TaskError, 400, "bad_schema"),  # a schema sent with the request (the OpenAI front's response_format)
    (BadJsonError, 400, "bad_json"),
    (BodyTimeoutError, 408, "body_timeout"),
    (HeaderTimeoutError, 408, "header_timeout"),
    (InputError, 422, "bad_input"),
    (OverloadedError, 429, "overloaded"),
    (UpstreamTimeoutError, 504, "timeout"),
    (UpstreamError, 502, "bad_gateway"),
    (EngineNotReadyError, 503, "not_ready"),
    (EngineError, 503, "engine_unavailable"),
    (RequestTimeoutError, 504, "timeout"),
    (ExtractorError, 500, "internal"),
]


def error_body(error: ExtractorError) -> tuple[int, ErrorOut]:
    """The status code and body for one of our errors."""
    status, code = next((s, c) for kind, s, c in _STATUS if isinstance(error, kind))
    message = str(error)
    if isinstance(error, UnknownTaskError):
        # Never echo the name or anything from disk: the catalog answers, not the file system.
        message = NOT_FOUND_MESSAGE
    attempts = error.attempts if isinstance(error, ExtractionFailed) else None
    detail = None
    if isinstance(error, TaskNotLoadedError):
        detail = [{"file": e.path, "pointer": e.pointer, "message": e.reason} for e in error.errors]
    version = error.task_version or None if isinstance(error, ExtractionFailed) else None
    return status, ErrorOut(error=code, message=message, attempts=attempts, detail=detail, task_version=version)


def error_headers(error: ExtractorError) -> dict[str, str]:
    """``Retry-After`` where a retry may succeed; ``Connection: close`` while the service shuts down.

    A draining server closes each connection after its answer, so a client's next try opens a new
    one (which a balancer sends to another replica) instead of waiting on this one.
    """
    headers: dict[str, str] = {}
    if isinstance(error, OverloadedError | EngineNotReadyError):
        headers["retry-after"] = str(error.retry_after)
    if isinstance(error, ShuttingDownError):
        headers["connection"] = "close"
    return headers


def error_response(error: ExtractorError) -> JSONResponse:
    """The HTTP response for one of our errors (with :func:`error_headers`)."""
    status, body = error_body(error)
    content = body.model_dump(mode="json", exclude_none=True)
    return JSONResponse(status_code=status, content=content, headers=error_headers(error))
