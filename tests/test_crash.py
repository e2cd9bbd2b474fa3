"""The crash harness: SIGKILL `extractor serve` (real engine) at random points, restart, check what is left.

Each round starts the service, then kills it with SIGKILL at a random point: while it starts, under
load (extractions queued for review), or while review decisions are being made. After each kill:
every process the service started must be gone (the lifeline guards, ``extractor.engines.lifeline``),
and the next start must find the review queue holding every item and decision it had acknowledged.
A last start answers ``/readyz`` and is stopped by SIGTERM, leaving nothing either.

``EXTRACTOR_CRASH_KILLS`` sets the number of kills (CI: 3); ``EXTRACTOR_CRASH_SEED`` the random
seed; ``EXTRACTOR_CRASH_REPORT`` a JSON file for the figures (kills, orphans, time to ready).
Run ``EXTRACTOR_CRASH_KILLS=20 flock /tmp/extractor-engine.lock pytest -m slow tests/test_crash.py -s``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from extractor import Settings
from extractor.config import repo_root
from extractor.engines import lifeline
from extractor.models import default_model_dir

from .test_server_process import free_port

pytestmark = [pytest.mark.engine, pytest.mark.slow]

TASK = "landmark_slots"
TEXTS = (
    "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。",
    "阿尔罕布拉宫位于西班牙格拉纳达，是摩尔人统治时期的宫殿建筑。",
    "埃菲尔铁塔位于法国巴黎，是十九世纪末建成的铁塔。",
    "泰姬陵位于印度阿格拉，是莫卧儿王朝时期的陵墓。",
)
READY_TIMEOUT_S = 300.0
GONE_TIMEOUT_S = 20.0  # a guard acts within milliseconds; a process of 5 GB takes a moment to free


def _catalog(root: Path) -> Path:
    """The landmark task alone (one engine, no adapter), in a folder the service may write to."""
    for folder, name in (("schemas", f"{TASK}.json"), ("prompts", f"{TASK}.j2"), ("examples", f"{TASK}.jsonl")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(repo_root() / folder / name, root / folder / name)
    return root


def _available() -> int:
    return int(psutil.virtual_memory().available)


class Service:
    """One `extractor serve` process, and every process it started (seen while it ran)."""

    def __init__(self, home: Path, catalog: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "extractor.cli", "serve", "--engine", "vllm", "--port", str(self.port)]
        command += ["--home", str(home), "--tasks-dir", str(catalog)]
        env = {k: v for k, v in os.environ.items() if k not in (lifeline.OWNER_ENV, lifeline.RUN_ENV)}
        env["EXTRACTOR_MODEL"] = str(default_model_dir(Settings.from_env({})))
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        env.setdefault("EXTRACTOR_ENFORCE_EAGER", "1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo_root()), env.get("PYTHONPATH")) if p)
        self._log = log.open("ab")
        self.started = time.monotonic()
        self.process = subprocess.Popen(command, cwd=repo_root(), stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.seen: set[int] = set()
        self.gone_s = 0.0
        self._watching = True
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while self._watching:
            self.seen |= set(self.descendants())
            time.sleep(0.1)

    def descendants(self) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(self.process.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def wait_ready(self) -> float:
        """Seconds from the start until /readyz answered 200."""
        while True:
            assert self.process.poll() is None, "the service exited while starting (its log: serve.log)"
            assert time.monotonic() - self.started < READY_TIMEOUT_S, "the service did not turn ready"
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return time.monotonic() - self.started
            except httpx.TransportError:
                pass
            time.sleep(0.2)

    def stop(self, sig: int) -> list[int]:
        """Signal the service, wait for it; the pids of what it started that outlive it by GONE_TIMEOUT_S.

        ``gone_s``: how long after the signal the last of them was gone.
        """
        self.seen |= set(self.descendants())
        signalled = time.monotonic()
        self.process.send_signal(sig)
        self.process.wait(timeout=120)
        self._watching = False
        self._watcher.join()
        self._log.close()
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while True:
            left = [pid for pid in self.seen | set(_owned_by(self.process.pid)) if _running(pid)]
            self.gone_s = time.monotonic() - signalled
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _owned_by(owner: int) -> list[int]:
    """Processes whose environment names ``owner`` as their lifeline owner (those the watcher missed)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(lifeline.OWNER_ENV) == str(owner):
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


