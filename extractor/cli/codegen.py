"""``extractor codegen``: a pydantic module of a task's models, to type-check against."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from extractor.cli.settings import add_settings, settings_from


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``codegen TASK [-o FILE]``."""
    codegen = commands.add_parser("codegen", help="write a pydantic module of a task's models, to type-check against")
    codegen.add_argument("task")
    codegen.add_argument("-o", "--output", help="write the module here (default: stdout)")
    add_settings(codegen)
    codegen.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Write the task's pydantic module to ``--output`` or stdout."""
    from extractor.catalog.codegen import render_module
    from extractor.catalog.tasks import Catalog

    settings = settings_from(args)
    task = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend).get(args.task)
    source = render_module(task)
    if args.output:
        Path(args.output).write_text(source, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(source)
    return 0
