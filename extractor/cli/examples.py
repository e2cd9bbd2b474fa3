"""``extractor examples import``: a gold file turned into a task's example pool."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from extractor.cli.settings import add_settings, settings_from
from extractor.cli.tune import models_to_try
from extractor.errors import ExtractorError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``examples import TASK GOLD.jsonl``."""
    examples = commands.add_parser("examples", help="manage a task's example pool (examples/<task>.jsonl)")
    examples_actions = examples.add_subparsers(dest="action", required=True)
    importer = examples_actions.add_parser("import", help="turn a gold file into the task's example pool")
    importer.add_argument("task")
    importer.add_argument("gold", metavar="GOLD.jsonl", help="lines with 'text' and 'expected' (as eval) or 'output'")
    importer.add_argument("--task-field", default="task", help="the key naming a line's task (default: task)")
    importer.add_argument("--task-map", help="'snips' (AddToPlaylist -> snips_add_to_playlist) or a JSON file")
    importer.add_argument("--out", help="write the pool here (default: <tasks-dir>/examples/<task>.jsonl)")
    add_settings(importer)
    importer.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Write the task's example pool from the gold file, then say what tuning it would take."""
    from extractor.catalog.tasks import Catalog
    from extractor.documents import Limits
    from extractor.examples.importing import import_gold, write_pool
    from extractor.jobs import gold

    settings = settings_from(args)
    task = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend).get(args.task)
    lines, report = import_gold(
        Path(args.gold),
        task,
        task_field=args.task_field,
        mapping=gold.task_map(args.task_map) if args.task_map else None,
        limits=Limits.from_settings(settings, ocr_languages=task.settings.ocr_languages),
    )
    print(report.text(), file=sys.stderr)
    if not lines:
        raise ExtractorError(f"{args.gold}: no usable line for {args.task}; nothing written")
    out = Path(args.out) if args.out else settings.tasks_dir / "examples" / f"{task.name}.jsonl"
    write_pool(out, lines)
    print(out)
    if not args.out:  # the task's own pool now: say what tuning it would take
        from extractor.jobs import tuning

        pooled = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend).tasks.get(task.name)
        if pooled is not None and report.documents and pooled.reading and pooled.reads_by_field:
            print(
                f"read field by field as the documents taught; `extractor tune {task.name} --documents {args.gold}` "
                f"measures each field's reading on them, whole ({len(tuning.reading_candidates(pooled))} runs)",
                file=sys.stderr,
            )
        elif pooled is not None:
            own = pooled.settings.model or settings.model
            models = models_to_try(settings, own)
            plan = tuning.plan_text(pooled, tuning.candidates(pooled), lines=min(100, len(lines)), models=models)
            print(plan, file=sys.stderr)
    return 0
