"""The review queue: one row per result sent to review.

Revision ID: 0001
Revises:
Create Date: 2026-12-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the queue's table and its indexes."""
    op.create_table(
        "extractor_review_items",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("task", sa.String(64), nullable=False),
        sa.Column("task_version", sa.String(64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("result", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("corrected", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("reviewer", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'accepted', 'corrected', 'rejected')", name="ck_extractor_review_items_status"
        ),
    )
    op.create_index("ix_extractor_review_items_task_status", "extractor_review_items", ["task", "status", "id"])
    op.create_index("ix_extractor_review_items_status_confidence", "extractor_review_items", ["status", "confidence"])


def downgrade() -> None:
    """Drop the table (and every queued item with it)."""
    op.drop_index("ix_extractor_review_items_status_confidence", table_name="extractor_review_items")
    op.drop_index("ix_extractor_review_items_task_status", table_name="extractor_review_items")
    op.drop_table("extractor_review_items")
