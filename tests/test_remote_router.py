"""The remote engine on one distributed endpoint: `vllm-router` in front of two servers, one killed mid-load.

The router is the real one (pypi ``vllm-router``, in its own venv: ``make setup-router``); the two
servers are the stub OpenAI servers of ``test_remote``, so the test runs in seconds. The same with
two real ``vllm serve`` was ``bench/experiments/remote_router.py`` (in git history at bf0fea1).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from extractor import ExtractionResult, Extractor, Settings

from .conftest import LANDMARK_TEXT, landmark
from .test_remote import Reply, Stub, completion
from .test_server_process import free_port

REPO = Path(__file__).resolve().parents[1]


def router_binary() -> str | None:
    """``vllm-router`` from EXTRACTOR_VLLM_ROUTER, the repo's ``.venv-router``, or PATH."""
    for candidate in (os.environ.get("EXTRACTOR_VLLM_ROUTER"), str(REPO / ".venv-router" / "bin" / "vllm-router")):
        if candidate and Path(candidate).is_file():
            return candidate
    return shutil.which("vllm-router")


pytestmark = pytest.mark.skipif(router_binary() is None, reason="vllm-router is not installed: make setup-router")


def start_router(workers: list[str], log: Path) -> Iterator[str]:
    port = free_port()
    command = [str(router_binary()), "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin"]
    command += [
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(free_port()),
    ]  # its default port may be taken
    with log.open("wb") as out:
        process = subprocess.Popen([*command, "--worker-urls", *workers], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()[-2000:]
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_every_request_answered_when_a_server_behind_the_router_dies(tmp_path: Path) -> None:
    answer = landmark(name="阿尔罕布拉宫", country="西班牙")

    def slow(path: str, body: object) -> Reply:
        return Reply(body=completion(answer), delay_s=0.2)

    def quick_then_stuck(path: str, body: object) -> Reply:
        # its first answers come at once, the rest are still held when it dies (not all answered together)
        return Reply(body=completion(answer), delay_s=0.0 if len(first.requests) <= 5 else 30.0)

    first, second = await Stub(quick_then_stuck).start(), await Stub(slow).start()
    router = start_router([first.url, second.url], tmp_path / "router.log")
    url = await asyncio.to_thread(next, router)
    try:
        settings = Settings.from_env({}, home=tmp_path, engine="remote", remote_urls=url, remote_retries=0)
        async with Extractor(settings=settings) as extractor:
            await extractor.astart()
            calls = [asyncio.create_task(extractor.aextract("landmark_slots", LANDMARK_TEXT)) for _ in range(120)]

            async def holding() -> None:  # it answered some and holds others
                while not first.answered or len(first.completions) <= len(first.answered):
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(holding(), 60)
            first.kill()  # drops its connections: the requests it held are in flight
            results = await asyncio.gather(*calls, return_exceptions=True)
        errors = [r for r in results if not isinstance(r, ExtractionResult)]
        assert errors == [], errors[:3]
        assert all(r.data["country"] == "西班牙" for r in results if isinstance(r, ExtractionResult))
        assert first.answered and len(second.answered) > len(first.answered)
        # the router retried what the dead server held: no request was answered twice or lost
        assert len(first.answered) + len(second.answered) == 120
    finally:
        await asyncio.to_thread(router.close)
        await first.close()
        await second.close()
