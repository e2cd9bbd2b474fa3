"""The remote engine against a small stub server on loopback: every fault path."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from extractor import EngineError, ExtractionResult, Extractor, InputError, Settings
from extractor.engines.base import GenerationRequest
from extractor.engines.remote import RemoteEngine, chat_payload, parse_completion, retry_after_s
from extractor.engines.tokenizer import count_chat_tokens, estimate_tokens
from extractor.errors import RequestRejectedError

from .conftest import LANDMARK_TEXT, landmark

REQUEST = GenerationRequest(
    messages=[{"role": "user", "content": "hi"}], json_schema={"type": "object"}, temperature=0.0, max_tokens=8
)


def completion(text: str, *, prompt: int = 7, completion_tokens: int = 3, finish: str = "stop") -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens},
    }


@dataclass
class Reply:
    """What a stub sends: a status and JSON (or raw) body, or a fault."""

    status: int = 200
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    fault: str | None = None  # "drop": close without answering; "hang": never answer
    delay_s: float = 0.0
    sse: list[str] | None = None  # stream these deltas as server-sent events


Handler = Callable[[str, Any], Reply]


class Stub:
    """An HTTP/1.1 server on 127.0.0.1 answering with ``handler(path, json_body)``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[tuple[str, Any, dict[str, str]]] = []
        self.healthy = True
        self.closed_early = 0
        self.answered: list[Any] = []  # completion bodies whose 200 was written out
        self.killed = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> Stub:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    def kill(self) -> None:
        """Die like a crashed server: stop listening, drop every open connection, answer nothing more."""
        self.killed = True
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()

    @property
    def completions(self) -> list[Any]:
        return [body for path, body, _ in self.requests if path == "/v1/chat/completions"]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                _, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)}
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                body = json.loads(raw) if raw else None
                if path == "/health":
                    reply = Reply(status=200 if self.healthy else 503, body={})
                elif path == "/v1/models":
                    reply = Reply(body={"data": [{"id": "stub-model", "max_model_len": 2048}]})
                else:
                    self.requests.append((path, body, headers))
                    reply = self.handler(path, body)
                if reply.delay_s:
                    await asyncio.sleep(reply.delay_s)
                if self.killed:
                    return
                if reply.fault == "drop":
                    writer.close()
                    return
                if reply.fault == "hang":
                    await asyncio.sleep(3600)
                if reply.sse is not None:
                    await self._stream(writer, reply.sse)
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
                writer.write(
                    f"HTTP/1.1 {reply.status} X\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}\r\n"
                    f"{extra}\r\n".encode()
                    + payload
                )
                await writer.drain()
                if path == "/v1/chat/completions" and reply.status == 200:
                    self.answered.append(body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, deltas: list[str]) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        try:
            for delta in deltas:
                event = {"choices": [{"index": 0, "delta": {"content": delta}}]}
                writer.write(f"data: {json.dumps(event)}\n\n".encode())
                await writer.drain()
                await asyncio.sleep(0.05)
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
        except ConnectionError:
            self.closed_early += 1


@pytest.fixture
async def stubs() -> AsyncIterator[Callable[..., Awaitable[Stub]]]:
    started: list[Stub] = []

    async def make(handler: Handler) -> Stub:
        stub = await Stub(handler).start()
        started.append(stub)
        return stub

    yield make
    for stub in started:
        await stub.close()


@pytest.fixture
async def engines(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[RemoteEngine]]]:
    made: list[RemoteEngine] = []

    async def make(*stubs: Stub, **settings: Any) -> RemoteEngine:
        base = {"remote_retries": 2, "remote_timeout_s": 5.0, **settings}
        s = Settings.from_env({}, home=tmp_path, engine="remote", remote_urls=",".join(x.url for x in stubs), **base)
        engine = RemoteEngine(s, probe_interval_s=0.1)
        await engine.start()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await engine.close()


def ok(text: str = '{"a":1}') -> Handler:
    return lambda path, body: Reply(body=completion(text))


def test_payload_and_parsing_are_pure() -> None:
    body = chat_payload(REQUEST, model="m")
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "extraction", "schema": {"type": "object"}},
    }
    assert body["model"] == "m" and body["max_tokens"] == 8 and body["temperature"] == 0.0 and "stream" not in body
    assert "response_format" not in chat_payload(GenerationRequest(messages=REQUEST.messages), model="m")
    generation = parse_completion(completion("x", finish="length"))
    assert (generation.text, generation.prompt_tokens, generation.completion_tokens) == ("x", 7, 3)
    assert generation.finish_reason == "length"
    with pytest.raises(ValueError):
        parse_completion({"choices": []})
    assert retry_after_s({"retry-after": "2"}) == 2 and retry_after_s({}) == 1
    assert retry_after_s({"retry-after": "soon"}) == 1 and retry_after_s({"retry-after": "999"}) == 30


