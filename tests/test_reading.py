"""Pools that remember where labels came from, and reading learned from them (issue 56, items 1-2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema.validators import Draft202012Validator

from extractor import Catalog
from extractor.examples import reading
from extractor.examples.importing import import_gold, write_pool
from extractor.examples.pool import Example, Label, Source, check_line
from extractor.passages import field_queries, field_task

from .documents import docx_bytes

FILLER = "The Recipient shall hold the Confidential Information in strict confidence and use it only for the Purpose. "


def contract(n: int) -> tuple[str, dict[str, Any]]:
    """A contract: the parties in its first sentence, the law after a page of filler, a term near the end."""
    names = ["Acme Widgets, Inc.", "Beta Labs LLC", "Gamma Tools Corp.", "Delta Foods Inc.", "Omega Tech LLC"]
    one, two = names[n % 5], names[(n + 1) % 5]
    law = ["New York", "Delaware", "California", "Texas", "Ohio"][n % 5]
    text = (
        f"THIS AGREEMENT is made by and between {one} and {two}. "
        + FILLER * (16 + n)
        + f"This Agreement shall be governed by the laws of the State of {law}. "
        + FILLER * (20 + n)
    )
    return text, {"party": [one.replace(",", ""), two], "jurisdiction": law}


SCHEMA = {
    "type": "object",
    "properties": {
        "party": {"type": "array", "items": {"type": "string"}, "description": "who signs the agreement"},
        "jurisdiction": {"type": ["string", "null"], "description": "the law that governs it"},
        "term": {"type": ["string", "null"], "format": "duration", "description": "how long it lasts"},
    },
    "required": ["party", "jurisdiction", "term"],
}


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    """A newcomer's catalog: descriptions only, its pool imported from five labelled documents."""
    root = tmp_path / "c"
    (root / "schemas").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "schemas" / "nda.json").write_text(json.dumps(SCHEMA))
    (root / "prompts" / "nda.j2").write_text("Answer with the fields of the contract.")
    gold = []
    for n in range(5):
        text, label = contract(n)
        (tmp_path / f"c{n}.docx").write_bytes(docx_bytes([p + "." for p in text.split(". ") if p]))
        gold.append(json.dumps({"id": f"c{n}", "file": f"c{n}.docx", "expected": label}))
    (tmp_path / "gold.jsonl").write_text("\n".join(gold) + "\n")
    lines, report = import_gold(tmp_path / "gold.jsonl", Catalog.load(root).get("nda"))
    assert report.documents == 5 and not report.refused
    write_pool(root / "examples" / "nda.jsonl", lines)
    return root


def test_a_passage_keeps_its_document_its_offsets_and_the_documents_labels(imported: Path) -> None:
    lines = [json.loads(x) for x in (imported / "examples" / "nda.jsonl").read_text().splitlines()]
    first = lines[0]
    source = first["source"]
    assert source["document"] == "c0" and source["start"] == 0 and source["end"] == len(first["text"])
    assert source["length"] > source["end"] and source["pages"] == []  # a DOCX has no pages
    assert {label["field"] for label in source["labels"]} == {"party", "jurisdiction"}
    label = next(x for x in source["labels"] if x["field"] == "party")
    assert first["text"][label["start"] : label["end"]].startswith("Acme Widgets, Inc")
    example = Catalog.load(imported).get("nda").pool.examples[0]  # type: ignore[union-attr]
    assert example.source is not None and example.source.document == "c0"


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("nope", "'source' must be a JSON object"),
        ({"document": "d"}, "/source: needs document, start, end, length, pages, labels"),
        ({"document": "d", "start": 0, "end": 99, "length": 99, "pages": [], "labels": []}, "must hold the line's 4"),
        ({"document": "d", "start": 0, "end": 4, "length": 9, "pages": [], "labels": [{"field": "x"}]}, "labels/0"),
    ],
)
def test_a_bad_source_names_what_to_fix(source: Any, says: str) -> None:
    validator = Draft202012Validator({"type": "object"})
    line = json.dumps({"text": "abcd", "output": {}, "source": source})
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace("[", r"\[")):
        check_line(line, validator=validator, ungrounded=frozenset())
    assert (
        check_line(json.dumps({"text": "abcd", "output": {}}), validator=validator, ungrounded=frozenset()).source
        is None
    )


def test_reading_is_learned_per_field_from_where_the_labels_sit(imported: Path) -> None:
    task = Catalog.load(imported).get("nda")
    assert task.settings.chunking is not None and task.settings.chunking.by_field  # turned on by the documents
    assert task.reading["party"] == {"from": "start", "passages": 1, "expect": True}
    law = task.reading["jurisdiction"]
    assert law["expect"] is True and "from" not in law
    assert "governed" in str(law["query"]).split()  # the words before the labels
    assert task.reading["term"] == {"query": "term how long lasts"}  # never stated: the field's own words, not expected
    queries = {q.name: q for q in field_queries(task)}
    assert queries["party"].where == ("start",) and queries["party"].k == 1
    assert field_task(task, "party").engine_schema["properties"]["party"]["minItems"] == 1  # expected


def test_what_the_analyst_wrote_wins(imported: Path) -> None:
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["party"]["x-extractor"] = {"from": "end", "expect": False}
    schema["x-extractor"] = {"chunking": {"by_field": False}}
    (imported / "schemas" / "nda.json").write_text(json.dumps(schema))
    task = Catalog.load(imported).get("nda")
    assert task.settings.chunking is not None and not task.settings.chunking.by_field
    party = next(q for q in field_queries(task) if q.name == "party")
    assert party.where == ("end",) and party.k == 1  # the analyst's place, the learned passage count
    assert "minItems" not in field_task(task, "party").engine_schema["properties"]["party"]


def test_a_pool_without_documents_learns_nothing() -> None:
    assert reading.learn([Example("a text", {"x": 1})], ["x"], {}) is None
    source = Source("d", 0, 6, 5000, (), (Label("x", 4000, 4006),))
    learned = reading.learn([Example("x here", {"x": "here"}, source=source)], ["x"], {"x": "the x"})
    assert learned is not None and learned["x"]["from"] == ["start", "end"]
