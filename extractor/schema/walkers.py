"""Walks over a schema: every subschema with its pointer, the types a subschema names. Pure."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from extractor.schema.pointers import escape

# Keywords whose values are subschemas, so the walk goes on below them.
SCHEMA_MAP_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SCHEMA_LIST_KEYS = ("allOf", "anyOf", "oneOf", "prefixItems")
SUBSCHEMA_KEYS = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)


def walk(schema: Any, pointer: str = "#") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Yield ``(pointer, subschema)`` for every subschema, the root first (refs are not followed)."""
    if not isinstance(schema, Mapping):
        return
    yield pointer, schema
    for key in SCHEMA_MAP_KEYS:
        children = schema.get(key)
        if isinstance(children, Mapping):
            for name, child in children.items():
                yield from walk(child, f"{pointer}/{key}/{escape(str(name))}")
    for key in SCHEMA_LIST_KEYS:
        children = schema.get(key)
        if isinstance(children, list):
            for index, child in enumerate(children):
                yield from walk(child, f"{pointer}/{key}/{index}")
    for key in SUBSCHEMA_KEYS:
        yield from walk(schema.get(key), f"{pointer}/{key}")


def types_of(node: Mapping[str, Any]) -> set[str]:
    """The JSON types a subschema's ``type`` names (empty when it names none)."""
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {str(k) for k in declared}
    return set()
