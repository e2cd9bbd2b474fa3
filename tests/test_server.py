"""The HTTP app on the scripted engine: routes, status codes, error bodies, limits, readiness, metrics."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from extractor import Catalog, EngineError, Extractor, ScriptedEngine, Settings
from extractor.engines.base import GenerationRequest
from extractor.server import create_app
from extractor.server.app import NOT_FOUND_MESSAGE

from .conftest import LANDMARK_TEXT, landmark

JSON = {"content-type": "application/json"}


@pytest.fixture
async def client(extractor: Extractor) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(extractor)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


async def test_extract_ok(client: httpx.AsyncClient, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫", country="西班牙")])
    response = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
    assert response.status_code == 200
    body = response.json()
    assert body["data"]["country"] == "西班牙"
    assert body["attempts"][0]["number"] == 1 and "value" not in body
    assert {s["path"] for s in body["spans"]} == {"/name", "/country"}


async def test_options_reach_the_engine(client: httpx.AsyncClient, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫")])
    body = {"text": LANDMARK_TEXT, "options": {"temperature": 0.0, "max_tokens": 99}}
    assert (await client.post("/extract/landmark_slots", json=body)).status_code == 200
    assert engine.history[0].temperature == 0.0 and engine.history[0].max_tokens == 99


async def test_grounding_options_reach_the_pipeline(
    client: httpx.AsyncClient, engine: ScriptedEngine, extractor: Extractor
) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫")] * 2)
    plain = {"text": LANDMARK_TEXT, "options": {"grounded_decoding": False}}
    assert (await client.post("/extract/landmark_slots", json=plain)).status_code == 200
    assert engine.history[-1].json_schema == extractor.task("landmark_slots").engine_schema
    grounded = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
    assert grounded.json()["grounded_fields"]  # the task's own setting applies when the option is absent
    long_text = "阿尔罕布拉宫是西班牙的宫殿。" * 4000
    response = await client.post("/extract/landmark_slots", json={"text": long_text, "options": {"chunk": False}})
    assert response.status_code == 422 and "too long" in response.json()["message"]


@pytest.mark.parametrize("name", ["nope", "..", "%2e%2e", "a%00", "..%2f..%2fetc%2fpasswd"])
async def test_unknown_task_is_404_naming_nothing_from_disk(client: httpx.AsyncClient, name: str) -> None:
    response = await client.post(f"/extract/{name}", json={"text": "x"})
    if name == "..":  # the client normalizes the path to "/": the playground page, GET only
        assert response.status_code == 405 and response.json()["message"] == "Method Not Allowed"
        return
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "message": NOT_FOUND_MESSAGE}


@pytest.mark.parametrize(
    "body",
    [{}, {"text": ""}, {"text": 5}, {"text": "x", "extra": 1}, {"text": "x", "options": {"max_attempts": 9}}],
)
async def test_bad_body_is_422(client: httpx.AsyncClient, body: object) -> None:
    response = await client.post("/extract/landmark_slots", json=body)
    assert response.status_code == 422
    assert response.json()["error"] == "bad_request"


async def test_failed_extraction_is_422_with_attempts(client: httpx.AsyncClient, engine: ScriptedEngine) -> None:
    engine.enqueue(["oops", "oops", "oops"])
    response = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "extraction_failed" and len(body["attempts"]) == 3


async def test_text_too_long_is_422(client: httpx.AsyncClient) -> None:
    body = {"text": "长" * 40_000, "options": {"chunk": False}}  # a task chunks such a text by default
    response = await client.post("/extract/landmark_slots", json=body)
    assert response.status_code == 422 and "too long" in response.json()["message"]


async def test_tasks_lists_catalog(client: httpx.AsyncClient) -> None:
    body = (await client.get("/tasks")).json()
    names = [t["name"] for t in body["tasks"]]
    assert "landmark_slots" in names and "query_conditions" in names
    assert body["errors"] == []
    landmark_task = next(t for t in body["tasks"] if t["name"] == "landmark_slots")
    assert [f["name"] for f in landmark_task["fields"]][:2] == ["name", "country"]


# -- helpers for the service tests below ---------------------------------------------------


def make_app(catalog: Catalog, tmp_path: Path, engine: ScriptedEngine, **settings: Any) -> FastAPI:
    base = Settings.from_env({}, home=tmp_path / "home", engine="scripted", **settings)
    return create_app(Extractor(settings=base, engine=engine, catalog=catalog))


@asynccontextmanager
async def client_for(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


def answer_by_text(request: GenerationRequest) -> str:
    """A landmark answer naming the text's first word, or broken JSON for texts saying 'fail'."""
    text = request.messages[-1]["content"]
    if "fail" in text:
        return "oops"
    if text == "ping":
        return "p"
    return landmark(name="故宫" if "故宫" in text else "阿尔罕布拉宫")


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus exposition (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            sample, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in sample for k, v in labels.items()):
                return float(value)
    return 0.0


