"""Labels written by people -> the document's own words, and a long document -> pool passages.

A labelled document says ``"party": ["Liquidmetal Technology Inc."]`` and ``"term": "3 years"``; the
text says "LIQUIDMETAL TECHNOLOGIES, INC." and "three (3) years". An example the model learns from
must show the words it will copy, so each label is *placed*: a typed value (a date, a duration, a
number) by reading candidate phrases back (:mod:`extractor.values.evidence`), a string by the
grounding's exact, normalized and fuzzy matches. The example keeps the document's words (a typed
field keeps its typed value, read from those words); a label that cannot be placed is left out and
reported.

A long document is not one pool line: the pool holds its *passages* (the chunking's split), each
with the labels placed inside it, plus one passage with none (the model must learn to answer null).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from extractor import chunking, grounding
from extractor.values import Context, EvidenceError, normalize
from extractor.values.evidence import find

if TYPE_CHECKING:  # the catalog is above the pools: named in annotations only
    from extractor.catalog.tasks import Task

DEFAULT_PASSAGE_CHARS = 1500


@dataclass
class Placed:
    """Where each label of one document sits: ``(field, value as the example holds it, start, end)``."""

    spans: list[tuple[str, Any, int, int]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # "field: label" of labels not found in the text


def place(task: Task, text: str, output: Mapping[str, Any]) -> Placed:
    """Find each top-level label of ``output`` in ``text`` (lists: each item)."""
    placed = Placed()
    ctx = Context(languages=task.settings.languages, date_order=task.settings.date_order)
    for name, value in output.items():
        for item in value if isinstance(value, list) else [value]:
            if item is None or item == "":
                continue
            spot = _place_one(task, text, f"/{name}", item, ctx)
            if spot is None:
                placed.missing.append(f"{name}: {item!r}")
            else:
                placed.spans.append((name, spot[0], spot[1], spot[2]))
    return placed


def _place_one(task: Task, text: str, path: str, value: Any, ctx: Context) -> tuple[Any, int, int] | None:
    typed = task.values.get(path)
    if typed is not None:
        span = find(text, typed, value, ctx)
        if span is None:
            return None
        try:  # the example holds the value read from the document's words (``3 years`` -> ``P3Y``)
            return normalize(typed, text[span[0] : span[1]], ctx).value, span[0], span[1]
        except EvidenceError:
            return None
    if not isinstance(value, str):
        return None
    found = grounding.locate(text, {"v": value})[0]
    if found.start is None or found.end is None:
        return None
    return text[found.start : found.end], found.start, found.end


def passages(
    task: Task,
    text: str,
    output: Mapping[str, Any],
    *,
    max_chars: int | None = None,
    document: str | None = None,
    pages: Callable[[int, int], tuple[int, ...]] | None = None,
) -> tuple[list[dict[str, Any]], Placed]:
    """Pool lines ``{"text", "output"}`` of a long labelled document: its passages holding labels, and one without.

    With ``document`` (its name), each line keeps where it came from under ``source``
    (:func:`extractor.examples.pool.check_source`): the document, the passage's offsets in it, the
    document's length, the pages the passage spans (``pages(start, end)``), and every label placed
    in the document with its offsets, so what a field's labels look like across documents (where
    they sit, the words around them, how often they are stated) can be learned from the pool.
    """
    placed = place(task, text, output)
    size = max_chars or (task.settings.chunking.max_chars if task.settings.chunking else None) or DEFAULT_PASSAGE_CHARS
    pieces = chunking.split(text, max_chars=size, overlap=min(200, size // 4))
    lines: list[dict[str, Any]] = []
    empty: list[dict[str, Any]] = []
    for piece in pieces:
        inside = [(n, v) for n, v, s, e in placed.spans if s >= piece.start and e <= piece.end]
        shaped = _empty(task, output)
        for name, value in inside:
            if isinstance(shaped.get(name), list):
                if value not in shaped[name]:
                    shaped[name].append(value)
            else:
                shaped[name] = value
        line: dict[str, Any] = {"text": piece.text, "output": shaped}
        if document is not None:
            line["source"] = {
                "document": document,
                "start": piece.start,
                "end": piece.end,
                "length": len(text),
                "pages": list(pages(piece.start, piece.end)) if pages is not None else [],
                "labels": [{"field": n, "start": s, "end": e} for n, _, s, e in placed.spans],
            }
        (lines if inside else empty).append(line)
    if empty:
        lines.append(empty[len(empty) // 2])  # one passage stating nothing asked
    return lines, placed


def _empty(task: Task, output: Mapping[str, Any]) -> dict[str, Any]:
    properties = task.schema.get("properties") or {}
    shaped: dict[str, Any] = {}
    for name, node in properties.items():
        types = node.get("type") if isinstance(node, Mapping) else None
        named = [types] if isinstance(types, str) else list(types or [])
        shaped[name] = [] if "array" in named or isinstance(output.get(name), list) else None
    return shaped
