"""Grounded decoding: extractive fields become enums of the text's spans, per request (scripted engine)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.constraints import grounded_decoding, substring
from extractor.constraints.grounded_decoding import (
    MAX_CANDIDATES,
    candidates,
    check,
    constrain,
    enum_constrain,
    extractive_nodes,
)

from .conftest import LANDMARK_TEXT, landmark
from .test_grounding_strict import make_catalog

WEATHER = "What will the weather be in Lago Vista Tennessee on feb. 2nd, 2037?"


def test_candidates_are_spans_of_the_text_as_written_and_edge_stripped() -> None:
    found = candidates(WEATHER)
    assert {"Lago Vista Tennessee", "feb. 2nd, 2037?", "feb. 2nd, 2037", "2037", "Lago"} <= set(found)
    assert all(c in WEATHER for c in found)
    assert "Lago Vista, Tennessee" not in found and "Tennessee on feb" in found
    assert len(found) == len(set(found)) < 300


def test_candidates_on_cjk_are_character_runs() -> None:
    found = candidates(LANDMARK_TEXT)
    assert {"阿尔罕布拉宫", "西班牙", "宫殿建筑", "摩尔人统治时期"} <= set(found)
    assert all(c in LANDMARK_TEXT for c in found)
    assert "。" not in found and "宫殿建筑。" in found  # punctuation alone is no value; edges are stripped


def test_candidates_on_mixed_scripts_and_emoji() -> None:
    text = "🎉 我在 Café de Flore 喝咖啡，《三体》很好看"
    found = set(candidates(text))
    assert {"Café de Flore", "三体", "《三体》", "咖啡", "🎉"} <= found
    assert all(c in text for c in found)


SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {
        "cond": {
            "type": "object",
            "properties": {
                "field": {"type": "string", "pattern": "^[a-z_]+$", "x-grounded": False},
                "value": {"type": "string", "maxLength": 12, "description": "from the text"},
            },
        }
    },
    "properties": {
        "conditions": {"type": "array", "items": {"$ref": "#/$defs/cond"}},
        "city": {"type": ["string", "null"], "x-extractive": True},
        "note": {"type": "string"},
        "free": {"type": "string", "x-extractive": False},
        "mode": {"enum": ["a", "b"]},
        "meta": {"type": "object", "x-grounded": False, "properties": {"source": {"type": "string"}}},
    },
}


def test_marked_fields_only_unless_everywhere() -> None:
    assert sorted(extractive_nodes(SCHEMA, everywhere=False).values()) == ["#/properties/city"]
    assert sorted(extractive_nodes(SCHEMA, everywhere=True).values()) == [
        "#/$defs/cond/properties/value",
        "#/properties/city",
        "#/properties/note",
    ]


def test_enum_path_turns_fields_into_enums_of_spans() -> None:
    text = "rain in Lago Vista tomorrow"
    constrained = enum_constrain(SCHEMA, text, extractive_nodes(SCHEMA, everywhere=True))
    assert constrained is not None and constrained.mode == "enum" and constrained.grammar is None
    schema = constrained.schema
    assert schema is not None
    city = schema["properties"]["city"]
    assert "type" not in city and city["enum"][-1] is None and "Lago Vista" in city["enum"]
    value = schema["$defs"]["cond"]["properties"]["value"]
    assert value["description"] == "from the text" and None not in value["enum"]
    assert all(len(v) <= 12 for v in value["enum"]) and "rain in Lago Vista" not in value["enum"]
    assert schema["properties"]["free"] == {"type": "string"}  # x-* annotations stripped, not constrained
    assert schema["$defs"]["cond"]["properties"]["field"] == {"type": "string", "pattern": "^[a-z_]+$"}
    assert schema["properties"]["meta"]["properties"]["source"] == {"type": "string"}
    assert not any(key.startswith("x-") for key in json.dumps(schema).split('"') if key)
    assert constrained.fields == ("#/$defs/cond/properties/value", "#/properties/city", "#/properties/note")
    assert SCHEMA["properties"]["city"]["type"] == ["string", "null"]  # the task schema is untouched


def test_constrain_uses_the_grammar_at_any_length_up_to_the_word_limit() -> None:
    assert constrain({"type": "object", "properties": {"n": {"type": "integer"}}}, "x", everywhere=True) is None
    long_text = " ".join(f"w{i}" for i in range(MAX_CANDIDATES))
    assert enum_constrain(SCHEMA, long_text, extractive_nodes(SCHEMA, everywhere=True)) is None
    constrained = constrain(SCHEMA, long_text, everywhere=True)
    assert constrained is not None and constrained.mode == "grammar" and constrained.grammar is not None
    assert constrained.fields == ("#/$defs/cond/properties/value", "#/properties/city", "#/properties/note")
    past = constrain(SCHEMA, long_text, everywhere=True, max_words=100)
    assert past is not None and past.mode == "posthoc" and past.fields == () and past.grammar is None
    assert past.note == f"the text has {MAX_CANDIDATES} words, past the grounded-decoding limit of 100"


def test_constrain_falls_back_to_the_enum_where_the_grammar_cannot_spell_a_node_out() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
        "x-extractor": {"grounded_decoding": True},
    }
    schema["properties"]["b"] = {"type": "string", "x-extractive": True}
    schema["properties"]["a"]["oneOf"][0]["x-extractive"] = True
    constrained = constrain(schema, "rain in Oslo", everywhere=False)
    assert constrained is not None and constrained.mode == "enum" and constrained.schema is not None
    assert constrained.note is not None and "#/properties/a: oneOf beside grounded fields" in constrained.note


def test_check_warns_about_extractive_non_strings() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "x-extractive": True}}}
    assert check(schema) == [
        "#/properties/n/x-extractive: only string fields (type string, or string and null, without enum/const) "
        "can be constrained to spans of the text; ignored here"
    ]


# --- through the pipeline --------------------------------------------------------------------


async def test_request_option_constrains_every_grounded_field(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫", country="西班牙")])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT, grounded_decoding=True)
    sent = engine.history[0]
    assert sent.json_schema is None and sent.grammar is not None and sent.grammar.startswith("start:")
    for name in ("name", "country", "city", "category", "period"):
        assert f'"\\"{name}\\":"' in sent.grammar
    assert '"substring_chunks": ["阿", "尔", "罕"' in sent.grammar  # each CJK character is a chunk
    assert len(result.grounded_fields) == 5 and all(s.status == "exact" for s in result.spans)
    assert result.grounded_decoding == "grammar" and result.notes == []
    # The prompt still shows the task's schema, not the per-request enums.
    assert "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑" not in engine.history[0].messages[0]["content"]


async def test_shipped_slot_task_decodes_grounded_unless_turned_off(
    extractor: Extractor, engine: ScriptedEngine
) -> None:
    # landmark_slots sets "grounded_decoding": true; a request can turn it off.
    engine.enqueue([landmark(name="阿尔罕布拉宫"), landmark(name="阿尔罕布拉宫")])
    grounded = await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    assert grounded.grounded_fields and engine.history[0].grammar is not None
    assert engine.history[0].json_schema is None
    plain = await extractor.aextract("landmark_slots", LANDMARK_TEXT, grounded_decoding=False)
    assert engine.history[1].json_schema == extractor.task("landmark_slots").engine_schema
    assert engine.history[1].grammar is None
    assert plain.grounded_fields == [] and plain.grounded_decoding == "off"


async def test_xgrammar_backend_gets_the_enum_not_llguidance_lark(
    catalog: Catalog, settings: Settings, engine: ScriptedEngine
) -> None:
    # xgrammar cannot read the substring grammar ("Referenced rules are not defined", seen on vLLM 0.26).
    extractor = Extractor(settings=settings.with_(grammar_backend="xgrammar"), engine=engine, catalog=catalog)
    engine.enqueue([landmark(name="阿尔罕布拉宫")])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    assert engine.history[0].grammar is None and engine.history[0].json_schema is not None
    assert result.grounded_decoding == "enum" and result.grounded_fields
    assert any("not guidance" in note for note in result.notes)


@pytest.fixture
def marked(tmp_path: Path) -> tuple[Catalog, Path]:
    task = {
        "type": "object",
        "properties": {"city": {"type": ["string", "null"], "x-extractive": True}, "kind": {"type": "string"}},
        "required": ["city", "kind"],
    }
    everywhere = {**task, "x-extractor": {"grounded_decoding": True}}
    marked = {**task, "x-extractor": {"grounded_decoding": False}}  # the field marks only
    catalog = make_catalog(tmp_path, {"marked": marked, "everywhere": everywhere, "default": task})
    return catalog, tmp_path


@pytest.mark.parametrize(
    ("task", "option", "constrained"),
    [
        ("marked", None, ["#/properties/city"]),
        ("marked", True, ["#/properties/city", "#/properties/kind"]),
        ("marked", False, []),
        ("everywhere", None, ["#/properties/city", "#/properties/kind"]),
        ("everywhere", False, []),
        ("default", None, ["#/properties/city", "#/properties/kind"]),  # a task that says nothing: everywhere
    ],
)
async def test_task_setting_field_marks_and_request_option(
    marked: tuple[Catalog, Path], task: str, option: bool | None, constrained: list[str]
) -> None:
    catalog, home = marked
    engine = ScriptedEngine(['{"city": "Oslo", "kind": "city"}'])
    extractor = Extractor(settings=Settings.from_env({}, home=home, engine="scripted"), engine=engine, catalog=catalog)
    result = await extractor.aextract(task, "a trip to Oslo city", grounded_decoding=option)
    assert result.grounded_fields == constrained
    sent = engine.history[0]
    assert (sent.grammar is not None) == bool(constrained) and (sent.json_schema is None) == bool(constrained)
    if sent.grammar is not None:
        # a constrained field is a substring terminal; the other one is embedded JSON Schema
        kind = '%json {"type":"string"' in sent.grammar
        assert kind == ("#/properties/kind" not in constrained)


def test_extractive_on_a_non_string_is_a_load_warning(tmp_path: Path) -> None:
    catalog = make_catalog(
        tmp_path, {"odd": {"type": "object", "properties": {"n": {"type": "integer", "x-extractive": True}}}}
    )
    assert any("x-extractive: only string fields" in w for w in catalog.get("odd").warnings)


async def test_a_grammar_dead_end_switches_the_next_attempts_to_the_enum(
    extractor: Extractor, engine: ScriptedEngine
) -> None:
    # llguidance masks to EOS when its grammar leaves no token to go on with: the answer stops
    # early with finish_reason "stop". The next attempt must not meet the same wall.
    engine.enqueue(['{"name":"', landmark(name="阿尔罕布拉宫", country="西班牙")])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    first, second = engine.history
    assert first.grammar is not None and second.grammar is None
    assert second.json_schema is not None and "西班牙" in second.json_schema["properties"]["country"]["enum"]
    assert result.grounded_decoding == "enum" and len(result.attempts) == 2
    assert "the substring grammar ended attempt 1 early" in result.notes[0]
    assert result.data["country"] == "西班牙"


def test_a_request_carries_a_schema_or_a_grammar_never_both() -> None:
    from extractor.engines.base import GenerationRequest

    with pytest.raises(ValueError, match="a JSON Schema or a grammar, not both"):
        GenerationRequest(messages=[], json_schema={"type": "object"}, grammar="start: x")


def test_a_schema_is_planned_once_and_each_text_gets_its_own_automaton() -> None:
    schema = copy.deepcopy(SCHEMA)
    first = constrain(schema, "rain in Oslo", everywhere=True)
    planned = grounded_decoding._PLANS[(id(schema), True)]
    second = constrain(schema, "snow in Rome", everywhere=True)  # as long as the first: the same bounds apply
    assert grounded_decoding._PLANS[(id(schema), True)] is planned  # the schema's part was not worked out again
    assert first is not None and second is not None and first.grammar is not None and second.grammar is not None
    assert first.grammar == substring.translate(schema, "rain in Oslo", extractive_nodes(schema, everywhere=True)).lark
    assert "Rome" in second.grammar and "Oslo" not in second.grammar
    assert first.grammar.replace("rain", "snow").replace("Oslo", "Rome") == second.grammar
    # a schema at another address, or a new one where an old one was, is planned on its own
    other = copy.deepcopy(SCHEMA)
    other["properties"]["city"]["maxLength"] = 9
    third = constrain(other, "rain in Oslo", everywhere=True)
    assert third is not None and third.grammar is not None and "{1,9}" in third.grammar
    grounded_decoding._PLANS[(id(other), True)] = (schema, *grounded_decoding._PLANS[(id(other), True)][1:])
    again = constrain(other, "rain in Oslo", everywhere=True)
    assert again is not None and again.grammar == third.grammar