# -- batch ---------------------------------------------------------------------------------


async def test_batch_answers_every_item_in_order(catalog: Catalog, tmp_path: Path) -> None:
    engine = ScriptedEngine(respond=answer_by_text)
    app = make_app(catalog, tmp_path, engine, max_text_chars=50)
    items = [
        {"id": "a", "text": "故宫位于北京。"},
        {"id": 2, "text": "please fail"},
        {"text": "   "},
        {"id": "long", "text": "长" * 51},
        {"id": "e", "text": LANDMARK_TEXT},
    ]
    async with client_for(app) as client:
        response = await client.post("/extract/landmark_slots/batch", json={"items": items})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["id"] for r in results] == ["a", 2, None, "long", "e"]
    assert [r["status"] for r in results] == [200, 422, 422, 413, 200]
    assert results[0]["result"]["data"]["name"] == "故宫" and results[0]["error"] is None
    assert results[4]["result"]["data"]["name"] == "阿尔罕布拉宫"
    assert results[1]["error"]["error"] == "extraction_failed" and len(results[1]["error"]["attempts"]) == 3
    assert "empty" in results[2]["error"]["message"]
    assert "EXTRACTOR_MAX_TEXT_CHARS" in results[3]["error"]["message"]


@pytest.mark.parametrize("body", [{"items": []}, {"items": [{"txt": "x"}]}, {"items": [{"text": 1}]}, {}])
async def test_bad_batch_body_is_422(client: httpx.AsyncClient, body: object) -> None:
    response = await client.post("/extract/landmark_slots/batch", json=body)
    assert response.status_code == 422 and response.json()["error"] == "bad_request"


async def test_batch_over_item_limit_is_413(catalog: Catalog, tmp_path: Path) -> None:
    for limits in ({"max_batch_items": 2}, {"max_in_flight": 1, "max_queued": 1}):
        app = make_app(catalog, tmp_path, ScriptedEngine(respond=answer_by_text), **limits)
        async with client_for(app) as client:
            response = await client.post("/extract/landmark_slots/batch", json={"items": [{"text": "故宫"}] * 3})
            fits = await client.post("/extract/landmark_slots/batch", json={"items": [{"text": "故宫"}] * 2})
        assert response.status_code == 413 and "over the limit of 2" in response.json()["message"]
        assert fits.status_code == 200


async def test_batch_of_unknown_task_is_404(client: httpx.AsyncClient) -> None:
    response = await client.post("/extract/..%2fetc/batch", json={"items": [{"text": "x"}]})
    assert response.status_code == 404 and response.json()["message"] == NOT_FOUND_MESSAGE


# -- tasks ---------------------------------------------------------------------------------


async def test_task_detail(client: httpx.AsyncClient) -> None:
    response = await client.get("/tasks/landmark_slots")
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "landmark_slots" and body["schema"]["type"] == "object"
    assert "x-extractor" in body["schema"] and "x-extractor" not in body["engine_schema"]
    assert {"fields"} <= set(body["prompt"]["variables"]) and body["prompt"]["file"] == "landmark_slots.j2"
    assert body["prompt"]["layout"] == "instruction" and body["pool"] >= 30 and body["examples_per_request"] == 3
    assert body["settings"]["examples_from_pool"] == {"k": 3, "diverse": True, "hints": False}  # as tuned
    assert body["settings"]["max_attempts"] is None or 1 <= body["settings"]["max_attempts"] <= 3
    assert body["settings"]["grounding"] in ("flag", "strict", "off")


