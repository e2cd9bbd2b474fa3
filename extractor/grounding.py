"""Find each extracted string in the source text -> character spans. Pure functions.

Offsets are Python string indices (code points) into the original text, so
``text[start:end] == value`` holds for every ``exact`` span, on any script.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote

from extractor.decoding import walk

SpanStatus = Literal["exact", "normalized", "missing"]
GroundingPolicy = Literal["strict", "flag", "off"]
_INDEX = re.compile(r"/\d+(?=/|$)")


@dataclass(frozen=True)
class Span:
    """Where one extracted string was found (start/end are None when missing)."""

    path: str
    value: str
    start: int | None
    end: int | None
    status: SpanStatus


def string_leaves(data: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """Yield ``(json_pointer, string)`` for every string value in ``data``."""
    if isinstance(data, str):
        yield pointer, data
    elif isinstance(data, Mapping):
        for key, value in data.items():
            yield from string_leaves(value, f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}")
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from string_leaves(value, f"{pointer}/{index}")


def field_path(pointer: str) -> str:
    """A data pointer without array indices: ``/conditions/0/value`` -> ``/conditions/value``."""
    return _INDEX.sub("", pointer)


def ungrounded_paths(schema: Mapping[str, Any]) -> frozenset[str]:
    """Field paths (see :func:`field_path`) whose schema says ``"x-grounded": false``.

    Such fields hold normalized values (dates, numbers, enums) that need not occur verbatim.
    """
    found: set[str] = set()
    _collect_ungrounded(schema, schema, "", found, depth=0)
    return frozenset(found)


def _collect_ungrounded(root: Mapping[str, Any], node: Any, path: str, found: set[str], depth: int) -> None:
    if not isinstance(node, Mapping) or depth > 32:
        return
    if node.get("x-grounded") is False:
        found.add(path)
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        _collect_ungrounded(root, _resolve(root, ref), path, found, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in node.get(key) or []:
            _collect_ungrounded(root, branch, path, found, depth + 1)
    for name, child in (node.get("properties") or {}).items():
        _collect_ungrounded(root, child, f"{path}/{_escape(str(name))}", found, depth + 1)
    _collect_ungrounded(root, node.get("items"), path, found, depth + 1)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    """Return the node a local ref (``#``, ``#/json/pointer`` or ``#anchor``) names, or None."""
    if not ref.startswith("#"):
        return None
    fragment = unquote(ref[1:])
    if fragment and not fragment.startswith("/"):
        return _find_anchor(root, fragment)
    node: Any = root
    for token in fragment.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def _find_anchor(root: Mapping[str, Any], name: str) -> Any:
    """Return the subschema declaring ``"$anchor"`` (or ``"$dynamicAnchor"``) ``name``, or None."""
    return next((sub for _, sub in walk(root) if name in (sub.get("$anchor"), sub.get("$dynamicAnchor"))), None)


def is_grounded_field(pointer: str, skipped: frozenset[str]) -> bool:
    """Whether the value at ``pointer`` must be found in the text."""
    path = field_path(pointer)
    return not any(path == s or path.startswith(s + "/") for s in skipped)


def _normalize(text: str) -> tuple[str, list[int]]:
    """Decompose (NFD), lower-case, collapse whitespace; return the new text and each char's original index."""
    out: list[str] = []
    index: list[int] = []
    previous_space = False
    for i, char in enumerate(text):
        if char.isspace():
            if previous_space:
                continue
            previous_space = True
            out.append(" ")
            index.append(i)
            continue
        previous_space = False
        for piece in unicodedata.normalize("NFD", char):
            lowered = piece.lower()
            out.append(lowered if len(lowered) == 1 else piece)
            index.append(i)
    return "".join(out), index


def _occurrences(haystack: str, needle: str) -> Iterator[int]:
    start = haystack.find(needle)
    while start != -1:
        yield start
        start = haystack.find(needle, start + 1)


def _pick(candidates: list[tuple[int, int]], used: set[tuple[int, int]]) -> tuple[int, int] | None:
    """The first span not already given to an equal value (repeats map to distinct spans)."""
    for span in candidates:
        if span not in used:
            return span
    return candidates[0] if candidates else None


def locate(text: str, data: Any, *, skip: frozenset[str] = frozenset()) -> list[Span]:
    """Locate every string of ``data`` in ``text``; fields under ``skip`` paths are left out."""
    normalized, index = _normalize(text)
    used: set[tuple[int, int]] = set()
    spans: list[Span] = []
    for pointer, value in string_leaves(data):
        if not is_grounded_field(pointer, skip):
            continue
        spans.append(_locate_one(text, normalized, index, pointer, value, used))
    return spans


def _locate_one(
    text: str, normalized: str, index: list[int], pointer: str, value: str, used: set[tuple[int, int]]
) -> Span:
    if value and (hit := _pick([(s, s + len(value)) for s in _occurrences(text, value)], used)):
        used.add(hit)
        return Span(pointer, value, hit[0], hit[1], "exact")
    needle, _ = _normalize(value.strip())
    if needle:
        candidates = [
            (index[s], index[s + len(needle) - 1] + 1)
            for s in _occurrences(normalized, needle)
            if _on_char_boundary(index, s) and _on_char_boundary(index, s + len(needle))
        ]
        if hit := _pick(candidates, used):
            used.add(hit)
            return Span(pointer, value, hit[0], hit[1], "normalized")
    return Span(pointer, value, None, None, "missing")


def _on_char_boundary(index: list[int], position: int) -> bool:
    """Whether ``position`` in the normalized text does not split one original character."""
    inside = 0 < position < len(index)
    return not inside or index[position - 1] != index[position]


def missing_messages(spans: list[Span]) -> list[str]:
    """One feedback line per value that is not in the text."""
    return [
        f"{span.path or '/'}: {span.value!r} does not occur in the text; copy values exactly from the text"
        for span in spans
        if span.status == "missing"
    ]
