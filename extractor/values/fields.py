"""Which fields hold typed values, and the schema the model answers in: their evidence as strings.

A *value field* is a leaf the schema types as a date, time, date-time or duration (``format``
on a string) or as a number or integer, unless it says ``"x-grounded": false`` (the model writes
the value itself) or lists its values (``enum``/``const``: decoding holds those already). A
union of such a leaf with ``null`` is one too; a union with other types (a string or a number)
is left as written: nothing says which the words mean, unless the field lists its ``readings``
(``"x-extractor": {"readings": ["amount", "number", "date", ...]}``, kind ``readings``): the words are
read as the first that fits, and stay the words when none does (:mod:`extractor.values.readings`).
A sibling property with ``"x-extractor": {"unit_of": "value"}`` is filled by the service with the
currency or unit the value was read in; the model never writes it.

The *evidence schema* is the task schema with each value field turned into a string the model
copies from the text (``"x-extractive": true``: grounded decoding holds it to the text); the
service reads the typed value back from those words (:mod:`extractor.values.normalize`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from extractor.schema import escape, walk_fields
from extractor.values.readings import READINGS

FORMATS = ("date", "date-time", "time", "duration")
NUMBERS = ("number", "integer")
SETTINGS_KEY = "x-extractor"
FIELD_SETTINGS = ("unit", "currency", "date_order", "languages", "percent", "readings")
KIND_READINGS = "readings"  # a value read as the first of its readings that fits, or kept as the words
UNIT_OF = "unit_of"  # on a sibling property: the service writes the value's currency or unit there
# Read by extractor.passages on any top-level field: where a long document's passages come from.
PASSAGE_SETTINGS = ("query", "passages", "merge", "from", "expect")
EVIDENCE_MAX_CHARS = 120
# On an evidence string: the kind of value it states, whose phrases of the text it is held to.
PHRASES_KEY = "x-phrases"
_MAX_DEPTH = 32


@dataclass(frozen=True)
class ValueField:
    """A typed leaf: its field path (``/items/price``, no indices), kind, and its ``x-extractor`` settings."""

    path: str
    kind: str  # a format (date, date-time, time, duration), a number type (number, integer), or readings
    settings: Mapping[str, Any]
    nullable: bool = False
    unit_key: str | None = None  # the sibling property the service writes the currency or unit to

    @property
    def readings(self) -> tuple[str, ...]:
        """The readings tried in order (kind ``readings`` only; unknown names are left out)."""
        listed = self.settings.get("readings")
        return tuple(r for r in listed if r in READINGS) if isinstance(listed, list) else ()


def kind_of(node: Any) -> str | None:
    """The kind of value a schema node types, or None when it is not a value field."""
    if not isinstance(node, Mapping) or node.get("x-grounded") is False or "enum" in node or "const" in node:
        return None
    types = node.get("type")
    named = [types] if isinstance(types, str) else list(types) if isinstance(types, list) else []
    named = [t for t in named if t != "null"]
    if _settings(node).get("readings") is not None and (not named or "string" in named):
        return KIND_READINGS
    if len(named) != 1:
        return None
    if named[0] in NUMBERS:
        return str(named[0])
    if named[0] == "string" and node.get("format") in FORMATS:
        return str(node["format"])
    return None


def value_fields(schema: Mapping[str, Any]) -> dict[str, ValueField]:
    """Every value field of ``schema`` by field path (local ``$ref``s followed)."""
    found: dict[str, ValueField] = {}

    def visit(path: str, node: Mapping[str, Any]) -> bool:
        kind = kind_of(node)
        if kind is None:
            return False
        types = node.get("type")
        nullable = isinstance(types, list) and "null" in types
        found.setdefault(path, ValueField(path, kind, dict(_settings(node)), nullable))
        return True

    def visit_units(path: str, node: Mapping[str, Any]) -> bool:
        for name, of in unit_keys(node.get("properties")).items():  # a sibling the service fills
            at = f"{path}/{escape(of)}"
            if at in found:
                found[at] = replace(found[at], unit_key=name)
        return kind_of(node) is not None

    walk_fields(schema, visit, union=_union)
    walk_fields(schema, visit_units, union=_union)
    return found


def _union(branches: Sequence[Any]) -> list[Any]:
    # A value or null: the value's branch decides; a union of shapes: only objects and arrays inside it are followed.
    live = [b for b in branches if not _is_null(b)]
    return live if len(live) == 1 else [b for b in live if kind_of(b) is None]


def _settings(node: Mapping[str, Any]) -> Mapping[str, Any]:
    settings = node.get(SETTINGS_KEY)
    return settings if isinstance(settings, Mapping) else {}


def unit_keys(properties: Any) -> dict[str, str]:
    """``{property: the property whose unit it holds}`` for the ``unit_of`` properties of an object's ``properties``."""
    if not isinstance(properties, Mapping):
        return {}
    found = {name: _settings(child).get(UNIT_OF) for name, child in properties.items() if isinstance(child, Mapping)}
    return {str(name): str(of) for name, of in found.items() if isinstance(of, str)}


