"""`extractor batch --ray`: a Ray Data actor pool on a real one-node cluster, on loopback only.

The cluster is started once for the module (a few seconds): one node pinned to 127.0.0.1
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps it there), its workers importing this checkout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest

from extractor import ScriptedEngine, Settings
from extractor.engines.base import GenerationRequest
from extractor.errors import EngineError, ExtractorError
from extractor.jobs.progress import Progress

from .conftest import LANDMARK_TEXT, landmark

# Read when ray is imported: one node, kept on 127.0.0.1 (else Ray registers the machine's address).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
ray = pytest.importorskip("ray", reason="the [ray] extra: make setup-ray")

from extractor.scale import ray_batch  # noqa: E402 - needs ray
from extractor.scale.ray_batch import RayBatchConfig  # noqa: E402
from extractor.scale.shards import ShardedOutput  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GOOD = landmark(name="阿尔罕布拉宫", country="西班牙", category="宫殿建筑")
ACTOR_TITLE = "ray::MapWorker(MapBatches(RowActor))"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A one-node Ray cluster on 127.0.0.1 for this module; yields its address."""
    ray.init(
        _node_ip_address="127.0.0.1",
        num_cpus=8,  # logical: several actors share the machine's cores
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
    )
    try:
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def answer(request: GenerationRequest) -> str:
    """Valid for every text except those containing FAIL, which never validate."""
    return '{"name": 5}' if "FAIL" in request.messages[-1]["content"] else GOOD


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows))
    return path


def read_output(folder: Path) -> list[dict[str, Any]]:
    records = []
    for shard in sorted(folder.glob("part-*.jsonl")):
        data = shard.read_bytes()
        assert data.endswith(b"\n"), f"{shard} ends in a cut line"
        records += [json.loads(line) for line in data.splitlines()]
    return records


