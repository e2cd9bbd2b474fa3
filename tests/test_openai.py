"""The OpenAI-compatible front through the real clients (`openai`, instructor) over real HTTP (scripted engine)."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import instructor
import openai
import pytest
import uvicorn
from pydantic import BaseModel, Field

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.engines.base import GenerationRequest
from extractor.errors import TaskError
from extractor.server import create_app
from extractor.server.openai.adhoc import MAX_SCHEMA_DEPTH, AdHocTasks

from .conftest import LANDMARK_TEXT, landmark
from .test_server import metric

TEXT = "Alice and Bob are going to a science fair on Friday."


class Event(BaseModel):
    """A calendar event."""

    name: str = Field(description="what the event is")
    date: str = Field(description="when it is, as written")
    participants: list[str] = Field(description="who goes")


EVENT = {"name": "science fair", "date": "Friday", "participants": ["Alice", "Bob"]}


class Landmark(BaseModel):
    name: str | None
    country: str | None
    city: str | None
    category: str | None
    period: str | None


@dataclass
class Live:
    """A served extractor: its base URL, its scripted engine, and the HTTP requests clients sent."""

    url: str
    engine: ScriptedEngine
    requests: list[httpx.Request] = field(default_factory=list)

    def client(self, **options: object) -> openai.OpenAI:
        http = httpx.Client(event_hooks={"request": [self.requests.append]})
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", http_client=http, **options)  # type: ignore[arg-type]


def serve(extractor: Extractor) -> Iterator[str]:
    config = uvicorn.Config(create_app(extractor), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _answer(request: GenerationRequest) -> str:
    # The catalog task's prompt carries its instruction in the system turn; anything else is an Event.
    if "地标" in request.messages[0]["content"]:
        return landmark(name="阿尔罕布拉宫", country="西班牙", category="宫殿建筑")
    return json.dumps(EVENT)


def _live(
    catalog: Catalog, tmp_path: Path, *, delay_s: float = 0.0, respond: bool = True, **settings: object
) -> Iterator[Live]:
    engine = ScriptedEngine(respond=_answer if respond else None, delay_s=delay_s)
    config = Settings.from_env({}, home=tmp_path / "home", engine="scripted", **settings)
    extractor = Extractor(settings=config, engine=engine, catalog=catalog)
    for url in serve(extractor):
        yield Live(url, engine)


@pytest.fixture
def live(catalog: Catalog, tmp_path: Path) -> Iterator[Live]:
    yield from _live(catalog, tmp_path)


def test_models_list_the_engine_model_and_every_task(live: Live, catalog: Catalog) -> None:
    ids = [m.id for m in live.client().models.list()]
    assert ids == ["scripted", *catalog.names()]


def test_parse_with_a_pydantic_model(live: Live) -> None:
    client = live.client()
    completion = client.chat.completions.parse(
        model="scripted",
        messages=[{"role": "system", "content": "Extract the event."}, {"role": "user", "content": TEXT}],
        response_format=Event,
    )
    message = completion.choices[0].message
    assert message.parsed == Event(**EVENT)
    assert completion.choices[0].finish_reason == "stop" and message.refusal is None
    extension = completion.model_extra["extractor"]
    assert len(extension["attempts"]) == 1
    spans = {s["path"]: (s["start"], s["end"], s["status"]) for s in extension["spans"]}
    assert spans["/participants/0"] == (TEXT.index("Alice"), TEXT.index("Alice") + 5, "exact")
    # the scripted engine is sure of every token: each value's confidence is 1, uncalibrated
    assert extension["confidence"] == 1.0 and extension["confidences"]["/participants/0"] == 1.0
    assert extension["calibrated"] is False
    # the chat went to the engine as given, constrained by the client's schema
    sent = live.engine.history[-1]
    assert [m["content"] for m in sent.messages] == ["Extract the event.", TEXT]
    assert sent.json_schema is not None and sent.json_schema["required"] == ["name", "date", "participants"]
    assert completion.usage is not None and completion.usage.prompt_tokens > 0


def test_parse_with_a_catalog_task_as_the_model(live: Live) -> None:
    completion = live.client().chat.completions.parse(
        model="landmark_slots", messages=[{"role": "user", "content": LANDMARK_TEXT}], response_format=Landmark
    )
    parsed = completion.choices[0].message.parsed
    assert parsed is not None and parsed.name == "阿尔罕布拉宫" and parsed.country == "西班牙"
    assert completion.model == "landmark_slots"
    # the task's own prompt (instruction and worked examples), the text last
    sent = live.engine.history[-1].messages
    assert len(sent) > 2 and sent[-1]["content"].split("\n\n")[0] == LANDMARK_TEXT  # then the pool's hints


def test_stream_reassembles_to_the_same_json(live: Live) -> None:
    client = live.client()
    fmt = {"type": "json_schema", "json_schema": {"name": "Event", "schema": Event.model_json_schema()}}
    messages = [{"role": "user", "content": TEXT}]
    whole = client.chat.completions.create(model="scripted", messages=messages, response_format=fmt)  # type: ignore[arg-type]
    stream = client.chat.completions.create(
        model="scripted",
        messages=messages,  # type: ignore[arg-type]
        response_format=fmt,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(text) == json.loads(whole.choices[0].message.content or "") == EVENT
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_stream_of_a_forced_tool_call(live: Live) -> None:
    client = instructor.from_openai(live.client(), mode=instructor.Mode.TOOLS)
    partial = list(
        client.chat.completions.create_partial(
            model="scripted", messages=[{"role": "user", "content": TEXT}], response_model=Event
        )
    )
    assert partial[-1].model_dump() == EVENT
    assert len(partial) > 2  # the arguments came in pieces


@pytest.mark.parametrize("mode", [instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA, instructor.Mode.JSON])
def test_instructor_returns_a_valid_instance(live: Live, mode: instructor.Mode) -> None:
    client = instructor.from_openai(live.client(), mode=mode)
    event = client.chat.completions.create(
        model="scripted", response_model=Event, messages=[{"role": "user", "content": TEXT}]
    )
    assert isinstance(event, Event) and event.model_dump() == EVENT
    sent = live.engine.history[-1]
    if mode == instructor.Mode.JSON:  # json_object: the schema is only in instructor's system prompt
        assert sent.json_schema == {"type": "object"} and "participants" in sent.messages[0]["content"]
    else:  # the schema itself constrained decoding and validation
        assert sent.json_schema is not None and set(sent.json_schema["properties"]) == {"name", "date", "participants"}


def test_reasks_happen_server_side_in_one_http_request(live: Live) -> None:
    live.engine.enqueue(["not json at all", '{"name": "science fair"}'])  # invalid twice, then valid
    client = instructor.from_openai(live.client(), mode=instructor.Mode.TOOLS)
    event, completion = client.chat.completions.create_with_completion(
        model="scripted", response_model=Event, messages=[{"role": "user", "content": TEXT}], max_retries=3
    )
    assert event.model_dump() == EVENT
    assert len(live.requests) == 1 and len(live.engine.history) == 3
    attempts = completion.model_extra["extractor"]["attempts"]
    assert [bool(a["errors"]) for a in attempts] == [True, True, False]
    assert completion.choices[0].finish_reason == "stop"  # valid after re-asks
    assert completion.usage.prompt_tokens == sum(a["prompt_tokens"] for a in attempts)  # summed
    # the re-ask carried the previous answer and its problems
    reask = live.engine.history[2].messages
    assert reask[-2] == {"role": "assistant", "content": '{"name": "science fair"}'}
    assert "date" in reask[-1]["content"]


def test_a_failed_extraction_raises_once_with_every_attempt(live: Live) -> None:
    live.engine.enqueue(["nope"] * 3)
    client = live.client()  # the openai client's own retries are on (2 by default)
    with pytest.raises(openai.UnprocessableEntityError) as failed:
        client.chat.completions.parse(
            model="scripted", messages=[{"role": "user", "content": TEXT}], response_format=Event
        )
    assert len(live.requests) == 1
    assert failed.value.response.headers["x-should-retry"] == "false"
    body = failed.value.body
    assert isinstance(body, dict) and body["code"] == "extraction_failed" and body["type"] == "invalid_request_error"
    assert [a["raw"] for a in body["attempts"]] == ["nope"] * 3


def test_instructor_does_not_retry_a_failed_extraction(live: Live) -> None:
    live.engine.enqueue(["nope"] * 3)
    client = instructor.from_openai(live.client(), mode=instructor.Mode.TOOLS)
    with pytest.raises(Exception) as failed:
        client.chat.completions.create(
            model="scripted", response_model=Event, messages=[{"role": "user", "content": TEXT}], max_retries=3
        )
    assert "no valid result after 3 attempt" in str(failed.value)
    assert len(live.requests) == 1 and len(live.engine.history) == 3


def test_a_bad_schema_is_a_400_naming_the_pointer(live: Live) -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    # strict: the answer must hold to the schema while decoding (without it, uniqueItems is checked after)
    fmt = {"type": "json_schema", "json_schema": {"name": "tags", "schema": schema, "strict": True}}
    with pytest.raises(openai.BadRequestError) as bad:
        live.client().chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": TEXT}],
            response_format=fmt,  # type: ignore[arg-type]
        )
    assert "#/properties/tags/uniqueItems" in bad.value.message
    assert bad.value.body["param"] == "response_format.json_schema.schema"  # type: ignore[index]
    ref = {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": ref}}
    with pytest.raises(openai.BadRequestError, match="points outside this schema"):
        live.client().chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": TEXT}], response_format=fmt
        )  # type: ignore[arg-type]
    assert live.engine.history == []


def test_without_strict_an_unenforced_keyword_is_checked_after_generation(live: Live) -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "contains": {"const": "b"}}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "tags", "schema": schema}}
    live.engine.enqueue(['{"tags": ["a"]}', '{"tags": ["a", "b"]}'])
    answer = live.client().chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": TEXT}],
        response_format=fmt,  # type: ignore[arg-type]
    )
    assert json.loads(answer.choices[0].message.content or "") == {"tags": ["a", "b"]}  # the miss re-asked
    assert "contains" not in json.dumps(live.engine.history[0].json_schema)


def test_repeated_items_of_a_unique_items_array_are_dropped_not_re_asked(live: Live) -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "tags", "schema": schema}}
    live.engine.enqueue(['{"tags": ["a", "a", "b"]}'])
    answer = live.client().chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": TEXT}],
        response_format=fmt,  # type: ignore[arg-type]
    )
    assert json.loads(answer.choices[0].message.content or "") == {"tags": ["a", "b"]}
    assert len(live.engine.history) == 1 and "uniqueItems" not in json.dumps(live.engine.history[0].json_schema)


def test_requests_extractor_cannot_serve_are_400s_and_unknown_models_404(live: Live) -> None:
    client = live.client(max_retries=0)
    user = [{"role": "user", "content": TEXT}]
    with pytest.raises(openai.BadRequestError, match="n=1"):
        client.chat.completions.create(model="scripted", messages=user, n=2)  # type: ignore[arg-type]
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]
    with pytest.raises(openai.BadRequestError, match="only text parts"):
        client.chat.completions.create(model="landmark_slots", messages=image)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="scripted", messages=[])
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="../etc/passwd", messages=user)  # type: ignore[arg-type]
    assert missing.value.body["code"] == "model_not_found" and "passwd" not in missing.value.message  # type: ignore[index]
    assert live.engine.history == []


def test_options_reach_the_engine_and_unknown_fields_are_ignored(live: Live) -> None:
    live.client().chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": [{"type": "text", "text": TEXT}]}],
        response_format={"type": "json_object"},
        max_completion_tokens=77,
        temperature=0.3,
        top_p=0.9,
        seed=7,
        stop=["\n\n"],
        extra_body={"some_future_field": {"x": 1}, "extractor": {"max_attempts": 1}},
    )
    sent = live.engine.history[-1]
    assert (sent.max_tokens, sent.temperature, sent.top_p, sent.seed, tuple(sent.stop)) == (77, 0.3, 0.9, 7, ("\n\n",))
    assert sent.json_schema == {"type": "object"}
    assert sent.messages[-1]["content"] == TEXT


def test_plain_chat_without_a_format(live: Live) -> None:
    client = live.client()
    live.engine.enqueue(["Hello! How can I help?", "Hello! How can I help?"])
    answer = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content == "Hello! How can I help?"
    assert "extractor" not in (answer.model_extra or {})
    assert live.engine.history[-1].json_schema is None
    stream = client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello! How can I help?"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # streamed in pieces
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_metrics_count_the_openai_route(live: Live) -> None:
    client = live.client()
    client.chat.completions.create(
        model="landmark_slots",
        messages=[{"role": "user", "content": LANDMARK_TEXT}],
        response_format={"type": "json_object"},
    )
    client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": TEXT}], response_format={"type": "json_object"}
    )
    text = httpx.get(f"{live.url}/metrics").text
    assert metric(text, "extractor_requests_total", route="openai", task="landmark_slots", status="200") == 1
    assert metric(text, "extractor_requests_total", route="openai", task="-", status="200") == 1
    assert metric(text, "extractor_attempts_total", task="landmark_slots") == 1


def test_overload_is_a_429_with_retry_after(catalog: Catalog, tmp_path: Path) -> None:
    # each answer takes a second, so the first request holds the only slot
    for live in _live(catalog, tmp_path, delay_s=1.0, max_in_flight=1, max_queued=0):
        first = threading.Thread(
            target=functools.partial(
                live.client().chat.completions.create,
                model="landmark_slots",
                messages=[{"role": "user", "content": LANDMARK_TEXT}],
            )
        )
        first.start()
        time.sleep(0.3)
        with pytest.raises(openai.RateLimitError) as busy:
            live.client(max_retries=0).chat.completions.create(
                model="landmark_slots", messages=[{"role": "user", "content": LANDMARK_TEXT}]
            )
        first.join()
        assert int(busy.value.response.headers["retry-after"]) >= 1
        assert busy.value.body["code"] == "overloaded"  # type: ignore[index]


def test_a_client_that_leaves_aborts_its_engine_request(catalog: Catalog, tmp_path: Path) -> None:
    for live in _live(catalog, tmp_path, delay_s=2.0):
        with pytest.raises(openai.APITimeoutError):
            live.client(timeout=0.5, max_retries=0).chat.completions.create(
                model="landmark_slots", messages=[{"role": "user", "content": LANDMARK_TEXT}]
            )
        time.sleep(0.3)
        assert len(live.engine.aborted) == 1
        text = httpx.get(f"{live.url}/metrics").text
        assert metric(text, "extractor_requests_total", route="openai", task="landmark_slots", status="499") == 1


def test_adhoc_tasks_are_checked_once_and_the_cache_is_bounded() -> None:
    tasks = AdHocTasks(backend="guidance", size=2)
    schema = Event.model_json_schema()
    first = tasks.get("Event", schema, where="w")
    assert tasks.get("Event", json.loads(json.dumps(schema)), where="w") is first  # same hash, same task
    assert first.name == "event" and first.typed is not None
    for n in range(3):
        tasks.get(f"e{n}", {"type": "object", "properties": {"a": {"type": "string"}}}, where="w")
    assert len(tasks) == 2
    deep: dict[str, object] = {"type": "object"}
    node = deep
    for _ in range(MAX_SCHEMA_DEPTH):
        child: dict[str, object] = {"type": "object"}
        node["properties"] = {"x": child}
        node = child
    with pytest.raises(TaskError, match="deeper than"):
        tasks.get("deep", deep, where="w")
    # any top level: an array is wrapped for decoding and unwrapped in the result, as in the catalog
    assert tasks.get("arr", {"type": "array", "items": {"type": "string"}}, where="w").wrapped is not None


def test_a_body_over_the_limit_is_a_413_in_the_openai_shape(catalog: Catalog, tmp_path: Path) -> None:
    for live in _live(catalog, tmp_path, max_body_bytes=2_000):
        with pytest.raises(openai.APIStatusError) as large:
            live.client(max_retries=0).chat.completions.create(
                model="landmark_slots", messages=[{"role": "user", "content": "x" * 5_000}]
            )
        assert large.value.status_code == 413
        assert large.value.body["code"] == "too_large" and large.value.body["type"] == "invalid_request_error"  # type: ignore[index]
        assert live.engine.history == []


def test_an_error_once_a_chat_stream_has_begun_is_an_error_event(catalog: Catalog, tmp_path: Path) -> None:
    for live in _live(catalog, tmp_path, respond=False):  # nothing to answer: the engine fails mid-stream
        stream = live.client().chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        with pytest.raises(openai.APIError, match="no response queued"):
            list(stream)


def test_routing_errors_under_v1_are_in_the_openai_shape(catalog: Catalog, tmp_path: Path) -> None:
    for live in _live(catalog, tmp_path):
        with pytest.raises(openai.NotFoundError) as missing:
            live.client(max_retries=0).get("/embeddings", cast_to=object)
        assert missing.value.body["type"] == "invalid_request_error"  # type: ignore[index]
        assert "/v1/chat/completions" in missing.value.body["message"]  # type: ignore[index]
        wrong = httpx.get(f"{live.url}/v1/chat/completions")
        assert wrong.status_code == 405 and set(wrong.json()) == {"error"}
