"""The service over real HTTP on the real engine (the session's vLLM on the default model).

What `make serve` promises: /readyz turns 200; extractions are schema-valid; 16 concurrent
extractions all succeed; path tricks get 404; /metrics counts the requests; /chat streams
\\0-separated JSON and stops (aborting the engine request) at a user stop word; a client that
goes away aborts its engine request.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import httpx
import pytest

from extractor import Extractor
from extractor.engines.merged import MergedAdapters
from extractor.engines.vllm import VLLMEngine

from . import test_real_engine
from .test_real_engine import SNIPS
from .test_server import metric

pytestmark = pytest.mark.engine
live = test_real_engine.live_server  # that module's fixture (uvicorn on the session engine), here as `live`

LANDMARKS = [
    "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。",
    "故宫是中国明清两代的皇家宫殿，位于北京。",
    "埃菲尔铁塔是法国巴黎的铁塔，建于十九世纪末。",
]
JOBS = [("landmark_slots", t) for t in LANDMARKS] + SNIPS  # 8 documents, sent twice: 16 requests


def engine_idle(extractor: Extractor, within_s: float) -> bool:
    engine = extractor.engine
    assert isinstance(engine, VLLMEngine | MergedAdapters)  # the SNIPS tasks' adapter: an engine of its own
    deadline = time.monotonic() + within_s
    while engine.unfinished_requests and time.monotonic() < deadline:
        time.sleep(0.05)
    return engine.unfinished_requests == 0


def test_ready_then_16_concurrent_extractions(live: str, real_extractor: Extractor) -> None:
    deadline = time.monotonic() + 120
    while (ready := httpx.get(f"{live}/readyz", timeout=60)).status_code != 200:
        assert time.monotonic() < deadline, ready.text
        time.sleep(1)
    assert ready.json()["ready"] is True

    async def all_at_once() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=live, timeout=300) as client:
            return await asyncio.gather(*(client.post(f"/extract/{t}", json={"text": x}) for t, x in JOBS * 2))

    responses = asyncio.run(all_at_once())
    assert [r.status_code for r in responses] == [200] * 16, [r.text[:300] for r in responses if r.status_code != 200]
    for (task, _), response in zip(JOBS * 2, responses, strict=True):
        body = response.json()
        assert body["task"] == task and body["usage"]["completion_tokens"] > 0
        assert list(real_extractor.task(task).validator.iter_errors(body["data"])) == []

    with httpx.Client(base_url=live, timeout=30) as client:
        assert client.get("/tasks/..%2f..%2fetc").status_code == 404
        assert client.post("/extract/..%2f..%2fetc", json={"text": "x"}).status_code == 404
        text = client.get("/metrics").text
    served = sum(
        metric(text, "extractor_requests_total", route="/extract/{task}", task=t, status="200")
        for t in {t for t, _ in JOBS}
    )
    assert served >= 16
    assert metric(text, "extractor_attempts_total", task="landmark_slots") >= 6
    assert metric(text, "extractor_tokens_total", task="landmark_slots", direction="out") > 0


def test_chat_streams_and_stops_at_a_user_stop_word(live: str, real_extractor: Extractor) -> None:
    body = {
        "query": "Write three sentences about the sea.",
        "stream": True,
        "user_stop_words": ["e"],  # English prose has an 'e' within a few tokens
        "max_tokens": 400,
        "temperature": 0.0,
    }
    with httpx.Client(base_url=live, timeout=120) as client:
        response = client.post("/chat", json=body)
    assert response.status_code == 200
    parts = response.content.split(b"\0")
    assert parts[-1] == b"" and len(parts) >= 2
    texts = [json.loads(p)["text"] for p in parts[:-1]]
    assert "e" not in texts[-1] and all(b.startswith(a) for a, b in itertools.pairwise(texts))
    assert engine_idle(real_extractor, within_s=2.0)  # aborted: 400 tokens would take far longer


def test_client_disconnect_aborts_the_engine_request(live: str, real_extractor: Extractor) -> None:
    # The client gives up a quarter of the way through an extraction (seconds on 2 CPU cores, a
    # tenth of a second on an H200, where a fixed 0.3 s let the answer arrive first).
    body = {"text": LANDMARKS[1]}
    started = time.perf_counter()
    assert httpx.post(f"{live}/extract/landmark_slots", json=body, timeout=120).status_code == 200
    took = time.perf_counter() - started
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{live}/extract/landmark_slots", json=body, timeout=max(0.01, took / 4))
    assert engine_idle(real_extractor, within_s=1.0)
    text = httpx.get(f"{live}/metrics").text
    assert metric(text, "extractor_requests_total", task="landmark_slots", status="499") == 1
