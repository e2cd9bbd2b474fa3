"""A top level that is not an object: wrapped in one for decoding, unwrapped in the result.

The pipeline decodes, grounds and merges objects (the prompt lists their fields, the grammar starts
with ``{``), so a schema whose top level is an array, a scalar or an ``anyOf`` is decoded as
``{"value": <the schema>}``; the result's ``data`` is then the wrapped value again, spans and typed
results included, so ``data`` is what the analyst's schema describes.

A top level that is plainly an object stays as it is: ``"type": "object"``, or object keywords
(``properties``, ``required``...) with no ``type`` (decoded as an object: every output is still
valid against the schema). A top level that is only a ``$ref`` is replaced by what it points to.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import referencing
import referencing.jsonschema
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator

from extractor.constraints import patterns
from extractor.constraints.drafts import Draft
from extractor.schema import unescape

KEY = "value"
_OBJECT_KEYWORDS = ("properties", "required", "additionalProperties", "patternProperties", "minProperties")
_ALTERNATIVES = ("anyOf", "oneOf", "allOf", "enum", "const", "not", "if")
_TOP_ONLY = ("$schema", "$defs", "x-extractor")
_SOURCE = "urn:extractor:schema"
_REF_ROOT_KEYS = frozenset({"$ref", "$schema", "$defs", "title", "description", "$comment"})


@dataclass(frozen=True)
class Shaped:
    """A translated schema with an object top level."""

    schema: dict[str, Any]
    key: str | None  # the wrapping property (None: not wrapped)
    root_from: str | None = None  # the ``$defs`` entry the top level was taken from (a top-level ``$ref``)

    def origin(self, pointer: str) -> str:
        """Where a pointer into :attr:`schema` points in the schema before shaping."""
        if pointer.startswith("#/$defs/") or pointer == "#/$defs":
            return pointer
        if self.key is not None:
            prefix = f"#/properties/{self.key}"
            if pointer != prefix and not pointer.startswith(prefix + "/"):
                return "#"
            pointer = "#" + pointer[len(prefix) :]
        if self.root_from is not None:
            return self.root_from + pointer[1:]
        return pointer


def shape(schema: Mapping[str, Any]) -> Shaped:
    """The translated (2020-12) schema with an object top level: as it is, dereferenced or wrapped."""
    root, root_from = _dereference_root(dict(schema))
    declared = root.get("type")
    if declared == "object":
        return Shaped(root, None, root_from)
    if declared is None and any(k in root for k in _OBJECT_KEYWORDS) and not any(k in root for k in _ALTERNATIVES):
        return Shaped({**root, "type": "object"}, None, root_from)
    return Shaped(_wrap(root), KEY, root_from)


def _dereference_root(root: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    # ``{"$ref": "#/$defs/Config", "$defs": {...}}``: the top level is Config (its fields, its title).
    ref = root.get("$ref")
    defs = root.get("$defs")
    if not isinstance(ref, str) or not ref.startswith("#/$defs/") or not isinstance(defs, Mapping):
        return root, None
    if any(k not in _REF_ROOT_KEYS and not k.startswith("x-") for k in root):
        return root, None
    target = defs.get(unescape(ref[len("#/$defs/") :]))
    if not isinstance(target, Mapping) or "$defs" in target:
        return root, None
    out = {k: v for k, v in root.items() if k != "$ref"}
    for key, value in target.items():
        out.setdefault(key, copy.deepcopy(value))
    return out, ref


def _wrap(root: dict[str, Any]) -> dict[str, Any]:
    inner = _rebase({k: v for k, v in root.items() if k not in _TOP_ONLY})
    wrapper: dict[str, Any] = {
        k: root[k] for k in ("$schema", "title", "description", "x-extractor", "$defs") if k in root
    }
    wrapper["$defs"] = _rebase(wrapper.get("$defs", {}))
    if not wrapper["$defs"]:
        del wrapper["$defs"]
    wrapper.update(type="object", properties={KEY: inner}, required=[KEY], additionalProperties=False)
    return wrapper


def _rebase(node: Any) -> Any:
    # Refs into the old top level now go through the wrapper's property (``$defs`` stay on top).
    if isinstance(node, list):
        return [_rebase(v) for v in node]
    if not isinstance(node, Mapping):
        return node
    out = {k: (v if k in ("const", "enum", "default", "examples") else _rebase(v)) for k, v in node.items()}
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith("#") and not ref.startswith("#/$defs/"):
        out["$ref"] = f"#/properties/{KEY}{ref[1:]}"
    return out


def unwrap(data: Any, key: str | None) -> Any:
    """The value the analyst's schema describes (``data`` itself when not wrapped)."""
    return data.get(key) if key is not None and isinstance(data, Mapping) else data


def unwrap_pointer(pointer: str, key: str | None) -> str:
    """A JSON pointer into the wrapped data as a pointer into the unwrapped one."""
    if key is None:
        return pointer
    prefix = f"/{key}"
    if pointer == prefix:
        return ""
    return pointer[len(prefix) :] if pointer.startswith(prefix + "/") else pointer


def validator(source: Mapping[str, Any], draft: Draft, key: str | None) -> Validator:
    """A validator of outputs as decoded: ``source`` checked by its own draft (under ``key`` when wrapped).

    ``pattern``, ``patternProperties`` and format ``regex`` run on RE2 (:mod:`extractor.constraints.patterns`):
    linear time, so no output can make validation backtrack for minutes.
    """
    cls = patterns.linear_time(draft.validator)
    checker = patterns.format_checker(draft.validator.FORMAT_CHECKER)
    if key is None:
        return cls(source, format_checker=checker)
    contents = {**source, "$schema": draft.uri}  # follow the ref into the draft's own rules
    resource = referencing.jsonschema.specification_with(draft.uri).create_resource(contents)
    uri = resource.id() or _SOURCE
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(uri, resource)
    outer = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {key: {"$ref": uri}},
        "required": [key],
        "additionalProperties": False,
    }
    return patterns.linear_time(Draft202012Validator)(outer, registry=registry, format_checker=checker)