async def test_generate_sends_structured_output_request(stubs: Any, engines: Any) -> None:
    stub = await stubs(ok('{"a":1}'))
    engine = await engines(stub, remote_api_key="sekret")
    generation = await engine.generate(REQUEST)
    assert generation.text == '{"a":1}' and generation.prompt_tokens == 7 and generation.completion_tokens == 3
    assert engine.model_name == "stub-model" and engine.max_model_len == 2048  # from /v1/models
    _, body, headers = stub.requests[0]
    assert body["model"] == "stub-model" and body["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert headers["authorization"] == "Bearer sekret"
    assert engine.count_prompt_tokens([{"role": "user", "content": "x" * 400}]) == 104  # no local tokenizer here


async def test_429_and_503_are_retried_after_retry_after(stubs: Any, engines: Any) -> None:
    replies = iter([Reply(status=429, headers={"retry-after": "1"}), Reply(status=503), Reply(body=completion("{}"))])
    stub = await stubs(lambda path, body: next(replies))
    engine = await engines(stub)
    started = time.perf_counter()
    generation = await engine.generate(REQUEST)
    assert generation.text == "{}" and len(stub.completions) == 3
    assert time.perf_counter() - started >= 1.9  # waited 1 s (Retry-After), then 1 s (the default)


async def test_400_is_not_retried(stubs: Any, engines: Any) -> None:
    error = {"error": {"message": "unsupported schema keyword", "type": "BadRequestError", "code": 400}}
    stub = await stubs(lambda path, body: Reply(status=400, body=error))
    engine = await engines(stub)
    with pytest.raises(RequestRejectedError, match="unsupported schema keyword"):
        await engine.generate(REQUEST)
    assert len(stub.completions) == 1


async def test_context_length_400_is_an_input_error(stubs: Any, engines: Any) -> None:
    message = "This model's maximum context length is 2048 tokens. However, your prompt contains 3000 input tokens"
    stub = await stubs(lambda path, body: Reply(status=400, body={"error": {"message": message, "code": 400}}))
    engine = await engines(stub)
    with pytest.raises(InputError, match="text too long for the remote model"):
        await engine.generate(REQUEST)
    assert len(stub.completions) == 1


async def test_500_is_retried(stubs: Any, engines: Any) -> None:
    replies = iter([Reply(status=500, body={"error": {"message": "boom"}}), Reply(body=completion('{"a":1}'))])
    stub = await stubs(lambda path, body: next(replies))
    engine = await engines(stub)
    assert (await engine.generate(REQUEST)).text == '{"a":1}' and len(stub.completions) == 2


async def test_500_everywhere_fails_after_the_retries(stubs: Any, engines: Any) -> None:
    broken = await stubs(lambda path, body: Reply(status=500, body={"error": {"message": "boom"}}))
    engine = await engines(broken, remote_retries=2)
    with pytest.raises(EngineError, match=r"failed after 3 tries.*boom"):
        await engine.generate(REQUEST)
    assert len(broken.completions) == 3


async def test_timeout_is_bounded(stubs: Any, engines: Any) -> None:
    stub = await stubs(lambda path, body: Reply(fault="hang"))
    engine = await engines(stub, remote_timeout_s=0.3, remote_retries=1)
    started = time.perf_counter()
    with pytest.raises(EngineError, match="timed out"):
        await engine.generate(REQUEST)
    assert time.perf_counter() - started < 2 and len(stub.completions) == 2


async def test_dropped_connection_marks_unhealthy_then_reprobes(stubs: Any, engines: Any) -> None:
    dropping = True
    flaky = await stubs(lambda path, body: Reply(fault="drop") if dropping else Reply(body=completion("{}")))
    engine = await engines(flaky)
    flaky.healthy = False  # /health fails too until it is back
    with pytest.raises(EngineError, match="no healthy remote server"):
        await engine.generate(REQUEST)  # the drop marks it unhealthy: the retry fails fast
    assert len(flaky.completions) == 1 and not engine.endpoint.healthy
    dropping, flaky.healthy = False, True
    await asyncio.sleep(0.4)  # re-probed every 0.1 s
    assert engine.endpoint.healthy
    results = await asyncio.gather(*(engine.generate(REQUEST) for _ in range(4)))
    assert all(r.text == "{}" for r in results) and len(flaky.completions) == 5


async def test_no_healthy_server_fails_fast(stubs: Any, engines: Any) -> None:
    stub = await stubs(lambda path, body: Reply(fault="drop"))
    engine = await engines(stub)
    stub.healthy = False
    with pytest.raises(EngineError):
        await engine.generate(REQUEST)
    with pytest.raises(EngineError, match="no healthy remote server"):
        await engine.generate(REQUEST)


async def test_invalid_json_is_retried_then_fails(stubs: Any, engines: Any) -> None:
    stub = await stubs(lambda path, body: Reply(raw=b"{not json"))
    engine = await engines(stub, remote_retries=1)
    with pytest.raises(EngineError, match="invalid body"):
        await engine.generate(REQUEST)
    assert len(stub.completions) == 2


async def test_stream_yields_cumulative_text_and_closing_hangs_up(stubs: Any, engines: Any) -> None:
    stub = await stubs(lambda path, body: Reply(sse=["Hel", "lo", " wor", "ld"]))
    engine = await engines(stub)
    texts = [t async for t in engine.stream(REQUEST)]
    assert texts == ["Hel", "Hello", "Hello wor", "Hello world"] and stub.completions[0]["stream"] is True
    stub.handler = lambda path, body: Reply(sse=[str(i) for i in range(40)])
    stream = engine.stream(REQUEST)
    assert await anext(stream) == "0"
    await stream.aclose()
    await asyncio.sleep(0.3)
    assert stub.closed_early == 1


async def test_extractor_on_the_remote_engine(stubs: Any, tmp_path: Path) -> None:
    answer = landmark(name="阿尔罕布拉宫", country="西班牙")
    stub = await stubs(ok(answer))
    settings = Settings.from_env({}, home=tmp_path, engine="remote", remote_urls=stub.url + "/")
    async with Extractor(settings=settings) as extractor:  # not started: four calls start it at once
        results = await asyncio.gather(*(extractor.aextract("landmark_slots", LANDMARK_TEXT) for _ in range(4)))
    assert all(isinstance(r, ExtractionResult) and r.data["country"] == "西班牙" for r in results)
    assert all(r.model == "stub-model" for r in results if isinstance(r, ExtractionResult))
    # landmark_slots decodes grounded: vLLM's structured_outputs.grammar, never beside response_format
    sent = stub.completions[0]
    assert len(stub.completions) == 4 and "response_format" not in sent
    assert sent["structured_outputs"]["grammar"].startswith("start:")


def test_remote_settings_are_checked() -> None:
    with pytest.raises(Exception, match="EXTRACTOR_REMOTE_URLS"):
        Settings.from_env({}, engine="remote")
    with pytest.raises(Exception, match="not an http"):
        Settings.from_env({}, engine="remote", remote_urls="localhost:8000")
    settings = Settings.from_env({"EXTRACTOR_ENGINE": "remote", "EXTRACTOR_REMOTE_URLS": " http://a:1/ "})
    assert settings.remote_base_urls == ("http://a:1",)
    # the client-side list of servers is retired: several go behind vllm-router or vLLM's data parallelism
    with pytest.raises(Exception, match="vllm-router"):
        Settings.from_env({"EXTRACTOR_ENGINE": "remote", "EXTRACTOR_REMOTE_URLS": "http://a:1/, http://b:2"})
    assert "remote_api_key" not in repr(Settings.from_env({}, remote_api_key="sekret"))


async def test_a_local_model_counts_prompts_with_its_tokenizer_once_each(stubs: Any) -> None:
    stub = await stubs(ok())
    engine = RemoteEngine(Settings.from_env({}, engine="remote", remote_urls=stub.url), probe_interval_s=0.1)
    await engine.start()
    try:
        assert engine._chat_ids is not None  # the default model is prepared here: its tokenizer counts
        chat: Any = [{"role": "system", "content": "Extract."}, {"role": "user", "content": "rain in Oslo"}]
        count = engine.count_prompt_tokens(chat)
        assert count == count_chat_tokens(engine._chat_ids.tokenizer, chat) != estimate_tokens(chat)
        assert engine.count_prompt_tokens(chat) == count and engine._chat_ids._encoded.cache_info().hits == 1
    finally:
        await engine.close()
