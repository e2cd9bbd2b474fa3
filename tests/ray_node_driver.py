"""The driver of the node-loss test, run inside a namespace: ``python -m tests.ray_node_driver ...``.

It does what ``extractor batch ... --ray ADDRESS`` does (``ray_batch.run`` with a progress line,
exit 0 on success, 2 on an extractor error) with one difference: each actor's engine is a
scripted one that also notes every request it answers in a file (one line, one ``os.write`` on
an ``O_APPEND`` descriptor, so lines from many processes on both nodes never mix), which tells the
test how many rows were extracted more than once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from functools import partial
from pathlib import Path

from extractor import ScriptedEngine, Settings
from extractor.engines.base import GenerationRequest
from extractor.errors import ExtractorError
from extractor.jobs.progress import Progress
from extractor.scale import ray_batch

GOOD = json.dumps(
    {"name": "阿尔罕布拉宫", "country": "西班牙", "city": None, "category": "宫殿建筑", "period": None},
    ensure_ascii=False,
)
ROW = re.compile(r"#(\d+)#")


def noted(calls: str, request: GenerationRequest) -> str:
    """A valid answer; the row's number (``#N#`` in its text) noted in ``calls``."""
    found = ROW.search(request.messages[-1]["content"])
    line = f"{found.group(1) if found else '?'} {os.getpid()}\n".encode()
    descriptor = os.open(calls, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)
    return GOOD


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ray_node_driver")
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--address", required=True)
    parser.add_argument("--calls", required=True, help="the file where each answered request is noted")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--actors", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rows-per-call", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds the engine takes per request")
    args = parser.parse_args(argv)
    config = ray_batch.RayBatchConfig(
        task="landmark_slots",
        inputs=(args.input,),
        output=args.output,
        address=args.address,
        actors=args.actors,
        concurrency=args.concurrency,
        batch_rows=args.rows_per_call,
    )
    settings = Settings.from_env({}, home=args.home, engine="scripted")
    engine_factory = partial(ScriptedEngine, respond=partial(noted, args.calls), delay_s=args.delay)
    progress = Progress(label="batch", interval_s=1.0)
    try:
        summary = ray_batch.run(config, settings=settings, progress=progress, engine_factory=engine_factory)
    except ExtractorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
