"""Example pools: checked at load line by line, chosen per request by BM25, shown as compact demonstrations."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from extractor import Catalog, Extractor, Settings
from extractor.catalog.prompting import DEFAULT_SYSTEM, render
from extractor.cli import main
from extractor.errors import TaskError
from extractor.examples.importing import import_gold, shape
from extractor.examples.selection import Selector, tokens

from .test_tasks import base_schema, write_task

INSTRUCTION = "Extract the city.\n{% for f in fields %}- {{ f.name }}: {{ f.description }}\n{% endfor %}"


def pool_catalog(root: Path, lines: list[Any], *, settings: dict[str, Any] | None = None) -> Catalog:
    schema = base_schema()
    schema["x-extractor"].update(settings or {})
    write_task(root, "city", schema, INSTRUCTION)
    (root / "examples").mkdir(exist_ok=True)
    body = "".join((line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n" for line in lines)
    (root / "examples" / "city.jsonl").write_text(body, encoding="utf-8")
    return Catalog.load(root)


def line(text: str, city: str | None, when: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"text": text, "output": {"city": city, "when": when}, **extra}


GOOD_LINES = [
    line("Dinner in Oslo tonight", "Oslo", "2024-01-01", id="a"),
    line("Flights to Lima next week", "Lima"),
    line("Concert in Oslo on Sunday", "Oslo"),
    line("Nothing planned", None),
]


def test_bad_pool_lines_are_reported_by_file_and_line_and_left_out(tmp_path: Path) -> None:
    lines: list[Any] = [
        GOOD_LINES[0],
        "{not json",
        line("Off to Rome", "Paris"),  # the value is not in the text
        {"text": "Madrid", "output": {"city": "Madrid"}},  # 'when' is required
        {"text": "x", "output": {"city": None, "when": None}, "label": 1},  # unknown key
        GOOD_LINES[1],
        ["a list"],
    ]
    catalog = pool_catalog(tmp_path, lines)
    task = catalog.get("city")
    assert task.pool is not None and [e.text for e in task.pool.examples] == [
        GOOD_LINES[0]["text"],
        GOOD_LINES[1]["text"],
    ]
    assert task.pool.examples[0].id == "a"
    pool_file = str(tmp_path / "examples" / "city.jsonl")
    warnings = [w for w in task.warnings if w.startswith(pool_file)]
    assert [w.split(":")[1] for w in warnings] == ["2", "3", "4", "5", "7"]
    assert "invalid JSON" in warnings[0] and "'Paris' does not occur in the text" in warnings[1]
    assert "'when' is a required property" in warnings[2] and "unknown key(s) 'label'" in warnings[3]


def test_a_pool_with_no_usable_line_falls_back_to_the_fixed_examples(tmp_path: Path) -> None:
    task = pool_catalog(tmp_path, ["{", line("Rome", "Paris")]).get("city")
    assert not task.uses_pool and any("no usable line" in w for w in task.warnings)
    shown = [m["content"] for m in render(task, "Lunch in Oslo")[1:-1:2]]
    assert shown == [e.text for e in task.examples]


def test_instruction_layout_keeps_the_system_turn_identical_and_examples_compact(tmp_path: Path) -> None:
    layout = {"examples_from_pool": {"k": 2, "hints": False}}  # the layout alone (hints: test_lexicon)
    task = pool_catalog(tmp_path, GOOD_LINES, settings=layout).get("city")
    assert task.instruction_only and task.uses_pool
    first, second = render(task, "Lunch in Oslo on Sunday"), render(task, "Flights to Lima")
    assert first[0] == second[0] and first[0]["role"] == "system"
    assert first[0]["content"].startswith(DEFAULT_SYSTEM) and "- city: the city named" in first[0]["content"]
    assert [m["role"] for m in first] == ["system", "user", "assistant", "user", "assistant", "user"]
    # nearest last, just before the request; a demonstration is the bare text and compact JSON
    assert first[3]["content"] == "Concert in Oslo on Sunday"
    assert first[4]["content"] == '{"city":"Oslo","when":null}'
    assert first[-1]["content"] == "Lunch in Oslo on Sunday"
    assert second[3]["content"] == "Flights to Lima next week"
    retry = render(task, "Lunch in Oslo on Sunday", feedback=["$.city: wrong"], previous='{"city":"x"}')
    assert retry[:-1] == first[:-1]
    assert retry[-1]["content"].startswith('Lunch in Oslo on Sunday\n\nYour previous answer {"city":"x"} has')
    assert retry[-1]["content"].endswith("- $.city: wrong")


def test_pool_settings_choose_how_many_or_turn_the_pool_off(tmp_path: Path) -> None:
    six = pool_catalog(tmp_path / "a", GOOD_LINES, settings={"examples_from_pool": {"k": 6}}).get("city")
    assert len(render(six, "Oslo")) == 2 + 2 * len(GOOD_LINES)
    off = pool_catalog(tmp_path / "b", GOOD_LINES, settings={"examples_from_pool": False}).get("city")
    assert not off.uses_pool and [m["content"] for m in render(off, "Oslo")[1:-1:2]] == [e.text for e in off.examples]
    catalog = pool_catalog(tmp_path / "c", GOOD_LINES, settings={"examples_from_pool": {"k": 99}})
    (error,) = catalog.errors
    assert isinstance(error, TaskError) and error.pointer == "#/x-extractor/examples_from_pool/k"


def test_turns_layout_renders_the_template_around_each_retrieved_example(tmp_path: Path) -> None:
    schema = base_schema()
    schema["x-extractor"]["examples_from_pool"] = {"hints": False}  # the layout alone (hints: test_lexicon)
    write_task(tmp_path, "city", schema, "Find the city.\nText: {{ text }}")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "city.jsonl").write_text("".join(json.dumps(x) + "\n" for x in GOOD_LINES))
    task = Catalog.load(tmp_path).get("city")
    assert not task.instruction_only
    messages = render(task, "Lunch in Oslo on Sunday")
    assert messages[0]["content"] == DEFAULT_SYSTEM
    assert messages[-2]["content"] == '{"city":"Oslo","when":null}'
    assert messages[-3]["content"] == "Find the city.\nText: Concert in Oslo on Sunday"
    assert messages[-1]["content"] == "Find the city.\nText: Lunch in Oslo on Sunday"


def test_selection_is_deterministic_diverse_and_ranked() -> None:
    texts = [
        "play some jazz music",
        "book a table for two in Paris",
        "book a table for two in Paris tonight",
        "book a table for four in Rome",
        "what is the weather in Paris",
    ]
    selector = Selector(texts)
    query = "book a table in Paris"
    assert selector.nearest(query, 2, diverse=False) == [1, 2]
    # 1 and 2 share most of their words: the diverse pick skips the near-copy
    assert selector.nearest(query, 2) == [1, 3]
    assert selector.nearest(query, 2) == selector.nearest(query, 2)
    # nothing shared: pool order
    assert selector.nearest("zzz", 3, diverse=False) == [0, 1, 2]
    assert selector.nearest(query, 0) == [] and Selector([]).nearest(query, 3) == []


def test_scores_are_bm25s_own_and_rank_as_they_do(catalog: Catalog) -> None:
    """The pool's scores summed from bm25s's index are its ``get_scores`` (theirs summed in float32, ours in
    float64): the same values to float32's precision, and the same nearest examples, ties in pool order."""
    pool = [json.loads(line)["text"] for line in (catalog.root / "examples" / "snips_play_music.jsonl").open()]
    queries = [*pool[::40], "play the top-20 Ramin Djawadi album on Deezer", "play play play music", "故宫 zzz"]
    selector = Selector(pool[1:])
    index = selector._index
    assert index is not None
    for query in queries:
        words = [t for t in tokens(query) if t in index.vocab_dict]
        theirs = np.asarray(index.get_scores(words), dtype=np.float64) if words else np.zeros(len(selector))
        ours = selector.scores(query)
        assert np.allclose(ours, theirs, rtol=1e-6, atol=1e-7), query
        if theirs.max() > 0:  # (a query sharing no word ties every text: which are taken is fixed, not ranked)
            by_theirs = [int(i) for i in np.argsort(-theirs.astype(np.float32), kind="stable")]
            assert selector.nearest(query, 5, diverse=False) == by_theirs[:5], query


