"""Long documents: splitting, merging, and the chunked pipeline on the scripted engine."""

from __future__ import annotations

import itertools
import json
import random
import re
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from extractor import ExtractionFailed, Extractor, ScriptedEngine, Settings, TextTooLongError
from extractor.chunking import Chunk, ChunkOutcome, merge, split
from extractor.engines.base import GenerationRequest
from extractor.errors import ChunkedExtractionFailed
from extractor.grounding import Span

from .test_grounding_strict import make_catalog, text_of

WORDS = [
    "the",
    "river",
    "ran",
    "past",
    "old",
    "mills",
    "and",
    "quiet",
    "farms",
    "while",
    "merchants",
    "argued",
    "about",
    "prices",
    "in",
    "town",
]
CJK_SENTENCES = [
    "今天天气很好，我们沿着河边慢慢散步。",
    "这本书讲述了一个漫长而复杂的家族故事。",
    "市场上的商人们一直在讨论粮食的价格！",
    "山谷里的风很大，吹得树叶沙沙作响？",
    "老人坐在门口，看着孩子们在院子里玩耍。",
]


def english(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + ". "
        if rng.random() < 0.1:
            sentence += "\n\n"
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars]


def chinese(rng: random.Random, chars: int) -> str:
    out = ""
    while len(out) < chars:
        out += rng.choice(CJK_SENTENCES)
    return out[:chars]


# --- split -----------------------------------------------------------------------------------


def check_chunks(text: str, chunks: list[Chunk], max_chars: int) -> None:
    assert chunks
    covered = set()
    for chunk in chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert 0 < chunk.end - chunk.start <= max_chars
        covered.update(range(chunk.start, chunk.end))
        if chunk.start > 0:  # no chunk starts inside a character sequence
            first = text[chunk.start]
            assert (
                not unicodedata.combining(first) and first not in "\u200d\ufe0f" and text[chunk.start - 1] != "\u200d"
            )
    assert all(i in covered or text[i].isspace() for i in range(len(text)))
    for before, after in itertools.pairwise(chunks):
        assert before.start < after.start and before.end < after.end  # progress, no chunk inside another


def test_split_english_on_sentence_ends_with_overlap() -> None:
    text = english(random.Random(1), 5000)
    chunks = split(text, max_chars=800, overlap=150)
    check_chunks(text, chunks, 800)
    for chunk in chunks[:-1]:
        assert re.search(r"\.\s*$", chunk.text), chunk.text[-30:]  # cut after a sentence
    for before, after in itertools.pairwise(chunks):
        assert 0 < before.end - after.start <= 150  # overlapping, by at most the overlap
        assert after.text[0].isupper()  # the overlap starts at a sentence too


def test_split_cjk_without_spaces_on_sentence_ends() -> None:
    text = chinese(random.Random(2), 3000)
    chunks = split(text, max_chars=200, overlap=40)
    check_chunks(text, chunks, 200)
    for chunk in chunks[:-1]:
        assert chunk.text[-1] in "。！？", chunk.text[-5:]
    assert all(chunk.end - chunk.start > 100 for chunk in chunks[:-1])


def test_split_without_any_boundary_never_cuts_a_character_sequence() -> None:
    text = ("e\u0301" * 7 + "👨‍👩‍👧" + "🇫🇷") * 40
    chunks = split(text, max_chars=23, overlap=5)
    check_chunks(text, chunks, 23)


def test_split_words_when_a_sentence_is_too_long() -> None:
    text = " ".join(["word"] * 400)
    chunks = split(text, max_chars=100, overlap=0)
    check_chunks(text, chunks, 100)
    assert all(c.text.startswith("word") and not c.text.rstrip().endswith("wor") for c in chunks)
    assert all(a.end <= b.start for a, b in itertools.pairwise(chunks))  # overlap 0: none