@pytest.mark.parametrize(
    "name", ["nope", "..", "%2e%2e", "a%00", "..%2f..%2fetc", "..%2F..%2Fetc%2Fpasswd", "LANDMARK"]
)
async def test_task_detail_unknown_is_404(client: httpx.AsyncClient, name: str) -> None:
    response = await client.get(f"/tasks/{name}")
    if name == "..":  # the client normalizes the path to "/": the playground page, nothing from disk by name
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
        return
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "message": NOT_FOUND_MESSAGE}


async def test_left_out_task_says_why(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "schemas" / "broken.json").write_text('{"type": "object", "properties": {"a": {"type": "money"}}}')
    (tmp_path / "prompts" / "broken.j2").write_text("{{ text }}")
    app = make_app(Catalog.load(tmp_path), tmp_path, ScriptedEngine())
    async with client_for(app) as client:
        response = await client.get("/tasks/broken")
        listed = (await client.get("/tasks")).json()
    assert response.status_code == 404
    body = response.json()
    assert body["error"] == "not_loaded" and "broken.json" in body["detail"][0]["file"]
    assert listed["tasks"] == [] and len(listed["errors"]) == 1


# -- limits, admission, timeouts, readiness ------------------------------------------------


async def test_body_over_limit_is_413_before_parsing(catalog: Catalog, tmp_path: Path) -> None:
    engine = ScriptedEngine(respond=answer_by_text)
    app = make_app(catalog, tmp_path, engine, max_body_bytes=1000)
    big = json.dumps({"text": "x" * 2000}).encode()

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        for start in range(0, len(big), 100):
            yield big[start : start + 100]

    async with client_for(app) as client:
        declared = await client.post("/extract/landmark_slots", content=big, headers=JSON)
        streamed = await client.post("/extract/landmark_slots", content=chunked(), headers=JSON)
        not_json = await client.post("/extract/landmark_slots", content=b"{" * 2000, headers=JSON)
    for response in (declared, streamed, not_json):
        assert response.status_code == 413, response.text
        assert "EXTRACTOR_MAX_BODY_BYTES" in response.json()["message"]
    assert engine.history == []


async def test_text_over_limit_is_413(catalog: Catalog, tmp_path: Path) -> None:
    app = make_app(catalog, tmp_path, ScriptedEngine(respond=answer_by_text), max_text_chars=10)
    async with client_for(app) as client:
        response = await client.post("/extract/landmark_slots", json={"text": "故" * 11})
    assert response.status_code == 413 and "EXTRACTOR_MAX_TEXT_CHARS" in response.json()["message"]


async def test_over_admission_limit_is_429_with_retry_after(catalog: Catalog, tmp_path: Path) -> None:
    engine = ScriptedEngine(respond=answer_by_text, delay_s=0.3)
    app = make_app(catalog, tmp_path, engine, max_in_flight=2, max_queued=1)
    async with client_for(app) as client:
        responses = await asyncio.gather(
            *(client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT}) for _ in range(5))
        )
        batch = await client.post("/extract/landmark_slots/batch", json={"items": [{"text": "故宫"}] * 3})
        metrics_text = (await client.get("/metrics")).text
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 200, 200, 429, 429]
    rejected = next(r for r in responses if r.status_code == 429)
    assert int(rejected.headers["retry-after"]) >= 1 and rejected.json()["error"] == "overloaded"
    assert batch.status_code == 200  # the queue has drained again: a batch of 3 fits
    assert metric(metrics_text, "extractor_requests_total", status="429", task="landmark_slots") == 2
    assert metric(metrics_text, "extractor_in_flight") == 0 and metric(metrics_text, "extractor_queue_depth") == 0


async def test_past_timeout_is_504_and_aborts(catalog: Catalog, tmp_path: Path) -> None:
    engine = ScriptedEngine(respond=answer_by_text, delay_s=5)
    app = make_app(catalog, tmp_path, engine, request_timeout_s=0.2)
    async with client_for(app) as client:
        started = time.perf_counter()
        response = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
    assert response.status_code == 504 and "EXTRACTOR_REQUEST_TIMEOUT_S" in response.json()["message"]
    assert time.perf_counter() - started < 2
    assert len(engine.aborted) == 1


