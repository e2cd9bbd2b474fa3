"""The review database: which one (SQLite under ``$EXTRACTOR_HOME`` or PostgreSQL), and its migrations.

- Without ``EXTRACTOR_DATABASE_URL``: SQLite in ``$EXTRACTOR_HOME/review.sqlite3``, in WAL mode
  (readers never wait for the writer), ``synchronous=FULL`` (a committed decision survives a
  power cut, not only a killed process) and a busy timeout (a second server process waits for
  the write lock instead of failing).
- With it: PostgreSQL through psycopg 3; ``postgresql://`` and ``postgres://`` URLs are read as
  ``postgresql+psycopg://``.

The schema comes from Alembic revisions shipped in the package (``migrations/``), applied at
start under a lock (a PostgreSQL advisory lock, or a file lock beside the SQLite file), so two
servers starting together do not both create the table.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url

from extractor.config import Settings
from extractor.errors import ConfigError

MIGRATIONS: Final = Path(__file__).resolve().parent / "migrations"
# Any fixed 64-bit number: the key of the PostgreSQL advisory lock the migrations run under.
_LOCK_KEY: Final = 0x65787472_72657631  # "extr" "rev1"
_BUSY_TIMEOUT_S: Final = 30.0
_CONNECT_TIMEOUT_S: Final = 10


def database_url(settings: Settings) -> URL:
    """The review database's URL: ``settings.database_url`` (driver psycopg), else the SQLite file under home."""
    raw = settings.database_url
    if not raw:
        return URL.create("sqlite+pysqlite", database=str(settings.review_database))
    scheme, sep, rest = raw.partition("://")
    if scheme in ("postgresql", "postgres"):
        raw = f"postgresql+psycopg{sep}{rest}"
    try:
        return make_url(raw)
    except Exception:  # noqa: BLE001 - never echo the URL: it may hold a password
        raise ConfigError(
            "EXTRACTOR_DATABASE_URL: not a database URL; use postgresql://user:password@host:5432/database"
        ) from None


def describe(url: URL) -> str:
    """The database for messages and logs: the SQLite file, or the URL without its password."""
    if url.get_backend_name() == "sqlite":
        return f"SQLite {url.database}"
    return url.render_as_string(hide_password=True)


def create(url: URL) -> Engine:
    """A SQLAlchemy engine for ``url``; nothing connects yet (SQLite: WAL and the busy timeout on each connection)."""
    serialize = _json_dumps
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"timeout": _BUSY_TIMEOUT_S}, json_serializer=serialize)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    connect_args: dict[str, Any] = {"connect_timeout": _CONNECT_TIMEOUT_S} if url.get_driver_name() == "psycopg" else {}
    # pre-ping: a PostgreSQL restart must not cost the next request its connection
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args, json_serializer=serialize)


def migrate(engine: Engine) -> None:
    """Apply every Alembic revision not yet applied, in one transaction, under the migration lock."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with _file_lock(engine), engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at (None: never migrated)."""
    from alembic.runtime.migration import MigrationContext

    from extractor.review.tables import VERSION_TABLE

    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


@contextlib.contextmanager
def _file_lock(engine: Engine) -> Iterator[None]:
    """SQLite: an exclusive lock on ``<file>.lock`` while migrating (PostgreSQL locks in the transaction)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    path = Path(database).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)  # $EXTRACTOR_HOME on a fresh machine
    with path.with_name(path.name + ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sqlite_pragmas(connection: Any, record: Any) -> None:
    cursor = connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT_S * 1000)}")
    finally:
        cursor.close()


def _json_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