class Load:
    """Extractions sent to the review queue, and decisions on queued items; what the service acknowledged."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.queued: set[int] = set()  # items the service answered with (their review_id)
        self.decided: dict[int, str] = {}  # item -> status, as acknowledged
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(4)
        self._futures: list[Any] = []

    def extract(self, clients: int) -> None:
        for i in range(clients):
            self._futures.append(self._pool.submit(self._extracting, i))

    def decide(self, items: list[int]) -> None:
        self._futures.append(self._pool.submit(self._deciding, items))

    def _extracting(self, i: int) -> None:
        with httpx.Client(timeout=120) as client:
            while not self._stop.is_set():
                text = TEXTS[i % len(TEXTS)]
                try:
                    answer = client.post(f"{self.url}/extract/{TASK}", json={"text": text, "review": True})
                except httpx.TransportError:
                    return
                if answer.status_code == 200 and answer.json().get("review_id") is not None:
                    self.queued.add(int(answer.json()["review_id"]))

    def _deciding(self, items: list[int]) -> None:
        with httpx.Client(timeout=120) as client:
            for number, item in enumerate(items):
                if self._stop.is_set():
                    return
                decision = "accept" if number % 2 == 0 else "reject"
                try:
                    answer = client.post(f"{self.url}/review/{item}/{decision}", json={})
                except httpx.TransportError:
                    return
                if answer.status_code == 200:
                    self.decided[item] = answer.json()["status"]

    def end(self) -> None:
        self._stop.set()
        for future in self._futures:
            future.exception()
        self._pool.shutdown()


def _pending(url: str) -> list[int]:
    page = httpx.get(f"{url}/review", params={"status": "pending", "limit": 100}, timeout=30).json()
    return [int(item["id"]) for item in page["items"]]


def _check_queue(url: str, queued: set[int], decided: dict[int, str]) -> None:
    """Every acknowledged item is there, once; every acknowledged decision stands."""
    for item in sorted(queued | set(decided)):
        answer = httpx.get(f"{url}/review/{item}", timeout=30)
        assert answer.status_code == 200, f"review item {item} was acknowledged and is lost"
        if item in decided:
            assert answer.json()["status"] == decided[item], f"review item {item}: its decision is lost"


def test_sigkill_at_random_points_leaves_nothing(tmp_path: Path) -> None:
    kills = int(os.environ.get("EXTRACTOR_CRASH_KILLS", "3"))
    seed = int(os.environ.get("EXTRACTOR_CRASH_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    home, catalog, log = tmp_path / "home", _catalog(tmp_path / "catalog"), tmp_path / "serve.log"
    before = _available()
    queued: set[int] = set()
    decided: dict[int, str] = {}
    rounds: list[dict[str, Any]] = []
    ready_times: list[float] = []
    points = ["starting", "load", "review"]
    try:
        for number in range(kills):
            point = points[number % 3] if number < 3 else rng.choice(points)
            service = Service(home, catalog, log)
            figures: dict[str, Any] = {"round": number, "point": point}
            if point == "starting":
                delay = rng.uniform(0.5, 40.0)
                deadline = service.started + delay
                while time.monotonic() < deadline and service.process.poll() is None:
                    time.sleep(0.05)
                figures["killed_after_s"] = round(delay, 1)
            else:
                ready = service.wait_ready()
                ready_times.append(ready)
                figures["ready_s"] = round(ready, 1)
                _check_queue(service.url, queued, decided)
                load = Load(service.url)
                if point == "load":
                    load.extract(clients=4)
                else:
                    pending = _pending(service.url)
                    load.extract(clients=1)
                    load.decide(pending)
                # Under load, the kill comes after the first item is queued (a loaded machine may take
                # longer than any fixed delay to answer one); decisions take milliseconds each: a
                # kill soon after they begin lands among them.
                waited = 0.0
                if point == "load":
                    while not load.queued and waited < 120:
                        time.sleep(0.1)
                        waited += 0.1
                delay = rng.uniform(0.0, 6.0) if point == "load" else rng.uniform(0.05, 3.0)
                time.sleep(delay)
                figures["killed_after_s"] = round(waited + delay, 1)
            orphans = service.stop(signal.SIGKILL)
            if point != "starting":
                load.end()
                queued |= load.queued
                decided.update(load.decided)
            figures["processes"] = len(service.seen)
            figures["gone_s"] = round(service.gone_s, 2)
            figures["orphans"] = orphans
            figures["available_gb"] = round(_available() / 1e9, 2)
            rounds.append(figures)
            print(json.dumps(figures), flush=True)
            assert not orphans, f"round {number} ({point}): processes {orphans} outlived the killed service"
        last = Service(home, catalog, log)
        ready = last.wait_ready()
        ready_times.append(ready)
        _check_queue(last.url, queued, decided)
        orphans = last.stop(signal.SIGTERM)
        assert last.process.returncode == 0
        assert not orphans, f"processes {orphans} outlived the service stopped by SIGTERM"
    finally:
        report = {
            "seed": seed,
            "kills": len(rounds),
            "orphans": sum(len(r["orphans"]) for r in rounds),
            "queued_items": len(queued),
            "decisions": len(decided),
            "ready_s": [round(t, 1) for t in ready_times],
            "available_gb_before": round(before / 1e9, 2),
            "available_gb_after": round(_available() / 1e9, 2),
            "rounds": rounds,
        }
        print(json.dumps(report), flush=True)
        if os.environ.get("EXTRACTOR_CRASH_REPORT"):
            Path(os.environ["EXTRACTOR_CRASH_REPORT"]).write_text(json.dumps(report, indent=1), encoding="utf-8")
    assert queued, "no extraction reached the review queue: the harness tested nothing"
