"""Parsing one raw model output: JSON, repair (flagged), validation with JSON pointers. No engine."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema.validators import Draft202012Validator

from extractor.parsing import Parsed, drop_repeats, parse, parse_and_validate, validate

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "tags"],
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
        "a/b": {"type": "string"},
    },
}
VALIDATOR = Draft202012Validator(SCHEMA)


# --- parse -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ('{"name": "Ann", "tags": []}', {"name": "Ann", "tags": []}),
        ('  {"name": "北京", "tags": ["🎉"]}\n', {"name": "北京", "tags": ["🎉"]}),
        ("[1, 2]", [1, 2]),
        ("null", None),
        ('""', ""),
    ],
)
def test_valid_json_is_not_repaired(raw: str, value: Any) -> None:
    parsed = parse(raw)
    assert parsed == Parsed(value=value, repaired=False, errors=())
    assert parsed.ok


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ('{"name": "Ann", "tags": ["a", "b', {"name": "Ann", "tags": ["a", "b"]}),
        ('{"name": "Ann"', {"name": "Ann"}),
        ('{"name": "Ann", "tags": [],}', {"name": "Ann", "tags": []}),
        ('Sure! Here it is: {"name": "Ann", "tags": []} Hope that helps.', {"name": "Ann", "tags": []}),
        ('```json\n{"name": "Ann", "tags": []}\n```', {"name": "Ann", "tags": []}),
    ],
    ids=["truncated-array", "truncated-object", "trailing-comma", "prose-around", "code-fence"],
)
def test_broken_json_is_repaired_and_flagged(raw: str, value: Any) -> None:
    parsed = parse(raw)
    assert parsed.ok
    assert parsed.repaired is True
    assert parsed.value == value


@pytest.mark.parametrize("raw", ["", "   ", "Sorry, I cannot help with that.", "The answer is 42"])
def test_prose_without_json_is_an_error_not_an_exception(raw: str) -> None:
    parsed = parse(raw)
    assert not parsed.ok
    assert parsed.value is None
    assert len(parsed.errors) == 1
    assert parsed.errors[0].startswith("output is not valid JSON")
    assert "could not be repaired" in parsed.errors[0]


def test_deep_nesting_is_an_error_not_an_exception() -> None:
    parsed = parse("[" * 100_000)
    assert parsed == Parsed(
        value=None, repaired=False, errors=("output nests more than 64 levels deep; answer with flat JSON",)
    )


# --- validate --------------------------------------------------------------------------------


def test_valid_value_has_no_errors() -> None:
    assert validate(VALIDATOR, {"name": "Ann", "tags": ["x"], "age": 3}) == []


def test_errors_carry_json_pointers() -> None:
    errors = validate(VALIDATOR, {"name": "Annabel", "tags": ["ok", 7], "a/b": 1})
    assert errors == [
        "/name: 'Annabel' is too long",
        "/tags/1: 7 is not of type 'string'",
        "/a~1b: 1 is not of type 'string'",
    ]


def test_root_errors_use_slash() -> None:
    assert validate(VALIDATOR, {"tags": []}) == ["/: 'name' is a required property"]
    assert validate(VALIDATOR, []) == ["/: [] is not of type 'object'"]


def test_errors_follow_document_order() -> None:
    value = {"tags": [1] * 12, "name": 5, "age": -1}
    errors = validate(VALIDATOR, value)
    pointers = [e.split(":", 1)[0] for e in errors]
    # Keys as they appear in the output (not alphabetical); list indices numerically (2 before 10).
    assert pointers == [f"/tags/{i}" for i in range(12)] + ["/name", "/age"]


def test_parent_error_comes_before_its_children() -> None:
    errors = validate(VALIDATOR, {"tags": [3], "extra": 1})
    assert errors[0].startswith("/: ")
    assert errors[-1] == "/tags/0: 3 is not of type 'string'"


# --- parse_and_validate ----------------------------------------------------------------------


def test_parse_and_validate_valid() -> None:
    parsed = parse_and_validate('{"name": "Ann", "tags": []}', VALIDATOR)
    assert parsed == Parsed(value={"name": "Ann", "tags": []}, repaired=False, errors=())


def test_parse_and_validate_repaired_and_valid() -> None:
    parsed = parse_and_validate('{"name": "Ann", "tags": ["a"', VALIDATOR)
    assert parsed.ok and parsed.repaired
    assert parsed.value == {"name": "Ann", "tags": ["a"]}


def test_parse_and_validate_repaired_but_invalid_keeps_value_and_flag() -> None:
    parsed = parse_and_validate('{"name": "Annabel"', VALIDATOR)
    assert parsed.repaired
    assert parsed.value == {"name": "Annabel"}
    assert parsed.errors == ("/: 'tags' is a required property", "/name: 'Annabel' is too long")


def test_parse_and_validate_unparseable_skips_validation() -> None:
    parsed = parse_and_validate("no json here", VALIDATOR)
    assert not parsed.ok
    assert parsed.value is None
    assert len(parsed.errors) == 1
    assert "not valid JSON" in parsed.errors[0]


# --- drop_repeats ------------------------------------------------------------------------------

UNIQUE = Draft202012Validator(
    {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "uniqueItems": True, "items": {"type": "string"}},
            "rows": {
                "type": "array",
                "uniqueItems": True,
                "items": {"type": "object", "properties": {"n": {}, "also": {"type": "array", "uniqueItems": True}}},
            },
            "free": {"type": "array"},
        },
    }
)


def test_repeats_are_dropped_where_the_schema_says_unique_items_and_kept_elsewhere() -> None:
    value = {"tags": ["a", "b", "a", "a"], "free": ["x", "x"]}
    kept, notes = drop_repeats(UNIQUE, value)
    assert kept == {"tags": ["a", "b"], "free": ["x", "x"]}  # the first of each, in order
    assert notes == ["/tags: 2 repeated items dropped (uniqueItems)"]
    assert value["tags"] == ["a", "b", "a", "a"]  # the answer as written is left as it was
    assert drop_repeats(UNIQUE, kept) == (kept, [])


def test_repeats_are_equal_as_json_schema_compares_and_inner_arrays_go_first() -> None:
    rows = [{"n": 1, "also": [2, 2.0]}, {"n": 1.0, "also": [2]}, {"n": True, "also": []}]
    kept, notes = drop_repeats(UNIQUE, {"rows": rows})
    # [2, 2.0] holds one item once dropped, so the second row repeats the first; true is not 1
    assert kept == {"rows": [{"n": 1, "also": [2]}, {"n": True, "also": []}]}
    assert notes == [
        "/rows/0/also: 1 repeated items dropped (uniqueItems)",
        "/rows: 1 repeated items dropped (uniqueItems)",
    ]
    assert UNIQUE.is_valid(kept)
