"""`extractor batch --ray` on a real two-node Ray cluster, one node killed mid-run: every row exactly once.

The two nodes are two network namespaces on one private veth link (``tests/netns.py``): the head
(10.231.0.1, 2 CPUs) runs the driver too; the worker (10.231.0.2, 2 CPUs) only actors. Four
actors of one CPU each fill both nodes, two on each, so the worker's two can come back only once
the head's have finished the queue and left: the case of a GPU cluster with one actor per GPU and
no spare node. Mid-run the worker node dies: its link goes down, then every process in it is
SIGKILLed. Ray (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` unset: it pins a cluster to one node) runs
here without token auth (the link is private) and with a faster failure detector (3 missed checks
of 1 s instead of 5 of 10 s + 3 s: about a minute by default).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import netns

REPO = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
PORT = 6379  # the namespace's own port space: no other cluster to collide with
ACTOR_TITLE = "ray::MapWorker(MapBatches(RowActor))"
TEXT = "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。"

pytestmark = [
    pytest.mark.slow,
    # not imported here: importing ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER, which test_ray_batch sets
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the [ray] extra: make setup-ray"),
]


@dataclass(frozen=True)
class Cluster:
    """A head node and a worker node, each in its namespace; the environment their processes run with."""

    head: netns.Machine
    worker: netns.Machine
    env: dict[str, str]

    @property
    def address(self) -> str:
        return f"{self.head.address}:{PORT}"

    def actors(self, machine: netns.Machine) -> list[int]:
        """The pids of the actor processes on ``machine``."""
        found = []
        for pid in machine.pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(ACTOR_TITLE.encode()):
                found.append(pid)
        return found


def _ray_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS")}
    return {
        **env,
        "PYTHONPATH": str(REPO),
        "RAY_AUTH_MODE": "disabled",  # else a token in ~/.ray turns auth on for the head and not for the worker
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_timeout_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
    }


def _ray_start(machine: netns.Machine, env: dict[str, str], temp_dir: Path, *args: str) -> None:
    common = ["--node-ip-address", machine.address, "--num-cpus", "2", "--object-store-memory", str(200 * 2**20)]
    command = [str(RAY), "start", *args, *common, "--temp-dir", str(temp_dir), "--disable-usage-stats"]
    done = subprocess.run(machine.command(command), env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, f"ray start on {machine.name}: {done.stdout[-2000:]}{done.stderr[-2000:]}"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """Two Ray nodes in two namespaces; every process in them killed and both removed at the end."""
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(reason)
    if not RAY.is_file():
        pytest.skip(f"{RAY} not found")
    # Short folders: Ray's unix sockets live under them (a path of at most 107 bytes).
    temp = Path(tempfile.gettempdir())
    for stale in temp.glob(f"{netns.PREFIX}-*-ray"):
        owner = stale.name.split("-")[1]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    temp_dir = temp / f"{netns.PREFIX}-{os.getpid()}-ray"
    shutil.rmtree(temp_dir, ignore_errors=True)
    env = _ray_env()
    try:
        with netns.pair() as (head, worker):
            _ray_start(head, env, temp_dir / "head", "--head", "--port", str(PORT), "--include-dashboard=false")
            _ray_start(worker, env, temp_dir / "worker", "--address", f"{head.address}:{PORT}")
            yield Cluster(head=head, worker=worker, env=env)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def _written(output: Path) -> int:
    return sum(shard.read_bytes().count(b"\n") for shard in output.glob("part-*.jsonl"))


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else ""


def test_a_killed_node_loses_no_row(cluster: Cluster, tmp_path: Path) -> None:
    rows = 4000
    source = tmp_path / "in.jsonl"
    source.write_text(
        "".join(json.dumps({"id": f"r{i}", "text": f"{TEXT}#{i}#"}, ensure_ascii=False) + "\n" for i in range(rows))
    )
    output, calls, log = tmp_path / "out", tmp_path / "calls.txt", tmp_path / "driver.log"
    driver_args = [str(source), str(output), "--address", cluster.address, "--calls", str(calls)]
    # 128 rows a call: an answer of ~200 KB, which Ray keeps in the object store of the node that made
    # it (it inlines only what is under 100 KB into the driver), as with real batch sizes.
    driver_args += ["--home", str(tmp_path / "home"), "--actors", "4", "--concurrency", "64", "--rows-per-call", "128"]
    command = cluster.head.command([sys.executable, "-m", "tests.ray_node_driver", *driver_args, "--delay", "0.05"])
    started = time.monotonic()
    with log.open("wb") as sink:
        driver = subprocess.Popen(command, cwd=REPO, env=cluster.env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        # Kill once a quarter of the rows is written and both of the worker's actors are up.
        while _written(output) < rows // 4 or len(cluster.actors(cluster.worker)) < 2:
            assert driver.poll() is None, f"the driver ended before the kill:\n{_tail(log)}"
            assert time.monotonic() - started < 180, f"no progress on both nodes:\n{_tail(log)}"
            time.sleep(0.1)
        lost, kept = set(cluster.actors(cluster.worker)), set(cluster.actors(cluster.head))
        at_kill, killed = _written(output), time.monotonic()
        cluster.worker.die()
        assert not cluster.worker.pids(), "the worker node is gone, every process of it"
        code = driver.wait(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    ended = time.monotonic()

    assert code == 0, _tail(log)
    shards = [shard.read_text() for shard in sorted(output.glob("part-*.jsonl"))]
    records = [json.loads(line) for text in shards for line in text.splitlines()]
    ids = [r["id"] for r in records]
    assert len(ids) == rows and set(ids) == {f"r{i}" for i in range(rows)}, "every id exactly once"
    assert all(r["ok"] for r in records)
    summary = json.loads((output / "summary.json").read_text())
    assert (summary["rows"], summary["written"], summary["complete"]) == (rows, rows, True)

    noted = [line.split() for line in calls.read_text().splitlines()]
    by_pid = Counter(int(pid) for _, pid in noted)
    answered = Counter(row for row, _ in noted)
    assert sum(by_pid[pid] for pid in lost) > 0, "the worker node's actors did work before it died"
    rerun = sum(n for pid, n in by_pid.items() if pid not in lost | kept)  # by the actors restarted after the kill
    redone = sum(n - 1 for n in answered.values())
    assert rerun > 0, "the lost actors' calls were run again"
    print(
        f"\n{rows} rows on 4 actors over 2 nodes; node killed at {at_kill} rows written, "
        f"{killed - started:.1f} s in; rows re-run by the restarted actors: {rerun}, of them answered "
        f"twice: {redone}; duplicates dropped: {summary['duplicates_dropped']}; "
        f"end {ended - killed:.1f} s after the kill, {ended - started:.1f} s in all"
    )