def evidence_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with every value field an evidence string the model copies from the text."""
    return _evidence(copy.deepcopy(dict(schema)), depth=0)  # type: ignore[no-any-return]


def _evidence(node: Any, depth: int) -> Any:
    if depth > 4 * _MAX_DEPTH:
        return node
    if not isinstance(node, dict):
        return node
    if kind_of(node) is not None:
        return _evidence_node(node)
    filled = unit_keys(node.get("properties"))  # the service writes these: the model's answer has none
    if filled:
        node = {**node, "properties": {k: v for k, v in node["properties"].items() if k not in filled}}
        if isinstance(node.get("required"), list):
            node["required"] = [k for k in node["required"] if k not in filled]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _evidence(sub, depth + 1) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_evidence(sub, depth + 1) for sub in value]
        elif key in _SCHEMA_VALUES:
            out[key] = _evidence(value, depth + 1)
        else:
            out[key] = value
    return out


_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "unevaluatedItems", "unevaluatedProperties", "contains")


def _evidence_node(node: Mapping[str, Any]) -> dict[str, Any]:
    kind = kind_of(node)
    types = node.get("type")
    nullable = isinstance(types, list) and "null" in types
    what = {"date": "date", "date-time": "date and time", "time": "time", "duration": "duration"}.get(
        str(kind), "value, with its unit or currency" if kind == KIND_READINGS else "number"
    )
    description = str(node.get("description") or "").strip()
    hint = f"the words of the text that state the {what}, copied exactly"
    evidence: dict[str, Any] = {
        "type": ["string", "null"] if nullable else "string",
        "minLength": 1,
        "maxLength": EVIDENCE_MAX_CHARS,
        "x-extractive": True,
        "description": f"{description} ({hint})" if description else hint,
    }
    if kind != KIND_READINGS:  # grounded decoding holds the evidence to the phrases of this kind (values.phrases)
        evidence[PHRASES_KEY] = kind
    if "title" in node:
        evidence["title"] = node["title"]
    return evidence


def _is_null(node: Any) -> bool:
    return isinstance(node, Mapping) and node.get("type") == "null"


def check_settings(schema: Mapping[str, Any], fields: Mapping[str, ValueField]) -> list[str]:
    """Load warnings for value fields' ``x-extractor`` settings this layer does not read."""
    warnings: list[str] = []
    for value_field in fields.values():
        unknown = sorted(set(value_field.settings) - set(FIELD_SETTINGS) - set(PASSAGE_SETTINGS))
        if unknown:
            warnings.append(
                f"{value_field.path or '/'}: x-extractor key(s) {', '.join(unknown)} are not read on a value field "
                f"(known: {', '.join(FIELD_SETTINGS)})"
            )
        # A field of readings takes ``percent`` (points or a ratio); its unit is what the text names.
        numeric = {"unit", "currency"} if value_field.kind == KIND_READINGS else {"unit", "currency", "percent"}
        if value_field.kind not in NUMBERS and numeric & set(value_field.settings):
            warnings.append(f"{value_field.path or '/'}: unit, currency and percent apply to numbers only")
        listed = value_field.settings.get("readings")
        if value_field.kind == KIND_READINGS:
            bad = [r for r in listed if r not in READINGS] if isinstance(listed, list) else [listed]
            if bad or not listed:
                warnings.append(
                    f"{value_field.path or '/'}: readings must list some of {', '.join(READINGS)} (not {bad or listed})"
                )
    return warnings
