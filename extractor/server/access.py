"""Who may call the service: optional API keys (Bearer), CORS only when configured, a warning when exposed.

- Keys come from ``EXTRACTOR_API_KEYS`` (comma-separated) and/or ``EXTRACTOR_API_KEYS_FILE`` (one
  per line, ``#`` comments). With none, the service is open (the default bind is 127.0.0.1).
- With keys, every route but ``/healthz`` and ``/readyz`` (and ``/metrics`` with
  ``EXTRACTOR_METRICS_OPEN``) needs ``Authorization: Bearer KEY``, else 401 with
  ``WWW-Authenticate: Bearer``. The check runs before the body is read.
- Keys are compared in constant time (SHA-256 digests through :func:`hmac.compare_digest`, every
  key every time) and never logged: settings hide them from ``repr``, the 401 never echoes them.
- CORS is off unless ``EXTRACTOR_CORS_ORIGINS`` names origins.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from extractor.config import Settings
from extractor.errors import ConfigError

ALWAYS_OPEN = frozenset({"/healthz", "/readyz"})
CHALLENGE = 'Bearer realm="extractor"'
log = logging.getLogger(__name__)


def api_keys(settings: Settings) -> tuple[str, ...]:
    """Every configured key: ``api_keys`` (comma-separated), then the lines of ``api_keys_file``."""
    keys = [k.strip() for k in (settings.api_keys or "").split(",")]
    if settings.api_keys_file:
        try:
            lines = Path(settings.api_keys_file).expanduser().read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"EXTRACTOR_API_KEYS_FILE: cannot read {settings.api_keys_file}: {error}") from None
        keys += [line.strip() for line in lines if not line.strip().startswith("#")]
    return tuple(k for k in keys if k)


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class ApiKeyGate:
    """ASGI middleware: a request to a closed path without a valid Bearer key gets 401."""

    def __init__(self, app: ASGIApp, *, keys: Iterable[str], open_paths: frozenset[str]) -> None:
        self.app = app
        self._digests = tuple(_digest(k.encode("utf-8")) for k in keys)
        self.open_paths = open_paths

    def allowed(self, authorization: bytes | None) -> bool:
        """Whether the header carries one of the keys; the same work whatever it holds."""
        scheme, _, token = (authorization or b"").partition(b" ")
        presented = _digest(token.strip())
        matched = False
        for digest in self._digests:  # no early exit: the time says nothing about which key, or how close
            matched |= hmac.compare_digest(presented, digest)
        return matched and scheme.lower() == b"bearer"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = dict(scope["headers"])
        if self.allowed(headers.get(b"authorization")):
            await self.app(scope, receive, send)
            return
        given = b"authorization" in headers
        body = {
            "error": "unauthorized",
            "message": "a valid API key is needed: send `Authorization: Bearer <key>`"
            + (" (the key given is not one of them)" if given else ""),
        }
        challenge = CHALLENGE + (', error="invalid_token"' if given else "")
        await JSONResponse(body, status_code=401, headers={"www-authenticate": challenge})(scope, receive, send)


def install(app: FastAPI, settings: Settings) -> None:
    """Add the key gate (when keys are set) and CORS (when origins are set) to ``app``, outermost."""
    keys = api_keys(settings)
    if keys:
        open_paths = ALWAYS_OPEN | ({"/metrics"} if settings.metrics_open else set())
        if settings.playground:  # the page itself (no data): a browser cannot send a key before it has the page
            from extractor.server.playground import PATHS

            open_paths |= PATHS
        app.add_middleware(ApiKeyGate, keys=keys, open_paths=frozenset(open_paths))
        _document(app, open_paths)
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    if origins:  # outside the key gate: a browser's preflight carries no key
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type"],
        )


def _document(app: FastAPI, open_paths: frozenset[str]) -> None:
    """The OpenAPI document says which routes need the key, and their 401."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        document = build()
        schemes = document.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes["bearer"] = {"type": "http", "scheme": "bearer"}
        for path, operations in document.get("paths", {}).items():
            for operation in operations.values():
                if path in open_paths:
                    operation["security"] = []
                    continue
                operation["security"] = [{"bearer": []}]
                operation.setdefault("responses", {})["401"] = {
                    "description": "no valid API key (see WWW-Authenticate)",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
                }
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def exposure_warning(settings: Settings) -> str | None:
    """A warning when the service binds a non-loopback address without keys, else None."""
    host = settings.host.strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False  # a host name: it may well resolve to a public address
    if loopback or api_keys(settings):
        return None
    return (
        f"serving on {settings.host}:{settings.port} without API keys: anyone who can reach this address "
        "can use the service; set EXTRACTOR_API_KEYS (or EXTRACTOR_API_KEYS_FILE), or bind 127.0.0.1"
    )
