"""Decided items out of the service: a gold file ``extractor eval`` reads, or the reviewers' pool for a commit.

``extractor review export TASK --pool`` copies the lines of the reviewers' pool
(``<home>/pools/<task>.jsonl``) that the catalog's ``examples/<task>.jsonl`` lacks into it, who
decided and when included, for an analyst to read and commit (:func:`append_pool`); the service
itself never writes there.

Each accepted or corrected item becomes ``{"id": "review-<id>", "task": ..., "text": ...,
"expected": <data>}`` (:mod:`extractor.jobs.gold`): the correction, or the accepted result's data.
``eval`` reads an object ``expected`` only, so an item of a task whose answer is not an object
(an array or a scalar top level) is counted as skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extractor.review.corrections import append, line_id
from extractor.review.store import ReviewItem
from extractor.storage import write_atomic


@dataclass(frozen=True)
class Exported:
    """How many gold lines were written, and how many items could not be (not an object answer)."""

    written: int
    skipped: int


def gold_line(item: ReviewItem) -> dict[str, Any] | None:
    """The gold line of a decided item (None when its answer is not a JSON object)."""
    answer = item.answer
    if not isinstance(answer, dict):
        return None
    return {"id": line_id(item.id), "task": item.task, "text": item.text, "expected": answer}


def write_gold(path: Path, items: Iterable[ReviewItem]) -> Exported:
    """Write the gold lines of ``items`` to ``path`` at once (a reader never sees half a file)."""
    lines, skipped = [], 0
    for item in items:
        line = gold_line(item)
        if line is None:
            skipped += 1
        else:
            lines.append(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(lines))
    return Exported(written=len(lines), skipped=skipped)


def append_pool(reviewed: Path, shipped: Path) -> Exported:
    """Append to ``shipped`` each line of ``reviewed`` whose id it lacks (``skipped``: those already there)."""
    written = skipped = 0
    lines = reviewed.read_text(encoding="utf-8").splitlines() if reviewed.is_file() else []
    for raw in lines:
        if not raw.strip():
            continue
        line = json.loads(raw)
        if "id" in line and append(shipped, line, seed=[]):
            written += 1
        else:
            skipped += 1
    return Exported(written=written, skipped=skipped)
