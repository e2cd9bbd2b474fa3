"""An OpenAI-compatible front (``/v1/models``, ``/v1/chat/completions``) on the same service as ``/extract``."""

from __future__ import annotations

from fastapi import FastAPI

from extractor.server.openai.routes import PREFIX, error_response, http_error, router
from extractor.server.openai.serving import OpenAIFront
from extractor.server.service import Service

__all__ = ["PREFIX", "OpenAIFront", "error_response", "http_error", "install"]


def install(app: FastAPI, service: Service) -> None:
    """Serve ``/v1`` from ``app``, on ``service``."""
    app.state.openai = OpenAIFront(service)
    app.include_router(router)
