"""``extractor tasks``: the catalog's tasks and load errors; ``tasks check`` fails on any bad task."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from extractor.cli.output import print_json
from extractor.cli.settings import add_settings, settings_from

if TYPE_CHECKING:
    from extractor.catalog.tasks import Task


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tasks [list|check] [--json]``."""
    tasks = commands.add_parser("tasks", help="list tasks and load errors; `tasks check` fails on any bad task")
    tasks.add_argument("action", nargs="?", choices=["list", "check"], default="list")
    tasks.add_argument("--json", action="store_true", help="machine-readable output")
    add_settings(tasks)
    tasks.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """List the tasks and load errors; with ``check``, also warn about answers cut short, and fail on any error."""
    from extractor.catalog.tasks import Catalog

    settings = settings_from(args)
    catalog = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend, pools=settings.pools_dir)
    if args.json:
        print_json(
            {
                "tasks": [
                    {
                        "name": t.name,
                        "title": t.title,
                        "fields": [f.name for f in t.fields],
                        "examples": len(t.examples),
                        "pool": len(t.pool) if t.pool is not None else 0,
                        "model": t.settings.model or settings.model,
                        "warnings": list(t.warnings),
                        "reading": {
                            f: {"variant": v, "options": dict(t.reading[f])}
                            for f, v in _reading(t, settings.tasks_dir).items()
                        },
                    }
                    for t in catalog.tasks.values()
                ],
                "errors": [{"file": e.path, "pointer": e.pointer, "message": e.reason} for e in catalog.errors],
            }
        )
    else:
        for name in catalog.names():
            task = catalog.tasks[name]
            pool = f"{len(task.pool):6} in pool" if task.pool is not None else " " * 14
            model = task.settings.model or settings.model
            print(
                f"{name:32} {len(task.fields):3} fields  {len(task.examples)} examples {pool}  {model:12} {task.title}"
            )
            if task.reading and task.reads_by_field:
                read = ", ".join(f"{f} {v}" for f, v in _reading(task, settings.tasks_dir).items())
                print(f"  reads long documents field by field: {read}")
            for warning in task.warnings:
                print(f"  warning: {warning}")
        for error in catalog.errors:
            print(f"error: {error}", file=sys.stderr)
    if args.action == "check":
        from extractor.catalog import budget

        for name in catalog.names():
            task = catalog.tasks[name]
            cut = budget.check(task.schema, max_tokens=task.settings.max_tokens or settings.max_tokens)
            if cut is not None:
                print(f"warning: {name}: {cut}", file=sys.stderr)
        if catalog.errors:
            print(f"{len(catalog.errors)} bad task(s) in {settings.tasks_dir}", file=sys.stderr)
            return 1
        print(f"ok: {len(catalog.tasks)} task(s)", file=sys.stderr)
    return 0


def _reading(task: Task, root: Path) -> dict[str, str]:
    """Each field's reading variant: as ``extractor tune --documents`` chose it (tuned), else as the pool taught it."""
    from extractor.catalog import tuned

    chosen = tuned.reading_of(root, task.name)
    return {f: f"{chosen[f]} (tuned)" if f in chosen else "learned" for f in task.reading}
