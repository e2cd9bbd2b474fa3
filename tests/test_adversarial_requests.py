"""Hostile requests (issue 13, cases 6-8): texts, bodies, JSON. Never a 500; each refusal a declared 4xx."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from extractor import Extractor, ScriptedEngine
from extractor.server import create_app
from extractor.server.header_timeout import protocol
from extractor.server.strict_json import MAX_DEPTH, MAX_NUMBER_CHARS

from .conftest import LANDMARK_TEXT, landmark
from .live import free_port, served

pytestmark = pytest.mark.adversarial
JSON = {"content-type": "application/json"}
BODY_ROUTES = ("/extract/{task}", "/extract/{task}/batch", "/chat")


@pytest.fixture
async def client(extractor: Extractor) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(extractor)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


# ---- case 6: hostile text ----


@pytest.mark.parametrize("task", ["landmark_slots", "query_conditions"])  # instruction layout, turns layout
async def test_template_syntax_in_the_text_reaches_the_model_verbatim(
    client: httpx.AsyncClient, engine: ScriptedEngine, task: str
) -> None:
    text = "{{7*7}} {% raw %}{{ config }}{% endraw %} {# c #} 故宫"
    engine.enqueue(["{}"] * 3)
    await client.post(f"/extract/{task}", json={"text": text, "options": {"max_attempts": 1}})
    prompt = engine.history[-1].messages[-1]["content"]
    assert text in prompt and "49" not in prompt


@pytest.mark.parametrize(
    "text",
    [
        "阿尔罕布拉宫\x00是西班牙的宫殿。",  # NUL
        "\u202e阿尔罕布拉宫\u202c是\u200f西班牙\u2066的宫殿。",  # RTL override, marks, isolates
        "😀👩‍👩‍👧阿尔罕布拉宫是西班牙的宫殿。🇪🇸",  # emoji, a ZWJ family, a flag
    ],
)
async def test_control_and_bidi_characters_still_give_correct_spans(
    client: httpx.AsyncClient, engine: ScriptedEngine, text: str
) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫", country="西班牙")])
    response = await client.post("/extract/landmark_slots", json={"text": text})
    assert response.status_code == 200, response.text
    body = response.json()
    for span in body["spans"]:
        assert span["status"] == "exact"
        assert text[span["start"] : span["end"]] == body["data"][span["path"].lstrip("/")]


@pytest.mark.parametrize(
    ("text", "status", "words"),
    [
        ("\ud800 lone", 422, "text"),  # strict str: "body.text: ... unable to parse raw data as a unicode string"
        (" \t\n\u3000 ", 422, "empty"),
        ("😀" * 100_000, 422, "too long"),  # at max_text_chars: past the model window instead
        ("😀" * 100_001, 413, "over the limit"),
    ],
)
async def test_unusable_texts_are_a_4xx_naming_the_problem(
    client: httpx.AsyncClient, text: str, status: int, words: str
) -> None:
    lone = any(0xD800 <= ord(c) <= 0xDFFF for c in text)  # sent as a \ud800 escape, the rest as UTF-8
    body = json.dumps({"text": text, "options": {"chunk": False}}, ensure_ascii=lone).encode()
    response = await client.post("/extract/landmark_slots", content=body, headers=JSON)
    assert response.status_code == status, response.text[:300]
    assert words in response.json()["message"]


# ---- case 8: hostile JSON ----

HOSTILE_JSON: dict[str, bytes] = {
    "deep": b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "just_over_depth": b'{"text": "x", "options": ' + b'{"a":' * MAX_DEPTH + b"1" + b"}" * MAX_DEPTH + b"}",
    "duplicate_keys": b'{"text": "x", "text": "y"}',
    "nan": b'{"text": "x", "options": {"temperature": NaN}}',
    "infinity": b'{"text": "x", "options": {"temperature": Infinity}}',
    "minus_infinity": b'{"text": "x", "options": {"temperature": -Infinity}}',
    "huge_float": b'{"text": "x", "options": {"temperature": 1e999}}',
    "digits": b'{"text": "x", "options": {"max_tokens": ' + b"9" * 10_000 + b"}}",
    "not_utf8": b'{"text": "\xff\xfe"}',
    "truncated": b'{"text": ',
}


@pytest.mark.parametrize("route", ["/extract/landmark_slots", "/extract/landmark_slots/batch", "/chat"])
@pytest.mark.parametrize("case", sorted(HOSTILE_JSON))
async def test_hostile_json_is_a_declared_400(client: httpx.AsyncClient, route: str, case: str) -> None:
    started = time.perf_counter()
    response = await client.post(route, content=HOSTILE_JSON[case], headers=JSON)
    assert time.perf_counter() - started < 2.0
    assert response.status_code == 400, response.text[:300]
    assert response.json()["error"] == "bad_json"
    if case == "digits":
        assert f"at most {MAX_NUMBER_CHARS}" in response.json()["message"]
    if case == "duplicate_keys":
        assert "'text'" in response.json()["message"]


async def test_every_body_route_declares_400_413_408_and_422(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    for route in BODY_ROUTES:
        responses = document["paths"][route]["post"]["responses"]
        assert {"400", "408", "413", "422"} <= set(responses), (route, sorted(responses))


async def test_wrong_json_types_are_refused_not_coerced(client: httpx.AsyncClient) -> None:
    for route, body in [
        ("/chat", {"query": "hi", "temperature": False}),
        ("/chat", {"query": "hi", "max_tokens": "5"}),
        ("/extract/landmark_slots", {"text": "x", "options": {"grounded_decoding": 0}}),
        ("/extract/landmark_slots/batch", {"items": [{"text": "x"}], "options": {"grounded_decoding": 0}}),
        ("/extract/landmark_slots", {"text": "x", "options": {"max_attempts": 2.5}}),
        ("/extract/landmark_slots/batch", {"items": [{"text": "x", "id": True}]}),
    ]:
        response = await client.post(route, json=body)
        assert response.status_code == 422 and response.json()["error"] == "bad_request", (route, body)


async def test_integral_numbers_are_integers(client: httpx.AsyncClient, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫")])
    body = {"text": LANDMARK_TEXT, "options": {"max_attempts": 1.0, "max_tokens": 64.0}}
    assert (await client.post("/extract/landmark_slots", json=body)).status_code == 200
    assert engine.history[-1].max_tokens == 64


# ---- case 7: hostile bodies, over a real socket ----


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def raw(url: str, head: bytes, body: Any = b"", *, wait_s: float = 10.0) -> tuple[bytes, float, bool]:
    """Send ``head`` then ``body`` (bytes, or (bytes, pause) pairs) until the server answers.

    Returns the answer, the seconds until its first byte, and whether the server then closed the connection.
    """
    host, port = url.removeprefix("http://").split(":")
    chunks = [(body, 0.0)] if isinstance(body, bytes) else list(body)
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(head)
        for chunk, pause in chunks:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server answered and closed while we were still sending
            if select.select([sock], [], [], pause)[0]:
                break  # an answer before the body was all sent
        select.select([sock], [], [], wait_s)
        answered = time.perf_counter() - started
        answer, closed = b"", False
        try:
            while chunk := sock.recv(65536):
                answer += chunk
            closed = True
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            pass
    return answer, answered, closed


def head(size: int | None, *, chunked: bool = False) -> bytes:
    lines = [b"POST /extract/landmark_slots HTTP/1.1", b"host: x", b"content-type: application/json"]
    lines.append(b"transfer-encoding: chunked" if chunked else b"content-length: %d" % size)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def test_hostile_bodies_get_413_408_or_a_closed_connection_and_memory_stays_flat(tmp_path: Path) -> None:
    timeout_s = 2.0
    with served(tmp_path, env={"EXTRACTOR_BODY_TIMEOUT_S": str(timeout_s)}) as (process, url):
        ten_mb = b"x" * 10_000_000
        raw(url, head(len(ten_mb)), ten_mb)  # warm-up: the first request imports and allocates
        before = rss_kib(process.pid)
        figures: dict[str, tuple[int, float]] = {}

        def status(answer: bytes) -> int:
            return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1") else 0

        for _ in range(5):
            answer, seconds, closed = raw(url, head(len(ten_mb)), ten_mb)
            assert status(answer) == 413 and closed and seconds < 2, (answer[:200], seconds, closed)
            figures["10 MB with Content-Length"] = (status(answer), seconds)
            chunks = [(b"%x\r\n" % 1_000_000 + b"x" * 1_000_000 + b"\r\n", 0.0) for _ in range(10)]
            answer, seconds, closed = raw(url, head(None, chunked=True), chunks)
            assert status(answer) == 413 and closed and seconds < 2, (answer[:200], seconds, closed)
            figures["10 MB chunked"] = (status(answer), seconds)
        body = json.dumps({"text": LANDMARK_TEXT}).encode()
        answer, seconds, closed = raw(url, head(10), body)  # shorter than sent: the rest is garbage
        assert status(answer) == 400 and closed, answer[:400]  # uvicorn: "Invalid HTTP request received."
        figures["Content-Length short"] = (status(answer), seconds)
        answer, seconds, closed = raw(url, head(len(body) + 1000), body)  # longer than sent: waits, then 408
        assert status(answer) == 408 and closed and seconds < timeout_s + 1, (answer[:200], seconds)
        figures["Content-Length long"] = (status(answer), seconds)
        loris = [(body[i : i + 1], 1.0) for i in range(len(body))]
        answer, seconds, closed = raw(url, head(len(body)), loris, wait_s=timeout_s + 5)
        assert status(answer) == 408 and closed and seconds < timeout_s + 1, (answer[:200], seconds)
        figures["slow loris, 1 byte/s"] = (status(answer), seconds)
        after = rss_kib(process.pid)
        growth_mb = (after - before) / 1024
        print({k: (s, round(t, 2)) for k, s_t in figures.items() for s, t in [s_t]}, f"RSS {before} -> {after} KiB")
        assert growth_mb < 30, f"RSS grew {growth_mb:.0f} MB"
        # and the service still answers
        assert httpx.post(f"{url}/extract/landmark_slots", json={"text": LANDMARK_TEXT}, timeout=10).status_code == 200


def length(answer: bytes) -> int:
    """The Content-Length of an answer whose head has arrived (0 before)."""
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    return int(head.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]) if b"content-length: " in head else 0


def test_slow_headers_get_408_and_a_closed_connection(tmp_path: Path) -> None:
    timeout_s = 1.0
    with served(tmp_path, env={"EXTRACTOR_HEADER_TIMEOUT_S": str(timeout_s)}) as (_, url):
        request = head(2) + b"{}"
        # a request line and headers at a byte every 0.3 s: 408 at the timeout, then closed
        answer, seconds, closed = raw(url, b"", [(request[i : i + 1], 0.3) for i in range(40)], wait_s=timeout_s + 5)
        assert answer.startswith(b"HTTP/1.1 408 ") and closed and seconds < timeout_s + 1, (answer, seconds)
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"] == "header_timeout"
        # a connection that sends nothing is closed without an answer
        answer, seconds, closed = raw(url, b"", wait_s=timeout_s + 5)
        assert answer == b"" and closed and seconds < timeout_s + 1, (answer, seconds)
        # on a kept-alive connection: a whole request is answered; the next one's slow headers get 408
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=timeout_s + 5) as sock:
            sock.sendall(request)
            first = b""
            while b"\r\n\r\n" not in first or len(first.split(b"\r\n\r\n", 1)[1]) < length(first):
                first += sock.recv(65536)
            started = time.perf_counter()
            answer = b""
            for i in range(40):
                sock.sendall(request[i : i + 1])
                if select.select([sock], [], [], 0.3)[0]:
                    break
            while chunk := sock.recv(65536):
                answer += chunk
            seconds = time.perf_counter() - started
        assert first.startswith(b"HTTP/1.1 422 "), first  # `{}` has no text
        assert answer.startswith(b"HTTP/1.1 408 ") and seconds < timeout_s + 1, (answer, seconds)
        # a request sent at once is unaffected, however long its answer takes to come
        assert httpx.post(f"{url}/extract/landmark_slots", json={"text": LANDMARK_TEXT}, timeout=10).status_code == 200


@pytest.mark.parametrize("implementation", ["h11", "httptools"])
def test_the_header_timeout_holds_on_either_http_implementation(implementation: str) -> None:
    if implementation == "httptools":
        pytest.importorskip("httptools")
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base: type[asyncio.Protocol] = HttpToolsProtocol
    else:
        base = H11Protocol

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    port = free_port()
    config = uvicorn.Config(app, port=port, log_level="warning", lifespan="off", http=protocol(0.5, http=base))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        request = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
        answer, seconds, closed = raw(url, b"", [(request[i : i + 1], 0.2) for i in range(len(request))])
        assert answer.startswith(b"HTTP/1.1 408 ") and closed and seconds < 1.5, (answer, seconds)
        answer, _, _ = raw(url, request, wait_s=0.3)
        assert answer.startswith(b"HTTP/1.1 204 "), answer  # sent at once: served
    finally:
        server.should_exit = True
        thread.join(timeout=10)
