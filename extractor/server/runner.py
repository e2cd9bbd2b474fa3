"""Run the app under uvicorn; on SIGTERM, finish what is in flight and refuse anything new."""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from types import FrameType

import uvicorn

from extractor.api import Extractor
from extractor.server import header_timeout
from extractor.server.access import exposure_warning
from extractor.server.app import create_app
from extractor.server.service import Service

ENGINE_DEAD_EXIT = 3  # the exit status of a server whose engine died
# How long /readyz answers 503 before the server stops listening, so a balancer sees it.
ENGINE_DEAD_GRACE_S = 2.0
GIL_SWITCH_INTERVAL_S = 0.0005  # see serve(): 429 p50 on the real engine, 2 cores: 40-51 ms before, 28-44 after
# `serve`'s default EXTRACTOR_ENGINE_NICE (CPU engines): the slowest 429 of 50 clients on 2 cores went
# from 48-54 ms to 31-40 ms; generation may lose a few per cent (not resolved from noise by `bench.run --quick`)
SERVE_ENGINE_NICE = 10
log = logging.getLogger("extractor.server")


class _DrainingServer(uvicorn.Server):
    """uvicorn, draining at the first SIGTERM or SIGINT while it still listens.

    uvicorn alone stops listening at the signal, so a new request meets a refused connection. Here
    the socket stays open: the service refuses new engine work with 503 (``Connection: close``)
    and ``/readyz`` turns 503, while the jobs admitted before the signal finish (within
    ``shutdown_timeout_s``); then uvicorn shuts down as usual (stops listening, lets the answers
    being written finish, closes the engine) and the process exits 0. A second signal exits at
    once, as signalled.
    """

    def __init__(self, config: uvicorn.Config, service: Service, *, drain_timeout_s: float) -> None:
        super().__init__(config)
        self._service = service
        self._drain_timeout_s = drain_timeout_s
        self._signalled: float | None = None  # time.monotonic() of the first signal
        self._drain: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: it only sets flags; the loop starts the drain at its next tick.
        if self._signalled is None and not self.should_exit:
            self._signalled = time.monotonic()
            self._service.begin_drain()
            return
        super().handle_exit(sig, frame)  # uvicorn re-raises the signal once it has stopped
        self.should_exit = self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self._signalled is not None and self._drain is None:
            self._drain = asyncio.create_task(self._drain_then_exit(self._signalled))
        return bool(await super().on_tick(counter))

    async def _drain_then_exit(self, signalled: float) -> None:
        admitted = self._service.admission.admitted
        log.info("draining: %d jobs admitted; new requests get 503 (a second signal exits at once)", admitted)
        left = self._drain_timeout_s - (time.monotonic() - signalled)
        if await self._service.drain(timeout_s=max(0.0, left)):
            log.info("drained after %.1f s", time.monotonic() - signalled)
        else:
            log.error(
                "%d jobs still running after EXTRACTOR_SHUTDOWN_TIMEOUT_S (%g s); cancelling them",
                self._service.admission.admitted,
                self._drain_timeout_s,
            )
        # uvicorn's own wait is for answers still being written: what is left of the budget, >= 1 s.
        left = self._drain_timeout_s - (time.monotonic() - signalled)
        self.config.timeout_graceful_shutdown = max(1, math.ceil(left))
        self.should_exit = True

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

    After a drain the status is 0; a second signal ends the process as signalled. When the
    engine dies, the server stops and returns :data:`ENGINE_DEAD_EXIT` (a supervisor restarts
    it; restarting vLLM inside a process whose engine core died is not safe).
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
        http=header_timeout.protocol(settings.header_timeout_s),
    )
    service: Service = app.state.service
    server = _DrainingServer(config, service, drain_timeout_s=settings.shutdown_timeout_s)
    service.on_engine_dead = server.engine_dead
    if settings.engine == "vllm":
        # vLLM's output loop runs on a thread of this process: at CPython's default switch interval
        # (5 ms) each step of a cheap answer (a 429, a 503, /healthz) may wait that long for the GIL.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    server.run()
    return ENGINE_DEAD_EXIT if service.engine_dead is not None else 0
