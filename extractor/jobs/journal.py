"""A crash-safe JSONL output: appended in chunks of whole lines, flushed and fsynced.

A process killed at any moment leaves whole lines plus, at worst, one cut last line (the
kernel may stop a large ``write`` short when SIGKILL arrives); opening the file again drops
that cut line, so the file holds whole records only. One writer at a time: an exclusive lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from extractor.errors import ExtractorError
from extractor.storage import fsync_dir


class Journal:
    """Append-only JSONL file of records (dicts), locked while open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dropped_tail = 0  # bytes of a cut last line removed at open
        created = not path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise ExtractorError(f"{path}: another process is writing this file; wait for it or use another") from None
        if created:
            fsync_dir(path.parent)
        self._drop_cut_tail()

    def _drop_cut_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        # Read back from the end up to the last newline: what follows it is a cut line.
        end, block = size, 1 << 16
        while end > 0:
            start = max(0, end - block)
            chunk = os.pread(self._fd, end - start, start)
            cut = chunk.rfind(b"\n")
            if cut != -1:
                keep = start + cut + 1
                break
            end = start
        else:
            keep = 0
        if keep < size:
            os.ftruncate(self._fd, keep)
            os.fsync(self._fd)
            self.dropped_tail = size - keep

    def records(self) -> Iterator[dict[str, Any]]:
        """The records already in the file, in order; a line that is not a record is an error."""
        with self.path.open("rb") as lines:
            for number, raw in enumerate(lines, start=1):
                try:
                    record = json.loads(raw)
                except ValueError as error:
                    raise ExtractorError(
                        f"{self.path}: line {number} is not a JSON record ({error}); "
                        "was this file written by `extractor batch`? Use a new output file"
                    ) from None
                if not isinstance(record, dict) or "line" not in record or "id" not in record:
                    raise ExtractorError(
                        f"{self.path}: line {number} is not a batch record (no 'id' and 'line'); use a new output file"
                    )
                yield record

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Append whole lines in one write, then fsync: after return they survive a crash."""
        self.append_lines(json.dumps(r, ensure_ascii=False) for r in records)

    def append_lines(self, lines: Iterable[str]) -> None:
        """Append records already serialised (one JSON text each, no newline) as :meth:`append` does."""
        data = b"".join(line.encode("utf-8") + b"\n" for line in lines)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        if data:
            os.fsync(self._fd)

    def close(self) -> None:
        """Release the lock and the file."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
