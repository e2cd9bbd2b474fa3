"""Schemas llguidance refuses whole, decoded loosely and held to the whole schema after generation.

One stand-in per refusal seen on JSONSchemaBench (issue 59): ``oneOf`` branches that may overlap,
a recursive ``$ref`` merged with keywords around it, a reference to a definition no value
satisfies. Each: llguidance refuses the schema as written, the task loads with a warning naming
what is checked after generation only, llguidance compiles the engine schema (as vLLM's guidance
backend does), and a broken rule is re-asked (scripted engine).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from extractor.constraints import decoding, grounded_decoding

llguidance = pytest.importorskip("llguidance")

from .test_schema_guards import TREE, extractor_for, load, refused  # noqa: E402 - after the skip: they need llguidance


def refusal(schema: Any) -> str | None:
    """What llguidance says of ``schema`` as vLLM's guidance backend compiles it (None: it compiles)."""
    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": False})
    error = llguidance.LLMatcher.validate_grammar(grammar)
    return str(error) if error else None


def warned(task: Any, pointer: str) -> bool:
    return any(pointer in w and "checked after generation only" in w for w in task.warnings)


# --- oneOf: decoded as anyOf by llguidance's own option, exactly one checked after ------------

REACH = {
    "oneOf": [
        {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
        {"type": "object", "properties": {"phone": {"type": "string"}}, "required": ["phone"]},
    ]
}
CONTACT = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "reach": REACH,  # an object with both an email and a phone is under both branches
        "kind": {"oneOf": [{"type": "string", "enum": ["person", "office"]}, {"type": "null"}]},  # disjoint
    },
    "required": ["name", "reach"],
}


def test_overlapping_one_of_loads_decoded_as_any_of_by_llguidance(tmp_path: Path) -> None:
    assert "coerce_one_of" in (refusal(CONTACT) or "")
    task = load(tmp_path, "contact", CONTACT)
    assert warned(task, "#/properties/reach/oneOf") and not warned(task, "#/properties/kind/oneOf"), task.warnings
    assert task.engine_schema["x-guidance"] == {"coerce_one_of": True}
    assert task.engine_schema["properties"]["reach"] == REACH  # the oneOf as written: llguidance reads it as anyOf
    assert refusal(task.engine_schema) is None
    assert not task.validator.is_valid({"name": "Ann", "reach": {"email": "a@x.org", "phone": "555"}})
    assert task.validator.is_valid({"name": "Ann", "reach": {"email": "a@x.org"}})


def test_overlapping_one_of_is_refused_under_strict_enforcement(tmp_path: Path) -> None:
    error = refused(tmp_path, "contact", {**CONTACT, "x-extractor": {"strict_enforcement": True}})
    assert error.pointer == "#/properties/reach/oneOf" and "does not enforce 'oneOf'" in error.reason


def test_an_analysts_own_guidance_options_are_not_passed_on(tmp_path: Path) -> None:
    task = load(tmp_path, "lenient", {**CONTACT, "x-guidance": {"lenient": True, "whitespace_flexible": True}})
    assert task.engine_schema["x-guidance"] == {"coerce_one_of": True}


def test_one_of_whose_branches_overlap_once_values_are_evidence_compiles(tmp_path: Path) -> None:
    # a number and a word are disjoint; the number's evidence (the words that state it) and the word are not
    schema = {
        "type": "object",
        "properties": {"total": {"type": "number"}, "price": {"oneOf": [{"type": "number"}, {"enum": ["free"]}]}},
    }
    task = load(tmp_path, "price", schema)
    assert task.engine_schema["x-guidance"] == {"coerce_one_of": True} and refusal(task.engine_schema) is None


# --- a recursive $ref merged with keywords around it: decoded alone ----------------------------

# TREE's child as a branch of an anyOf, with the `required` around it: llguidance merges it into each branch
FOLDER = copy.deepcopy(TREE)
FOLDER["$defs"]["node"]["properties"]["child"] = {
    "required": ["name"],
    "anyOf": [{"$ref": TREE["$ref"]}, {"type": "null"}],
}


def test_keywords_around_a_recursive_branch_load_with_a_warning(tmp_path: Path) -> None:
    assert "circular references with sibling keys" in (refusal(FOLDER) or "")
    task = load(tmp_path, "folder", FOLDER)
    assert warned(task, "#/$defs/node/properties/child/required"), task.warnings
    assert refusal(task.engine_schema) is None
    assert not task.validator.is_valid({"name": "a", "child": {}})
    assert task.validator.is_valid({"name": "a", "child": {"name": "b", "child": None}})


def test_a_pattern_merged_with_a_recursive_property_is_checked_after(tmp_path: Path) -> None:
    kids = {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "string"}]}}
    node = {"type": "object", "properties": {"kids": kids}, "patternProperties": {"^k": {**kids, "maxItems": 3}}}
    schema = {"$defs": {"node": node}, "$ref": "#/$defs/node"}
    assert "circular references with sibling keys" in (refusal(schema) or "")
    task = load(tmp_path, "tree", schema)
    assert warned(task, "#/$defs/node/patternProperties/^k"), task.warnings
    assert refusal(task.engine_schema) is None
    assert not task.validator.is_valid({"kids": ["a", "b", "c", "d"]})  # the pattern's maxItems, checked after


