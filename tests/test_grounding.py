"""Grounding: each extracted string -> code-point offsets in the source text (no engine)."""

from __future__ import annotations

from typing import Any

import pytest

from extractor.grounding import (
    Span,
    field_path,
    is_grounded_field,
    locate,
    missing_messages,
    string_leaves,
    ungrounded_paths,
)


def only(spans: list[Span]) -> Span:
    assert len(spans) == 1, spans
    return spans[0]


# --- exact spans on any script ---------------------------------------------------------------


def test_exact_spans_on_chinese_text() -> None:
    text = "故宫是中国明清两代的皇家宫殿，位于北京。"
    data = {"name": "故宫", "country": "中国", "city": "北京", "category": "皇家宫殿", "period": "明清两代"}
    spans = locate(text, data)
    assert [s.path for s in spans] == ["/name", "/country", "/city", "/category", "/period"]
    for span in spans:
        assert span.status == "exact"
        assert span.start is not None and span.end is not None
        assert text[span.start : span.end] == span.value
    assert [(s.start, s.end) for s in spans] == [(0, 2), (3, 5), (17, 19), (10, 14), (5, 9)]


def test_emoji_before_the_value_counts_as_one_code_point_each() -> None:
    text = "🎉🎉 Meet me in Paris"
    span = only(locate(text, {"city": "Paris"}))
    assert (span.start, span.end, span.status) == (14, 19, "exact")
    assert text[14:19] == "Paris"
    # Not UTF-8 bytes (4 per emoji) nor UTF-16 units (2 per emoji).
    assert span.start != text.encode("utf-8").index(b"Paris")
    assert span.start != len("🎉🎉 Meet me in ".encode("utf-16-le")) // 2


def test_emoji_values_and_zwj_sequences() -> None:
    text = "Family: 👨‍👩‍👧 and flag 🇫🇷!"
    spans = locate(text, {"family": "👨‍👩‍👧", "flag": "🇫🇷"})
    for span in spans:
        assert span.status == "exact"
        assert text[span.start : span.end] == span.value  # type: ignore[misc]
    assert (spans[0].start, spans[0].end) == (8, 13)


def test_combining_characters_are_code_points() -> None:
    text = "Cafe\u0301 Zoë"
    spans = locate(text, {"place": "Cafe\u0301", "name": "Zoë"})
    assert [(s.start, s.end, s.status) for s in spans] == [(0, 5, "exact"), (6, 9, "exact")]
    assert text[6:9] == "Zoë"


def test_composed_value_matches_decomposed_text_as_normalized() -> None:
    text = "Dinner at Cafe\u0301 Zoe\u0308 tonight"
    spans = locate(text, {"place": "Café Zoë"})  # precomposed, as models usually write it
    span = only(spans)
    assert span.status == "normalized"
    assert (span.start, span.end) == (10, 20)
    assert text[span.start : span.end] == "Cafe\u0301 Zoe\u0308"


def test_decomposed_value_matches_composed_text_as_normalized() -> None:
    text = "Rendez-vous au Café"
    span = only(locate(text, {"place": "Cafe\u0301"}))
    assert (span.start, span.end, span.status) == (15, 19, "normalized")
    assert text[span.start : span.end] == "Café"


def test_normalized_match_does_not_split_an_accented_letter() -> None:
    # "Cafe" is not in "Café" (precomposed): a normalized match would cut the é in half. It is
    # a near match without accents, so fuzzy, and the span takes the whole letter.
    span = only(locate("Rendez-vous au Café", {"place": "cafe"}))
    assert (span.status, span.start, span.end) == ("fuzzy", 15, 19)
    assert only(locate("Rendez-vous au Café", {"place": "afé"})).status == "exact"


# --- repeats ---------------------------------------------------------------------------------


def test_value_twice_in_data_maps_to_two_occurrences() -> None:
    text = "from Paris to Lyon and back to Paris"
    spans = locate(text, {"origin": "Paris", "stops": ["Lyon"], "destination": "Paris"})
    origin, stop, destination = spans
    assert (origin.start, origin.end) == (5, 10)
    assert (stop.start, stop.end) == (14, 18)
    assert (destination.start, destination.end) == (31, 36)
    assert all(text[s.start : s.end] == s.value for s in spans)  # type: ignore[misc]


