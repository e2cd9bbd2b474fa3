"""Typed values from their evidence: the phrasings table, ambiguity, and the pipeline end to end (scripted)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, ExtractionFailed, Extractor, ScriptedEngine, Settings
from extractor.values import (
    AmbiguousEvidenceError,
    Context,
    EvidenceError,
    ValueField,
    evidence_schema,
    normalize,
    value_fields,
)
from extractor.values.durations import words

REFERENCE = dt.date(2026, 12, 5)  # a Saturday

# (kind, field settings, evidence as a text writes it, the typed value, its currency or unit)
PHRASINGS: list[tuple[str, dict[str, Any], str, Any, str | None]] = [
    # absolute dates, English
    ("date", {}, "May 20, 2014", "2014-05-20", None),
    ("date", {}, "20 May 2014", "2014-05-20", None),
    ("date", {}, "the 4th day of September, 2012", "2012-09-04", None),
    ("date", {}, "this 20th day of May, 2014", "2014-05-20", None),
    ("date", {}, "as of May 20, 2014", "2014-05-20", None),
    ("date", {}, "September 4th 2012", "2012-09-04", None),
    ("date", {}, "2014-05-20", "2014-05-20", None),
    ("date", {}, "Feb. 23, 2009", "2009-02-23", None),
    ("date", {}, "December 31, 2010", "2010-12-31", None),
    ("date", {"date_order": "MDY"}, "05/06/2014", "2014-05-06", None),
    ("date", {"date_order": "DMY"}, "05/06/2014", "2014-06-05", None),
    ("date", {}, "13/06/2014", "2014-06-13", None),
    ("date", {}, "1st of June 2015", "2015-06-01", None),
    # absolute dates, Chinese
    ("date", {}, "2014年5月20日", "2014-05-20", None),
    ("date", {}, "二〇一四年五月二十日", "2014-05-20", None),
    ("date", {}, "2014年05月20日", "2014-05-20", None),
    ("date", {}, "三月五日", "2026-03-05", None),
    # relative dates (reference: Saturday 2026-12-05)
    ("date", {}, "tomorrow", "2026-12-06", None),
    ("date", {}, "yesterday", "2026-12-04", None),
    ("date", {}, "明天", "2026-12-06", None),
    ("date", {}, "后天", "2026-12-07", None),
    ("date", {}, "下周五", "2026-12-11", None),
    ("date", {}, "本周三", "2026-12-02", None),
    ("date", {}, "上星期一", "2026-11-23", None),
    ("date", {}, "下个星期天", "2026-12-13", None),
    ("date", {}, "2 days ago", "2026-12-03", None),
    ("date", {}, "in two weeks", "2026-12-19", None),
    ("date", {}, "3天后", "2026-12-08", None),
    # times and date-times
    ("time", {}, "3:30 pm", "15:30:00", None),
    ("time", {}, "15:30", "15:30:00", None),
    ("time", {}, "noon", "12:00:00", None),
    ("time", {}, "下午3点", "15:00:00", None),
    ("time", {}, "晚上8点15分", "20:15:00", None),
    ("time", {}, "上午十点半", "10:30:00", None),
    ("date-time", {}, "2014年5月20日下午3点", "2014-05-20T15:00:00", None),
    ("date-time", {}, "May 20, 2014 at 10:00 am", "2014-05-20T10:00:00", None),
    ("date-time", {}, "2014-05-20T10:00", "2014-05-20T10:00:00", None),
    # durations in words and digits
    ("duration", {}, "two (2) years", "P2Y", None),
    ("duration", {}, "three (3) years", "P3Y", None),
    ("duration", {}, "a period of eighteen months", "P18M", None),
    ("duration", {}, "one year", "P1Y", None),
    ("duration", {}, "1 year and 6 months", "P1Y6M", None),
    ("duration", {}, "thirty (30) days", "P30D", None),
    ("duration", {}, "twelve (12) calendar months", "P12M", None),
    ("duration", {}, "5 years", "P5Y", None),
    ("duration", {}, "24 hours", "PT24H", None),
    ("duration", {}, "90 minutes", "PT90M", None),
    ("duration", {}, "two weeks", "P2W", None),
    ("duration", {}, "十八个月", "P18M", None),
    ("duration", {}, "三年", "P3Y", None),
    ("duration", {}, "半年", "P6M", None),
    ("duration", {}, "两周", "P2W", None),
    ("duration", {}, "P2Y", "P2Y", None),
    # numbers with separators, words and Chinese numerals
    ("number", {}, "1,200.50", 1200.5, None),
    ("number", {}, "1200", 1200, None),
    ("number", {}, "-3.5", -3.5, None),
    ("number", {}, "0.75", 0.75, None),
    ("integer", {}, "twenty-four", 24, None),
    ("integer", {}, "five hundred", 500, None),
    ("integer", {}, "一千二百", 1200, None),
    ("integer", {}, "两万", 20000, None),
    ("number", {}, "1.2万", 12000, None),
    ("integer", {}, "3亿", 300000000, None),
    ("integer", {}, "十八", 18, None),
    ("integer", {}, "16 people", 16, None),
    # amounts with symbols and words
    ("number", {"currency": "required"}, "$1,200", 1200, "USD"),
    ("number", {"currency": "required"}, "1.200,50 €", 1200.5, "EUR"),
    ("number", {"currency": "required"}, "EUR 12,5", 12.5, "EUR"),
    ("number", {"currency": "required"}, "£300", 300, "GBP"),
    ("number", {"currency": "required"}, "1200元", 1200, "CNY"),
    ("number", {"currency": "required"}, "一千二百元", 1200, "CNY"),
    ("number", {"currency": "required"}, "300美元", 300, "USD"),
    ("number", {"currency": "required"}, "50 euros", 50, "EUR"),
    ("number", {"currency": "required"}, "USD 2,500,000", 2500000, "USD"),
    ("number", {"currency": "CNY"}, "1200", 1200, "CNY"),
    ("number", {"currency": "CNY"}, "￥99", 99, "CNY"),
    # percentages
    ("number", {}, "12.5 %", 0.125, None),
    ("number", {}, "12.5%", 0.125, None),
    ("number", {}, "百分之十二点五", 0.125, None),
    ("number", {}, "5 percent", 0.05, None),
    ("number", {"percent": "points"}, "12.5 %", 12.5, None),
    # quantities in the field's unit
    ("number", {"unit": "GB"}, "16GB", 16, "GB"),
    ("number", {"unit": "MB"}, "16GB", 16000, "MB"),
    ("number", {"unit": "m"}, "5公里", 5000, "m"),
    ("number", {"unit": "kg"}, "500 g", 0.5, "kg"),
    ("number", {"unit": "km"}, "12", 12, "km"),
]


@pytest.mark.parametrize(("kind", "settings", "evidence", "expected", "unit"), PHRASINGS)
def test_phrasing(kind: str, settings: dict[str, Any], evidence: str, expected: Any, unit: str | None) -> None:
    typed = normalize(ValueField("/v", kind, settings), evidence, Context(reference_date=REFERENCE))
    assert typed.value == expected
    assert typed.unit == unit
    assert typed.evidence == evidence


def test_the_table_is_large() -> None:
    assert len(PHRASINGS) >= 80
    assert any(any("\u4e00" <= c <= "\u9fff" for c in p[2]) for p in PHRASINGS)


@pytest.mark.parametrize(
    ("kind", "settings", "evidence", "why"),
    [
        ("date", {}, "05/06/2014", "date_order"),
        ("date", {}, "the date hereof", "cannot be read"),
        ("date", {}, "2014", "states no day"),
        ("date", {}, "June 2015", "states no day"),
        ("date", {}, "2019年12月", "states no day"),
        ("duration", {}, "until terminated", "states no duration"),
        ("number", {}, "several", "states no number"),
        ("number", {"currency": "required"}, "1200", "names no currency"),
        ("number", {"currency": "USD"}, "1200元", "is in CNY"),
        ("integer", {}, "2.5", "not a whole number"),
        ("number", {"unit": "kg"}, "5 hours", "not in a unit convertible"),
        ("date", {}, "", "empty"),
    ],
)
def test_unreadable_evidence_says_why(kind: str, settings: dict[str, Any], evidence: str, why: str) -> None:
    with pytest.raises(EvidenceError, match=why):
        normalize(ValueField("/v", kind, settings), evidence, Context(reference_date=REFERENCE))


def test_an_ambiguous_date_is_its_own_error() -> None:
    with pytest.raises(AmbiguousEvidenceError):
        normalize(ValueField("/v", "date", {}), "05/06/2014", Context())


def test_a_relative_date_without_a_reference_is_read_against_today_with_a_note() -> None:
    ctx = Context()
    typed = normalize(ValueField("/v", "date", {}), "tomorrow", ctx)
    assert typed.value == (dt.date.today() + dt.timedelta(days=1)).isoformat()
    assert ctx.notes and "no reference_date" in ctx.notes[0]
    absolute = Context()
    normalize(ValueField("/v", "date", {}), "May 20, 2014", absolute)
    assert absolute.notes == []


def test_durations_back_to_words() -> None:
    assert [words(d) for d in ("P2Y", "P18M", "P30D", "P1Y6M")] == [
        "2 years",
        "18 months",
        "30 days",
        "1 year 6 months",
    ]


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "effective_date": {"type": ["string", "null"], "format": "date", "description": "when it takes effect"},
        "term": {"type": ["string", "null"], "format": "duration"},
        "fee": {"type": ["number", "null"], "x-extractor": {"currency": "required"}},
        "party": {"type": "array", "items": {"type": "string"}},
        "signed": {"type": ["string", "null"], "format": "date", "x-grounded": False},
        "rate": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        "status": {"enum": [1, 2]},
    },
    "required": ["effective_date", "term", "fee", "party", "signed", "rate"],
}


def test_value_fields_and_the_evidence_schema() -> None:
    found = value_fields(SCHEMA)
    assert {p: f.kind for p, f in found.items()} == {
        "/effective_date": "date",
        "/term": "duration",
        "/fee": "number",
        "/rate": "number",
    }
    evidence = evidence_schema(SCHEMA)["properties"]
    assert evidence["effective_date"]["type"] == ["string", "null"]
    assert evidence["effective_date"]["x-extractive"] is True
    assert "when it takes effect" in evidence["effective_date"]["description"]
    assert evidence["fee"]["type"] == ["string", "null"]
    assert evidence["rate"]["anyOf"][0]["type"] == "string"
    assert evidence["signed"] == SCHEMA["properties"]["signed"]  # x-grounded: false stays as written
    assert evidence["status"] == {"enum": [1, 2]}


TEXT = (
    "This Agreement is made as of May 20, 2014 between Liquidmetal Technologies, Inc. and Visser Precision. "
    "It remains in force for a period of three (3) years. The fee is $12,500."
)


@pytest.fixture
def typed_extractor(tmp_path: Path, engine: ScriptedEngine) -> Extractor:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "schemas" / "deal.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "prompts" / "deal.j2").write_text("Extract the deal as JSON.")
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    return Extractor(settings=settings, engine=engine, catalog=Catalog.load(tmp_path))


def _answer(**values: Any) -> str:
    data: dict[str, Any] = {"effective_date": None, "term": None, "fee": None, "party": [], "signed": None}
    data.update({"rate": None, **values})
    return json.dumps(data)


async def test_typed_values_keep_their_evidence(typed_extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue(
        [
            _answer(
                effective_date="May 20, 2014",
                term="three (3) years",
                fee="$12,500",
                party=["Liquidmetal Technologies, Inc."],
                signed="2014-05-21",
            )
        ]
    )
    result = await typed_extractor.aextract("deal", TEXT)
    assert result.data["effective_date"] == "2014-05-20"
    assert result.data["term"] == "P3Y"
    assert result.data["fee"] == 12500
    assert result.data["signed"] == "2014-05-21"  # x-grounded: false: as the model wrote it
    spans = {s.path: s for s in result.spans}
    date = spans["/effective_date"]
    assert (date.value, date.normalized, date.status) == ("May 20, 2014", "2014-05-20", "exact")
    assert date.start is not None and TEXT[date.start : date.end] == "May 20, 2014"
    assert (spans["/fee"].normalized, spans["/fee"].unit) == (12500, "USD")
    assert spans["/term"].value == "three (3) years"
    assert "/signed" not in spans
    # The model was asked for the words: the engine's schema holds strings at the typed fields.
    request = engine.history[0]
    shown = json.dumps(request.json_schema or {}) + (request.grammar or "")
    assert "format" not in json.dumps((request.json_schema or {}).get("properties", {}).get("effective_date", {}))
    assert shown


async def test_unreadable_evidence_is_reasked_then_left_null(
    typed_extractor: Extractor, engine: ScriptedEngine
) -> None:
    bad = _answer(effective_date="This Agreement", term="three (3) years")
    engine.enqueue([bad, bad, bad])
    result = await typed_extractor.aextract("deal", TEXT)
    assert len(result.attempts) == 3
    assert "cannot be read as a date" in result.attempts[0].errors[0]
    assert "cannot be read as a date" in engine.history[1].messages[-1]["content"]  # fed back
    assert "'May 20, 2014'" in engine.history[1].messages[-1]["content"]  # with the text's dates named
    # The second answer repeated the first: the third request says so, and is not the second again.
    third, second = engine.history[2].messages[-1]["content"], engine.history[1].messages[-1]["content"]
    assert "attempt 2 repeated attempt 1 word for word" in third and third != second
    assert result.data["effective_date"] is None and result.data["term"] == "P3Y"  # nothing invented
    assert any("'This Agreement'" in n and "left null" in n for n in result.notes)


async def test_a_reask_that_fixes_the_evidence_wins(typed_extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([_answer(effective_date="made"), _answer(effective_date="May 20, 2014")])
    result = await typed_extractor.aextract("deal", TEXT)
    assert result.data["effective_date"] == "2014-05-20" and len(result.attempts) == 2


async def test_relative_dates_use_the_reference_date(typed_extractor: Extractor, engine: ScriptedEngine) -> None:
    text = "We sign tomorrow; the fee is 300 euros."
    engine.enqueue([_answer(effective_date="tomorrow", fee="300 euros")])
    result = await typed_extractor.aextract("deal", text, reference_date=REFERENCE)
    assert result.data["effective_date"] == "2026-12-06" and result.data["fee"] == 300
    assert not any("reference_date" in n for n in result.notes)
    engine.enqueue([_answer(effective_date="tomorrow")])
    result = await typed_extractor.aextract("deal", text)
    assert any("no reference_date given" in n for n in result.notes)


async def test_a_required_value_never_invented(
    typed_extractor: Extractor, engine: ScriptedEngine, tmp_path: Path
) -> None:
    schema = {**SCHEMA, "properties": {"fee": {"type": "number", "x-extractor": {"currency": "required"}}}}
    schema["required"] = ["fee"]
    (tmp_path / "schemas" / "fee.json").write_text(json.dumps(schema))
    (tmp_path / "prompts" / "fee.j2").write_text("Extract the fee.")
    settings = Settings.from_env({}, home=tmp_path / "home2", engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(tmp_path))
    engine.enqueue([json.dumps({"fee": "12,500"})] * 3)
    with pytest.raises(ExtractionFailed) as failed:
        await extractor.aextract("fee", "The fee is 12,500.")
    assert "names no currency" in failed.value.attempts[-1].errors[0]


def test_labels_are_found_back_as_the_words_of_the_text() -> None:
    from extractor.values.evidence import as_evidence, find

    date = ValueField("/d", "date", {})
    assert find(TEXT, date, "2014-05-20") is not None
    start, end = find(TEXT, date, "2014-05-20") or (0, 0)
    assert TEXT[start:end] == "May 20, 2014"
    term = ValueField("/t", "duration", {})
    span = find(TEXT, term, "3 years")
    assert span is not None and TEXT[span[0] : span[1]].endswith("three (3) years")
    fee = ValueField("/f", "number", {"currency": "required"})
    span = find(TEXT, fee, 12500)
    assert span is not None and TEXT[span[0] : span[1]] == "$12,500"
    assert find(TEXT, date, "2015-01-01") is None
    shown = as_evidence(TEXT, {"effective_date": "2014-05-20", "term": "P3Y", "party": ["X"]}, value_fields(SCHEMA))
    assert shown["effective_date"] == "May 20, 2014" and shown["party"] == ["X"]


async def test_worked_examples_show_the_evidence(tmp_path: Path, engine: ScriptedEngine) -> None:
    schema = {
        **SCHEMA,
        "x-extractor": {"examples": [{"text": TEXT, "output": json.loads(_answer(effective_date="2014-05-20"))}]},
    }
    (tmp_path / "schemas").mkdir()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "schemas" / "deal.json").write_text(json.dumps(schema))
    (tmp_path / "prompts" / "deal.j2").write_text("Extract the deal as JSON.")
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(tmp_path))
    engine.enqueue([_answer(effective_date="May 20, 2014")])
    await extractor.aextract("deal", TEXT)
    shown = [m["content"] for m in engine.history[0].messages if m["role"] == "assistant"]
    assert shown and '"effective_date":"May 20, 2014"' in shown[0]


def test_python_models_hold_dates_and_codegen_imports_them(typed_extractor: Extractor) -> None:
    from extractor.catalog.codegen import render_module

    task = typed_extractor.task("deal")
    assert task.typed is not None
    value = task.typed.model.model_validate(json.loads(_answer(effective_date="2014-05-20", term="P3Y", fee=12500)))
    assert value.effective_date == dt.date(2014, 5, 20) and value.term == "P3Y"
    source = render_module(task)
    assert "from datetime import date" in source and "effective_date: date | None" in source
    namespace: dict[str, Any] = {}
    exec(compile(source, "deal_model.py", "exec"), namespace)
    loaded = namespace["Model"].model_validate(json.loads(_answer(effective_date="2014-05-20")))
    assert loaded.effective_date == dt.date(2014, 5, 20)


def test_eval_compares_typed_values_as_values() -> None:
    from extractor.jobs.metrics import compare, total

    fields = value_fields(SCHEMA)
    gold = {"effective_date": "May 20, 2014", "term": "3 years", "fee": "$12,500", "party": ["A"]}
    predicted = {"effective_date": "2014-05-20", "term": "P3Y", "fee": 12500, "party": ["A"]}
    assert total(compare(gold, predicted, typed=fields)).f1 == 1.0
    assert total(compare(gold, predicted)).f1 < 1.0  # untyped, the two spellings differ


@pytest.mark.parametrize(
    ("kind", "settings", "text", "copied", "expected", "evidence"),
    [
        ("date", {}, "This Agreement is made as of May 20, 2014 by the parties.", "2014", "2014-05-20", "May 20, 2014"),
        ("date", {}, "Please note: May 20, 2014. Thank you.", "2014.", "2014-05-20", "May 20, 2014"),
        ("number", {"currency": "required"}, "Please note: $1,200. Thank you.", "1,200.", 1200, "$1,200"),
        ("duration", {}, "It lasts for three (3) years from today.", "3", "P3Y", "three (3) years"),
        ("number", {}, "预算1.2万以内", "1.2", 12000, "1.2万"),
        ("number", {"currency": "required"}, "The fee is $1,200.", "1,200", 1200, "$1,200"),
        ("number", {}, "a discount of 12.5 % today", "12.5", 0.125, "12.5 %"),
        ("time", {}, "请在下午3点到达", "3", "15:00:00", "下午3点"),
        ("date", {}, "帮我查下周五的航班", "周五", "2026-12-11", "下周五"),
    ],
)
def test_evidence_cut_short_is_widened_to_its_phrase(
    kind: str, settings: dict[str, Any], text: str, copied: str, expected: Any, evidence: str
) -> None:
    from extractor.values.evidence import widen

    found = widen(text, ValueField("/v", kind, settings), copied)
    assert found == evidence
    assert normalize(ValueField("/v", kind, settings), found, Context(reference_date=REFERENCE)).value == expected


async def test_the_pipeline_reads_the_whole_phrase(typed_extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([_answer(effective_date="2014", term="3")])
    result = await typed_extractor.aextract("deal", TEXT)
    assert result.data["effective_date"] == "2014-05-20" and result.data["term"] == "P3Y"
    spans = {s.path: s for s in result.spans}
    assert spans["/effective_date"].value == "May 20, 2014" and spans["/term"].value == "three (3) years"


# A field of readings: query_conditions' value (a number, an amount, a date, a time, a duration, or the words).
CONDITION_VALUES: list[tuple[str, Any, str | None]] = [
    ("1200元", 1200, "CNY"),
    ("$600", 600, "USD"),
    ("500 yuan", 500, "CNY"),
    ("$18k", 18000, "USD"),
    ("下周五", "2026-12-11", None),
    ("next Friday", "2026-12-11", None),
    ("12月24日", "2026-12-24", None),
    ("3天后", "2026-12-08", None),
    ("16GB", 16, "GB"),
    ("4 stars", 4, "star"),  # a rating is compared as a number; its unit word says what it counts
    ("100平米", 100, "m²"),
    ("两张", 2, "张"),
    ("4.5", 4.5, None),  # a number, never the 5th of April
    ("20%", 20, "%"),
    ("上午10点", "10:00:00", None),
    ("two weeks", "P2W", None),
    ("30-year", "P30Y", None),
    ("2025年", 2025, "年"),  # a year, not 2025 years
    ("Hangzhou", "Hangzhou", None),  # the words stay: not an error
    ("Terminal 2", "Terminal 2", None),
    ("三亚", "三亚", None),
    ("7天6晚", "7天6晚", None),
]


@pytest.mark.parametrize(("evidence", "expected", "unit"), CONDITION_VALUES)
def test_a_condition_value_reads_as_the_first_reading_that_fits(evidence: str, expected: Any, unit: str | None) -> None:
    catalog = Catalog.load(Path(__file__).parent.parent)
    field = catalog.get("query_conditions").values["/conditions/value"]
    typed = normalize(field, evidence, Context(reference_date=REFERENCE))
    assert (typed.value, typed.unit) == (expected, unit)
    assert (typed.reading is None) == (typed.value == evidence)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def test_the_labelled_conditions_read_as_labelled() -> None:
    """bench/data's two gold files hold the same requests: the words read as the typed labels (2026-12-05)."""
    root = Path(__file__).parent.parent
    field = Catalog.load(root).get("query_conditions").values["/conditions/value"]
    typed = _lines(root / "bench" / "data" / "query_conditions_gold.jsonl")
    words = _lines(root / "bench" / "data" / "query_conditions_gold_words.jsonl")
    assert [t["id"] for t in typed] == [w["id"] for w in words]
    pool = _lines(root / "examples" / "query_conditions.jsonl")
    assert len(typed) + len(pool) >= 100 and not {t["text"] for t in typed} & {p["text"] for p in pool}
    checked = 0
    for line, as_words in zip(typed, words, strict=True):
        for label, copied in zip(line["expected"]["conditions"], as_words["expected"]["conditions"], strict=True):
            read = normalize(field, copied["value"], Context(reference_date=REFERENCE))
            assert (read.value, read.unit) == (label["value"], label.get("unit")), copied["value"]
            checked += 1
    assert checked >= 150


