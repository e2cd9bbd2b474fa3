"""schemathesis hooks (``SCHEMATHESIS_HOOKS=tests.schemathesis_hooks``): one check of our own."""

from __future__ import annotations

from typing import Any

import schemathesis


@schemathesis.check
def wire_accepts_valid_bodies(ctx: Any, response: Any, case: Any) -> bool | None:
    """A body valid against the OpenAPI document is never refused by the wire layer (strict types, strict JSON)."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code not in (400, 422):
        return None
    code = response.json().get("error")
    if code in ("bad_request", "bad_json"):
        raise AssertionError(f"a schema-valid body was refused by the wire layer ({code}): {response.text[:300]}")
    return None
