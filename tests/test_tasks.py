"""Catalog loading: every load-time check reports file + JSON pointer, and a bad task never spoils the rest."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from extractor.catalog.tasks import Catalog, load_task
from extractor.config import repo_root
from extractor.errors import TaskError, UnknownTaskError

GOOD = "good"
BAD = "bad"

PROMPT = (
    "Extract the fields below as one JSON object.\n"
    "{% for f in fields %}- {{ f.name }} ({{ f.type }}): {{ f.description }}\n{% endfor %}"
    "Text: {{ text }}\n"
    "{% if feedback %}Your previous answer {{ previous }} has problems:\n"
    "{% for p in feedback %}- {{ p }}\n{% endfor %}{% endif %}"
)


def base_schema() -> dict[str, Any]:
    """A small valid task schema; each test breaks a copy of it."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "City",
        "type": "object",
        "properties": {
            "city": {"type": ["string", "null"], "maxLength": 40, "description": "the city named"},
            "when": {"type": ["string", "null"], "description": "a normalized date", "x-grounded": False},
        },
        "required": ["city", "when"],
        "additionalProperties": False,
        "x-extractor": {
            "max_attempts": 2,
            "examples": [
                {"text": "Meet me in Paris on Friday", "output": {"city": "Paris", "when": "2024-05-03"}},
                {"text": "See you soon", "output": {"city": None, "when": None}},
            ],
        },
    }


def write_task(root: Path, name: str, schema: Any, prompt: str | None = PROMPT, suffix: str = ".j2") -> Path:
    (root / "schemas").mkdir(parents=True, exist_ok=True)
    (root / "prompts").mkdir(parents=True, exist_ok=True)
    path = root / "schemas" / f"{name}.json"
    if isinstance(schema, bytes):
        path.write_bytes(schema)
    elif isinstance(schema, str):
        path.write_text(schema, encoding="utf-8")
    else:
        path.write_text(json.dumps(schema, ensure_ascii=False, indent=2), encoding="utf-8")
    if prompt is not None:
        (root / "prompts" / f"{name}{suffix}").write_text(prompt, encoding="utf-8")
    return path


def load_with_good(
    tmp_path: Path, schema: Any, *, name: str = BAD, prompt: str | None = PROMPT, backend: Any = "guidance"
) -> tuple[Catalog, TaskError]:
    """A catalog with one good task and one bad one: the bad one is reported alone, the good one loads."""
    write_task(tmp_path, GOOD, base_schema())
    write_task(tmp_path, name, schema, prompt)
    catalog = Catalog.load(tmp_path, backend=backend)
    assert catalog.names() == [GOOD], catalog.errors
    assert len(catalog.errors) == 1, catalog.errors
    assert catalog.get(GOOD).name == GOOD
    return catalog, catalog.errors[0]


def broken(edit: Any) -> dict[str, Any]:
    schema = copy.deepcopy(base_schema())
    edit(schema)
    return schema


def assert_names_schema(error: TaskError, tmp_path: Path, pointer: str, *fragments: str) -> None:
    expected_file = str(tmp_path / "schemas" / f"{BAD}.json")
    assert error.path == expected_file
    assert error.pointer == pointer
    assert str(error).startswith(f"{expected_file}: {pointer}: " if pointer else f"{expected_file}: ")
    for fragment in fragments:
        assert fragment in error.reason


# --- the good task alone ---------------------------------------------------------------------


def test_good_task_loads_with_settings_examples_and_fields(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, base_schema())
    catalog = Catalog.load(tmp_path)
    assert catalog.errors == []
    task = catalog.get(GOOD)
    assert task.settings.max_attempts == 2
    assert task.settings.grounding == "flag"
    assert [e.text for e in task.examples] == ["Meet me in Paris on Friday", "See you soon"]
    assert [(f.name, f.type, f.required) for f in task.fields] == [
        ("city", "string or null", True),
        ("when", "string or null", True),
    ]
    assert task.ungrounded == frozenset({"/when"})
    assert task.warnings == ()
    assert task.prompt_path == tmp_path / "prompts" / "good.j2"


