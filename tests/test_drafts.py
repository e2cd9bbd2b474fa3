"""Drafts: each schema is checked and validated by its own draft, and translated to 2020-12 in one place."""

from __future__ import annotations

from typing import Any

import pytest

from extractor.constraints import drafts, wrapping
from extractor.constraints.drafts import DraftError, detect, translate

D04 = "http://json-schema.org/draft-04/schema#"
D06 = "http://json-schema.org/draft-06/schema#"
D07 = "http://json-schema.org/draft-07/schema#"
D2019 = "https://json-schema.org/draft/2019-09/schema"
D2020 = "https://json-schema.org/draft/2020-12/schema"


def decoded(schema: dict[str, Any]) -> dict[str, Any]:
    return translate(schema, detect(schema)).schema


def valid(schema: dict[str, Any], instance: Any) -> bool:
    """Whether ``instance`` is valid as the pipeline checks an output (the draft's own validator)."""
    shaped = wrapping.shape(decoded(schema))
    value = {shaped.key: instance} if shaped.key is not None else instance
    return bool(wrapping.validator(schema, detect(schema), shaped.key).is_valid(value))


# --- which draft ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "name"),
    [
        (D04, "draft-04"),
        ("http://json-schema.org/draft-04/schema", "draft-04"),  # without the '#'
        (D06, "draft-06"),
        (D07, "draft-07"),
        (D2019, "2019-09"),
        (D2020, "2020-12"),
        ("http://iglucentral.com/schemas/com.snowplowanalytics.self-desc/schema/jsonschema/1-0-0#", "draft-04"),
    ],
)
def test_declared_draft_decides(declared: str, name: str) -> None:
    draft = detect({"$schema": declared, "type": "object"})
    assert draft.name == name and draft.declared


def test_without_schema_the_newest_draft_that_accepts_it() -> None:
    assert detect({"type": "object"}).name == "2020-12"
    # A boolean exclusiveMaximum is not valid 2020-12 (nor 07, nor 06): it is draft-04's.
    draft = detect({"type": "number", "maximum": 5, "exclusiveMaximum": True})
    assert draft.name == "draft-04" and not draft.declared
    # "the current draft" as older tools wrote it reads the same way
    assert detect({"$schema": "http://json-schema.org/schema#", "type": "object"}).name == "2020-12"


def test_unknown_draft_and_invalid_schema_name_where() -> None:
    with pytest.raises(DraftError) as unknown:
        detect({"$schema": "http://json-schema.org/draft-03/schema#"})
    assert unknown.value.pointer == "#/$schema" and "draft-04" in unknown.value.reason
    with pytest.raises(DraftError) as invalid:
        detect({"$schema": D07, "properties": {"a": {"type": "strin"}}})
    assert invalid.value.pointer == "#/properties/a/type" and "draft-07" in invalid.value.reason


# --- what reads differently, per draft ----------------------------------------------------------


def test_draft04_translation() -> None:
    schema = {
        "$schema": D04,
        "id": "http://example.com/order.json",
        "type": "object",
        "definitions": {
            "qty": {"id": "#qty", "type": "integer", "minimum": 0, "maximum": 9, "exclusiveMaximum": True},
            "sku": {"type": "string", "const": "ignored by draft-04"},
        },
        "properties": {
            "qty": {"$ref": "#qty"},
            "sku": {"$ref": "http://example.com/order.json#/definitions/sku", "maxLength": 3},
            "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False},
            "low": {"type": "number", "minimum": 1, "exclusiveMinimum": False},
        },
        "dependencies": {"qty": ["sku"], "sku": {"required": ["pair"]}},
    }
    out = decoded(schema)
    assert out["$schema"] == D2020 and "id" not in out
    assert out["$defs"]["qty"] == {"type": "integer", "minimum": 0, "exclusiveMaximum": 9}
    assert out["$defs"]["sku"] == {"type": "string"}  # const is not a draft-04 keyword
    props = out["properties"]
    assert props["qty"] == {"$ref": "#/$defs/qty"}  # anchor -> local pointer
    assert props["sku"] == {"$ref": "#/$defs/sku"}  # absolute ref -> local; keywords beside $ref ignored
    assert props["pair"] == {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}
    assert props["low"] == {"type": "number", "minimum": 1}
    assert out["dependentRequired"] == {"qty": ["sku"]} and out["dependentSchemas"] == {"sku": {"required": ["pair"]}}
    # ... while outputs are checked by draft-04 itself
    assert valid(schema, {"qty": 8, "sku": "toolong", "pair": ["a", 1], "low": 1})  # maxLength beside $ref: ignored
    assert not valid(schema, {"qty": 9})  # exclusiveMaximum: true
    assert not valid(schema, {"pair": ["a", 1, 2]})  # additionalItems: false
    assert not valid(schema, {"qty": 1})  # dependencies: qty needs sku


