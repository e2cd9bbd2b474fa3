"""The seed's /chat on the scripted engine: window rule, stop words, the \\0-separated stream."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path

import httpx
import pytest

from extractor import Catalog, Extractor, InputError, ScriptedEngine, Settings, TextTooLongError
from extractor.chat import build_messages, first_stop, held_back, until_stop_word
from extractor.engines.base import Message
from extractor.server import create_app

from .test_server import metric


def chars(messages: Sequence[Message]) -> int:
    """A token counter for tests: one token per character."""
    return sum(len(m["content"]) for m in messages)


def test_window_keeps_newest_history_that_fits() -> None:
    history = [("u1" * 10, "a1" * 10), ("u2" * 10, "a2" * 10), ("u3", "a3")]
    # system 3 + query 5 = 8; newest pair 4 -> 12; next 40 -> 52 > 50: stop, even though older fits nothing
    messages = build_messages("query", history, "sys", count_tokens=chars, max_model_len=60, max_tokens=10)
    assert [m["content"] for m in messages] == ["sys", "u3", "a3", "query"]
    everything = build_messages("query", history, "sys", count_tokens=chars, max_model_len=200, max_tokens=10)
    assert [m["role"] for m in everything] == ["system", "user", "assistant"] * 1 + ["user", "assistant"] * 2 + ["user"]
    assert everything[1]["content"] == "u1" * 10 and everything[-1]["content"] == "query"


def test_window_keeps_a_contiguous_newest_run() -> None:
    # the middle pair is too big: older ones are not kept past it (newest first until full)
    history = [("o", "o"), ("x" * 100, "x"), ("n", "n")]
    messages = build_messages("q", history, "", count_tokens=chars, max_model_len=20, max_tokens=5)
    assert [m["content"] for m in messages] == ["n", "n", "q"]


def test_window_rejects_what_cannot_fit() -> None:
    with pytest.raises(TextTooLongError, match="too long"):
        build_messages("q" * 100, [], "sys", count_tokens=chars, max_model_len=50, max_tokens=10)
    with pytest.raises(InputError, match="query is empty"):
        build_messages("  ", [], "sys", count_tokens=chars, max_model_len=50, max_tokens=10)
    with pytest.raises(InputError, match="no room"):
        build_messages("q", [], "sys", count_tokens=chars, max_model_len=50, max_tokens=50)


def test_stop_word_helpers() -> None:
    assert held_back("Hello Obs", ["Observation:"]) == 3
    assert held_back("Hello", ["Observation:"]) == 0
    assert held_back("ab", ["b", "abc"]) == 2
    assert first_stop("one two three", ["three", "two"]) == 4
    assert first_stop("one two", ["x"]) == -1


async def run_until(texts: list[str], stops: list[str]) -> tuple[list[str], bool]:
    finished = False

    async def chunks() -> AsyncGenerator[str, None]:
        nonlocal finished
        for text in texts:
            yield text
        finished = True

    return [t async for t in until_stop_word(chunks(), stops)], finished


async def test_until_stop_word_cuts_and_stops_the_source() -> None:
    shown, finished = await run_until(["Hel", "Hello Ob", "Hello Observation: x", "never"], ["Observation:"])
    assert shown == ["Hel", "Hello "] and not finished  # "Ob" was held back: it might become the stop word
    shown, finished = await run_until(["a", "ab", "ab O"], ["Observation:"])
    assert shown == ["a", "ab", "ab ", "ab O"] and finished  # a held-back prefix comes out at the end
    shown, _ = await run_until(["STOP"], ["STOP"])
    assert shown == [""]
    shown, finished = await run_until(["x", "xy"], [])
    assert shown == ["x", "xy"] and finished


@pytest.fixture
def chat_engine() -> ScriptedEngine:
    return ScriptedEngine(chunk_chars=3, max_model_len=300)


@pytest.fixture
async def chat_client(
    catalog: Catalog, tmp_path: Path, chat_engine: ScriptedEngine
) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted", chat_max_tokens=20)
    app = create_app(Extractor(settings=settings, engine=chat_engine, catalog=catalog))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


def split_stream(content: bytes) -> list[dict[str, str]]:
    assert content.endswith(b"\0")
    return [json.loads(part) for part in content.split(b"\0")[:-1]]


async def test_chat_streams_cumulative_json_separated_by_nul(
    chat_client: httpx.AsyncClient, chat_engine: ScriptedEngine
) -> None:
    chat_engine.enqueue(["Hello there, friend."])
    response = await chat_client.post("/chat", json={"query": "hi", "stream": True})
    assert response.status_code == 200
    chunks = split_stream(response.content)
    texts = [c["text"] for c in chunks]
    assert len(texts) > 3 and texts[-1] == "Hello there, friend."
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))  # cumulative
    assert chat_engine.aborted == []


async def test_chat_stops_at_user_stop_word_and_aborts_the_engine(
    chat_client: httpx.AsyncClient, chat_engine: ScriptedEngine
) -> None:
    chat_engine.enqueue(["Thought: look it up\nObservation: the rest must never be generated"])
    body = {"query": "hi", "stream": True, "user_stop_words": ["Observation:"]}
    response = await chat_client.post("/chat", json=body)
    texts = [c["text"] for c in split_stream(response.content)]
    assert texts[-1] == "Thought: look it up\n"
    assert not any("Obs" in t for t in texts)
    assert len(chat_engine.aborted) == 1  # the engine request was stopped, not just the stream

    chat_engine.enqueue(["Thought: x\nObservation: y"])
    plain = await chat_client.post("/chat", json={**body, "stream": False})
    assert plain.status_code == 200 and plain.json() == {"text": "Thought: x\n"}
    # not streamed: the engine was given the stop words as stop strings, and ended there itself
    assert chat_engine.history[-1].stop == ("Observation:",)
    metrics = (await chat_client.get("/metrics")).text  # both chats gave their admission back
    assert metric(metrics, "extractor_queue_depth") == 0 and metric(metrics, "extractor_in_flight") == 0


async def test_chat_builds_the_prompt_with_history_and_system(
    chat_client: httpx.AsyncClient, chat_engine: ScriptedEngine
) -> None:
    chat_engine.enqueue(["fine"])
    history = [["old question " * 60, "old answer " * 60], ["how are you", "well"]]
    response = await chat_client.post("/chat", json={"query": "and now?", "history": history, "system": "Be brief."})
    assert response.status_code == 200 and response.json() == {"text": "fine"}
    request = chat_engine.history[-1]
    assert [m["content"] for m in request.messages] == ["Be brief.", "how are you", "well", "and now?"]
    assert request.max_tokens == 20


@pytest.mark.parametrize(
    "body",
    [
        {"query": ""},
        {"query": "   "},
        {},
        {"query": 5},
        {"query": "x", "history": [["one"]]},
        {"query": "x", "user_stop_words": "X"},
    ],
)
async def test_bad_chat_is_4xx_with_a_message(chat_client: httpx.AsyncClient, body: object) -> None:
    response = await chat_client.post("/chat", json=body)
    assert 400 <= response.status_code < 500
    assert response.json()["message"]


async def test_chat_query_too_long_for_the_window(chat_client: httpx.AsyncClient) -> None:
    response = await chat_client.post("/chat", json={"query": "x" * 20_000})
    assert response.status_code == 422 and "too long" in response.json()["message"]


async def test_chat_with_a_lone_surrogate_is_422(chat_client: httpx.AsyncClient) -> None:
    body = b'{"query": "x", "history": [["\\ud800", "a"]]}'
    response = await chat_client.post("/chat", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422 and "history[0]" in response.json()["message"]


async def test_an_error_once_streaming_comes_as_the_last_object(catalog: Catalog, tmp_path: Path) -> None:
    engine = ScriptedEngine(["a long answer that takes its time"], chunk_chars=3, delay_s=3)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted", request_timeout_s=0.5)
    app = create_app(Extractor(settings=settings, engine=engine, catalog=catalog))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.post("/chat", json={"query": "hi", "stream": True})
    assert response.status_code == 200
    chunks = split_stream(response.content)
    assert chunks[-1]["error"] == "timeout" and "EXTRACTOR_REQUEST_TIMEOUT_S" in chunks[-1]["message"]
    assert chunks[-1]["text"].startswith("a l") and len(engine.aborted) == 1


# -- Extractor.chat: the same chat in process (the seed's VLLMChat), on the scripted engine --------------


def chat_extractor(catalog: Catalog, tmp_path: Path, engine: ScriptedEngine) -> Extractor:
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted", chat_max_tokens=20)
    return Extractor(settings=settings, engine=engine, catalog=catalog)


def test_extractor_chat_sends_system_history_and_query_and_returns_the_reply(
    catalog: Catalog, tmp_path: Path, chat_engine: ScriptedEngine
) -> None:
    extractor = chat_extractor(catalog, tmp_path, chat_engine)
    chat_engine.enqueue(["Thought: x\nObservation: y"])
    reply = extractor.chat(
        "and now?", history=[["hi", "hello"], ("how are you", "fine")], system="Be brief.", stop_words=["Observation:"]
    )
    assert reply.text == "Thought: x\n" and reply.finish_reason == "stop" and reply.completion_tokens > 0
    sent = chat_engine.history[-1]
    assert [(m["role"], m["content"]) for m in sent.messages] == [
        ("system", "Be brief."),
        ("user", "hi"),
        ("assistant", "hello"),
        ("user", "how are you"),
        ("assistant", "fine"),
        ("user", "and now?"),
    ]
    assert sent.stop == ("Observation:",) and sent.max_tokens == 20 and sent.temperature == 0.7
    chat_engine.enqueue(["ok"])
    assert extractor.chat("q", system=None).text == "ok"
    assert [m["role"] for m in chat_engine.history[-1].messages] == ["user"]


async def test_extractor_streams_a_chat_and_a_stop_word_aborts_the_engine_request(
    catalog: Catalog, tmp_path: Path, chat_engine: ScriptedEngine
) -> None:
    extractor = chat_extractor(catalog, tmp_path, chat_engine)
    chat_engine.enqueue(["Thought: look it up\nObservation: the rest must never be generated"])
    texts = [t async for t in extractor.astream_chat("hi", stop_words=["Observation:"])]
    assert texts[-1] == "Thought: look it up\n" and not any("Obs" in t for t in texts)
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts)) and len(texts) > 2
    assert len(chat_engine.aborted) == 1  # the engine request was stopped, not only the iterator


@pytest.mark.parametrize(
    ("history", "message"),
    [
        ("hi", "history must be a list of \\[user, assistant\\] pairs"),
        ([["only the user"]], "history\\[0\\] must be a \\[user, assistant\\] pair"),
        ([("a", "b"), ("c", 3)], "history\\[1\\] must hold two strings"),
    ],
)
def test_extractor_chat_names_a_bad_history(
    catalog: Catalog, tmp_path: Path, chat_engine: ScriptedEngine, history: object, message: str
) -> None:
    extractor = chat_extractor(catalog, tmp_path, chat_engine)
    with pytest.raises(InputError, match=message):
        extractor.chat("q", history=history)  # type: ignore[arg-type]
    assert chat_engine.history == []  # nothing reached the engine


def test_a_chat_max_tokens_past_the_window_is_clamped_to_what_the_query_leaves(
    catalog: Catalog, tmp_path: Path, chat_engine: ScriptedEngine
) -> None:
    extractor = chat_extractor(catalog, tmp_path, chat_engine)
    chat_engine.enqueue(["fine"])
    reply = extractor.chat("hello", history=[("old " * 20, "reply")], max_tokens=8191)
    request = chat_engine.history[-1]
    assert reply.text == "fine" and request.max_tokens is not None
    prompt = chat_engine.count_prompt_tokens(request.messages)
    assert prompt + request.max_tokens <= 300 and request.messages[-1]["content"] == "hello"


def test_extractor_chat_past_the_window_is_the_same_error_as_the_route(
    catalog: Catalog, tmp_path: Path, chat_engine: ScriptedEngine
) -> None:
    extractor = chat_extractor(catalog, tmp_path, chat_engine)
    with pytest.raises(TextTooLongError):
        extractor.chat("word " * 1000)
    with pytest.raises(InputError, match="query is empty"):
        extractor.chat("  ")
