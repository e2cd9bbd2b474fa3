"""The review queue: results waiting for a person, kept in a database that survives restarts.

Operations: :meth:`ReviewStore.add` a result, :meth:`~ReviewStore.page` through the queue
(filters, newest or least confident first, a cursor), :meth:`~ReviewStore.get` one item, and
:meth:`~ReviewStore.decide` it. A decision is one ``UPDATE ... WHERE id = :id AND status =
'pending'`` (and ``version = :version`` when the reviewer names the version they saw): the
database picks the one reviewer whose update matches a row; every other gets
:class:`~extractor.errors.ReviewConflictError`. No lock lives in this process, so two server
processes sharing one PostgreSQL database decide correctly too.

The methods block (SQLAlchemy's synchronous engine); the service calls them in worker threads.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeVar

from sqlalchemy import ColumnElement, Engine, Row, and_, func, insert, or_, select, update
from sqlalchemy.exc import SQLAlchemyError

from extractor.config import Settings
from extractor.errors import InputError, ReviewConflictError, ReviewNotFoundError, ReviewStoreError
from extractor.review import database
from extractor.review.tables import review_items as _t

Status = Literal["pending", "accepted", "corrected", "rejected"]
Decision = Literal["accept", "correct", "reject"]
Order = Literal["newest", "confidence"]
DECIDED: Final[Mapping[Decision, Status]] = {"accept": "accepted", "correct": "corrected", "reject": "rejected"}
MAX_PAGE: Final = 500
# Items without a confidence sort after every confidence (which lie in 0..1).
_NO_CONFIDENCE: Final = 2.0
T = TypeVar("T")


@dataclass(frozen=True)
class ReviewItem:
    """One queued result and what a reviewer decided about it."""

    id: int
    task: str
    task_version: str
    text: str
    result: dict[str, Any]  # ExtractionResult.model_dump(mode="json")
    confidence: float | None
    status: Status
    corrected: Any
    reviewer: str | None
    created_at: datetime
    reviewed_at: datetime | None
    version: int

    @property
    def answer(self) -> Any:
        """The data this item vouches for: the correction, or the result's own data once accepted."""
        return self.corrected if self.status == "corrected" else self.result.get("data")

    def as_json(self) -> dict[str, Any]:
        """The item as a JSON object (timestamps in ISO 8601)."""
        return {
            "id": self.id,
            "task": self.task,
            "task_version": self.task_version,
            "text": self.text,
            "result": self.result,
            "confidence": self.confidence,
            "status": self.status,
            "corrected": self.corrected,
            "reviewer": self.reviewer,
            "created_at": self.created_at.isoformat(),
            "reviewed_at": self.reviewed_at.isoformat() if self.reviewed_at else None,
            "version": self.version,
        }


@dataclass(frozen=True)
class Page:
    """Some items of the queue, and the cursor of the next page (None: this is the last)."""

    items: tuple[ReviewItem, ...]
    next_cursor: str | None