def test_tokens_split_unspaced_scripts_into_characters() -> None:
    assert tokens("Play ABBA's Song, 2nd!") == ["play", "abba", "s", "song", "2nd"]
    assert tokens("故宫位于北京 Beijing") == ["故", "宫", "位", "于", "北", "京", "beijing"]


def test_shipped_snips_pools_load_without_bad_lines(catalog: Catalog) -> None:
    for name in catalog.names():
        task = catalog.get(name)
        if name.startswith("snips_") or name == "landmark_slots":
            assert task.uses_pool and task.pool is not None and len(task.pool) >= 30, name
            assert not task.pool.problems, task.pool.problems[:3]


def test_landmark_pool_does_not_hold_the_seed_sentence(catalog: Catalog) -> None:
    pool = catalog.get("landmark_slots").pool
    assert pool is not None and not pool.contains("阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。")
    shown = render(catalog.get("landmark_slots"), "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。")
    assert "统治时期" in shown[-3]["content"]  # the nearest example shows a "...统治时期" period


def test_shape_turns_gold_values_into_the_task_output(catalog: Catalog) -> None:
    schema = catalog.get("snips_get_weather").schema
    output = shape({"city": ["Oslo"], "timeRange": ["tomorrow"]}, schema)
    assert output == {"city": "Oslo", "timeRange": "tomorrow"}  # optional slots are left out
    nullable = catalog.get("landmark_slots").schema
    assert shape({"name": ["故宫"]}, nullable) == {
        "name": "故宫",
        "country": None,
        "city": None,
        "category": None,
        "period": None,
    }
    with pytest.raises(ValueError, match="'city' holds one value in the schema, the gold line has 2"):
        shape({"city": ["Oslo", "Rome"]}, schema)
    with pytest.raises(ValueError, match="'planet'"):
        shape({"planet": ["Mars"]}, schema)


