"""The training set of a task adapter: the task's pool, rendered as the pipeline renders a request. Pure.

Each line of ``examples/<task>.jsonl`` becomes one chat (the pipeline's own :func:`~extractor.catalog.prompting.render`,
without worked examples: the adapter learns the task instead of reading it) and one answer
(compact JSON, as the engine writes it). A line is refused, with its number and why, when its
output fails the task's schema or its grounded strings are not in its text (the pool's own
check), or when its text is one of the evaluation's texts (``exclude``): an adapter never
trains on what ``extractor eval`` scores.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from extractor.catalog.prompting import answer, render
from extractor.catalog.tasks import Task
from extractor.engines.base import Message
from extractor.errors import ExtractorError
from extractor.examples.pool import check_line


@dataclass(frozen=True)
class Sample:
    """One training chat: the request as the pipeline renders it, and the answer to learn."""

    task: str
    line: int
    messages: tuple[Message, ...]
    answer: str


@dataclass(frozen=True)
class Refusal:
    """A pool line left out of training, and why."""

    task: str
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def bare(task: Task) -> Task:
    """The task as its adapter sees it: no worked examples (fixed or from the pool); the pool's hints if set."""
    settings = task.settings.examples_from_pool
    if settings is not None and settings.hints and task.pool is not None:
        return replace(task, examples=(), settings=replace(task.settings, examples_from_pool=replace(settings, k=0)))
    return replace(task, examples=(), pool=None, settings=replace(task.settings, examples_from_pool=None))


def samples(
    task: Task,
    *,
    exclude: Collection[str] = (),
    fields: Mapping[str, Task] | None = None,
    documents: Collection[str] = (),
) -> tuple[list[Sample], list[Refusal]]:
    """Every usable line of the task's pool as a :class:`Sample`, and every refused line.

    ``fields``: the task read by field, each top-level field's narrowed task
    (:func:`extractor.passages.field_task` of :func:`bare`): a line becomes one chat per field it
    states, and one per field when it states nothing (a passage teaches null where no label sits),
    each answer that field alone, as serving asks a passage for it. ``documents``: lines imported
    from these documents (their ``source``) are left out, as held out.
    """
    path = task.schema_path.parent.parent / "examples" / f"{task.name}.jsonl"
    if not path.is_file():
        return [], [Refusal(task.name, path, 0, "no example pool: training needs examples/<task>.jsonl")]
    excluded = {t.strip() for t in exclude}
    shown = bare(task)
    kept: list[Sample] = []
    refused: list[Refusal] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                # a typed value is the label's reading (a date as 2014-05-20), not the words: checked as the pool is
                example = check_line(raw, validator=task.validator, ungrounded=task.ungrounded | frozenset(task.values))
            except ValueError as error:
                refused.append(Refusal(task.name, path, number, str(error)))
                continue
            if example.text.strip() in excluded:
                refused.append(Refusal(task.name, path, number, "the text is in the evaluation's gold file"))
                continue
            if example.source is not None and example.source.document in documents:
                continue
            if fields is not None:
                kept += _by_field(task.name, number, example.text, example.output, fields)
                continue
            messages = tuple(render(shown, example.text, without=(example.output,)))
            kept.append(Sample(task.name, number, messages, answer(shown, example.text, example.output)))
    return kept, refused


def _by_field(name: str, number: int, text: str, output: Mapping[str, Any], fields: Mapping[str, Task]) -> list[Sample]:
    """One pool line's chats read by field: each field it states, or every field when it states none."""
    stated = [f for f in fields if output.get(f) not in (None, [])]
    found: list[Sample] = []
    for field in stated or list(fields):
        narrowed, own = fields[field], {field: output.get(field)}
        if not narrowed.validator.is_valid(own):  # a field that must be stated: no null to learn
            continue
        messages = tuple(render(narrowed, text, without=(output,)))
        found.append(Sample(name, number, messages, answer(narrowed, text, own)))
    return found


def gold_texts(paths: Sequence[Path]) -> set[str]:
    """The texts (whitespace-trimmed) of gold files, ``{"text": ...}`` per line: what training must not see."""
    texts: set[str] = set()
    for path in paths:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    texts.add(str(json.loads(line)["text"]).strip())
                except (ValueError, KeyError, TypeError):
                    raise ExtractorError(f"{path}:{number}: not a gold line with a 'text'") from None
    return texts


def split(items: Sequence[Sample], *, held_out: float, seed: int) -> tuple[list[Sample], list[Sample]]:
    """A deterministic shuffle, then the last ``held_out`` share (at least one when there are 10+) apart."""
    order = list(items)
    random.Random(seed).shuffle(order)
    n = round(len(order) * held_out)
    n = max(n, 1) if held_out > 0 and len(order) >= 10 else n
    return order[: len(order) - n], order[len(order) - n :]


def lines_by_task(items: Sequence[Sample]) -> dict[str, list[int]]:
    """The pool line numbers of ``items``, per task (the manifest's record of what training held out)."""
    found: dict[str, list[int]] = {}
    for item in items:
        found.setdefault(item.task, []).append(item.line)
    return {task: sorted(lines) for task, lines in found.items()}


def digest(items: Sequence[Sample]) -> str:
    """SHA-256 of the training chats and answers, in order: the manifest's data hash."""
    h = hashlib.sha256()
    for s in items:
        h.update(json.dumps([s.task, list(s.messages), s.answer], ensure_ascii=False).encode())
    return h.hexdigest()