def test_split_leaves_out_blank_chunks_and_checks_sizes() -> None:
    assert [c.text.strip() for c in split("a." + " " * 300 + "b.", max_chars=100, overlap=0)] == ["a.", "b."]
    with pytest.raises(ValueError, match="overlap"):
        split("text", max_chars=10, overlap=10)


# --- merge -----------------------------------------------------------------------------------


def outcome(start: int, data: dict[str, Any], spans: list[Span], removed: list[Span] | None = None) -> ChunkOutcome:
    return ChunkOutcome(chunk=Chunk(start, start + 100, ""), data=data, spans=spans, removed=removed or [])


def test_merge_arrays_concatenate_and_drop_the_same_mention_twice() -> None:
    first = outcome(
        0,
        {"cities": ["Paris", "Lyon"], "counts": [1, 2]},
        [Span("/cities/0", "Paris", 10, 15, "exact"), Span("/cities/1", "Lyon", 90, 94, "exact")],
    )
    second = outcome(
        80,  # overlaps the first: Lyon at 90 is the same mention
        {"cities": ["Lyon", "Paris", "Nice"], "counts": [2, 3]},
        [
            Span("/cities/0", "Lyon", 90, 94, "exact"),
            Span("/cities/1", "Paris", 150, 155, "exact"),  # the same value at another place: kept
            Span("/cities/2", "Nice", None, None, "missing"),
        ],
    )
    merged = merge([first, second], schema={"properties": {"cities": {"type": "array"}}})
    assert merged.data == {"cities": ["Paris", "Lyon", "Paris", "Nice"], "counts": [1, 2, 3]}
    assert [(s.path, s.start) for s in merged.spans] == [
        ("/cities/0", 10),
        ("/cities/1", 90),
        ("/cities/2", 150),
        ("/cities/3", None),
    ]


def test_merge_cuts_arrays_at_max_items_into_removed() -> None:
    parts = [
        outcome(i * 100, {"tags": [f"t{i}"]}, [Span("/tags/0", f"t{i}", i * 100, i * 100 + 2, "exact")])
        for i in range(4)
    ]
    merged = merge(parts, schema={"properties": {"tags": {"type": "array", "maxItems": 2}}})
    assert merged.data == {"tags": ["t0", "t1"]}
    assert [(s.value, s.start) for s in merged.removed] == [("t2", 200), ("t3", 300)]


def test_merge_scalars_take_the_first_grounded_value() -> None:
    parts = [
        outcome(0, {"city": None, "country": "Spain", "n": None}, [Span("/country", "Spain", None, None, "missing")]),
        outcome(
            100,
            {"city": "Lyon", "country": "Frnce", "n": 3},
            [
                Span("/city", "Lyon", 120, 124, "exact"),
                Span("/country", "Frnce", 130, 136, "fuzzy"),
            ],
        ),
        outcome(
            200,
            {"city": "Paris", "country": "France", "n": 4},
            [
                Span("/city", "Paris", 210, 215, "exact"),  # a tie with Lyon: the earlier chunk wins
                Span("/country", "France", 230, 236, "exact"),
            ],
        ),
    ]
    merged = merge(parts, schema={})
    assert merged.data == {"city": "Lyon", "country": "France", "n": 3}
    assert sorted((s.path, s.start) for s in merged.spans) == [("/city", 120), ("/country", 230)]
    only_ungrounded = merge([parts[0], outcome(50, {"city": None, "country": "Spain", "n": None}, [])], schema={})
    assert only_ungrounded.data == {"city": None, "country": "Spain", "n": None}


# --- the chunked pipeline --------------------------------------------------------------------

CODE = re.compile(r"[A-Z]{2}-\d{4}")
FACTS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "codes": {"type": "array", "items": {"type": "string"}, "maxItems": 40},
        "first_code": {"type": ["string", "null"]},
        "landmarks": {"type": "array", "items": {"type": "string"}, "maxItems": 40},
    },
    "required": ["codes", "first_code", "landmarks"],
    "additionalProperties": False,
    "x-extractor": {"chunking": {"max_chars": 4000, "overlap": 400}},
}
LANDMARKS = ["阿尔罕布拉宫", "埃菲尔铁塔", "泰姬陵"]


