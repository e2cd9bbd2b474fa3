"""Long documents read field by field: each field from the passages most about it.

Merging every chunk's whole answer (:mod:`extractor.chunking`) asks a model to fill every field
from every chunk: on a contract, a chunk of definitions is asked for the parties, and one failed
chunk used to fail the whole document. Read by field instead (``x-extractor.chunking.by_field``):

1. the text is cut into passages (the chunking's sentence-aware split);
2. each top-level field ranks the passages by BM25 against its query (its ``x-extractor.query``,
   else its title, description and name), the first passage breaking ties; or takes the first or
   last ones (``x-extractor.from``: ``"start"``, ``"end"``, or a list of places such as
   ``["start", "end"]``, read in that order), where a document's form puts it;
3. the field alone is asked of its ``k`` best passages (``x-extractor.passages``, default 2),
   concurrently, on a one-field task whose schema is that field's (``"expect": true``: without
   null or an empty list, where the analyst knows those passages state it);
4. the passages' answers merge per field: a list takes the union without repeats, any other
   value the first grounded answer in passage rank (``x-extractor.merge: "first"``: in
   document order instead).

A passage that yields no valid answer contributes nothing and is noted: the document fails only
when no field got an answer from any passage.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from extractor import chunking
from extractor.catalog.tasks import SETTINGS_KEY, Task, describe_fields, task_from_schema
from extractor.chunking import Chunk
from extractor.errors import ChunkedExtractionFailed, ExtractionFailed, UnstatedValueError
from extractor.examples.lexicon import Lexicon
from extractor.examples.pool import Example, ExamplePool
from extractor.examples.selection import Selector
from extractor.grounding import UNGROUNDED, Span
from extractor.schema import types_of
from extractor.stages import stage

DEFAULT_PASSAGES = 2
PLACES = ("start", "end", "query")  # where ``x-extractor.from`` reads a field's passages
# Task settings a one-field task keeps: how to answer, not how to split, review or show examples.
_KEPT = (
    *("temperature", "max_tokens", "max_attempts", "grounding", "system", "grounded_decoding"),
    *("confidences", "languages", "date_order", "allow_unenforced", "strict_enforcement"),
)


@dataclass(frozen=True)
class FieldQuery:
    """One top-level field: what its passages are ranked by, how many are read, how answers merge."""

    name: str
    query: str
    k: int
    merge: str  # "rank" (best passage first) or "first" (document order)
    where: tuple[str, ...] = ("query",)  # "query": ranked by BM25; "start"/"end": the first or last k passages


def field_queries(task: Task) -> list[FieldQuery]:
    """Every top-level field of ``task`` with its query (``x-extractor.query``, else its words)."""
    found: list[FieldQuery] = []
    for name, node in (task.schema.get("properties") or {}).items():
        own = field_options(node, task.reading.get(name, {}))
        words = [str(own.get("query") or ""), str(node.get("title") or ""), str(node.get("description") or ""), name]
        query = str(own["query"]) if own.get("query") else " ".join(w for w in words if w)
        found.append(
            FieldQuery(
                name=name,
                query=query.replace("_", " "),
                k=int(own.get("passages", DEFAULT_PASSAGES)),
                merge="first" if own.get("merge") == "first" else "rank",
                where=_places(own.get("from")),
            )
        )
    return found


def _places(value: Any) -> tuple[str, ...]:
    """``x-extractor.from`` as the places to read, in order (the catalog has checked the words)."""
    places = value if isinstance(value, list) else [value]
    return tuple(str(p) for p in places if p in PLACES) or ("query",)


def choose(query: FieldQuery, texts: Sequence[str]) -> list[int]:
    """The passages ``query`` reads, in rank order: from each of its places in turn, without repeats."""
    chosen: list[int] = []
    last = len(texts) - 1
    for place in query.where:
        if place == "start":
            found = list(range(min(query.k, len(texts))))
        elif place == "end":
            found = list(range(last, max(-1, last - query.k), -1))
        else:
            found = rank(texts, query.query, query.k)
        chosen += [i for i in found if i not in chosen]
    return chosen


def rank(passages: Sequence[str], query: str, k: int) -> list[int]:
    """Indices of the ``k`` passages BM25 scores highest for ``query`` (earlier passages win ties)."""
    if len(passages) <= k or not query.strip():
        return list(range(min(k, len(passages))))
    return _index(tuple(passages)).nearest(query, k, diverse=False)


@functools.lru_cache(maxsize=16)
def _index(passages: tuple[str, ...]) -> Selector:
    # One BM25 index per document's passages, shared by its fields (each field ranks them once).
    return Selector(list(passages))


@functools.lru_cache(maxsize=512)
def field_task(task: Task, name: str) -> Task:
    """``task`` narrowed to one top-level field: its schema, prompt and examples hold that field only."""
    own = field_options(task.schema["properties"][name], task.reading.get(name, {}))
    if task.settings.date_order is not None:  # the analyst's order for the whole task wins over a learned one
        own = {k: v for k, v in own.items() if k != "date_order"}
    asked = _expected(task.schema["properties"][name], own)
    expect = asked is not task.schema["properties"][name]
    node = _shaped(_with_date_order(asked, own), own)
    source: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {name: node},
        "required": [name],
        "additionalProperties": False,
    }
    for key in ("$defs", "definitions"):
        if key in task.schema:
            source[key] = task.schema[key]
    settings = task.source_schema.get(SETTINGS_KEY) or {}
    kept = {k: v for k, v in settings.items() if k in _KEPT}
    examples = [
        {"text": e.text, "output": {name: e.output.get(name)}}
        for e in task.examples
        if name in e.output and not (expect and e.output.get(name) in (None, []))
    ]
    if examples:
        kept["examples"] = examples
    source[SETTINGS_KEY] = kept
    narrowed = task_from_schema(f"{task.name}.{name}", source, where=f"{task.schema_path}#/properties/{name}")
    return replace(
        narrowed,
        pool=_field_pool(task, name, stated_only=expect),
        settings=replace(
            narrowed.settings,
            examples_from_pool=task.settings.examples_from_pool,
            grounded_decoding=task.settings.grounded_decoding,  # the task's, defaults and tuning included
        ),
        template=task.template,
        prompt_path=task.prompt_path,
        instruction_only=task.instruction_only,
        fields=describe_fields(narrowed.schema),
        adapter=task.adapter if task.adapter_by_field else None,  # an adapter for whole answers is not for these
        calibration=None,
    )


def field_options(node: Any, learned: Mapping[str, Any]) -> dict[str, Any]:
    """A top-level field's ``x-extractor`` options: what the analyst wrote over what the pool's documents taught."""
    written = node.get(SETTINGS_KEY) if isinstance(node, Mapping) else None
    return {**learned, **(written if isinstance(written, Mapping) else {})}


def _expected(node: Any, own: Mapping[str, Any]) -> Any:
    """A field whose options (``own``) say ``"expect": true`` (its passages do state it) asked for a value.

    No null, no empty list.
    """
    if not isinstance(node, Mapping) or own.get("expect") is not True:
        return node
    asked = dict(node)
    types = asked.get("type")
    if isinstance(types, list) and "null" in types and len(types) > 1:
        asked["type"] = [t for t in types if t != "null"]
        asked["type"] = asked["type"][0] if len(asked["type"]) == 1 else asked["type"]
    if asked.get("type") == "array":
        asked["minItems"] = max(1, int(asked.get("minItems", 0)))
    return asked


def _with_date_order(node: Any, own: Mapping[str, Any]) -> Any:
    """A date field whose options hold a ``date_order`` (learned from its labels) read in that order."""
    if not isinstance(node, Mapping) or "date_order" not in own:
        return node
    written = node.get(SETTINGS_KEY)
    return {
        **node,
        SETTINGS_KEY: {**(written if isinstance(written, Mapping) else {}), "date_order": own["date_order"]},
    }


def _shaped(node: Any, own: Mapping[str, Any]) -> Any:
    """A field of words whose options hold a learned ``shape`` bounded by it, where the schema leaves it open.

    Its string (a list's items) gets the ``minLength``, ``maxLength`` and a ``not`` pattern refusing the
    ``not_words`` as whole words, in lower, capitalised or upper case; a list its ``maxItems``.
    """
    shape = own.get("shape")
    if not isinstance(node, Mapping) or not isinstance(shape, Mapping):
        return node
    listed = isinstance(node.get("items"), Mapping)
    target: Mapping[str, Any] = node["items"] if listed else node
    added: dict[str, Any] = {}
    for bound in ("minLength", "maxLength"):
        if isinstance(shape.get(bound), int) and bound not in target:
            added[bound] = shape[bound]
    words = [str(w) for w in shape.get("not_words") or []]
    if words and "not" not in target:
        cased = [v for w in words for v in dict.fromkeys((w.lower(), w.capitalize(), w.upper()))]
        added["not"] = {"pattern": "\\b(?:" + "|".join(re.escape(w) for w in cased) + ")\\b"}
    most = shape.get("maxItems")
    # never under the analyst's minItems (nor a field's expected 1): the bound must leave an answer possible
    fits = isinstance(most, int) and most >= int(node.get("minItems", 0)) and "maxItems" not in node
    bounded = {"maxItems": most} if listed and fits else {}
    if not added and not bounded:
        return node
    return {**node, **bounded, "items": {**target, **added}} if listed else {**node, **added}


def _field_pool(task: Task, name: str, *, stated_only: bool = False) -> ExamplePool | None:
    """The task's pool with each line's answer narrowed to ``name``: worked examples for one field."""
    if task.pool is None or not len(task.pool):
        return None
    # The lines stating this field, and those stating nothing asked (they teach null); a passage
    # labelled only for another field would teach the model to miss this one.
    examples = tuple(
        Example(e.text, {name: e.output.get(name)}, e.id, e.source)
        for e in task.pool.examples
        if e.output.get(name) not in (None, []) or (not stated_only and all(v in (None, []) for v in e.output.values()))
    )
    if not examples:
        return None
    return ExamplePool(
        task.pool.path,
        examples,
        Selector([e.text for e in examples]),
        lexicon=Lexicon.build((e.output for e in examples), skip=task.ungrounded | frozenset(task.values)),
    )


@dataclass(frozen=True)
class FieldAnswer:
    """One field's answer from one passage, with its spans in the whole text's offsets."""

    passage: int
    rank: int
    value: Any
    spans: list[Span]
    confidence: float | None


class Answered(Protocol):
    """What one passage's attempt loop gives back (the pipeline's ``Extracted``)."""

    data: Any
    spans: list[Span]
    attempts: list[Any]
    confidences: dict[str, float] | None
    notes: list[str]


async def read_by_field(
    task: Task,
    passages: Sequence[Chunk],
    extract: Callable[[Task, Chunk, int], Awaitable[Answered]],
) -> tuple[dict[str, Any], list[Span], list[Any], list[str], dict[str, float]]:
    """Each field from its best passages; ``extract(task, chunk, index)`` runs one passage's attempt loop.

    Returns the merged data, spans, every attempt, notes, and each value's confidence by pointer.
    """
    jobs: list[tuple[FieldQuery, int, int]] = []
    texts = [c.text for c in passages]
    queries = field_queries(task)
    with stage("ranking"):
        for query in queries:
            for position, index in enumerate(choose(query, texts)):
                jobs.append((query, index, position))
    outcomes = await asyncio.gather(
        *(extract(field_task(task, q.name), passages[i], i) for q, i, _ in jobs), return_exceptions=True
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, ExtractionFailed):
            raise outcome
    attempts = [
        a for o in outcomes if not isinstance(o, BaseException) or isinstance(o, ExtractionFailed) for a in o.attempts
    ]
    answers: dict[str, list[FieldAnswer]] = {}
    notes: list[str] = []
    for (query, index, position), outcome in zip(jobs, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            chunk = passages[index]
            why = f": {outcome.reason}" if isinstance(outcome, UnstatedValueError) else ""
            notes.append(
                f"/{query.name}: no valid answer from passage {index} (characters {chunk.start}-{chunk.end}){why}"
            )
            continue
        found = chunking.offset_spans(outcome.spans, passages[index].start)
        scores = outcome.confidences or {}
        answers.setdefault(query.name, []).append(
            FieldAnswer(index, position, outcome.data.get(query.name), found, scores.get(f"/{query.name}"))
        )
        notes += [n for n in outcome.notes if n not in notes]
    if not answers:
        raise ChunkedExtractionFailed(task.name, attempts, reason="no field got a valid answer from any passage")
    data: dict[str, Any] = {}
    spans: list[Span] = []
    confidences: dict[str, float] = {}
    with stage("merging"):
        for query in queries:
            value, kept = _merge(query, answers.get(query.name, []))
            data[query.name] = [] if value is None and _is_list(task.schema["properties"][query.name]) else value
            spans += kept
            confidences.update({s.path: s.confidence for s in kept if s.confidence is not None})
    return data, spans, attempts, notes, confidences


def _is_list(node: Any) -> bool:
    """A field of a list (no passage answering it: none found, not a null the schema refuses)."""
    kinds = types_of(node) if isinstance(node, Mapping) else set()
    return "array" in kinds and "null" not in kinds


def _merge(query: FieldQuery, answers: list[FieldAnswer]) -> tuple[Any, list[Span]]:
    order = sorted(answers, key=lambda a: (a.passage, a.rank) if query.merge == "first" else (a.rank, a.passage))
    prefix = f"/{query.name}"
    if any(isinstance(a.value, list) for a in order):
        merged: list[Any] = []
        seen: set[str] = set()
        kept: list[Span] = []
        for answer in order:
            for i, item in enumerate(answer.value or []):
                key = json.dumps(item, sort_keys=True, ensure_ascii=False).casefold()
                if key in seen:
                    continue
                seen.add(key)
                kept += [
                    replace(s, path=f"{prefix}/{len(merged)}{s.path[len(f'{prefix}/{i}') :]}")
                    for s in answer.spans
                    if s.path == f"{prefix}/{i}" or s.path.startswith(f"{prefix}/{i}/")
                ]
                merged.append(item)
        return merged, kept
    present = [a for a in order if a.value is not None]
    grounded = [a for a in present if a.spans and all(s.status not in UNGROUNDED for s in a.spans)]
    if not present:
        return None, []
    best = (grounded or present)[0]
    fallback = best.confidence
    return best.value, [
        replace(s, confidence=s.confidence if s.confidence is not None else fallback) for s in best.spans
    ]
