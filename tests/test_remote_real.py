"""The remote engine against a real `vllm serve` (OpenAI-compatible) on the default model.

The test starts the server itself on 127.0.0.1 (about 70 s on 2 CPU cores), runs a batch of
extractions through ``Extractor(engine="remote")``, a stream, a too-long prompt, and stops it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from extractor import ExtractionFailed, ExtractionResult, Extractor, InputError, Settings
from extractor.config import repo_root
from extractor.engines.base import GenerationRequest
from extractor.engines.remote import RemoteEngine
from extractor.models import resolve_model_dir
from extractor.server import create_app

from .test_openai import serve
from .test_real_engine import SNIPS, assert_grounded_and_valid
from .test_server_process import free_port

# Two `vllm serve` behind vllm-router: slow (`make test-slow`); the remote engine's protocol is tested
# against scripted servers in test_remote.py and test_adversarial_remote.py.
pytestmark = [pytest.mark.engine, pytest.mark.slow]

LANDMARK_TEXT = "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。"


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model_dir = resolve_model_dir(Settings.from_env())
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "16",
        "--enforce-eager",  # as the suite's other engines (conftest.py)
        "--gpu-memory-utilization",
        os.environ.get("EXTRACTOR_GPU_MEMORY_UTILIZATION", "0.12"),
        "--structured-outputs-config",
        '{"backend":"guidance","disable_any_whitespace":true}',
        # the SNIPS tasks' adapter, which the remote engine asks for by its folder's name
        "--enable-lora",
        "--max-lora-rank",
        "8",
        "--lora-modules",
        f"snips={repo_root() / 'adapters' / 'snips'}",
    ]
    log_path = tmp_path_factory.mktemp("vllm") / "serve.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(process, url, log_path)
            yield url
        finally:
            stop(process)


def wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    pytest.fail(f"vllm serve did not turn healthy in 5 minutes: {log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_batched_extractions_on_vllm_serve(vllm_server: str) -> None:
    settings = Settings.from_env(engine="remote", remote_urls=vllm_server)
    jobs = [("landmark_slots", LANDMARK_TEXT), *SNIPS]

    async def run_all(extractor: Extractor) -> list[ExtractionResult | BaseException]:
        return await asyncio.gather(*(extractor.aextract(t, x) for t, x in jobs), return_exceptions=True)

    with Extractor(settings=settings) as extractor:
        results = asyncio.run(run_all(extractor))
        for (task, text), result in zip(jobs, results, strict=True):
            if isinstance(result, ExtractionFailed):
                pytest.fail(f"{task}: {result}")
            assert isinstance(result, ExtractionResult), result
            assert_grounded_and_valid(extractor, result, text)
            assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0  # the server's usage
            assert result.model.endswith("smollm2-135m-instruct")
        # the same tokenizer as the server's, so a too-long text is caught before it is sent
        with pytest.raises(InputError, match="too long"):
            extractor.extract("landmark_slots", "长" * 5000, chunk=False)


def test_stream_and_server_side_rejection(vllm_server: str) -> None:
    settings = Settings.from_env(engine="remote", remote_urls=vllm_server)

    async def run() -> tuple[list[str], str]:
        engine = RemoteEngine(settings)
        await engine.start()
        try:
            chat = GenerationRequest(messages=[{"role": "user", "content": "Say hello."}], max_tokens=12)
            texts = [t async for t in engine.stream(chat)]
            huge = GenerationRequest(messages=[{"role": "user", "content": "word " * 5000}], max_tokens=10)
            with pytest.raises(InputError, match="too long for the remote model") as rejected:
                await engine.generate(huge)  # past the tokenizer check: the server's 400 is an InputError
            return texts, str(rejected.value)
        finally:
            await engine.close()

    texts, _ = asyncio.run(run())
    assert texts and texts[-1]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))


async def test_service_ready_on_the_remote_engine(vllm_server: str) -> None:
    extractor = Extractor(settings=Settings.from_env(engine="remote", remote_urls=vllm_server))
    app = create_app(extractor)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            ready = await client.get("/readyz")
            response = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
        assert ready.status_code == 200, ready.text
        assert response.status_code == 200 and response.json()["data"]["name"]
    finally:
        await extractor.aclose()


def test_openai_client_gets_the_same_json_from_vllm_serve_and_extractor(vllm_server: str) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}, "country": {"type": "string", "maxLength": 30}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    messages = [
        {"role": "system", "content": "Extract the city and the country. Answer in JSON."},
        {"role": "user", "content": "The Eiffel Tower stands in Paris, France."},
    ]

    def ask(base_url: str) -> object:  # the same code for both servers: only base_url differs
        client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=300)
        model = client.models.list().data[0].id
        completion = client.chat.completions.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}},
            temperature=0,
            max_tokens=64,
        )
        return json.loads(completion.choices[0].message.content or "")

    with Extractor(settings=Settings.from_env(engine="remote", remote_urls=vllm_server)) as extractor:
        for url in serve(extractor):
            deadline = time.monotonic() + 60
            while httpx.get(f"{url}/readyz", timeout=30).status_code != 200:
                assert time.monotonic() < deadline, "extractor on the remote engine did not turn ready"
                time.sleep(0.5)
            from_vllm, from_extractor = ask(f"{vllm_server}/v1"), ask(f"{url}/v1")
    assert from_vllm == from_extractor
    assert isinstance(from_extractor, dict) and set(from_extractor) == {"city", "country"}