def facts_in(request: GenerationRequest) -> str:
    """A model that reads every planted fact in the text it was given, and nothing else."""
    text = text_of(request)
    codes = CODE.findall(text)
    landmarks = [name for name in LANDMARKS for _ in re.finditer(name, text)]
    return json.dumps({"codes": codes, "first_code": codes[0] if codes else None, "landmarks": landmarks})


def plant(filler: str, facts: list[tuple[int, str]]) -> tuple[str, list[tuple[int, str]]]:
    """Insert each fact at (about) its offset, at a sentence start; returns the text and the true offsets."""
    text, placed, cursor = "", [], 0
    for offset, fact in facts:
        cut = max(filler.rfind(". ", cursor, offset) + 2, filler.rfind("。", cursor, offset) + 1, cursor)
        text += filler[cursor:cut]
        sentence = f"Remember {fact}. " if fact.isascii() else f"请记住{fact}。"
        placed.append((len(text) + sentence.index(fact), fact))
        text += sentence
        cursor = cut
    return text + filler[cursor:], placed


@pytest.fixture
def facts_extractor(tmp_path: Path) -> tuple[Extractor, ScriptedEngine]:
    catalog = make_catalog(tmp_path, {"facts": FACTS, "plain": {**FACTS, "x-extractor": {}}})
    engine = ScriptedEngine(respond=facts_in, max_model_len=4096)
    settings = Settings.from_env({}, home=tmp_path, engine="scripted")
    return Extractor(settings=settings, engine=engine, catalog=catalog), engine


