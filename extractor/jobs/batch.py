"""``extractor batch``: a JSONL file of texts -> one JSON record per input line, resumably.

A bounded number of extractions stays in flight, so the engine batches continuously. Every
input line gets exactly one output record: the result, or an error naming the line, the id
and what to fix. Records are appended in chunks (one write, flush, fsync); re-running with
the same output skips the rows already there. A summary is written beside the output, atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from extractor import stages
from extractor.api import Extractor
from extractor.errors import (
    DocumentError,
    DocumentTooLargeError,
    EngineError,
    ExtractionFailed,
    ExtractorError,
    TextTooLongError,
)
from extractor.jobs.journal import Journal
from extractor.jobs.progress import Progress
from extractor.jobs.rows import (
    DEFAULT_MAX_CHARS,
    BadRow,
    Row,
    RowKey,
    count_lines,
    input_rows,
    key_of,
    reads_documents,
    row_key,
)
from extractor.options import ExtractOptions, Options
from extractor.results import ExtractionResult
from extractor.storage import write_atomic


@dataclass(frozen=True)
class BatchConfig:
    """What to extract from where, and how hard to push the engine."""

    task: str
    input: Path
    output: Path
    text_field: str = "text"
    id_field: str = "id"
    max_chars: int = DEFAULT_MAX_CHARS
    concurrency: int = 64
    chunk_rows: int = 64
    flush_interval_s: float = 1.0
    # each row's options (a line's own reference_date stands over this one's)
    options: ExtractOptions = field(default_factory=ExtractOptions)


class RowOptions(Protocol):
    """How each row is extracted: what :class:`BatchConfig` and the Ray runner's config both carry."""

    @property
    def task(self) -> str: ...
    @property
    def options(self) -> ExtractOptions: ...


@dataclass(frozen=True)
class RecordStats:
    """What one output record adds to a summary (computed where the record is made)."""

    ok: bool
    kind: str = ""  # the error kind of a failed record
    attempts: int = 0
    repaired: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stages: Mapping[str, float] = field(default_factory=dict)  # seconds per pipeline stage (extractor.stages)


def record_stats(record: dict[str, Any]) -> RecordStats:
    """The counts of one output record."""
    if record.get("ok"):
        attempts = record["result"]["attempts"]
        kind = ""
    else:
        attempts = record.get("attempts") or []
        kind = str(record.get("error", {}).get("kind", "unknown"))
    return RecordStats(
        ok=bool(record.get("ok")),
        kind=kind,
        attempts=len(attempts),
        repaired=any(a.get("repaired") for a in attempts),
        prompt_tokens=sum(int(a.get("prompt_tokens", 0)) for a in attempts),
        completion_tokens=sum(int(a.get("completion_tokens", 0)) for a in attempts),
        stages=record.get("stages") or {},
    )


@dataclass
class BatchSummary:
    """Totals over the whole output file, and this run's throughput."""

    rows: int = 0
    ok: int = 0
    failed: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    repaired: int = 0
    attempts: int = 0
    extracted: int = 0  # rows that reached the engine (their attempts are counted)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    skipped: int = 0  # rows found already written at start
    written: int = 0  # rows written by this run
    elapsed_s: float = 0.0  # extracting: from the engines ready (their first row) to the last record
    start_s: float = 0.0  # before that: the engines' start (a Ray batch's actors too)
    complete: bool = False
    # Seconds per pipeline stage, summed over the rows (extractor.stages; engine waits overlap).
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def mean_attempts(self) -> float:
        return self.attempts / self.extracted if self.extracted else 0.0

    @property
    def docs_per_s(self) -> float:
        return self.written / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def add(self, record: dict[str, Any]) -> None:
        """Count one output record."""
        self.count(record_stats(record))

    def count(self, stats: RecordStats) -> None:
        """Count one output record from its stats."""
        self.rows += 1
        if stats.ok:
            self.ok += 1
        else:
            self.failed += 1
            self.errors_by_kind[stats.kind] = self.errors_by_kind.get(stats.kind, 0) + 1
        if stats.attempts:
            self.extracted += 1
            self.attempts += stats.attempts
            self.repaired += stats.repaired
            self.prompt_tokens += stats.prompt_tokens
            self.completion_tokens += stats.completion_tokens
        if stats.stages:
            self.stages = stages.total([self.stages, stats.stages])

    def as_dict(self) -> dict[str, Any]:
        """The summary as written to the summary file."""
        return {**asdict(self), "mean_attempts": self.mean_attempts, "docs_per_s": self.docs_per_s}

    def text(self) -> str:
        """A few human lines."""
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.errors_by_kind.items()))
        lines = [
            f"rows {self.rows}: ok {self.ok}, failed {self.failed}" + (f" ({kinds})" if kinds else ""),
            f"this run: {self.written} written, {self.skipped} already done, {self.elapsed_s:.1f} s, "
            f"{self.docs_per_s:.2f} docs/s" + (f" (engines ready in {self.start_s:.1f} s)" if self.start_s else ""),
            f"repaired {self.repaired}, mean attempts {self.mean_attempts:.2f}, "
            f"tokens {self.prompt_tokens} prompt + {self.completion_tokens} completion",
        ]
        if self.stages:
            shown = ", ".join(f"{name} {seconds:.1f}" for name, seconds in self.stages.items())
            lines.append(f"seconds by stage, summed over rows (engine waits overlap): {shown}")
        return "\n".join(lines)