def test_repeat_beyond_the_occurrences_reuses_the_first() -> None:
    spans = locate("only Paris here", {"a": "Paris", "b": "Paris"})
    assert [(s.start, s.end, s.status) for s in spans] == [(5, 10, "exact"), (5, 10, "exact")]


def test_normalized_repeats_also_map_to_distinct_occurrences() -> None:
    text = "NEW  YORK then new york"
    spans = locate(text, {"a": "new york", "b": "New York"})
    assert [s.status for s in spans] == ["exact", "normalized"]
    assert (spans[0].start, spans[0].end) == (15, 23)
    assert (spans[1].start, spans[1].end) == (0, 9)


# --- normalized and missing ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "expected"),
    [
        ("I live in New York City.", "new york", "New York"),
        ("I live in New   York City.", "New York", "New   York"),
        ("I live in New\n\tYork City.", "new york", "New\n\tYork"),
        ("I live in New York City.", "  New York  ", "New York"),
        ("中文 文本　北京 市", "北京市", None),
        ("中文 文本　北京 市", "北京 市", "北京 市"),
        ("中文 文本 北京\u3000市", "北京 市", "北京\u3000市"),
        ("Straße in BERLIN", "berlin", "BERLIN"),
    ],
)
def test_normalized_match_gives_offsets_in_the_original_text(text: str, value: str, expected: str | None) -> None:
    span = only(locate(text, {"v": value}))
    if expected is None:
        assert span.status == "missing"
        return
    assert span.start is not None and span.end is not None
    assert text[span.start : span.end] == expected
    assert span.status == ("exact" if expected == value else "normalized")


def test_missing_value() -> None:
    span = only(locate("Meet me in Paris", {"city": "London"}))
    assert span == Span("/city", "London", None, None, "missing")
    assert missing_messages([span]) == ["/city: 'London' does not occur in the text; copy values exactly from the text"]


def test_empty_and_blank_values_are_missing() -> None:
    assert [s.status for s in locate("some text", {"a": "", "b": "   "})] == ["missing", "missing"]


def test_only_strings_are_located() -> None:
    spans = locate("3 cats on 2024-01-01", {"count": 3, "ok": True, "none": None, "date": "2024-01-01"})
    assert [s.path for s in spans] == ["/date"]


def test_missing_messages_only_lists_missing_and_names_root() -> None:
    spans = locate("abc", {"a": "abc", "b": "zzz"}) + locate("abc", "nope")
    assert missing_messages(spans) == [
        "/b: 'zzz' does not occur in the text; copy values exactly from the text",
        "/: 'nope' does not occur in the text; copy values exactly from the text",
    ]


# --- skipping ungrounded fields --------------------------------------------------------------


SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {
        "cond": {
            "type": "object",
            "properties": {
                "field": {"type": "string", "x-grounded": False},
                "op": {"$ref": "#/$defs/op"},
                "value": {"type": "string"},
            },
        },
        "op": {"enum": ["eq", "lt"], "x-grounded": False},
    },
    "properties": {
        "conditions": {"type": "array", "items": {"$ref": "#/$defs/cond"}},
        "when": {"anyOf": [{"type": "string", "x-grounded": False}, {"type": "null"}]},
        "meta": {"type": "object", "x-grounded": False, "properties": {"source": {"type": "string"}}},
        "a/b": {"type": "string", "x-grounded": False},
        "name": {"type": "string"},
    },
}


def test_ungrounded_paths_through_ref_items_and_branches() -> None:
    assert ungrounded_paths(SCHEMA) == frozenset({"/conditions/field", "/conditions/op", "/when", "/meta", "/a~1b"})


def test_ungrounded_paths_of_a_schema_without_any() -> None:
    assert ungrounded_paths({"type": "object", "properties": {"a": {"type": "string"}}}) == frozenset()


def test_recursive_schema_does_not_loop() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                    "tag": {"type": "string", "x-grounded": False},
                },
            }
        },
        "properties": {"root": {"$ref": "#/$defs/node"}},
    }
    found = ungrounded_paths(schema)
    assert "/root/tag" in found
    assert "/root/kids/tag" in found


