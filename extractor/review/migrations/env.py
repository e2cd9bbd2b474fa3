"""Alembic's environment for the review queue.

:func:`extractor.review.database.migrate` runs it on its own connection (``config.attributes``),
inside the transaction that holds the migration lock. Run by hand (writing a new revision), it
connects to the ``sqlalchemy.url`` main option: ``alembic -x`` is not used.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from extractor.review.tables import VERSION_TABLE, metadata


def run(connection: Connection) -> None:
    """Bring the database on ``connection`` to the newest revision."""
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,  # SQLite alters a table by copying it: let later revisions do that
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    """Run on the caller's connection, or on a fresh one to ``sqlalchemy.url``."""
    if context.is_offline_mode():
        raise SystemExit("the review queue's migrations run online only (extractor runs them at start)")
    given = context.config.attributes.get("connection")
    if given is not None:
        run(given)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("set sqlalchemy.url to the review database to run these migrations by hand")
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            run(connection)
    finally:
        engine.dispose()


main()