def test_missing_schemas_folder_is_one_error(tmp_path: Path) -> None:
    catalog = Catalog.load(tmp_path)
    assert catalog.tasks == {}
    assert len(catalog.errors) == 1
    assert catalog.errors[0].path == str(tmp_path / "schemas")
    assert "no schemas/ folder" in str(catalog.errors[0])


# --- schema checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "pointer", "fragment"),
    [
        (lambda s: s["properties"]["city"].update(type="strin"), "#/properties/city/type", "'strin'"),
        (lambda s: s["properties"]["city"].update(maxLength=-1), "#/properties/city/maxLength", "-1"),
        (lambda s: s["properties"]["city"].update(pattern="("), "#/properties/city/pattern", "regex"),
        (lambda s: s.update(required="city"), "#/required", "'city'"),
    ],
    ids=["bad-type", "negative-maxLength", "bad-regex", "required-not-array"],
)
def test_invalid_schema_names_file_and_pointer(tmp_path: Path, edit: Any, pointer: str, fragment: str) -> None:
    _, error = load_with_good(tmp_path, broken(edit))
    assert_names_schema(error, tmp_path, pointer, "invalid schema", fragment)


def test_unknown_draft_is_rejected(tmp_path: Path) -> None:
    schema = broken(lambda s: s.update({"$schema": "http://json-schema.org/draft-03/schema#"}))
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/$schema", "unknown $schema", "draft-04")


@pytest.mark.parametrize(
    "ref",
    ["file:///etc/passwd", "http://example.com/schema.json", "https://example.com/s#/$defs/x", "other.json#/a"],
)
def test_ref_outside_the_schema_is_rejected(tmp_path: Path, ref: str) -> None:
    schema = broken(lambda s: s["properties"].update(secret={"$ref": ref}))
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/properties/secret/$ref", "points outside this schema", repr(ref))


def test_external_ref_in_defs_and_items_is_rejected(tmp_path: Path) -> None:
    schema = broken(
        lambda s: s.update(
            {
                "$defs": {"item": {"type": "object", "properties": {"x": {"$ref": "file:///etc/passwd"}}}},
                "properties": {**s["properties"], "things": {"type": "array", "items": {"$ref": "#/$defs/item"}}},
            }
        )
    )
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/$defs/item/properties/x/$ref", "points outside")


@pytest.mark.parametrize(
    "ref",
    ["#/$defs/missing", "#/properties/nope", "#nope", "#/properties/city/type", "#/required/0"],
    ids=["missing-def", "missing-property", "missing-anchor", "points-at-a-string", "points-into-a-list"],
)
def test_local_ref_that_does_not_resolve_is_rejected(tmp_path: Path, ref: str) -> None:
    schema = broken(lambda s: s["properties"].update(other={"$ref": ref}))
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/properties/other/$ref", "does not resolve", repr(ref))


def test_local_refs_that_resolve_load(tmp_path: Path) -> None:
    schema = base_schema()
    schema["$defs"] = {
        "a b": {"type": "string"},
        "x-named": {"$anchor": "place", "type": ["string", "null"]},
        "choice": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    }
    schema["properties"]["spaced"] = {"$ref": "#/$defs/a%20b"}
    schema["properties"]["anchored"] = {"$ref": "#place"}
    schema["properties"]["branch"] = {"$ref": "#/$defs/choice/anyOf/0"}
    write_task(tmp_path, GOOD, schema)
    catalog = Catalog.load(tmp_path)
    assert catalog.errors == []
    task = catalog.get(GOOD)
    assert task.validator.is_valid({"city": None, "when": None, "spaced": "x", "anchored": None, "branch": "y"})
    assert not task.validator.is_valid({"city": None, "when": None, "branch": 3})


