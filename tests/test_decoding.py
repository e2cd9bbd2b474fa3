"""What each grammar backend cannot enforce, the subschema walk, and the schema sent to the engine."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extractor.constraints.decoding import engine_schema, unenforced_keywords, walk


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def pointers(schema: dict[str, Any], backend: Any) -> list[str]:
    return [pointer for pointer, _ in unenforced_keywords(schema, backend)]


# --- unenforced_keywords ---------------------------------------------------------------------


def test_plain_schema_is_fully_enforced() -> None:
    schema = obj(
        name={"type": ["string", "null"], "maxLength": 20},
        kind={"enum": ["a", "b"]},
        when={"type": "string", "format": "date"},
        code={"type": "string", "pattern": "^[A-Z]{3}$"},
        tags={"type": "array", "items": {"type": "string"}, "maxItems": 3},
        n={"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
    )
    assert unenforced_keywords(schema, "guidance") == []
    assert unenforced_keywords(schema, "xgrammar") == []


@pytest.mark.parametrize("backend", ["guidance", "xgrammar"])
@pytest.mark.parametrize(
    "keyword",
    ["uniqueItems", "contains", "not", "if", "dependentRequired", "propertyNames", "unevaluatedProperties"],
)
def test_never_enforced_keywords_on_both_backends(backend: Any, keyword: str) -> None:
    value: Any = {"uniqueItems": True, "dependentRequired": {"a": ["b"]}, "unevaluatedProperties": False}.get(
        keyword, {"type": "string"}
    )
    schema = obj(x={"type": "array", keyword: value})
    found = unenforced_keywords(schema, backend)
    assert (f"#/properties/x/{keyword}", f"{backend} does not enforce {keyword!r} while decoding") in found


@pytest.mark.parametrize(
    ("schema", "xgrammar", "guidance"),
    [
        (obj(n={"type": "integer", "multipleOf": 5}), ["#/properties/n/multipleOf"], []),
        (obj(o={"type": "object", "minProperties": 1}), ["#/properties/o/minProperties"], []),
        (obj(o={"type": "object", "maxProperties": 2}), ["#/properties/o/maxProperties"], []),
        (
            obj(o={"type": "object", "patternProperties": {"^a": {"type": "string"}}}),
            ["#/properties/o/patternProperties"],
            [],  # llguidance enforces it (tests/test_enforcement.py asks llguidance)
        ),
        (obj(s={"allOf": [{"type": "string"}, {"maxLength": 3}]}), ["#/properties/s/allOf"], []),
        (obj(s={"allOf": [{"type": "string"}]}), [], []),
        (obj(s={"type": "string", "pattern": "^a+$", "maxLength": 4}), ["#/properties/s/pattern"], []),
        (obj(s={"type": "string", "pattern": "^a+$", "minLength": 2}), ["#/properties/s/pattern"], []),
        (obj(s={"type": "string", "format": "date", "maxLength": 10}), ["#/properties/s/format"], []),
        (obj(s={"type": "string", "format": "ipv4"}), [], []),
        (obj(s={"type": "string", "format": "credit-card"}), ["#/properties/s/format"], []),
    ],
    ids=[
        "multipleOf",
        "minProperties",
        "maxProperties",
        "patternProperties",
        "allOf-two",
        "allOf-one",
        "pattern+maxLength",
        "pattern+minLength",
        "format+maxLength",
        "known-format",
        "unknown-format",
    ],
)
def test_backend_specific_keywords(schema: dict[str, Any], xgrammar: list[str], guidance: list[str]) -> None:
    assert pointers(schema, "xgrammar") == xgrammar
    assert pointers(schema, "guidance") == guidance


def test_reasons_name_the_backend_and_keyword() -> None:
    [(pointer, reason)] = unenforced_keywords(obj(s={"allOf": [{"type": "string"}, {"minLength": 1}]}), "xgrammar")
    assert pointer == "#/properties/s/allOf"
    assert reason == "xgrammar enforces only single-branch 'allOf'"
    [(_, reason)] = unenforced_keywords(obj(s={"type": "string", "pattern": "a", "maxLength": 2}), "xgrammar")
    assert reason == "xgrammar ignores minLength/maxLength beside 'pattern'"


def test_keywords_are_found_deep_inside() -> None:
    schema = {
        "type": "object",
        "$defs": {"tags": {"type": "array", "uniqueItems": True}},
        "properties": {
            "list": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "array", "contains": {}}]}},
            "tags": {"$ref": "#/$defs/tags"},
        },
    }
    assert pointers(schema, "guidance") == [
        "#/properties/list/items/anyOf/1/contains",
        "#/$defs/tags/uniqueItems",
    ]


def test_property_names_that_look_like_keywords_are_not_flagged() -> None:
    schema = obj(**{"not": {"type": "string"}, "contains": {"type": "string"}, "multipleOf": {"type": "string"}})
    assert unenforced_keywords(schema, "guidance") == []
    assert unenforced_keywords(schema, "xgrammar") == []


def test_property_name_with_slash_is_escaped_in_pointer() -> None:
    schema = obj(**{"a/b~c": {"type": "array", "uniqueItems": True}})
    assert pointers(schema, "guidance") == ["#/properties/a~1b~0c/uniqueItems"]


# --- walk ------------------------------------------------------------------------------------


def test_walk_visits_every_subschema_root_first() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "outer": {"type": "object", "$defs": {"inner": {"type": "string"}}, "properties": {"v": {"type": "number"}}}
        },
        "properties": {
            "list": {"type": "array", "items": {"$ref": "#/$defs/outer"}},
            "either": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "pair": {"prefixItems": [{"type": "string"}, {"type": "integer"}]},
            "extra": {"type": "object", "additionalProperties": {"type": "string"}},
            "cond": {"if": {"type": "string"}, "then": {"minLength": 1}, "else": {"type": "null"}, "not": {"const": 0}},
            "un": {"type": "object", "unevaluatedProperties": {"type": "string"}},
        },
    }
    visited = [pointer for pointer, _ in walk(schema)]
    assert visited[0] == "#"
    assert set(visited) == {
        "#",
        "#/properties/list",
        "#/properties/list/items",
        "#/properties/either",
        "#/properties/either/anyOf/0",
        "#/properties/either/anyOf/1",
        "#/properties/pair",
        "#/properties/pair/prefixItems/0",
        "#/properties/pair/prefixItems/1",
        "#/properties/extra",
        "#/properties/extra/additionalProperties",
        "#/properties/cond",
        "#/properties/cond/if",
        "#/properties/cond/then",
        "#/properties/cond/else",
        "#/properties/cond/not",
        "#/properties/un",
        "#/properties/un/unevaluatedProperties",
        "#/$defs/outer",
        "#/$defs/outer/$defs/inner",
        "#/$defs/outer/properties/v",
    }
    assert len(visited) == len(set(visited))


def test_walk_yields_the_subschema_objects() -> None:
    schema = {"type": "object", "$defs": {"a": {"$defs": {"b": {"type": "string"}}}}}
    found = dict(walk(schema))
    assert found["#/$defs/a/$defs/b"] is schema["$defs"]["a"]["$defs"]["b"]


def test_walk_skips_boolean_schemas_and_non_schemas() -> None:
    schema = {"type": "object", "additionalProperties": False, "items": True, "properties": {"x": True}}
    assert [p for p, _ in walk(schema)] == ["#"]
    assert list(walk(True)) == []
    assert list(walk("not a schema")) == []


def test_walk_does_not_enter_annotations_or_data() -> None:
    schema = {
        "type": "object",
        "x-extractor": {"examples": [{"text": "t", "output": {"uniqueItems": True}}]},
        "properties": {"k": {"const": {"properties": {"a": {}}}, "default": {"items": {}}}},
    }
    assert [p for p, _ in walk(schema)] == ["#", "#/properties/k"]


# --- engine_schema ---------------------------------------------------------------------------


def test_engine_schema_strips_only_x_keywords() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "x-extractor": {"max_attempts": 2},
        "x-owner": "team",
        "$defs": {
            "x-def": {"type": "string", "x-grounded": False},
            "cond": {"type": "object", "properties": {"x-y": {"type": "number", "x-unit": "m"}}},
        },
        "properties": {
            "x-ray": {"type": "string", "x-grounded": False, "description": "kept"},
            "name": {"type": "string", "x-grounded": True},
            "list": {"type": "array", "items": {"anyOf": [{"type": "string", "x-note": 1}, {"$ref": "#/$defs/x-def"}]}},
            "fixed": {"const": {"x-keep": 1}},
            "choice": {"enum": [{"x-keep": 2}, "x-also"]},
            "dflt": {"type": "object", "default": {"x-keep": 3}},
            "dep": {"type": "object", "dependentRequired": {"x-a": ["x-b"]}},
        },
        "required": ["x-ray", "name"],
    }
    original = copy.deepcopy(schema)
    assert engine_schema(schema) == {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "x-def": {"type": "string"},
            "cond": {"type": "object", "properties": {"x-y": {"type": "number"}}},
        },
        "properties": {
            "x-ray": {"type": "string", "description": "kept"},
            "name": {"type": "string"},
            "list": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/x-def"}]}},
            "fixed": {"const": {"x-keep": 1}},
            "choice": {"enum": [{"x-keep": 2}, "x-also"]},
            "dflt": {"type": "object", "default": {"x-keep": 3}},
            "dep": {"type": "object", "dependentRequired": {"x-a": ["x-b"]}},
        },
        "required": ["x-ray", "name"],
    }
    assert schema == original  # not modified in place


def test_engine_schema_is_a_copy() -> None:
    schema = {"type": "object", "properties": {"a": {"enum": [["x"]]}}}
    stripped = engine_schema(schema)
    stripped["properties"]["a"]["enum"][0].append("y")
    assert schema["properties"]["a"]["enum"] == [["x"]]


def test_engine_schema_property_named_properties() -> None:
    schema = {
        "type": "object",
        "properties": {
            "properties": {"type": "object", "x-grounded": False, "properties": {"x-a": {"type": "string"}}}
        },
    }
    assert engine_schema(schema) == {
        "type": "object",
        "properties": {"properties": {"type": "object", "properties": {"x-a": {"type": "string"}}}},
    }
