"""A sharded batch output: a folder of ``part-NNNNN.jsonl`` journals, one writer, every row once.

The driver of a distributed batch is the only writer: records come back to it from the workers,
and it appends them in chunks to the current shard (crash-safe: :class:`~extractor.jobs.journal.Journal`;
a chunk not yet written when the driver dies is redone by the next run), moving to a new shard
every ``shard_rows`` records. A re-run reads every shard to learn which rows
are done, then writes new shards only, so the shards of earlier runs are never rewritten. A key
already written is dropped (a batch retried after a worker died may come back twice), which is
what makes "every row exactly once" hold whatever the cluster does.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from extractor.errors import ExtractorError
from extractor.jobs.batch import BatchSummary, RecordStats, record_stats
from extractor.jobs.journal import Journal
from extractor.jobs.rows import RowId, row_key
from extractor.storage import write_atomic

SHARD = re.compile(r"part-(\d{5,})\.jsonl")
SUMMARY = "summary.json"
LOCK = ".lock"


def record_key(source: str, kind: str | None, row_id: RowId | None, line: int) -> str:
    """A record's identity across input files: its source file plus the row's resume key, as text."""
    return json.dumps([source, *row_key(kind or None, row_id, line)], ensure_ascii=False)


def key_of_record(record: dict[str, Any]) -> str:
    """The identity of a record read back from a shard."""
    kind = None if record.get("ok") else record.get("error", {}).get("kind")
    return record_key(str(record.get("source", "")), kind, record["id"], int(record["line"]))


def shards(folder: Path) -> list[Path]:
    """The shards in ``folder``, in order."""
    found = [p for p in folder.iterdir() if SHARD.fullmatch(p.name)] if folder.is_dir() else []
    return sorted(found, key=lambda p: int(SHARD.fullmatch(p.name).group(1)))  # type: ignore[union-attr]


class ShardedOutput:
    """The output folder of a distributed batch, locked while open.

    ``done`` holds the keys of every record written (by earlier runs and this one); ``summary``
    counts them all.
    """

    def __init__(
        self, folder: Path, *, shard_rows: int = 100_000, flush_rows: int = 1024, flush_interval_s: float = 1.0
    ) -> None:
        if shard_rows < 1:
            raise ExtractorError("shard rows must be at least 1")
        if folder.exists() and not folder.is_dir():
            raise ExtractorError(f"{folder}: a distributed batch writes a folder of shards; name a folder")
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.shard_rows = shard_rows
        self.flush_rows = flush_rows
        self.flush_interval_s = flush_interval_s
        self._buffer: list[tuple[str, RecordStats]] = []
        self._flushed = time.monotonic()
        self._lock = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise ExtractorError(
                f"{folder}: another batch is writing this folder; wait for it or use another"
            ) from None
        self.summary = BatchSummary()
        self.done: set[str] = set()
        self.duplicates = 0  # records dropped because their row was already written
        existing = shards(folder)
        for path in existing:
            with Journal(path) as journal:  # drops a cut last line left by a killed run
                for record in journal.records():
                    self.done.add(key_of_record(record))
                    self.summary.add(record)
        self.summary.skipped = self.summary.rows
        self._next = int(SHARD.fullmatch(existing[-1].name).group(1)) + 1 if existing else 0  # type: ignore[union-attr]
        self._journal: Journal | None = None
        self._in_shard = 0

    def add(self, record: dict[str, Any]) -> tuple[int, int]:
        """Take one record made here (a bad input line); return what was written, as :meth:`add_lines`."""
        line = json.dumps(record, ensure_ascii=False)
        return self.add_lines([(key_of_record(record), line, record_stats(record))])

    def add_lines(self, items: Iterable[tuple[str, str, RecordStats]]) -> tuple[int, int]:
        """Take records already serialised (key, JSON line, stats); a row already taken is dropped.

        Records are appended in chunks (``flush_rows``, or ``flush_interval_s`` after the last
        write): one write and one fsync a chunk. Returns the records (and failed ones among them)
        written now, for the progress line.
        """
        for key, line, stats in items:
            if key in self.done:
                self.duplicates += 1
                continue
            self.done.add(key)
            self._buffer.append((line, stats))
        due = len(self._buffer) >= self.flush_rows or time.monotonic() - self._flushed >= self.flush_interval_s
        return self.flush() if due else (0, 0)

    def flush(self) -> tuple[int, int]:
        """Write the records taken and not yet written; return how many (and how many failed)."""
        buffered, self._buffer = self._buffer, []
        self._flushed = time.monotonic()
        lines = [line for line, _ in buffered]
        while lines:  # a chunk may straddle two shards
            journal = self._current()
            room = self.shard_rows - self._in_shard
            journal.append_lines(lines[:room])
            self._in_shard += len(lines[:room])
            lines = lines[room:]
        for _, stats in buffered:
            self.summary.count(stats)
        self.summary.written += len(buffered)
        return len(buffered), sum(not stats.ok for _, stats in buffered)

    def _current(self) -> Journal:
        if self._journal is not None and self._in_shard >= self.shard_rows:
            self._journal.close()
            self._journal = None
        if self._journal is None:
            self._journal = Journal(self.folder / f"part-{self._next:05d}.jsonl")
            self._next += 1
            self._in_shard = 0
        return self._journal

    def write_summary(self) -> Path:
        """Write the summary of every shard beside them (atomically); return its path."""
        path = self.folder / SUMMARY
        data = {**self.summary.as_dict(), "duplicates_dropped": self.duplicates}
        write_atomic(path, json.dumps(data, indent=2) + "\n")
        return path

    def close(self) -> None:
        """Write what is buffered, close the current shard and release the folder."""
        if self._lock >= 0:
            self.flush()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._lock >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            os.close(self._lock)
            self._lock = -1

    def __enter__(self) -> ShardedOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
