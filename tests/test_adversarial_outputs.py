"""Issue 13, cases 10 and 11 and the KV-cache sizing: output budgets, garbage outputs (scripted engine)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from extractor import Catalog, ExtractionFailed, Extractor, ScriptedEngine, Settings
from extractor.catalog.budget import check, worst_case
from extractor.catalog.prompting import render
from extractor.cli import main
from extractor.engines.base import GenerationRequest
from extractor.engines.memory import GIB, cpu_kv_cache_size
from extractor.parsing import MAX_DEPTH, MAX_REPAIR_CHARS, parse
from extractor.server import create_app

from .conftest import LANDMARK_TEXT, landmark
from .test_server import metric

pytestmark = pytest.mark.adversarial

FIELDS = ["person", "place", "org", "book", "film", "song", "event", "product", "date", "title"]
ENTITY_TEXT = "鲁迅在北京大学讲授《中国小说史略》，后来在上海写作，常去内山书店，与许广平同看电影《城市之光》。" * 2


def entity_schema(*, max_tokens: int = 200, max_length: int | None = 12) -> dict[str, Any]:
    """The issue's task: ten Chinese entity fields, each an array of at most 5 strings."""
    item: dict[str, Any] = {"type": "string"}
    if max_length is not None:
        item["maxLength"] = max_length
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "实体",
        "type": "object",
        "properties": {f: {"type": "array", "items": item, "maxItems": 5, "description": f} for f in FIELDS},
        "required": FIELDS,
        "additionalProperties": False,
        "x-extractor": {"max_tokens": max_tokens, "grounding": "off"},
    }


def entity_catalog(root: Path, schema: dict[str, Any]) -> Path:
    (root / "schemas").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "schemas" / "entities.json").write_text(json.dumps(schema, ensure_ascii=False), encoding="utf-8")
    (root / "prompts" / "entities.j2").write_text(
        "抽取实体：\n{% for f in fields %}- {{ f.name }}\n{% endfor %}", encoding="utf-8"
    )
    return root


# A full answer: 10 fields x 5 values of 12 characters -> about 800 characters, 200 scripted tokens.
FULL = json.dumps({f: [ENTITY_TEXT[i : i + 12] for i in range(0, 60, 12)] for f in FIELDS}, ensure_ascii=False)


def entity_extractor(tmp_path: Path, engine: ScriptedEngine, **schema: Any) -> Extractor:
    root = entity_catalog(tmp_path / "catalog", entity_schema(**schema))
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted", tasks_dir=root)
    return Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))


# --- case 10: output budgets -------------------------------------------------------------------


async def test_a_cut_is_reasked_with_a_larger_budget(tmp_path: Path) -> None:
    assert len(FULL) > 200 * 4  # past max_tokens 200 for the scripted engine (4 characters a token)
    engine = ScriptedEngine(respond=lambda request: FULL, cut_at_max_tokens=True)
    result = await entity_extractor(tmp_path, engine).aextract("entities", ENTITY_TEXT)
    assert [r.max_tokens for r in engine.history] == [200, 400]  # never the same budget twice
    assert result.data == json.loads(FULL) and result.cuts == 1
    assert result.attempts[0].finish_reason == "length" and "cut off at 200 tokens" in result.attempts[0].errors[0]


async def test_a_cut_answer_is_never_a_result_even_when_repair_makes_it_valid(tmp_path: Path) -> None:
    # Cut inside the last value: json-repair closes it into a schema-valid object whose last value is cut short.
    cut_answer = FULL[: FULL.rindex('"') - 3]
    engine = ScriptedEngine([cut_answer, FULL])
    engine.generate = _finishing(engine, ["length", "stop"])  # type: ignore[method-assign]
    result = await entity_extractor(tmp_path, engine).aextract("entities", ENTITY_TEXT)
    assert parse(cut_answer).ok  # repair alone would have let it through
    assert len(result.attempts) == 2 and result.data == json.loads(FULL)


async def test_budgets_grow_on_every_cut_then_fail_with_every_attempt(tmp_path: Path) -> None:
    endless = json.dumps({f: ["很" * 12] * 5 for f in FIELDS}, ensure_ascii=False) * 10
    engine = ScriptedEngine(respond=lambda request: endless, cut_at_max_tokens=True, max_model_len=8192)
    with pytest.raises(ExtractionFailed) as caught:
        await entity_extractor(tmp_path, engine).aextract("entities", ENTITY_TEXT)
    assert [r.max_tokens for r in engine.history] == [200, 400, 800]
    assert all(a.finish_reason == "length" for a in caught.value.attempts)


async def test_no_reask_when_the_window_leaves_no_room_for_a_larger_budget(tmp_path: Path) -> None:
    probe = entity_extractor(tmp_path / "probe", ScriptedEngine())
    first_prompt = probe.engine.count_prompt_tokens(render(probe.task("entities"), ENTITY_TEXT))
    # The first attempt just fits; a re-ask (its prompt carries the feedback) leaves less than 200 tokens.
    engine = ScriptedEngine(respond=lambda r: FULL, cut_at_max_tokens=True, max_model_len=first_prompt + 200)
    with pytest.raises(ExtractionFailed) as caught:
        await entity_extractor(tmp_path, engine).aextract("entities", ENTITY_TEXT)
    assert [r.max_tokens for r in engine.history] == [200]  # not re-asked with the same budget, or a smaller one
    assert "no room in the model window" in caught.value.attempts[-1].errors[-1]


