"""Schema -> pydantic model: typed access, aliases, extras, warnings, round trips (no engine)."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pydantic
import pytest
from jsonschema.validators import Draft202012Validator

from extractor.typed import TypedModel, build_value, model_for_schema

ROOT = Path(__file__).resolve().parent.parent

FILTER_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Filter",
    "description": "A search filter built from a sentence.",
    "type": "object",
    "additionalProperties": False,
    "required": ["kind", "conditions", "owner", "sort"],
    "$defs": {
        "Condition": {
            "type": "object",
            "additionalProperties": False,
            "required": ["field", "operator", "value"],
            "properties": {
                "field": {"type": "string", "description": "The field compared."},
                "operator": {"enum": ["lt", "gt", "eq"], "x-grounded": False},
                "value": {"anyOf": [{"type": "number"}, {"type": "string"}, {"type": "null"}]},
            },
        },
        "Direction": {"type": "string", "enum": ["asc", "desc"]},
    },
    "properties": {
        "kind": {"const": "filter"},
        "conditions": {"type": "array", "items": {"$ref": "#/$defs/Condition"}, "maxItems": 5},
        "owner": {
            "type": ["object", "null"],
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "minimum": 0},
                "address": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        },
        "sort": {"anyOf": [{"$ref": "#/$defs/Direction"}, {"type": "null"}]},
        "secondary": {"$ref": "#/$defs/Direction", "description": "Tie-break order."},
        "limit": {"type": "integer"},
        "score": {"type": "number"},
        "strict": {"type": "boolean"},
        "nothing": {"type": "null"},
        "labels": {"type": "array", "items": {"type": "string"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "point": {
            "type": "array",
            "prefixItems": [{"type": "number"}, {"type": "string"}],
            "items": False,
            "minItems": 2,
        },
        "tagged": {"allOf": [{"$ref": "#/$defs/Condition"}]},
        "x-note": {"type": "string"},
    },
    "x-extractor": {"max_tokens": 100},
}

FILTER_DATA: dict[str, Any] = {
    "kind": "filter",
    "conditions": [
        {"field": "price", "operator": "lt", "value": 30},
        {"field": "rating", "operator": "gt", "value": 4.5},
        {"field": "colour", "operator": "eq", "value": "red"},
        {"field": "brand", "operator": "eq", "value": None},
    ],
    "owner": {"name": "Ada", "age": 36, "address": {"city": "London"}},
    "sort": "desc",
    "secondary": "asc",
    "limit": 10,
    "score": 2,
    "strict": False,
    "nothing": None,
    "labels": ["a", "b"],
    "counts": {"x": 1, "y": 2},
    "point": [1.5, "north"],
    "tagged": {"field": "id", "operator": "eq", "value": 7},
    "x-note": "kept",
}


def _fields(model: type[pydantic.BaseModel]) -> dict[str, pydantic.fields.FieldInfo]:
    return dict(model.model_fields)


def _annotation(field: pydantic.fields.FieldInfo) -> Any:
    return field.annotation


def _typed(schema: dict[str, Any], name: str = "task") -> TypedModel:
    Draft202012Validator.check_schema(schema)
    return model_for_schema(schema, name=name)


@pytest.fixture(scope="module")
def filter_typed() -> TypedModel:
    return _typed(FILTER_SCHEMA, "filter_task")


def test_filter_example_is_valid_json_schema_data() -> None:
    Draft202012Validator(FILTER_SCHEMA).validate(FILTER_DATA)


def test_typed_attribute_access(filter_typed: TypedModel) -> None:
    value: Any = build_value(filter_typed, FILTER_DATA)
    assert filter_typed.warnings == ()
    assert type(value).__name__ == "FilterTask"
    assert value.kind == "filter"
    assert value.conditions[0].operator == "lt"
    assert value.conditions[0].value == 30 and type(value.conditions[0].value) is int
    assert value.conditions[1].value == 4.5 and type(value.conditions[1].value) is float
    assert value.conditions[2].value == "red"
    assert value.conditions[3].value is None
    assert type(value.conditions[0]).__name__ == "Condition"
    assert value.owner.name == "Ada" and value.owner.age == 36
    assert type(value.owner).__name__ == "FilterTaskOwner"
    assert value.owner.address.city == "London"
    assert type(value.owner.address).__name__ == "FilterTaskOwnerAddress"
    assert value.sort == "desc" and value.secondary == "asc"
    assert value.limit == 10 and type(value.limit) is int
    assert value.score == 2 and type(value.score) is int  # numbers keep int/float as given
    assert value.strict is False and value.nothing is None
    assert value.labels == ["a", "b"]
    assert value.counts == {"x": 1, "y": 2}
    assert value.point == (1.5, "north")
    assert value.tagged.field == "id"
    assert type(value.tagged) is type(value.conditions[0])  # one class per $ref
    assert value.x_note == "kept"


def test_annotations(filter_typed: TypedModel) -> None:
    fields = _fields(filter_typed.model)
    condition = fields["conditions"].annotation
    assert typing.get_origin(condition) is list
    (item,) = typing.get_args(condition)
    item_fields = _fields(item)
    assert _annotation(item_fields["operator"]) == typing.Literal["lt", "gt", "eq"]
    assert item_fields["field"].annotation is str
    assert item_fields["field"].description == "The field compared."
    assert item_fields["field"].is_required()
    assert _annotation(fields["kind"]) == typing.Literal["filter"]
    assert fields["limit"].annotation == int | None and not fields["limit"].is_required()
    assert fields["limit"].default is None
    assert fields["labels"].annotation == list[str] | None
    assert fields["counts"].annotation == dict[str, int] | None
    assert fields["point"].annotation == tuple[float | int, str] | None
    assert _annotation(fields["sort"]) == typing.Literal["asc", "desc"] | None
    assert fields["sort"].is_required()  # required and nullable: must be present, may be null
    assert fields["secondary"].description == "Tie-break order."
    assert filter_typed.model.__doc__ == "A search filter built from a sentence."


def test_round_trip(filter_typed: TypedModel) -> None:
    value = build_value(filter_typed, FILTER_DATA)
    dumped = value.model_dump(by_alias=True, exclude_unset=False, mode="json")
    assert dumped == FILTER_DATA
    assert json.dumps(dumped, sort_keys=True) == json.dumps(FILTER_DATA, sort_keys=True)  # int stays int
    python = value.model_dump(by_alias=True)
    assert python == {**FILTER_DATA, "point": (1.5, "north")}  # prefixItems: tuple in python mode


def test_absent_optional_fields_dump_as_none(filter_typed: TypedModel) -> None:
    data: dict[str, Any] = {"kind": "filter", "conditions": [], "owner": None, "sort": None}
    value = build_value(filter_typed, data)
    dumped = value.model_dump(by_alias=True)
    assert dumped["limit"] is None and dumped["x-note"] is None
    assert value.model_dump(by_alias=True, exclude_unset=True) == data


def test_extra_forbidden_when_additional_properties_false(filter_typed: TypedModel) -> None:
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        build_value(filter_typed, {**FILTER_DATA, "surprise": 1})
    bad_condition = {"field": "a", "operator": "lt", "value": 1, "unit": "kg"}
    with pytest.raises(pydantic.ValidationError, match=r"conditions\.0\.unit"):
        build_value(filter_typed, {**FILTER_DATA, "conditions": [bad_condition]})
    with pytest.raises(pydantic.ValidationError):
        build_value(filter_typed, {**FILTER_DATA, "conditions": [{**bad_condition, "operator": "ne"}]})


def test_extra_kept_when_additional_properties_allowed() -> None:
    typed = _typed({"type": "object", "properties": {"a": {"type": "string"}}})
    data = {"a": "x", "b": [1, 2]}
    value: Any = build_value(typed, data)
    assert value.b == [1, 2]
    assert value.model_dump(by_alias=True) == data


def test_typed_extras_from_additional_properties_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}}
    typed = _typed(schema)
    value = build_value(typed, {"a": "x", "b": 2})
    assert value.model_extra == {"b": 2}
    with pytest.raises(pydantic.ValidationError):
        build_value(typed, {"a": "x", "b": "not a number"})


ODD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "名称": {"type": "string", "description": "地标名称"},
        "所在 城市": {"type": "object", "properties": {"区": {"type": "string"}}},
        "model_config": {"type": "integer"},
        "schema": {"type": "string"},
        "json": {"type": "string"},
        "copy": {"type": "boolean"},
        "dict": {"type": "string"},
        "class": {"type": "string"},
        "_private": {"type": "string"},
        "first-name": {"type": "string"},
        "first_name": {"type": "string"},
        "2nd": {"type": "string"},
        "a.b": {"type": "string"},
        "ok": {"type": "string"},
    },
}

ODD_DATA: dict[str, Any] = {
    "名称": "故宫",
    "所在 城市": {"区": "东城"},
    "model_config": 3,
    "schema": "s",
    "json": "j",
    "copy": True,
    "dict": "d",
    "class": "c",
    "_private": "p",
    "first-name": "Ada",
    "first_name": "Lovelace",
    "2nd": "second",
    "a.b": "dotted",
    "ok": "fine",
}


def test_odd_keys_are_aliased() -> None:
    typed = _typed(ODD_SCHEMA, "landmark")
    assert typed.warnings == ()
    fields = _fields(typed.model)
    by_alias = {field.alias or name: name for name, field in fields.items()}
    assert set(by_alias) == set(ODD_DATA)
    for key, name in by_alias.items():
        assert name.isascii() and name.isidentifier() and not name.startswith("_")
        assert not hasattr(pydantic.BaseModel, name), name
        assert (fields[name].alias is None) == (key == name)
    assert by_alias["ok"] == "ok" and by_alias["first_name"] == "first_name"
    assert by_alias["first-name"] not in ("first_name", "first-name")
    assert by_alias["名称"] == "field_1"
    assert by_alias["class"] == "class_"
    assert fields[by_alias["名称"]].description == "地标名称"

    value: Any = build_value(typed, ODD_DATA)
    assert getattr(value, by_alias["名称"]) == "故宫"
    assert value.field_1 == "故宫"
    assert value.model_config_ == 3
    assert value.class_ == "c" and value.json_ == "j" and value.schema_ == "s" and value.copy_ is True
    nested = getattr(value, by_alias["所在 城市"])
    assert _fields(type(nested))["field_1"].alias == "区"
    assert value.model_config["extra"] == "forbid"  # the real config is untouched
    assert callable(value.model_dump_json)
    assert value.model_dump(by_alias=True) == ODD_DATA
    assert value.model_dump() == ODD_DATA  # models serialize by alias by default
    assert set(value.model_dump(by_alias=False)) == set(fields)
    assert json.loads(value.model_dump_json()) == ODD_DATA


def test_odd_keys_validate_by_field_name_too() -> None:
    typed = _typed(ODD_SCHEMA)
    fields = _fields(typed.model)
    by_name = {name: ODD_DATA[field.alias or name] for name, field in fields.items()}
    value = typed.model.model_validate(by_name)
    assert value.model_dump(by_alias=True) == ODD_DATA


def test_landmark_task_schema() -> None:
    schema = json.loads((ROOT / "schemas" / "landmark_slots.json").read_text(encoding="utf-8"))
    typed = model_for_schema(schema, name="landmark_slots")
    assert typed.warnings == ()
    for example in schema["x-extractor"]["examples"]:
        value: Any = build_value(typed, example["output"])
        assert value.name == example["output"]["name"]
        assert value.model_dump(by_alias=True) == example["output"]
    assert _fields(typed.model)["name"].description == "地标名称"
    assert typed.model.__doc__ == schema["description"]


def test_recursive_ref() -> None:
    schema = {
        "type": "object",
        "required": ["root"],
        "properties": {"root": {"$ref": "#/$defs/tree_node"}},
        "$defs": {
            "tree_node": {
                "type": "object",
                "required": ["label"],
                "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/tree_node"}},
                    "partner": {"$ref": "#/$defs/Other"},
                },
            },
            "Other": {"type": "object", "properties": {"back": {"$ref": "#/$defs/tree_node"}}},
        },
    }
    typed = _typed(schema)
    assert typed.warnings == ()
    data = {
        "root": {
            "label": "a",
            "children": [{"label": "b", "children": [{"label": "c"}]}],
            "partner": {"back": {"label": "d"}},
        }
    }
    value: Any = build_value(typed, data)
    assert value.root.children[0].children[0].label == "c"
    assert type(value.root).__name__ == "TreeNode"
    assert type(value.root.children[0]) is type(value.root)
    assert type(value.root.partner.back) is type(value.root)
    assert value.model_dump(by_alias=True, exclude_unset=True) == data


def test_recursion_through_non_object_falls_back_to_any() -> None:
    schema = {
        "type": "object",
        "properties": {"doc": {"$ref": "#/$defs/json"}},
        "$defs": {"json": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/json"}}]}},
    }
    typed = _typed(schema)
    assert any(w.startswith("#/$defs/json/anyOf/1/items/$ref:") for w in typed.warnings)
    value: Any = build_value(typed, {"doc": ["a", ["b", ["c"]]]})
    assert value.doc == ["a", ["b", ["c"]]]


def test_definitions_and_root_ref() -> None:
    schema = {
        "type": "object",
        "properties": {"item": {"$ref": "#/definitions/Item"}, "parent": {"$ref": "#"}},
        "definitions": {"Item": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    }
    typed = _typed(schema, "catalog")
    value: Any = build_value(typed, {"item": {"n": 1}, "parent": {"item": {"n": 2}}})
    assert type(value.item).__name__ == "Item"
    assert value.parent.item.n == 2
    assert type(value.parent) is typed.model  # "#" refers back to the root class


def test_any_of_objects_picks_the_matching_branch() -> None:
    schema = {
        "type": "object",
        "properties": {
            "payment": {
                "oneOf": [
                    {"type": "object", "required": ["card"], "properties": {"card": {"type": "string"}}},
                    {"type": "object", "required": ["iban"], "properties": {"iban": {"type": "string"}}},
                ]
            }
        },
    }
    typed = _typed(schema, "order")
    value: Any = build_value(typed, {"payment": {"iban": "DE00"}})
    assert type(value.payment).__name__ == "OrderPaymentOption2"
    assert value.payment.iban == "DE00"


def test_enum_and_const_literals() -> None:
    schema = {
        "type": "object",
        "properties": {
            "mixed": {"enum": ["a", 1, None, True]},
            "typed": {"type": "string", "enum": ["x", "y", 3]},
            "one": {"const": 1},
            "half": {"enum": [0.5, 2]},
        },
    }
    typed = _typed(schema)
    fields = _fields(typed.model)
    assert set(typing.get_args(fields["typed"].annotation)) >= {typing.Literal["x", "y"]}
    value: Any = build_value(typed, {"mixed": None, "typed": "y", "one": 1.0, "half": 0.5})
    assert value.mixed is None and value.typed == "y" and value.half == 0.5
    assert value.one == 1 and type(value.one) is float  # 1.0 == 1 for JSON Schema; kept as given
    with pytest.raises(pydantic.ValidationError):
        build_value(typed, {"typed": "z"})
    with pytest.raises(pydantic.ValidationError):
        build_value(typed, {"one": 2})


def test_object_and_array_enum_values_warn() -> None:
    typed = _typed({"type": "object", "properties": {"e": {"enum": [{"a": 1}, [1], "s"]}}})
    assert typed.warnings == (
        "#/properties/e/enum: object and array values cannot be literals; typed by their JSON type",
    )
    value: Any = build_value(typed, {"e": {"a": 1}})
    assert value.e == {"a": 1}


@pytest.mark.parametrize(
    ("sub", "pointer"),
    [
        ({"not": {"type": "string"}}, "#/properties/f/not"),
        ({"if": {"type": "string"}, "then": {"minLength": 1}, "else": {"type": "integer"}}, "#/properties/f/if"),
        ({"allOf": [{"type": "object", "properties": {"a": {}}}, {"properties": {"b": {}}}]}, "#/properties/f/allOf"),
        ({"type": "object", "patternProperties": {"^x": {"type": "string"}}}, "#/properties/f/patternProperties"),
        ({"$ref": "https://example.com/other.json"}, "#/properties/f/$ref"),
        ({"$ref": "#/$defs/missing"}, "#/properties/f/$ref"),
    ],
)
def test_untypeable_constructs_warn_and_fall_back(sub: dict[str, Any], pointer: str) -> None:
    typed = model_for_schema({"type": "object", "properties": {"f": sub}}, name="t")
    assert typed.warnings, "expected a warning"
    assert any(w.startswith(pointer + ":") for w in typed.warnings), typed.warnings
    value: Any = build_value(typed, {"f": {"x1": "v"}})
    assert value.f == {"x1": "v"}
    assert value.model_dump(by_alias=True) == {"f": {"x1": "v"}}


def test_untyped_keyword_beside_a_type_keeps_the_type() -> None:
    typed = _typed({"type": "object", "properties": {"s": {"type": "string", "not": {"const": ""}}}})
    assert typed.warnings == ("#/properties/s/not: 'not' cannot be typed; typed from the other keywords",)
    assert _fields(typed.model)["s"].annotation == str | None


def test_pattern_properties_beside_false_additional_properties_allow_extra() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "string"}},
        "patternProperties": {"^x-": {"type": "integer"}},
    }
    typed = _typed(schema)
    assert [w.split(":")[0] for w in typed.warnings] == ["#/patternProperties"]
    data = {"a": "s", "x-one": 1}
    assert build_value(typed, data).model_dump(by_alias=True) == data


def test_constraint_only_all_of_branches_are_not_warned() -> None:
    typed = _typed({"type": "object", "properties": {"s": {"allOf": [{"type": "string"}, {"maxLength": 3}]}}})
    assert typed.warnings == ()
    assert _fields(typed.model)["s"].annotation == str | None


def test_siblings_of_any_of_are_merged_into_each_branch() -> None:
    schema = {
        "type": "object",
        "properties": {
            "v": {
                "type": "object",
                "properties": {"id": {"type": "integer"}},
                "required": ["id"],
                "anyOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "integer"}}}],
            }
        },
    }
    typed = _typed(schema)
    value: Any = build_value(typed, {"v": {"id": 1, "b": 2}})
    assert value.v.id == 1 and value.v.b == 2


def test_root_that_is_not_an_object_model_becomes_a_root_model() -> None:
    typed = _typed({"type": "object", "additionalProperties": {"type": "number"}}, "scores")
    assert issubclass(typed.model, pydantic.RootModel)
    assert typed.model.__name__ == "Scores"
    value: Any = build_value(typed, {"a": 1, "b": 2.5})
    assert value.root == {"a": 1, "b": 2.5}
    assert value.model_dump() == {"a": 1, "b": 2.5}


def test_type_inferred_without_type_keyword() -> None:
    schema = {
        "type": "object",
        "properties": {"o": {"properties": {"a": {"type": "string"}}}, "l": {"items": {"type": "integer"}}},
    }
    typed = _typed(schema)
    value: Any = build_value(typed, {"o": {"a": "x"}, "l": [1, 2]})
    assert value.o.a == "x" and value.l == [1, 2]


def test_prefix_items_allow_shorter_arrays_and_open_rest_warns() -> None:
    schema = {
        "type": "object",
        "properties": {
            "short": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
            "open": {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}},
        },
    }
    typed = _typed(schema)
    assert [w.split(":")[0] for w in typed.warnings] == ["#/properties/open/prefixItems"]
    value: Any = build_value(typed, {"short": ["a"], "open": ["a", 1, 2]})
    assert value.short == ("a",) and value.open == ["a", 1, 2]


def test_class_names_do_not_clash() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a_b": {"type": "object", "properties": {"x": {"type": "string"}}},  # class TaskAB
            "AB": {"$ref": "#/$defs/TaskAB"},  # wants TaskAB too
            "int": {"$ref": "#/$defs/int"},  # a builtin's name
        },
        "$defs": {
            "TaskAB": {"type": "object", "properties": {"y": {"type": "string"}}},
            "int": {"type": "object", "properties": {"z": {"type": "string"}}},
        },
    }
    typed = _typed(schema, "task")
    data = {"a_b": {"x": "1"}, "AB": {"y": "2"}, "int": {"z": "3"}}
    value: Any = build_value(typed, data)
    names = {type(value.a_b).__name__, type(value.AB).__name__, type(value.int).__name__}
    assert len(names) == 3
    assert type(value.int).__name__ != "int"
    assert value.model_dump(by_alias=True, exclude_unset=True) == data


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"type": "object", "properties": {}},
        {"type": "object", "properties": {"a": True, "b": False, "c": {}}},
        {"type": "object", "properties": {"a": {"type": ["string", "integer", "array", "object", "null"]}}},
        {"type": "object", "properties": {"a": {"type": "array", "items": False}}},
        {"type": "object", "properties": {"a": {"enum": []}}},
        {"type": "object", "properties": {"a": {"anyOf": [False, True]}}},
        {"type": "object", "properties": {"a": {"type": "array", "prefixItems": [{}] * 20, "items": False}}},
        {"type": "object", "properties": {"a": {"unevaluatedProperties": {"type": "string"}}}},
        {"type": "object", "properties": {"a": {"$ref": "#/properties/b"}, "b": {"$ref": "#/properties/a"}}},
        {"$ref": "#/$defs/R", "$defs": {"R": {"type": "object", "properties": {"r": {"$ref": "#"}}}}},
    ],
)
def test_never_crashes(schema: dict[str, Any]) -> None:
    typed = model_for_schema(schema, name="odd")
    assert issubclass(typed.model, pydantic.BaseModel)
    assert all(w.startswith("#") for w in typed.warnings)
    build_value(typed, {})


def test_deep_nesting_is_capped() -> None:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        node = {"type": "object", "properties": {"n": node}}
    typed = model_for_schema(node, name="deep")
    assert any("nested deeper than" in w for w in typed.warnings)
    data: dict[str, Any] = {}
    for _ in range(5):
        data = {"n": data}
    assert build_value(typed, data).model_dump(exclude_unset=True) == data


def test_typed_model_is_frozen(filter_typed: TypedModel) -> None:
    with pytest.raises(AttributeError):
        filter_typed.warnings = ("x",)  # type: ignore[misc]


# --- in the catalog and the pipeline ----------------------------------------------------------


def test_catalog_builds_each_model_once_and_reports_loose_typing_at_load(tmp_path: Path) -> None:
    from extractor import Catalog

    (tmp_path / "schemas").mkdir()
    (tmp_path / "prompts").mkdir()
    loose = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"not": {"type": "null"}}},
        "x-extractor": {"allow_unenforced": True},
    }
    (tmp_path / "schemas" / "loose.json").write_text(json.dumps(loose), encoding="utf-8")
    (tmp_path / "prompts" / "loose.j2").write_text("{{ text }}", encoding="utf-8")
    catalog = Catalog.load(tmp_path)
    task = catalog.get("loose")  # loaded, not left out
    assert catalog.errors == [] and task.typed is not None
    assert any(
        w.endswith("#/properties/b/not: 'not' cannot be typed; typed as Any (in result.value)") for w in task.warnings
    )
    assert any("guidance does not enforce 'not'" in w for w in task.warnings)


async def test_result_value_uses_the_tasks_cached_model() -> None:
    from extractor import Catalog, Extractor, ScriptedEngine, Settings

    catalog = Catalog.load(ROOT)
    engine = ScriptedEngine(['{"conditions": [{"field": "city", "operator": "eq", "value": "Rome"}]}'] * 2)
    extractor = Extractor(settings=Settings.from_env({}, engine="scripted"), engine=engine, catalog=catalog)
    first = await extractor.aextract("query_conditions", "hotels in Rome")
    second = await extractor.aextract("query_conditions", "hotels in Rome")
    task = catalog.get("query_conditions")
    assert task.typed is not None and extractor.typed_model("query_conditions") is task.typed
    assert type(first.value) is type(second.value) is task.typed.model
    assert first.value.conditions[0].operator == "eq"
    assert typing.get_args(task.typed.model.model_fields["conditions"].annotation)[0].__name__ == "Condition"