def test_locate_skips_ungrounded_fields() -> None:
    text = "Alice wants flights under 300 euros to Rome"
    data = {
        "conditions": [
            {"field": "price", "op": "lt", "value": "300 euros"},
            {"field": "destination", "op": "eq", "value": "Rome"},
        ],
        "when": "2024-06-01",
        "meta": {"source": "nowhere in the text"},
        "a/b": "not here either",
        "name": "Alice",
    }
    spans = locate(text, data, skip=ungrounded_paths(SCHEMA))
    assert [(s.path, s.status) for s in spans] == [
        ("/conditions/0/value", "exact"),
        ("/conditions/1/value", "exact"),
        ("/name", "exact"),
    ]
    # Without the skip list every string is checked.
    unskipped = locate(text, data)
    assert {s.path for s in unskipped if s.status == "missing"} == {
        "/conditions/0/field",
        "/conditions/0/op",
        "/conditions/1/field",
        "/conditions/1/op",
        "/when",
        "/meta/source",
        "/a~1b",
    }


@pytest.mark.parametrize(
    ("pointer", "grounded"),
    [
        ("/conditions/3/field", False),
        ("/conditions/3/value", True),
        ("/meta", False),
        ("/meta/source", False),
        ("/metadata", True),
        ("/name", True),
    ],
)
def test_is_grounded_field(pointer: str, grounded: bool) -> None:
    skip = frozenset({"/conditions/field", "/meta"})
    assert is_grounded_field(pointer, skip) is grounded


# --- pointers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("/conditions/0/value", "/conditions/value"),
        ("/a/12/b/3", "/a/b"),
        ("/matrix/0/1", "/matrix"),
        ("/tags/0", "/tags"),
        ("/v2/x1", "/v2/x1"),
        ("/a/0b", "/a/0b"),
        ("", ""),
    ],
)
def test_field_path_strips_indices(pointer: str, expected: str) -> None:
    assert field_path(pointer) == expected


def test_string_leaves_escape_keys_and_index_lists() -> None:
    data = {"a/b": "x", "t~": ["y", {"z": "w"}], "n": 1}
    assert list(string_leaves(data)) == [("/a~1b", "x"), ("/t~0/0", "y"), ("/t~0/1/z", "w")]


# --- fuzzy -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "matched"),
    [
        (
            "What will the weather be in Lago Vista Tennessee on feb. 2nd?",
            "Lago Vista, Tennessee",
            "Lago Vista Tennessee",
        ),
        ("What will the weather be on feb. 2nd, 2037?", "feb 2nd, 2037", "feb. 2nd, 2037"),
        ("play the top-20 Ramin Djawadi album on Deezer", "Ramin Djawdi", "Ramin Djawadi"),  # whole word, not "Djawad"
        ("阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。", "阿尔罕布拉宫殿", "阿尔罕布拉宫"),
        ("🎉🎉 party at the Musée d'Orsay tonight", "Musee d Orsay", "Musée d'Orsay"),
    ],
)
def test_near_matches_are_fuzzy_with_the_text_they_match(text: str, value: str, matched: str) -> None:
    span = only(locate(text, {"v": value}))
    assert span.status == "fuzzy"
    assert span.start is not None and span.end is not None
    assert text[span.start : span.end] == matched


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Meet me in Paris", "London"),
        ("Weather in Tennessee", "Tenesse"),  # one letter short in seven: below the threshold
        ("Meet me in Paris", "Pz"),  # too short to guess
        ("中文 文本　北京 市", "北京市"),
    ],
)
def test_distant_or_short_values_stay_missing(text: str, value: str) -> None:
    assert only(locate(text, {"v": value})).status == "missing"


def test_exact_and_normalized_win_over_fuzzy() -> None:
    spans = locate("in New  York and Lago Vista", {"a": "New York", "b": "lago vista"})
    assert [s.status for s in spans] == ["normalized", "normalized"]


def test_feedback_quotes_the_text_a_fuzzy_value_nearly_matches() -> None:
    text = "rain in Lago Vista Tennessee"
    spans = locate(text, {"city": "Lago Vista, Tennessee", "state": "Ohio", "when": "rain"})
    assert [s.status for s in spans] == ["fuzzy", "missing", "exact"]
    assert missing_messages(spans, text) == [
        "/city: 'Lago Vista, Tennessee' does not occur in the text; the text says 'Lago Vista Tennessee': "
        "copy it exactly",
        "/state: 'Ohio' does not occur in the text; copy values exactly from the text",
    ]
