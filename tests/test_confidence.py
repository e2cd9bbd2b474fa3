"""Confidences: values located in the raw answer, tokens charged to the value they decide, calibration."""

from __future__ import annotations

import asyncio
import json
import math
import random
import shutil
from pathlib import Path

import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.config import repo_root
from extractor.engines.base import GenerationRequest
from extractor.engines.remote import chat_payload, parse_completion
from extractor.engines.tokenizer import TokenPlaces, bytes_ends, load_tokenizer, prefix_token_ends, token_ends
from extractor.errors import ConfigError, TaskError
from extractor.models import resolve_model_dir
from extractor.review import calibration, confidence


def test_leaves_are_found_where_they_end_in_any_script_and_with_escaped_keys() -> None:
    raw = '{"时期": ["摩尔人统治时期", "x"], "a/b": {"n": 1.5, "z": null}, "t": true}'
    found = confidence.leaves(raw)
    assert [(f.pointer, f.is_null) for f in found] == [
        ("/时期/0", False),
        ("/时期/1", False),
        ("/a~1b/n", False),
        ("/a~1b/z", True),
        ("/t", False),
    ]
    ends = ['"摩尔人统治时期"', '"x"', "1.5", "null", "true"]
    assert all(raw[: f.end].endswith(e) for f, e in zip(found, ends, strict=True))
    assert confidence.leaves('{"a": "x"} trailing') == [] and confidence.leaves('{"a": ') == []
    assert [f.pointer for f in confidence.leaves(' [ {"k" : "v"} , 3 ] ')] == ["/0/k", "/1"]


def test_each_token_is_charged_to_the_value_it_decides_and_forced_tokens_add_nothing() -> None:
    raw = '{"city": "Oslo", "when": null, "kind": "rain"}'
    # tokens: '{"city": "' | 'Os' | 'lo",' | ' "when": null,' | ' "kind": "' | 'rain' | '"}'
    pieces = ['{"city": "', "Os", 'lo",', ' "when": null,', ' "kind": "', "rain", '"}']
    ends = [sum(len(p) for p in pieces[: i + 1]) for i in range(len(pieces))]
    logprobs = [0.0, -0.5, -0.25, -2.0, -0.1, -0.3, -0.7]
    sums = confidence.value_logprobs(raw, ends, logprobs)
    # 'lo",' starts inside "Oslo": its closing quote decides where the city ends; the null keeps its own doubt.
    assert sums == pytest.approx({"/city": -0.75, "/kind": -0.4 - 0.7})
    assert confidence.raw_confidences(raw, ends, logprobs)["/city"] == pytest.approx(math.exp(-0.75))
    assert confidence.value_logprobs(raw, ends[:-1], logprobs) == {}  # lengths disagree: no figures
    assert confidence.lowest({}) == 1.0


def test_token_ends_keep_a_character_split_over_byte_tokens_whole() -> None:
    tokenizer = load_tokenizer(resolve_model_dir(Settings.from_env({})))
    text = '{"period": "摩尔人统治时期"}'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ends = token_ends(tokenizer, ids, text)
    assert len(ends) == len(ids) and ends[-1] == len(text) and list(ends) == sorted(ends)
    # every end falls between characters, and decoding up to it gives exactly that prefix
    for i, end in enumerate(ends):
        assert tokenizer.decode(ids[: i + 1]).startswith(text[:end])
    assert bytes_ends(["摩".encode()[:2], "摩".encode()[2:] + b"x"]) == (0, 2)


def test_incremental_token_ends_agree_with_decoding_every_prefix() -> None:
    tokenizer = load_tokenizer(resolve_model_dir(Settings.from_env({})))
    texts = [
        '{"x": "emoji 😀🎉 café naïve — “quotes” ﬁ  tabs\\t  spaces"}',
        "  leading spaces . , ! ? don't   ",
        '{"items": ["摩尔人", "play some music by the beatles"]}' * 6,
    ]
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert token_ends(tokenizer, ids, text) == prefix_token_ends(tokenizer, ids, text)
    # any token sequence, not only one the tokenizer would choose: byte tokens that never complete a character
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("Ã", "¦", "a", "Ã", "b")]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert token_ends(tokenizer, ids, text) == prefix_token_ends(tokenizer, ids, text)
    assert token_ends(tokenizer, [], "") == ()


