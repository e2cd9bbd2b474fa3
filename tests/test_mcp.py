"""Tasks as MCP tools (issue 49), driven by the official SDK's client: in process, over HTTP at /mcp, over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import jsonschema
import mcp.client.stdio
import mcp_types as types
import pytest
import uvicorn
from fastapi import FastAPI
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.config import repo_root
from extractor.engines.base import GenerationRequest
from extractor.errors import EngineNotReadyError, OverloadedError
from extractor.review.store import ReviewStore
from extractor.server import create_app
from extractor.server.mcp import server, tools
from extractor.server.mcp.server import TaskTools
from extractor.server.protocol import ExtractRequest
from extractor.server.reloading import CatalogReloader
from extractor.server.service import Service

from .conftest import LANDMARK_TEXT, landmark
from .live import free_port
from .mcp_noisy_server import NOISE
from .test_reload import write, write_probe

KEY = "k-mcp-7c1e9a20"
INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
).encode()
SPANISH = landmark(name="阿尔罕布拉宫", country="西班牙", period="摩尔人统治时期")
EIFFEL = "埃菲尔铁塔位于法国巴黎，建于十九世纪末。"  # landmark_slots' first worked example
WRAPPED_SCHEMA = {"type": "array", "items": {"type": "string", "x-grounded": False}, "description": "tags of a text"}


def respond(request: GenerationRequest) -> str:
    """The scripted model: the probe's version, a wrapped list, or the landmark answer."""
    shown = " ".join(m["content"] for m in request.messages)
    found = re.search(r"Template version (\d+)", shown)
    if found:
        return json.dumps({"version": found.group(1)})
    if "Tag the text" in shown:
        return json.dumps({"value": ["palace"]})
    return SPANISH


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A catalog of its own: the shipped landmark task, a probe, and a task whose top level is an array."""
    folder = tmp_path / "tasks"
    for sub, name in (("schemas", "landmark_slots.json"), ("prompts", "landmark_slots.j2")):
        write(folder / sub / name, (repo_root() / sub / name).read_text(encoding="utf-8"))
    write_probe(folder, 1)
    write(folder / "schemas" / "tags.json", json.dumps(WRAPPED_SCHEMA))
    write(folder / "prompts" / "tags.j2", "Tag the text: {{ text }}")
    return folder


def make_extractor(root: Path, tmp_path: Path, **settings: Any) -> Extractor:
    values = {"home": tmp_path / "home", "engine": "scripted", "tasks_dir": root, **settings}
    return Extractor(settings=Settings.from_env({}, **values), engine=ScriptedEngine(respond=respond))


@pytest.fixture
def extractor(root: Path, tmp_path: Path) -> Extractor:
    return make_extractor(root, tmp_path)


@pytest.fixture
def service(extractor: Extractor) -> Iterator[Service]:
    service = Service(extractor)
    service.review.open()
    yield service
    service.review.close()


def check(result: types.CallToolResult, tool: types.Tool) -> dict[str, Any]:
    """A successful call: structuredContent valid against the tool's outputSchema, evidence in _meta."""
    assert not result.is_error, result.content
    assert tool.output_schema is not None
    jsonschema.validate(result.structured_content, tool.output_schema)
    evidence: dict[str, Any] = (result.meta or {})[tools.RESULT_META]
    whole = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert whole["data"] == result.structured_content or whole["data"] == result.structured_content.get("value")
    assert {"spans", "confidences", "notes", "attempts", "usage"} <= set(evidence)
    return evidence


# -- the pure part ------------------------------------------------------------------------------


def test_each_tool_is_its_task(root: Path) -> None:
    catalog = Catalog.load(root)
    listed = {t.name: t for t in tools.tools(catalog)}
    assert set(listed) == set(catalog.names()) == {"landmark_slots", "probe", "tags"}
    landmark_task = catalog.get("landmark_slots")
    assert listed["landmark_slots"].output_schema == json.loads((root / "schemas/landmark_slots.json").read_text())
    assert listed["landmark_slots"].title == landmark_task.title
    assert landmark_task.description.rstrip(".") in (listed["landmark_slots"].description or "")
    assert listed["landmark_slots"].input_schema == ExtractRequest.model_json_schema()
    # a top level that is not an object: the schema as decoded, the analyst's schema under `value`
    wrapped = listed["tags"].output_schema
    assert wrapped is not None and wrapped["type"] == "object" and wrapped["required"] == ["value"]
    assert wrapped["properties"]["value"]["type"] == "array"


