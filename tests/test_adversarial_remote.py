"""Issue 13, case 12: remote engine faults against stub servers, through the HTTP service."""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from extractor import Extractor, Settings
from extractor.engines.remote import retry_after_s
from extractor.server import create_app

from .conftest import LANDMARK_TEXT, landmark
from .test_remote import Handler, Reply, Stub, completion

pytestmark = pytest.mark.adversarial

GOOD = landmark(name="阿尔罕布拉宫", country="西班牙")
Client = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def servers() -> AsyncIterator[Callable[[Handler], Awaitable[Stub]]]:
    started: list[Stub] = []

    async def make(handler: Handler) -> Stub:
        started.append(await Stub(handler).start())
        return started[-1]

    yield make
    for stub in started:
        await stub.close()


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Client]:
    """An HTTP client on the service, its engine the remote one on the given stubs."""
    opened: list[tuple[Extractor, httpx.AsyncClient]] = []

    async def make(*servers: Stub, **overrides: Any) -> httpx.AsyncClient:
        base = {"remote_retries": 2, "remote_timeout_s": 5.0, **overrides}
        urls = ",".join(s.url for s in servers)
        settings = Settings.from_env({}, home=tmp_path / "home", engine="remote", remote_urls=urls, **base)
        extractor = Extractor(settings=settings)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(extractor)), base_url="http://t")
        opened.append((extractor, client))
        return client

    yield make
    for extractor, client in opened:
        await client.aclose()
        await extractor.aclose()


async def post(client: httpx.AsyncClient) -> httpx.Response:
    return await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT}, timeout=30)


async def test_400_is_a_422_and_never_retried(servers: Any, service: Client) -> None:
    error = {"error": {"message": "grammar: unsupported construct", "code": 400}}
    stub = await servers(lambda path, body: Reply(status=400, body=error))
    response = await post(await service(stub))
    assert response.status_code == 422 and response.json()["error"] == "bad_input"
    assert "unsupported construct" in response.json()["message"]
    assert len(stub.completions) == 1


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = 1_800_000_000.0
    assert retry_after_s({"retry-after": "3"}, now=now) == 3
    in_five = email.utils.formatdate(now + 5, usegmt=True)
    assert retry_after_s({"retry-after": in_five}, now=now) == 5
    assert retry_after_s({"retry-after": email.utils.formatdate(now - 60, usegmt=True)}, now=now) == 0  # past
    assert retry_after_s({"retry-after": email.utils.formatdate(now + 3600, usegmt=True)}, now=now) == 30  # capped
    assert retry_after_s({"retry-after": "Mon, 99 Foo"}, now=now) == 1  # unreadable: the default
    assert retry_after_s({"retry-after": "nan"}, now=now) == 1 and retry_after_s({"retry-after": "inf"}) == 1


async def test_429_and_503_are_retried_after_retry_after_seconds_and_date(servers: Any, service: Client) -> None:
    def date() -> Reply:  # 1 to 2 s from when it is sent (an HTTP date has whole seconds)
        return Reply(status=503, headers={"retry-after": email.utils.formatdate(time.time() + 2, usegmt=True)})

    replies = iter(
        [lambda: Reply(status=429, headers={"retry-after": "1"}), date, lambda: Reply(body=completion(GOOD))]
    )
    stub = await servers(lambda path, body: next(replies)())
    client = await service(stub)
    started = time.perf_counter()
    response = await post(client)
    waited = time.perf_counter() - started
    assert response.status_code == 200 and response.json()["data"]["country"] == "西班牙"
    assert len(stub.completions) == 3 and waited >= 1.9  # 1 s, then at least 0.9 s to the date


async def test_busy_on_every_try_is_a_503_with_retry_after(servers: Any, service: Client) -> None:
    stub = await servers(lambda path, body: Reply(status=429, headers={"retry-after": "0.2"}))
    response = await post(await service(stub, remote_retries=2))
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert len(stub.completions) == 3


async def test_500_is_retried_a_bounded_number_of_times_then_502(servers: Any, service: Client) -> None:
    stub = await servers(lambda path, body: Reply(status=500, body={"error": {"message": "CUDA error"}}))
    response = await post(await service(stub, remote_retries=2))
    assert response.status_code == 502 and response.json()["error"] == "bad_gateway"
    assert "failed after 3 tries" in response.json()["message"] and "CUDA error" in response.json()["message"]
    assert len(stub.completions) == 3


async def test_a_hung_server_is_a_504_at_the_request_deadline(servers: Any, service: Client) -> None:
    stub = await servers(lambda path, body: Reply(fault="hang"))
    client = await service(stub, request_timeout_s=1.0, remote_timeout_s=30.0)
    started = time.perf_counter()
    response = await post(client)
    elapsed = time.perf_counter() - started
    assert response.status_code == 504 and response.json()["error"] == "timeout"
    assert 1.0 <= elapsed < 2.5


async def test_timeouts_on_every_try_are_a_504(servers: Any, service: Client) -> None:
    stub = await servers(lambda path, body: Reply(fault="hang"))
    client = await service(stub, request_timeout_s=30.0, remote_timeout_s=0.3, remote_retries=1)
    started = time.perf_counter()
    response = await post(client)
    assert response.status_code == 504 and "timed out" in response.json()["message"]
    assert time.perf_counter() - started < 3 and len(stub.completions) == 2
