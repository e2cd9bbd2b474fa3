"""Nothing outlives the service: every process started for an engine dies with the process that owns it.

vLLM's engine core and workers are children of the service (forked on the CPU, spawned on CUDA),
and the own-process front end (:mod:`extractor.engines.process`) is one more. Killed by SIGKILL
(a crash, the OOM killer, a supervisor's ``kill -9``), the service runs no clean-up, and those
children were left running, re-parented to init, each holding its model's memory: the next start
then met the out-of-memory killer.

The owner (the process that starts an engine: ``extractor serve``, a script's ``Extractor``)
calls :func:`claim`, which puts its pid in the environment (``EXTRACTOR_OWNER_PID``) that every
child inherits. Each child then runs a guard (:func:`watch`): a thread that waits on a pidfd of
the owner (``pidfd_open``, Linux 5.3; elsewhere a poll once a second) and SIGKILLs its own
process the moment the owner is gone. The guard reaches each process without patching vLLM:

- spawned children (vLLM 0.32 spawns its engine core and workers on the CPU too): they import the
  owner's main module again, and with it ``extractor``, whose ``__init__`` calls :func:`watch`;
  the vLLM general plugin ``extractor_lifeline`` (``pyproject.toml``), which vLLM loads in its
  engine core and in each worker, does it too where the main module is not ours;
- forked children (``VLLM_WORKER_MULTIPROC_METHOD=fork``): an ``os.register_at_fork`` hook;
- the own-process front end calls :func:`watch` itself.

Each process guarded writes ``<home>/run/engines/<pid>.json`` (its owner, its start time) and
removes it when it exits. A SIGKILLed guard cannot, so :func:`claim` reads what earlier
instances left under the same home: a process still running whose owner is gone is an orphan (an
engine left by an extractor without this guard, or whose guard could not act): it is killed, and
said in the log, before the new engine takes the memory. A process whose owner still runs (another
service under the same home) is left alone; a file whose process is gone is removed.

Why not ``PR_SET_PDEATHSIG``: the signal follows the death of the parent *thread* that forked
the child, and vLLM starts its engine from a worker thread of ours, so an idle thread pool that
retires a thread would kill a healthy engine. A pidfd follows the owner process itself.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("extractor.engine")

OWNER_ENV = "EXTRACTOR_OWNER_PID"
RUN_ENV = "EXTRACTOR_RUN_DIR"  # where guarded processes record themselves (<home>/run/engines)
POLL_S = 1.0  # without pidfd_open

_guarded: int | None = None  # the pid whose guard runs (a forked child inherits the value, not the thread)
_hooked = False
_lock = threading.Lock()


def run_dir(home: Path) -> Path:
    """Where the guarded processes of the extractor at ``home`` record themselves."""
    return home / "run" / "engines"


def claim(home: Path) -> list[int]:
    """Make this process the owner of the engines it starts; kill what earlier owners left behind.

    Idempotent. A process that is itself guarded (the own-process front end, a service started by a
    test) becomes the owner of its own engines: they die with it, and it dies with its owner. Returns
    the pids of the orphans killed.
    """
    folder = run_dir(home)
    os.environ[OWNER_ENV] = str(os.getpid())
    os.environ[RUN_ENV] = str(folder)
    _hook()
    return clean(folder)


def register() -> None:
    """The vLLM plugin hook (entry point ``vllm.general_plugins: extractor_lifeline``): :func:`watch`."""
    watch()


def watch() -> None:
    """Guard this process: it dies when the owner named in the environment does; idempotent.

    Nothing happens in the owner itself or in a process with no owner set (vLLM run by someone else).
    """
    global _guarded
    owner = _owner()
    with _lock:
        if owner is None or owner == os.getpid() or _guarded == os.getpid():
            return
        _guarded = os.getpid()
    _hook()
    threading.Thread(target=_guard, args=(owner,), name="extractor-lifeline", daemon=True).start()
    folder = os.environ.get(RUN_ENV)
    if folder:
        _record(Path(folder), owner)


def _owner() -> int | None:
    raw = os.environ.get(OWNER_ENV, "")
    return int(raw) if raw.isdigit() else None


def _hook() -> None:
    """Guard every process this one forks (``VLLM_WORKER_MULTIPROC_METHOD=fork``)."""
    global _hooked
    if not _hooked:
        _hooked = True
        os.register_at_fork(after_in_child=_forked)


def _forked() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork: a fresh one
    watch()


def _guard(owner: int) -> None:
    """Wait for the owner to end, then end this process at once (its own children have guards of their own)."""
    try:
        pidfd = os.pidfd_open(owner)
    except ProcessLookupError:
        _die(owner)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
        import psutil

        while psutil.pid_exists(owner):
            time.sleep(POLL_S)
        _die(owner)
    else:
        select.select([pidfd], [], [])
        _die(owner)


def _die(owner: int) -> None:
    with contextlib.suppress(Exception):
        log.warning("process %d stops: its owner (pid %d) is gone", os.getpid(), owner)
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Record:
    """A guarded process as it recorded itself."""

    pid: int
    owner: int
    started: float  # its start time (psutil's create_time), so a reused pid is not taken for it
    owner_started: float  # the owner's


def _record(folder: Path, owner: int) -> None:
    import psutil

    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{os.getpid()}.json"
        line = {
            "pid": os.getpid(),
            "started": psutil.Process().create_time(),
            "owner": owner,
            "owner_started": psutil.Process(owner).create_time(),
        }
        path.write_text(json.dumps(line), encoding="utf-8")
    except (OSError, psutil.Error) as error:
        log.warning("cannot record process %d under %s: %s", os.getpid(), folder, error)
        return
    mine = os.getpid()

    def forget() -> None:  # a forked child inherits the hook: only this process removes its own file
        if os.getpid() == mine:
            path.unlink(missing_ok=True)

    atexit.register(forget)


def records(folder: Path) -> list[Record]:
    """What the guarded processes under ``folder`` recorded (unreadable files are skipped)."""
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            found.append(
                Record(
                    pid=int(raw["pid"]),
                    started=float(raw["started"]),
                    owner=int(raw["owner"]),
                    owner_started=float(raw["owner_started"]),
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def running(pid: int, started: float) -> bool:
    """Whether process ``pid`` started at ``started`` still runs (a reused pid is another process)."""
    import psutil

    try:
        process = psutil.Process(pid)
        return bool(abs(process.create_time() - started) < 0.5 and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def orphans(folder: Path) -> list[Record]:
    """Recorded processes still running whose owner has ended; files of ended processes are removed."""
    left = []
    for record in records(folder):
        if not running(record.pid, record.started):
            (folder / f"{record.pid}.json").unlink(missing_ok=True)
        elif not running(record.owner, record.owner_started):
            left.append(record)
    return left


def clean(folder: Path) -> list[int]:
    """Kill the orphans under ``folder`` (saying so) and wait until they are gone; their pids."""
    import psutil

    found = [r for r in orphans(folder) if r.pid != os.getpid()]
    if not found:
        return []
    held = 0
    for record in found:
        with contextlib.suppress(psutil.Error):
            held += psutil.Process(record.pid).memory_info().rss
    log.warning(
        "%d engine processes left by an earlier extractor under %s (its owner is gone) still hold %.1f GB: "
        "killing pids %s before this one starts",
        len(found),
        folder.parent.parent,
        held / 1e9,
        ", ".join(str(r.pid) for r in found),
    )
    for record in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(running(r.pid, r.started) for r in found):
        time.sleep(0.05)
    for record in found:
        if not running(record.pid, record.started):
            (folder / f"{record.pid}.json").unlink(missing_ok=True)
    return [r.pid for r in found]
