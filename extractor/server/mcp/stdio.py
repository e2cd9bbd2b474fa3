"""``extractor mcp``: the MCP server on stdin and stdout, for an assistant that starts it as a subprocess.

The process is the service without HTTP: one extractor and its :class:`Service` (limits, admission,
deadline, review queue), the catalog reloaded on file changes and SIGHUP. The engine starts in
the background once the transport is up, so the client's handshake is answered at once; a call
made meanwhile waits for the engine (:class:`~extractor.server.mcp.server.TaskTools`).

Stdout belongs to the protocol alone, from the first byte to exit: before anything else runs,
:func:`take_stdio` keeps the real stdin and stdout for the protocol on descriptors of their own,
points descriptor 1 at stderr and descriptor 0 at the null device, for the rest of the process.
Whatever else writes to stdout (a logger bound to ``sys.stdout``, as vLLM's are; a ``print``; a
child process, which inherits descriptor 1; vLLM's shutdown) lands on stderr, at start, while
serving and at exit alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import anyio
from mcp.server.stdio import stdio_server

from extractor.api import Extractor
from extractor.config import Settings
from extractor.engines.base import Engine
from extractor.server.mcp.server import TaskTools
from extractor.server.reloading import CatalogReloader
from extractor.server.service import Service

log = logging.getLogger("extractor.server.mcp")


@dataclass(frozen=True)
class Wire:
    """The protocol's own ends of the real stdin and stdout (descriptors 0 and 1 point elsewhere)."""

    read: BinaryIO
    write: BinaryIO


def take_stdio() -> Wire:
    """Keep stdin and stdout for the protocol; from now on descriptor 1 is stderr and 0 the null device.

    The protocol's descriptors are not inherited by child processes (``os.dup``'s are not), so a
    child writes to stderr; this process's ``sys.stdout`` does too.
    """
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    return Wire(os.fdopen(wire_in, "rb", buffering=0), os.fdopen(wire_out, "wb"))


def run(settings: Settings, *, engine_factory: Callable[[], Engine] | None = None) -> int:
    """``extractor mcp``: take stdio, build the extractor, serve until the client closes stdin, close.

    ``engine_factory`` (tests): the engine, built once stdio is taken, as the settings' own would be.
    """
    wire = take_stdio()  # first: the catalog's load and the engine's import already write
    engine = engine_factory() if engine_factory is not None else None
    extractor = Extractor(settings=settings, engine=engine)
    for error in extractor.catalog.errors:
        print(f"task left out: {error}", file=sys.stderr)
    try:
        asyncio.run(serve(extractor, wire))  # until the client closes stdin, or SIGTERM/SIGINT
    finally:
        extractor.close()
    return 0


async def serve(extractor: Extractor, wire: Wire | None = None) -> None:
    """Serve MCP on ``wire`` (else on stdio, as the SDK claims it) until the client closes it.

    The engine is then the caller's to close. On SIGTERM or SIGINT the process ends here, once the
    engine is closed: the SDK reads stdin in a worker thread that nothing but the client closing
    stdin wakes, so a signalled server could not otherwise leave its transport.
    """
    service = Service(extractor)
    reloader = CatalogReloader(extractor, service.metrics)
    tools = TaskTools(service, wait_for_engine=True)
    tools.follow(reloader)
    signalled = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(number, signalled.set)

    async def stop() -> None:
        tools.listen.close()
        await reloader.stop()
        await service.stop()
        service.review.close()

    streams: dict[str, anyio.AsyncFile[str]] = {}
    if wire is not None:
        streams = {
            "stdin": anyio.wrap_file(io.TextIOWrapper(wire.read, encoding="utf-8", errors="replace")),
            "stdout": anyio.wrap_file(io.TextIOWrapper(wire.write, encoding="utf-8")),
        }
    async with stdio_server(**streams) as (read, write):
        await asyncio.to_thread(service.review.open)
        service.begin_start()
        reloader.start(watch=extractor.settings.watch)
        serving = asyncio.create_task(tools.server.run(read, write, tools.server.create_initialization_options()))
        waiting = asyncio.create_task(signalled.wait())
        await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if signalled.is_set():
            log.info("signalled: closing the engine and exiting")
            serving.cancel()
            await stop()
            await extractor.aclose()
            sys.stderr.flush()
            os._exit(0)
        await stop()
        serving.result()  # the server's own failure, if it failed
