"""`extractor eval`: leaf-value metrics, gold files, and a hand-computed run on the scripted engine."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.cli import main
from extractor.comparison import leaves, normalize
from extractor.engines.base import GenerationRequest
from extractor.errors import ExtractorError
from extractor.jobs.evaluation import evaluate
from extractor.jobs.gold import load_gold, select, snake_case, task_map
from extractor.jobs.metrics import Counts, compare

from .conftest import LANDMARK_TEXT, landmark


def test_normalize_case_and_surrounding_punctuation() -> None:
    assert normalize("  The Beatles! ") == "the beatles"
    assert normalize("«Cita Romántica».") == "cita romántica"
    assert normalize("R&B") == "r&b"  # inside punctuation stays
    assert normalize(3.0) == normalize(3) == normalize("3") == "3"
    assert normalize(True) == "true"


def test_leaves_drop_array_indices_nulls_and_empty_values() -> None:
    data = {"artist": ["x", None], "a": {"b": [1, 2.0, "..."]}, "c": None, "d": []}
    assert sorted(leaves(data)) == [("/a/b", "1"), ("/a/b", "2"), ("/artist", "x")]
    assert list(leaves({"a/b": "v"})) == [("/a~1b", "v")]


def test_compare_gold_list_with_predicted_scalar_as_multisets() -> None:
    expected = {"artist": ["Clem Burke"], "music_item": ["song", "song"]}
    predicted = {"artist": "clem burke", "music_item": "song", "playlist": "Jams", "album": None}
    counts = compare(expected, predicted)
    assert counts["/artist"] == Counts(tp=1)
    assert counts["/music_item"] == Counts(tp=1, fn=1)  # expected twice, predicted once
    assert counts["/playlist"] == Counts(fp=1)
    assert "/album" not in counts
    assert compare(expected, None)["/music_item"] == Counts(fn=2)


def test_scores_when_nothing_was_predicted_or_expected() -> None:
    assert (Counts(fn=3).precision, Counts(fn=3).recall, Counts(fn=3).f1) == (0.0, 0.0, 0.0)
    assert Counts(tp=1, fp=1, fn=3).f1 == pytest.approx(2 * 0.5 * 0.25 / 0.75)


# A hand-computed fixture: two tasks in one file, each line's task on the line.
PALACE = "故宫位于北京。"
WINDY = "is it windy in Paris"
RAIN = "rain tomorrow in Oslo"


def weather(**values: str) -> str:
    return json.dumps(values)  # the SNIPS tasks leave absent slots out


ANSWERS = {
    # valid at once: name and country right, city invented (fp, and not in the text), category missed
    LANDMARK_TEXT: [landmark(name="阿尔罕布拉宫", country="西班牙", city="格拉纳达")],
    # valid at once after json-repair (closing brace lost)
    PALACE: [landmark(name="故宫", city="北京")[:-1]],
    # invalid (a slot that is not a string), then valid; gold differs only in case and punctuation
    WINDY: ['{"city": ["Paris"]}', weather(condition_description="windy", city="Paris")],
    # never valid: three attempts, no prediction
    RAIN: ['{"city": 5}', "[]", '{"rain": true}'],
}
GOLD = [
    {
        "id": "a",
        "task": "landmark_slots",
        "text": LANDMARK_TEXT,
        "expected": {"name": ["阿尔罕布拉宫"], "country": ["西班牙"], "category": ["宫殿建筑"]},
    },
    {"id": "b", "task": "landmark_slots", "text": PALACE, "expected": {"name": ["故宫"], "city": ["北京"]}},
    {"task": "snips_get_weather", "text": WINDY, "expected": {"condition_description": ["Windy"], "city": [" paris."]}},
    {
        "task": "snips_get_weather",
        "text": RAIN,
        "expected": {"condition_description": ["rain"], "timeRange": ["tomorrow"], "city": ["Oslo"]},
    },
]


def scripted() -> ScriptedEngine:
    queues = {text: deque(answers) for text, answers in ANSWERS.items()}

    def respond(request: GenerationRequest) -> str:
        last = request.messages[-1]["content"]
        return next(q for text, q in queues.items() if text in last).popleft()

    return ScriptedEngine(respond=respond)


def write_gold(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def test_metrics_on_a_hand_computed_fixture(catalog: Catalog, settings: Settings, tmp_path: Path) -> None:
    items = load_gold(write_gold(tmp_path / "gold.jsonl", GOLD), task=None, known=catalog.names())
    extractor = Extractor(settings=settings, engine=scripted(), catalog=catalog)
    report, predictions = asyncio.run(evaluate(extractor, items, concurrency=2))

    # tp: 2 + 2 + 2 + 0; fp: 1 (格拉纳达); fn: 1 (宫殿建筑) + 3 (the failed line)
    assert (report["tp"], report["fp"], report["fn"]) == (6, 1, 4)
    assert report["precision"] == pytest.approx(6 / 7)
    assert report["recall"] == pytest.approx(6 / 10)
    assert report["f1"] == pytest.approx(12 / 17)
    assert report["schema_valid_rate"] == pytest.approx(3 / 4)
    assert report["first_attempt_valid_rate"] == pytest.approx(2 / 4)
    assert report["repaired_rate"] == pytest.approx(1 / 4)
    assert report["mean_attempts"] == pytest.approx((1 + 1 + 2 + 3) / 4)
    # predicted strings on valid results: 3 + 2 + 2, one of them (格拉纳达) not in its text
    assert report["ungrounded_rate"] == pytest.approx(1 / 7)
    # the scripted engine counts len(answer) // 4 output tokens per attempt
    tokens = sum(max(1, len(a) // 4) for answers in ANSWERS.values() for a in answers)
    assert report["output_tokens_per_doc"] == pytest.approx(tokens / 4)
    assert report["docs"] == 4 and report["docs_per_s"] > 0

    landmark, weather_task = report["per_task"]["landmark_slots"], report["per_task"]["snips_get_weather"]
    assert (landmark["precision"], landmark["recall"]) == (pytest.approx(4 / 5), pytest.approx(4 / 5))
    assert (weather_task["precision"], weather_task["recall"]) == (1.0, pytest.approx(2 / 5))
    assert weather_task["schema_valid_rate"] == 0.5 and weather_task["mean_attempts"] == 2.5
    city = report["per_field"]["landmark_slots/city"]
    assert (city["tp"], city["fp"], city["fn"], city["precision"], city["recall"]) == (1, 1, 0, 0.5, 1.0)
    assert report["per_field"]["snips_get_weather/timeRange"]["support"] == 1

    records = [p.record() for p in predictions]
    assert [r["id"] for r in records] == ["a", "b", 3, 4]  # no id: the line number
    assert records[3]["predicted"] is None and records[3]["attempts"] == 3 and "3 attempt" in records[3]["error"]


def test_eval_cli_json_report_and_predictions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXTRACTOR_HOME", str(tmp_path / "home"))
    gold = write_gold(tmp_path / "gold.jsonl", GOLD[:2])
    out = tmp_path / "pred.jsonl"
    assert main(["eval", "landmark_slots", str(gold), "--engine", "scripted", "--json", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    keys = {"precision", "recall", "f1", "schema_valid_rate", "first_attempt_valid_rate", "repaired_rate"}
    keys |= {"mean_attempts", "ungrounded_rate", "docs_per_s", "output_tokens_per_doc", "per_task", "per_field"}
    assert keys <= report.keys()
    assert all(0 <= report[k] <= 1 for k in keys if k.endswith("_rate"))
    # the dry-run engine answers each task's first example: a valid answer, though not this text's
    assert report["schema_valid_rate"] == 1.0 and report["per_task"]["landmark_slots"]["docs"] == 2
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a", "b"]

    assert main(["eval", "landmark_slots", str(gold), "--engine", "scripted"]) == 0
    text = capsys.readouterr().out
    assert "micro P" in text and "landmark_slots" in text and "schema-valid 100.0%" in text


def test_task_field_with_the_snips_map(catalog: Catalog, tmp_path: Path) -> None:
    assert snake_case("SearchScreeningEvent") == "search_screening_event"
    lines = [
        {"id": "w", "intent": "GetWeather", "text": WINDY, "expected": {"city": ["Paris"]}},
        {"id": "p", "intent": "AddToPlaylist", "text": "add it to Jams", "expected": {"playlist": ["Jams"]}},
    ]
    gold = write_gold(tmp_path / "gold.jsonl", lines)
    items = load_gold(gold, task=None, known=catalog.names(), task_field="intent", mapping=task_map("snips"))
    assert [i.task for i in items] == ["snips_get_weather", "snips_add_to_playlist"]

    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({"GetWeather": "snips_get_weather"}))
    with pytest.raises(ExtractorError, match="line 2: intent 'AddToPlaylist' is not in the task map"):
        load_gold(gold, task=None, known=catalog.names(), task_field="intent", mapping=task_map(str(mapping)))


def test_bad_gold_lines_are_all_named(catalog: Catalog, tmp_path: Path) -> None:
    gold = tmp_path / "gold.jsonl"
    gold.write_text(
        '{"text": "x", "expected": {}}\n'
        "not json\n"
        '{"text": "", "expected": {}}\n'
        '{"text": "x", "expected": []}\n'
        '{"text": "x", "expected": {}, "task": "nope"}\n'
    )
    with pytest.raises(ExtractorError) as caught:
        load_gold(gold, task=None, known=catalog.names())
    message = str(caught.value)
    assert "line 1: no task: pass TASK" in message
    assert "line 2: invalid JSON" in message
    assert "line 3: 'text' must be a non-empty string" in message
    assert "line 4: 'expected' must be a JSON object" in message
    assert "line 5: task 'nope' (from task 'nope') is not loaded" in message


def test_select_per_task_then_limit(catalog: Catalog, tmp_path: Path) -> None:
    tasks = ("landmark_slots", "snips_rate_book")
    lines = [{"task": t, "text": f"{t} {i}", "expected": {}} for i in range(3) for t in tasks]
    items = load_gold(write_gold(tmp_path / "gold.jsonl", lines), task=None, known=catalog.names())
    assert [i.line for i in select(items, per_task=2)] == [1, 2, 3, 4]
    assert [i.line for i in select(items, per_task=2, limit=3)] == [1, 2, 3]


def test_eval_cli_sorts_the_errors_by_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXTRACTOR_HOME", str(tmp_path / "home"))
    gold = write_gold(tmp_path / "gold.jsonl", GOLD[:2])
    assert main(["eval", "landmark_slots", str(gold), "--engine", "scripted", "--json", "--errors"]) == 0
    errors = json.loads(capsys.readouterr().out)["errors"]
    assert errors["docs"] == 2 and set(errors["error_shares"]) == {
        "duplicate",
        "wrong_field",
        "boundary",
        "boundary_and_field",
        "invented",
        "missed",
    }
    assert main(["eval", "landmark_slots", str(gold), "--engine", "scripted", "--errors"]) == 0
    assert "invented" in capsys.readouterr().out
