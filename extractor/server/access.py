"""Who may call the service, and what each key may do: API keys (Bearer) with scopes, CORS when configured.

- Keys come from ``EXTRACTOR_API_KEYS`` (comma-separated entries) and/or ``EXTRACTOR_API_KEYS_FILE``
  (an entry a line, ``#`` comments). An entry is the key, then optionally ``name=NAME`` and
  ``scopes=SCOPE+SCOPE`` (``+`` or ``,`` in a file), separated by spaces:
  ``k-3f9a... name=ann scopes=review``. A key without ``scopes=`` has every scope; without
  ``name=``, its name is ``key:`` and the first 12 hex digits of its SHA-256.
- Scopes (:data:`SCOPES`): ``extract`` for ``/extract``, ``/v1``, ``/chat``, ``/mcp``, ``/documents`` and
  reading ``/tasks``; ``review`` for the review queue (reading it and deciding); ``admin`` for
  ``POST /tasks/reload`` and any other write to tasks. Other routes (``/metrics``, the OpenAPI
  document) take any valid key.
- With keys, every route but ``/healthz`` and ``/readyz`` (and ``/metrics`` with
  ``EXTRACTOR_METRICS_OPEN``) needs ``Authorization: Bearer KEY``, else 401 with
  ``WWW-Authenticate: Bearer``; a valid key without the route's scope gets 403 naming the scope.
  The check runs before the body is read. The key's name is the request's ``api_key`` state
  (the review queue records it as the decision's reviewer).
- Keys are compared in constant time (SHA-256 digests through :func:`hmac.compare_digest`, every
  key every time) and never logged: settings hide them from ``repr``, a 401 or 403 never echoes them.
- With no key the service is open to whoever reaches it, every scope included (the default bind
  is 127.0.0.1: the users of this machine).
- CORS is off unless ``EXTRACTOR_CORS_ORIGINS`` names origins.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
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
SCOPES = ("extract", "review", "admin")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiKey:
    """One configured key: its name (what the logs and the review queue show), the key, its scopes."""

    name: str
    key: str = field(repr=False)
    scopes: frozenset[str] = frozenset(SCOPES)


def parse_key(entry: str, *, where: str) -> ApiKey:
    """One entry (``KEY [name=NAME] [scopes=A+B]``) as an :class:`ApiKey`; ``ConfigError`` names ``where``."""
    key, *options = entry.split()
    name = "key:" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    scopes = frozenset(SCOPES)
    for option in options:
        label, _, value = option.partition("=")
        if label == "name" and value:
            name = value
        elif label == "scopes":
            scopes = frozenset(s for s in value.replace(",", "+").split("+") if s)
            unknown = sorted(scopes - set(SCOPES))
            if unknown or not scopes:
                raise ConfigError(
                    f"{where}: scopes {', '.join(unknown) or '(none)'} not known; give some of {', '.join(SCOPES)}, "
                    "joined by '+'"
                )
        else:  # never echo the entry: it holds the key
            raise ConfigError(f"{where}: {label!r} is not an option of a key; write `KEY name=NAME scopes=A+B`")
    return ApiKey(name=name, key=key, scopes=scopes)


def configured_keys(settings: Settings) -> tuple[ApiKey, ...]:
    """Every configured key: ``api_keys`` (comma-separated entries), then the lines of ``api_keys_file``."""
    found: list[ApiKey] = []
    entries = [e.strip() for e in (settings.api_keys or "").split(",")]
    for number, entry in enumerate(entries, start=1):
        if entry:
            found.append(parse_key(entry, where=f"EXTRACTOR_API_KEYS: entry {number}"))
    if settings.api_keys_file:
        try:
            lines = Path(settings.api_keys_file).expanduser().read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"EXTRACTOR_API_KEYS_FILE: cannot read {settings.api_keys_file}: {error}") from None
        for number, line in enumerate(lines, start=1):
            if line.strip() and not line.strip().startswith("#"):
                found.append(parse_key(line.strip(), where=f"{settings.api_keys_file}:{number}"))
    names = [k.name for k in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"API keys: the name {twice[0]!r} is given to more than one key; name each key once")
    return tuple(found)


def api_keys(settings: Settings) -> tuple[str, ...]:
    """Every configured key itself (see :func:`configured_keys`)."""
    return tuple(k.key for k in configured_keys(settings))


def needed_scope(method: str, path: str) -> str | None:
    """The scope a request needs (None: any valid key)."""
    if path.startswith(("/extract/", "/v1/", "/documents/", "/mcp/")) or path in ("/chat", "/mcp"):
        return "extract"
    if path == "/review" or path.startswith("/review/"):
        return "review"
    if path == "/tasks" or path.startswith("/tasks/"):
        return "extract" if method in ("GET", "HEAD") else "admin"
    return None


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class ApiKeyGate:
    """ASGI middleware: a closed path needs a valid Bearer key (else 401) with the path's scope (else 403)."""

    def __init__(self, app: ASGIApp, *, keys: Iterable[ApiKey | str], open_paths: frozenset[str]) -> None:
        self.app = app
        self._keys = tuple(parse_key(k, where="a key") if isinstance(k, str) else k for k in keys)
        self._digests = tuple(_digest(k.key.encode("utf-8")) for k in self._keys)
        self.open_paths = open_paths

    def matching(self, authorization: bytes | None) -> ApiKey | None:
        """The key the header carries, or None; the same work whatever it holds."""
        scheme, _, token = (authorization or b"").partition(b" ")
        presented = _digest(token.strip())
        found: ApiKey | None = None
        for key, digest in zip(self._keys, self._digests, strict=True):
            # no early exit: the time says nothing about which key, or how close
            if hmac.compare_digest(presented, digest):
                found = key
        return found if scheme.lower() == b"bearer" else None

    def allowed(self, authorization: bytes | None) -> bool:
        """Whether the header carries one of the keys."""
        return self.matching(authorization) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = dict(scope["headers"])
        key = self.matching(headers.get(b"authorization"))
        if key is None:
            await _refuse(scope, receive, send, given=b"authorization" in headers)
            return
        needed = needed_scope(scope["method"], scope["path"])
        if needed is not None and needed not in key.scopes:
            body = {
                "error": "forbidden",
                "message": f"the key {key.name!r} lacks the scope {needed!r} that {scope['method']} {scope['path']} "
                f"needs (it has: {', '.join(sorted(key.scopes))}); use a key with {needed!r}",
            }
            await JSONResponse(body, status_code=403)(scope, receive, send)
            return
        scope.setdefault("state", {})["api_key"] = key.name
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, *, given: bool) -> None:
    body = {
        "error": "unauthorized",
        "message": "a valid API key is needed: send `Authorization: Bearer <key>`"
        + (" (the key given is not one of them)" if given else ""),
    }
    challenge = CHALLENGE + (', error="invalid_token"' if given else "")
    await JSONResponse(body, status_code=401, headers={"www-authenticate": challenge})(scope, receive, send)


def install(app: FastAPI, settings: Settings) -> None:
    """Add the key gate (when keys are set) and CORS (when origins are set) to ``app``, outermost."""
    keys = configured_keys(settings)
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
            for method, operation in operations.items():
                if path in open_paths:
                    operation["security"] = []
                    continue
                operation["security"] = [{"bearer": []}]
                error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
                responses = operation.setdefault("responses", {})
                responses["401"] = {"description": "no valid API key (see WWW-Authenticate)", "content": error}
                needed = needed_scope(method.upper(), path)
                if needed is not None:
                    responses["403"] = {"description": f"the key lacks the scope {needed!r}", "content": error}
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
