"""The ``extractor`` command line: extract, tasks, tasks check, model prepare, serve."""

from __future__ import annotations

import argparse
import json
import sys
import typing
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from extractor.config import Settings
from extractor.errors import ExtractionFailed, ExtractorError

_SETTING_HELP = {
    "home": "cache folder for converted models (EXTRACTOR_HOME)",
    "tasks_dir": "catalog root holding schemas/ and prompts/ (EXTRACTOR_TASKS_DIR)",
    "engine": "vllm (default) or scripted (a dry run answering with each task's first example)",
    "model": "'default' (embedded SmolLM2-135M-Instruct) or a model directory",
    "grammar_backend": "guidance (default) or xgrammar",
}
# Flags that only matter to some commands are still accepted everywhere: one vocabulary.
_SERVE_ONLY = {"host", "port"}


def _add_settings(parser: argparse.ArgumentParser, *, serve: bool = False) -> None:
    group = parser.add_argument_group("settings (each also EXTRACTOR_<NAME>)")
    hints = typing.get_type_hints(Settings)
    for f in fields(Settings):
        if f.name in _SERVE_ONLY and not serve:
            continue
        kind = hints[f.name]
        convert: Any = int if kind is int else float if kind is float else str
        group.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            type=convert,
            default=None,
            help=_SETTING_HELP.get(f.name, f"(EXTRACTOR_{f.name.upper()})"),
        )


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {f.name: getattr(args, f.name, None) for f in fields(Settings)}
    return Settings.from_env(**overrides)


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def _cmd_extract(args: argparse.Namespace) -> int:
    from extractor.api import Extractor

    if args.text is not None:
        text = args.text
    elif args.file is not None:
        text = Path(args.file).read_text(encoding="utf-8")
    elif not sys.stdin.isatty():
        text = sys.stdin.read()
    else:
        raise ExtractorError("no text: pass --text, --file or pipe the text on stdin")
    extractor = Extractor(settings=_settings(args))
    extractor.task(args.task)  # fail fast on an unknown task, before loading the model
    try:
        result = extractor.extract(
            args.task,
            text,
            temperature=args.temperature,
            max_attempts=args.max_attempts,
            max_tokens=args.max_tokens,
            grounding=args.grounding,
        )
    except ExtractionFailed as error:
        _print_json(
            {
                "error": "extraction_failed",
                "message": str(error),
                "attempts": [a.model_dump(mode="json") for a in error.attempts],
            }
        )
        return 1
    finally:
        extractor.close()
    _print_json(result.model_dump(mode="json"))
    return 0


def _cmd_tasks(args: argparse.Namespace) -> int:
    from extractor.tasks import Catalog

    settings = _settings(args)
    catalog = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend)
    if args.json:
        _print_json(
            {
                "tasks": [
                    {
                        "name": t.name,
                        "title": t.title,
                        "fields": [f.name for f in t.fields],
                        "examples": len(t.examples),
                        "warnings": list(t.warnings),
                    }
                    for t in catalog.tasks.values()
                ],
                "errors": [{"file": e.path, "pointer": e.pointer, "message": e.reason} for e in catalog.errors],
            }
        )
    else:
        for name in catalog.names():
            task = catalog.tasks[name]
            print(f"{name:32} {len(task.fields):3} fields  {len(task.examples)} examples  {task.title}")
            for warning in task.warnings:
                print(f"  warning: {warning}")
        for error in catalog.errors:
            print(f"error: {error}", file=sys.stderr)
    if args.action == "check":
        if catalog.errors:
            print(f"{len(catalog.errors)} bad task(s) in {settings.tasks_dir}", file=sys.stderr)
            return 1
        print(f"ok: {len(catalog.tasks)} task(s)", file=sys.stderr)
    return 0


def _cmd_model(args: argparse.Namespace) -> int:
    from extractor.models import prepare_default_model

    path = prepare_default_model(_settings(args), force=args.force)
    print(path)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from extractor.api import Extractor
    from extractor.server import create_app

    settings = _settings(args)
    extractor = Extractor(settings=settings)
    for error in extractor.catalog.errors:
        print(f"task left out: {error}", file=sys.stderr)
    uvicorn.run(create_app(extractor), host=settings.host, port=settings.port, log_level="info")
    extractor.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(prog="extractor", description="Structured extraction on vLLM.")
    commands = parser.add_subparsers(dest="command", required=True)

    extract = commands.add_parser("extract", help="extract one text and print the result as JSON")
    extract.add_argument("task")
    source = extract.add_mutually_exclusive_group()
    source.add_argument("--text", help="the text (default: stdin)")
    source.add_argument("--file", help="read the text from this file")
    extract.add_argument("--grounding", choices=["strict", "flag", "off"])
    _add_settings(extract)
    extract.set_defaults(handler=_cmd_extract)

    tasks = commands.add_parser("tasks", help="list tasks and load errors; `tasks check` fails on any bad task")
    tasks.add_argument("action", nargs="?", choices=["list", "check"], default="list")
    tasks.add_argument("--json", action="store_true", help="machine-readable output")
    _add_settings(tasks)
    tasks.set_defaults(handler=_cmd_tasks)

    model = commands.add_parser("model", help="manage the embedded default model")
    model.add_argument("action", choices=["prepare"])
    model.add_argument("--force", action="store_true", help="convert again even if already prepared")
    _add_settings(model)
    model.set_defaults(handler=_cmd_model)

    serve = commands.add_parser("serve", help="run the HTTP service")
    _add_settings(serve, serve=True)
    serve.set_defaults(handler=_cmd_serve)
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


if __name__ == "__main__":
    sys.exit(main())
