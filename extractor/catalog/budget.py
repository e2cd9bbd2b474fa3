"""Output budgets: how many tokens a task's longest possible answer takes, from its schema. Pure.

The estimate is conservative without a tokenizer: a free string value counts one token a
character (CJK text is about that; English is fewer), field names, enum values and JSON
punctuation one token per :data:`SYNTAX_CHARS_PER_TOKEN` characters. A value with no upper
bound (an array without ``maxItems``, a string without ``maxLength`` or ``enum``) makes the
worst case unbounded. ``extractor tasks check`` warns when the estimate cannot fit the task's
``max_tokens``: such a task gets answers cut at ``max_tokens`` (re-asked with a larger budget,
but each cut costs an attempt).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extractor.schema import resolve

SYNTAX_CHARS_PER_TOKEN = 3
NUMBER_TOKENS = 8  # a number without bounds: up to about 20 digits
_MAX_REF_DEPTH = 32


@dataclass
class WorstCase:
    """The longest answer a schema allows, in (estimated) tokens; ``unbounded`` lists why there is no bound."""

    tokens: int = 0
    unbounded: list[str] = field(default_factory=list)

    @property
    def bounded(self) -> bool:
        return not self.unbounded


def worst_case(schema: Mapping[str, Any]) -> WorstCase:
    """The longest compact-JSON answer ``schema`` allows (``$ref`` to its own ``$defs`` followed)."""
    out = WorstCase()
    out.tokens = _tokens(schema, schema, "", out, 0, {})
    return out


def check(schema: Mapping[str, Any], *, max_tokens: int) -> str | None:
    """A warning when the worst-case answer cannot fit ``max_tokens``; None when it can."""
    case = worst_case(schema)
    if not case.bounded:
        listed = ", ".join(case.unbounded[:5]) + (" ..." if len(case.unbounded) > 5 else "")
        return (
            f"the answer has no length bound ({listed}): it can run past max_tokens {max_tokens}; "
            "bound it with maxItems / maxLength"
        )
    if case.tokens > max_tokens:
        return (
            f"the longest answer the schema allows takes about {case.tokens} tokens, over max_tokens {max_tokens}: "
            "such answers are cut (and re-asked with a larger budget); raise max_tokens or lower maxItems / maxLength"
        )
    return None


def fit_window(requested: int, *, at_least: int, prompt_tokens: int, max_model_len: int) -> int:
    """A ``max_tokens`` the window can hold after the prompt: ``requested`` cut to the room left.

    ``max_tokens`` is an upper bound, as on the wire: asking more than the window leaves is clamped
    to what it leaves, never below ``at_least`` (the budget the request would have had without
    asking), so asking more never fails a request that fits without it. The caller still refuses a
    prompt that leaves no room for ``at_least``.
    """
    room = max_model_len - prompt_tokens
    return requested if requested <= room else max(min(at_least, requested), room)


def _syntax(text: str) -> int:
    return math.ceil(len(text) / SYNTAX_CHARS_PER_TOKEN)


def _tokens(root: Mapping[str, Any], node: Any, pointer: str, out: WorstCase, depth: int, memo: dict[int, int]) -> int:
    # Each subschema is estimated once (``memo``), so shared definitions cost nothing more; a depth cut
    # makes the answer unbounded anyway, so an estimate does not depend on where it was first reached.
    if isinstance(node, Mapping) and id(node) in memo:
        return memo[id(node)]
    tokens = _estimate(root, node, pointer, out, depth, memo)
    if isinstance(node, Mapping):
        memo[id(node)] = tokens
    return tokens


def _estimate(
    root: Mapping[str, Any], node: Any, pointer: str, out: WorstCase, depth: int, memo: dict[int, int]
) -> int:
    if not isinstance(node, Mapping) or depth > _MAX_REF_DEPTH:
        if depth > _MAX_REF_DEPTH:
            out.unbounded.append(f"{pointer or '/'}: $ref nests deeper than {_MAX_REF_DEPTH}")
        return 1 if node is not False else 0
    if "$ref" in node:
        target = resolve(root, str(node["$ref"]))
        if target is None:
            out.unbounded.append(f"{pointer or '/'}: $ref {node['$ref']!r} is not local")
            return 0
        return _tokens(root, target, pointer, out, depth + 1, memo)
    if "const" in node:
        return _syntax(json.dumps(node["const"], ensure_ascii=False, separators=(",", ":")))
    if "enum" in node:
        values = node["enum"] if isinstance(node["enum"], list) else []
        return max((_syntax(json.dumps(v, ensure_ascii=False, separators=(",", ":"))) for v in values), default=1)
    branches = [b for key in ("anyOf", "oneOf") for b in node.get(key, ()) if isinstance(b, Mapping)]
    if branches:
        return max(_tokens(root, b, pointer, out, depth + 1, memo) for b in branches)
    kinds = node.get("type")
    types = kinds if isinstance(kinds, list) else [kinds] if kinds else _implied(node)
    return max((_typed(root, node, str(t), pointer, out, depth, memo) for t in types), default=1)


def _implied(node: Mapping[str, Any]) -> list[str]:
    if "properties" in node:
        return ["object"]
    if "items" in node or "maxItems" in node:
        return ["array"]
    return ["string"] if "maxLength" in node else []


def _typed(
    root: Mapping[str, Any],
    node: Mapping[str, Any],
    kind: str,
    pointer: str,
    out: WorstCase,
    depth: int,
    memo: dict[int, int],
) -> int:
    if kind == "object":
        properties = node.get("properties") or {}
        total = 1  # the braces, with the commas: about one token per two characters of "{,,}"
        for name, sub in properties.items():
            total += _syntax(json.dumps(name, ensure_ascii=False) + ":,")
            total += _tokens(root, sub, f"{pointer}/{name}", out, depth + 1, memo)
        return total
    if kind == "array":
        items = node.get("items", {})
        most = node.get("maxItems")
        if not isinstance(most, int):
            out.unbounded.append(f"{pointer or '/'}: array without maxItems")
            return 0
        return 1 + most * (_tokens(root, items, f"{pointer}/items", out, depth + 1, memo) + 1)
    if kind == "string":
        most = node.get("maxLength")
        if not isinstance(most, int):
            out.unbounded.append(f"{pointer or '/'}: string without maxLength")
            return 0
        return most + 1  # one token a character (CJK-like), and the quotes
    if kind in ("number", "integer"):
        bounds = [node[k] for k in ("minimum", "maximum") if isinstance(node.get(k), int | float)]
        return max((_syntax(str(b)) for b in bounds), default=NUMBER_TOKENS) if len(bounds) == 2 else NUMBER_TOKENS
    return 1  # boolean, null
