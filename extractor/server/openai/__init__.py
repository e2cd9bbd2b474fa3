"""An OpenAI-compatible front (``/v1/models``, ``/v1/chat/completions``) on the same service as ``/extract``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from extractor.server.openai.protocol import ChatCompletionRequest
from extractor.server.openai.routes import PREFIX, error_response, http_error, router
from extractor.server.openai.serving import OpenAIFront
from extractor.server.service import Service

__all__ = ["PREFIX", "OpenAIFront", "error_response", "http_error", "install"]


def install(app: FastAPI, service: Service) -> None:
    """Serve ``/v1`` from ``app``, on ``service``."""
    app.state.openai = OpenAIFront(service)
    app.include_router(router)
    _declare_body(app)


def _declare_body(app: FastAPI) -> None:
    """The document declares ``/v1/chat/completions``' body (the route reads it by hand, as OpenAI's API does).

    A body that is not a chat completion request (none at all, no messages) is then outside the
    published schema: what the route answers it with (400) is what the document says.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        document = build()
        schema = ChatCompletionRequest.model_json_schema(ref_template="#/components/schemas/{model}")
        components = document.setdefault("components", {}).setdefault("schemas", {})
        for name, definition in schema.pop("$defs", {}).items():
            components.setdefault(name, definition)  # a model the routes share is there already
        components["ChatCompletionRequest"] = schema
        operation = document["paths"]["/v1/chat/completions"]["post"]
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}},
        }
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
