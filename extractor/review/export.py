"""Decided items as a gold file (``extractor review export``), in the format ``extractor eval`` reads.

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

from extractor.jobs.journal import write_atomic
from extractor.review.corrections import line_id
from extractor.review.store import ReviewItem


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
