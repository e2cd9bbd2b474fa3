"""``extractor mcp`` with a noisy, slow engine: ``python -m tests.mcp_noisy_server --tasks-dir DIR --home DIR``.

The engine is the scripted dry run (each task's first worked example), but it writes to stdout
everywhere vLLM's does: a logger bound to ``sys.stdout`` at import (vLLM's default logging
config), a ``print``, a raw write to descriptor 1, a child process (vLLM's engine core is one),
the same at shutdown and at exit; and its start takes ``--start-s`` seconds, so a call made at
once arrives while it starts. Every such line carries :data:`NOISE`, so the test can find them.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import logging
import os
import subprocess
import sys
from pathlib import Path

from extractor import ScriptedEngine, Settings
from extractor.engines.base import GenerationRequest
from extractor.server.mcp import stdio

NOISE = "noise-not-json"
# as vLLM configures its loggers at import: a handler on sys.stdout
_logger = logging.getLogger("vllm.noisy")
_logger.addHandler(logging.StreamHandler(sys.stdout))
_logger.setLevel(logging.INFO)
_logger.propagate = False


def noise(where: str) -> None:
    """One line of each kind a real engine writes to stdout."""
    print(f"{NOISE} print {where}", flush=True)
    _logger.info("%s logger %s", NOISE, where)
    os.write(1, f"{NOISE} fd1 {where}\n".encode())
    subprocess.run([sys.executable, "-c", f"print('{NOISE} child {where}')"], check=True)


def first_example(request: GenerationRequest) -> str:
    """The dry run's answer: the task's first worked example."""
    return next((m["content"] for m in request.messages if m["role"] == "assistant"), "{}")


class NoisyEngine(ScriptedEngine):
    """The dry-run engine, slow to start and writing to stdout at start, on each request and at close."""

    def __init__(self, start_s: float) -> None:
        super().__init__(respond=first_example, model_name="noisy")
        self.start_s = start_s
        noise("engine built")

    async def start(self) -> None:
        noise("engine start")
        await asyncio.sleep(self.start_s)
        noise("engine started")

    async def close(self) -> None:
        noise("engine close")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks-dir", type=Path, required=True)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--start-s", type=float, default=3.0)
    args = parser.parse_args()
    atexit.register(noise, "at exit")
    settings = Settings.from_env(engine="scripted", tasks_dir=args.tasks_dir, home=args.home, watch=False)
    return stdio.run(settings, engine_factory=lambda: NoisyEngine(args.start_s))


if __name__ == "__main__":
    sys.exit(main())
