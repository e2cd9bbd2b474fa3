"""The fields of a schema: each subschema that describes a field's values, local refs followed. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from extractor.schema.pointers import escape
from extractor.schema.refs import resolve

# How deep a field walk goes, and how often it follows one ref on a branch: a recursive schema (the
# draft-07 meta-schema's ``"$ref": "#"`` under each of its ~11 schema-valued keywords) is followed a
# few times per ref on a branch, not once per path through it (11**32 of them).
FIELD_DEPTH = 32
REF_REPEATS = 3
# How often one walk follows one ref in all: a definition shared by many fields (an API schema's
# ``author`` under every ``credits``, or 2**30 paths through ``{"a": ref, "b": ref}`` levels) is
# walked on its first paths only, so a walk costs at most this many times the schema's size.
REF_PATHS = 64


def walk_fields(
    root: Mapping[str, Any],
    visit: Callable[[str, Mapping[str, Any]], bool],
    *,
    union: Callable[[Sequence[Any]], Sequence[Any]] = lambda branches: branches,
) -> None:
    """Call ``visit(field path, subschema)`` for each subschema that describes a field's values.

    A field path is a data pointer without array indices (``/items/price``): the walk goes into
    ``properties`` (the path grows), ``items``, ``allOf``, the branches ``union`` keeps of each
    ``anyOf``/``oneOf`` (all of them by default), and local ``$ref``s (:func:`extractor.schema.resolve`),
    each at most :data:`REF_REPEATS` times on a branch, :data:`REF_PATHS` times in all and
    :data:`FIELD_DEPTH` levels deep.
    ``visit`` returning True stops the walk below that subschema.
    """
    followed: Counter[str] = Counter()

    def go(node: Any, path: str, depth: int, refs: tuple[str, ...]) -> None:
        if not isinstance(node, Mapping) or depth > FIELD_DEPTH:
            return
        if visit(path, node):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and refs.count(ref) < REF_REPEATS and followed[ref] < REF_PATHS:
            followed[ref] += 1
            go(resolve(root, ref), path, depth + 1, (*refs, ref))
        for key in ("anyOf", "oneOf"):
            for branch in union(node.get(key) or []):
                go(branch, path, depth + 1, refs)
        for branch in node.get("allOf") or []:
            go(branch, path, depth + 1, refs)
        for name, child in (node.get("properties") or {}).items():
            go(child, f"{path}/{escape(str(name))}", depth + 1, refs)
        go(node.get("items"), path, depth + 1, refs)

    go(root, "", 0, ())
