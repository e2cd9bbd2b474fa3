"""The service under test: ``extractor serve`` started, waited on and stopped as a process, posted to over raw HTTP.

What the runs that talk to a running server share (``bench.experiments.http_bench``, ``lifecycle``,
``mcp_latency``, ``openai_overhead``, ``reload_latency``, and ``bench.gpu_bench serve``, which times the start).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.common import ROOT, free_port

# One task and one sentence for the runs that measure the service, not the model.
TASK = "landmark_slots"
TEXT = "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。"

_LENGTH = re.compile(rb"content-length: *(\d+)", re.IGNORECASE)


def host() -> str:
    """This machine in a few words, for a results page."""
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def pin(cores: set[int]) -> None:
    """This process (and what it starts from now on) onto ``cores``, where the machine has more than one."""
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, cores)


def start_server(
    engine: str, *, cores: set[int] | None = None, extra: Sequence[str] = (), log: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``extractor serve --engine ENGINE`` on a free port (on ``cores`` where given, its output to ``log``), once
    ready: it and its URL."""
    port = free_port()
    command = [sys.executable, "-m", "extractor.cli", "serve", "--engine", engine, "--port", str(port), *extra]
    pinned = None if cores is None else lambda: pin(cores)
    with open(log or os.devnull, "w") as sink:
        process = subprocess.Popen(command, cwd=ROOT, preexec_fn=pinned, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"`extractor serve --engine {engine}` exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=60).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("the server did not turn ready in 10 minutes")


@contextmanager
def running(
    engine: str, *, cores: set[int] | None = None, extra: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """:func:`start_server`'s server and URL for the block; stopped after it."""
    process, url = start_server(engine, cores=cores, extra=extra)
    try:
        yield process, url
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """``process`` asked to end (SIGTERM), killed after a minute."""
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def apart() -> Iterator[int]:
    """A scripted-engine server on core 0, this process (the load generator) on core 1, for the block: its port."""
    with running("scripted", cores={0}) as (_, url):
        pin({1})
        try:
            yield int(url.rsplit(":", 1)[1])
        finally:
            pin(set(range(os.cpu_count() or 1)))


def post(path: str, payload: dict[str, Any]) -> bytes:
    """A keep-alive HTTP/1.1 ``POST path`` of ``payload`` as JSON, as bytes to write on a socket."""
    body = json.dumps(payload, ensure_ascii=False).encode()
    head = f"POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {len(body)}"
    return f"{head}\r\n\r\n".encode() + body


async def answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 answer off the socket: its head and its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = _LENGTH.search(head)
    return head, await reader.readexactly(int(length.group(1)) if length else 0)


async def keepalive_posts(
    port: int, path: str, payload: dict[str, Any], *, concurrency: int, total: int, expect: tuple[bytes, ...] = ()
) -> list[float]:
    """Latencies of ``total`` keep-alive POSTs, ``concurrency`` connections at a time (a raw HTTP/1.1
    client, so it costs the machine little); checks each is a 200 whose body holds one of ``expect``."""
    request = post(path, payload)
    latencies: list[float] = []

    async def worker(n: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(n):
                t0 = time.perf_counter()
                writer.write(request)
                head, body = await answer(reader)
                assert _LENGTH.search(head) is not None and head.startswith(b"HTTP/1.1 200"), head[:300]
                assert not expect or any(e in body for e in expect), body[:300]
                latencies.append(time.perf_counter() - t0)
        finally:
            writer.close()

    await asyncio.gather(*(worker(total // concurrency) for _ in range(concurrency)))
    return latencies