async def test_metrics_count_cuts(tmp_path: Path) -> None:
    engine = ScriptedEngine(respond=lambda request: FULL, cut_at_max_tokens=True)
    app = create_app(entity_extractor(tmp_path, engine))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.post("/extract/entities", json={"text": ENTITY_TEXT})
        assert response.status_code == 200 and response.json()["cuts"] == 1
        text = (await client.get("/metrics")).text
    assert metric(text, "extractor_cut_attempts_total", task="entities") == 1


def test_worst_case_answer_from_the_schema() -> None:
    case = worst_case(entity_schema(max_length=12))
    assert case.bounded and 10 * 5 * 13 < case.tokens < 10 * 5 * 13 + 150  # the values, then names and syntax
    assert check(entity_schema(max_tokens=200), max_tokens=200) is not None
    assert check(entity_schema(max_tokens=1000), max_tokens=1000) is None
    unbounded = worst_case(entity_schema(max_length=None))
    assert not unbounded.bounded and "/person/items: string without maxLength" in unbounded.unbounded
    assert worst_case({"type": "object", "properties": {"k": {"enum": ["a", "bbbbbb"]}}}).tokens < 10
    cyclic = {"$defs": {"n": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}
    assert not worst_case(cyclic).bounded  # a $ref cycle is no bound, and no endless recursion


def test_tasks_check_warns_when_the_worst_case_cannot_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = entity_catalog(tmp_path, entity_schema(max_tokens=200))
    assert main(["tasks", "check", "--tasks-dir", str(root)]) == 0  # a warning, not a failure
    err = capsys.readouterr().err
    assert "warning: entities: the longest answer the schema allows takes about" in err
    assert "over max_tokens 200" in err


def test_tasks_check_is_quiet_when_it_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = entity_catalog(tmp_path, entity_schema(max_tokens=2000))
    assert main(["tasks", "check", "--tasks-dir", str(root)]) == 0
    assert "warning: entities" not in capsys.readouterr().err


# --- case 11: garbage outputs ------------------------------------------------------------------

GOOD = landmark(name="阿尔罕布拉宫", country="西班牙")
GARBAGE = {
    "cut": '{"name": "阿尔罕布拉宫", "country": "西',
    "empty": "",
    "whitespace": " \n\t  ",
    "valid_then_garbage": '{"name": "阿尔罕布拉宫"} <|im_end|> garbage',
    "two_objects": GOOD + GOOD,
    "unterminated_200kb": '{"name": "' + "宫" * 200_000,
    "nested_5000": '{"name": ' * 5000 + "null" + "}" * 5000,
    "repairs_to_empty_object": "{",
    "prose": "I cannot answer that.",
}


@pytest.mark.parametrize("raw", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_is_a_failed_parse_or_an_invalid_value_within_bounds(raw: str) -> None:
    started = time.perf_counter()
    parsed = parse(raw)
    assert time.perf_counter() - started < 0.5
    assert not parsed.ok or parsed.value not in ("", None, {}, [])


def test_repair_is_bounded_in_size_and_depth() -> None:
    assert "too long to repair" in parse('{"a": "' + "x" * MAX_REPAIR_CHARS).errors[0]
    assert parse("[" * MAX_DEPTH + "]" * MAX_DEPTH).ok
    assert "levels deep" in parse("[" * (MAX_DEPTH + 1)).errors[0]
    assert parse('{"a": "' + "[" * 1000 + '"}').value == {"a": "[" * 1000}  # brackets inside strings do not count


@pytest.mark.parametrize("raw", GARBAGE.values(), ids=GARBAGE.keys())
async def test_garbage_is_reasked_and_never_a_result(raw: str, extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([raw, GOOD])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    assert len(result.attempts) == 2 and result.attempts[0].errors  # the garbage was a failed attempt
    assert result.data == json.loads(GOOD)


@pytest.mark.parametrize("raw", GARBAGE.values(), ids=GARBAGE.keys())
async def test_garbage_every_time_is_a_422_never_a_200(raw: str, extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([raw] * 3)
    app = create_app(extractor)
    started = time.perf_counter()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
    assert response.status_code == 422 and response.json()["error"] == "extraction_failed"
    assert len(response.json()["attempts"]) == 3 and time.perf_counter() - started < 3


def _finishing(engine: ScriptedEngine, reasons: list[str]) -> Any:
    """``engine.generate`` with the given finish reasons, in turn."""
    original = engine.generate
    turns = iter(reasons)

    async def generate(request: GenerationRequest) -> Any:
        from dataclasses import replace

        return replace(await original(request), finish_reason=next(turns))

    return generate


# --- the CPU KV cache sized from free memory ----------------------------------------------------


@pytest.mark.parametrize(
    ("free_gib", "expected"),
    [(64.0, 4), (6.0, 4), (3.5, 2), (2.3, 1), (0.8, 1)],
)
def test_kv_cache_is_sized_from_free_memory_when_unset(free_gib: float, expected: int) -> None:
    size = cpu_kv_cache_size(requested=None, available_bytes=int(free_gib * GIB), model_bytes=270 * 1024**2)
    assert size.gib == expected
    assert (size.note is None) == (expected == 4)  # the log says so whenever it is not the default
    if size.note is not None:
        assert f"{free_gib:.1f} GiB" in size.note


def test_kv_cache_setting_wins() -> None:
    assert cpu_kv_cache_size(requested=6, available_bytes=2 * GIB, model_bytes=0).gib == 6
    from extractor.cli import build_parser

    assert build_parser().parse_args(["serve", "--kv-cache-space-gib", "3"]).kv_cache_space_gib == 3  # an int
    assert Settings.from_env({}).kv_cache_space_gib is None  # unset: sized from free memory
