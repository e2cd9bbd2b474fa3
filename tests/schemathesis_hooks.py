"""schemathesis hooks (``SCHEMATHESIS_HOOKS=tests.schemathesis_hooks``): one check of our own."""

from __future__ import annotations

from typing import Any

import schemathesis

# Refusals of what the OpenAPI document declares (a pattern, a bound): a schema-valid request refused
# with one of these means the document and the route disagree. (Refusals for what a body means, as a
# file that is not a PDF or a correction that does not fit the task, no schema can declare.)
_DECLARED = (
    "is not base64",  # document.content: the document's pattern is what the decoder takes
    "unsupported media type",  # document.media_type: the document's pattern is what the reader takes
    "extractor answers one choice",  # /v1 n: the document's minimum and maximum are 1
)


@schemathesis.check
def wire_accepts_valid_bodies(ctx: Any, response: Any, case: Any) -> bool | None:
    """A request valid against the OpenAPI document is refused for what it means, never for its form.

    Never by the wire layer (strict types, strict JSON), never for a constraint the document declares.
    """
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code not in (400, 415, 422):
        return None
    body = response.json()
    error = body.get("error")
    code, message = (error.get("code"), error.get("message", "")) if isinstance(error, dict) else (error, "")
    message = message or body.get("message", "")
    if code in ("bad_request", "bad_json") and not isinstance(error, dict):
        raise AssertionError(f"a schema-valid body was refused by the wire layer ({code}): {response.text[:300]}")
    if any(fragment in message for fragment in _DECLARED):
        raise AssertionError(
            f"a schema-valid request was refused for what the document declares: {response.text[:300]}"
        )
    if case.path == "/review" and (case.query or {}).get("cursor") == "" and code == "bad_input":
        raise AssertionError(f"an empty cursor (the first page) was refused: {response.text[:300]}")
    return None
