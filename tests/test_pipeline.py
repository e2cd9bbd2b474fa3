"""Pipeline logic on the scripted engine: parse, repair, validate, ground, re-ask, fail."""

from __future__ import annotations

import json

import pytest

from extractor import ExtractionFailed, Extractor, InputError, ScriptedEngine, TextTooLongError, UnknownTaskError
from extractor.engines.base import GenerationRequest

from .conftest import LANDMARK_TEXT, landmark

GOOD = landmark(name="阿尔罕布拉宫", country="西班牙", category="宫殿建筑")


async def test_valid_first_attempt(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([GOOD])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    assert result.data["country"] == "西班牙"
    assert result.value.country == "西班牙"
    assert len(result.attempts) == 1 and result.attempts[0].errors == []
    assert result.usage.completion_tokens == result.attempts[0].completion_tokens > 0
    # Spans are code-point offsets into the original text.
    span = next(s for s in result.spans if s.path == "/country")
    assert LANDMARK_TEXT[span.start : span.end] == "西班牙" and span.status == "exact"


async def test_request_is_constrained_and_few_shot(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([GOOD])
    await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    request: GenerationRequest = engine.history[0]
    # landmark_slots decodes grounded: a substring grammar, not the task's JSON Schema
    assert request.json_schema is None and request.grammar is not None and "x-extractor" not in request.grammar
    assert request.temperature == pytest.approx(0.1)
    roles = [m["role"] for m in request.messages]
    assert roles[0] == "system" and roles[-1] == "user"
    assert roles.count("assistant") == 3  # examples_from_pool k=3, drawn from examples/landmark_slots.jsonl
    # As tuned (tuned/landmark_slots.json): the nearest examples without the pool's hints, whose gain was noise.
    assert request.messages[-1]["content"] == LANDMARK_TEXT


async def test_broken_json_is_repaired_and_flagged(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([GOOD[:-1]])  # closing brace lost
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    assert result.attempts[0].repaired is True
    assert result.data["name"] == "阿尔罕布拉宫"


async def test_reask_carries_validation_errors(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([json.dumps({"name": "阿尔罕布拉宫"}, ensure_ascii=False), GOOD])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    assert [bool(a.errors) for a in result.attempts] == [True, False]
    assert any("'country' is a required property" in e for e in result.attempts[0].errors)
    reask = engine.history[1].messages[-1]["content"]
    assert "'country' is a required property" in reask  # the errors are fed back
    assert '{"name": "阿尔罕布拉宫"}' in reask  # and so is the previous answer
    assert result.usage.prompt_tokens == sum(a.prompt_tokens for a in result.attempts)


async def test_third_failure_raises_with_every_attempt(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue(["no json here", "[1, 2]", '{"name": 5}'])
    with pytest.raises(ExtractionFailed) as caught:
        await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    attempts = caught.value.attempts
    assert [a.number for a in attempts] == [1, 2, 3]
    assert [a.raw for a in attempts] == ["no json here", "[1, 2]", '{"name": 5}']
    assert all(a.errors for a in attempts)
    assert len(engine.history) == 3


async def test_max_attempts_option(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue(["nope"])
    with pytest.raises(ExtractionFailed) as caught:
        await extractor.aextract("landmark_slots", LANDMARK_TEXT, max_attempts=1)
    assert len(caught.value.attempts) == 1
    with pytest.raises(InputError, match="max_attempts"):
        await extractor.aextract("landmark_slots", LANDMARK_TEXT, max_attempts=4)


async def test_flag_grounding_keeps_invented_value(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫", city="格拉纳达")])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    assert result.data["city"] == "格拉纳达"
    assert {s.path: s.status for s in result.spans}["/city"] == "missing"


async def test_strict_grounding_reasks_then_removes(extractor: Extractor, engine: ScriptedEngine) -> None:
    invented = landmark(name="阿尔罕布拉宫", city="格拉纳达")
    engine.enqueue([invented, invented, invented])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT, grounding="strict")
    assert len(result.attempts) == 3
    assert "does not occur in the text" in engine.history[1].messages[-1]["content"]
    assert result.data["city"] is None and result.data["name"] == "阿尔罕布拉宫"
    assert [(s.path, s.value) for s in result.removed] == [("/city", "格拉纳达")]


async def test_strict_grounding_accepts_fixed_answer(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(city="格拉纳达"), GOOD])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT, grounding="strict")
    assert len(result.attempts) == 2 and result.removed == []


async def test_output_type_returns_users_model(extractor: Extractor, engine: ScriptedEngine) -> None:
    from pydantic import BaseModel

    class Landmark(BaseModel):
        name: str
        country: str | None

    engine.enqueue([GOOD])
    value = await extractor.aextract("landmark_slots", LANDMARK_TEXT, output_type=Landmark)
    assert isinstance(value, Landmark) and value.country == "西班牙"


async def test_bad_input(extractor: Extractor, engine: ScriptedEngine) -> None:
    with pytest.raises(UnknownTaskError, match="landmark_slots"):
        await extractor.aextract("no_such_task", "text")
    with pytest.raises(InputError, match="empty"):
        await extractor.aextract("landmark_slots", "   ")
    with pytest.raises(TextTooLongError, match="model window is 4096 tokens"):
        await extractor.aextract("landmark_slots", "很长" * 20_000, chunk=False)
    assert engine.history == []  # nothing reached the engine


async def test_a_max_tokens_past_the_window_is_clamped_to_what_the_prompt_leaves(
    extractor: Extractor, engine: ScriptedEngine
) -> None:
    engine.enqueue([GOOD])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT, max_tokens=8191)
    asked = engine.history[-1].max_tokens
    assert asked is not None and 256 < asked < 4096 - 128
    assert (
        result.notes
        and "max_tokens 8191 clamped to" in result.notes[0]
        and "4096-token model window" in result.notes[0]
    )
    engine.enqueue([GOOD])
    assert (await extractor.aextract("landmark_slots", LANDMARK_TEXT, max_tokens=300)).notes == []
    assert engine.history[-1].max_tokens == 300
    # asking more never rescues a text the window cannot hold, nor fails one it can
    with pytest.raises(TextTooLongError, match="model window is 4096 tokens"):
        await extractor.aextract("landmark_slots", "很长" * 20_000, max_tokens=8191, chunk=False)


async def test_cut_off_answer_is_explained(extractor: Extractor, engine: ScriptedEngine) -> None:
    from extractor.engines.base import Generation

    async def cut(request: GenerationRequest) -> Generation:
        return Generation(text='{"name": "阿尔罕', prompt_tokens=10, completion_tokens=160, finish_reason="length")

    engine.generate = cut  # type: ignore[method-assign]
    with pytest.raises(ExtractionFailed) as caught:
        await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    assert any("cut off" in e for e in caught.value.attempts[0].errors)


async def test_many_texts_one_result_or_error_each(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([GOOD, GOOD])
    results = await extractor.aextract_many("landmark_slots", [LANDMARK_TEXT, "", LANDMARK_TEXT])
    assert [type(r).__name__ for r in results] == ["ExtractionResult", "InputError", "ExtractionResult"]


async def test_a_condition_written_again_word_for_word_is_dropped_with_a_note(
    extractor: Extractor, engine: ScriptedEngine
) -> None:
    # query_conditions holds its conditions to uniqueItems; a small model that loops repeats one
    city = {"field": "city", "operator": "eq", "value": "Rome"}
    price = {"field": "price", "operator": "lt", "value": "200 euros"}
    engine.enqueue([json.dumps({"conditions": [city, city, price, city]})])
    result = await extractor.aextract("query_conditions", "hotels in Rome under 200 euros")
    assert len(result.attempts) == 1 and result.attempts[0].errors == []  # no re-ask spent on it
    assert [c["field"] for c in result.data["conditions"]] == ["city", "price"]
    assert result.data["conditions"][1]["value"] == 200 and result.data["conditions"][1]["unit"] == "EUR"
    assert "/conditions: 2 repeated items dropped (uniqueItems)" in result.notes
    assert {s.path for s in result.spans} >= {"/conditions/0/value", "/conditions/1/value"}
    assert not any(s.path.startswith(("/conditions/2", "/conditions/3")) for s in result.spans)