def test_draft06_translation() -> None:
    schema = {
        "$schema": D06,
        "type": "object",
        "properties": {
            "n": {"type": "number", "exclusiveMaximum": 5},
            "c": {"const": "x"},
            "tags": {"type": "array", "contains": {"const": "a"}},
            "t": {"if": {"type": "string"}, "then": {"minLength": 2}},  # if/then are draft-07: no constraint
        },
    }
    props = decoded(schema)["properties"]
    assert props["n"] == {"type": "number", "exclusiveMaximum": 5}
    assert props["c"] == {"const": "x"} and props["tags"]["contains"] == {"const": "a"}
    assert props["t"] == {}
    assert valid(schema, {"t": "a"}) and not valid(schema, {"c": "y"})


def test_draft07_translation() -> None:
    schema = {
        "$schema": D07,
        "$id": "https://example.com/person.json",
        "definitions": {"name": {"$id": "#name", "type": "string", "maxLength": 5}},
        "type": "object",
        "properties": {
            "name": {"$ref": "#name", "type": "integer"},  # type beside $ref: ignored by draft-07
            "kind": {"if": {"const": "a"}, "then": {"minLength": 1}},
        },
    }
    out = decoded(schema)
    assert out["properties"]["name"] == {"$ref": "#/$defs/name"}
    assert out["properties"]["kind"] == {"if": {"const": "a"}, "then": {"minLength": 1}}
    assert valid(schema, {"name": "Ann"}) and not valid(schema, {"name": "Annabel"})


def test_draft2019_translation() -> None:
    schema = {
        "$schema": D2019,
        "$recursiveAnchor": True,
        "type": "object",
        "properties": {
            "children": {"type": "array", "items": {"$recursiveRef": "#"}},
            "pair": {"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "integer"}},
        },
        "dependentRequired": {"pair": ["children"]},
    }
    out = decoded(schema)
    assert out["properties"]["children"]["items"] == {"$ref": "#"}
    assert out["properties"]["pair"] == {
        "type": "array",
        "prefixItems": [{"type": "string"}],
        "items": {"type": "integer"},
    }
    assert out["dependentRequired"] == {"pair": ["children"]} and "$recursiveAnchor" not in out
    assert valid(schema, {"children": [{"children": []}]}) and not valid(schema, {"pair": ["a"]})


def test_draft2020_keeps_its_own_keywords() -> None:
    schema = {
        "$schema": D2020,
        "$defs": {"a b": {"type": "string"}},
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a%20b", "maxLength": 2}, "t": {"prefixItems": [{"type": "integer"}]}},
        "dependencies": {"x": ["t"]},  # not a 2020-12 keyword
    }
    out = decoded(schema)
    assert out["properties"]["x"] == {"$ref": "#/$defs/a%20b", "maxLength": 2}  # siblings of $ref apply in 2020-12
    assert out["properties"]["t"] == {"prefixItems": [{"type": "integer"}]} and "dependencies" not in out
    assert not valid(schema, {"x": "abc"})


def test_ref_into_a_spot_no_keyword_names_is_hoisted() -> None:
    schema = {
        "$schema": D04,
        "type": "object",
        "shapes": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "properties": {"p": {"$ref": "#/shapes/point"}},
    }
    out = decoded(schema)
    assert out["properties"]["p"] == {"$ref": "#/$defs/point"}
    assert out["$defs"]["point"]["properties"] == {"x": {"type": "number"}}
    assert not valid(schema, {"p": {"x": "one"}})


@pytest.mark.parametrize("ref", ["other.json#/a", "https://example.com/s.json", "#/definitions/missing", "#nope"])
def test_a_ref_that_leads_nowhere_is_refused_with_its_pointer(ref: str) -> None:
    with pytest.raises(DraftError) as error:
        decoded({"$schema": D07, "type": "object", "properties": {"a": {"$ref": ref}}})
    assert error.value.pointer == "#/properties/a/$ref" and repr(ref) in error.value.reason


def test_origins_point_into_the_schema_as_written() -> None:
    schema = {"$schema": D04, "definitions": {"x": {"type": "array", "items": [{"type": "string"}]}}}
    origins = translate(schema, detect(schema)).origins
    assert origins["#/$defs/x"] == "#/definitions/x" and origins["#/$defs/x/prefixItems/0"] == "#/definitions/x/items/0"


def test_translation_leaves_the_schema_as_written_alone() -> None:
    schema = {
        "$schema": D04,
        "definitions": {"x": {"type": "string"}},
        "properties": {"a": {"$ref": "#/definitions/x"}},
    }
    before = repr(schema)
    decoded(schema)
    assert repr(schema) == before and drafts.LATEST == D2020


# --- the top level ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}},
        {"type": "string", "maxLength": 10},
        {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"n": {"type": "integer"}}}]},
    ],
    ids=["array", "scalar", "anyOf"],
)
def test_non_object_top_level_is_wrapped(schema: dict[str, Any]) -> None:
    shaped = wrapping.shape(decoded(schema))
    assert shaped.key == "value"
    assert shaped.schema["type"] == "object" and shaped.schema["required"] == ["value"]
    assert shaped.schema["additionalProperties"] is False
    assert shaped.origin("#/properties/value/maxLength") == "#/maxLength"