async def test_30000_chars_facts_in_every_third_with_global_offsets(
    facts_extractor: tuple[Extractor, ScriptedEngine],
) -> None:
    extractor, engine = facts_extractor
    rng = random.Random(3)
    # One fact every ~2,300 characters, so the first, middle and last thirds all hold some and
    # some fall where two chunks overlap.
    wanted = [(600 + i * 2300, f"{chr(65 + i)}Q-{1000 + i * 7}") for i in range(13)]
    text, placed = plant(english(rng, 30_000), wanted)
    assert len(text) >= 30_000 and {p // 10_000 for p, _ in placed} == {0, 1, 2}
    result = await extractor.aextract("facts", text)

    assert result.data["codes"] == [fact for _, fact in placed]  # all of them, once each, in order
    spans = {s.path: s for s in result.spans}
    for index, (offset, fact) in enumerate(placed):
        span = spans[f"/codes/{index}"]
        assert (span.start, span.end, span.status) == (offset, offset + len(fact), "exact")
        assert text[span.start : span.end] == fact
    assert result.data["first_code"] == placed[0][1] and spans["/first_code"].start == placed[0][0]

    assert len(result.chunks) == len(engine.history) > 7
    assert all(c.end - c.start <= 4000 for c in result.chunks)
    assert {a.chunk for a in result.attempts} == set(range(len(result.chunks)))
    seen_twice = [p for p, _ in placed if sum(c.start <= p < c.end for c in result.chunks) == 2]
    assert seen_twice, "expected a fact inside an overlap (the de-duplication is exercised)"
    assert result.usage.prompt_tokens == sum(a.prompt_tokens for a in result.attempts)


async def test_cjk_document_split_by_the_model_window_on_request(
    facts_extractor: tuple[Extractor, ScriptedEngine],
) -> None:
    extractor, engine = facts_extractor
    wanted = [(500, "阿尔罕布拉宫"), (9_000, "埃菲尔铁塔"), (19_500, "泰姬陵"), (29_000, "阿尔罕布拉宫")]
    text, placed = plant(chinese(random.Random(4), 30_000), wanted)
    with pytest.raises(TextTooLongError, match="too long"):  # a request that turns chunking off
        await extractor.aextract("plain", text, chunk=False)
    result = await extractor.aextract("plain", text)  # a task chunks a text past the window by default
    assert result.data["landmarks"] == [fact for _, fact in placed]  # the same name twice, at two places
    for index, (offset, fact) in enumerate(placed):
        span = next(s for s in result.spans if s.path == f"/landmarks/{index}")
        assert (span.start, text[span.start : span.end]) == (offset, fact)  # type: ignore[index]
    prompts = [engine.count_prompt_tokens(r.messages) for r in engine.history]
    assert max(prompts) + 2 * 256 <= 4096  # each chunk leaves room for the answer and a re-ask
    for chunk in result.chunks[:-1]:
        assert text[chunk.end - 1] in "。！？"


async def test_chunks_run_in_one_concurrent_batch(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path, {"facts": FACTS})
    engine = ScriptedEngine(respond=facts_in, delay_s=0.3)
    extractor = Extractor(settings=Settings.from_env({}, engine="scripted"), engine=engine, catalog=catalog)
    text = english(random.Random(5), 30_000)
    started = time.perf_counter()
    result = await extractor.aextract("facts", text)
    assert len(result.chunks) >= 8
    # not 0.3 s per chunk in turn: well under half of that, with room for a loaded machine (the
    # fast suite's workers share 2 cores; a bound of 0.9 s failed there at 1.04 s)
    assert time.perf_counter() - started < 0.3 * len(result.chunks) / 2


async def test_short_text_with_chunking_on_is_read_whole(facts_extractor: tuple[Extractor, ScriptedEngine]) -> None:
    extractor, _engine = facts_extractor
    result = await extractor.aextract("facts", "Remember ZZ-1234.")
    assert result.chunks == [] and result.attempts[0].chunk is None and result.data["codes"] == ["ZZ-1234"]


async def test_a_failed_chunk_fails_the_document_naming_it(facts_extractor: tuple[Extractor, ScriptedEngine]) -> None:
    extractor, _ = facts_extractor
    text, _ = plant(english(random.Random(6), 12_000), [(6_000, "BAD")])

    def respond(request: GenerationRequest) -> str:
        return "not json" if "BAD" in text_of(request) else facts_in(request)

    extractor.engine._respond = respond  # type: ignore[attr-defined]
    with pytest.raises(ChunkedExtractionFailed) as caught:
        await extractor.aextract("facts", text)
    assert isinstance(caught.value, ExtractionFailed)
    assert re.search(r"no valid result for chunk\(s\) \d+ \(characters \d+-\d+\) of \d+", str(caught.value))
    failed = {a.chunk for a in caught.value.attempts if a.errors}
    assert failed and all(len([a for a in caught.value.attempts if a.chunk == c]) == 3 for c in failed)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"max_chars": 50}, "50 is less than the minimum of 100"),
        ({"max_chars": 1000, "overlap": 600}, "overlap must be at most half of max_chars"),
        ({"size": 1000}, "Additional properties are not allowed"),
    ],
)
def test_bad_chunking_settings_name_the_pointer(tmp_path: Path, setting: dict[str, Any], message: str) -> None:
    from extractor import Catalog

    (tmp_path / "schemas").mkdir()
    (tmp_path / "prompts").mkdir()
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "x-extractor": {"chunking": setting}}
    (tmp_path / "schemas" / "t.json").write_text(json.dumps(schema), encoding="utf-8")
    (tmp_path / "prompts" / "t.j2").write_text("{{ text }}", encoding="utf-8")
    catalog = Catalog.load(tmp_path)
    assert catalog.tasks == {} and len(catalog.errors) == 1
    assert catalog.errors[0].pointer.startswith("#/x-extractor/chunking") and message in str(catalog.errors[0])
