"""``extractor tune``: a task's worked examples, hints, adapter and model chosen by measuring them on its pool."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from extractor.cli.output import engine_output_to_stderr
from extractor.cli.settings import add_settings, settings_from
from extractor.config import Settings
from extractor.errors import ExtractorError
from extractor.models import MODELS, prepare_model, prepared_models

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from extractor.api import Extractor
    from extractor.catalog.tasks import Task
    from extractor.jobs import tuning
    from extractor.review.fitting import Case


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tune TASK``."""
    tune = commands.add_parser(
        "tune",
        help="choose a task's worked examples, hints and adapter by measuring them on its own pool (tuned/<task>.json)",
    )
    tune.add_argument("task", metavar="TASK")
    tune.add_argument("--lines", type=int, default=100, help="pool lines to measure on, in folds (default: 100)")
    tune.add_argument(
        "--documents",
        metavar="FILE",
        help="tune by document: the labelled documents of this gold file (lines with 'file', as imported), "
        "read whole as serving reads them, folded by document; chooses each field's reading",
    )
    tune.add_argument("--docs", type=int, default=40, help="with --documents: documents to measure on (default: 40)")
    tune.add_argument("--folds", type=int, default=5, help="the lines are cut in this many folds (default: 5)")
    tune.add_argument("--k", default="0,3,5", help="worked examples per request to try (default: 0,3,5)")
    tune.add_argument(
        "--budget", type=float, help="seconds: no candidate starts that would end past it, and no case once it is spent"
    )
    tune.add_argument("--dry-run", action="store_true", help="measure and print the table; write nothing")
    tune.add_argument(
        "--try-model",
        action="append",
        metavar="MODEL",
        help="also try this model with the settings that scored highest; repeatable (default: every other packaged "
        "model, e.g. gemma3-270m, prepared first where it is not)",
    )
    tune.add_argument(
        "--no-try-model", dest="try_others", action="store_false", help="measure the task's own model only"
    )
    tune.add_argument(
        "--train",
        action="store_true",
        help="with --documents: also train an adapter on the pool's passages of the documents it does not "
        "measure on, and keep it where it beats the chosen readings beyond noise (tuned/<task>.adapter)",
    )
    tune.add_argument("--train-limit", type=int, help="with --train: at most this many training chats")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--concurrency", type=int, help="requests at once (default: max-num-seqs)")
    add_settings(tune)
    tune.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Measure the task's candidates on its pool within the budget, write the winner and calibrate on its marks."""
    from extractor import pipeline
    from extractor.api import Extractor
    from extractor.catalog.tasks import calibration_path
    from extractor.jobs import tuning
    from extractor.review import calibration, fitting

    extractor = Extractor(settings=settings_from(args), tasks=[args.task])
    task = pipeline.served(extractor.task(args.task), extractor.settings)
    if task.pool is None or not len(task.pool):
        raise ExtractorError(
            f"task {task.name!r} has no example pool to tune on: import labelled lines first "
            f"(`extractor examples import {task.name} FILE`)"
        )
    if args.documents is not None:
        return _by_document(args, extractor, task)
    ks = tuple(int(k) for k in args.k.split(","))
    options = tuning.candidates(task, ks=ks)
    cases = fitting.own_cases(task, lines=args.lines, folds=args.folds, seed=args.seed)
    if any(e.source is not None for e in task.pool.examples):
        print(
            f"(this pool came from labelled documents: `extractor tune {task.name} --documents FILE` measures "
            "each field's reading on them, whole)",
            file=sys.stderr,
        )
    own = task.settings.model or extractor.settings.model
    others = models_to_try(extractor.settings, own, asked=args.try_model, others=args.try_others)
    preparing = unprepared(extractor.settings, others)
    print(tuning.plan_text(task, options, lines=len(cases), models=others, preparing=preparing), file=sys.stderr)
    budget = args.budget
    for name in preparing:  # a one-time conversion of packaged weights, counted in the budget
        started = time.perf_counter()
        print(f"preparing {name} (`extractor model prepare --model {name}`; --no-try-model skips it)", file=sys.stderr)
        prepare_model(extractor.settings.with_(model=name))
        budget = None if budget is None else budget - (time.perf_counter() - started)

    rows = _measure(args, extractor, cases, options, budget, _shown, models=others)
    chosen = tuning.winner(rows)
    print(tuning.table(rows, chosen))
    left = len(options) + len(others) - len(rows)
    if left > 0:
        print(f"\n{left} candidate(s) not measured within the budget of {args.budget:.0f} s", file=sys.stderr)
    if args.dry_run:
        print(f"\nchosen: {chosen.candidate.label} (dry run: nothing written)", file=sys.stderr)
        return 0
    path = tuning.write(extractor.settings.tasks_dir, task, rows, chosen, lines=len(cases), folds=args.folds)
    print(f"\nchosen: {chosen.candidate.label}, written to {path} (a running service picks it up)", file=sys.stderr)
    if len(chosen.marks) >= 20:  # calibrated on the same held-out lines, as the chosen settings serve them
        source = f"{len(cases)} pool lines held out in {args.folds} folds while tuning ({chosen.candidate.label})"
        fitted = fitting.fit(chosen.marks, task=task, model=extractor.engine.model_name, source=source)
        calibration.save(fitted, calibration_path(extractor.settings.tasks_dir, task.name))
        raw = fitted.scores["raw"]
        print(
            f"calibrated on them: {raw['values']} values, catch at 20 % {raw['catch_rate']:.2f} of a ceiling "
            f"{raw['catch_ceiling']:.2f}, AUROC {raw['auroc'] or 0:.2f}",
            file=sys.stderr,
        )
    return 0