class SlowStartEngine(ScriptedEngine):
    """A scripted engine whose start waits for a signal (or fails)."""

    def __init__(self, *, fail: bool = False) -> None:
        super().__init__(respond=answer_by_text)
        self.go = asyncio.Event()
        self.fail = fail

    async def start(self) -> None:
        await self.go.wait()
        if self.fail:
            raise EngineError("no GPU left")


async def test_503_while_the_engine_starts_then_ready(catalog: Catalog, tmp_path: Path) -> None:
    engine = SlowStartEngine()
    app = make_app(catalog, tmp_path, engine)
    app.state.service.begin_start()  # what the lifespan does under uvicorn
    async with client_for(app) as client:
        alive = await client.get("/healthz")
        starting = await client.get("/readyz")
        refused = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
        engine.go.set()
        await asyncio.sleep(0.05)
        ready = await client.get("/readyz")
        again = await client.get("/readyz")
        served = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
    assert alive.status_code == 200
    assert starting.status_code == 503 and "starting" in starting.json()["reason"]
    assert refused.status_code == 503 and refused.json()["error"] == "not_ready" and "retry-after" in refused.headers
    assert ready.status_code == 200 and ready.json()["ready"] is True and again.status_code == 200
    canaries = [r for r in engine.history if r.max_tokens == 1]
    assert len(canaries) == 1  # the second /readyz used the cached answer
    assert served.status_code == 200


async def test_engine_that_failed_to_start_is_503(catalog: Catalog, tmp_path: Path) -> None:
    engine = SlowStartEngine(fail=True)
    engine.go.set()
    app = make_app(catalog, tmp_path, engine)
    async with client_for(app) as client:
        ready = await client.get("/readyz")
        refused = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
    assert ready.status_code == 503 and "no GPU left" in ready.json()["reason"]
    assert refused.status_code == 503 and "no GPU left" in refused.json()["message"]


async def test_canary_failure_is_503(catalog: Catalog, tmp_path: Path) -> None:
    app = make_app(catalog, tmp_path, ScriptedEngine())  # nothing queued: every generation fails
    async with client_for(app) as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 503 and "canary" in ready.json()["reason"]


async def test_draining_refuses_new_requests(catalog: Catalog, tmp_path: Path) -> None:
    app = make_app(catalog, tmp_path, ScriptedEngine(respond=answer_by_text))
    app.state.service.draining = True
    async with client_for(app) as client:
        refused = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
        ready = await client.get("/readyz")
    assert refused.status_code == 503 and "shutting down" in refused.json()["message"]
    assert ready.status_code == 503


async def test_drain_refuses_new_work_and_waits_for_what_is_admitted(catalog: Catalog, tmp_path: Path) -> None:
    engine = ScriptedEngine(respond=answer_by_text, delay_s=0.5)
    app = make_app(catalog, tmp_path, engine)
    service = app.state.service
    async with client_for(app) as client:
        assert (await client.get("/readyz")).status_code == 200
        in_flight = asyncio.create_task(client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT}))
        await asyncio.sleep(0.1)
        drain = asyncio.create_task(service.drain(timeout_s=5))
        await asyncio.sleep(0)
        messages = [{"role": "user", "content": LANDMARK_TEXT}]
        ready = await client.get("/readyz")
        refused = {
            "extract": await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT}),
            "batch": await client.post("/extract/landmark_slots/batch", json={"items": [{"text": "故宫"}]}),
            "chat": await client.post("/chat", json={"query": "hi"}),
            "v1": await client.post("/v1/chat/completions", json={"model": "landmark_slots", "messages": messages}),
        }
        assert not drain.done()  # the admitted extraction is still running
        served = await in_flight
        assert await asyncio.wait_for(drain, 2) is True
    assert served.status_code == 200 and served.json()["task"] == "landmark_slots"
    assert ready.status_code == 503 and "shutting down" in ready.json()["reason"]
    for name, response in refused.items():
        assert response.status_code == 503, name
        assert response.headers["retry-after"] == "1" and response.headers["connection"] == "close", name
    assert refused["extract"].json()["error"] == "not_ready" and "shutting down" in refused["extract"].json()["message"]
    assert refused["v1"].json()["error"]["code"] == "not_ready"  # OpenAI's error shape under /v1
    assert len([r for r in engine.history if r.max_tokens != 1]) == 1  # nothing refused reached the engine


