"""The ``extractor`` parser, built from each command's module, and the console script's entry point."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from extractor.cli import (
    batch,
    calibrate,
    codegen,
    evaluate,
    examples,
    extract,
    model,
    review,
    serve,
    tasks,
    train,
    tune,
)
from extractor.errors import ExtractorError

# In the order ``extractor --help`` lists them; ``serve`` registers ``serve`` and ``mcp``.
COMMANDS = (extract, codegen, tasks, model, batch, evaluate, examples, review, train, calibrate, tune, serve)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(prog="extractor", description="Structured extraction on vLLM.")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``extractor`` console script."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except ExtractorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return code