def test_bad_arguments_name_what_to_fix() -> None:
    assert isinstance(tools.request({"text": "x", "options": {"max_attempts": 2}}), ExtractRequest)
    assert "send either `text` or `document`" in str(tools.request({}))
    assert "txt: Extra inputs are not permitted" in str(tools.request({"txt": "x"}))
    assert "options.temperature" in str(tools.request({"text": "x", "options": {"temperature": 9}}))
    assert "document.content" in str(tools.request({"document": {"content": ""}}))


def test_refusals_say_when_to_retry() -> None:
    starting = tools.error(EngineNotReadyError("the engine is starting; GET /readyz turns 200 when it is ready"))
    assert starting.is_error and (starting.meta or {})[tools.ERROR_META] == {
        "error": "not_ready",
        "status": 503,
        "retry_after": 5,
    }
    assert starting.content[0].text.endswith("(retry in 5 s)")  # type: ignore[union-attr]
    busy = tools.error(OverloadedError("over the admission limit", retry_after=2))
    assert (busy.meta or {})[tools.ERROR_META]["status"] == 429 and "retry in 2 s" in busy.content[0].text  # type: ignore[union-attr]


# -- in process (the SDK's client on the server object), both eras of the protocol -----------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_list_and_call_in_process(service: Service, mode: str) -> None:
    async with Client(TaskTools(service).server, mode=mode) as client:
        assert client.server_capabilities.tools is not None
        listed = {t.name: t for t in (await client.list_tools()).tools}
        catalog = service.extractor.catalog
        for name in catalog.names():
            assert listed[name].output_schema == tools.output_schema(catalog.get(name))
        result = await client.call_tool("landmark_slots", {"text": LANDMARK_TEXT})
        evidence = check(result, listed["landmark_slots"])
        assert result.structured_content["country"] == "西班牙"
        assert [s["path"] for s in evidence["spans"]] == ["/name", "/country", "/period"]
        assert evidence["attempts"][0]["number"] == 1
        tagged = await client.call_tool("tags", {"text": "The Alhambra is a palace."})
        check(tagged, listed["tags"])
        assert tagged.structured_content == {"value": ["palace"]}


async def test_bad_calls_are_tool_errors(service: Service, extractor: Extractor) -> None:
    async with Client(TaskTools(service).server) as client:
        cases: list[tuple[str, dict[str, Any], str, str]] = [
            ("nope", {"text": "x"}, "not_found", "the tools are: landmark_slots, probe, tags"),
            ("../etc/passwd", {"text": "x"}, "not_found", "no tool of that name"),
            ("landmark_slots", {}, "bad_request", "send either `text` or `document`"),
            ("landmark_slots", {"text": "x" * 100_001}, "too_large", "EXTRACTOR_MAX_TEXT_CHARS"),
            ("landmark_slots", {"text": "a\ud800b"}, "bad_request", "text"),
            ("landmark_slots", {"document": {"content": "not base64!"}}, "bad_document", "not base64"),
            (
                "landmark_slots",
                {"document": {"content": "AAAA", "media_type": "image/png"}},
                "unsupported_media_type",
                "",
            ),
        ]
        for name, arguments, kind, says in cases:
            result = await client.call_tool(name, arguments)
            assert result.is_error, (name, arguments)
            assert (result.meta or {})[tools.ERROR_META]["error"] == kind, result.content
            assert says in result.content[0].text, result.content  # type: ignore[union-attr]
        # a model that never answers validly: the attempts come back with the error
        extractor.engine.enqueue(["not json at all"] * 3)  # type: ignore[attr-defined]
        failed = await client.call_tool("probe", {"text": "x", "options": {"max_attempts": 1}})
        assert failed.is_error and (failed.meta or {})[tools.ERROR_META]["error"] == "extraction_failed"
        assert len((failed.meta or {})[tools.ERROR_META]["attempts"]) == 1


async def test_admission_and_time_limits_hold(root: Path, tmp_path: Path) -> None:
    extractor = make_extractor(root, tmp_path, max_in_flight=1, max_queued=0, request_timeout_s=0.3)
    extractor.engine._delay_s = 1.0  # type: ignore[attr-defined]
    service = Service(extractor)
    service.review.open()
    try:
        async with Client(TaskTools(service).server) as client:
            first = asyncio.create_task(client.call_tool("landmark_slots", {"text": LANDMARK_TEXT}))
            await asyncio.sleep(0.1)
            second = await client.call_tool("landmark_slots", {"text": LANDMARK_TEXT})
            assert second.is_error and (second.meta or {})[tools.ERROR_META]["error"] == "overloaded"
            assert "retry in" in second.content[0].text  # type: ignore[union-attr]
            timed_out = await first
            assert timed_out.is_error and (timed_out.meta or {})[tools.ERROR_META]["error"] == "timeout"
        assert service.admission.admitted == 0
    finally:
        service.review.close()