class BatchInterruptedError(ExtractorError):
    """The batch was stopped (Ctrl-C, SIGTERM) before the end; the records written are kept."""


def run(extractor: Extractor, config: BatchConfig, *, progress: Progress | None = None) -> BatchSummary:
    """Blocking :func:`run_batch` that closes the extractor at the end; SIGTERM stops it like Ctrl-C."""

    async def main() -> BatchSummary:
        current = asyncio.current_task()
        if current is not None:
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):  # not the main thread
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, current.cancel)
        try:
            return await run_batch(extractor, config, progress=progress)
        finally:
            await extractor.aclose()

    try:
        return asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise BatchInterruptedError(
            f"interrupted; the records written to {config.output} are kept: run the same command to resume"
        ) from None


def summary_path(output: Path) -> Path:
    """Where the summary of ``output`` goes: ``OUT.summary.json`` beside it."""
    return output.with_name(output.name + ".summary.json")


def error_record(item: Row | BadRow, kind: str, message: str, attempts: list[Any] | None = None) -> dict[str, Any]:
    """The record of a row that produced no result."""
    record: dict[str, Any] = {
        "id": item.id,
        "line": item.line,
        "ok": False,
        "error": {"kind": kind, "message": message},
    }
    if attempts is not None:
        record["attempts"] = attempts
    return record


def result_record(row: Row, result: ExtractionResult) -> dict[str, Any]:
    """The record of a successful row."""
    return {"id": row.id, "line": row.line, "ok": True, "result": result.model_dump(mode="json")}


async def extract_row(extractor: Extractor, config: RowOptions, row: Row) -> dict[str, Any]:
    """Extract one row (a text, or a document of a folder) into its record; only an engine failure raises."""
    with stages.measuring() as clock:
        record = await _extract_row(extractor, config, row)
    if clock.seconds:
        record["stages"] = clock.rounded()
    return record


async def _extract_row(extractor: Extractor, config: RowOptions, row: Row) -> dict[str, Any]:
    try:
        options = config.options
        if row.reference_date is not None:
            options = options.model_copy(update={"reference_date": row.reference_date})
        if row.document is not None:
            result = await extractor.aextract_document(config.task, row.document, options=Options.of(options))
        else:
            result = await extractor.arun(extractor.task(config.task), row.text, options=Options.of(options))
    except ExtractionFailed as error:
        attempts = [a.model_dump(mode="json") for a in error.attempts]
        return error_record(row, "extraction_failed", str(error), attempts)
    except TextTooLongError as error:
        return error_record(row, "text_too_long", str(error))
    except DocumentTooLargeError as error:
        return error_record(row, "document_too_large", str(error))
    except DocumentError as error:
        return error_record(row, "bad_document", str(error))
    except EngineError:
        raise  # not the row's fault: stop, and let a re-run retry it
    except ExtractorError as error:
        return error_record(row, "input_error", str(error))
    return result_record(row, result)


