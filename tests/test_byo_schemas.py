"""Bring your own schema: real draft-04/07 schemas load; refusals are llguidance's own; data is unwrapped.

What llguidance enforces is asked of llguidance as installed (the tests below fail when an upgrade
changes it, so the refusal list cannot go stale silently).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.catalog.tasks import load_task
from extractor.constraints import enforcement
from extractor.errors import TaskError
from extractor.models import default_model_dir

DATA = Path(__file__).parent / "data" / "drafts"
llguidance = pytest.importorskip("llguidance")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    import llguidance.hf
    from transformers import AutoTokenizer

    model = default_model_dir(Settings.from_env({}))
    if not (model / "tokenizer.json").is_file():
        pytest.fail(f"{model}: the default model is not prepared; run `make setup` (extractor model prepare)")
    return llguidance.hf.from_tokenizer(AutoTokenizer.from_pretrained(str(model)))


def grammar(schema: dict[str, Any]) -> str:
    # As vLLM's guidance backend builds it (compact JSON: disable_any_whitespace).
    return str(llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False}))


def accepts(tokenizer: Any, schema: dict[str, Any], text: str) -> bool:
    matcher = llguidance.LLMatcher(tokenizer, grammar(schema))
    assert not matcher.is_error(), matcher.get_error()
    tokens = tokenizer.tokenize_str(text)
    return bool(matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting())


def write(root: Path, name: str, schema: Any) -> Path:
    (root / "schemas").mkdir(parents=True, exist_ok=True)
    (root / "prompts").mkdir(parents=True, exist_ok=True)
    (root / "prompts" / f"{name}.j2").write_text("Extract {{ task.title }} as JSON.", encoding="utf-8")
    path = root / "schemas" / f"{name}.json"
    path.write_text(json.dumps(schema), encoding="utf-8")
    return path


# --- what llguidance (as installed) enforces ---------------------------------------------------


@pytest.mark.parametrize("keyword", sorted(enforcement.UNIMPLEMENTED))
def test_each_refused_keyword_is_one_llguidance_refuses(keyword: str) -> None:
    node: dict[str, Any] = {"type": "object", keyword: {} if keyword not in ("minContains", "maxContains") else 1}
    if keyword == "dependentRequired":
        node[keyword] = {"a": ["b"]}
    if keyword == "uniqueItems":
        node[keyword] = True
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar(node), None)
    assert is_error and keyword in messages[0]


@pytest.mark.parametrize(
    ("schema", "bad", "good"),
    [
        (
            {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
            '{"y":1}',
            '{"x-a":1}',
        ),
        ({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1}, "{}", '{"a":1}'),
        ({"type": "integer", "multipleOf": 3}, "4", "6"),
        ({"type": "number", "maximum": 5, "exclusiveMaximum": True}, "5", "4"),  # draft-04 form
        ({"type": "array", "items": [{"type": "integer"}], "additionalItems": False}, "[1,2]", "[1]"),
        ({"type": "string", "format": "email"}, '"x"', '"a@b.co"'),
    ],
    ids=["patternProperties", "minProperties", "multipleOf", "boolean-exclusiveMaximum", "items-list", "format"],
)
def test_keywords_the_old_list_refused_are_enforced(
    tokenizer: Any, schema: dict[str, Any], bad: str, good: str
) -> None:
    assert not accepts(tokenizer, schema, bad) and accepts(tokenizer, schema, good)
    assert enforcement.check({"type": "object", "properties": {"x": schema}}).unenforced == ()


def test_known_formats_are_the_ones_llguidance_compiles() -> None:
    for name in sorted(enforcement.KNOWN_FORMATS):
        assert not llguidance.LLMatcher.validate_grammar_with_warnings(grammar({"type": "string", "format": name}))[0]
    assert llguidance.LLMatcher.validate_grammar_with_warnings(grammar({"type": "string", "format": "regex"}))[0]


def test_check_finds_each_keyword_and_leaves_it_out() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "name": {"type": "string", "pattern": "^(?!admin).*$"},  # look-ahead: no grammar for it
            "kind": {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]},
            "link": {"type": "string", "format": "uri-reference"},
        },
    }
    checked = enforcement.check(schema)
    assert {(u.pointer, u.keyword) for u in checked.unenforced} == {
        ("#/properties/tags/uniqueItems", "uniqueItems"),
        ("#/properties/name/pattern", "pattern"),
        ("#/properties/kind/oneOf", "oneOf"),
    }
    assert checked.formats == (("#/properties/link/format", "uri-reference"),) and checked.error is None
    props = checked.schema["properties"]
    assert "uniqueItems" not in props["tags"] and "pattern" not in props["name"] and "oneOf" in props["kind"]
    assert checked.schema["x-guidance"] == {"coerce_one_of": True}  # every oneOf decoded as anyOf, by llguidance
    assert not llguidance.LLMatcher.validate_grammar_with_warnings(grammar(checked.schema))[0]
    assert "uniqueItems" in schema["properties"]["tags"]  # the caller's schema is left alone


# --- in the catalog ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.stem)
def test_real_draft04_and_draft07_schemas_load(tmp_path: Path, path: Path, tokenizer: Any) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    name = path.stem.lower()
    strict = {**schema, "x-extractor": {"strict_enforcement": True}}
    try:
        task = load_task(write(tmp_path, name, strict), tmp_path / "prompts")
    except TaskError as error:  # only for a keyword decoding cannot enforce, and by default it loads
        if "linear-time regex engine" in error.reason:  # a pattern RE2 cannot run: refused, never backtracked
            assert "/pattern" in error.pointer and "look-around" in error.reason, error
            return
        assert "does not enforce" in error.reason and "strict_enforcement" in error.reason, error
        task = load_task(write(tmp_path, name, schema), tmp_path / "prompts")
        assert any("checked after generation only" in w for w in task.warnings)
    assert task.schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    # vLLM's guidance backend accepts the schema decoding is held to
    assert not llguidance.LLMatcher.validate_grammar(grammar(dict(task.engine_schema)), tokenizer)


def test_refusal_names_file_pointer_as_written_keyword_and_both_ways_out(tmp_path: Path) -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "definitions": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
        "properties": {
            "tags": {"$ref": "#/definitions/tags"},
            "other": {"type": "object", "dependencies": {"a": ["b"]}},
        },
    }
    path = write(tmp_path, "tagged", {**schema, "x-extractor": {"strict_enforcement": True}})
    with pytest.raises(TaskError) as refused:
        load_task(path, tmp_path / "prompts")
    error = refused.value
    assert error.path == str(path)
    # each pointer as written (``definitions``, not the ``$defs`` decoding reads), the first one leading
    pointers = {"#/definitions/tags/uniqueItems", "#/properties/other/dependencies"}
    assert error.pointer in pointers and all(p in f"{error.pointer} {error.reason}" for p in pointers)
    assert "does not enforce" in error.reason and "remove it" in error.reason
    assert '"strict_enforcement"' in error.reason
    task = load_task(write(tmp_path, "tagged", schema), tmp_path / "prompts")
    assert not task.validator.is_valid({"tags": ["a", "a"]})  # ... and checked after generation
    assert "uniqueItems" not in json.dumps(task.engine_schema)


def test_old_draft_task_validates_outputs_by_its_own_draft(tmp_path: Path) -> None:
    schema = json.loads((DATA / "o41650.json").read_text(encoding="utf-8"))  # draft-04: allOf of $ref + lengths
    task = load_task(write(tmp_path, "dog", schema), tmp_path / "prompts")
    assert task.draft == "draft-04" and task.source_schema == schema
    assert task.validator.is_valid({"dog": "Rexie", "myString": "x"})
    assert not task.validator.is_valid({"dog": "Rex", "myString": "x"})  # minLength 5


# --- a top level that is not an object ---------------------------------------------------------

CITIES = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Cities",
    "description": "Every city the text names",
    "type": "array",
    "maxItems": 4,
    "items": {"type": "string", "maxLength": 30},
    "x-extractor": {"examples": [{"text": "From Lyon to Nice.", "output": ["Lyon", "Nice"]}]},
}


@pytest.fixture
def cities(tmp_path: Path) -> Extractor:
    write(tmp_path, "cities", CITIES)
    catalog = Catalog.load(tmp_path)
    assert catalog.errors == []
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    return Extractor(settings=settings, engine=ScriptedEngine(), catalog=catalog)


async def test_top_level_array_is_decoded_wrapped_and_returned_as_the_schema_describes(cities: Extractor) -> None:
    engine = cities.engine
    assert isinstance(engine, ScriptedEngine)
    text = "We drove from Paris to Rome."
    engine.enqueue(['{"value": ["Paris", "Rome"]}'])
    result = await cities.aextract("cities", text)
    assert result.data == ["Paris", "Rome"]  # data is what the schema describes
    assert result.value == ["Paris", "Rome"]  # the typed value too
    assert [(s.path, text[s.start : s.end]) for s in result.spans] == [("/0", "Paris"), ("/1", "Rome")]
    request = engine.history[0]
    assert cities.task("cities").engine_schema["required"] == ["value"]  # decoded wrapped
    assert request.grammar is not None and "value" in request.grammar  # held to the text (grounded decoding)
    assert {"role": "assistant", "content": '{"value":["Lyon","Nice"]}'} in request.messages  # the example too


async def test_wrapped_answer_is_validated_and_reasked_by_the_schemas_own_rules(cities: Extractor) -> None:
    engine = cities.engine
    assert isinstance(engine, ScriptedEngine)
    engine.enqueue(['{"value": ["Paris", "Rome", "Oslo", "Bern", "Riga"]}', '{"value": ["Paris"]}'])
    result = await cities.aextract("cities", "Paris, Rome, Oslo, Bern and Riga.")
    assert result.data == ["Paris"]
    assert any(e.startswith("/value: ") and "too long" in e for e in result.attempts[0].errors)


def test_bad_example_of_a_wrapped_task_names_its_pointer_as_written(tmp_path: Path) -> None:
    bad = {**CITIES, "x-extractor": {"examples": [{"text": "Lyon", "output": [3]}]}}
    with pytest.raises(TaskError) as error:
        load_task(write(tmp_path, "cities", bad), tmp_path / "prompts")
    assert error.value.pointer == "#/x-extractor/examples/0/output/0"


def test_sample_is_kept_with_its_provenance() -> None:
    assert (DATA / "README.md").is_file() and len(list(DATA.glob("*.json"))) >= 8