def test_ref_loop_without_progress_is_rejected_not_a_crash(tmp_path: Path) -> None:
    schema = broken(
        lambda s: s.update(
            {
                "$defs": {"loop": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/loop"}]}},
                "properties": {**s["properties"], "x": {"$ref": "#/$defs/loop"}},
            }
        )
    )
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/$defs/loop/anyOf/1/$ref", "loops back to #/$defs/loop")


def test_recursive_ref_through_items_is_allowed(tmp_path: Path) -> None:
    schema = base_schema()
    schema["$defs"] = {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
        }
    }
    schema["properties"]["tree"] = {"$ref": "#/$defs/node"}
    write_task(tmp_path, GOOD, schema)
    catalog = Catalog.load(tmp_path)
    assert catalog.errors == []
    assert catalog.get(GOOD).validator.is_valid(
        {"city": None, "when": None, "tree": {"name": "a", "children": [{"name": "b", "children": []}]}}
    )


def test_nested_id_changes_the_base_of_refs_below_it(tmp_path: Path) -> None:
    # Resolved once with the draft's rules, then dropped: every ref left is a local pointer.
    schema = base_schema()
    schema["properties"]["place"] = {
        "$id": "http://example.com/place",
        "$defs": {"name": {"type": "string", "maxLength": 5}},
        "type": "object",
        "properties": {"name": {"$ref": "place#/$defs/name"}},
    }
    write_task(tmp_path, GOOD, schema)
    task = Catalog.load(tmp_path).get(GOOD)
    assert task.schema["properties"]["place"]["properties"]["name"] == {"$ref": "#/properties/place/$defs/name"}
    assert not task.validator.is_valid({"city": None, "when": None, "place": {"name": "toolong"}})


def test_top_level_array_is_decoded_wrapped(tmp_path: Path) -> None:
    schema = broken(lambda s: s.update(type="array", items={"type": "string"}))
    schema["x-extractor"]["examples"] = [{"text": "Paris and Rome", "output": ["Paris", "Rome"]}]
    write_task(tmp_path, GOOD, schema)
    task = Catalog.load(tmp_path).get(GOOD)
    assert task.wrapped == "value" and task.schema["required"] == ["value"]
    assert task.examples[0].output == {"value": ["Paris", "Rome"]}


@pytest.mark.parametrize("document", [[], "a string", 3, None], ids=["list", "string", "number", "null"])
def test_top_level_json_not_an_object(tmp_path: Path, document: Any) -> None:
    _, error = load_with_good(tmp_path, json.dumps(document))
    assert_names_schema(error, tmp_path, "#", "must be a JSON object")


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    text = '{\n  "type": "object",\n  "properties": {,}\n}\n'
    _, error = load_with_good(tmp_path, text)
    assert_names_schema(error, tmp_path, "", "invalid JSON", "line 3 column 18")


def test_non_utf8_schema_file(tmp_path: Path) -> None:
    raw = json.dumps(base_schema(), ensure_ascii=False).replace("the city named", "café").encode("latin-1")
    _, error = load_with_good(tmp_path, raw)
    assert_names_schema(error, tmp_path, "", "not UTF-8")


def test_unreadable_schema_path_is_reported_not_raised(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, base_schema())
    (tmp_path / "schemas" / f"{BAD}.json").mkdir()
    (tmp_path / "prompts" / f"{BAD}.j2").write_text(PROMPT, encoding="utf-8")
    catalog = Catalog.load(tmp_path)
    assert catalog.names() == [GOOD]
    assert [e.path for e in catalog.errors] == [str(tmp_path / "schemas" / f"{BAD}.json")]
    assert "cannot read" in catalog.errors[0].reason


# --- task names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Bad Name", "UPPER", "dots.in.name", "x" * 65, "ünï"])
def test_task_name_must_match_pattern(tmp_path: Path, name: str) -> None:
    _, error = load_with_good(tmp_path, base_schema(), name=name)
    assert error.path == str(tmp_path / "schemas" / f"{name}.json")
    assert repr(name) in error.reason
    assert "^[a-z0-9_-]{1,64}$" in error.reason


@pytest.mark.parametrize("name", ["a", "snake_case-2", "x" * 64])
def test_task_names_that_match_load(tmp_path: Path, name: str) -> None:
    write_task(tmp_path, name, base_schema())
    assert Catalog.load(tmp_path).names() == [name]