async def test_drain_gives_up_at_its_timeout(catalog: Catalog, tmp_path: Path) -> None:
    app = make_app(catalog, tmp_path, ScriptedEngine(respond=answer_by_text, delay_s=5))
    async with client_for(app) as client:
        in_flight = asyncio.create_task(client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT}))
        await asyncio.sleep(0.1)
        started = time.perf_counter()
        assert await app.state.service.drain(timeout_s=0.3) is False
        assert 0.25 < time.perf_counter() - started < 1.5
        in_flight.cancel()


def _post(path: str, body: bytes, *, length: int | None = None) -> dict[str, Any]:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(length or len(body)).encode())]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
        "state": {},
    }


async def test_over_the_limit_is_refused_before_the_body_is_read(catalog: Catalog, tmp_path: Path) -> None:
    app = make_app(catalog, tmp_path, ScriptedEngine(respond=answer_by_text), max_in_flight=1, max_queued=0)
    async with client_for(app) as client:
        assert (await client.get("/readyz")).status_code == 200
    ticket = app.state.service.admission.admit(1)  # the only room is taken
    read = 0

    async def never_sends_the_body() -> dict[str, Any]:
        nonlocal read
        read += 1
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    def sends(body: bytes) -> Any:
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

        return receive

    async def answer(scope: dict[str, Any], receive: Any = never_sends_the_body) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await asyncio.wait_for(app(scope, receive, send), 2)
        return sent

    for path in ("/extract/landmark_slots", "/extract/landmark_slots/batch", "/chat", "/v1/chat/completions"):
        sent = await answer(_post(path, b"{}"))
        headers = dict(sent[0]["headers"])
        assert sent[0]["status"] == 429 and int(headers[b"retry-after"]) >= 1, path
        assert b"connection" not in headers, path  # a client over the limit keeps its connection
    assert read == 0
    # an unknown task is still a 404, and a declared length over the limit a 413
    body = json.dumps({"text": "x"}).encode()
    assert (await answer(_post("/extract/nope", body), sends(body)))[0]["status"] == 404
    assert (await answer(_post("/extract/landmark_slots", b"", length=10**8)))[0]["status"] == 413
    ticket.release()
    async with client_for(app) as client:
        served = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
        text = (await client.get("/metrics")).text
    assert served.status_code == 200
    assert metric(text, "extractor_requests_total", route="/extract/{task}/batch", status="429") == 1
    assert metric(text, "extractor_requests_total", route="/chat", status="429") == 1
    assert metric(text, "extractor_requests_total", route="openai", task="-", status="429") == 1


async def test_a_burst_over_the_limit_is_refused_before_parsing(catalog: Catalog, tmp_path: Path) -> None:
    # Six requests at once, room for two: the gate holds room for the first two as their bodies
    # arrive, so the other four are refused before anything parses them (here, bodies that
    # would be 422); then nothing is left held.
    app = make_app(catalog, tmp_path, ScriptedEngine(respond=answer_by_text), max_in_flight=1, max_queued=1)
    async with client_for(app) as client:
        assert (await client.get("/readyz")).status_code == 200
        burst = await asyncio.gather(*(client.post("/extract/landmark_slots", json={"text": 5}) for _ in range(6)))
        batch = await client.post("/extract/landmark_slots/batch", json={"items": [{"text": "故宫"}] * 2})
    assert sorted(r.status_code for r in burst) == [422, 422, 429, 429, 429, 429]
    assert batch.status_code == 200  # the room held at the gate is handed over: a batch of 2 fits in 2
    assert app.state.service.admission.admitted == 0


async def test_client_disconnect_cancels_the_engine_request(catalog: Catalog, tmp_path: Path) -> None:
    engine = ScriptedEngine(respond=answer_by_text, delay_s=5)
    app = make_app(catalog, tmp_path, engine)
    body = json.dumps({"text": LANDMARK_TEXT}).encode()
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(0.2)  # the client goes away while the engine works
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/extract/landmark_slots",
        "raw_path": b"/extract/landmark_slots",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
        "state": {},
    }
    started = time.perf_counter()
    await app(scope, receive, send)
    assert time.perf_counter() - started < 2
    assert sent == [] and len(engine.aborted) == 1
    async with client_for(app) as client:
        text = (await client.get("/metrics")).text
    assert metric(text, "extractor_requests_total", status="499", task="landmark_slots") == 1
    assert metric(text, "extractor_in_flight") == 0


