"""The review queue's table, as SQLAlchemy Core sees it (the migrations under ``migrations/`` create it).

One row per queued result. ``status`` moves once, from ``pending`` to ``accepted``, ``corrected``
or ``rejected``; ``version`` counts the row's changes, so a decision can say which version it
was made on (optimistic concurrency). JSON columns are plain ``JSON`` on every backend (not
PostgreSQL's ``JSONB``, which reorders keys): a correction keeps its field order, and the pool
line written from it shows the model the fields in the order the schema gives them.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

TABLE: Final = "extractor_review_items"
# Alembic's own bookkeeping table, named for us: a shared PostgreSQL database may hold another
# application's ``alembic_version``.
VERSION_TABLE: Final = "extractor_review_alembic_version"
STATUSES: Final = ("pending", "accepted", "corrected", "rejected")

metadata = MetaData()

review_items = Table(
    TABLE,
    metadata,
    # SQLite numbers rows itself only for an INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit identity.
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("task", String(64), nullable=False),
    Column("task_version", String(64), nullable=False),
    Column("text", Text(), nullable=False),
    Column("result", JSON(none_as_null=True), nullable=False),  # ExtractionResult.model_dump(mode="json")
    Column("confidence", Float(), nullable=True),  # the result's lowest value confidence (null: none given)
    Column("status", String(16), nullable=False),
    Column("corrected", JSON(none_as_null=True), nullable=True),  # the corrected data; null unless corrected
    Column("reviewer", String(200), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("reviewed_at", DateTime(timezone=True), nullable=True),
    Column("version", Integer(), nullable=False),
    CheckConstraint(
        "status IN ('pending', 'accepted', 'corrected', 'rejected')", name="ck_extractor_review_items_status"
    ),
    Index("ix_extractor_review_items_task_status", "task", "status", "id"),
    Index("ix_extractor_review_items_status_confidence", "status", "confidence"),
)
