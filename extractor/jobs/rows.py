"""Input rows of a batch: one JSONL line -> a row to extract, or the reason it cannot be.

Reading never stops at a bad line: each becomes a :class:`BadRow` naming its line and what to
fix, so a batch writes exactly one record per input line.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RowId = str | int
# A record's identity for resuming: ("id", id) for a row read with its id, ("line", n) for a
# line whose id is unknown or already taken (a duplicate), so every line maps to one key.
RowKey = tuple[str, RowId]

# Error kinds of lines whose id cannot be known, and of repeated ids: identified by line number.
BY_LINE = frozenset({"invalid_utf8", "invalid_json", "blank_line", "not_an_object", "bad_id", "duplicate_id"})
DEFAULT_MAX_CHARS = 100_000


@dataclass(frozen=True)
class Row:
    """A line to extract from. ``id`` is the row's id, or its line number when it has none.

    A row of a folder of documents has the file in ``document`` (its name is the id, its place
    in the sorted folder the line) and no text: the document converts when its turn comes.
    """

    line: int
    id: RowId
    text: str
    document: Path | None = None
    # What a relative date in a typed value is read against (the line's ``reference_date``).
    reference_date: dt.date | None = None


@dataclass(frozen=True)
class BadRow:
    """A line that cannot be extracted from; ``id`` is None when it could not be read."""

    line: int
    id: RowId | None
    kind: str
    message: str


def row_key(kind: str | None, row_id: RowId | None, line: int) -> RowKey:
    """The resume key of a record (``kind`` is its error kind, None for a result)."""
    if kind in BY_LINE or row_id is None:
        return ("line", line)
    return ("id", row_id)


def key_of(item: Row | BadRow) -> RowKey:
    """The resume key of an input row."""
    return row_key(item.kind if isinstance(item, BadRow) else None, item.id, item.line)


def read_rows(
    path: Path, *, text_field: str = "text", id_field: str = "id", max_chars: int = DEFAULT_MAX_CHARS
) -> Iterator[Row | BadRow]:
    """Yield one :class:`Row` or :class:`BadRow` per line of ``path``, in order.

    Every line counts, blank ones included; only the empty string after a final newline is
    not a line. An id seen before makes the later line a ``duplicate_id`` error.
    """
    seen: set[RowId] = set()
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            item = parse_line(raw, number, text_field=text_field, id_field=id_field, max_chars=max_chars)
            row_id = item.id
            if row_id is not None:
                if row_id in seen:
                    item = BadRow(number, row_id, "duplicate_id", f"id {row_id!r} already appeared on an earlier line")
                else:
                    seen.add(row_id)
            yield item


def parse_line(raw: bytes, number: int, *, text_field: str, id_field: str, max_chars: int) -> Row | BadRow:
    """One input line (bytes, newline included or not) -> a row or the reason it is bad."""
    try:
        # A byte-order mark is allowed at the start of the file only.
        line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as error:
        return BadRow(number, None, "invalid_utf8", f"not valid UTF-8 at byte {error.start}: re-encode the file")
    if not line.strip():
        return BadRow(number, None, "blank_line", "blank line: remove it or put a JSON object on it")
    try:
        value: Any = json.loads(line)
    except json.JSONDecodeError as error:
        return BadRow(number, None, "invalid_json", f"invalid JSON at column {error.colno}: {error.msg}")
    if not isinstance(value, dict):
        return BadRow(number, None, "not_an_object", f"expected a JSON object, got {type(value).__name__}")
    row_id: Any = value.get(id_field, number)
    if isinstance(row_id, bool) or not isinstance(row_id, str | int) or row_id == "":
        return BadRow(number, None, "bad_id", f"field {id_field!r} must be a non-empty string or an integer")
    if text_field not in value:
        return BadRow(number, row_id, "missing_text", f"no {text_field!r} field (choose another with --text-field)")
    text = value[text_field]
    if not isinstance(text, str):
        return BadRow(number, row_id, "bad_text", f"field {text_field!r} must be a string, got {type(text).__name__}")
    if not text.strip():
        return BadRow(number, row_id, "empty_text", f"field {text_field!r} is empty")
    if len(text) > max_chars:
        return BadRow(
            number,
            row_id,
            "text_too_long",
            f"text has {len(text)} characters, over the limit of {max_chars} (--max-chars)",
        )
    reference = value.get("reference_date")
    if reference is None:
        return Row(number, row_id, text)
    try:
        return Row(number, row_id, text, reference_date=dt.date.fromisoformat(str(reference)))
    except ValueError:
        return BadRow(number, row_id, "bad_reference_date", f"reference_date {reference!r} is not a date (YYYY-MM-DD)")


def document_files(folder: Path) -> list[Path]:
    """The files of a folder of documents, by name (hidden files and subfolders left out)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


def document_rows(folder: Path) -> Iterator[Row]:
    """One row per file of ``folder`` (see :func:`document_files`): id its name, line its place."""
    for number, path in enumerate(document_files(folder), start=1):
        yield Row(number, path.name, "", document=path)


def input_rows(
    path: Path, *, text_field: str = "text", id_field: str = "id", max_chars: int = DEFAULT_MAX_CHARS
) -> Iterator[Row | BadRow]:
    """A batch input's rows: a folder's documents (:func:`document_rows`), a file's lines (:func:`read_rows`)."""
    if path.is_dir():
        return document_rows(path)
    return read_rows(path, text_field=text_field, id_field=id_field, max_chars=max_chars)


def reads_documents(paths: Iterable[Path]) -> bool:
    """Whether any of a batch's inputs is a folder of documents (its conversion workers start with the engine)."""
    return any(path.is_dir() for path in paths)


def count_lines(path: Path) -> int:
    """Lines in ``path`` as :func:`read_rows` counts them (a last line without newline counts); a folder's files."""
    if path.is_dir():
        return len(document_files(path))
    count, last = 0, b"\n"
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")