async def run_batch(extractor: Extractor, config: BatchConfig, *, progress: Progress | None = None) -> BatchSummary:
    """Run (or resume) a batch; return the summary, also written to :func:`summary_path`.

    Raises:
        ExtractorError: an unknown task, an unreadable input, an output not written by a
            batch, or an engine failure (records written so far are kept: run again to resume).

    """
    extractor.task(config.task)  # an unknown task fails before the model loads
    if config.input.resolve() == config.output.resolve():
        raise ExtractorError(f"{config.output}: the output must not be the input file")
    if config.concurrency < 1 or config.max_chars < 1:
        raise ExtractorError("--concurrency and --max-chars must be at least 1")
    total = count_lines(config.input)
    summary = BatchSummary()
    with Journal(config.output) as journal:
        done: set[RowKey] = set()
        for record in journal.records():
            done.add(row_key(record.get("error", {}).get("kind"), record["id"], record["line"]))
            summary.add(record)
        summary.skipped = summary.rows
        if progress is not None:
            progress.start(total=total, done=summary.rows, errors=summary.failed)
        started = time.perf_counter()
        await extractor.astart(documents=reads_documents([config.input]))
        summary.start_s = time.perf_counter() - started
        writer = _Writer(journal, summary, config, progress)
        started = time.perf_counter()
        try:
            await _pump(extractor, config, done, writer)
            summary.complete = True
        finally:
            writer.flush()
            summary.elapsed_s = time.perf_counter() - started
            write_atomic(summary_path(config.output), json.dumps(summary.as_dict(), indent=2) + "\n")
            if progress is not None:
                progress.finish()
    return summary


async def _pump(extractor: Extractor, config: BatchConfig, done: set[RowKey], writer: _Writer) -> None:
    pending: set[asyncio.Task[dict[str, Any]]] = set()
    try:
        items = input_rows(
            config.input, text_field=config.text_field, id_field=config.id_field, max_chars=config.max_chars
        )
        for item in items:
            if key_of(item) in done:
                continue
            if isinstance(item, BadRow):
                writer.add(error_record(item, item.kind, item.message))
                continue
            while len(pending) >= config.concurrency:
                await _collect(pending, writer)
            pending.add(asyncio.create_task(extract_row(extractor, config, item)))
        while pending:
            await _collect(pending, writer)
    finally:
        # On a failure or an interrupt, keep what finished: those rows need not run again.
        for task in pending:
            task.cancel()
        for outcome in await asyncio.gather(*pending, return_exceptions=True):
            if isinstance(outcome, dict):
                writer.add(outcome)


async def _collect(pending: set[asyncio.Task[dict[str, Any]]], writer: _Writer) -> None:
    """Wait for some extractions (or the flush deadline); move their records to the writer."""
    finished, _ = await asyncio.wait(pending, timeout=writer.due_in(), return_when=asyncio.FIRST_COMPLETED)
    pending.difference_update(finished)
    failure: BaseException | None = None
    for task in finished:
        error = task.exception()
        if error is None:
            writer.add(task.result())
        else:
            failure = failure or error
    if writer.due_in() <= 0:
        writer.flush()
    if isinstance(failure, EngineError):
        raise EngineError(
            f"engine failed: {failure}; the records so far are kept: run the same command to resume"
        ) from failure
    if failure is not None:
        raise failure


class _Writer:
    """Buffers records and appends them as one chunk when enough are due or time is up."""

    def __init__(self, journal: Journal, summary: BatchSummary, config: BatchConfig, progress: Progress | None) -> None:
        self._journal = journal
        self._summary = summary
        self._config = config
        self._progress = progress
        self._buffer: list[dict[str, Any]] = []
        self._last = time.monotonic()

    def due_in(self) -> float:
        if len(self._buffer) >= self._config.chunk_rows:
            return 0.0
        if not self._buffer:
            return self._config.flush_interval_s
        return max(0.0, self._config.flush_interval_s - (time.monotonic() - self._last))

    def add(self, record: dict[str, Any]) -> None:
        self._buffer.append(record)
        if self.due_in() <= 0:
            self.flush()

    def flush(self) -> None:
        records, self._buffer = self._buffer, []
        self._last = time.monotonic()
        if not records:
            return
        self._journal.append(records)
        for record in records:
            self._summary.add(record)
        self._summary.written += len(records)
        if self._progress is not None:
            self._progress.update(done=len(records), errors=sum(not r["ok"] for r in records))
