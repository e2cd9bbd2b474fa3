"""The HTTP app on the scripted engine: routes, status codes, error bodies."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from extractor import Extractor, ScriptedEngine
from extractor.server import create_app
from extractor.server.app import NOT_FOUND_MESSAGE

from .conftest import LANDMARK_TEXT, landmark


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


@pytest.mark.parametrize("name", ["nope", "..", "%2e%2e", "a%00", "..%2f..%2fetc%2fpasswd"])
async def test_unknown_task_is_404_naming_nothing_from_disk(client: httpx.AsyncClient, name: str) -> None:
    response = await client.post(f"/extract/{name}", json={"text": "x"})
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
    response = await client.post("/extract/landmark_slots", json={"text": "长" * 40_000})
    assert response.status_code == 422 and "too long" in response.json()["message"]


async def test_tasks_lists_catalog(client: httpx.AsyncClient) -> None:
    body = (await client.get("/tasks")).json()
    names = [t["name"] for t in body["tasks"]]
    assert "landmark_slots" in names and "query_conditions" in names
    assert body["errors"] == []
    landmark_task = next(t for t in body["tasks"] if t["name"] == "landmark_slots")
    assert [f["name"] for f in landmark_task["fields"]][:2] == ["name", "country"]