def identities(records: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return sorted((Path(r["source"]).name, r["line"]) for r in records)


def test_many_inputs_sharded_output_errors_and_resume(cluster: str, settings: Settings, tmp_path: Path) -> None:
    first = write_jsonl(
        tmp_path / "a.jsonl",
        [
            {"id": "a1", "text": LANDMARK_TEXT},
            "not json",
            {"id": "a2", "text": "FAIL " + LANDMARK_TEXT},  # no valid answer: an error record, not a lost row
            {"id": "a1", "text": "again"},  # a duplicate id within the file
            *({"id": f"a-{i}", "text": f"{LANDMARK_TEXT} {i}"} for i in range(20)),
        ],
    )
    second = write_jsonl(tmp_path / "b.jsonl", [{"id": i, "text": f"{LANDMARK_TEXT} {i}"} for i in range(30)])
    out = tmp_path / "out"
    config = RayBatchConfig(task="landmark_slots", inputs=(first,), output=out, actors=1, concurrency=4, shard_rows=7)
    engine_factory = partial(ScriptedEngine, respond=answer)

    summary = ray_batch.run(config, settings=settings, engine_factory=engine_factory)

    records = read_output(out)
    assert identities(records) == [("a.jsonl", n) for n in range(1, 25)]
    assert len(list(out.glob("part-*.jsonl"))) == 4  # 24 records, 7 a shard
    kinds = {r["line"]: r["error"]["kind"] for r in records if not r["ok"]}
    assert kinds == {2: "invalid_json", 3: "extraction_failed", 4: "duplicate_id"}
    assert (summary.rows, summary.ok, summary.failed, summary.complete) == (24, 21, 3, True)

    # Resume with a second input and a cut last line (a killed driver): only the missing rows run.
    last = sorted(out.glob("part-*.jsonl"))[-1]
    lines = last.read_bytes().splitlines(keepends=True)
    last.write_bytes(b"".join(lines[:-1]) + lines[-1][:20])
    summary = ray_batch.run(
        RayBatchConfig(**{**config.__dict__, "inputs": (first, second)}),
        settings=settings,
        engine_factory=engine_factory,
    )

    records = read_output(out)
    assert identities(records) == [("a.jsonl", n) for n in range(1, 25)] + [("b.jsonl", n) for n in range(1, 31)]
    assert (summary.skipped, summary.written, summary.rows) == (23, 31, 54)
    assert sorted(r["id"] for r in records if r["source"].endswith("b.jsonl")) == list(range(30))
    saved = json.loads((out / "summary.json").read_text())
    assert saved["rows"] == 54 and saved["complete"] and saved["duplicates_dropped"] == 0


def test_unknown_task_missing_input_and_busy_output_fail_before_work(
    cluster: str, settings: Settings, tmp_path: Path
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": LANDMARK_TEXT}])
    with pytest.raises(ExtractorError, match="no_such_task"):
        ray_batch.run(RayBatchConfig(task="no_such_task", inputs=(source,), output=tmp_path / "o"), settings=settings)
    with pytest.raises(ExtractorError, match="no such input"):
        ray_batch.run(
            RayBatchConfig(task="landmark_slots", inputs=(tmp_path / "missing.jsonl",), output=tmp_path / "o"),
            settings=settings,
        )
    with ShardedOutput(tmp_path / "o"), pytest.raises(ExtractorError, match="another batch is writing"):
        ray_batch.run(RayBatchConfig(task="landmark_slots", inputs=(source,), output=tmp_path / "o"), settings=settings)


def broken(request: GenerationRequest) -> str:
    if "BREAK" in request.messages[-1]["content"]:
        raise EngineError("the engine died")
    return GOOD


def test_engine_failure_stops_the_job_and_keeps_the_records(cluster: str, settings: Settings, tmp_path: Path) -> None:
    rows = [{"id": i, "text": f"{LANDMARK_TEXT} {i}"} for i in range(40)] + [{"id": "x", "text": "BREAK"}]
    source = write_jsonl(tmp_path / "in.jsonl", ["not json", *rows])
    config = RayBatchConfig(task="landmark_slots", inputs=(source,), output=tmp_path / "out", actors=1, concurrency=4)

    with pytest.raises(ExtractorError, match=r"the engine died.*run the same command to resume"):
        ray_batch.run(config, settings=settings, engine_factory=partial(ScriptedEngine, respond=broken))

    kept = read_output(tmp_path / "out")
    assert kept and all(r["id"] != "x" for r in kept)  # the bad line at least; never the failed row
    summary = ray_batch.run(config, settings=settings, engine_factory=partial(ScriptedEngine, respond=answer))
    assert sorted(map(str, (r["id"] for r in read_output(tmp_path / "out")))) == sorted(
        ["None", "x", *(str(i) for i in range(40))]
    )
    assert summary.complete and summary.skipped == len(kept)


class _Watch(Progress):
    """Progress that signals once ``threshold`` rows are done."""

    def __init__(self, threshold: int) -> None:
        super().__init__(interval_s=3600)
        self.threshold = threshold
        self.reached = threading.Event()

    def update(self, *, done: int = 0, errors: int = 0) -> None:
        super().update(done=done, errors=errors)
        if self.done >= self.threshold:
            self.reached.set()


def _actor_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if cmdline and cmdline[0].startswith(ACTOR_TITLE):
            found.append(process)
    return found


def test_ten_thousand_rows_survive_a_killed_actor(cluster: str, settings: Settings, tmp_path: Path) -> None:
    rows = 10_000
    source = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}", "text": LANDMARK_TEXT} for i in range(rows)])
    out = tmp_path / "out"
    config = RayBatchConfig(
        task="landmark_slots", inputs=(source,), output=out, actors=3, concurrency=32, cpus_per_actor=1
    )
    slow = settings.with_(scripted_delay_s=0.02)
    progress = _Watch(threshold=rows // 4)
    killed: list[int] = []
    written_at_kill: list[int] = []
    began = time.time()

    def kill_one() -> None:
        if progress.reached.wait(timeout=300):
            # this run's actors (an earlier test's may still be on their way out)
            victims = [p for p in _actor_processes() if p.create_time() >= began - 1]
            if victims:
                victims[0].send_signal(signal.SIGKILL)
                killed.append(victims[0].pid)
                written_at_kill.append(progress.done)

    killer = threading.Thread(target=kill_one)
    killer.start()
    started = time.monotonic()
    summary = ray_batch.run(config, settings=slow, progress=progress)
    killer.join()

    assert killed and written_at_kill[0] < rows, "the actor was killed mid-run"
    records = read_output(out)
    ids = [r["id"] for r in records]
    assert len(ids) == rows and set(ids) == {f"r{i}" for i in range(rows)}  # every id exactly once
    assert all(r["ok"] for r in records)
    assert (summary.rows, summary.written, summary.complete) == (rows, rows, True)
    print(f"10,000 rows, one of 3 actors killed at {written_at_kill[0]} rows: {time.monotonic() - started:.1f} s")


def test_cli_connects_to_a_cluster(cluster: str, tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", [{"id": i, "text": LANDMARK_TEXT} for i in range(5)])
    second = write_jsonl(tmp_path / "b.jsonl", [{"id": i, "text": LANDMARK_TEXT} for i in range(5)])
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "EXTRACTOR_ENGINE": "scripted",
        "EXTRACTOR_HOME": str(tmp_path / "home"),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    command = [sys.executable, "-m", "extractor.cli", "batch", "landmark_slots", str(first), str(second)]
    done = subprocess.run(
        [
            *command,
            str(tmp_path / "out"),
            "--ray",
            cluster,
            "--actors",
            "1",
            "--cpus-per-actor",
            "0.5",
            "--rows-per-call",
            "3",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 10: ok 10, failed 0" in done.stdout
    assert len(read_output(tmp_path / "out")) == 10


@pytest.mark.engine
@pytest.mark.slow  # a vLLM engine in a Ray actor (the scripted actors run in CI): make test-slow
def test_real_engine_in_an_actor(cluster: str, tmp_path: Path) -> None:
    """vLLM runs inside the actor with its own executor (CPU refuses Ray's); one actor, a few rows."""
    source = write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": LANDMARK_TEXT} for i in range(4)])
    settings = Settings.from_env(engine="vllm", max_num_seqs=4, kv_cache_space_gib=1)
    config = RayBatchConfig(task="landmark_slots", inputs=(source,), output=tmp_path / "out", actors=1, concurrency=4)

    summary = ray_batch.run(config, settings=settings)

    records = read_output(tmp_path / "out")
    assert sorted(r["id"] for r in records) == [0, 1, 2, 3]
    assert summary.ok >= 3, [r.get("error") for r in records]
    assert all(r["result"]["data"]["country"] == "西班牙" for r in records if r["ok"])


def test_a_folder_of_documents_is_read_by_the_actors(cluster: str, settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text(LANDMARK_TEXT, encoding="utf-8")
    (folder / "b.html").write_text(f"<html><body><p>{LANDMARK_TEXT}</p></body></html>", encoding="utf-8")
    (folder / "c.pdf").write_bytes(b"%PDF-1.4 nothing more")  # unreadable: its own error record
    out = tmp_path / "out"
    config = RayBatchConfig(task="landmark_slots", inputs=(folder,), output=out, actors=1, concurrency=2)

    summary = ray_batch.run(config, settings=settings, engine_factory=partial(ScriptedEngine, respond=answer))

    records = {r["id"]: r for r in read_output(out)}
    assert sorted(records) == ["a.txt", "b.html", "c.pdf"] and {r["line"] for r in records.values()} == {1, 2, 3}
    assert records["a.txt"]["ok"] and records["a.txt"]["result"]["data"]["country"] == "西班牙"
    assert records["b.html"]["ok"] and records["b.html"]["result"]["document"]["media_type"] == "text/html"
    assert records["c.pdf"]["error"]["kind"] == "bad_document"
    assert (summary.rows, summary.ok, summary.failed) == (3, 2, 1)


def test_actors_sharing_a_gpu_each_take_their_share_of_it() -> None:
    """Four actors on one GPU ask a quarter of the memory each (four at 0.5 would not start) and of the mask pool."""
    settings = Settings.from_env({}, engine="scripted", gpu_memory_utilization=0.8)
    shared = ray_batch.actor_settings(settings, 0.25)
    assert shared.gpu_memory_utilization == pytest.approx(0.2)
    assert shared.mask_threads == max(1, int(ray_batch.cuda_mask_threads() * 0.25))
    assert ray_batch.actor_settings(settings, 1.0) == settings  # a GPU each, or none: as configured
    assert ray_batch.actor_settings(settings, 0.0) == settings
    chosen = settings.with_(mask_threads=3)
    assert ray_batch.actor_settings(chosen, 0.5).mask_threads == 3  # the user's setting stands


def test_actors_sharing_a_gpu_share_the_conversion_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four actors of a 16-core host's default 8 conversion processes take 2 each; a setting stands."""
    monkeypatch.setattr("extractor.config.os.sched_getaffinity", lambda _pid: set(range(16)), raising=False)
    monkeypatch.setattr("extractor.config.os.cpu_count", lambda: 16)
    settings = Settings.from_env({}, engine="scripted")
    assert settings.conversion_workers == 8
    assert ray_batch.actor_settings(settings, 0.25).conversion_processes == 2
    assert ray_batch.actor_settings(settings.with_(conversion_processes=6), 0.25).conversion_processes == 6
    assert ray_batch.actor_settings(settings.with_(conversion_processes=0), 0.25).conversion_processes == 0


def test_a_ray_batch_counts_its_rate_from_the_actors_first_call() -> None:
    """The actors' start (engines one after another) is start_s; the rate counts the calls' window only."""
    window = ray_batch.Window()
    assert window.split(100.0, 190.0) == (0.0, 90.0)  # no call came back: the whole run
    window.add([160.0, 161.0], [170.0, 172.0])
    window.add([165.0], [185.0])
    assert window.split(100.0, 190.0) == (60.0, 25.0)
    assert ray_batch.Window(first=90.0, last=95.0).split(100.0, 190.0) == (0.0, 90.0)  # another clock: as a whole
