"""``extractor eval``: tasks scored on a gold JSONL file (precision, recall, F1, reliability rates)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from extractor.cli.options import add_run_options, options_from
from extractor.cli.output import engine_output_to_stderr, print_json
from extractor.cli.settings import add_settings, settings_from
from extractor.errors import ExtractorError

if TYPE_CHECKING:
    from extractor.api import Extractor
    from extractor.jobs.gold import GoldItem


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``eval [TASK] GOLD.jsonl``."""
    evaluate = commands.add_parser("eval", help="score tasks on a gold JSONL file ({text, expected} per line)")
    evaluate.add_argument("paths", nargs="+", metavar="[TASK] GOLD.jsonl", help="a line's task key overrides TASK")
    evaluate.add_argument("--task-field", default="task", help="the key naming a line's task (default: task)")
    evaluate.add_argument("--task-map", help="'snips' (AddToPlaylist -> snips_add_to_playlist) or a JSON file")
    evaluate.add_argument("--limit", type=int, help="evaluate the first N lines (after --per-task)")
    evaluate.add_argument("--per-task", type=int, help="evaluate the first N lines of each task")
    evaluate.add_argument("--json", action="store_true", help="print the report as one JSON object")
    evaluate.add_argument("--out", help="write the predictions here (JSONL)")
    evaluate.add_argument("--fields", action="store_true", help="also report each field")
    evaluate.add_argument(
        "--errors", action="store_true", help="also sort the errors by kind (boundary, wrong field, invented, ...)"
    )
    evaluate.add_argument(
        "--exclude-pool-overlap",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="leave out gold texts that are also in their task's example pool (default: on; warns either way)",
    )
    add_run_options(evaluate)
    add_settings(evaluate)
    evaluate.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Score the tasks on the gold file and print the report (``--json``: one object)."""
    from extractor.api import Extractor
    from extractor.jobs import evaluation, gold
    from extractor.jobs.progress import Progress

    if len(args.paths) > 2:
        raise ExtractorError("eval takes [TASK] GOLD.jsonl")
    task, path = (None, args.paths[0]) if len(args.paths) == 1 else args.paths
    extractor = Extractor(settings=settings_from(args), tasks=None if task is None else [task])
    if task is not None:
        extractor.task(task)  # fail fast on an unknown task, before loading the model
    items = gold.load_gold(
        Path(path),
        task=task,
        known=extractor.catalog.names(),
        task_field=args.task_field,
        mapping=gold.task_map(args.task_map),
    )
    items = gold.select(items, per_task=args.per_task, limit=args.limit)
    items = _pool_overlap(extractor, items, exclude=args.exclude_pool_overlap)
    options = options_from(args)
    with engine_output_to_stderr():
        report, predictions = evaluation.run(
            extractor,
            items,
            concurrency=args.concurrency or extractor.settings.max_num_seqs,
            options=options,
            progress=Progress(label="eval", interval_s=args.progress_interval),
        )
    if args.out:
        evaluation.write_predictions(Path(args.out), predictions)
    if args.errors:
        from extractor.jobs.diagnosis import diagnose_all, report_text

        diagnosis = diagnose_all(p.record() for p in predictions)
        report["errors"] = diagnosis.as_dict()
    if args.json:
        print_json(report)
    else:
        print(evaluation.report_text(report, fields=args.fields))
        if args.errors:
            print("\n" + report_text(diagnosis))
    return 0


def _pool_overlap(extractor: Extractor, items: list[GoldItem], *, exclude: bool) -> list[GoldItem]:
    """Warn about gold texts that are also in their task's example pool; drop them when ``exclude``."""
    leaked = [i for i in items if (pool := extractor.task(i.task).pool) is not None and pool.contains(i.text)]
    if not leaked:
        return items
    lines = ", ".join(str(i.line) for i in leaked[:10]) + (" ..." if len(leaked) > 10 else "")
    action = "left out of the score" if exclude else "kept (--no-exclude-pool-overlap): the score is optimistic"
    print(
        f"warning: {len(leaked)} gold text(s) are also in their task's example pool (lines {lines}); {action}",
        file=sys.stderr,
    )
    if not exclude:
        return items
    dropped = {id(i) for i in leaked}
    kept = [i for i in items if id(i) not in dropped]
    if not kept:
        raise ExtractorError("every gold text is also in the example pool: nothing left to score")
    return kept