class SlowStart(ScriptedEngine):
    """The scripted model (:func:`respond`), whose start takes ``start_s`` seconds (or fails after them)."""

    def __init__(self, start_s: float, *, fails: bool = False) -> None:
        super().__init__(respond=respond)
        self.start_s, self.fails = start_s, fails

    async def start(self) -> None:
        await asyncio.sleep(self.start_s)
        if self.fails:
            raise RuntimeError("no model here")


@pytest.mark.parametrize("wait_for_engine", [True, False])
async def test_a_call_while_the_engine_starts_waits_over_stdio_past_the_request_limit(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait_for_engine: bool
) -> None:
    """Over stdio the first call waits for the start however long it takes; over HTTP it is a 503 at once."""
    monkeypatch.setattr(server, "PROGRESS_EVERY_S", 0.3)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted", tasks_dir=root, request_timeout_s=0.5)
    service = Service(Extractor(settings=settings, engine=SlowStart(1.5)))
    service.review.open()
    told: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        told.append(message or "")

    try:
        async with Client(TaskTools(service, wait_for_engine=wait_for_engine).server, mode="legacy") as client:
            service.begin_start()
            result = await client.call_tool("landmark_slots", {"text": LANDMARK_TEXT}, progress_callback=progress)
        if wait_for_engine:  # a start three times the request's limit: the call still gets its answer
            assert not result.is_error, result.content
            assert result.structured_content["country"] == "西班牙"
            assert told and all(m.startswith("the engine is starting") for m in told), told
        else:
            assert result.is_error and (result.meta or {})[tools.ERROR_META]["status"] == 503
    finally:
        await service.stop()
        service.review.close()


async def test_a_call_while_the_engine_fails_to_start_says_why(root: Path, tmp_path: Path) -> None:
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted", tasks_dir=root)
    service = Service(Extractor(settings=settings, engine=SlowStart(0.2, fails=True)))
    service.review.open()
    try:
        async with Client(TaskTools(service, wait_for_engine=True).server, mode="legacy") as client:
            service.begin_start()
            result = await client.call_tool("landmark_slots", {"text": LANDMARK_TEXT})
        assert result.is_error and "the engine failed to start: RuntimeError: no model here" in result.content[0].text  # type: ignore[union-attr]
    finally:
        service.review.close()


async def test_a_task_added_while_connected_is_announced(service: Service, root: Path) -> None:
    task_tools = TaskTools(service)
    reloader = CatalogReloader(service.extractor, service.metrics)
    task_tools.follow(reloader)
    told: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            told.append(message)

    # 2026-07-28: a subscriptions/listen stream
    async with Client(task_tools.server) as client:
        assert "added" not in {t.name for t in (await client.list_tools()).tools}
        async with client.listen(tools_list_changed=True) as subscription:
            write_probe(root, 1, name="added")
            await reloader.reload("test")
            async with asyncio.timeout(5):
                event = await anext(aiter(subscription))
            assert type(event).__name__ == "ToolsListChanged"
        assert "added" in {t.name for t in (await client.list_tools()).tools}
    # the handshake era: a notification on the connection
    async with Client(task_tools.server, mode="legacy", message_handler=on_message) as client:
        await client.list_tools()
        (root / "schemas" / "added.json").unlink()
        await reloader.reload("test")
        async with asyncio.timeout(5):
            while not told:
                await asyncio.sleep(0.01)
        assert told[0].method == "notifications/tools/list_changed"
        assert "added" not in {t.name for t in (await client.list_tools()).tools}
    # a reload that changes nothing says nothing
    told.clear()
    await reloader.reload("test")
    assert told == []


@pytest.mark.engine
async def test_a_call_on_the_real_engine(real_extractor: Extractor, tmp_path: Path) -> None:
    service = Service(real_extractor, review=ReviewStore.from_settings(real_extractor.settings.with_(home=tmp_path)))
    service.review.open()
    try:
        async with Client(TaskTools(service).server, mode="legacy") as client:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "landmark_slots")
            result = await client.call_tool("landmark_slots", {"text": LANDMARK_TEXT})
            evidence = check(result, tool)
            assert result.structured_content["name"] and evidence["spans"]
            for span in evidence["spans"]:  # grounded decoding: every value a substring of the text
                assert span["status"] == "exact" and LANDMARK_TEXT[span["start"] : span["end"]] == span["value"]
    finally:
        service.review.close()


