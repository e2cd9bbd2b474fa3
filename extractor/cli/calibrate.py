"""``extractor calibrate``: how a task's confidences map to being right, fitted on texts the model did not see."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from extractor.cli.output import engine_output_to_stderr, print_json
from extractor.cli.settings import add_settings, settings_from
from extractor.errors import ExtractorError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``calibrate TASK...``."""
    calibrate = commands.add_parser(
        "calibrate",
        help="fit how a task's confidences map to being right, on labelled texts the model did not see "
        "(calibration/<task>.json)",
    )
    calibrate.add_argument("tasks", nargs="+", metavar="TASK", help="several tasks served alike share one map")
    calibrate.add_argument("--gold", metavar="GOLD.jsonl", help="labelled texts to fit on (default: the pool)")
    calibrate.add_argument("--lines", type=int, default=400, help="pool lines to extract (default: 400)")
    calibrate.add_argument("--folds", type=int, default=5, help="the pool is cut in this many folds (default: 5)")
    calibrate.add_argument("--seed", type=int, default=0)
    calibrate.add_argument("--concurrency", type=int, help="requests at once (default: max-num-seqs)")
    calibrate.add_argument("--progress-interval", type=float, default=10.0, help="seconds between progress lines")
    add_settings(calibrate)
    calibrate.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Fit the tasks' calibration (one map for tasks served alike) and print its scores as JSON."""
    import asyncio

    from extractor import pipeline
    from extractor.api import Extractor
    from extractor.catalog.tasks import calibration_path
    from extractor.examples.pool import Example
    from extractor.jobs import gold
    from extractor.jobs.progress import Progress
    from extractor.review import calibration, fitting

    extractor = Extractor(settings=settings_from(args), tasks=args.tasks)
    tasks = [pipeline.served(extractor.task(name), extractor.settings) for name in args.tasks]
    if len({t.adapter for t in tasks}) > 1:
        raise ExtractorError("tasks calibrated together must be served alike (the same adapter, or none)")
    cases: list[fitting.Case] = []
    for task in tasks:
        if args.gold:
            items = gold.load_gold(Path(args.gold), task=task.name, known=extractor.catalog.names())
            shown = [Example(i.text, i.expected) for i in items if i.task == task.name]
            cases += fitting.example_cases(task, shown)
        else:
            cases += fitting.own_cases(task, lines=args.lines, folds=args.folds, seed=args.seed)
    source = (
        f"{len(cases)} lines of {args.gold}"
        if args.gold
        else f"{len(cases)} pool lines held out from the adapter's training"
        if tasks[0].adapter is not None
        else f"{len(cases)} pool lines, each extracted with a pool lacking its fold ({args.folds} folds)"
    )
    print(f"calibrate {', '.join(args.tasks)}: {source}", file=sys.stderr)
    progress = Progress(label="calibrate", interval_s=args.progress_interval)

    async def run() -> list[fitting.Mark]:
        try:
            await extractor.astart()
            progress.start(total=len(cases))
            return await fitting.collect(
                extractor.arun,
                cases,
                concurrency=args.concurrency or extractor.settings.max_num_seqs,
                progress=lambda n: progress.update(done=n),
            )
        finally:
            progress.finish()
            await extractor.aclose()

    with engine_output_to_stderr():
        pairs = asyncio.run(run())
    written = []
    for task in tasks:  # several tasks served alike share one map: more values, a steadier fit
        fitted = fitting.fit(pairs, task=task, model=extractor.engine.model_name, source=source)
        path = calibration_path(extractor.settings.tasks_dir, task.name)
        calibration.save(fitted, path)
        written.append(str(path))
    print_json(
        {
            "calibration": written,
            "values": fitted.values,
            "points": len(fitted.points),
            "own_maps": sorted(fitted.strata),
            **fitted.scores,
        }
    )
    return 0
