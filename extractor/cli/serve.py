"""The service: ``extractor serve`` (HTTP) and ``extractor mcp`` (the tasks as MCP tools over stdio)."""

from __future__ import annotations

import argparse
import sys

from extractor.cli.settings import COMMON, SERVICE, add_settings, settings_from


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and ``mcp``, each with the service's settings."""
    serve = commands.add_parser("serve", help="run the HTTP service")
    add_settings(serve, serve=True, shown=SERVICE)
    serve.add_argument("--no-watch", dest="watch", action="store_const", const=False, help="same as --watch false")
    serve.add_argument(
        "--no-playground", dest="playground", action="store_const", const=False, help="same as --playground false"
    )
    serve.set_defaults(handler=run_serve)

    mcp = commands.add_parser(
        "mcp", help="serve the tasks as MCP tools on stdin/stdout (for an assistant; `serve` has them at /mcp)"
    )
    add_settings(mcp, serve=True, shown=(*COMMON, "watch"))
    mcp.add_argument("--no-watch", dest="watch", action="store_const", const=False, help="same as --watch false")
    mcp.set_defaults(handler=run_mcp)


def run_serve(args: argparse.Namespace) -> int:
    """Serve the catalog over HTTP until SIGTERM or SIGINT; non-zero when the engine died."""
    from extractor.api import Extractor
    from extractor.server.runner import SERVE_ENGINE_NICE, serve

    settings = settings_from(args)
    if settings.engine_nice is None:  # the service favours its own answers over generation (see runner)
        settings = settings.with_(engine_nice=SERVE_ENGINE_NICE)
    extractor = Extractor(settings=settings)
    for error in extractor.catalog.errors:
        print(f"task left out: {error}", file=sys.stderr)
    try:
        status = serve(extractor)  # on SIGTERM/SIGINT: drains the requests in flight, then closes the engine
    finally:
        extractor.close()  # idempotent; covers a failure before the app started
    if status:
        print("the engine died: exiting so a supervisor can restart the service", file=sys.stderr)
    return status


def run_mcp(args: argparse.Namespace) -> int:
    """Serve the tasks as MCP tools on stdin/stdout until the client closes stdin."""
    from extractor.server.mcp import stdio

    return stdio.run(settings_from(args))  # stdout is the protocol's alone from here to exit