def test_keywords_beside_a_ref_into_the_recursion_through_a_pattern_are_checked_after(tmp_path: Path) -> None:
    # JSONSchemaBench's hayson: a value is a string, a dict of values or a grid; a grid's meta is a
    # dict with keywords of its own beside the ref, and the dict reaches the value only through a pattern
    value = {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/dict"}, {"$ref": "#/$defs/grid"}]}
    dict_ = {
        "type": "object",
        "additionalProperties": False,
        "patternProperties": {"^[a-z]": {"$ref": "#/$defs/value"}},
    }
    ver = {"type": "string", "enum": ["3.0"]}
    meta = {"allOf": [{"$ref": "#/$defs/dict"}], "type": "object", "required": ["ver"], "properties": {"ver": ver}}
    grid = {"type": "object", "properties": {"meta": {"$ref": "#/$defs/meta"}}, "required": ["meta"]}
    schema = {
        "$defs": {"value": value, "dict": dict_, "meta": meta, "grid": grid},
        "type": "object",
        "properties": {"v": {"$ref": "#/$defs/value"}, "g": {"$ref": "#/$defs/grid"}},
    }
    assert "circular references with sibling keys" in (refusal(schema) or "")
    task = load(tmp_path, "hayson", schema)
    assert warned(task, "#/$defs/meta/required"), task.warnings
    assert refusal(task.engine_schema) is None
    assert not task.validator.is_valid({"g": {"meta": {}}})  # the meta's required, checked after
    assert task.validator.is_valid({"g": {"meta": {"ver": "3.0"}}, "v": {"meta": {}}})


@pytest.mark.parametrize(
    ("schema", "text", "wrong", "right", "error"),
    [
        (
            CONTACT,
            "Ann: ann@x.org, or 555 0100.",
            {"name": "Ann", "reach": {"email": "ann@x.org", "phone": "555 0100"}},
            {"name": "Ann", "reach": {"email": "ann@x.org"}},
            "/reach: ",  # is valid under each of the oneOf's branches
        ),
        (
            FOLDER,
            "The root has one leaf.",
            {"name": "root", "child": {}},
            {"name": "root", "child": {"name": "leaf"}},
            "/child: ",
        ),
    ],
    ids=["oneOf-exactly-one", "required-around-a-recursive-branch"],
)
async def test_what_decoding_left_out_is_checked_after_generation_and_reasked(
    tmp_path: Path, schema: dict[str, Any], text: str, wrong: Any, right: Any, error: str
) -> None:
    extractor = extractor_for(tmp_path, "loose", schema, [json.dumps(wrong), json.dumps(right)])
    result = await extractor.aextract("loose", text)
    assert result.data == right and len(result.attempts) == 2
    assert any(e.startswith(error) for e in result.attempts[0].errors), result.attempts


# --- a reference to a definition no value satisfies --------------------------------------------

LEGACY = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["id"], "additionalProperties": False}
RECORD = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "definitions": {"legacy": LEGACY},  # requires `id`, which it does not allow: no object is one
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "legacy": {"$ref": "#/definitions/legacy"},
        "history": {"type": "array", "items": {"$ref": "#/definitions/legacy"}},
    },
    "required": ["name"],
}


def test_an_optional_reference_no_value_satisfies_loads_decoded_as_false(tmp_path: Path) -> None:
    assert "Unsatisfiable" in (refusal(decoding.engine_schema(RECORD)) or "")  # llguidance refuses every ref to it
    task = load(tmp_path, "record", RECORD)
    assert any("#/definitions/legacy" in w and "no value satisfies it" in w for w in task.warnings), task.warnings
    properties = task.engine_schema["properties"]
    assert properties["legacy"] is False and properties["history"]["items"] is False
    assert refusal(task.engine_schema) is None
    assert task.validator.is_valid({"name": "x", "history": []})
    assert not task.validator.is_valid({"name": "x", "legacy": {"a": "b"}})


def test_a_required_reference_no_value_satisfies_is_refused(tmp_path: Path) -> None:
    schema = copy.deepcopy(RECORD)
    schema["required"] = ["name", "legacy"]
    error = refused(tmp_path, "record", schema)
    assert "no value satisfies this schema" in error.reason and "unsatisfiable" in error.reason


def test_the_grammar_that_holds_values_to_the_text_compiles_with_a_coerced_one_of(tmp_path: Path) -> None:
    ungrounded = json.loads(json.dumps(REACH).replace('{"type": "string"}', '{"type": "string", "x-grounded": false}'))
    schema = {**CONTACT, "properties": {**CONTACT["properties"], "reach": ungrounded}}
    task = load(tmp_path, "contact", schema)
    constrained = grounded_decoding.constrain(task.answer_schema, "Ann: ann@x.org", everywhere=True)
    assert constrained is not None and constrained.grammar is not None  # the oneOf is embedded as %json
    assert '"coerce_one_of":true' in constrained.grammar.replace(" ", "")
    assert not llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(constrained.grammar))
