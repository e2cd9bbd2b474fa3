"""Issue 13, case 13: the in-process engine dying mid-request.

One real-engine test (``extractor serve`` in a subprocess, its engine core killed with SIGKILL),
and the same guarantees on the scripted engine (an engine that raises ``EngineDeadError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psutil
import pytest

from extractor import Extractor, ScriptedEngine
from extractor.config import repo_root
from extractor.engines.base import Generation, GenerationRequest
from extractor.engines.vllm import VLLMEngine
from extractor.errors import EngineDeadError, EngineError
from extractor.server import create_app
from extractor.server.runner import ENGINE_DEAD_EXIT

from .conftest import LANDMARK_TEXT
from .test_server_process import free_port

pytestmark = pytest.mark.adversarial


class DyingEngine(ScriptedEngine):
    """Answers until ``die`` is set; then every request in flight and every new one fails: the core is gone."""

    def __init__(self) -> None:
        super().__init__(respond=lambda request: "{}")
        self.die = asyncio.Event()

    async def generate(self, request: GenerationRequest) -> Generation:
        await self.die.wait()
        raise EngineDeadError("vLLM's engine core died (killed); restart the service")


async def test_engine_death_is_503_for_in_flight_and_readyz_then_the_runner_is_told(
    extractor: Extractor,
) -> None:
    engine = DyingEngine()
    dying = Extractor(settings=extractor.settings, engine=engine, catalog=extractor.catalog)
    app = create_app(dying)
    told: list[bool] = []
    app.state.service.on_engine_dead = lambda: told.append(True)
    app.state.service._ready = (time.monotonic(), True, "ok")  # ready before the death (cached canary)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        in_flight = [
            asyncio.create_task(client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})) for _ in range(3)
        ]
        await asyncio.sleep(0.1)
        engine.die.set()
        answers = await asyncio.wait_for(asyncio.gather(*in_flight), timeout=5)  # never hangs
        assert [r.status_code for r in answers] == [503] * 3
        assert answers[0].json()["error"] == "engine_unavailable"
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and "engine died" in ready.json()["reason"]
        late = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
        assert late.status_code == 503 and "engine died" in late.json()["message"]
    assert told == [True]  # once, however many requests saw it


async def test_engine_death_while_idle_is_found_by_readyz(extractor: Extractor) -> None:
    engine = DyingEngine()
    engine.die.set()
    app = create_app(Extractor(settings=extractor.settings, engine=engine, catalog=extractor.catalog))
    told: list[bool] = []
    app.state.service.on_engine_dead = lambda: told.append(True)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        ready = await client.get("/readyz")  # its canary generation meets the dead engine
        assert ready.status_code == 503 and "engine died" in ready.json()["reason"]
    assert told == [True]


class _FakeAsyncLLM:
    """vLLM's AsyncLLM as far as VLLMEngine's error translation sees it."""

    def __init__(self, *, errored: bool) -> None:
        self.errored = errored

    async def generate(self, *args: object, **kwargs: object) -> AsyncIterator[object]:
        raise RuntimeError("EngineCore encountered an issue")
        yield  # an async generator, like vLLM's


@pytest.mark.parametrize(("errored", "kind"), [(True, EngineDeadError), (False, EngineError)])
async def test_vllm_errors_become_ours(errored: bool, kind: type[EngineError]) -> None:
    engine = object.__new__(VLLMEngine)  # no model: only the translation of vLLM's errors is under test
    engine._llm = _FakeAsyncLLM(errored=errored)
    with pytest.raises(kind, match="EngineCore encountered an issue") as caught:
        await engine._generate("prompt", None)
    assert isinstance(caught.value, EngineDeadError) == errored
    engine._loop = object()  # type: ignore[assignment]
    if errored:
        with pytest.raises(EngineDeadError):
            engine._running()  # nothing new is sent to a dead engine


def engine_core(server: psutil.Process) -> psutil.Process:
    """vLLM's engine core of the base model: the first started (a merged adapter's weights would have their own)."""
    cores = [c for c in server.children(recursive=True) if "EngineCore" in " ".join([c.name(), *c.cmdline()])]
    if cores:
        return min(cores, key=lambda c: c.create_time())
    children = [(c.pid, c.name()) for c in server.children(recursive=True)]
    raise AssertionError(f"no engine core among {children}")


@pytest.mark.engine
def test_real_engine_core_killed_mid_request(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    # adapters off: one engine to start (and kill), not the SNIPS adapter's merged one beside it
    command = [sys.executable, "-m", "extractor.cli", "serve", "--port", str(port), "--max-num-seqs", "4"]
    command += ["--adapter-serving", "off"]
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=repo_root(), stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 600
        while True:
            assert process.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the engine did not turn ready"
            try:
                if httpx.get(f"{url}/readyz", timeout=60).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)

        answers: list[httpx.Response | Exception] = []
        answered_at: list[float] = []

        def chat() -> None:
            body = {"query": "Write a long story about a lighthouse keeper.", "max_tokens": 1500, "temperature": 0.7}
            try:
                answers.append(httpx.post(f"{url}/chat", json=body, timeout=120))
            except httpx.HTTPError as error:
                answers.append(error)
            answered_at.append(time.monotonic())

        clients = [threading.Thread(target=chat) for _ in range(3)]
        for client in clients:
            client.start()
        time.sleep(3)  # the chats are generating
        core = engine_core(psutil.Process(process.pid))
        killed_at = time.monotonic()
        core.send_signal(signal.SIGKILL)

        readyz: list[tuple[float, int]] = []
        while process.poll() is None and time.monotonic() - killed_at < 120:
            with contextlib.suppress(httpx.TransportError):  # refused: it stopped listening, on its way out
                readyz.append((time.monotonic(), httpx.get(f"{url}/readyz", timeout=10).status_code))
            time.sleep(0.1)
        for client in clients:
            client.join(timeout=60)
        status = process.wait(timeout=60)  # never hangs
        exited_after = time.monotonic() - killed_at
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    served = [a.status_code if isinstance(a, httpx.Response) else type(a).__name__ for a in answers]
    phases = ("died", "Shutting down", "Waiting", "shutdown", "Finished", "exiting")
    print("".join(line for line in log_path.open() if any(p in line for p in phases))[-3000:])
    print(f"answered {[round(t - killed_at, 1) for t in answered_at]} s after the kill")
    assert served == [503] * 3, (served, log_path.read_text()[-3000:])
    # Until a request meets the dead engine, /readyz may still answer from its cached canary.
    after = [code for at, code in readyz if at >= min(answered_at)]
    assert after and set(after) == {503}, readyz
    assert status == ENGINE_DEAD_EXIT and exited_after < 60, (status, exited_after)
    print(f"\ncore killed: in flight {served}, /readyz {sorted(set(after))}, exit {status} in {exited_after:.1f} s")
