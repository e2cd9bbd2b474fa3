"""The subschema a local ``$ref`` names. Pure; a ref that leaves the schema resolves to None."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from extractor.schema.pointers import node_at
from extractor.schema.walkers import walk


def resolve(root: Any, ref: str) -> Any:
    """The node a local ref (``#``, ``#/json/pointer``, percent-encoded or not, or ``#anchor``) names, or None."""
    if not isinstance(root, Mapping) or not ref.startswith("#"):
        return None
    fragment = unquote(ref[1:])
    if fragment and not fragment.startswith("/"):
        return find_anchor(root, fragment)
    return node_at(root, fragment)


def find_anchor(root: Mapping[str, Any], name: str) -> Any:
    """The subschema declaring ``"$anchor"`` (or ``"$dynamicAnchor"``) ``name``, or None."""
    return next((sub for _, sub in walk(root) if name in (sub.get("$anchor"), sub.get("$dynamicAnchor"))), None)
