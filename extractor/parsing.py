"""Parse, repair (json-repair) and validate (jsonschema) one raw model output. Pure."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import json_repair
from jsonschema.protocols import Validator

from extractor.schema import join, node_at


@dataclass(frozen=True)
class Parsed:
    """The outcome of parsing one output: the value (if any), whether it was repaired, problems."""

    value: Any = None
    repaired: bool = False
    errors: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.errors


# json-repair is pure Python, linear but slow (about 3-5 us a character): past this size an
# output is not repaired (about 100 ms at the limit). A model window of 4,096 tokens holds
# about 16,000 characters of answer.
MAX_REPAIR_CHARS = 32_768
# Deeper than this is no extraction answer: refused before json.loads, json-repair or jsonschema
# recurse into it (each would otherwise meet Python's recursion limit, or the stack).
MAX_DEPTH = 64
# What json-repair makes of text that holds no JSON at all: never an answer.
_NOTHING: tuple[Any, ...] = ("", None, {}, [])


def parse(raw: str) -> Parsed:
    """``json.loads``; on failure, json-repair (flagged), within size and depth bounds. Never raises.

    An output that repairs to nothing (``""``, ``null``, ``{}``, ``[]``) from text that did not
    say so is an error, not a value: an empty answer must never pass as an empty object.
    """
    depth = nesting_depth(raw, limit=MAX_DEPTH)
    if depth > MAX_DEPTH:
        return Parsed(errors=(f"output nests more than {MAX_DEPTH} levels deep; answer with flat JSON",))
    try:
        return Parsed(value=json.loads(raw))
    except (json.JSONDecodeError, RecursionError) as error:
        if isinstance(error, json.JSONDecodeError) and _second_value(raw, error.pos):
            # Two answers: json-repair would pick one (or wrap both in a list); neither is the answer.
            return Parsed(errors=(f"output holds more than one JSON value (a second starts at {error.pos}); send one",))
        first = (
            f"output is not valid JSON ({error})"
            if isinstance(error, json.JSONDecodeError)
            else "output nests too deeply"
        )
    if len(raw) > MAX_REPAIR_CHARS:
        return Parsed(errors=(f"{first} and is too long to repair ({len(raw)} characters, over {MAX_REPAIR_CHARS})",))
    try:
        value = json_repair.loads(raw, skip_json_loads=True)
    except Exception:  # noqa: BLE001 - json-repair may fail in many ways; all mean "unrepairable"
        value = None
    if any(value == nothing and type(value) is type(nothing) for nothing in _NOTHING):
        return Parsed(errors=(first + " and could not be repaired",))
    return Parsed(value=value, repaired=True)


def _second_value(raw: str, at: int) -> bool:
    """Whether a complete JSON value ends before ``at`` and another one starts there."""
    return raw[at:].lstrip()[:1] in ("{", "[") and raw[:at].rstrip()[-1:] in ("}", "]")


def nesting_depth(raw: str, *, limit: int) -> int:
    """How deep ``[`` and ``{`` nest outside strings, counted up to ``limit + 1`` (then it stops)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in raw:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def validate(validator: Validator, value: Any) -> list[str]:
    """Every schema violation, each as ``<json pointer>: <message>``, in document order."""
    errors = sorted(validator.iter_errors(value), key=lambda e: _document_position(value, e.absolute_path))
    return [f"{join(e.absolute_path) or '/'}: {e.message}" for e in errors]


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


def drop_repeats(validator: Validator, value: Any) -> tuple[Any, list[str]]:
    """``value`` with each array its schema holds to ``uniqueItems`` keeping the first of equal items.

    No grammar backend keeps an array's items apart while decoding, and a small model that loops
    writes one item again word for word (a search request's one condition eight times). Items
    repeated are no information in an array whose schema says they are unique, so they are dropped
    rather than sent back for a re-ask, with a note for each array (``/conditions: 7 repeated items
    dropped (uniqueItems)``). Equal as JSON Schema compares (``1`` and ``1.0`` alike, ``true`` and
    ``1`` not). Returns ``value`` itself when nothing repeats.
    """
    notes: list[str] = []
    for _ in range(MAX_DEPTH):  # inner arrays first: dropping in one can make the items around it equal
        found = [e for e in validator.iter_errors(value) if e.validator == "uniqueItems"]
        if not found:
            break
        if not notes:
            value = copy.deepcopy(value)
        pointer = join(max(found, key=lambda e: len(e.absolute_path)).absolute_path)
        array = node_at(value, pointer)
        if not isinstance(array, list):
            break
        first: dict[str, Any] = {}
        for item in array:
            first.setdefault(_key(item), item)
        kept = list(first.values())
        if len(kept) == len(array):
            break
        notes.append(f"{pointer or '/'}: {len(array) - len(kept)} repeated items dropped (uniqueItems)")
        array[:] = kept
    return value, notes


def _key(item: Any) -> str:
    """One text per item JSON Schema calls equal: integral floats as integers, booleans apart."""

    def canon(x: Any) -> Any:
        if isinstance(x, float) and x.is_integer():
            return int(x)
        if isinstance(x, Mapping):
            return {k: canon(v) for k, v in x.items()}
        if isinstance(x, list):
            return [canon(v) for v in x]
        return x

    return json.dumps(canon(item), sort_keys=True)


def parse_and_validate(raw: str, validator: Validator) -> Parsed:
    """Parse (repairing when needed), then validate against the task schema."""
    parsed = parse(raw)
    if not parsed.ok:
        return parsed
    return Parsed(value=parsed.value, repaired=parsed.repaired, errors=tuple(validate(validator, parsed.value)))