def test_the_pool_shows_the_words_and_no_unit() -> None:
    from extractor.values.evidence import as_evidence

    root = Path(__file__).parent.parent
    task = Catalog.load(root).get("query_conditions")
    assert task.pool is not None and len(task.pool) >= 50 and not task.pool.problems
    for example in task.pool.examples:
        shown = as_evidence(example.text, example.output, task.values)
        for condition in shown["conditions"]:
            assert "unit" not in condition and condition["value"] in example.text


@pytest.fixture
def conditions_extractor(engine: ScriptedEngine, tmp_path: Path) -> Extractor:
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    return Extractor(settings=settings, engine=engine, catalog=Catalog.load(Path(__file__).parent.parent))


async def test_query_conditions_are_typed_with_their_evidence(
    conditions_extractor: Extractor, engine: ScriptedEngine
) -> None:
    text = "帮我查下周五从杭州出发的航班，票价不超过1200元，行李额16GB以内"
    answer = {
        "conditions": [
            {"field": "departure_date", "operator": "eq", "value": "下周五"},
            {"field": "origin", "operator": "eq", "value": "杭州"},
            {"field": "price", "operator": "le", "value": "1200"},  # cut short: widened to 1200元
            {"field": "baggage", "operator": "le", "value": "16GB"},
        ]
    }
    engine.enqueue([json.dumps(answer, ensure_ascii=False)])
    result = await conditions_extractor.aextract("query_conditions", text, reference_date=REFERENCE)
    assert result.data["conditions"] == [
        {"field": "departure_date", "operator": "eq", "value": "2026-12-11"},
        {"field": "origin", "operator": "eq", "value": "杭州"},
        {"field": "price", "operator": "le", "value": 1200, "unit": "CNY"},
        {"field": "baggage", "operator": "le", "value": 16, "unit": "GB"},
    ]
    spans = {s.path: s for s in result.spans if s.path.endswith("/value")}
    assert (spans["/conditions/2/value"].value, spans["/conditions/2/value"].unit) == ("1200元", "CNY")
    assert text[spans["/conditions/0/value"].start : spans["/conditions/0/value"].end] == "下周五"
    assert spans["/conditions/1/value"].normalized is None  # a place stays its words, grounded as any string
    # The model answers the evidence and never the unit: the engine's schema has no unit.
    assert '"unit"' not in json.dumps(engine.history[0].json_schema or {}) + (engine.history[0].grammar or "")
