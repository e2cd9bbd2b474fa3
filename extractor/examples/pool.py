"""Example pools: ``examples/<task>.jsonl`` (and the reviewers' pool after it), checked line by line.

The catalog's pool sits beside ``schemas/`` and ``prompts/``; the reviewers' pool under the home
(``extractor.review.corrections``) is merged after it. Each line is ``{"text": ..., "output":
...}`` with an optional ``"id"`` and ``"review"`` (who decided a reviewed line, and when). A line
is kept when its output validates against the task's schema and every grounded string of it
occurs in its text (as written or normalized: a demonstration must copy, never paraphrase). Other
lines are reported with file and line number and left out; the rest of the pool keeps working.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.protocols import Validator

from extractor import grounding
from extractor.examples.lexicon import Lexicon
from extractor.examples.selection import Selector

LINE_KEYS = frozenset({"text", "output", "id", "review", "source"})
# A line's ``source`` (a passage of a labelled document): its keys, each a check of its value.
SOURCE_KEYS = ("document", "start", "end", "length", "pages", "labels")
# Bounds that keep load time and memory predictable; past them the line is reported.
MAX_POOL_LINES = 100_000
MAX_TEXT_CHARS = 4_000
_MAX_REPORTED = 20


@dataclass(frozen=True)
class Example:
    """A worked example: input text and the expected output, shown to the model as a demonstration."""

    text: str
    output: Mapping[str, Any]
    id: Any = None
    source: Source | None = None  # the labelled document a passage came from


@dataclass(frozen=True)
class Label:
    """A label placed in its document: the field and its character offsets in the whole document."""

    field: str
    start: int
    end: int


@dataclass(frozen=True)
class Source:
    """Where a pool line came from: a passage of a labelled document, and every label placed in that document."""

    document: str
    start: int
    end: int
    length: int
    pages: tuple[int, ...] = ()
    labels: tuple[Label, ...] = ()


@dataclass(frozen=True)
class PoolSettings:
    """``x-extractor.examples_from_pool``: how many pool examples each request shows, and how chosen."""

    k: int = 3
    diverse: bool = True
    # Also show the values the pool labelled that occur in the text, with their fields (extractor.examples.lexicon).
    hints: bool = False


@dataclass(frozen=True, eq=False)
class ExamplePool:
    """A task's checked examples and their BM25 index."""

    path: Path
    examples: tuple[Example, ...]
    selector: Selector
    problems: tuple[str, ...] = ()
    _texts: Mapping[str, int] = field(default_factory=dict)
    lexicon: Lexicon = field(default_factory=Lexicon)

    def __len__(self) -> int:
        return len(self.examples)

    def nearest(self, text: str, settings: PoolSettings) -> tuple[Example, ...]:
        """The ``k`` examples nearest to ``text``, the nearest **last** (closest to the request)."""
        chosen = self.selector.nearest(text, settings.k, diverse=settings.diverse)
        return tuple(self.examples[i] for i in reversed(chosen))

    def outputs_of(self, document: str) -> tuple[Mapping[str, Any], ...]:
        """The outputs of every line from ``document`` (a :class:`Source`'s), none for another.

        What a worked example's hints leave out: shown a passage of a document, the model must see
        the hints a new document would get, not its document's labels from the pool's other passages.
        """
        return self._documents.get(document, ())

    @functools.cached_property
    def _documents(self) -> dict[str, tuple[Mapping[str, Any], ...]]:
        found: dict[str, list[Mapping[str, Any]]] = {}
        for line in self.examples:
            if line.source is not None:
                found.setdefault(line.source.document, []).append(line.output)
        return {document: tuple(outputs) for document, outputs in found.items()}

    def contains(self, text: str) -> bool:
        """Whether ``text`` (whitespace-trimmed) is one of the pool's texts: leakage for an evaluation."""
        return text.strip() in self._texts


def load_pool(
    path: Path,
    *,
    validator: Validator,
    ungrounded: frozenset[str],
    limit: int = MAX_POOL_LINES,
    also: Sequence[Path] = (),
) -> ExamplePool:
    """Read and check ``path``; bad lines become ``problems`` (``file:line: why``), never an exception.

    Args:
        path: The pool file (JSON Lines).
        validator: The task schema's validator.
        ungrounded: Field paths exempt from grounding (``"x-grounded": false``).
        limit: Lines past this many are not read (reported once), over all the files.
        also: More pool files merged after ``path`` (the reviewers' pool under the home); those
            missing are skipped, and a line whose ``id`` an earlier line holds is left out.

    """
    examples: list[Example] = []
    problems: list[str] = []
    ids: set[str] = set()
    for number, (source, raw) in enumerate(_lines((path, *also), problems, required=path), start=1):
        if number > limit:
            problems.append(f"{source}: the pool holds more than {limit} lines; the rest is not read")
            break
        try:
            example = check_line(raw, validator=validator, ungrounded=ungrounded)
        except ValueError as error:
            problems.append(f"{source}: {error}")
            continue
        if example.id is not None:
            key = json.dumps(example.id, sort_keys=True)
            if key in ids:
                continue  # a reviewed line an analyst has committed since: it counts once
            ids.add(key)
        examples.append(example)
    texts: dict[str, int] = {}
    for index, example in enumerate(examples):
        texts.setdefault(example.text.strip(), index)
    lexicon = Lexicon.build((e.output for e in examples), skip=ungrounded)
    return ExamplePool(path, tuple(examples), Selector([e.text for e in examples]), tuple(problems), texts, lexicon)


