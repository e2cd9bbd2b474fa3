"""Gold files for ``extractor eval``: one line per text with the data expected from it.

Lines are ``{"text": ..., "expected": {...}}`` with an optional ``"id"`` and a task key
(``"task"`` by default, see ``--task-field``) that overrides the command's TASK, so one file
can hold several tasks. A line may name a document instead of its text (``"file": "nda.pdf"``,
relative to the gold file): it is converted as the service converts it. A task map turns that
key's values into task names: ``snips`` maps a
SNIPS intent such as ``AddToPlaylist`` to ``snips_add_to_playlist``; a JSON file
``{value: task}`` maps them explicitly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extractor.errors import ExtractorError

TaskMap = Callable[[str], str]
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_MAX_REPORTED = 10


@dataclass(frozen=True)
class GoldItem:
    """One gold line: the task to run, the text and the expected data."""

    line: int
    id: Any
    task: str
    text: str
    expected: dict[str, Any]


def snake_case(name: str) -> str:
    """``AddToPlaylist`` -> ``add_to_playlist``."""
    return _CAMEL.sub("_", name).replace("-", "_").replace(" ", "_").lower()


def task_map(spec: str | None) -> TaskMap:
    """The mapping named by ``--task-map``: none, ``snips``, or a JSON object file ``{value: task}``."""
    if spec is None:
        return lambda value: value
    if spec == "snips":
        return lambda value: "snips_" + snake_case(value)
    path = Path(spec)
    if not path.is_file():
        raise ExtractorError(f"--task-map {spec!r}: use 'snips' or a JSON file mapping values to task names")
    try:
        mapping = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ExtractorError(f"{path}: not a JSON object mapping values to task names ({error})") from None
    if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
        raise ExtractorError(f"{path}: expected a JSON object mapping values to task names")

    return lambda value: str(mapping[value])


def load_gold(
    path: Path,
    *,
    task: str | None,
    known: Sequence[str],
    task_field: str = "task",
    mapping: TaskMap | None = None,
) -> list[GoldItem]:
    """Read and check every gold line; raise one error listing the bad lines (up to ten)."""
    items: list[GoldItem] = []
    problems: list[str] = []
    mapping = mapping or task_map(None)
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            try:
                value = json.loads(raw)
            except ValueError as error:  # UnicodeDecodeError is a ValueError too
                problems.append(f"line {number}: invalid JSON or UTF-8: {error}")
                continue
            try:
                items.append(_gold_item(_with_text(value, path.parent), number, task, known, task_field, mapping))
            except _BadLineError as error:
                problems.append(f"line {number}: {error}")
    if problems:
        more = f" (and {len(problems) - _MAX_REPORTED} more)" if len(problems) > _MAX_REPORTED else ""
        raise ExtractorError(f"{path}: bad gold lines{more}:\n  " + "\n  ".join(problems[:_MAX_REPORTED]))
    if not items:
        raise ExtractorError(f"{path}: no gold lines")
    return items


class _BadLineError(Exception):
    """A gold line that cannot be used; the message says why."""


def _with_text(value: Any, base: Path) -> Any:
    """A line naming a document (``file``, relative to the gold file) with the document's text, as served."""
    if not isinstance(value, dict) or "text" in value or not isinstance(value.get("file"), str):
        return value
    from extractor import documents  # PDF/HTML/DOCX conversion: loaded only for document lines
    from extractor.errors import DocumentError

    try:
        return {**value, "text": documents.read(base / value["file"]).text}
    except DocumentError as error:
        raise _BadLineError(f"file {value['file']!r}: {error}") from None


def _gold_item(value: Any, number: int, task: str | None, known: Sequence[str], key: str, mapping: TaskMap) -> GoldItem:
    if not isinstance(value, dict):
        raise _BadLineError("expected a JSON object with 'text' and 'expected'")
    text, expected = value.get("text"), value.get("expected")
    if not isinstance(text, str) or not text.strip():
        raise _BadLineError("'text' must be a non-empty string")
    if not isinstance(expected, dict):
        raise _BadLineError("'expected' must be a JSON object")
    name = task
    if key in value:
        if not isinstance(value[key], str):
            raise _BadLineError(f"{key!r} must be a string")
        try:
            name = mapping(value[key])
        except KeyError:
            raise _BadLineError(f"{key} {value[key]!r} is not in the task map") from None
    if name is None:
        raise _BadLineError(f"no task: pass TASK or give the line a {key!r} field (see --task-field)")
    if name not in known:
        source = f" (from {key} {value[key]!r})" if key in value else ""
        raise _BadLineError(f"task {name!r}{source} is not loaded; known tasks: {', '.join(known)}")
    return GoldItem(line=number, id=value.get("id", number), task=name, text=text, expected=expected)


def select(items: Sequence[GoldItem], *, per_task: int | None = None, limit: int | None = None) -> list[GoldItem]:
    """The first ``per_task`` lines of each task, then the first ``limit`` of those, in file order."""
    taken: dict[str, int] = {}
    chosen: list[GoldItem] = []
    for item in items:
        if per_task is not None and taken.get(item.task, 0) >= per_task:
            continue
        taken[item.task] = taken.get(item.task, 0) + 1
        chosen.append(item)
    return chosen[:limit] if limit is not None else chosen
