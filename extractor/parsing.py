"""Parse, repair (json-repair) and validate (jsonschema) one raw model output. Pure."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import json_repair
from jsonschema.protocols import Validator


@dataclass(frozen=True)
class Parsed:
    """The outcome of parsing one output: the value (if any), whether it was repaired, problems."""

    value: Any = None
    repaired: bool = False
    errors: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.errors


def parse(raw: str) -> Parsed:
    """``json.loads``; on failure, json-repair (flagged). Never raises."""
    try:
        return Parsed(value=json.loads(raw))
    except (json.JSONDecodeError, RecursionError) as error:
        first = (
            f"output is not valid JSON ({error})"
            if isinstance(error, json.JSONDecodeError)
            else "output nests too deeply"
        )
    try:
        value = json_repair.loads(raw, skip_json_loads=True)
    except Exception:  # noqa: BLE001 - json-repair may fail in many ways; all mean "unrepairable"
        value = None
    if value in ("", None) and raw.strip() not in ("null", '""'):
        return Parsed(errors=(first + " and could not be repaired",))
    return Parsed(value=value, repaired=True)


def validate(validator: Validator, value: Any) -> list[str]:
    """Every schema violation, each as ``<json pointer>: <message>``, in document order."""
    errors = sorted(validator.iter_errors(value), key=lambda e: _document_position(value, e.absolute_path))
    return [f"{_pointer(list(e.absolute_path))}: {e.message}" for e in errors]


def _document_position(value: Any, path: Iterable[Any]) -> list[int]:
    # Where a path lies in the document: each step's key position (objects) or index (arrays).
    position: list[int] = []
    node = value
    for part in path:
        if isinstance(node, Mapping):
            keys = list(node)
            position.append(keys.index(part) if part in node else len(keys))
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            position.append(part)
            node = node[part]
        else:
            position.append(0)
            node = None
    return position


def _pointer(parts: list[Any]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts) if parts else "/"


def parse_and_validate(raw: str, validator: Validator) -> Parsed:
    """Parse (repairing when needed), then validate against the task schema."""
    parsed = parse(raw)
    if not parsed.ok:
        return parsed
    return Parsed(value=parsed.value, repaired=parsed.repaired, errors=tuple(validate(validator, parsed.value)))
