"""Corrections into the reviewers' pool: checked like every pool line, appended without losing a line.

An accepted or corrected item becomes the pool line ``{"id": "review-<id>", "text": ..., "output":
..., "review": {"decision": ..., "by": ..., "at": ...}}`` of ``<home>/pools/<task>.jsonl``
(``Settings.pools_dir``), never of the catalog's ``examples/``: the source tree stays as the analyst
committed it, and the catalog merges the reviewers' pool after the shipped one at load
(:func:`extractor.examples.pool.load_pool`). ``extractor review export TASK --pool`` writes the
lines out for an analyst to commit. Before the decision is recorded, the answer is checked as a
pool line is at load (:func:`extractor.examples.pool.check_output`: valid against the task's
schema, every grounded string found in the text), so a bad correction is refused with what to fix
instead of being left out at the next load. The line is appended under an exclusive lock (two
server processes may append to one pool), after a newline if the file does not end with one,
and fsynced; a line whose id is already there is not written twice (a decision retried after a
failed commit). For a task without a shipped pool, the reviewers' pool created by the first
correction starts with the task's fixed worked examples, so the requests that showed them still
see them once the pool takes over.
"""

from __future__ import annotations

import fcntl
import json
import os
from datetime import UTC
from pathlib import Path
from typing import Any

from extractor import values
from extractor.catalog.tasks import Task
from extractor.errors import CorrectionError, ReviewStoreError
from extractor.examples.pool import MAX_TEXT_CHARS, check_output
from extractor.review.store import ReviewItem
from extractor.storage import fsync_dir

POOL_ID_PREFIX = "review-"


def check(task: Task, text: str, data: Any, *, item_id: int, corrected: bool, nothing_found: bool = False) -> Any:
    """The answer as the pool keeps it; :class:`CorrectionError` when it could not be a pool line of ``task``.

    Beyond the pool's own checks, an answer without any value is refused unless the reviewer
    confirms (``nothing_found``) that the text holds nothing to extract: an empty answer teaches the
    model to find nothing, so it needs a person's word, not a click through. A typed value
    (:mod:`extractor.values`) may be corrected as the words of the text that state it ("May 20,
    2014", "three (3) years"), which are typed as the model's evidence is, or as the value itself.
    """
    output = {task.wrapped: data} if task.wrapped is not None else data
    try:
        if not isinstance(output, dict):
            raise ValueError("/data: must be a JSON object shaped like the task's answer")
        if not nothing_found and empty(data):
            raise ValueError(
                "/data: holds no value (every field null or empty); if the text really holds none, "
                'say so with "nothing_found": true'
            )
        if task.values:
            ctx = values.Context(languages=task.settings.languages, date_order=task.settings.date_order)
            applied = values.apply(output, task.values, ctx)
            if applied.problems:
                raise ValueError(f"/data{next(iter(applied.problems.values()))}")
            output = applied.data
        skip = task.ungrounded | frozenset(task.values)  # a typed value is checked by the schema, not found
        check_output(text, output, validator=task.validator, ungrounded=skip, where="/data")
    except ValueError as error:
        # A wrapped top level is checked as decoded ({"value": ...}): name the path as the reviewer wrote it.
        problem = str(error).replace(f"/data/{task.wrapped}", "/data", 1) if task.wrapped else str(error)
        if corrected:
            raise CorrectionError(
                f"review item {item_id}: the correction does not fit task {task.name!r}: {problem}; "
                "fix the data (grounded strings are copied from the text as written)"
            ) from None
        raise CorrectionError(
            f"review item {item_id}: the result cannot be accepted as it is: {problem}; "
            f"correct it instead (POST /review/{item_id}/correct)"
        ) from None
    return output[task.wrapped] if task.wrapped is not None else output


def empty(value: Any) -> bool:
    """Whether ``value`` holds no value at all: null, an empty string, list or object, or only such."""
    if isinstance(value, dict):
        return all(empty(v) for v in value.values())
    if isinstance(value, list):
        return all(empty(v) for v in value)
    return value is None or value == ""


def poolable(text: str) -> str | None:
    """Why ``text`` cannot be a pool example (too long to show as one), or None when it can."""
    if len(text) > MAX_TEXT_CHARS:
        return f"the text is {len(text)} characters; pool examples are kept under {MAX_TEXT_CHARS}"
    return None


def pool_path(pools: Path, task: str) -> Path:
    """The task's reviewers' pool file (the name is a loaded task's: it matches TASK_NAME)."""
    return pools / f"{task}.jsonl"


def line_id(item_id: int) -> str:
    """The id of the pool line (and gold line) a review item becomes."""
    return f"{POOL_ID_PREFIX}{item_id}"


def pool_line(item: ReviewItem) -> dict[str, Any]:
    """The pool line a decided item becomes: its answer, and who decided it and when."""
    at = item.reviewed_at.astimezone(UTC).isoformat(timespec="seconds") if item.reviewed_at else None
    review = {"decision": item.status, "by": item.reviewer, "at": at}
    return {"id": line_id(item.id), "text": item.text, "output": item.answer, "review": review}


def seed_lines(task: Task) -> list[dict[str, Any]]:
    """The task's fixed worked examples as pool lines (unwrapped, as a pool line is written)."""
    lines = []
    for example in task.examples:
        output = example.output[task.wrapped] if task.wrapped is not None else example.output
        lines.append({"text": example.text, "output": output})
    return lines


def append(path: Path, line: dict[str, Any], *, seed: list[dict[str, Any]]) -> bool:
    """Append ``line`` to the pool at ``path`` (a new file starts with ``seed``); False when its id is there.

    Raises:
        ReviewStoreError: the file cannot be written (the caller's decision is then rolled back).

    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        with os.fdopen(descriptor, "r+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            existing = handle.read()
            if _encode({"id": line["id"]})[:-2].encode() in existing:  # '{"id":"review-7"' minus '}\n'
                return False
            body = "".join(_encode(s) for s in seed) if not existing else ""
            body += _encode(line)
            prefix = b"\n" if existing and not existing.endswith(b"\n") else b""
            handle.write(prefix + body.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        if not existing:
            fsync_dir(path.parent)
    except OSError as error:
        raise ReviewStoreError(f"cannot append to the pool {path}: {error}; the decision was not recorded") from None
    return True


def _encode(line: dict[str, Any]) -> str:
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
