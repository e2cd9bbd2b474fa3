"""Nothing outlives its owner: guarded children die when the owner is SIGKILLed; orphans are found and killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from extractor.engines import lifeline

ROOT = Path(__file__).resolve().parents[1]

# The owner: claims, forks one child (vLLM's way on the CPU) and spawns one (its way on CUDA, where
# the plugin hook calls watch()), prints their pids, then sleeps until it is killed.
OWNER = """
import os, subprocess, sys, time
from pathlib import Path
from extractor.engines import lifeline
lifeline.claim(Path(sys.argv[1]))
forked = os.fork()
if forked == 0:
    time.sleep(600)
    os._exit(0)
spawned = subprocess.Popen([sys.executable, "-c",
    "import time; from extractor.engines import lifeline; lifeline.register(); time.sleep(600)"])
print(forked, spawned.pid, flush=True)
time.sleep(600)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (lifeline.OWNER_ENV, lifeline.RUN_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _wait_records(folder: Path, count: int) -> None:
    deadline = time.monotonic() + 20.0
    while len(lifeline.records(folder)) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_children_die_with_a_sigkilled_owner(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, env=_env(), start_new_session=True
    )
    try:
        assert owner.stdout is not None
        forked, spawned = (int(p) for p in owner.stdout.readline().split())
        folder = lifeline.run_dir(tmp_path)
        _wait_records(folder, 2)
        assert {r.pid for r in lifeline.records(folder)} == {forked, spawned}
        assert all(r.owner == owner.pid for r in lifeline.records(folder))
        owner.kill()
        owner.wait()
        assert _gone(forked) and _gone(spawned)
    finally:
        owner.kill()
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(owner.pid, signal.SIGKILL)


def test_a_process_without_an_owner_is_not_guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(lifeline.OWNER_ENV, raising=False)
    lifeline.watch()
    assert lifeline._guarded is None


def _record(folder: Path, pid: int, owner: int, owner_started: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    line = {"pid": pid, "started": psutil.Process(pid).create_time(), "owner": owner, "owner_started": owner_started}
    (folder / f"{pid}.json").write_text(json.dumps(line), encoding="utf-8")


def test_an_orphan_under_the_home_is_killed_and_a_live_owners_process_is_not(tmp_path: Path) -> None:
    folder = lifeline.run_dir(tmp_path)
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        _record(folder, orphan.pid, owner=999_999, owner_started=0.0)  # its owner is gone
        _record(folder, kept.pid, owner=os.getpid(), owner_started=psutil.Process().create_time())
        (folder / "4.json").write_text(json.dumps({"pid": 4, "started": 1.0, "owner": 1, "owner_started": 1.0}))
        assert lifeline.clean(folder) == [orphan.pid]
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert kept.poll() is None
        assert sorted(p.name for p in folder.iterdir()) == [f"{kept.pid}.json"]  # the ended ones' files removed
    finally:
        orphan.kill()
        kept.kill()
        orphan.wait()
        kept.wait()


def test_the_plugin_is_registered_for_vllm() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'extractor_lifeline = "extractor.engines.lifeline:register"' in text
