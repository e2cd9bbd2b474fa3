"""Run the app under uvicorn; on SIGTERM, finish what is in flight and refuse anything new."""

from __future__ import annotations

import asyncio
import logging
from types import FrameType

import uvicorn

from extractor.api import Extractor
from extractor.server.access import exposure_warning
from extractor.server.app import create_app
from extractor.server.service import Service

ENGINE_DEAD_EXIT = 3  # the exit status of a server whose engine died
# How long /readyz answers 503 before the server stops listening, so a balancer sees it.
ENGINE_DEAD_GRACE_S = 2.0


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

    def engine_dead(self) -> None:
        """The engine died: /readyz and new requests get 503 for a moment, then the server stops."""
        self._service.draining = True
        # What still runs cannot finish on a dead engine: wait for it briefly, not shutdown_timeout_s.
        self.config.timeout_graceful_shutdown = int(ENGINE_DEAD_GRACE_S)
        asyncio.get_running_loop().call_later(ENGINE_DEAD_GRACE_S, self._stop)

    def _stop(self) -> None:
        self.should_exit = True


def serve(extractor: Extractor, *, access_log: bool = True) -> int:
    """Serve until SIGINT or SIGTERM, then drain and close the engine; the process's exit status.

    uvicorn re-raises the signal once it has shut down, so the process ends as signalled. When
    the engine dies, the server stops the same way and returns :data:`ENGINE_DEAD_EXIT` (a
    supervisor restarts it; restarting vLLM inside a process whose engine core died is not safe).
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
    service: Service = app.state.service
    server = _DrainingServer(config, service)
    service.on_engine_dead = server.engine_dead
    server.run()
    return ENGINE_DEAD_EXIT if service.engine_dead is not None else 0
