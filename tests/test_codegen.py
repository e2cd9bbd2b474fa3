"""`extractor codegen TASK`: a pydantic module that imports, validates real results and type-checks."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pydantic
import pytest

from extractor import Catalog, Extractor, ScriptedEngine
from extractor.catalog.codegen import render_module
from extractor.cli import main
from extractor.typed import build_value

from .conftest import LANDMARK_TEXT, landmark
from .test_grounding_strict import make_catalog


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # pydantic resolves the annotations in the module's namespace
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[path.stem]
    return module


def generate(catalog: Catalog, task: str, folder: Path) -> ModuleType:
    path = folder / f"{task}_model.py"
    path.write_text(render_module(catalog.get(task)), encoding="utf-8")
    return load_module(path)


def test_every_shipped_task_generates_a_module_that_validates_its_examples(catalog: Catalog, tmp_path: Path) -> None:
    for name in catalog.names():
        task = catalog.get(name)
        module = generate(catalog, name, tmp_path)
        assert name == module.TASK
        assert module.Model.__name__ == task.typed.model.__name__  # type: ignore[union-attr]
        for example in task.examples:
            value = module.Model.model_validate(example.output)
            assert value.model_dump(by_alias=True, exclude_unset=True) == example.output
        assert module.Model.model_json_schema() == task.typed.model.model_json_schema()  # type: ignore[union-attr]


async def test_generated_module_validates_a_real_result(
    catalog: Catalog, extractor: Extractor, engine: ScriptedEngine, tmp_path: Path
) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫", country="西班牙", category="宫殿建筑")])
    result = await extractor.aextract("landmark_slots", LANDMARK_TEXT)
    module = generate(catalog, "landmark_slots", tmp_path)
    value = module.LandmarkSlots.model_validate(result.data)
    assert value.name == "阿尔罕布拉宫" and value.city is None
    assert value.model_dump() == result.data
    assert module.LandmarkSlots.model_fields["country"].description == "所在国家"
    assert module.LandmarkSlots.__doc__ == catalog.get("landmark_slots").description
    with pytest.raises(pydantic.ValidationError):
        module.LandmarkSlots.model_validate({**result.data, "extra": 1})  # additionalProperties: false


RICH: dict[str, Any] = {
    "title": "Order",
    "description": 'An order with "quotes", a backslash \\ and\nnew lines.',
    "type": "object",
    "$defs": {
        "line": {
            "type": "object",
            "description": "One line of the order.",
            "properties": {
                "sku": {"type": "string", "description": "the product code"},
                "qty": {"type": "integer"},
                "unit": {"enum": ["kg", "piece", None]},
                "parts": {"type": "array", "items": {"$ref": "#/$defs/line"}},
            },
            "required": ["sku", "qty"],
            "additionalProperties": False,
        }
    },
    "properties": {
        "kind": {"const": "order"},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "maxItems": 9},
        "customer": {
            "type": "object",
            "properties": {"名前": {"type": ["string", "null"]}, "class": {"type": "string"}},
            "required": ["名前"],
        },
        "scores": {"type": "object", "additionalProperties": {"type": "number"}},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": False},
        "anything": {"not": {"type": "null"}},
        "json": {"type": "string", "description": "a field whose name BaseModel uses"},
    },
    "required": ["kind", "lines"],
    "additionalProperties": {"type": "string"},
}
RICH_DATA: dict[str, Any] = {
    "kind": "order",
    "lines": [{"sku": "A1", "qty": 2, "unit": "kg", "parts": [{"sku": "A1-x", "qty": 1}]}],
    "customer": {"名前": "山田", "class": "gold"},
    "scores": {"a": 1, "b": 2.5},
    "pair": ["x", True],
    "anything": [1],
    "json": "j",
    "note": "extra keys are strings",
}


def test_rich_schema_round_trips_through_the_generated_module(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path / "catalog", {"order": {**RICH, "x-extractor": {"allow_unenforced": True}}})
    task = catalog.get("order")
    module = generate(catalog, "order", tmp_path)
    source = (tmp_path / "order_model.py").read_text(encoding="utf-8")
    assert "#/properties/anything/not" in source  # what it typed loosely is listed in the header
    value = module.Order.model_validate(RICH_DATA)
    assert type(value.lines[0].parts[0]) is module.Line and value.lines[0].unit == "kg"
    assert value.customer.field_1 == "山田" and value.customer.class_ == "gold" and value.json_ == "j"
    assert value.pair == ("x", True) and value.scores == {"a": 1, "b": 2.5}
    assert value.model_dump(mode="json", exclude_unset=True) == RICH_DATA
    assert module.Line.__doc__ == "One line of the order." and module.Order.__doc__ == RICH["description"]
    assert module.Order.model_json_schema() == task.typed.model.model_json_schema()  # type: ignore[union-attr]
    runtime = build_value(task.typed, RICH_DATA)  # type: ignore[arg-type]
    assert runtime.model_dump(mode="json") == value.model_dump(mode="json")
    for bad in ({**RICH_DATA, "kind": "refund"}, {**RICH_DATA, "lines": [{"sku": "A", "qty": 1, "unit": "g"}]}):
        with pytest.raises(pydantic.ValidationError):
            module.Order.model_validate(bad)


def test_generated_module_type_checks(catalog: Catalog, tmp_path: Path) -> None:
    (tmp_path / "query_conditions_model.py").write_text(render_module(catalog.get("query_conditions")), "utf-8")
    good = tmp_path / "use_good.py"
    good.write_text(
        "from query_conditions_model import Condition, QueryConditions\n"
        "q = QueryConditions.model_validate({'conditions': []})\n"
        "first: list[Condition] = q.conditions\n"
        "op: str = first[0].operator if first else 'eq'\n",
        encoding="utf-8",
    )
    bad = tmp_path / "use_bad.py"
    bad.write_text(
        "from query_conditions_model import QueryConditions\n"
        "q = QueryConditions.model_validate({'conditions': []})\n"
        "n: int = q.conditions[0].value\n",
        encoding="utf-8",
    )
    from mypy import api as mypy_api  # here, not at the top: the GPU host's test run has no mypy

    flags = ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"), "--python-version", "3.11"]
    out, err, status = mypy_api.run([*flags, str(tmp_path / "query_conditions_model.py"), str(good), str(bad)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1 and len(errors) == 1, out + err  # the module and the good use are clean
    # A condition's value is typed from its words (a number, or the words kept): not an int for sure.
    assert (
        errors[0].startswith(str(bad))
        and 'expression has type "float | int | str", variable has type "int"' in errors[0]
    )


def test_cli_writes_the_module(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "landmark_model.py"
    assert main(["codegen", "landmark_slots", "-o", str(path)]) == 0
    module = load_module(path)
    assert module.Model.model_validate(json.loads(landmark(name="故宫"))).name == "故宫"
    assert main(["codegen", "landmark_slots"]) == 0
    assert capsys.readouterr().out == path.read_text(encoding="utf-8")
    assert main(["codegen", "no_such_task"]) == 2
