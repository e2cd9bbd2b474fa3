"""A task's settings in layers (extractor.catalog.tuned) and chosen by measuring them (extractor.jobs.tuning)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.catalog.tuned import DEFAULTS, layered, tuned_path
from extractor.engines.base import GenerationRequest
from extractor.jobs import tuning
from extractor.review import fitting

CITIES = ["Oslo", "Lima", "Quito", "Hanoi", "Dakar", "Perth", "Cusco", "Tunis", "Porto", "Split"]


def test_settings_are_the_defaults_then_the_schema_then_the_tuned_file() -> None:
    assert layered({}) == DEFAULTS  # a task that says nothing: grounded decoding, chunking, hints
    written = {"grounded_decoding": False, "chunking": {"max_chars": 900}, "examples_from_pool": {"k": 2}}
    merged = layered(written)
    assert merged["grounded_decoding"] is False  # what the analyst wrote wins over the defaults
    assert merged["chunking"] == {"max_chars": 900} and merged["examples_from_pool"] == {"hints": True, "k": 2}
    assert layered({"chunking": False, "examples_from_pool": False})["examples_from_pool"] is False
    tuned = layered(written, {"examples_from_pool": {"k": 5, "hints": False}})
    assert tuned["examples_from_pool"] == {"hints": False, "k": 5}  # and tuning wins over both


def _catalog(root: Path, *, tuned: Any = None) -> Catalog:
    for sub in ("schemas", "prompts", "examples"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    schema = {
        "type": "object",
        "properties": {"city": {"type": ["string", "null"], "description": "the city"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    (root / "schemas" / "trip.json").write_text(json.dumps(schema))
    (root / "prompts" / "trip.j2").write_text("Find the city of the trip.\nText: {{ text }}")
    lines = [{"text": f"A trip to {c} in May", "output": {"city": c}} for c in CITIES * 2]
    (root / "examples" / "trip.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if tuned is not None:
        tuned_path(root, "trip").parent.mkdir(exist_ok=True)
        tuned_path(root, "trip").write_text(tuned if isinstance(tuned, str) else json.dumps(tuned))
    return Catalog.load(root)


def test_a_new_task_gets_the_defaults_and_its_tuned_settings(tmp_path: Path) -> None:
    task = _catalog(tmp_path / "a").get("trip")
    assert task.settings.grounded_decoding and task.settings.chunking is not None
    assert task.settings.examples_from_pool is not None and task.settings.examples_from_pool.hints
    tuned = {"x-extractor": {"examples_from_pool": {"k": 5, "hints": False}}, "chosen": "k=5, hints off"}
    task = _catalog(tmp_path / "b", tuned=tuned).get("trip")
    assert task.settings.examples_from_pool is not None
    assert (task.settings.examples_from_pool.k, task.settings.examples_from_pool.hints) == (5, False)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("{not json", "not a readable JSON file"),
        (json.dumps({"x-extractor": {"examples_from_pool": {"k": 99}}}), "99 is greater than the maximum of 16"),
        (json.dumps({"x-extractor": {"temperature": 0.5}}), "'temperature' was unexpected"),
    ],
)
def test_a_bad_tuned_file_leaves_the_task_out_naming_the_file(tmp_path: Path, body: str, says: str) -> None:
    catalog = _catalog(tmp_path, tuned=body)
    (error,) = catalog.errors
    assert error.path.endswith("tuned/trip.json") and says in str(error) and "extractor tune" in str(error)


def answer_with_enough_examples(request: GenerationRequest) -> str:
    """A model that reads the city right only when shown at least three worked examples."""
    text = request.messages[-1]["content"].split("Text: ")[-1].split("\n")[0]
    shown = sum(m["role"] == "assistant" for m in request.messages)
    city = next((c for c in CITIES if c in text), None)
    return json.dumps({"city": city if shown >= 3 else None})


async def test_tune_measures_the_candidates_and_keeps_the_best(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    engine = ScriptedEngine(respond=answer_with_enough_examples)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted", tasks_dir=tmp_path)
    extractor = Extractor(settings=settings, engine=engine, catalog=catalog)
    task = catalog.get("trip")
    options = tuning.candidates(task, ks=(0, 3))
    assert [c.label for c in options] == ["as it is", "k=0, hints on", "k=0, hints off", "k=3, hints off"]
    cases = fitting.own_cases(task, lines=10, folds=2)
    rows = await tuning.tune(extractor.arun, cases, options)
    by = {r.candidate.label: r.f1 for r in rows}
    assert by["k=0, hints on"] == 0.0 and by["as it is"] == 1.0 and by["k=3, hints off"] == 1.0
    chosen = tuning.winner(rows)
    # "as it is" (3 examples and the hints) and "k=3, hints off" read alike: the simpler one is kept.
    assert chosen.candidate.label == "k=3, hints off" and chosen.f1 == 1.0
    assert "| k=0, hints on | 0.000 | -1.000 [-1.000, -1.000] |" in tuning.table(rows, chosen)
    path = tuning.write(tmp_path, task, rows, chosen, lines=len(cases), folds=2)
    written = json.loads(path.read_text())
    assert written["chosen"] == chosen.candidate.label and len(written["candidates"]) == 4
    again = Catalog.load(tmp_path).get("trip")  # the catalog reads what tuning chose
    assert again.settings.examples_from_pool is not None and again.settings.examples_from_pool.k == 3


async def test_the_budget_stops_starting_candidates(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    engine = ScriptedEngine(respond=answer_with_enough_examples, delay_s=0.05)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=catalog)
    task = catalog.get("trip")
    cases = fitting.own_cases(task, lines=4, folds=2)
    rows = await tuning.tune(extractor.arun, cases, tuning.candidates(task), budget_s=0.01, concurrency=1)
    assert len(rows) == 1  # the first always runs; the next would end past the budget
    # and inside a candidate too: the case being read when the budget ends is stopped (its answer
    # is 0.05 s away), no other starts, and the table says where it stopped
    assert rows[0].stopped == 0 and f"(budget spent after 0 of {len(cases)})" in tuning.table(rows)
    assert rows[0].metrics["elapsed_s"] < 0.05
    assert tuning.winner(rows) is rows[0]  # nothing whole to choose: the task as it is stays


def test_a_reload_picks_up_what_tuning_wrote(tmp_path: Path) -> None:
    from extractor.catalog.reload import fingerprint

    _catalog(tmp_path)
    before = fingerprint(tmp_path, "trip")
    tuned_path(tmp_path, "trip").parent.mkdir()
    tuned_path(tmp_path, "trip").write_text(json.dumps({"x-extractor": {"examples_from_pool": {"k": 5}}}))
    assert fingerprint(tmp_path, "trip") != before


async def test_a_task_naming_a_model_gets_an_engine_of_its_own(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, tuned={"x-extractor": {"model": "gemma3-270m"}})
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    extractor = Extractor(settings=settings, catalog=catalog)
    task = catalog.get("trip")
    assert task.settings.model == "gemma3-270m"
    own = extractor.engine_for(task)
    assert own is not extractor.engine and extractor.engine_for(task) is own  # one engine per model, kept
    await extractor.astart()
    result = await extractor.arun(task, "A trip to Oslo in May")
    assert result.data["city"] in CITIES  # the dry-run engine answers with a worked example's output
    await extractor.aclose()
    bad = _catalog(tmp_path / "bad", tuned={"x-extractor": {"model": "gpt-9"}})
    (error,) = bad.errors
    assert error.pointer == "#/x-extractor/model" and "unknown model 'gpt-9'" in str(error)


async def test_another_model_is_tried_last_with_the_settings_that_scored_highest(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    engine = ScriptedEngine(respond=answer_with_enough_examples)
    extractor = Extractor(settings=settings, engine=engine, catalog=catalog)
    task = catalog.get("trip")
    cases = fitting.own_cases(task, lines=4, folds=2)
    options = tuning.candidates(task, ks=(0, 3))
    started: list[str | None] = []

    async def start(served: Any) -> None:  # another model's engine is readied before its clock starts
        started.append(served.settings.model)

    rows = await tuning.tune(extractor.arun, cases, options, models=["gemma3-270m"], start=start)
    assert started == [None, None, None, None, "gemma3-270m"]
    last = rows[-1].candidate
    assert len(rows) == 5 and last.settings["model"] == "gemma3-270m"
    # The simplest within noise wins on the task's own model (k=3 without hints); the other model is
    # tried at the task's best (3 examples and the hints), not shown less than its best needs.
    assert tuning.winner(rows[:4]).candidate.label == "k=3, hints off"
    assert last.label == "as it is, model gemma3-270m"
    assert last.settings == {**options[0].settings, "model": "gemma3-270m"}
    assert last.apply(task).settings.model == "gemma3-270m" and last.apply(task).adapter is None
    await extractor.aclose()


def test_a_task_on_another_model_leaves_its_adapter_with_a_warning(tmp_path: Path) -> None:
    from extractor.adapters.manifest import MANIFEST

    (tmp_path / "adapters" / "trip").mkdir(parents=True)
    (tmp_path / "adapters" / "trip" / MANIFEST).write_text("{}")
    task = _catalog(tmp_path, tuned={"x-extractor": {"model": "gemma3-270m"}}).get("trip")
    assert task.adapter is None and any("its adapter" in w and "is not used" in w for w in task.warnings)


def test_tune_tries_the_other_packaged_models_unless_told(tmp_path: Path) -> None:
    from extractor.cli.tune import models_to_try, unprepared
    from extractor.models import MODELS, prepared_models

    settings = Settings.from_env({}, home=tmp_path / "home")
    assert prepared_models(settings) == []
    # Every other packaged model is tried, prepared first where it is not (within the budget).
    assert models_to_try(settings, "default") == ["gemma3-270m"]
    assert unprepared(settings, ["gemma3-270m", "/models/mine"]) == ["gemma3-270m"]
    (settings.models_dir / MODELS["gemma3-270m"].dir_name).mkdir(parents=True)
    (settings.models_dir / MODELS["gemma3-270m"].dir_name / ".extractor-prepared").write_text("{}")
    assert prepared_models(settings) == ["gemma3-270m"] and unprepared(settings, ["gemma3-270m"]) == []
    assert models_to_try(settings, "default") == ["gemma3-270m"]
    assert models_to_try(settings, "gemma3-270m") == ["default"]  # a task on Gemma tries the default model
    assert models_to_try(settings, "default", others=False) == []  # --no-try-model
    assert models_to_try(settings, "default", asked=["/models/mine"]) == ["/models/mine"]  # --try-model
    assert models_to_try(settings.with_(engine="scripted"), "default") == []
    task = _catalog(tmp_path).get("trip")
    plan = tuning.plan_text(
        task, tuning.candidates(task, ks=(0,)), lines=10, models=["gemma3-270m"], preparing=["gemma3-270m"]
    )
    assert "after preparing gemma3-270m" in plan
    assert (
        "then the winner on gemma3-270m" in plan
        and f"{(len(tuning.candidates(task, ks=(0,))) + 1) * 10} extractions" in plan
    )


async def test_a_field_whose_name_holds_a_slash_gets_its_own_counts(tmp_path: Path) -> None:
    """Per-field counts come from JSON pointers: "in~1out" is the field "in/out", "a~0b" the field "a~b"."""
    for sub in ("schemas", "prompts"):
        (tmp_path / sub).mkdir()
    names = ("in/out", "a~b")
    schema = {"type": "object", "properties": {n: {"type": ["string", "null"]} for n in names}, "required": list(names)}
    (tmp_path / "schemas" / "odd.json").write_text(json.dumps(schema))
    (tmp_path / "prompts" / "odd.j2").write_text("Find them.\nText: {{ text }}")
    engine = ScriptedEngine(respond=lambda _: json.dumps({"in/out": "Paris", "a~b": "Rome"}))
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted", tasks_dir=tmp_path)
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(tmp_path))
    task = extractor.task("odd")
    cases = [fitting.Case(task, "From Paris to Rome", {"in/out": "Paris", "a~b": "Rome"})]
    row = await tuning.measure(extractor.arun, cases, tuning.Candidate("as it is", {}))
    assert row.fields == {"in/out": [(1, 0, 0)], "a~b": [(1, 0, 0)]}