def test_the_remote_engine_asks_for_and_reads_token_logprobs() -> None:
    assert chat_payload(GenerationRequest(messages=[], logprobs=True), model="m")["logprobs"] is True
    assert "logprobs" not in chat_payload(GenerationRequest(messages=[]), model="m")
    tokens = [
        {"token": '{"a": "', "logprob": 0.0, "bytes": list(b'{"a": "')},
        {"token": "bytes:\\xe6\\x91", "logprob": -0.5, "bytes": list("摩".encode()[:2])},
        {"token": "bytes:\\xa9", "logprob": -0.1, "bytes": list("摩".encode()[2:])},
        {"token": '"}', "logprob": 0.0, "bytes": list(b'"}')},
    ]
    body = {"choices": [{"message": {"content": '{"a": "摩"}'}, "logprobs": {"content": tokens}}], "usage": {}}
    generation = parse_completion(body)
    assert generation.token_ends == (7, 7, 8, 10) and generation.token_logprobs == (0.0, -0.5, -0.1, 0.0)
    plain = parse_completion({"choices": [{"message": {"content": "{}"}}]})
    assert plain.token_ends == () and plain.token_logprobs == ()


def catalog_with(root: Path, task: str) -> Path:
    for folder, suffix in (("schemas", ".json"), ("prompts", ".j2")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(repo_root() / folder / f"{task}{suffix}", root / folder / f"{task}{suffix}")
    return root


def test_results_carry_a_confidence_per_value_and_the_lowest_for_the_whole(tmp_path: Path) -> None:
    root = catalog_with(tmp_path / "catalog", "landmark_slots")
    answer = '{"name": "阿尔罕布拉宫", "country": null, "city": "格拉纳达", "category": null, "period": null}'

    def score(text: str, start: int, end: int) -> float:
        return -1.0 if "格拉" in text[start:end] else 0.0  # unsure of the city only

    engine = ScriptedEngine([answer], token_logprob=score)
    settings = Settings.from_env({}, home=tmp_path, engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
    result = extractor.extract("landmark_slots", "阿尔罕布拉宫位于格拉纳达。")
    assert engine.history[0].logprobs
    assert result.confidences["/name"] == 1.0 and result.confidences["/city"] < 1.0
    assert result.confidence == result.confidences["/city"] and not result.calibrated
    assert {s.path: s.confidence for s in result.spans} == result.confidences
    wire = json.loads(result.model_dump_json())
    assert wire["spans"][0]["confidence"] == 1.0 and wire["confidence"] == result.confidence


def test_confidences_off_asks_the_engine_for_no_logprobs_and_results_carry_none(tmp_path: Path) -> None:
    root = catalog_with(tmp_path / "catalog", "landmark_slots")
    answer = '{"name": "阿尔罕布拉宫", "country": null, "city": "格拉纳达", "category": null, "period": null}'
    engine = ScriptedEngine([answer], token_logprob=lambda text, start, end: -1.0)
    settings = Settings.from_env({"EXTRACTOR_CONFIDENCES": "false"}, home=tmp_path, engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
    result = extractor.extract("landmark_slots", "阿尔罕布拉宫位于格拉纳达。")
    assert not engine.history[0].logprobs  # vLLM computes none: the price of P1 on the GPU
    assert result.data["city"] == "格拉纳达" and result.confidences == {} and result.confidence is None
    assert all(s.confidence is None for s in result.spans)


def test_a_task_that_reviews_by_confidence_asks_for_them_when_they_are_off_globally(tmp_path: Path) -> None:
    root = catalog_with(tmp_path / "catalog", "landmark_slots")
    schema_path = root / "schemas" / "landmark_slots.json"
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    schema.setdefault("x-extractor", {})["review"] = {"below": 0.8}
    schema_path.write_text(json.dumps(schema, ensure_ascii=False), encoding="utf-8")
    answer = '{"name": "阿尔罕布拉宫", "country": null, "city": "格拉纳达", "category": null, "period": null}'
    engine = ScriptedEngine([answer], token_logprob=lambda text, start, end: -1.0)
    settings = Settings.from_env({"EXTRACTOR_CONFIDENCES": "false"}, home=tmp_path, engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
    result = extractor.extract("landmark_slots", "阿尔罕布拉宫位于格拉纳达。")
    # the threshold still routes: the global switch yields to a task that sends results by it
    assert engine.history[0].logprobs and result.confidence is not None and result.confidence < 0.8


def test_a_task_can_turn_confidences_off_for_itself_unless_it_reviews_by_them(tmp_path: Path) -> None:
    root = catalog_with(tmp_path / "catalog", "landmark_slots")
    schema_path = root / "schemas" / "landmark_slots.json"
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    schema.setdefault("x-extractor", {})["confidences"] = False
    schema_path.write_text(json.dumps(schema, ensure_ascii=False), encoding="utf-8")
    answer = '{"name": "阿尔罕布拉宫", "country": null, "city": "格拉纳达", "category": null, "period": null}'
    engine = ScriptedEngine([answer], token_logprob=lambda text, start, end: -1.0)
    settings = Settings.from_env({}, home=tmp_path, engine="scripted")  # confidences on globally
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
    result = extractor.extract("landmark_slots", "阿尔罕布拉宫位于格拉纳达。")
    assert not engine.history[0].logprobs and result.confidence is None
    schema["x-extractor"]["review"] = {"below": 0.8}
    schema_path.write_text(json.dumps(schema, ensure_ascii=False), encoding="utf-8")
    refused = Catalog.load(root)
    assert refused.names() == [] and len(refused.errors) == 1
    error = refused.errors[0]
    assert error.pointer == "#/x-extractor/confidences" and "keep confidences on" in error.reason


def test_a_calibration_beside_the_task_maps_every_confidence(tmp_path: Path) -> None:
    root = catalog_with(tmp_path / "catalog", "landmark_slots")
    from extractor.catalog.reload import fingerprint

    before = fingerprint(root, "landmark_slots")
    fitted = calibration.fit([0.1, 0.2, 0.9, 0.95, 1.0, 1.0], [False, False, True, False, True, True])
    calibration.save(fitted, root / "calibration" / "landmark_slots.json")
    assert fingerprint(root, "landmark_slots") != before  # a new map is a new version of the task (reloads)
    assert calibration.load(root / "calibration" / "landmark_slots.json").points == fitted.points
    answer = '{"name": "阿尔罕布拉宫", "country": null, "city": "格拉纳达", "category": null, "period": null}'
    engine = ScriptedEngine([answer], token_logprob=-0.01)
    settings = Settings.from_env({}, home=tmp_path, engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
    result = extractor.extract("landmark_slots", "阿尔罕布拉宫位于格拉纳达。")
    assert result.calibrated and set(result.confidences.values()) <= {fitted(x) for x in (0.9, 0.95, 1.0)} | {
        fitted(math.exp(-0.01 * n)) for n in range(1, 20)
    }
    (root / "calibration" / "landmark_slots.json").write_text("{}")
    catalog = Catalog.load(root)
    assert "landmark_slots" not in catalog.tasks
    assert isinstance(catalog.errors[0], TaskError) and "extractor calibrate" in str(catalog.errors[0])


def test_calibration_scores() -> None:
    conf = [0.1, 0.2, 0.3, 0.9, 0.95, 0.99]
    ok = [False, True, False, True, True, True]
    assert calibration.catch_rate(conf, ok, share=0.34) == 1.0  # the two least sure of three hold both wrong
    assert calibration.catch_rate(conf, ok, share=0.17) == 0.5
    assert calibration.auroc(conf, ok) == 7 / 8  # of 8 (right, wrong) pairs, one has the wrong value above
    assert calibration.ece([0.75] * 4, [True, True, True, False]) == 0.0
    assert calibration.ece([1.0, 1.0], [False, False]) == 1.0
    summary = calibration.summary(conf, ok, share=0.2)
    assert summary["catch_ceiling"] == 1.0 and summary["wrong"] == 2
    assert calibration.label({"a": ["x", "y"]}, [("/a", "X "), ("/a", "x"), ("/b", "y")]) == [True, False, False]


def weather_catalog(root: Path, lines: int) -> Path:
    catalog_with(root, "snips_get_weather")
    (root / "examples").mkdir(exist_ok=True)
    pool = (repo_root() / "examples" / "snips_get_weather.jsonl").read_text(encoding="utf-8").splitlines()[:lines]
    (root / "examples" / "snips_get_weather.jsonl").write_text("\n".join(pool) + "\n", encoding="utf-8")
    schema = root / "schemas" / "snips_get_weather.json"
    data = json.loads(schema.read_text(encoding="utf-8"))
    data["x-extractor"].pop("adapter", None)
    data["x-extractor"]["adapter"] = False  # served from its pool (retrieval): calibrated by cross-fitting
    schema.write_text(json.dumps(data), encoding="utf-8")
    return root


def test_cross_fitting_never_shows_a_line_its_own_example_and_fits_a_map(tmp_path: Path) -> None:
    from extractor.review import fitting

    root = weather_catalog(tmp_path / "catalog", 30)
    task = Catalog.load(root).get("snips_get_weather")
    cases = fitting.pool_cases(task, lines=20, folds=4, seed=1)
    assert len(cases) == 20 and len({c.text for c in cases}) == 20
    for case in cases:
        assert case.task.pool is not None and not case.task.pool.contains(case.text)
        assert len(case.task.pool) == 30 - 5 and case.task.calibration is None
    answers = {c.text: c.expected for c in cases}
    wrong = {c.text for c in cases[::3]}

    def respond(request: GenerationRequest) -> str:
        text = next(t for t in answers if t in request.messages[-1]["content"])
        answer = dict(answers[text])
        if text in wrong:  # a wrong city, and the model unsure of it
            answer = {**answer, "city": text.split()[0]}
        return json.dumps(answer)

    bad = {t.split()[0] for t in wrong}

    def score(text: str, start: int, end: int) -> float:  # unsure over the wrong city's own characters
        city = json.loads(text).get("city")
        at = text.find(f'"{city}"', text.find('"city"') + 6) if city in bad else -1
        return -3.0 if at >= 0 and start < at + len(city) + 2 and end > at else -0.01

    engine = ScriptedEngine(respond=respond, token_logprob=score)
    settings = Settings.from_env({}, home=tmp_path, engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
    pairs = asyncio.run(fitting.collect(extractor.arun, cases))
    fitted = fitting.fit(pairs, task=task, model="scripted", source="test")
    assert fitted.scores["raw"]["wrong"] >= len(wrong) and fitted.scores["raw"]["auroc"] > 0.8
    assert fitted.scores["calibrated_in_sample"]["ece"] < 0.05
    assert fitted(0.01) < 0.5 < fitted(1.0)


def test_calibrate_then_eval_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from extractor.cli import main

    monkeypatch.setenv("EXTRACTOR_HOME", str(tmp_path / "home"))
    root = weather_catalog(tmp_path / "catalog", 40)
    common = ["--engine", "scripted", "--tasks-dir", str(root)]
    assert main(["calibrate", "snips_get_weather", "--lines", "30", "--folds", "3", *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["calibration"] == [str(root / "calibration" / "snips_get_weather.json")]
    assert out["values"] >= 20 and "30 pool lines" in out["source"] and out["raw"]["ece"] >= 0.0
    gold = tmp_path / "gold.jsonl"
    lines = (repo_root() / "examples" / "snips_get_weather.jsonl").read_text(encoding="utf-8").splitlines()[40:50]
    gold.write_text(
        "".join(json.dumps({"text": json.loads(x)["text"], "expected": json.loads(x)["output"]}) + "\n" for x in lines)
    )
    assert main(["eval", "snips_get_weather", str(gold), *common]) == 0
    report = capsys.readouterr().out
    assert "confidence (calibrated)" in report and "ECE" in report and "catches" in report
    assert main(["eval", "snips_get_weather", str(gold), "--json", *common]) == 0
    scores = json.loads(capsys.readouterr().out)["calibration"]
    assert scores["calibrated_docs"] == 10 and 0.0 <= scores["catch_rate"] <= 1.0
    assert main(["calibrate", "nope", *common]) == 2  # one line naming the unknown task
    assert "nope" in capsys.readouterr().err


def test_an_adapter_is_calibrated_on_the_lines_its_training_held_out(tmp_path: Path) -> None:
    from dataclasses import replace

    from extractor.adapters import manifest
    from extractor.errors import ConfigError
    from extractor.review import fitting

    root = weather_catalog(tmp_path / "catalog", 12)
    task = Catalog.load(root).get("snips_get_weather")
    folder = root / "adapters" / "weather"
    folder.mkdir(parents=True)
    record = {"format": manifest.FORMAT, "config": {"held_out_lines": {"snips_get_weather": [2, 5]}}}
    (folder / manifest.MANIFEST).write_text(json.dumps(record), encoding="utf-8")
    adapted = replace(task, adapter=folder)
    cases = fitting.held_out_cases(adapted)
    assert task.pool is not None
    lines = [json.loads(x)["text"] for x in task.pool.path.read_text(encoding="utf-8").splitlines()]
    assert [c.text for c in cases] == [lines[1], lines[4]]
    for case in cases:  # never shown itself, as an example or a hint
        assert case.task.pool is not None and not case.task.pool.contains(case.text) and len(case.task.pool) == 10
    (folder / manifest.MANIFEST).write_text(json.dumps({"format": manifest.FORMAT, "config": {}}), encoding="utf-8")
    with pytest.raises(ConfigError, match="--gold"):
        fitting.held_out_cases(adapted)


def test_the_pools_verdict_on_each_value() -> None:
    from extractor.examples.lexicon import Lexicon
    from extractor.review import agreement

    outputs = [
        {"city": "格拉纳达", "name": "阿尔罕布拉宫", "kind": "宫殿"},
        {"city": "格拉纳达", "tags": ["巴黎"]},
        {"name": "格拉纳达", "tags": ["巴黎", "北京"]},
    ]
    lexicon = Lexicon.build(outputs, skip=frozenset({"/kind"}))
    found = agreement.verdicts(
        lexicon,
        {"city": "格拉纳达", "name": "格拉纳达", "tags": ["北京", "东京"], "kind": "宫殿", "n": 3, "x": "巴"},
        skip=frozenset({"/kind"}),
    )
    assert found == {
        "/city": "agrees",  # labelled city twice, name once: the pool's most frequent field
        "/name": "differs",
        "/tags/0": "agrees",  # array positions left out, as the lexicon keeps them
        "/tags/1": "unseen",
        "/kind": "other",  # a field that is not grounded
        "/n": "other",  # not a string
        "/x": "other",  # shorter than the lexicon keeps
    }
    assert agreement.verdicts(None, {"city": "格拉纳达"}) == {"/city": "other"}


def test_a_map_per_verdict_ranks_what_the_pool_contradicts_first(tmp_path: Path) -> None:
    raw = [0.9] * 60 + [0.9] * 30 + [0.5] * 10
    right = [True] * 54 + [False] * 6 + [False] * 29 + [True] + [True] * 5 + [False] * 5
    verdicts = ["agrees"] * 60 + ["differs"] * 30 + ["unseen"] * 10  # unseen: too few for a map of its own
    fitted = calibration.fit(raw, right, verdicts=verdicts)
    assert set(fitted.strata) == {"agrees", "differs"}
    assert fitted(0.9, "agrees") == pytest.approx(0.9) and fitted(0.9, "differs") == pytest.approx(1 / 30)
    assert fitted(0.5, "unseen") == fitted(0.5) == fitted(0.5, None)  # the map of all values
    calibration.save(fitted, tmp_path / "c.json")
    loaded = calibration.load(tmp_path / "c.json")
    assert loaded.strata == fitted.strata and loaded(0.9, "differs") == fitted(0.9, "differs")
    mapped = [fitted(c, v) for c, v in zip(raw, verdicts, strict=True)]
    joint = [fitted(c) for c in raw]
    assert calibration.catch_rate(mapped, right, share=0.3) > calibration.catch_rate(joint, right, share=0.3)
    assert calibration.ece(mapped, right) < calibration.ece(joint, right)
    data = json.loads((tmp_path / "c.json").read_text())
    data["strata"]["differs"] = [[0.5, 1.5]]
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"within 0\.\.1"):
        calibration.load(tmp_path / "c.json")


def test_results_are_calibrated_by_the_verdict_of_the_pool_they_are_served_with(tmp_path: Path) -> None:
    root = catalog_with(tmp_path / "catalog", "landmark_slots")
    (root / "examples").mkdir()
    empty = {"name": None, "country": None, "city": None, "category": None, "period": None}
    lines = [
        {"text": "格拉纳达是西班牙的城市。", "output": {**empty, "city": "格拉纳达", "country": "西班牙"}},
        {"text": "阿尔罕布拉宫很美。", "output": {**empty, "name": "阿尔罕布拉宫"}},
    ]
    (root / "examples" / "landmark_slots.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8"
    )
    raw, right = [0.9] * 60, [True] * 50 + [False] * 10
    fitted = calibration.fit(raw, right, verdicts=["agrees"] * 30 + ["differs"] * 30)
    calibration.save(fitted, root / "calibration" / "landmark_slots.json")
    answer = '{"name": "格拉纳达", "country": null, "city": "格拉纳达", "category": "宫殿", "period": null}'
    engine = ScriptedEngine([answer], token_logprob=lambda text, start, end: 0.0)
    settings = Settings.from_env({}, home=tmp_path, engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
    result = extractor.extract("landmark_slots", "格拉纳达有一座宫殿。")
    assert result.calibrated
    assert result.confidences["/city"] == fitted(1.0, "agrees") == 1.0  # the pool calls it a city
    assert result.confidences["/name"] == fitted(1.0, "differs") < 0.7  # ... and never a name
    assert result.confidences["/category"] == fitted(1.0)  # never labelled: no map of its own here


def test_token_places_from_bytes_agree_with_decoding_and_drop_back_on_any_difference() -> None:
    tokenizer = load_tokenizer(resolve_model_dir(Settings.from_env({})))
    places = TokenPlaces(tokenizer)
    assert places._bytes is not None  # the default model's decoder is GPT-2's byte level
    rng = random.Random(7)
    texts = ['{"period": "摩尔人统治时期", "x": "café 😀"}', "  don't . , ! ?  "]
    samples = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    # any ids at all: special tokens (skipped when decoding), bytes that never complete a character
    samples += [[rng.randrange(len(tokenizer)) for _ in range(rng.randrange(1, 30))] for _ in range(300)]
    for ids in samples:
        text = tokenizer.decode(ids, skip_special_tokens=True)
        places.checks_left = 0  # the bytes alone, unchecked
        assert places(ids, text) == prefix_token_ends(tokenizer, ids, text)
    assert places._bytes is not None

    places._pieces[samples[0][0]] = b"!!!!!"  # a token's bytes gone wrong: the check finds it, decoding takes over
    places.checks_left = 1
    text = tokenizer.decode(samples[0])
    assert places(samples[0], text) == token_ends(tokenizer, samples[0], text)
    assert places._bytes is None and places(samples[0], text) == token_ends(tokenizer, samples[0], text)


def test_an_answer_text_from_its_tokens_bytes_is_the_decoded_text_and_drops_back_on_any_difference() -> None:
    tokenizer = load_tokenizer(resolve_model_dir(Settings.from_env({})))
    places = TokenPlaces(tokenizer)
    assert places.reads_bytes
    rng = random.Random(11)
    texts = ['{"period": "摩尔人统治时期", "x": "café 😀"}', "  don't . , ! ?  "]
    samples = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    # special tokens (skipped, as vLLM skips them), bytes that never complete a character
    samples += [[rng.randrange(len(tokenizer)) for _ in range(rng.randrange(1, 30))] for _ in range(300)]
    for ids in samples:
        places.text_checks_left = 0  # the bytes alone, unchecked
        assert places.text(ids) == tokenizer.decode(ids, skip_special_tokens=True)
    assert places.text(samples[0]) == texts[0] and places.reads_bytes

    places._pieces[samples[0][0]] = b"!!!!!"  # a token's bytes gone wrong: the check finds it, decoding takes over
    places.text_checks_left = 1
    assert places.text(samples[0]) == texts[0]
    assert not places.reads_bytes and places.text(samples[0]) == texts[0]


def test_sampled_logprobs_are_read_from_vllms_flat_and_nested_logprobs() -> None:
    from vllm.logprobs import FlatLogprobs, Logprob

    from extractor.engines.vllm import sampled_logprobs

    nested = [{7: Logprob(-0.5, 1)}, {3: Logprob(-1.25, 2), 9: Logprob(-0.1, 1)}]
    flat = FlatLogprobs()
    flat.extend(nested)
    assert sampled_logprobs(nested, [7, 3]) == sampled_logprobs(flat, [7, 3]) == (-0.5, -1.25)
    assert sampled_logprobs(None, [7]) == () and sampled_logprobs(nested, [7]) == ()
