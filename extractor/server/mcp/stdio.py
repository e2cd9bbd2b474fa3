"""``extractor mcp``: the MCP server on stdin and stdout, for an assistant that starts it as a subprocess.

The process is the service without HTTP: one extractor and its :class:`Service` (limits, admission,
deadline, review queue), the catalog reloaded on file changes and SIGHUP. The engine starts in
the background once the transport is up, so the client's handshake is answered at once; a call
made meanwhile waits for the engine. While it serves, the SDK points file descriptor 1 at stderr:
what the engine prints never reaches the protocol's stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

from mcp.server.stdio import stdio_server

from extractor.api import Extractor
from extractor.server.mcp.server import TaskTools
from extractor.server.reloading import CatalogReloader
from extractor.server.service import Service

log = logging.getLogger("extractor.server.mcp")


async def serve(extractor: Extractor) -> None:
    """Serve MCP on stdio until the client closes stdin; the engine is then the caller's to close.

    On SIGTERM or SIGINT the process ends here, once the engine is closed: the SDK reads stdin in a
    worker thread that nothing but the client closing stdin wakes, so a signalled server could not
    otherwise leave its transport.
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

    async with stdio_server() as (read, write):
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