# -- over HTTP: mounted at /mcp in the app, behind the API key --------------------------------


@asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free port in this loop (lifespan included); yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        async with asyncio.timeout(30):
            await serving


def over_http(url: str, key: str | None = KEY, **kwargs: Any) -> Client:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    return Client(streamable_http_client(url + "/mcp", http_client=http), **kwargs)


@pytest.fixture
async def served(root: Path, tmp_path: Path) -> AsyncIterator[tuple[str, Extractor, FastAPI]]:
    extractor = make_extractor(root, tmp_path, api_keys=KEY)
    app = create_app(extractor, start_engine=True, watch=False)
    async with running(app) as url:
        yield url, extractor, app


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_over_http_with_a_key(served: tuple[str, Extractor, FastAPI], mode: str) -> None:
    url, extractor, _ = served
    async with over_http(url, mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == set(extractor.catalog.names())
        for name, tool in listed.items():
            assert tool.output_schema == tools.output_schema(extractor.catalog.get(name))
        result = await client.call_tool("landmark_slots", {"text": LANDMARK_TEXT})
        check(result, listed["landmark_slots"])
        bad = await client.call_tool("landmark_slots", {"text": ""})
        assert bad.is_error and "text" in bad.content[0].text  # type: ignore[union-attr]
    async with httpx2.AsyncClient() as http:
        metrics = (await http.get(url + "/metrics", headers={"authorization": f"Bearer {KEY}"})).text
    assert 'route="/mcp"' in metrics and 'status="5' not in metrics


@pytest.mark.parametrize("key", [None, "wrong"])
async def test_over_http_a_key_is_needed(served: tuple[str, Extractor, FastAPI], key: str | None) -> None:
    url, _, _ = served
    with pytest.raises(BaseExceptionGroup) as refused:  # the SDK's transport task fails on the 401
        async with over_http(url, key=key, mode="legacy") as client:
            await client.list_tools()
    assert refused.value.subgroup(MCPError) is not None, refused.value
    async with httpx2.AsyncClient() as http:
        answer = await http.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 401 and answer.headers["www-authenticate"].startswith("Bearer")


async def test_over_http_a_reload_is_announced(served: tuple[str, Extractor, FastAPI], root: Path) -> None:
    url, _, app = served
    told: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            told.append(message)

    async with over_http(url) as modern, over_http(url, mode="legacy", message_handler=on_message) as legacy:
        await legacy.list_tools()
        async with modern.listen(tools_list_changed=True) as subscription:
            write_probe(root, 2, name="added")
            await app.state.reloader.reload("test")
            async with asyncio.timeout(10):
                await anext(aiter(subscription))
                while not told:
                    await asyncio.sleep(0.02)
        assert told[0].method == "notifications/tools/list_changed"
        assert "added" in {t.name for t in (await modern.list_tools()).tools}
        assert "added" in {t.name for t in (await legacy.list_tools()).tools}


# -- over stdio: `extractor mcp` -----------------------------------------------------------------


async def test_over_stdio(root: Path, tmp_path: Path) -> None:
    command = ["-m", "extractor.cli", "mcp", "--engine", "scripted", "--home", str(tmp_path / "home")]
    parameters = StdioServerParameters(
        command=sys.executable,
        args=[*command, "--tasks-dir", str(root)],
        env={"PYTHONPATH": str(repo_root()), "EXTRACTOR_MAX_TEXT_CHARS": "1000"},
        cwd=str(repo_root()),
    )
    async with Client(parameters, mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"landmark_slots", "probe", "tags"}
        for name, tool in listed.items():
            assert tool.output_schema == tools.output_schema(Catalog.load(root).get(name))
        # the dry-run engine answers with the task's first worked example
        result = await client.call_tool("landmark_slots", {"text": EIFFEL})
        check(result, listed["landmark_slots"])
        assert result.structured_content["city"] == "巴黎"
        too_long = await client.call_tool("landmark_slots", {"text": "x" * 1001})
        assert too_long.is_error and "EXTRACTOR_MAX_TEXT_CHARS" in too_long.content[0].text  # type: ignore[union-attr]
    async with Client(parameters) as client:  # 2026-07-28 over stdio; a task added is announced (watch)
        async with client.listen(tools_list_changed=True) as subscription:
            write_probe(root, 3, name="added")
            async with asyncio.timeout(20):
                await anext(aiter(subscription))
        assert "added" in {t.name for t in (await client.list_tools()).tools}


def test_stdio_ends_on_sigterm(root: Path, tmp_path: Path) -> None:
    """A signalled `extractor mcp` exits at once, though the SDK's stdin reader is still waiting on the client."""
    command = [sys.executable, "-m", "extractor.cli", "mcp", "--engine", "scripted", "--tasks-dir", str(root)]
    process = subprocess.Popen(
        [*command, "--home", str(tmp_path / "home")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(repo_root())},
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(INITIALIZE + b"\n")
        process.stdin.flush()
        assert b'"listChanged":true' in process.stdout.readline()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_over_stdio_stdout_holds_nothing_but_the_protocol_and_a_call_at_once_waits(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole session's stdout, byte for byte, parses line by line as JSON-RPC; the noise went to stderr.

    The engine (tests/mcp_noisy_server.py) writes to stdout as vLLM's does (loggers, prints, a raw
    descriptor 1, child processes; when built, started, closed and at exit) and takes 3 s to start;
    the first call is sent the moment the handshake is done, and gets its answer.
    """
    raw, errors = tmp_path / "stdout.raw", tmp_path / "stderr.txt"
    server = ["-m", "tests.mcp_noisy_server", "--tasks-dir", str(root), "--home", str(tmp_path / "home")]
    parameters = StdioServerParameters(  # tee keeps a copy of every byte the server writes to its stdout
        command="sh",
        args=["-c", '"$@" | tee "$RAW"', "sh", sys.executable, *server],
        env={"PYTHONPATH": str(repo_root()), "RAW": str(raw), "PATH": os.environ["PATH"]},
        cwd=str(repo_root()),
    )
    # the SDK gives a server 2 s after stdin closes; here it gets the time to close and exit on its own
    monkeypatch.setattr(mcp.client.stdio, "PROCESS_TERMINATION_TIMEOUT", 30.0)
    with errors.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(parameters, errlog=errlog), mode="legacy") as client:
            result = await client.call_tool("landmark_slots", {"text": EIFFEL})  # the engine is starting
            assert not result.is_error, result.content
            assert result.structured_content["city"] == "巴黎"
            assert "landmark_slots" in {t.name for t in (await client.list_tools()).tools}
    lines = raw.read_bytes().decode("utf-8").splitlines()
    messages = [types.jsonrpc_message_adapter.validate_json(line, by_name=False) for line in lines]
    assert len(messages) >= 3 and NOISE not in raw.read_text(encoding="utf-8")  # initialize, the call, the list
    told = errors.read_text(encoding="utf-8")
    for where in ("engine built", "engine start", "engine started", "engine close", "at exit"):
        for kind in ("print", "logger", "fd1", "child"):
            assert f"{NOISE} {kind} {where}" in told, (kind, where, told[-2000:])


@pytest.mark.engine
@pytest.mark.slow  # an engine of its own beside the session's (make test-slow, as the other such tests)
async def test_over_stdio_on_the_real_engine_stdout_holds_nothing_but_the_protocol(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`extractor mcp` on vLLM: the first call, sent while the model loads, is answered; stdout is JSON-RPC only.

    vLLM logs to stdout by default (its engine core is a child process), at start and at shutdown.
    """
    raw, errors = tmp_path / "stdout.raw", tmp_path / "stderr.txt"
    # the model as `make setup` prepared it (the default home), as the other real-engine tests use it
    command = [sys.executable, "-m", "extractor.cli", "mcp", "--tasks-dir", str(root)]
    parameters = StdioServerParameters(
        command="sh",
        args=["-c", '"$@" | tee "$RAW"', "sh", *command, "--no-watch"],
        env={**os.environ, "PYTHONPATH": str(repo_root()), "RAW": str(raw)},
        cwd=str(repo_root()),
    )
    monkeypatch.setattr(mcp.client.stdio, "PROCESS_TERMINATION_TIMEOUT", 120.0)  # vLLM's shutdown takes seconds
    with errors.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(parameters, errlog=errlog), mode="legacy") as client:
            result = await client.call_tool("landmark_slots", {"text": LANDMARK_TEXT})  # vLLM is loading
            assert not result.is_error, result.content
            assert result.structured_content["name"]
    lines = raw.read_bytes().decode("utf-8").splitlines()
    assert len(lines) >= 2 and all(types.jsonrpc_message_adapter.validate_json(line, by_name=False) for line in lines)
    assert "vllm" in errors.read_text(encoding="utf-8").lower()  # its log went to stderr