# --- prompts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "fragment"),
    [
        ("Text: {{ text.nope() }}", "does not render"),
        ("Text: {{ text }} {{ missing }}", "'missing' is undefined"),
        ("{{ text }}{% if feedback %}{{ previous.nope() }}{% endif %}", "does not render"),
        ("{{ text }} {{ ''.__class__.__mro__ }}", "does not render"),
    ],
    ids=["bad-method", "undefined-variable", "fails-only-on-re-ask", "sandbox"],
)
def test_prompt_that_does_not_render(tmp_path: Path, prompt: str, fragment: str) -> None:
    _, error = load_with_good(tmp_path, base_schema(), prompt=prompt)
    assert error.path == str(tmp_path / "prompts" / f"{BAD}.j2")
    assert str(error).startswith(str(tmp_path / "prompts" / f"{BAD}.j2"))
    assert fragment in error.reason


@pytest.mark.parametrize("prompt", ["{% if %}x{% endif %}", "{{ text ", "{% for f in fields %}{{ f.name }}"])
def test_prompt_syntax_error_names_prompt_file_and_line(tmp_path: Path, prompt: str) -> None:
    _, error = load_with_good(tmp_path, base_schema(), prompt=prompt)
    assert error.path == str(tmp_path / "prompts" / f"{BAD}.j2")
    assert error.pointer == "line 1"
    assert "template syntax error" in error.reason


def test_non_utf8_prompt(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, base_schema())
    write_task(tmp_path, BAD, base_schema(), prompt=None)
    (tmp_path / "prompts" / f"{BAD}.j2").write_bytes("Texte : {{ text }} café".encode("latin-1"))
    catalog = Catalog.load(tmp_path)
    assert catalog.names() == [GOOD]
    assert catalog.errors[0].path == str(tmp_path / "prompts" / f"{BAD}.j2")
    assert "not UTF-8" in catalog.errors[0].reason


def test_missing_prompt_file(tmp_path: Path) -> None:
    _, error = load_with_good(tmp_path, base_schema(), prompt=None)
    assert error.path == str(tmp_path / "prompts" / f"{BAD}.j2")
    assert "no prompt template" in error.reason


def test_missing_prompts_folder_reports_each_task(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "one.json").write_text(json.dumps(base_schema()), encoding="utf-8")
    catalog = Catalog.load(tmp_path)
    assert catalog.tasks == {}
    assert [e.path for e in catalog.errors] == [str(tmp_path / "prompts" / "one.j2")]


def test_two_prompt_files_for_one_task(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, base_schema())
    write_task(tmp_path, BAD, base_schema())
    (tmp_path / "prompts" / f"{BAD}.txt").write_text(PROMPT, encoding="utf-8")
    catalog = Catalog.load(tmp_path)
    assert catalog.names() == [GOOD]
    assert len(catalog.errors) == 1
    error = catalog.errors[0]
    assert error.path == str(tmp_path / "prompts" / f"{BAD}.txt")
    assert "more than one prompt template" in error.reason
    assert repr(BAD) in error.reason


@pytest.mark.parametrize("suffix", [".j2", ".jinja", ".jinja2", ".md", ".txt"])
def test_each_prompt_suffix_is_found(tmp_path: Path, suffix: str) -> None:
    write_task(tmp_path, GOOD, base_schema(), suffix=suffix)
    catalog = Catalog.load(tmp_path)
    assert catalog.errors == []
    assert catalog.get(GOOD).prompt_path.suffix == suffix


# --- keywords the grammar backend would silently skip ----------------------------------------


def _with_tags(strict: bool = True, **tags: Any) -> dict[str, Any]:
    schema = broken(lambda s: s["properties"].update(tags={"type": "array", "items": {"type": "string"}, **tags}))
    if strict:
        schema.setdefault("x-extractor", {})["strict_enforcement"] = True
    return schema