def _lines(paths: Sequence[Path], problems: list[str], *, required: Path) -> Iterator[tuple[str, bytes]]:
    """The non-blank lines of ``paths`` as ``(file:line, line)``; a file that cannot be read is a problem."""
    for path in paths:
        try:
            handle = path.open("rb")
        except FileNotFoundError:
            if path == required:
                problems.append(f"{path}: cannot read the pool: no such file")
            continue
        except OSError as error:
            problems.append(f"{path}: cannot read the pool: {error}")
            continue
        with handle:
            for number, raw in enumerate(handle, start=1):
                if raw.strip():
                    yield f"{path}:{number}", raw


def check_line(raw: bytes | str, *, validator: Validator, ungrounded: frozenset[str]) -> Example:
    """One pool line as an :class:`Example`; ``ValueError`` says what is wrong with it."""
    try:
        value = json.loads(raw)
    except ValueError as error:  # UnicodeDecodeError is a ValueError too
        raise ValueError(f"invalid JSON or UTF-8: {error}") from None
    if not isinstance(value, dict):
        raise ValueError('expected a JSON object {"text": ..., "output": {...}}')
    unknown = sorted(set(value) - LINE_KEYS)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(map(repr, unknown))}; a line holds text, output, id, review and source"
        )
    review = value.get("review")
    if review is not None and not isinstance(review, dict):
        raise ValueError("'review' must be a JSON object (who decided, when)")
    text, output = value.get("text"), value.get("output")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("'text' must be a non-empty string")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"'text' is {len(text)} characters; examples are kept under {MAX_TEXT_CHARS}")
    if not isinstance(output, dict):
        raise ValueError("'output' must be a JSON object shaped like the task's answer")
    check_output(text, output, validator=validator, ungrounded=ungrounded)
    source = check_source(value["source"], text) if "source" in value else None
    return Example(text=text, output=output, id=value.get("id"), source=source)


def check_source(value: Any, text: str) -> Source:
    """A line's ``source`` as a :class:`Source`; ``ValueError`` names the key to fix."""
    if not isinstance(value, dict):
        raise ValueError("'source' must be a JSON object (document, start, end, length, pages, labels)")
    missing = [k for k in SOURCE_KEYS if k not in value]
    unknown = sorted(set(value) - set(SOURCE_KEYS))
    if missing or unknown:
        raise ValueError(
            f"/source: needs {', '.join(SOURCE_KEYS)}" + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    document, start, end, length = value["document"], value["start"], value["end"], value["length"]
    if not isinstance(document, str) or not document:
        raise ValueError("/source/document: the document's name, a non-empty string")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (start, end, length)):
        raise ValueError("/source: start, end and length must be whole numbers (character offsets)")
    if not 0 <= start < end <= length or end - start != len(text):
        raise ValueError(
            f"/source: start {start} and end {end} must hold the line's {len(text)} characters within length {length}"
        )
    pages = value["pages"]
    if not isinstance(pages, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in pages):
        raise ValueError("/source/pages: a list of page numbers")
    labels: list[Label] = []
    for index, label in enumerate(value["labels"] if isinstance(value["labels"], list) else [None]):
        spot = label if isinstance(label, dict) else {}
        name, at, stop = spot.get("field"), spot.get("start"), spot.get("end")
        if (
            not isinstance(name, str)
            or not isinstance(at, int)
            or not isinstance(stop, int)
            or not 0 <= at < stop <= length
        ):
            raise ValueError(f"/source/labels/{index}: {{field, start, end}} within the document's {length} characters")
        labels.append(Label(name, at, stop))
    return Source(document, start, end, length, tuple(pages), tuple(labels))


def check_output(
    text: str, output: Any, *, validator: Validator, ungrounded: frozenset[str], where: str = "/output"
) -> None:
    """A labelled answer's checks: it validates, and each grounded string occurs in ``text`` (exact or normalized).

    ``ValueError`` names the first problem at its JSON pointer under ``where``.
    """
    problem = jsonschema.exceptions.best_match(validator.iter_errors(output))
    if problem is not None:
        pointer = where + "".join(f"/{p}" for p in problem.path)
        raise ValueError(f"{pointer}: does not match the schema: {problem.message}")
    for span in grounding.locate(text, output, skip=ungrounded):
        if span.status not in ("exact", "normalized"):
            raise ValueError(f"{where}{span.path}: {span.value!r} does not occur in the text as written")


def summarize(problems: Sequence[str]) -> list[str]:
    """At most a screenful of problems, with a count of the rest."""
    if len(problems) <= _MAX_REPORTED:
        return list(problems)
    return [*problems[:_MAX_REPORTED], f"... and {len(problems) - _MAX_REPORTED} more bad lines"]
