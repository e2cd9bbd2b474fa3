"""Analysts' schemas the load guards used to refuse: each loads, checked after generation where decoding cannot hold it.

One synthetic schema per refusal class seen on real-world schemas (JSONSchemaBench): an API schema
whose shared definitions pass 20,000 subschemas once refs are written out, look-around patterns, a
1,100-character pattern, ``minProperties`` over properties an ``allOf`` brings, a recursive ``$ref``
with keywords beside it. Each loads with a warning naming what is checked after generation only,
a wrong answer is re-asked (scripted engine), and what no value satisfies is refused with the reason.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.catalog import limits
from extractor.catalog.tasks import load_task
from extractor.constraints import patterns
from extractor.errors import TaskError

pytest.importorskip("llguidance")  # the guidance backend's own answers decide what decoding holds

from .test_byo_schemas import write  # after the skip: it needs llguidance too


def load(root: Path, name: str, schema: Any) -> Any:
    return load_task(write(root, name, schema), root / "prompts", backend="guidance")


def refused(root: Path, name: str, schema: Any) -> TaskError:
    with pytest.raises(TaskError) as error:
        load(root, name, schema)
    return error.value


def extractor_for(root: Path, name: str, schema: Any, answers: list[str]) -> Extractor:
    write(root, name, schema)
    catalog = Catalog.load(root)
    assert name in catalog.tasks, [str(e) for e in catalog.errors]
    settings = Settings.from_env({}, home=root / "home", engine="scripted")
    return Extractor(settings=settings, engine=ScriptedEngine(answers), catalog=catalog)


# --- an API schema of shared definitions ---------------------------------------------------------


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


def api_schema() -> dict[str, Any]:
    """A news API's story in the shape of the Washington Post's ANS: small shared traits everywhere."""
    text, url = {"type": "string", "maxLength": 200}, {"type": "string", "maxLength": 300}
    defs: dict[str, Any] = {"text": text, "url": url, "id": {"type": "string", "maxLength": 64}}
    defs["extra"] = {"type": "object", "additionalProperties": True}
    defs["image_ref"] = {"type": "object", "properties": {"_id": ref("id"), "url": ref("url"), "caption": ref("text")}}
    defs["author"] = {
        "type": "object",
        "properties": {"_id": ref("id"), "name": ref("text"), "image": ref("image_ref"), "bio": ref("text")},
        "required": ["name"],
    }
    roles = ("by", "photos_by", "contributors", "edited_by")
    defs["credits"] = {
        "type": "object",
        "properties": {r: {"type": "array", "maxItems": 5, "items": ref("author")} for r in roles},
    }
    defs["section"] = {"type": "object", "properties": {"_id": ref("id"), "name": ref("text"), "path": ref("text")}}
    defs["taxonomy"] = {
        "type": "object",
        "properties": {
            "sections": {"type": "array", "maxItems": 5, "items": ref("section")},
            "primary_section": ref("section"),
        },
    }
    common = {"_id": ref("id"), "credits": ref("credits"), "taxonomy": ref("taxonomy"), "extra": ref("extra")}
    defs["image"] = {"type": "object", "properties": {**common, "type": {"const": "image"}, "url": ref("url")}}
    defs["video"] = {"type": "object", "properties": {**common, "type": {"const": "video"}, "promo": ref("image")}}
    defs["promo_items"] = {
        "type": "object",
        "properties": {k: {"anyOf": [ref("image"), ref("video")]} for k in ("basic", "lead_art")},
    }
    kinds = ["image", "video"]
    for kind in ("audio", "table", "list", "oembed", "interstitial", "correction", "divider", "header", "gallery"):
        kinds.append(kind)
        defs[kind] = {
            "type": "object",
            "properties": {**common, "type": {"const": kind}, "promo_items": ref("promo_items")},
        }
    element = {"anyOf": [ref(k) for k in kinds]}
    defs["story"] = {
        "type": "object",
        "properties": {
            **common,
            "type": {"const": "story"},
            "headline": ref("text"),
            "promo_items": ref("promo_items"),
            "content_elements": {"type": "array", "maxItems": 100, "items": element},
        },
        "required": ["headline"],
    }
    return {"$schema": "http://json-schema.org/draft-04/schema#", "title": "Story", "definitions": defs, **ref("story")}


def written_out(schema: Any) -> int:
    """Subschemas with every $ref written out (the count the old guard refused at 20,000)."""

    def size(node: Any, active: tuple[str, ...]) -> int:
        if isinstance(node, list):
            return sum(size(item, active) for item in node)
        if not isinstance(node, dict):
            return 0
        total = 1 + sum(size(v, active) for k, v in node.items() if k not in ("enum", "const", "$ref"))
        target = node.get("$ref")
        if isinstance(target, str) and target not in active:
            total += size(schema["definitions"][target.rsplit("/", 1)[-1]], (*active, target))
        return total

    return size(schema, ())


def test_an_api_schema_of_shared_definitions_loads_and_its_answers_are_checked(tmp_path: Path) -> None:
    schema = api_schema()
    assert written_out(schema) > limits.MAX_EXPANDED  # refused before, as the real API schemas were
    started = time.perf_counter()
    task = load(tmp_path, "story", schema)
    assert time.perf_counter() - started < 5
    assert not any("checked after generation" in w for w in task.warnings)  # all of it is decoded
    author = {"name": "A. Writer", "image": {"caption": "x" * 201}}  # a caption over maxLength, deep down
    bad = {"headline": "Rain", "content_elements": [{"type": "audio", "credits": {"by": [author]}}]}
    assert not task.validator.is_valid(bad)
    assert task.validator.is_valid({**bad, "content_elements": [{"type": "audio"}]})


def fan_out(levels: int, width: int, *, branches: bool = False) -> dict[str, Any]:
    """``levels`` definitions, each with ``width`` properties referring to the next: width**levels paths."""
    defs: dict[str, Any] = {}
    for i in range(levels):
        level = {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/l{i + 1}"} for j in range(width)}}
        defs[f"l{i}"] = {"anyOf": [level, {**level, "required": ["p0"]}]} if branches else level
    defs[f"l{levels}"] = {"type": "string", "maxLength": 5}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/l0"}}, "$defs": defs}


def test_shared_definitions_under_properties_load_in_bounded_time(tmp_path: Path) -> None:
    # 10**20 field paths: each answer's value meets one definition at a time, and the walks that
    # follow refs (grounding, typed values, the output budget) each follow a ref a bounded number of times
    started = time.perf_counter()
    load(tmp_path, "fan", fan_out(20, 10))
    assert time.perf_counter() - started < 5


def test_branches_that_multiply_down_the_answer_are_still_refused(tmp_path: Path) -> None:
    # each level's anyOf takes both branches down: 2**40 subschemas on the deepest value of an answer
    error = refused(tmp_path, "bomb", fan_out(40, 1, branches=True))
    assert "subschemas apply to one value" in error.reason and str(limits.MAX_EXPANDED) in error.reason


# --- look-around patterns ------------------------------------------------------------------------

ACCOUNT = {
    "type": "object",
    "properties": {
        "handle": {"type": "string", "maxLength": 20, "pattern": "^(?!admin$)[a-z]+$"},
        "code": {"type": "string", "maxLength": 20, "pattern": "^(?=.*[0-9])(?=.*[a-z])[a-z0-9]{6,}$"},
        "price": {"type": "string", "maxLength": 20, "pattern": "(?<=\\$)[0-9]+"},
    },
    "required": ["handle"],
    "additionalProperties": False,
}


def test_look_around_patterns_load_with_a_warning_naming_each(tmp_path: Path) -> None:
    task = load(tmp_path, "account", ACCOUNT)
    for name in ("handle", "code", "price"):
        pointer = f"#/properties/{name}/pattern"
        assert any(pointer in w and "bounded to" in w and "RE2" in w for w in task.warnings), task.warnings
        assert any(pointer in w and "checked after generation only" in w for w in task.warnings)
    assert "pattern" not in json.dumps(task.engine_schema)  # kept out of the grammar
    assert not task.validator.is_valid({"handle": "admin"})
    assert not task.validator.is_valid({"handle": "bob", "code": "abcdef"})  # no digit
    assert not task.validator.is_valid({"handle": "bob", "price": "12"})  # not after a $
    assert task.validator.is_valid({"handle": "bob", "code": "abc123", "price": "$12"})


def test_a_look_around_pattern_under_strict_enforcement_is_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, "strict", {**ACCOUNT, "x-extractor": {"strict_enforcement": True}})
    assert "/pattern" in error.pointer and "does not enforce 'pattern'" in error.reason


async def test_a_look_around_pattern_is_checked_after_generation_and_reasked(tmp_path: Path) -> None:
    extractor = extractor_for(tmp_path, "account", ACCOUNT, ['{"handle": "admin"}', '{"handle": "bob"}'])
    result = await extractor.aextract("account", "The account admin was renamed bob.")
    assert result.data == {"handle": "bob"}
    assert any(e.startswith("/handle: ") and "does not match" in e for e in result.attempts[0].errors)


def test_a_pattern_that_backtracks_fails_within_its_time_bound(tmp_path: Path) -> None:
    evil = "^(?=x)?(\\w|\\w\\w)*\\d$"  # exponential in a backtracking engine; RE2 cannot run the (?=x)
    task = load(tmp_path, "slow", {"type": "object", "properties": {"w": {"type": "string", "pattern": evil}}})
    started = time.perf_counter()
    errors = [e.message for e in task.validator.iter_errors({"w": "a" * 40 + "!"})]
    assert time.perf_counter() - started < 20 * patterns.MATCH_TIMEOUT_S
    assert len(errors) == 1 and "cannot be checked in time" in errors[0]
    assert task.validator.is_valid({"w": "ab1"})


def test_a_pattern_no_engine_compiles_is_refused(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a+)(b"}}}
    error = refused(tmp_path, "broken", schema)
    assert error.pointer == "#/properties/a/pattern" or "pattern" in error.reason


# --- a long pattern -------------------------------------------------------------------------------

CODES = sorted({a + b + c for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" for b in "AEIOU" for c in "NRST"})
LONG = "^(" + "|".join(CODES)[:1100].rsplit("|", 1)[0] + ")$"


def test_a_pattern_of_1100_characters_loads_and_is_decoded(tmp_path: Path) -> None:
    assert len(LONG) > 1_000  # the old limit
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": LONG}}, "required": ["code"]}
    task = load(tmp_path, "codes", schema)
    assert LONG in json.dumps(task.engine_schema)  # the grammar holds decoding to it
    assert task.validator.is_valid({"code": "BAN"}) and not task.validator.is_valid({"code": "ZZZ"})


def test_a_pattern_over_the_length_cap_is_refused_naming_it(tmp_path: Path) -> None:
    huge = "^(" + "|".join(f"w{i}" for i in range(patterns.MAX_PATTERN_CHARS // 3)) + ")$"
    error = refused(tmp_path, "huge", {"type": "object", "properties": {"a": {"type": "string", "pattern": huge}}})
    assert error.pointer == "#/properties/a/pattern" and str(patterns.MAX_PATTERN_CHARS) in error.reason


# --- minProperties over optional properties -------------------------------------------------------

CONTACT = {
    "type": "object",
    "$defs": {"ways": {"properties": {"email": {"type": "string"}, "phone": {"type": "string"}}}},
    "allOf": [{"$ref": "#/$defs/ways"}],
    "minProperties": 1,
}


def test_min_properties_over_optional_properties_loads_with_a_warning(tmp_path: Path) -> None:
    task = load(tmp_path, "contact", CONTACT)
    assert any("#/minProperties" in w and "checked after generation only" in w for w in task.warnings)
    assert not task.validator.is_valid({}) and task.validator.is_valid({"phone": "555"})


async def test_min_properties_is_checked_after_generation_and_reasked(tmp_path: Path) -> None:
    extractor = extractor_for(tmp_path, "contact", CONTACT, ["{}", '{"phone": "555 0100"}'])
    result = await extractor.aextract("contact", "Call 555 0100.")
    assert result.data == {"phone": "555 0100"}
    assert any("should be non-empty" in e or "fewer" in e for e in result.attempts[0].errors), result.attempts


# --- a recursive $ref with keywords beside it -----------------------------------------------------

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 20},
                "child": {"$ref": "#/$defs/node", "description": "the next one down", "required": ["name"]},
            },
        }
    },
    "$ref": "#/$defs/node",
}


def test_a_recursive_ref_with_keywords_beside_it_loads_with_a_warning(tmp_path: Path) -> None:
    task = load(tmp_path, "tree", TREE)
    warned = [w for w in task.warnings if "checked after generation only" in w]
    assert len(warned) == 1 and "#/$defs/node/properties/child/required" in warned[0], task.warnings
    assert not task.validator.is_valid({"name": "a", "child": {}})
    assert task.validator.is_valid({"name": "a", "child": {"name": "b"}})


async def test_keywords_beside_a_recursive_ref_are_checked_after_generation_and_reasked(tmp_path: Path) -> None:
    answers = ['{"name": "root", "child": {}}', '{"name": "root", "child": {"name": "leaf"}}']
    extractor = extractor_for(tmp_path, "tree", TREE, answers)
    result = await extractor.aextract("tree", "The root has one leaf.")
    assert result.data == {"name": "root", "child": {"name": "leaf"}}
    assert any(e.startswith("/child: ") and "'name' is a required property" in e for e in result.attempts[0].errors)


# --- what no value satisfies ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"properties": {"n": {"type": "integer", "minimum": 5, "maximum": 3}}, "required": ["n"]}, "#/properties/n"),
        (
            {"properties": {"s": {"type": "string", "minLength": 5, "maxLength": 3}}, "required": ["s"]},
            "#/properties/s",
        ),
        ({"properties": {"a": {"type": "string"}}, "required": ["a", "b"], "additionalProperties": False}, "#"),
    ],
    ids=["minimum-over-maximum", "minLength-over-maxLength", "required-but-not-allowed"],
)
def test_a_schema_no_value_satisfies_is_refused_with_the_reason(
    tmp_path: Path, schema: dict[str, Any], pointer: str
) -> None:
    error = refused(tmp_path, "never", {"type": "object", **schema})
    assert error.pointer == pointer
    assert "no value satisfies this schema" in error.reason and "unsatisfiable" in error.reason


def test_an_optional_field_no_value_satisfies_loads(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 3}, "m": {}}}
    task = load(tmp_path, "optional", schema)
    assert task.validator.is_valid({"m": 1}) and not task.validator.is_valid({"n": 4})


def nested_foos(*, required: bool) -> dict[str, Any]:
    """A draft-07 ``Foo`` whose ``childFoos`` is an ``allOf`` of ``Foo`` and more (JSONSchemaBench's o17683)."""
    child = {"allOf": [{"$ref": "#/definitions/Foo"}, {"$ref": "#/definitions/ChildFoo"}]}
    foo = {"type": "object", "properties": {"name": {"type": "string"}, "childFoos": child}}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"ChildFoo": {"type": "object", "required": ["name"]}, "Foo": foo},
        "type": "object",
        "properties": {"Foo": {"$ref": "#/definitions/Foo"}},
        "required": ["Foo"],
        **(
            {"definitions": {"ChildFoo": {"type": "object"}, "Foo": {**foo, "required": ["childFoos"]}}}
            if required
            else {}
        ),
    }


def test_a_recursive_ref_inside_an_allof_loads_with_the_other_branches_checked_after(tmp_path: Path) -> None:
    task = load(tmp_path, "foos", nested_foos(required=False))
    assert any("/allOf" in w and "checked after generation only" in w for w in task.warnings), task.warnings
    assert not task.validator.is_valid({"Foo": {"childFoos": {}}})  # ChildFoo requires a name
    assert task.validator.is_valid({"Foo": {"childFoos": {"name": "b"}}})


def test_a_schema_no_finite_value_satisfies_is_refused_with_the_reason(tmp_path: Path) -> None:
    # Foo requires childFoos, which is a Foo: every answer would need Foos inside Foos without end
    error = refused(tmp_path, "foos", nested_foos(required=True))
    assert "no finite value satisfies this schema" in error.reason and error.pointer.endswith("/Foo")