def test_examples_import_cli_writes_the_pool_and_reports_refused_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_task(tmp_path, "city", base_schema(), INSTRUCTION)
    gold = tmp_path / "gold.jsonl"
    rows = [
        {"intent": "city", "text": "Dinner in Oslo", "expected": {"city": ["Oslo"]}},
        {"intent": "other", "text": "x", "expected": {}},
        {"intent": "city", "text": "Two cities: Oslo and Rome", "expected": {"city": ["Oslo", "Rome"]}},
        {"intent": "city", "text": "Off to Rome", "output": {"city": "Paris", "when": None}},
        {"intent": "city", "text": "Dinner in Oslo", "expected": {"city": ["Oslo"]}},
    ]
    gold.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["examples", "import", "city", str(gold), "--task-field", "intent", "--tasks-dir", str(tmp_path)])
    assert code == 0
    captured = capsys.readouterr()
    out = tmp_path / "examples" / "city.jsonl"
    assert captured.out.strip() == str(out)
    assert "kept 1 line(s); refused 2; other tasks 1; duplicate texts 1" in captured.err
    assert f"{gold}:3: 'city' holds one value" in captured.err and f"{gold}:4: /output/city" in captured.err
    assert [json.loads(x) for x in out.read_text().splitlines()] == [
        {"text": "Dinner in Oslo", "output": {"city": "Oslo", "when": None}}
    ]
    task = Catalog.load(tmp_path).get("city")
    lines, report = import_gold(gold, task, task_field="intent")
    assert report.kept == 1 and len(lines) == 1


def test_eval_leaves_out_gold_texts_that_are_in_the_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXTRACTOR_HOME", str(tmp_path / "home"))
    pool_catalog(tmp_path, GOOD_LINES)
    gold = tmp_path / "gold.jsonl"
    gold.write_text(
        json.dumps({"text": GOOD_LINES[1]["text"], "expected": {"city": ["Lima"]}})
        + "\n"
        + json.dumps({"text": "Brunch in Bergen", "expected": {"city": ["Bergen"]}})
        + "\n"
    )
    args = ["eval", "city", str(gold), "--engine", "scripted", "--tasks-dir", str(tmp_path), "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "1 gold text(s) are also in their task's example pool (lines 1); left out of the score" in captured.err
    assert json.loads(captured.out)["docs"] == 1
    assert main([*args, "--no-exclude-pool-overlap"]) == 0
    captured = capsys.readouterr()
    assert "kept (--no-exclude-pool-overlap)" in captured.err and json.loads(captured.out)["docs"] == 2


def test_the_pipeline_sends_the_retrieved_examples(tmp_path: Path, settings: Settings) -> None:
    from extractor import ScriptedEngine

    catalog = pool_catalog(tmp_path, GOOD_LINES, settings={"examples_from_pool": {"k": 1, "hints": False}})
    engine = ScriptedEngine(['{"city":"Lima","when":null}'])
    result = Extractor(settings=settings, engine=engine, catalog=catalog).extract("city", "Trains to Lima")
    assert result.data == {"city": "Lima", "when": None}
    (request,) = engine.history
    assert [m["content"] for m in request.messages[1:]] == [
        "Flights to Lima next week",
        '{"city":"Lima","when":null}',
        "Trains to Lima",
    ]


def test_building_an_index_keeps_jax_off_the_gpu() -> None:
    # bm25s imports JAX when installed, and JAX on a GPU takes 75 % of its memory at once: the
    # vLLM engine started next found 34 of 140 GiB free on an H200. A platform the user set stays.
    import subprocess
    import sys

    code = (
        "import os; from extractor.examples.selection import Selector; "
        "Selector(['a b']); print(os.environ['JAX_PLATFORMS'])"
    )
    for preset, expected in ((None, "cpu"), ("cuda", "cuda")):
        env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
        env |= {"JAX_PLATFORMS": preset} if preset else {}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        assert done.stdout.strip() == expected


def test_off_serving_gives_one_copy_of_a_task_so_its_prompt_caches_hold(catalog: Catalog) -> None:
    from extractor import pipeline
    from extractor.catalog import prompting

    task = catalog.get("snips_play_music")
    assert task.adapter is not None, "the shipped SNIPS task has an adapter"
    off = Settings.from_env({}, adapter_serving="off")
    first, again = pipeline.served(task, off), pipeline.served(task, off)
    assert first is again and first.adapter is None and task.adapter is not None
    before = prompting._system.cache_info().hits
    render(first, "play some jazz")
    render(again, "play some blues")
    assert prompting._system.cache_info().hits > before  # the second request's system turn came from the cache
