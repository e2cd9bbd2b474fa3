"""``extractor batch``: every line of a JSONL file (or file of a folder) into a JSONL file, here or on Ray."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from extractor.cli.options import add_run_options, options_from
from extractor.cli.output import engine_output_to_stderr
from extractor.cli.settings import add_settings, settings_from
from extractor.config import Settings
from extractor.errors import ExtractorError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``batch TASK IN.jsonl|FOLDER OUT.jsonl``, ``--ray`` for a Ray cluster."""
    batch = commands.add_parser("batch", help="extract every line of a JSONL file into a JSONL file, resumably")
    batch.add_argument("task")
    batch.add_argument(
        "input",
        metavar="IN.jsonl|FOLDER",
        nargs="+",
        help="one JSON object per line (several with --ray), or a folder of documents (PDF, HTML, DOCX, text): "
        "one record per file",
    )
    batch.add_argument(
        "output", metavar="OUT.jsonl", help="one record per input line; re-run to resume (--ray: a folder of shards)"
    )
    batch.add_argument("--text-field", default="text", metavar="KEY", help="the key holding the text (default: text)")
    batch.add_argument("--id-field", default="id", metavar="KEY", help="the row id's key (default: id; else line)")
    batch.add_argument("--max-chars", type=int, metavar="N", help="longer: an error record (default: max-text-chars)")
    add_run_options(batch)
    scale = batch.add_argument_group("on a Ray cluster (the [ray] extra)")
    scale.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run on a Ray Data actor pool: a cluster's ADDRESS, or none for RAY_ADDRESS or a local one",
    )
    scale.add_argument("--actors", type=int, metavar="N", help="engines, one an actor (default: one a GPU, else 1)")
    scale.add_argument("--cpus-per-actor", type=float, default=1.0, metavar="N", help="CPUs an actor reserves (1)")
    scale.add_argument("--gpus-per-actor", type=float, metavar="N", help="GPUs an actor reserves (1 if any)")
    scale.add_argument("--shard-rows", type=int, default=100_000, metavar="N", help="records a shard (100000)")
    scale.add_argument(
        "--rows-per-call", type=int, metavar="N", help="rows an actor takes a call (default: --concurrency)"
    )
    add_settings(batch)
    batch.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Extract every row of the input into the output, resumably; on a Ray cluster with ``--ray``."""
    from extractor.api import Extractor
    from extractor.jobs import batch
    from extractor.jobs.progress import Progress

    settings = settings_from(args)
    if args.ray is not None:
        return _batch_on_ray(args, settings)
    if len(args.input) > 1:
        raise ExtractorError("batch takes one input file; several are read with --ray")
    config = batch.BatchConfig(
        task=args.task,
        input=Path(args.input[0]),
        output=Path(args.output),
        **_row_options(args, settings),
    )
    progress = Progress(label="batch", interval_s=args.progress_interval)
    with engine_output_to_stderr():
        summary = batch.run(Extractor(settings=settings, tasks=[args.task]), config, progress=progress)
    print(summary.text())
    print(f"summary: {batch.summary_path(config.output)}")
    return 0


def _row_options(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """What a batch on one machine and one on Ray both take from the command line."""
    from extractor import options

    return {
        "text_field": args.text_field,
        "id_field": args.id_field,
        "max_chars": args.max_chars or settings.max_text_chars,
        "concurrency": args.concurrency or settings.max_num_seqs,
        "options": options.checked(options_from(args)),
    }


def _batch_on_ray(args: argparse.Namespace, settings: Settings) -> int:
    from extractor.jobs.progress import Progress
    from extractor.scale import ray_batch

    config = ray_batch.RayBatchConfig(
        task=args.task,
        inputs=tuple(Path(p) for p in args.input),
        output=Path(args.output),
        address=args.ray or None,
        actors=args.actors,
        cpus_per_actor=args.cpus_per_actor,
        gpus_per_actor=args.gpus_per_actor,
        shard_rows=args.shard_rows,
        batch_rows=args.rows_per_call,
        **_row_options(args, settings),
    )
    progress = Progress(label="batch", interval_s=args.progress_interval)
    with engine_output_to_stderr():
        summary = ray_batch.run(config, settings=settings, progress=progress)
    print(summary.text())
    print(f"summary: {ray_batch.summary_path(config)}")
    return 0
