"""The HTTP service: wire models (protocol), thin routes, and the app factory."""

from extractor.server.app import create_app

__all__ = ["create_app"]
