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
import signal

from mcp.server.stdio import stdio_server

from extractor.api import Extractor
from extractor.mcp.server import TaskTools
from extractor.server.reloading import CatalogReloader
from extractor.server.service import Service

log = logging.getLogger("extractor.mcp")


async def serve(extractor: Extractor) -> None:
    """Serve MCP on stdio until the client closes stdin (or SIGTERM, SIGINT); the engine is the caller's to close."""
    service = Service(extractor)
    reloader = CatalogReloader(extractor, service.metrics)
    tools = TaskTools(service, wait_for_engine=True)
    tools.follow(reloader)
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if main is not None:
        for number in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(number, main.cancel)
    async with stdio_server() as (read, write):
        await asyncio.to_thread(service.review.open)
        service.begin_start()
        reloader.start(watch=extractor.settings.watch)
        try:
            await tools.server.run(read, write, tools.server.create_initialization_options())
        except asyncio.CancelledError:
            log.info("signalled: stopping")
        finally:
            tools.listen.close()
            await reloader.stop()
            await service.stop()
            service.review.close()