def _by_document(args: argparse.Namespace, extractor: Extractor, task: Task) -> int:
    """``tune --documents FILE``: each field's reading measured on whole labelled documents, chosen per field."""
    from pathlib import Path

    from extractor.api import Extractor
    from extractor.catalog import tuned
    from extractor.documents import Limits
    from extractor.engines.memo import MemoEngine
    from extractor.examples.importing import read_documents
    from extractor.jobs import tuning
    from extractor.review import fitting

    # the readings share many requests (a field a variant leaves as it was, a first passage): each read once
    memo = MemoEngine(extractor.engine)
    extractor = Extractor(settings=extractor.settings, engine=memo, catalog=extractor.catalog, tasks=[task.name])
    options = tuning.reading_candidates(task, tuned.reading_of(extractor.settings.tasks_dir, task.name))
    limits = Limits.from_settings(extractor.settings, ocr_languages=task.settings.ocr_languages)
    try:
        documents, unread = read_documents(Path(args.documents), task, limits=limits)
    except (OSError, ValueError) as error:
        raise ExtractorError(f"--documents: {error}") from None
    for problem in unread:
        print(f"left out, not converted: {problem}", file=sys.stderr)
    cases = fitting.document_cases(task, documents, count=args.docs, folds=args.folds, seed=args.seed)
    print(
        f"`extractor tune {task.name} --documents` would measure {len(options)} readings "
        f"({'; '.join(c.label for c in options)}) on {len(cases)} documents held out in {args.folds} folds, "
        "then choose each field's reading on its own",
        file=sys.stderr,
    )

    started = time.perf_counter()
    rows = _measure(args, extractor, cases, options, args.budget, _shown)
    print(
        f"{memo.recalled} of {memo.asked} requests were one already read: answered once, read once",
        file=sys.stderr,
    )
    chosen, fields = tuning.by_field(rows)
    if args.train:
        left = None if args.budget is None else args.budget - (time.perf_counter() - started)
        chosen = _adapter_row(args, extractor, task, cases, rows, chosen, left)
    print(tuning.table(rows, chosen))
    print()
    print(tuning.field_table(fields))
    print(f"\nchosen: {chosen.candidate.label} (F1 {chosen.f1:.3f})", file=sys.stderr)
    if args.dry_run:
        print("(dry run: nothing written)", file=sys.stderr)
        return 0
    written = tuning.write(
        extractor.settings.tasks_dir, task, rows, chosen, lines=len(cases), folds=args.folds, fields=fields
    )
    print(f"written to {written} (a running service picks it up)", file=sys.stderr)
    return 0


