"""Run the app under uvicorn; on SIGTERM, finish what is in flight and refuse anything new."""

from __future__ import annotations

import logging
from types import FrameType

import uvicorn

from extractor.api import Extractor
from extractor.server.access import exposure_warning
from extractor.server.app import create_app
from extractor.server.service import Service


class _DrainingServer(uvicorn.Server):
    """uvicorn, telling the service at the first signal so /readyz and new requests get 503 at once.

    uvicorn itself then stops listening (new connections are refused), lets the requests in
    flight finish within ``timeout_graceful_shutdown``, and closes idle connections.
    """

    def __init__(self, config: uvicorn.Config, service: Service) -> None:
        super().__init__(config)
        self._service = service

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._service.draining = True
        super().handle_exit(sig, frame)


def serve(extractor: Extractor, *, access_log: bool = True) -> None:
    """Serve until SIGINT or SIGTERM, then drain and close the engine.

    uvicorn re-raises the signal once it has shut down, so the process ends as signalled.
    """
    settings = extractor.settings
    warning = exposure_warning(settings)
    if warning:
        logging.getLogger("extractor").warning("%s", warning)
    app = create_app(extractor, close_engine=True, watch=settings.watch)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=access_log,
        timeout_graceful_shutdown=int(settings.shutdown_timeout_s),
    )
    _DrainingServer(config, app.state.service).run()
