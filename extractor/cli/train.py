"""``extractor train``: a LoRA adapter trained on tasks' example pools, optionally scored on a gold file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from extractor.cli.output import engine_output_to_stderr, print_json
from extractor.cli.settings import add_settings, settings_from
from extractor.config import Settings
from extractor.errors import ExtractorError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``train TASK...``."""
    train = commands.add_parser("train", help="train a LoRA adapter on tasks' example pools (adapters/<task>/)")
    train.add_argument("tasks", nargs="+", metavar="TASK")
    train.add_argument("--epochs", type=float, help="passes over the samples (default: 2-10, from the pool size)")
    train.add_argument("--rank", type=int, help="LoRA rank (default: 16-64, from the pool size; alpha is twice it)")
    train.add_argument("--limit", type=int, help="at most this many pool lines per task")
    train.add_argument("--out", help="adapter folder (default: <tasks-dir>/adapters/<task>)")
    train.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GOLD.jsonl",
        help="never train on this gold file's texts (repeatable; pass the file `eval` scores)",
    )
    train.add_argument("--held-out", type=float, default=0.05, help="share of samples kept for validation loss")
    train.add_argument("--batch-size", type=int, default=8)
    train.add_argument("--learning-rate", type=float, default=2e-4)
    train.add_argument(
        "--max-length",
        type=int,
        help="tokens a chat keeps, its answer last (default: 512; 2048 for a task read by field, a passage's prompt)",
    )
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--resume", action="store_true", help="go on from <out>/checkpoint")
    train.add_argument(
        "--eval",
        metavar="GOLD.jsonl",
        help="after training, score the task with the new adapter on this gold file (F1, not only loss); "
        "its texts are left out of training",
    )
    add_settings(train)
    train.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Train one adapter on the tasks' pools and print its manifest's metrics as JSON."""
    from extractor.adapters import manifest
    from extractor.catalog.tasks import Catalog
    from extractor.jobs import adapting
    from extractor.models import resolve_model_dir
    from extractor.training import data

    settings = settings_from(args)
    catalog = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend)
    tasks = [catalog.get(name) for name in args.tasks]
    if args.out is None and len(tasks) > 1:
        raise ExtractorError("several tasks train one adapter: say where with --out")
    out = Path(args.out) if args.out else settings.tasks_dir / "adapters" / tasks[0].name
    gold_files = [Path(p) for p in [*args.exclude, *([args.eval] if args.eval else [])]]
    if args.eval and (args.out is not None or len(tasks) > 1):
        raise ExtractorError("--eval scores one task with its own adapter (adapters/<task>): drop --out")
    how = adapting.Training(
        epochs=args.epochs,
        rank=args.rank,
        limit=args.limit,
        held_out=args.held_out,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_length=args.max_length,
        seed=args.seed,
        resume=args.resume,
    )
    exclude = data.gold_texts(gold_files)
    metrics = adapting.train(tasks, out, resolve_model_dir(settings), how, exclude=exclude)
    if args.eval:
        metrics["eval"] = _score_adapter(settings, tasks[0].name, Path(args.eval))
        manifest.add_metrics(out, {"eval": metrics["eval"]})
    print_json({"adapter": str(out), **metrics})
    return 0


def _score_adapter(settings: Settings, task: str, path: Path) -> dict[str, Any]:
    """``extractor eval TASK GOLD`` on the freshly trained adapter: the scores the manifest keeps."""
    from extractor.api import Extractor
    from extractor.jobs import evaluation, gold
    from extractor.jobs.progress import Progress

    extractor = Extractor(settings=settings, tasks=[task])  # loads the catalog again: the task now has its adapter
    items = gold.load_gold(path, task=task, known=extractor.catalog.names())
    with engine_output_to_stderr():
        report, _ = evaluation.run(
            extractor, items, concurrency=extractor.settings.max_num_seqs, progress=Progress(label="eval")
        )
    print(evaluation.report_text(report), file=sys.stderr)
    keys = ("docs", "f1", "precision", "recall", "schema_valid_rate", "ungrounded_rate", "docs_per_s")
    return {"gold": str(path), **{k: report[k] for k in keys}}