# -- metrics and docs ----------------------------------------------------------------------


async def test_metrics_count_requests_attempts_and_tokens(catalog: Catalog, tmp_path: Path) -> None:
    engine = ScriptedEngine(respond=answer_by_text)
    engine.enqueue(['{"name": "阿尔罕布拉宫", "country": null, "city": null, "category": null, "period": null'])
    app = make_app(catalog, tmp_path, engine)
    async with client_for(app) as client:
        assert (await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})).status_code == 200
        assert (await client.post("/extract/landmark_slots", json={"text": "fail"})).status_code == 422
        assert (await client.post("/extract/nope", json={"text": "x"})).status_code == 404
        response = await client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    route = "/extract/{task}"
    assert metric(text, "extractor_requests_total", route=route, task="landmark_slots", status="200") == 1
    assert metric(text, "extractor_requests_total", route=route, task="landmark_slots", status="422") == 1
    assert metric(text, "extractor_requests_total", task="-", status="404") == 1
    assert 'task="nope"' not in text  # unknown names never become labels
    assert metric(text, "extractor_attempts_total", task="landmark_slots") == 4
    assert metric(text, "extractor_repairs_total", task="landmark_slots") == 1
    assert metric(text, "extractor_validation_failures_total", task="landmark_slots") == 3
    assert metric(text, "extractor_tokens_total", task="landmark_slots", direction="in") > 0
    assert metric(text, "extractor_tokens_total", task="landmark_slots", direction="out") > 0
    assert metric(text, "extractor_request_duration_seconds_count", route=route, task="landmark_slots") == 2
    assert metric(text, "extractor_grounded_decoding_total", task="landmark_slots", mode="grammar") == 1


async def test_metrics_count_texts_past_the_grounded_decoding_word_limit(catalog: Catalog, tmp_path: Path) -> None:
    engine = ScriptedEngine(respond=answer_by_text)
    app = make_app(catalog, tmp_path, engine, grounded_max_words=5)
    long_text = LANDMARK_TEXT + " one two three four five six"
    async with client_for(app) as client:
        response = await client.post("/extract/landmark_slots", json={"text": long_text})
        text = (await client.get("/metrics")).text
    body = response.json()
    assert response.status_code == 200 and body["grounded_decoding"] == "posthoc" and body["grounded_fields"] == []
    assert "past the grounded-decoding limit of 5" in body["notes"][0]
    assert engine.history[0].grammar is None and engine.history[0].json_schema is not None
    assert metric(text, "extractor_grounded_decoding_total", task="landmark_slots", mode="posthoc") == 1


async def test_openapi_docs(client: httpx.AsyncClient) -> None:
    assert (await client.get("/docs")).status_code == 200
    paths = (await client.get("/openapi.json")).json()["paths"]
    for path in ("/extract/{task}", "/extract/{task}/batch", "/tasks/{task}", "/readyz", "/metrics", "/chat"):
        assert path in paths


async def test_body_without_json_content_type_says_so(client: httpx.AsyncClient) -> None:
    response = await client.post("/extract/landmark_slots", content=b'{"text": "x"}')
    assert response.status_code == 422 and "content-type: application/json" in response.json()["message"]


async def test_invalid_json_names_the_problem(client: httpx.AsyncClient) -> None:
    response = await client.post("/extract/landmark_slots", content=b'{"text": ', headers=JSON)
    assert response.status_code == 400 and "not valid JSON" in response.json()["message"]
    assert response.json()["error"] == "bad_json"


async def test_lone_surrogates_are_bad_input(client: httpx.AsyncClient) -> None:
    single = await client.post("/extract/landmark_slots", content=b'{"text": "\\ud800x"}', headers=JSON)
    batch = await client.post(
        "/extract/landmark_slots/batch", content=b'{"items": [{"text": "\\ud800"}]}', headers=JSON
    )
    assert single.status_code == 422
    assert batch.status_code == 200 and batch.json()["results"][0]["status"] == 422
    assert "surrogate" in batch.json()["results"][0]["error"]["message"]
