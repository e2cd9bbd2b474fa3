"""The serving logic behind ``/review``: the queue, decisions, and corrections that teach the task at once.

A decision on an item, in order: the item is read (404); a decision on an item no longer pending
is a 409; an accepted result or a correction is checked as a pool line of the task as it serves
now (422 naming what to fix); then the decision is recorded, atomically, and, inside the same
database transaction, the item is appended to the reviewers' pool ``<home>/pools/<task>.jsonl``
with who decided and when (a failed write rolls the decision back; the catalog's files are never
written); last, the catalog reloads through the service's reloader, so the task's
version changes and the next request can retrieve the new example. A rejected item touches no
file.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extractor.catalog.tasks import Task
from extractor.errors import CorrectionError, TaskNotLoadedError, UnknownTaskError
from extractor.review import corrections
from extractor.review.store import Decision, Order, Page, ReviewItem, ReviewStore, Status, conflict
from extractor.server.reloading import CatalogReloader
from extractor.server.service import Service


@dataclass(frozen=True)
class PoolWrite:
    """The pool line a decision became, and the task's version once the catalog reloaded with it."""

    file: str
    line_id: str
    task_version: str


@dataclass(frozen=True)
class Decided:
    """An item as decided; its pool line, or why it has none (``note``; None for a rejection)."""

    item: ReviewItem
    pool: PoolWrite | None = None
    note: str | None = None


class ReviewDesk:
    """The review queue of one service, and the reloads that make its corrections count."""

    def __init__(self, service: Service, reloader: CatalogReloader) -> None:
        self.service = service
        self.reloader = reloader

    @property
    def store(self) -> ReviewStore:
        return self.service.review

    async def page(
        self,
        *,
        task: str | None,
        status: Status | None,
        below: float | None,
        order: Order,
        limit: int,
        cursor: str | None,
    ) -> Page:
        """A page of the queue (see :meth:`ReviewStore.page`)."""
        return await asyncio.to_thread(
            self.store.page, task=task, status=status, below=below, order=order, limit=limit, cursor=cursor
        )

    async def get(self, item_id: int) -> ReviewItem:
        """One item (404 when there is none)."""
        return await asyncio.to_thread(self.store.get, item_id)

    async def decide(
        self,
        item_id: int,
        decision: Decision,
        *,
        reviewer: str | None,
        data: Any = None,
        version: int | None = None,
        nothing_found: bool = False,
    ) -> Decided:
        """Accept, correct or reject an item; accepted and corrected ones join the task's pool at once."""
        item = await self.get(item_id)
        if item.status != "pending":
            raise conflict(item, version)
        if decision == "reject":
            decided = await asyncio.to_thread(self.store.decide, item_id, decision, reviewer=reviewer, version=version)
            return Decided(decided)
        task = self._task(item)
        answer = data if decision == "correct" else item.result.get("data")
        checked = corrections.check(
            task, item.text, answer, item_id=item_id, corrected=decision == "correct", nothing_found=nothing_found
        )
        data = checked if decision == "correct" else data  # a typed value corrected in words, typed
        note = corrections.poolable(item.text)
        settings = self.service.settings
        path = corrections.pool_path(settings.pools_dir, task.name) if note is None else None
        shipped = (settings.tasks_dir / "examples" / f"{task.name}.jsonl").is_file()
        seed = [] if shipped else corrections.seed_lines(task)

        def write(won: ReviewItem) -> None:  # inside the decision's transaction
            if path is not None:
                corrections.append(path, corrections.pool_line(won), seed=seed)

        decided = await asyncio.to_thread(
            self.store.decide,
            item_id,
            decision,
            reviewer=reviewer,
            data=data,
            version=version,
            before_commit=write,
        )
        if path is None:
            return Decided(decided, note=f"not added to the pool: {note}")
        await self.reloader.reload("review")
        now = self.service.extractor.catalog.tasks.get(task.name)
        written = PoolWrite(
            file=_relative(path, settings.home),
            line_id=corrections.line_id(decided.id),
            task_version=now.version if now is not None else "",
        )
        return Decided(decided, pool=written)

    def _task(self, item: ReviewItem) -> Task:
        """The item's task as it serves now (an accepted or corrected answer is checked against it)."""
        try:
            return self.service.task(item.task)
        except (UnknownTaskError, TaskNotLoadedError):
            raise CorrectionError(
                f"review item {item.id}: task {item.task!r} is not loaded now, so its answer cannot be checked; "
                "restore the task, or reject the item"
            ) from None


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