@pytest.mark.parametrize("backend", ["guidance", "xgrammar"])
def test_unique_items_is_rejected_on_both_backends_under_strict_enforcement(tmp_path: Path, backend: str) -> None:
    _, error = load_with_good(tmp_path, _with_tags(uniqueItems=True), backend=backend)
    assert_names_schema(
        error, tmp_path, "#/properties/tags/uniqueItems", backend, "'uniqueItems'", "strict_enforcement"
    )


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` refusing, not warning about, keywords decoding cannot enforce."""
    schema.setdefault("x-extractor", {})["strict_enforcement"] = True
    return schema


def _all_of_schema() -> dict[str, Any]:
    return broken(
        lambda s: s["properties"].update(
            code={"allOf": [{"type": "string"}, {"maxLength": 5}]},
        )
    )


def test_multi_branch_all_of_is_rejected_by_xgrammar(tmp_path: Path) -> None:
    _, error = load_with_good(tmp_path, strict(_all_of_schema()), backend="xgrammar")
    assert_names_schema(error, tmp_path, "#/properties/code/allOf", "single-branch 'allOf'")


def test_multi_branch_all_of_loads_with_guidance(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, _all_of_schema())
    catalog = Catalog.load(tmp_path, backend="guidance")
    assert catalog.errors == []
    assert catalog.get(GOOD).warnings == ()


def test_single_branch_all_of_loads_with_xgrammar(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, broken(lambda s: s["properties"].update(code={"allOf": [{"type": "string"}]})))
    assert Catalog.load(tmp_path, backend="xgrammar").errors == []


def _pattern_and_length() -> dict[str, Any]:
    return broken(lambda s: s["properties"].update(code={"type": "string", "pattern": "^[A-Z]+$", "maxLength": 8}))


def test_pattern_with_max_length_is_rejected_by_xgrammar(tmp_path: Path) -> None:
    _, error = load_with_good(tmp_path, strict(_pattern_and_length()), backend="xgrammar")
    assert_names_schema(error, tmp_path, "#/properties/code/pattern", "minLength/maxLength")


def test_pattern_with_max_length_loads_with_guidance(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, _pattern_and_length())
    catalog = Catalog.load(tmp_path, backend="guidance")
    assert catalog.errors == []
    assert catalog.get(GOOD).warnings == ()


def _multiple_of() -> dict[str, Any]:
    return broken(lambda s: s["properties"].update(count={"type": "integer", "multipleOf": 5}))


def test_multiple_of_is_rejected_by_xgrammar_only(tmp_path: Path) -> None:
    _, error = load_with_good(tmp_path, strict(_multiple_of()), backend="xgrammar")
    assert_names_schema(error, tmp_path, "#/properties/count/multipleOf", "'multipleOf'")
    other = tmp_path / "other"
    write_task(other, GOOD, _multiple_of())
    assert Catalog.load(other, backend="guidance").errors == []


def test_unenforced_keyword_in_defs_is_found(tmp_path: Path) -> None:
    schema = broken(
        lambda s: s.update(
            {
                "$defs": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
                "properties": {**s["properties"], "tags": {"$ref": "#/$defs/tags"}},
            }
        )
    )
    schema.setdefault("x-extractor", {})["strict_enforcement"] = True
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/$defs/tags/uniqueItems")


@pytest.mark.parametrize(
    ("backend", "setting"), [("guidance", {}), ("xgrammar", {}), ("guidance", {"allow_unenforced": True})]
)
def test_an_unenforced_keyword_is_a_warning_by_default(tmp_path: Path, backend: str, setting: dict[str, Any]) -> None:
    schema = _with_tags(strict=False, contains={"const": "a"})
    schema.setdefault("x-extractor", {}).update(setting)
    write_task(tmp_path, GOOD, schema)
    catalog = Catalog.load(tmp_path, backend=backend)
    assert catalog.errors == []
    task = catalog.get(GOOD)
    assert task.settings.unenforced_allowed is True
    # one warning, whichever backend: what llguidance refuses is left out of decoding, so the grammar
    # compiled at load holds no unenforced keyword to warn about twice
    assert len(task.warnings) == 1
    warning = task.warnings[0]
    assert str(tmp_path / "schemas" / "good.json") in warning
    assert "#/properties/tags/contains" in warning
    assert "checked after generation only" in warning
    # Still enforced by validation after generation.
    assert not task.validator.is_valid({"city": None, "when": None, "tags": ["b"]})


@pytest.mark.parametrize("backend", ["guidance", "xgrammar"])
def test_unique_items_is_no_warning_since_repeats_are_dropped(tmp_path: Path, backend: str) -> None:
    write_task(tmp_path, GOOD, _with_tags(strict=False, uniqueItems=True))
    task = Catalog.load(tmp_path, backend=backend).get(GOOD)
    # not enforced while decoding, but an answer's repeated tags are dropped (extractor.parsing.drop_repeats)
    assert task.warnings == () and task.drops_repeats
    assert backend == "xgrammar" or "uniqueItems" not in json.dumps(task.engine_schema)  # xgrammar skips it itself


def test_allow_unenforced_false_keeps_the_error_and_both_settings_are_refused(tmp_path: Path) -> None:
    schema = _with_tags(strict=False, uniqueItems=True)
    schema.setdefault("x-extractor", {})["allow_unenforced"] = False
    _, error = load_with_good(tmp_path, schema)
    assert error.pointer == "#/properties/tags/uniqueItems"
    both = _with_tags(uniqueItems=True)
    both["x-extractor"]["allow_unenforced"] = True
    _, error = load_with_good(tmp_path / "both", both)
    assert "not both" in error.reason and error.pointer == "#/x-extractor/strict_enforcement"


# --- worked examples -------------------------------------------------------------------------


def test_example_output_that_does_not_validate(tmp_path: Path) -> None:
    schema = broken(lambda s: s["x-extractor"]["examples"][0]["output"].update(city=42))
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/x-extractor/examples/0/output/city", "example does not match the schema")


def test_example_output_missing_a_required_field(tmp_path: Path) -> None:
    schema = broken(lambda s: s["x-extractor"]["examples"][1]["output"].pop("when"))
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/x-extractor/examples/1/output", "'when' is a required property")


def test_example_value_not_in_its_text(tmp_path: Path) -> None:
    schema = broken(lambda s: s["x-extractor"]["examples"][0]["output"].update(city="London"))
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/x-extractor/examples/0/output/city", "'London'", "does not occur")


def test_example_value_in_an_array_not_in_its_text(tmp_path: Path) -> None:
    schema = _with_tags()
    schema["x-extractor"]["examples"] = [
        {"text": "red and blue", "output": {"city": None, "when": None, "tags": ["red", "green"]}}
    ]
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, "#/x-extractor/examples/0/output/tags/1", "'green'")


def test_ungrounded_field_is_exempt_from_the_example_text_check(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, base_schema())  # "when": "2024-05-03" is not in "Meet me in Paris on Friday"
    assert Catalog.load(tmp_path).errors == []
    grounded = broken(lambda s: s["properties"]["when"].pop("x-grounded"))
    _, error = load_with_good(tmp_path / "again", grounded)
    assert error.pointer == "#/x-extractor/examples/0/output/when"


def test_ungrounded_field_through_ref_in_array_items_is_exempt(tmp_path: Path) -> None:
    schema = base_schema()
    schema["$defs"] = {
        "cond": {
            "type": "object",
            "properties": {"op": {"enum": ["eq", "lt"], "x-grounded": False}, "value": {"type": "string"}},
            "required": ["op", "value"],
        }
    }
    schema["properties"]["conds"] = {"type": "array", "items": {"$ref": "#/$defs/cond"}}
    schema["x-extractor"]["examples"] = [
        {"text": "under 5 euros", "output": {"city": None, "when": None, "conds": [{"op": "lt", "value": "5 euros"}]}}
    ]
    write_task(tmp_path, GOOD, schema)
    catalog = Catalog.load(tmp_path)
    assert catalog.errors == []
    assert catalog.get(GOOD).ungrounded == frozenset({"/when", "/conds/op"})


def test_example_value_with_case_difference_is_accepted(tmp_path: Path) -> None:
    schema = broken(lambda s: s["x-extractor"]["examples"][0]["output"].update(city="paris"))
    write_task(tmp_path, GOOD, schema)
    assert Catalog.load(tmp_path).errors == []


@pytest.mark.parametrize(
    ("example", "pointer"),
    [
        ({"text": "x"}, "#/x-extractor/examples/0"),
        ({"text": "", "output": {}}, "#/x-extractor/examples/0/text"),
        ({"text": "x", "output": {}, "note": "n"}, "#/x-extractor/examples/0"),
    ],
    ids=["no-output", "empty-text", "unknown-key"],
)
def test_malformed_example_entry(tmp_path: Path, example: dict[str, Any], pointer: str) -> None:
    schema = broken(lambda s: s["x-extractor"].update(examples=[example]))
    _, error = load_with_good(tmp_path, schema)
    assert_names_schema(error, tmp_path, pointer)


# --- x-extractor settings --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "pointer", "fragment"),
    [
        ({"max_attempts": 5}, "#/x-extractor/max_attempts", "5 is greater than the maximum of 3"),
        ({"max_attempts": 0}, "#/x-extractor/max_attempts", "0 is less than the minimum of 1"),
        ({"temperature": 3}, "#/x-extractor/temperature", "maximum"),
        ({"temperature": True}, "#/x-extractor/temperature", "not of type 'number'"),
        ({"max_tokens": 1.5}, "#/x-extractor/max_tokens", "not of type 'integer'"),
        ({"grounding": "loose"}, "#/x-extractor/grounding", "'loose'"),
        ({"allow_unenforced": "yes"}, "#/x-extractor/allow_unenforced", "'boolean'"),
        ({"retries": 2}, "#/x-extractor", "'retries' was unexpected"),
    ],
    ids=[
        "max-attempts-high",
        "max-attempts-zero",
        "temperature",
        "temperature-bool",
        "max-tokens",
        "grounding",
        "allow-unenforced",
        "unknown-key",
    ],
)
def test_bad_settings_name_the_pointer(tmp_path: Path, settings: dict[str, Any], pointer: str, fragment: str) -> None:
    _, error = load_with_good(tmp_path, broken(lambda s: s["x-extractor"].update(settings)))
    assert_names_schema(error, tmp_path, pointer, fragment)


def test_settings_block_not_an_object(tmp_path: Path) -> None:
    _, error = load_with_good(tmp_path, broken(lambda s: s.update({"x-extractor": ["max_attempts", 2]})))
    assert_names_schema(error, tmp_path, "#/x-extractor", "not of type 'object'")


def test_settings_are_read(tmp_path: Path) -> None:
    schema = broken(
        lambda s: s["x-extractor"].update(temperature=0.0, max_tokens=99, grounding="strict", system="Be terse.")
    )
    write_task(tmp_path, GOOD, schema)
    settings = Catalog.load(tmp_path).get(GOOD).settings
    assert (settings.temperature, settings.max_tokens, settings.max_attempts) == (0.0, 99, 2)
    assert (settings.grounding, settings.system) == ("strict", "Be terse.")


# --- the catalog API -------------------------------------------------------------------------


def test_get_unknown_task_lists_the_known_ones(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, base_schema())
    write_task(tmp_path, "another", base_schema())
    catalog = Catalog.load(tmp_path)
    with pytest.raises(UnknownTaskError) as caught:
        catalog.get("nope")
    assert caught.value.name == "nope"
    assert caught.value.known == ["another", "good"]
    assert "'nope'" in str(caught.value)
    assert "another, good" in str(caught.value)


def test_get_on_an_empty_catalog_says_so(tmp_path: Path) -> None:
    with pytest.raises(UnknownTaskError, match=r"no tasks loaded"):
        Catalog.load(tmp_path).get("nope")


def test_get_with_an_unhashable_name_is_unknown_task(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, base_schema())
    with pytest.raises(UnknownTaskError):
        Catalog.load(tmp_path).get(["good"])  # type: ignore[arg-type]


def test_load_task_raises_task_error(tmp_path: Path) -> None:
    path = write_task(tmp_path, BAD, broken(lambda s: s["properties"]["city"].update(maxLength=-1)))
    with pytest.raises(TaskError, match=r"#/properties/city/maxLength"):
        load_task(path, tmp_path / "prompts")


def test_several_bad_tasks_are_each_reported(tmp_path: Path) -> None:
    write_task(tmp_path, GOOD, base_schema())
    write_task(tmp_path, "bad_ref", broken(lambda s: s["properties"].update(x={"$ref": "file:///etc/passwd"})))
    write_task(tmp_path, "bad_prompt", base_schema(), prompt="{{ missing }}")
    write_task(tmp_path, "bad_json", "{")
    catalog = Catalog.load(tmp_path)
    assert catalog.names() == [GOOD]
    assert sorted(Path(e.path).name for e in catalog.errors) == ["bad_json.json", "bad_prompt.j2", "bad_ref.json"]


# --- engine schema ---------------------------------------------------------------------------


def test_engine_schema_drops_annotations_but_keeps_x_named_properties(tmp_path: Path) -> None:
    schema = base_schema()
    schema["properties"]["x-ray"] = {"type": ["string", "null"], "x-grounded": False}
    schema["required"] = [*schema["required"], "x-ray"]
    for example in schema["x-extractor"]["examples"]:
        example["output"]["x-ray"] = None
    schema["x-notes"] = "internal"
    write_task(tmp_path, GOOD, schema)
    task = Catalog.load(tmp_path).get(GOOD)
    engine = task.engine_schema
    assert "x-extractor" not in engine
    assert "x-notes" not in engine
    assert engine["properties"]["x-ray"] == {"type": ["string", "null"]}
    assert engine["properties"]["when"] == {"type": ["string", "null"], "description": "a normalized date"}
    assert "x-ray" in engine["required"]
    assert "x-extractor" in task.schema  # the task's own schema is untouched

    def x_keys(node: Any, names: bool = False) -> list[str]:
        if isinstance(node, dict):
            found = [k for k in node if k.startswith("x-") and not names]
            for k, v in node.items():
                found += x_keys(v, names=not names and k in ("properties", "$defs"))
            return found
        if isinstance(node, list):
            return [k for v in node for k in x_keys(v)]
        return []

    assert x_keys(engine) == []


# --- the shipped catalog ---------------------------------------------------------------------

SHIPPED = {
    "landmark_slots",
    "query_conditions",
    "snips_add_to_playlist",
    "snips_book_restaurant",
    "snips_get_weather",
    "snips_play_music",
    "snips_rate_book",
    "snips_search_creative_work",
    "snips_search_screening_event",
}


@pytest.mark.parametrize("backend", ["guidance", "xgrammar"])
def test_shipped_catalog_loads_cleanly(backend: Any) -> None:
    catalog = Catalog.load(repo_root(), backend=backend)
    assert catalog.errors == []
    assert set(catalog.names()) >= SHIPPED
    for name in catalog.names():
        task = catalog.get(name)
        assert len(task.examples) >= 3, name
        assert task.warnings == (), (name, task.warnings)
        assert task.schema_path == repo_root() / "schemas" / f"{name}.json"


def test_model_prepare_repairs_a_byte_level_tokenizer_converted_with_byte_fallback(tmp_path: Path) -> None:
    # transformers 5.17 (the GPU host) wrote SmolLM2's tokenizer this way; llguidance then masked
    # every CJK byte token (found running the engine tests on an H200)
    from extractor.models import repair_byte_level_tokenizer

    broken = {
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "vocab": {"a": 0}, "merges": []},
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(broken))
    assert repair_byte_level_tokenizer(path) is True
    fixed = json.loads(path.read_text())
    assert fixed["decoder"]["type"] == "ByteLevel" and fixed["model"]["byte_fallback"] is False
    assert fixed["model"]["vocab"] == {"a": 0}
    assert repair_byte_level_tokenizer(path) is False  # already right: left alone
