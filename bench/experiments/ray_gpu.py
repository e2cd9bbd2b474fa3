"""`extractor batch --ray` on the real engine, on the GPU host: one actor, then two sharing what the host has.

    python3 -m bench.experiments.ray_gpu --actors 1,2 --repeat 3 --out $OUT/ray-gpu.json

SNIPS dev's 700 utterances, repeated ``--repeat`` times with new ids, extracted by one task
(``snips_get_weather``, adapters off: one engine an actor) on a local Ray cluster. Each point
starts its actors afresh; rows/s are taken between 10 % and 90 % of the rows written (engine start
left out) and over the whole run. With one GPU the actors share it (``gpus_per_actor`` = 1 / actors,
each engine the same memory share): the mechanism, not the scale.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import GOLD, machine
from bench.experiments.ray_scaling import _Clock, rows_file
from extractor.config import Settings
from extractor.scale import ray_batch

TASK = "snips_get_weather"


def point(folder: Path, rows: Path, actors: int, args: argparse.Namespace) -> dict[str, Any]:
    try:
        import torch

        gpus = torch.cuda.device_count()
    except ImportError:
        gpus = 0
    settings = Settings.from_env({}, engine=args.engine, adapter_serving="off", gpu_memory_utilization=args.memory)
    config = ray_batch.RayBatchConfig(
        task=TASK,
        inputs=(rows,),
        output=folder / f"out-{actors}",
        actors=actors,
        gpus_per_actor=min(1.0, gpus / actors) if gpus else 0.0,
        concurrency=args.concurrency,
    )
    clock = _Clock()
    started = time.perf_counter()
    summary = ray_batch.run(config, settings=settings, progress=clock)
    total = time.perf_counter() - started
    row = {
        "actors": actors,
        "gpus": gpus,
        "gpus_per_actor": config.gpus_per_actor,
        "rows": summary.rows,
        "ok": summary.ok,
        "seconds": total,
        "rows_per_s_steady": clock.steady_rate(),
        "rows_per_s_overall": summary.rows / total,
    }
    print(f"bench: {json.dumps(row)}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actors", default="1,2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=256, help="extractions in flight per actor")
    parser.add_argument("--memory", type=float, default=0.8, help="GPU memory, shared by the engines")
    parser.add_argument("--engine", default="vllm", help="scripted: a dry run of the plumbing")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ray-gpu-") as tmp:
        folder = Path(tmp)
        texts = [json.loads(line)["text"] for line in GOLD.read_text(encoding="utf-8").splitlines() if line.strip()]
        path = rows_file(folder / "rows.jsonl", texts * args.repeat)
        for actors in (int(a) for a in args.actors.split(",")):
            rows.append(point(folder, path, actors, args))
            args.out.write_text(json.dumps({"rows": rows, "machine": machine()}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
