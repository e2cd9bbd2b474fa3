"""A throwaway PostgreSQL cluster for the test session: Debian's server binaries, a temp folder, a unix socket.

Started once per session when a test asks for it (the ``postgres`` fixture in conftest.py) and
removed at the end. As root, the cluster runs as the ``postgres`` user (PostgreSQL refuses to run
as root). It listens on a unix socket in its own folder only (no TCP port to collide with), and
runs without fsync: the tests kill the extractor's server, never PostgreSQL.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

INSTALL_HINT = (
    "PostgreSQL's server binaries (initdb, pg_ctl under /usr/lib/postgresql/*/bin) are not installed; "
    "run `make setup-postgres` (apt-get install postgresql)"
)
PORT = 5432  # only names the socket file: the cluster listens on no TCP port


def server_binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian's layout), or the one on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


class Cluster:
    """A running cluster: ``url(database)`` for SQLAlchemy, ``create_database()`` for a fresh one per test."""

    def __init__(self, socket_dir: Path) -> None:
        self.socket_dir = socket_dir

    def url(self, database: str, *, driver: str = "postgresql") -> str:
        return f"{driver}://postgres@/{database}?host={self.socket_dir}&port={PORT}"

    def create_database(self) -> str:
        """A new empty database; its name."""
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(host=str(self.socket_dir), port=PORT, user="postgres", dbname="postgres") as conn:
            conn.autocommit = True
            conn.execute(f'CREATE DATABASE "{name}"')
        return name


def _runner() -> dict[str, Any]:
    """Run the server binaries as ``postgres`` when we are root (PostgreSQL will not run as root)."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail("running as root, but there is no `postgres` user to run PostgreSQL as; " + INSTALL_HINT)
    return {"user": "postgres", "group": "postgres"}


@contextmanager
def cluster() -> Iterator[Cluster]:
    """Start a cluster in a temp folder; stop it and remove the folder at the end."""
    binaries = server_binaries()
    if binaries is None or not (binaries / "pg_ctl").exists():
        pytest.fail(INSTALL_HINT)
    as_user = _runner()
    folder = Path(tempfile.mkdtemp(prefix="extractor-pg-"))
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    if as_user:
        for path in (folder, sockets):
            shutil.chown(path, user="postgres", group="postgres")
    log = folder / "postgres.log"
    try:
        subprocess.run(
            [binaries / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "-N"],
            check=True,
            capture_output=True,
            **as_user,
        )
        options = f"-k {sockets} -p {PORT} -c listen_addresses='' -c fsync=off -c full_page_writes=off"
        subprocess.run(
            [binaries / "pg_ctl", "-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start"],
            check=True,
            capture_output=True,
            **as_user,
        )
    except subprocess.CalledProcessError as error:
        detail = (error.stderr or b"").decode(errors="replace")[-2000:]
        logged = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start ({error.cmd[0]}): {detail}\n{logged}")
    try:
        yield Cluster(sockets)
    finally:
        subprocess.run(
            [binaries / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"], capture_output=True, **as_user
        )
        shutil.rmtree(folder, ignore_errors=True)