def test_wrapping_rebases_refs_into_the_old_top_level_and_keeps_defs_on_top() -> None:
    schema = {
        "$schema": D07,
        "type": "array",
        "definitions": {"item": {"type": "object", "properties": {"more": {"$ref": "#"}}}},
        "items": {"$ref": "#/definitions/item"},
    }
    shaped = wrapping.shape(decoded(schema))
    assert shaped.schema["$defs"]["item"]["properties"]["more"] == {"$ref": "#/properties/value"}
    assert shaped.schema["properties"]["value"]["items"] == {"$ref": "#/$defs/item"}
    check = wrapping.validator(schema, detect(schema), shaped.key)
    assert check.is_valid({"value": [{"more": []}]})
    [error] = check.iter_errors({"value": [{"more": "x"}]})
    assert list(error.absolute_path) == ["value", 0, "more"]


def test_top_level_ref_is_its_target_and_untyped_object_keywords_mean_an_object() -> None:
    shaped = wrapping.shape(
        decoded({"$schema": D07, "$ref": "#/definitions/c", "definitions": {"c": {"type": "object", "title": "C"}}})
    )
    assert shaped.key is None and shaped.schema["type"] == "object" and shaped.schema["title"] == "C"
    assert shaped.origin("#/properties/a") == "#/$defs/c/properties/a"
    untyped = wrapping.shape(decoded({"properties": {"a": {"type": "string"}}, "required": ["a"]}))
    assert untyped.key is None and untyped.schema["type"] == "object"


def test_unwrap_helpers() -> None:
    assert wrapping.unwrap({"value": [1, 2]}, "value") == [1, 2]
    assert wrapping.unwrap({"a": 1}, None) == {"a": 1}
    assert wrapping.unwrap_pointer("/value/0/name", "value") == "/0/name"
    assert wrapping.unwrap_pointer("/value", "value") == ""
    assert wrapping.unwrap_pointer("/value/0", None) == "/value/0"


def test_a_2020_12_schema_comes_out_as_it_went_in() -> None:
    # Same keys in the same order: the prompt's compact schema and adapter fingerprints do not move.
    schema = {
        "title": "T",
        "$schema": D2020,
        "type": "object",
        "$defs": {"d": {"type": "string", "format": "date"}},
        "properties": {"a": {"$ref": "#/$defs/d", "x-grounded": False}, "b": {"anyOf": [{"type": "null"}]}},
        "x-extractor": {"max_attempts": 2},
    }
    out = decoded(schema)
    assert out == schema and list(out) == list(schema)


def test_a_schema_referencing_cannot_crawl_still_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    # JSON Schema Store's tmlanguage and config: referencing's crawl of embedded $ids met a property
    # dependency (["begin"]) or a boolean where it looked for a subschema, and raised past the loader
    import referencing

    from extractor.catalog.tasks import task_from_schema

    def refuse(self: Any) -> Any:
        raise AttributeError("'list' object has no attribute 'get'")

    monkeypatch.setattr(referencing.Registry, "crawl", refuse)
    rule = {"type": "object", "properties": {"begin": {"type": "string"}, "end": {"type": "string"}}}
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$ref": "#/definitions/rule",
        "definitions": {"rule": rule},
    }
    task = task_from_schema("t", schema, where="x")
    assert task.validator.is_valid({"begin": "a"}) and not task.validator.is_valid({"begin": 1})