def _adapter_row(
    args: argparse.Namespace,
    extractor: Extractor,
    task: Task,
    cases: Sequence[Case],
    rows: list[tuning.Row],
    chosen: tuning.Row,
    budget: float | None,
) -> tuning.Row:
    """``--train``: an adapter trained on the passages of the documents no case reads, measured in the same folds.

    Half of what is left of the budget trains (the adapter saved as trained when it is spent), the
    rest measures. The adapter's row joins ``rows``; it is the one chosen only where it beats
    ``chosen`` beyond noise, and its folder is removed where it is not (and after a dry run).
    """
    import shutil
    from dataclasses import replace

    from extractor.api import Extractor
    from extractor.catalog.reload import load_catalog
    from extractor.jobs import adapting, tuning
    from extractor.models import resolve_model_dir
    from extractor.training.trainer import TrainingError

    if budget is not None and budget <= 0:
        print("--train: the budget is spent: no adapter trained", file=sys.stderr)
        return chosen
    settings = extractor.settings
    relative = tuning.adapter_folder(task.name)
    folder = settings.tasks_dir / relative
    held = {c.document for c in cases if c.document is not None}
    started = time.perf_counter()
    deadline = None if budget is None else started + budget / 2
    how = adapting.Training(limit=args.train_limit, seed=args.seed)
    try:
        adapting.train([task], folder, resolve_model_dir(settings), how, documents=held, deadline=deadline)
    except TrainingError as error:
        print(f"--train: no adapter ({error})", file=sys.stderr)
        return chosen
    catalog = load_catalog(settings.tasks_dir, backend=settings.grammar_backend, pools=settings.pools_dir)
    catalog.tasks[task.name] = replace(catalog.get(task.name), adapter=folder, adapter_by_field=task.reads_by_field)
    served = Extractor(settings=settings, catalog=catalog, tasks=[task.name])
    left = None if budget is None else max(1.0, budget - (time.perf_counter() - started))
    candidate = tuning.adapter_candidate(chosen, relative)
    measured = _measure(args, served, cases, [candidate], left, _shown)
    rows += measured
    kept = tuning.with_adapter(chosen, measured[0])
    gain = measured[0].against_best
    print(
        f"the adapter against {chosen.candidate.label}: {gain.shown() if gain else 'not measured in full'}"
        f"{'' if kept is chosen else ', kept'}",
        file=sys.stderr,
    )
    if kept is chosen or args.dry_run:  # a dry run leaves nothing behind, the adapter it measured neither
        shutil.rmtree(folder, ignore_errors=True)
    return kept


def _shown(row: tuning.Row) -> None:
    m = row.metrics
    print(
        f"  {row.candidate.label:28} F1 {row.f1:.3f}  valid {m['schema_valid_rate']:.1%}  {m['docs_per_s']:.2f} docs/s",
        file=sys.stderr,
    )


def _measure(
    args: argparse.Namespace,
    extractor: Extractor,
    cases: Sequence[Case],
    options: Sequence[tuning.Candidate],
    budget: float | None,
    shown: Callable[[tuning.Row], None],
    *,
    models: Sequence[str] = (),
) -> list[tuning.Row]:
    """The candidates measured on the cases within the budget, the engine's output kept off stdout."""
    import asyncio

    from extractor.jobs import tuning

    async def run() -> list[tuning.Row]:
        try:
            await extractor.astart()
            return await tuning.tune(
                extractor.arun,
                cases,
                options,
                budget_s=budget,
                concurrency=args.concurrency or extractor.settings.max_num_seqs,
                on_row=shown,
                models=models,
                start=lambda served: extractor.engine_for(served).start(),
            )
        finally:
            await extractor.aclose()

    with engine_output_to_stderr():
        return asyncio.run(run())


def models_to_try(settings: Settings, own: str, *, asked: list[str] | None = None, others: bool = True) -> list[str]:
    """The models ``tune`` tries beside the task's own.

    ``asked`` (``--try-model``), else every other packaged model, prepared here or not (``others``:
    not with ``--no-try-model``, nor on a remote or scripted engine).
    """
    if asked is not None:
        return [m for m in asked if m != own]
    if not others or settings.engine != "vllm":
        return []
    return [m for m in MODELS if m != own]


def unprepared(settings: Settings, models: list[str]) -> list[str]:
    """The packaged ones of ``models`` not yet converted here: tune prepares them first."""
    ready = prepared_models(settings)
    return [m for m in models if m in MODELS and m not in ready]
