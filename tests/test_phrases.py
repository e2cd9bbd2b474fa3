"""Typed fields choose among the text's own phrases (issue 57): the phrases, the grammar, fitting, re-asks."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, Extractor, Settings
from extractor.catalog.tasks import task_from_schema
from extractor.constraints import grounded_decoding
from extractor.engines.scripted import ScriptedEngine
from extractor.values import Context, ValueField, normalize, phrases

from .test_substring_grammar import tokenizer, walk
from .test_values import PHRASINGS, REFERENCE

__all__ = ["tokenizer"]  # the fixture, used by name

LEASE = "The lease starts on May 20, 2014, runs for two (2) years and costs 1,200 dollars a month."
CONTRACT = "本合同自2014年5月20日起生效，有效期三年，价格为1200元。"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "start_date": {"type": ["string", "null"], "format": "date"},
        "term": {"type": ["string", "null"], "format": "duration"},
        "price": {"type": ["number", "null"]},
        "landlord": {"type": ["string", "null"]},
    },
    "required": ["start_date", "term", "price", "landlord"],
    "x-extractor": {"grounded_decoding": True},
}


def field(kind: str, **settings: Any) -> ValueField:
    return ValueField("/v", kind, settings)


def test_the_phrases_of_each_kind() -> None:
    assert phrases.phrases(LEASE, field("date")) == ("May 20, 2014",)
    assert phrases.phrases(LEASE, field("duration")) == ("two (2) years", "a month")
    # The numbers of a date are the date's ("20", "2014"): not numbers of their own.
    assert phrases.phrases(LEASE, field("number")) == ("two", "2", "1,200 dollars")
    assert phrases.phrases(CONTRACT, field("date")) == ("2014年5月20日",)
    assert phrases.phrases(CONTRACT, field("duration")) == ("三年",)  # not "2014年" of the date
    assert "1200元" in phrases.phrases(CONTRACT, field("number"))
    assert phrases.phrases("No dates here.", field("date")) == ()
    assert phrases.spans(LEASE, field("readings", readings=["date"])) == []  # any words: no list


@pytest.mark.parametrize(("kind", "settings", "evidence", "expected", "unit"), PHRASINGS)
def test_every_phrasing_is_among_its_sentences_phrases(
    kind: str, settings: dict[str, Any], evidence: str, expected: Any, unit: str | None
) -> None:
    text = f"Please note: {evidence}. Thank you." if evidence.isascii() else f"请注意：{evidence}。"
    value_field, ctx = ValueField("/v", kind, settings), Context(reference_date=REFERENCE)
    found = phrases.phrases(text, value_field, ctx)
    assert any(normalize(value_field, words, ctx).value == expected for words in found), found


def test_evidence_running_past_its_phrase_is_narrowed() -> None:
    words = "2014, runs for two (2) years and costs 1,200 dollars a month."
    fitted, note = phrases.fit(LEASE, field("date"), words)
    assert fitted == "May 20, 2014"
    assert note is not None and note.startswith("/v: the evidence '2014, runs") and "narrowed to 'May 20, 2014'" in note
    fitted, note = phrases.fit(LEASE, field("duration"), "two (2) years and costs 1,200")
    assert (fitted, note is not None) == ("two (2) years", True)
    # Words that read as they are stay: a duration of two parts is not cut to its first.
    text = "It runs for 1 year and 6 months."
    assert phrases.fit(text, field("duration"), "1 year and 6 months") == ("1 year and 6 months", None)
    assert phrases.fit(LEASE, field("date"), "2014") == ("May 20, 2014", None)  # widened, as before
    assert phrases.fit(LEASE, field("date"), "not in the text") == ("not in the text", None)


def test_the_grammar_holds_typed_evidence_to_the_phrases(tokenizer: Any) -> None:
    task = task_from_schema("lease", SCHEMA, where="test")
    lookup = phrases.Lookup(LEASE, task.values)
    constrained = grounded_decoding.constrain(task.answer_schema, LEASE, everywhere=True, phrases=lookup)
    assert constrained is not None and constrained.grammar is not None
    rng = random.Random(7)
    seen: dict[str, set[Any]] = {"start_date": set(), "term": set(), "price": set()}
    for _ in range(40):
        answer = walk(tokenizer, constrained.grammar, rng)
        if answer is None:
            continue
        data = json.loads(answer)
        for key in seen:
            seen[key].add(data[key])
        assert data["landlord"] is None or data["landlord"] in LEASE
    assert seen["start_date"] <= {None, "May 20, 2014"}
    assert seen["term"] <= {None, "two (2) years", "a month"}
    assert seen["price"] <= {None, "two", "2", "1,200 dollars"}
    assert len(seen["term"]) > 1  # the walks reached more than null


def test_a_field_with_no_phrase_is_null_and_refused_evidence_leaves_the_grammar() -> None:
    task = task_from_schema("lease", SCHEMA, where="test")
    lookup = phrases.Lookup("The landlord is Ann.", task.values)
    grammar = grounded_decoding.constrain(task.answer_schema, "The landlord is Ann.", everywhere=True, phrases=lookup)
    assert grammar is not None and grammar.grammar is not None
    assert 'ph0: "null"\n' in grammar.grammar  # no date in the text: null without a token of evidence
    assert ("#/properties/start_date", "date") in grammar.unstated  # a field read alone is then not asked
    lookup = phrases.Lookup(LEASE, task.values)
    assert lookup.refuse("/term", "a month") and not lookup.refuse("/term", "a month")
    assert not lookup.refuse("/term", "not a phrase")
    again = grounded_decoding.constrain(task.answer_schema, LEASE, everywhere=True, phrases=lookup)
    assert again is not None and again.grammar is not None
    assert '"\\"two (2) years\\""' in again.grammar and "a month" not in again.grammar.split("TEXT:")[0]


def test_the_enum_path_lists_the_phrases() -> None:
    task = task_from_schema("lease", SCHEMA, where="test")
    lookup = phrases.Lookup(LEASE, task.values)
    constrained = grounded_decoding.without_grammar(
        task.answer_schema, LEASE, everywhere=True, why="test", phrases=lookup
    )
    assert constrained.schema is not None
    assert constrained.schema["properties"]["start_date"]["enum"] == ["May 20, 2014", None]


@pytest.fixture
def lease(tmp_path: Path) -> tuple[Extractor, ScriptedEngine]:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "schemas" / "lease.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "prompts" / "lease.j2").write_text("Extract the lease as JSON.")
    engine = ScriptedEngine()
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    return Extractor(settings=settings, engine=engine, catalog=Catalog.load(tmp_path)), engine


async def test_a_reask_after_unreadable_evidence_is_another_request(lease: tuple[Extractor, ScriptedEngine]) -> None:
    extractor, engine = lease
    bad = {"start_date": "May 20, 2014", "term": "a month", "price": "1,200 dollars", "landlord": None}
    # "a month" reads as a duration; under a reference-free context nothing fails: force a problem instead.
    engine.enqueue([json.dumps({**bad, "term": "costs"}), json.dumps({**bad, "term": "two (2) years"})])
    result = await extractor.aextract("lease", LEASE)
    assert result.data["term"] == "P2Y" and result.data["start_date"] == "2014-05-20" and result.data["price"] == 1200
    assert len(engine.history) == 2
    assert "two (2) years" in engine.history[1].messages[-1]["content"]  # the text's durations listed


async def test_narrowed_evidence_reads_and_says_so(lease: tuple[Extractor, ScriptedEngine]) -> None:
    extractor, engine = lease
    words = "2014, runs for two (2) years and costs 1,200 dollars a month."
    engine.enqueue([json.dumps({"start_date": words, "term": None, "price": None, "landlord": None})])
    result = await extractor.aextract("lease", LEASE)
    assert result.data["start_date"] == "2014-05-20" and len(result.attempts) == 1
    span = next(s for s in result.spans if s.path == "/start_date")
    assert LEASE[span.start : span.end] == "May 20, 2014"
    assert any("narrowed to 'May 20, 2014'" in n for n in result.notes)


async def test_reading_the_texts_other_phrases_leaves_no_note(lease: tuple[Extractor, ScriptedEngine]) -> None:
    extractor, engine = lease
    text = "The lease starts on May 20, 2014; the keys are handed over tomorrow."
    engine.enqueue([json.dumps({"start_date": "May 20, 2014", "term": None, "price": None, "landlord": None})])
    result = await extractor.aextract("lease", text)
    assert result.data["start_date"] == "2014-05-20"
    # "tomorrow" is a phrase of the text, not the answer: no note that it was read against today
    assert not any("reference_date" in n for n in result.notes), result.notes
