"""The OpenAI front's translation, without HTTP: requests to jobs, results to completions and chunks."""

from __future__ import annotations

from typing import Any

import pytest

from extractor import Catalog
from extractor.errors import BadRequestError, ExtractionFailed, UnknownTaskError
from extractor.results import Attempt, ExtractionResult, Usage
from extractor.server.openai import translate
from extractor.server.openai.adhoc import AdHocTasks
from extractor.server.openai.protocol import ChatCompletionRequest

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
tasks = AdHocTasks(backend="guidance")


def plan(catalog: Catalog, **body: Any) -> translate.Job:
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}
    )
    return translate.plan(
        request, catalog=catalog.tasks, engine_model="m", adhoc=lambda n, s, w: tasks.get(n, s, where=w)
    )


def attempt(number: int, finish: str = "stop", errors: list[str] | None = None) -> Attempt:
    return Attempt(
        number=number,
        raw="{}",
        repaired=False,
        errors=errors or [],
        prompt_tokens=10,
        completion_tokens=5,
        finish_reason=finish,
        latency_ms=1.0,
    )


def test_the_chat_is_sent_as_given_and_the_text_is_the_last_user_message(catalog: Catalog) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "Place!", "schema": SCHEMA}}
    messages = [
        {"role": "developer", "content": "Extract."},
        {"role": "user", "content": [{"type": "text", "text": "Paris"}, {"type": "text", "text": "France"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "ok"},
    ]
    job = plan(catalog, messages=messages, response_format=fmt)
    assert job.kind == "extract" and job.text == "Paris\nFrance" and job.task is not None
    assert job.task.name == "place" and job.label == "-" and job.options.chunk is False
    assert [m["role"] for m in job.task.conversation] == ["system", "user", "assistant", "user"]
    assert job.task.conversation[2]["content"] == "{}"


def test_formats_and_tools_pick_the_schema(catalog: Catalog) -> None:
    tool = {"type": "function", "function": {"name": "Place", "parameters": SCHEMA}}
    forced = plan(catalog, tools=[tool], tool_choice={"type": "function", "function": {"name": "Place"}})
    assert forced.tool == "Place" and forced.task is not None and forced.task.schema == SCHEMA
    assert plan(catalog, tools=[tool], tool_choice="required").tool == "Place"
    assert plan(catalog, tools=[tool], tool_choice="auto").kind == "chat"  # not forced: a plain chat
    legacy = plan(catalog, response_format={"type": "json_object", "schema": SCHEMA})
    assert legacy.task is not None and legacy.task.schema == SCHEMA
    bare = plan(catalog, response_format={"type": "json_object"})
    assert bare.task is not None and bare.task.schema == {"type": "object"}
    assert plan(catalog, response_format={"type": "text"}).kind == "chat"
    task = plan(catalog, model="landmark_slots", response_format={"type": "json_object"})
    assert task.task is catalog.get("landmark_slots") and task.label == "landmark_slots" and task.text == "hi"
    with pytest.raises(BadRequestError, match="not in tools"):
        plan(catalog, tools=[tool], tool_choice={"type": "function", "function": {"name": "Other"}})
    with pytest.raises(UnknownTaskError):
        plan(catalog, model="gpt-4o")


def test_finish_reason_is_stop_after_reasks_and_length_only_when_the_last_attempt_was_cut(catalog: Catalog) -> None:
    job = plan(catalog, response_format={"type": "json_object"})

    def result(*attempts: Attempt) -> ExtractionResult:
        return ExtractionResult(
            task="x",
            data={"a": 1},
            attempts=list(attempts),
            usage=Usage(prompt_tokens=30, completion_tokens=15),
            model="m",
            latency_ms=2.0,
        )

    first, second = attempt(1, "length", ["cut"]), attempt(2)
    reasked = translate.completion(result(first, second), job=job, model="m", ident="chatcmpl-1", created=0)
    assert reasked.choices[0].finish_reason == "stop" and reasked.choices[0].message.content == '{"a":1}'
    assert reasked.usage.total_tokens == 45
    cut = translate.completion(result(attempt(1, "length")), job=job, model="m", ident="chatcmpl-1", created=0)
    assert cut.choices[0].finish_reason == "length"


def test_errors_take_the_openai_shape(catalog: Catalog) -> None:
    status, body, headers = translate.error(ExtractionFailed("x", [attempt(1, errors=["bad"])]))
    assert (status, body.error.code, headers) == (422, "extraction_failed", {"x-should-retry": "false"})
    assert body.error.attempts is not None and body.error.attempts[0].errors == ["bad"]
    status, body, _ = translate.error(BadRequestError("n: no", param="n"))
    assert (status, body.error.type, body.error.param) == (400, "invalid_request_error", "n")
