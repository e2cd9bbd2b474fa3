"""Scaling of `extractor batch --ray` without a fleet: 1 -> 16 actors of the scripted engine at a fixed latency.

PYTHONPATH=. .venv/bin/python -m bench.experiments.ray_scaling \\
    [--actors 1,2,4,8,16] [--latencies 1,0.25] [--concurrency 8]

Each actor's engine answers every request after a fixed latency (``--latencies``, one sweep
each), ``--concurrency`` at a time, so one actor can do at most concurrency / latency rows/s:
a stand-in for one GPU. Three parts:

1. actors 1 -> 16 at that fixed rate: measured rows/s against the ideal (actors x the actor rate);
2. the same pipeline with no latency: the most this machine's cores can do (the pipeline's own
   CPU work, in the actors, is what runs out first on one host);
3. the driver alone: Ray Data carrying finished records (2 KB each, like a real result) from a
   trivial map back to the driver, which dedupes, appends and fsyncs them: the ceiling no number
   of nodes lifts, since the driver is the one writer.

Rates are taken between 10 % and 90 % of the rows written, so actor start-up is left out.
Results: bench/results/ray_scaling.md.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # one node, on loopback

import ray

from bench.common import write_table
from extractor.config import Settings, repo_root
from extractor.jobs.batch import RecordStats
from extractor.jobs.progress import Progress
from extractor.options import ExtractOptions
from extractor.scale import ray_batch
from extractor.scale.shards import ShardedOutput

TEXT = "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。"


class _Clock(Progress):
    """Progress that remembers when each share of the rows was written."""

    def __init__(self) -> None:
        super().__init__(interval_s=3600)
        self.samples: list[tuple[float, int]] = []

    def update(self, *, done: int = 0, errors: int = 0) -> None:
        super().update(done=done, errors=errors)
        self.samples.append((time.perf_counter(), self.done))

    def finish(self) -> None:
        return None

    def steady_rate(self) -> float:
        """Rows/s between 10 % and 90 % of the rows written."""
        total = self.samples[-1][1]
        low = next(s for s in self.samples if s[1] >= total * 0.1)
        high = next(s for s in self.samples if s[1] >= total * 0.9)
        return (high[1] - low[1]) / (high[0] - low[0]) if high[0] > low[0] else 0.0


def rows_file(path: Path, texts: Sequence[str]) -> Path:
    """``texts`` as a batch's input, one row each, numbered."""
    with path.open("w", encoding="utf-8") as out:
        for i, text in enumerate(texts):
            out.write(json.dumps({"id": i, "text": text}, ensure_ascii=False) + "\n")
    return path


def _pipeline(folder: Path, *, actors: int, rows: int, latency: float, concurrency: int) -> float:
    settings = Settings.from_env({}, home=folder / "home", engine="scripted", scripted_delay_s=latency)
    out = folder / f"out-{actors}-{latency}-{time.monotonic_ns()}"
    config = ray_batch.RayBatchConfig(
        task="landmark_slots",
        inputs=(rows_file(folder / f"in-{rows}.jsonl", [TEXT] * rows),),
        output=out,
        actors=actors,
        cpus_per_actor=0.1,  # logical: 16 actors share the machine's cores
        concurrency=concurrency,
        options=ExtractOptions(grounding="off"),
    )
    clock = _Clock()
    summary = ray_batch.run(config, settings=settings, progress=clock)
    assert summary.rows == rows and summary.ok == rows, summary.text()
    return clock.steady_rate()


@ray.remote
def _records(first: int, count: int, size: int) -> Any:
    import pyarrow as pa

    pad = "x" * size
    return pa.table(
        {
            "key": [json.dumps(["in.jsonl", "id", i]) for i in range(first, first + count)],
            "record": [
                json.dumps({"source": "in.jsonl", "id": i, "line": i + 1, "ok": True, "pad": pad})
                for i in range(first, first + count)
            ],
        }
    )


def _driver_only(folder: Path, *, rows: int, batch: int, size: int, write: bool = True) -> float:
    """Rows/s the driver takes in and writes when the workers do nothing."""
    import ray.data

    blocks = [_records.remote(n * batch, batch, size) for n in range(rows // batch)]
    dataset = ray.data.from_arrow_refs(blocks).map_batches(lambda b: b, batch_size=batch, batch_format="pyarrow")
    stats = RecordStats(ok=True, attempts=1)
    written = 0
    with ShardedOutput(folder / f"driver-{time.monotonic_ns()}") as output:
        started = time.perf_counter()
        for table in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
            keys = table.column("key").to_pylist()
            lines = table.column("record").to_pylist()
            if write:
                written += output.add_lines((k, line, stats) for k, line in zip(keys, lines, strict=True))[0]
            else:
                written += len(lines)
        written += output.flush()[0]
        elapsed = time.perf_counter() - started
    return written / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", default="1,2,4,8,16")
    parser.add_argument("--latencies", default="1,0.25", help="seconds per request, one sweep each (default: 1,0.25)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight per actor (default: 8)")
    parser.add_argument("--seconds", type=float, default=40, help="ideal seconds of work per point (default: 40)")
    parser.add_argument("--cpus", type=int, default=32, help="the node's logical CPUs (default: 32)")
    args = parser.parse_args()
    counts = [int(n) for n in args.actors.split(",")]
    latencies = [float(x) for x in args.latencies.split(",")]
    ray.init(
        _node_ip_address="127.0.0.1",
        num_cpus=args.cpus,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(repo_root())}},
    )
    rows_out: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for latency in latencies:
                for actors in counts:
                    ideal = actors * args.concurrency / latency
                    rows = max(200, int(ideal * args.seconds))
                    rate = _pipeline(folder, actors=actors, rows=rows, latency=latency, concurrency=args.concurrency)
                    rows_out.append(
                        f"| {latency} s a request | {actors} | {rows:,} | {ideal:.0f} | **{rate:.0f}** | "
                        f"{rate / ideal:.2f} |"
                    )
                    print(rows_out[-1], flush=True)
            for actors in (1, 2, 4):
                rate = _pipeline(folder, actors=actors, rows=3000, latency=0.0, concurrency=64)
                rows_out.append(f"| no latency (host CPU) | {actors} | 3,000 | — | **{rate:.0f}** | — |")
                print(rows_out[-1], flush=True)
            for batch, write in ((64, True), (256, True), (256, False)):
                rate = _driver_only(folder, rows=100_000, batch=batch, size=2000, write=write)
                what = "received and written" if write else "received only"
                rows_out.append(
                    f"| driver only: {batch} rows a block, 2 KB, {what} | — | 100,000 | — | **{rate:.0f}** | — |"
                )
                print(rows_out[-1], flush=True)
    finally:
        ray.shutdown()
    intro = (
        f"`python -m bench.experiments.ray_scaling` on {os.cpu_count()} CPU cores, "
        f"one Ray {ray.__version__} node on loopback. "
        f"Fixed latency: the scripted engine answers each request after the latency, {args.concurrency} "
        "in flight per actor, so one actor is worth concurrency / latency rows/s (a stand-in for one GPU); the task is "
        "`landmark_slots`, grounding off. Rows/s between 10 % and 90 % of the rows written (actor start-up left out). "
        "No latency: the same pipeline as fast as the cores allow. Driver only: a trivial map, the driver "
        "receiving, deduping, appending and fsyncing records."
    )
    header = ["run", "actors", "rows", "ideal rows/s", "measured rows/s", "measured / ideal"]
    print(write_table("ray_scaling.md", "extractor batch --ray: throughput by actors", intro, header, rows_out))


if __name__ == "__main__":
    main()
