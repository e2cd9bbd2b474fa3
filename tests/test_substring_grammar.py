"""The substring grammar, checked with llguidance's own matcher on the default model's tokenizer.

Property: every answer the grammar lets the model write (random walks over the allowed tokens)
parses as JSON, validates against the task's schema, and holds each grounded string as a
substring of one clause of the text.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jsonschema.validators import Draft202012Validator

from extractor import Catalog, Settings
from extractor.constraints.grounded_decoding import extractive_nodes
from extractor.constraints.substring import UntranslatableError, clauses, translate
from extractor.models import default_model_dir

from .conftest import LANDMARK_TEXT

llguidance = pytest.importorskip("llguidance")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    model = default_model_dir(Settings.from_env({}))
    if not (model / "tokenizer.json").is_file():
        pytest.fail(f"{model}: the default model is not prepared; run `make setup` (extractor model prepare)")
    hf = AutoTokenizer.from_pretrained(str(model))
    import llguidance.hf

    return hf, llguidance.hf.from_tokenizer(hf)


def walk(tokenizer: Any, lark: str, rng: random.Random, limit: int = 400) -> str | None:
    """One random answer the grammar allows (None if it did not finish within ``limit`` tokens)."""
    import llguidance.numpy

    hf, lt = tokenizer
    matcher = llguidance.LLMatcher(lt, llguidance.grammar_from("lark", lark))
    assert not matcher.is_error(), matcher.get_error()
    mask = llguidance.numpy.allocate_token_bitmask(1, lt.vocab_size)
    out: list[int] = []
    for _ in range(limit):
        llguidance.numpy.fill_next_token_bitmask(matcher, mask, 0)
        allowed = np.flatnonzero(np.unpackbits(mask[0].view(np.uint8), bitorder="little")[: lt.vocab_size])
        assert len(allowed), f"dead end after {hf.decode(out)!r}: {matcher.get_error()}"
        eos = hf.eos_token_id in allowed
        if eos and (len(allowed) == 1 or rng.random() < 0.5):
            return str(hf.decode(out))
        token = int(rng.choice([t for t in allowed if t != hf.eos_token_id]))
        out.append(token)
        assert matcher.consume_token(token), matcher.get_error()
    return None


def strings_at(data: Any, pointer: str = "") -> list[tuple[str, str]]:
    if isinstance(data, Mapping):
        return [x for k, v in data.items() for x in strings_at(v, f"{pointer}/{k}")]
    if isinstance(data, list):
        return [x for v in data for x in strings_at(v, pointer)]
    return [(pointer, data)] if isinstance(data, str) else []


NESTED: dict[str, Any] = {
    "type": "object",
    "$defs": {
        "person": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 20},
                "role": {"enum": ["buyer", "seller"]},
                "age": {"type": ["integer", "null"]},
            },
            "required": ["name", "role"],
            "additionalProperties": False,
        }
    },
    "properties": {
        "people": {"type": "array", "items": {"$ref": "#/$defs/person"}, "maxItems": 3},
        "place": {"type": ["string", "null"]},
        "note": {"type": "string", "x-grounded": False, "maxLength": 8},
    },
    "required": ["people"],
    "additionalProperties": False,
}
TEXTS = {
    "snips_get_weather": 'will it be windy and colder in Brookhaven, Vermont next weekend? I\'m at "Lake" Tahoe',
    "landmark_slots": LANDMARK_TEXT + "彭小军认为，国内银行现在很好。",
    "nested": "Ann Lee sold the car to Bob Stone in Oslo; Bob paid cash.",
}


def test_an_initial_does_not_end_a_clause() -> None:
    text = "between Nitromed, Inc. and Kenneth M. Bate. It ends in the U.S. today."
    assert clauses(text) == ["between Nitromed, Inc.", " and Kenneth M. Bate.", " It ends in the U.S. today."]


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_every_answer_the_grammar_allows_is_valid_and_grounded(name: str, catalog: Catalog, tokenizer: Any) -> None:
    schema = NESTED if name == "nested" else dict(catalog.get(name).schema)
    text = TEXTS[name]
    targets = extractive_nodes(schema, everywhere=True)
    grammar = translate(schema, text, targets)
    validator = Draft202012Validator(schema)
    pieces = clauses(text)
    rng = random.Random(7)
    done = 0
    for _ in range(25):
        answer = walk(tokenizer, grammar.lark, rng)
        if answer is None:
            continue
        done += 1
        data = json.loads(answer)  # parses
        assert not list(validator.iter_errors(data)), (answer, list(validator.iter_errors(data)))
        assert "\n" not in answer and ": " not in answer  # compact
        for pointer, value in strings_at(data):
            if pointer.endswith("/note") or (name == "nested" and pointer.endswith("/role")):
                continue  # not grounded: x-grounded false, an enum
            assert value.strip() == value, (pointer, value)
            assert value[0] not in ",.;:!?)]}。，、；：！？）" and value[-1] not in "([{,;:（，、；：", (pointer, value)
            assert any(value in piece for piece in pieces), (pointer, value)  # within one clause
    assert done >= 10


def test_a_value_cannot_run_across_clause_punctuation(catalog: Catalog, tokenizer: Any) -> None:
    hf, lt = tokenizer
    task = catalog.get("landmark_slots")
    text = "彭小军认为，国内银行现在很好。"
    lark = translate(task.schema, text, extractive_nodes(task.schema, everywhere=True)).lark

    def accepts(answer: str) -> bool:
        matcher = llguidance.LLMatcher(lt, llguidance.grammar_from("lark", lark))
        tokens = hf.encode(answer, add_special_tokens=False)
        return bool(matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting())

    inside = '{"name":"彭小军","country":null,"city":null,"category":"国内银行","period":null}'
    across = '{"name":"彭小军认为，国内银行","country":null,"city":null,"category":null,"period":null}'
    invented = '{"name":"彭小明","country":null,"city":null,"category":null,"period":null}'
    assert accepts(inside) and not accepts(across) and not accepts(invented)
    whole = translate(task.schema, text, extractive_nodes(task.schema, everywhere=True), clauses_only=False).lark
    matcher = llguidance.LLMatcher(lt, llguidance.grammar_from("lark", whole))
    tokens = hf.encode(across, add_special_tokens=False)
    assert matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()


def test_a_value_does_not_start_with_closing_or_end_with_opening_punctuation(catalog: Catalog, tokenizer: Any) -> None:
    hf, lt = tokenizer
    task = catalog.get("landmark_slots")
    text = "the Alhambra (Granada) is a palace, in Spain?"
    lark = translate(task.schema, text, extractive_nodes(task.schema, everywhere=True), clauses_only=False).lark

    def accepts(name: str) -> bool:
        answer = json.dumps({"name": name, "country": None, "city": None, "category": None, "period": None})
        matcher = llguidance.LLMatcher(lt, llguidance.grammar_from("lark", lark))
        tokens = hf.encode(answer.replace(", ", ",").replace(": ", ":"), add_special_tokens=False)
        return bool(matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting())

    assert accepts("the Alhambra") and accepts("Alhambra (Granada)") and accepts("(Granada)")
    for junk in ("?", ", in Spain", "Alhambra (", "palace,", ") is a palace", " Spain"):
        assert not accepts(junk), junk


def test_constructs_the_grammar_does_not_spell_out_are_named() -> None:
    schema = {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "null"}]}}}
    targets = {id(schema["properties"]["a"]["oneOf"][0]): "#/properties/a/oneOf/0"}
    with pytest.raises(UntranslatableError, match="#/properties/a: oneOf beside grounded fields"):
        translate(schema, "x", targets)


def test_chunks_are_json_escaped_so_quotes_and_backslashes_stay_valid(tokenizer: Any) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    text = 'say "hi" to C:\\temp now'
    lark = translate(schema, text, extractive_nodes(schema, everywhere=True)).lark
    rng = random.Random(3)
    for _ in range(15):
        answer = walk(tokenizer, lark, rng)
        if answer is not None:
            assert json.loads(answer)["q"] in text


def test_the_default_tokenizer_maps_bytes_right(tokenizer: Any) -> None:
    # the H200 finding: a byte-fallback conversion made every CJK byte token a dead end
    spec = json.loads((Path(tokenizer[0].name_or_path) / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["decoder"]["type"] == "ByteLevel" and not spec["model"].get("byte_fallback")


def test_a_length_bound_is_compiled_only_where_a_clause_could_break_it(tokenizer: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "place": {"type": "string"}},
    }
    targets = extractive_nodes(schema, everywhere=True)
    short = translate(schema, "Ann met Bob.", targets).lark
    long = translate(schema, "Ann Lee met Bob Stone in Oslo.", targets).lark
    assert "{1,12}" not in short and "{1,12}" in long  # "Ann met Bob." holds no substring over 12 characters
    assert "{1,}" not in short + long  # no upper bound: the trim rule already asks for a character
    assert ': "\\"" SUB' not in short  # the values are written in place, not as a rule per field
    for text, lark in (("Ann met Bob.", short), ("Ann Lee met Bob Stone in Oslo.", long)):
        rng = random.Random(3)
        answers = [a for a in (walk(tokenizer, lark, rng) for _ in range(20)) if a is not None]
        assert answers
        for answer in answers:
            data = json.loads(answer)
            assert len(data.get("name", "")) <= 12 and all(v in text for v in data.values()), answer


def test_a_not_pattern_is_refused_while_decoding(tokenizer: Any) -> None:
    """A grounded string's ``not`` pattern (left out of what llguidance's JSON schema compiles) is a negated lexeme."""
    from extractor.constraints import enforcement

    item = {"type": "string", "not": {"pattern": "\\b(?:agreement|Agreement|AGREEMENT)\\b"}}
    schema = {"type": "object", "properties": {"party": {"type": "array", "items": item}}, "required": ["party"]}
    decodable = enforcement.check(schema).schema
    text = "MUTUAL DISCLOSURE AGREEMENT between Acme Widgets, Inc. and the Agreements Group"
    lark = translate(decodable, text, extractive_nodes(decodable, everywhere=True), clauses_only=False).lark
    hf, lt = tokenizer

    def accepts(*names: str) -> bool:
        matcher = llguidance.LLMatcher(lt, llguidance.grammar_from("lark", lark))
        tokens = hf.encode(json.dumps({"party": list(names)}, separators=(",", ":")), add_special_tokens=False)
        return bool(matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting())

    assert accepts("Acme Widgets, Inc.") and accepts("MUTUAL DISCLOSURE") and accepts("the Agreements Group")
    assert not accepts("MUTUAL DISCLOSURE AGREEMENT") and not accepts("Acme Widgets, Inc.", "AGREEMENT between Acme")
    # a pattern llguidance's regexes cannot read stays a check after generation, the grammar as before
    lookaround = {**item, "not": {"pattern": "(?<!x)agreement"}}
    kept = enforcement.check({**schema, "properties": {"party": {"type": "array", "items": lookaround}}}).schema
    assert "x-refused" not in kept["properties"]["party"]["items"]