class ReviewStore:
    """The queue in one database (see :mod:`extractor.review.database`); migrated on first use."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.where = database.describe(engine.url)
        self._opened = False
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> ReviewStore:
        """The store ``settings`` name (nothing is connected until the first use or :meth:`open`)."""
        return cls(database.create(database.database_url(settings)))

    def open(self) -> None:
        """Apply the migrations (once per store; the service calls it at start, every operation before it runs)."""
        with self._lock:
            if self._opened:
                return
            self._guard(lambda: database.migrate(self.engine))
            self._opened = True

    def close(self) -> None:
        """Close the pooled connections."""
        self.engine.dispose()

    def add(
        self, *, task: str, task_version: str, text: str, result: Mapping[str, Any], confidence: float | None
    ) -> ReviewItem:
        """Queue a result (``pending``); the item as stored, with its id."""
        self.open()
        if "\x00" in text and self.engine.dialect.name == "postgresql":
            raise InputError("text holds a NUL character, which the review database (PostgreSQL) cannot store")
        values = {
            "task": task,
            "task_version": task_version,
            "text": text,
            "result": dict(result),
            "confidence": confidence,
            "status": "pending",
            "corrected": None,
            "reviewer": None,
            "created_at": datetime.now(UTC),
            "reviewed_at": None,
            "version": 1,
        }

        def run() -> ReviewItem:
            with self.engine.begin() as connection:
                row = connection.execute(insert(_t).values(values).returning(*_t.c)).one()
            return _item(row)

        return self._guard(run)

    def get(self, item_id: int) -> ReviewItem:
        """One item; :class:`ReviewNotFoundError` when there is none with this id."""
        self.open()

        def run() -> Row[Any] | None:
            with self.engine.connect() as connection:
                return connection.execute(select(_t).where(_t.c.id == item_id)).first()

        row = self._guard(run)
        if row is None:
            raise ReviewNotFoundError(item_id)
        return _item(row)

    def page(
        self,
        *,
        task: str | None = None,
        status: Status | None = None,
        below: float | None = None,
        order: Order = "newest",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """Items matching every filter given (``below``: confidence under it), ``limit`` at most, after ``cursor``.

        ``order``: ``newest`` first, or ``confidence``: the least confident first (items without a
        confidence last). The cursor is the previous page's ``next_cursor``, for the same order.
        """
        self.open()
        if not 1 <= limit <= MAX_PAGE:
            raise InputError(f"limit: must be 1..{MAX_PAGE}, got {limit}")
        query = select(_t)
        if task is not None:
            query = query.where(_t.c.task == task)
        if status is not None:
            query = query.where(_t.c.status == status)
        if below is not None:
            query = query.where(_t.c.confidence < below)
        sort_key = func.coalesce(_t.c.confidence, _NO_CONFIDENCE)
        after = _read_cursor(cursor, order)
        if order == "newest":
            if after is not None:
                query = query.where(_t.c.id < after[1])
            query = query.order_by(_t.c.id.desc())
        else:
            if after is not None:
                seen, last = after
                beyond: ColumnElement[bool] = or_(sort_key > seen, and_(sort_key == seen, _t.c.id > last))
                query = query.where(beyond)
            query = query.order_by(sort_key.asc(), _t.c.id.asc())

        def run() -> list[Row[Any]]:
            with self.engine.connect() as connection:
                return list(connection.execute(query.limit(limit + 1)).all())

        rows = self._guard(run)
        items = tuple(_item(r) for r in rows[:limit])
        following = None
        if len(rows) > limit:
            last_item = items[-1]
            key = last_item.confidence if last_item.confidence is not None else _NO_CONFIDENCE
            following = _write_cursor(order, key if order == "confidence" else float(last_item.id), last_item.id)
        return Page(items, following)

    def decided(self, task: str) -> Iterator[ReviewItem]:
        """Every accepted or corrected item of ``task``, oldest first (what a gold file is made of)."""
        self.open()
        query = select(_t).where(_t.c.task == task, _t.c.status.in_(("accepted", "corrected"))).order_by(_t.c.id.asc())

        def run() -> list[Row[Any]]:
            with self.engine.connect() as connection:
                return list(connection.execute(query).all())

        yield from (_item(r) for r in self._guard(run))

    def decide(
        self,
        item_id: int,
        decision: Decision,
        *,
        reviewer: str | None,
        data: Any = None,
        version: int | None = None,
        before_commit: Callable[[ReviewItem], None] | None = None,
    ) -> ReviewItem:
        """Accept, correct (with ``data``) or reject a pending item, atomically; the item as decided.

        Exactly one of several concurrent decisions on an item wins; the others raise
        :class:`ReviewConflictError` (so does a ``version`` other than the item's). ``before_commit``
        runs inside the transaction once the update has won: if it raises, the decision is rolled
        back and the item stays pending (the pool write of a correction goes there).
        """
        self.open()
        statement = update(_t).where(_t.c.id == item_id, _t.c.status == "pending")
        if version is not None:
            statement = statement.where(_t.c.version == version)
        statement = statement.values(
            status=DECIDED[decision],
            corrected=data if decision == "correct" else None,
            reviewer=reviewer,
            reviewed_at=datetime.now(UTC),
            version=_t.c.version + 1,
        )

        def run() -> ReviewItem | None:
            with self.engine.begin() as connection:
                rows = connection.execute(statement.returning(*_t.c)).all()
                if len(rows) != 1:  # the row count: 0 when another decision (or nothing) matched
                    return None
                item = _item(rows[0])
                if before_commit is not None:
                    before_commit(item)
                return item

        won = self._guard(run)
        if won is not None:
            return won
        raise conflict(self.get(item_id), version)  # get: ReviewNotFoundError when there is no such item

    def _guard(self, run: Callable[[], T]) -> T:
        """Run a database call; a database failure becomes one :class:`ReviewStoreError` naming the database."""
        try:
            return run()
        except SQLAlchemyError as error:
            reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0][:300]
            raise ReviewStoreError(f"the review database ({self.where}) failed: {reason}") from error


def conflict(current: ReviewItem, version: int | None) -> ReviewConflictError:
    """Why a decision on ``current`` (made on ``version``) lost: it was decided already, or it changed."""
    if current.status != "pending":
        by = f" by {current.reviewer}" if current.reviewer else ""
        when = f" at {current.reviewed_at.isoformat(timespec='seconds')}" if current.reviewed_at else ""
        return ReviewConflictError(
            f"review item {current.id} was already {current.status}{by}{when}; GET /review/{current.id} shows it"
        )
    return ReviewConflictError(
        f"review item {current.id} is at version {current.version}, not {version}; "
        f"GET /review/{current.id} and decide on what it shows now"
    )


def _item(row: Row[Any]) -> ReviewItem:
    m = row._mapping
    return ReviewItem(
        id=int(m["id"]),
        task=m["task"],
        task_version=m["task_version"],
        text=m["text"],
        result=m["result"],
        confidence=m["confidence"],
        status=m["status"],
        corrected=m["corrected"],
        reviewer=m["reviewer"],
        created_at=_utc(m["created_at"]),
        reviewed_at=_utc(m["reviewed_at"]) if m["reviewed_at"] is not None else None,
        version=int(m["version"]),
    )


def _utc(moment: datetime) -> datetime:
    # SQLite keeps no time zone: every timestamp is written in UTC, so read it back as such.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _write_cursor(order: Order, key: float, last: int) -> str:
    raw = json.dumps([order, key, last], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _read_cursor(cursor: str | None, order: Order) -> tuple[float, int] | None:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        kind, key, last = json.loads(raw)
        if kind != order or not isinstance(key, int | float) or not isinstance(last, int):
            raise ValueError(kind)
    except (ValueError, TypeError, binascii.Error):
        raise InputError(
            f"cursor: not a next_cursor of GET /review with order={order}; start again without a cursor"
        ) from None
    return float(key), last
