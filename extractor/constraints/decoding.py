"""Task schema -> engine constraints. Pure: knows what each grammar backend cannot enforce.

vLLM's grammar backends compile a JSON Schema into a token mask, and both silently skip some
keywords: a schema using them would *look* enforced while the model is free to break it.
We find those keywords when a task loads, so an analyst hears about it before a user does.
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy as _data
from typing import Any

from extractor.config import GrammarBackend
from extractor.schema import walk
from extractor.schema.walkers import SCHEMA_MAP_KEYS

# Keywords neither backend turns into a mask (checked against vLLM's backend sources:
# vllm/v1/structured_output/backend_{xgrammar,guidance}.py and the libraries' docs).
_NEVER_ENFORCED = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "propertyNames",
        "$dynamicRef",
        "$recursiveRef",
    }
)
_XGRAMMAR_NOT_ENFORCED = _NEVER_ENFORCED | {"multipleOf", "patternProperties", "minProperties", "maxProperties"}
# llguidance (1.7.6) enforces patternProperties, min/maxProperties, multipleOf and draft-04 forms;
# the catalog asks llguidance itself (extractor.constraints.enforcement) and uses this list only
# through that module's fallback when llguidance is not installed.
_GUIDANCE_NOT_ENFORCED = _NEVER_ENFORCED
# String formats xgrammar turns into grammar; any other ``format`` is skipped.
_XGRAMMAR_FORMATS = frozenset(
    {
        "email",
        "date",
        "time",
        "date-time",
        "duration",
        "ipv4",
        "ipv6",
        "hostname",
        "uuid",
        "uri",
        "uri-reference",
        "uri-template",
    }
)

# llguidance's own options, read from the root of the schema it compiles: kept there, unlike our ``x-*`` keys.
GUIDANCE = "x-guidance"
# The longest string an answer is decoded to hold (far past any max_tokens): a larger maxLength is
# decoded as this, a tighter bound; a grammar's counted repetition stays compilable.
MAX_DECODED_LENGTH = 100_000
# Keywords whose values are instance data (copied as is), and maps keyed by property names.
_DATA_KEYS = frozenset({"const", "enum", "default", "examples"})
_NAME_MAP_KEYS = (*SCHEMA_MAP_KEYS, "dependentRequired")


def unenforced_keywords(schema: Mapping[str, Any], backend: GrammarBackend) -> list[tuple[str, str]]:
    """``(pointer, reason)`` for each keyword the backend would silently not enforce."""
    skipped = _XGRAMMAR_NOT_ENFORCED if backend == "xgrammar" else _GUIDANCE_NOT_ENFORCED
    found: list[tuple[str, str]] = []
    for pointer, sub in walk(schema):
        for key in sub:
            if key in skipped:
                found.append((f"{pointer}/{key}", f"{backend} does not enforce {key!r} while decoding"))
        if backend == "xgrammar":
            all_of = sub.get("allOf")
            if isinstance(all_of, list) and len(all_of) > 1:
                found.append((f"{pointer}/allOf", "xgrammar enforces only single-branch 'allOf'"))
            if "format" in sub and sub["format"] not in _XGRAMMAR_FORMATS:
                found.append((f"{pointer}/format", f"xgrammar does not enforce format {sub['format']!r}"))
            has_bounds = "minLength" in sub or "maxLength" in sub
            for key in ("pattern", "format"):
                if key in sub and has_bounds:
                    found.append((f"{pointer}/{key}", f"xgrammar ignores minLength/maxLength beside {key!r}"))
    return found


def engine_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema as sent to the grammar backend: our ``x-*`` annotations removed, llguidance's options kept.

    The options (``x-guidance`` at the root) are set at load (:mod:`extractor.constraints.loosening`):
    ``coerce_one_of`` where llguidance cannot prove a ``oneOf``'s branches disjoint.
    """
    stripped: dict[str, Any] = _strip(schema)
    options = schema.get(GUIDANCE)
    if isinstance(options, Mapping):
        stripped[GUIDANCE] = _data(dict(options))
    return stripped


def past_decoded_length(node: Mapping[str, Any]) -> int | float | None:
    """The ``maxLength`` of ``node`` where it is past what any answer holds (:data:`MAX_DECODED_LENGTH`), else None."""
    longest = node.get("maxLength")
    if isinstance(longest, int | float) and not isinstance(longest, bool) and longest > MAX_DECODED_LENGTH:
        return longest
    return None


def _shorter(node: Mapping[str, Any], names: bool) -> dict[str, Any]:
    """A ``maxLength`` past what any answer holds, decoded as :data:`MAX_DECODED_LENGTH` (a tighter bound)."""
    return {} if names or past_decoded_length(node) is None else {"maxLength": MAX_DECODED_LENGTH}


def _strip(node: Any, *, names: bool = False) -> Any:
    # ``names``: the keys are property or definition names, not keywords, so none is dropped.
    if isinstance(node, Mapping):
        return {
            k: _data(v) if not names and k in _DATA_KEYS else _strip(v, names=not names and k in _NAME_MAP_KEYS)
            for k, v in node.items()
            if names or not str(k).startswith("x-")
        } | _shorter(node, names)
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node
