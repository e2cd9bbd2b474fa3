"""Gold files -> example pools (``extractor examples import``). Pure apart from reading and writing.

A gold line holds either a task-shaped ``output`` or ``expected`` as ``extractor eval`` reads it:
``{slot: [values...]}`` (or ``{slot: value}``). ``expected`` is shaped by the task's schema: a
field that holds an array takes the list, a scalar field takes the one value (two values for a
scalar field cannot be shown and the line is refused), an absent field becomes ``null`` where
the schema allows it. Each line then passes the same checks as a pool line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.errors import ExtractorError
from extractor.examples import placing
from extractor.examples.pool import check_line
from extractor.schema import resolve, types_of
from extractor.storage import write_atomic

if TYPE_CHECKING:  # the catalog and the gold files are above the pools: named in annotations only
    from extractor.catalog.tasks import Task
    from extractor.documents.model import Document, Limits
    from extractor.jobs.gold import TaskMap


@dataclass
class ImportReport:
    """What an import kept, skipped (another task's lines) and refused (with line numbers)."""

    kept: int = 0
    other_task: int = 0
    duplicates: int = 0
    refused: list[str] = field(default_factory=list)
    documents: int = 0  # labelled documents turned into passages
    placed: int = 0  # their labels found in their text
    unplaced: list[str] = field(default_factory=list)  # "file: field: label" not found in the text

    def text(self) -> str:
        lines = [f"kept {self.kept} line(s); refused {len(self.refused)}; other tasks {self.other_task}"]
        if self.duplicates:
            lines[0] += f"; duplicate texts {self.duplicates}"
        lines += [f"  {problem}" for problem in self.refused[:20]]
        if len(self.refused) > 20:
            lines.append(f"  ... and {len(self.refused) - 20} more")
        if self.documents:
            lines.append(
                f"documents {self.documents}: labels placed in their text {self.placed}, "
                f"not placed {len(self.unplaced)} (left out of the passages)"
            )
            lines += [f"  not placed: {label}" for label in self.unplaced[:20]]
            if len(self.unplaced) > 20:
                lines.append(f"  ... and {len(self.unplaced) - 20} more")
        return "\n".join(lines)


def shape(expected: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``expected`` ({field: [values]}) as an output of ``schema``; ``ValueError`` when it cannot be."""
    properties = schema.get("properties") or {}
    unknown = sorted(set(expected) - set(properties))
    if unknown:
        raise ValueError(f"field(s) {', '.join(map(repr, unknown))} are not in the task's schema")
    required = set(schema.get("required") or [])
    output: dict[str, Any] = {}
    for name, sub in properties.items():
        node = _deref(schema, sub)
        kinds = _types(node)
        if name not in expected or expected[name] in (None, []):
            if "null" in kinds:
                output[name] = None
            elif "array" in kinds and name in required:
                output[name] = []
            elif name in required:
                raise ValueError(f"{name!r} is required and not nullable, but the gold line has no value for it")
            continue
        values = expected[name] if isinstance(expected[name], list) else [expected[name]]
        if "array" in kinds:
            output[name] = list(values)
        elif len(values) == 1:
            output[name] = values[0]
        else:
            raise ValueError(f"{name!r} holds one value in the schema, the gold line has {len(values)}")
    return output


def import_gold(
    path: Path, task: Task, *, task_field: str = "task", mapping: TaskMap | None = None, limits: Limits | None = None
) -> tuple[list[dict[str, Any]], ImportReport]:
    """Pool lines for ``task`` from the gold file at ``path``, and what happened to each line.

    ``limits``: how documents are converted (pages, characters, OCR), as the service's settings say.
    """
    report = ImportReport()
    lines: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, raw in _lines(path):
        try:
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError("expected a JSON object")
            if task_field in value:
                name = mapping(value[task_field]) if mapping is not None else value[task_field]
                if name != task.name:
                    report.other_task += 1
                    continue
            found = (
                _document_lines(value, task, path.parent, report, limits)
                if "file" in value
                else [_pool_line(value, task)]
            )
            for line in found:
                check_line(json.dumps(line), validator=task.validator, ungrounded=task.ungrounded | set(task.values))
        except (ValueError, KeyError, ExtractorError) as error:
            report.refused.append(f"{path}:{number}: {error}")
            continue
        for line in found:
            if line["text"].strip() in seen:
                report.duplicates += 1
                continue
            seen.add(line["text"].strip())
            lines.append(line)
            report.kept += 1
    return lines, report


def _document_lines(
    value: Mapping[str, Any], task: Task, base: Path, report: ImportReport, limits: Limits | None
) -> list[dict[str, Any]]:
    """A labelled document (``file``, relative to the gold file) as the pool passages holding its labels."""
    document, output = _document(value, task, base, limits)
    lines, placed = placing.passages(
        task,
        document.text,
        output,
        document=str(value.get("id") or value["file"]),
        pages=lambda start, end: document.locate(start, end).pages,
    )
    report.documents += 1
    report.placed += len(placed.spans)
    report.unplaced += [f"{value['file']}: {label}" for label in placed.missing]
    return lines


@dataclass(frozen=True)
class LabelledDocument:
    """A labelled document of a gold file, converted: what ``extractor tune --documents`` reads whole."""

    id: str  # as its pool lines name it (``source.document``)
    text: str
    # The labels as the document words them where they were placed (``3 years`` -> the duration its
    # words read as), as written where they were not
    expected: dict[str, Any]


def read_documents(path: Path, task: Task, *, limits: Limits | None = None) -> tuple[list[LabelledDocument], list[str]]:
    """The labelled documents of the gold file at ``path`` (lines with ``file``), converted as serving converts them.

    Returns them and, for each document that could not be converted (a scan without OCR, a file over
    ``limits``), the line and why: it is left out. ``ValueError`` naming the line when a line itself
    is wrong (not JSON, no labels, a file that is not there); lines without ``file`` are skipped.
    """
    found: list[LabelledDocument] = []
    unread: list[str] = []
    for number, raw in _lines(path):
        try:
            value = json.loads(raw)
            if not isinstance(value, dict) or "file" not in value:
                continue
            document, output = _document(value, task, path.parent, limits)
            text = document.text
        except ExtractorError as error:
            unread.append(f"{path}:{number}: {error}")
            continue
        except (ValueError, OSError) as error:
            raise ValueError(f"{path}:{number}: {error}") from None
        found.append(LabelledDocument(str(value.get("id") or value["file"]), text, _as_worded(task, text, output)))
    return found, unread


def _as_worded(task: Task, text: str, output: Mapping[str, Any]) -> dict[str, Any]:
    """``output`` with each label placed in ``text`` as the document words it (:func:`placing.place`)."""
    placed = placing.place(task, text, output)
    worded: dict[str, Any] = {}
    for name, value in output.items():
        here = [v for n, v, _, _ in placed.spans if n == name]
        if isinstance(value, list):
            left = [v for v in value if f"{name}: {v!r}" in placed.missing]
            both = [*here, *left]
            worded[name] = [v for i, v in enumerate(both) if v not in both[:i]]
        else:
            worded[name] = here[0] if here else value
    return worded


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of a JSONL file, with their numbers (from 1)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                yield number, raw


def _document(
    value: Mapping[str, Any], task: Task, base: Path, limits: Limits | None = None
) -> tuple[Document, dict[str, Any]]:
    """A document line's file (relative to the gold file), converted, and its labels shaped as the task's output."""
    from extractor import documents  # PDF/HTML/DOCX conversion: loaded only for document lines

    if not isinstance(value.get("file"), str) or not isinstance(value.get("expected", value.get("output")), dict):
        raise ValueError("a document line needs 'file' (a path) and 'expected' or 'output'")
    output = value["output"] if "output" in value else shape(value["expected"], task.schema)
    file = base / value["file"]
    if not file.is_file():
        raise ValueError(f"{value['file']}: no such file (a path relative to the gold file)")
    return documents.read(file, limits=limits), output


def write_pool(path: Path, lines: list[dict[str, Any]]) -> None:
    """Write the pool atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in lines)
    write_atomic(path, body)


def _pool_line(value: Mapping[str, Any], task: Task) -> dict[str, Any]:
    text = value.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("'text' must be a non-empty string")
    if "output" in value:
        output = value["output"]
    elif isinstance(value.get("expected"), dict):
        output = shape(value["expected"], task.schema)
    else:
        raise ValueError("the line needs 'output' (task-shaped) or 'expected' ({field: [values]})")
    line: dict[str, Any] = {"text": text, "output": output}
    if "id" in value:
        line["id"] = value["id"]
    return line


def _deref(root: Mapping[str, Any], node: Any) -> Mapping[str, Any]:
    for _ in range(16):
        if isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
            node = resolve(root, node["$ref"])
        else:
            break
    return node if isinstance(node, Mapping) else {}


def _types(node: Mapping[str, Any]) -> set[str]:
    kinds = types_of(node)
    if kinds:
        return kinds
    for key in ("anyOf", "oneOf"):
        for branch in node.get(key) or []:
            if isinstance(branch, Mapping):
                kinds |= _types(branch)
    return kinds
