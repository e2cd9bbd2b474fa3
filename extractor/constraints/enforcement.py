"""Which keywords the grammar backend really enforces, asked of llguidance itself.

llguidance (vLLM's ``guidance`` backend, 1.7.6 here) compiles a JSON Schema into a grammar or
refuses it: a keyword it does not implement is an error ("Unimplemented keys: ["uniqueItems"]"),
never silently skipped, so vLLM would fail the request. Rather than keep a list that goes stale as
llguidance adds keywords (``patternProperties``, ``minProperties``, ``multipleOf``, draft-04
``items`` lists are enforced today), each task schema is compiled once at load:

- it compiles: every keyword is enforced while decoding;
- it does not: each subschema is compiled on its own (its children left free) to find which
  keyword, where, and why; those keywords are left out of what decoding sees and checked after
  generation only, with a load warning naming each, or, under a task's ``strict_enforcement``, the
  task is refused naming them. The refusals no one subschema shows (``oneOf`` branches that may
  overlap, keywords beside a recursive ``$ref``, property counts over properties an ``allOf``
  brings, a reference to a subschema no value satisfies) are met on the whole schema by
  :mod:`extractor.constraints.loosening`;
- no value satisfies it (llguidance's "Unsatisfiable schema", e.g. a required property with
  ``minimum`` over ``maximum``): ``unsatisfiable`` names the subschema, and the task is refused.

String formats llguidance does not know (``uri-reference``, ``regex``...) are left out of
decoding with a load warning rather than refused: ``format`` is an annotation unless a validator
opts in, and jsonschema's format checker still checks the ones it knows after generation.

Without llguidance installed (a remote engine's client), a fixed list measured on 1.7.6 is used.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from extractor.constraints import decoding
from extractor.constraints.loosening import UNSATISFIABLE, Unenforced, coerced, loosen, one_of_unproved
from extractor.constraints.substring import REFUSED_KEY, refusal
from extractor.schema import SUBSCHEMA_KEYS, types_of, walk

# The formats llguidance 1.7.6 compiles (any other is a compile error).
KNOWN_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri"})
# What llguidance 1.7.6 answers "Unimplemented keys" for (tests/test_enforcement.py asks it again).
UNIMPLEMENTED = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)
# Keywords that go together: leaving one out leaves out the others.
_TOGETHER = {
    "if": ("if", "then", "else"),
    "then": ("if", "then", "else"),
    "else": ("if", "then", "else"),
    "contains": ("contains", "minContains", "maxContains"),
    "minProperties": ("minProperties", "maxProperties"),
    "maxProperties": ("minProperties", "maxProperties"),
}
_MAP_KEYS = ("properties", "patternProperties", "dependentSchemas")
_LIST_KEYS = ("allOf", "anyOf", "prefixItems")
_ONE_KEYS = SUBSCHEMA_KEYS


@dataclass(frozen=True)
class Decodable:
    """A schema as decoding will see it, and what was left out of it."""

    schema: dict[str, Any]
    unenforced: tuple[Unenforced, ...] = ()
    formats: tuple[tuple[str, str], ...] = ()  # (pointer, format) left out of decoding
    error: str | None = None  # the backend cannot compile the schema even without those
    # Where no value satisfies the schema (llguidance's "Unsatisfiable schema"), the subschema to blame.
    unsatisfiable: str | None = None
    # (pointer, why) of each subschema no value satisfies, whose references are decoded as ``false``.
    impossible: tuple[tuple[str, str], ...] = ()


def check(schema: Mapping[str, Any]) -> Decodable:
    """``schema`` as llguidance can decode it: unknown formats and unenforced keywords left out.

    The result's ``unenforced`` lists what was left out (the caller refuses the task unless
    ``allow_unenforced``); ``error`` is set when llguidance still cannot compile what is left.
    """
    decodable = copy.deepcopy(dict(schema))
    decodable.pop(decoding.GUIDANCE, None)  # llguidance's options are ours to set, not the analyst's
    formats = _drop_unknown_formats(decodable)
    compile_error = _compiler()
    if compile_error is None:
        return Decodable(decodable, tuple(_static(decodable)), formats)
    if compile_error(decodable) is None:
        return Decodable(decodable, (), formats)
    found: list[Unenforced] = []
    unsatisfiable: list[str] = []  # pointers of subschemas no value satisfies (fine where optional)
    for pointer, node in list(walk(decodable)):
        assert isinstance(node, dict)
        if any(pointer.startswith(f.pointer + "/") for f in found):
            continue  # below a keyword already left out
        error = compile_error(_skeleton(node))
        if error is None:
            continue
        if error.startswith(UNSATISFIABLE):
            unsatisfiable.append(pointer)
            continue
        why = "llguidance does not implement it" if error.startswith("Unimplemented keys") else _short(error)
        for keyword in _blamed(error, node, compile_error):
            found.append(Unenforced(f"{pointer}/{keyword}", keyword, why))
            _leave_out(node, keyword)
    error = compile_error(decodable)
    if error is None:
        return Decodable(decodable, tuple(found), formats)
    loosened = loosen(decodable, error, compile_error)
    found += loosened.unenforced
    error = loosened.error
    if coerced(decodable):  # named where llguidance could not prove the branches disjoint
        found += one_of_unproved(decodable, compile_error, compiles=error is None)
    blamed = (unsatisfiable[0] if unsatisfiable else "#") if error and error.startswith(UNSATISFIABLE) else None
    return Decodable(decodable, tuple(found), formats, error and _short(error), blamed, loosened.impossible)


def _static(schema: Mapping[str, Any]) -> list[Unenforced]:
    # No llguidance to ask: the keywords 1.7.6 refuses, left out the same way.
    found = []
    for pointer, node in list(walk(schema)):
        for keyword in [k for k in node if k in UNIMPLEMENTED]:
            if keyword in node and isinstance(node, dict):
                found.append(Unenforced(f"{pointer}/{keyword}", keyword, "llguidance 1.7.6 does not implement it"))
                _leave_out(node, keyword)
    return found


def _leave_out(node: dict[str, Any], keyword: str) -> None:
    """``keyword`` (and those that go with it) out of ``node``; a lone ``not`` pattern kept for the grammar.

    The substring grammar of a grounded string can refuse what the pattern matches
    (:func:`extractor.constraints.substring.refusal`); the validator still checks it after generation.
    """
    refused = node.get("not") if keyword == "not" else None
    if isinstance(refused, Mapping) and set(refused) == {"pattern"} and _negatable(refused["pattern"]):
        node[REFUSED_KEY] = refused["pattern"]
    for key in _TOGETHER.get(keyword, (keyword,)):
        node.pop(key, None)


@functools.lru_cache(maxsize=256)
def _negatable(pattern: object) -> bool:
    """Whether llguidance compiles ``pattern`` as the substring grammar would negate it."""
    lexeme = refusal(pattern) if isinstance(pattern, str) else None
    if lexeme is None:
        return False
    try:
        import llguidance
    except ImportError:
        return False
    return not llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", f"start: X\nX: ~/{lexeme}/"))


def _drop_unknown_formats(schema: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    dropped = []
    for pointer, node in list(walk(schema)):
        value = node.get("format")
        if value is not None and value not in KNOWN_FORMATS and isinstance(node, dict):
            del node["format"]
            kinds = types_of(node)
            if not kinds or "string" in kinds:
                dropped.append((f"{pointer}/format", str(value)))
    return tuple(dropped)


def _skeleton(node: Mapping[str, Any]) -> dict[str, Any]:
    """``node``'s own keywords, its subschemas left free (``{}``) and refs dropped."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$ref", "$defs", "oneOf") or str(key).startswith("x-"):
            continue
        if key in _MAP_KEYS and isinstance(value, Mapping):
            out[key] = {name: {} for name in value}
        elif key in _LIST_KEYS and isinstance(value, list):
            out[key] = [{} for _ in value]
        elif key in _ONE_KEYS:
            out[key] = {}
        else:
            out[key] = value
    return out


def _blamed(error: str, node: Mapping[str, Any], compile_error: Callable[[Any], str | None]) -> list[str]:
    """The keywords of ``node`` that ``error`` is about."""
    listed = re.match(r"Unimplemented keys: (\[.*?\])", error)
    if listed:
        return [k for k in json.loads(listed.group(1)) if k in node]
    if "min/maxProperties" in error:
        return [k for k in ("minProperties", "maxProperties") if k in node][:1]
    if "patternPropert" in error:
        return ["patternProperties"]
    if "regex" in error:
        pattern = node.get("pattern")
        if isinstance(pattern, str) and compile_error({"type": "string", "pattern": pattern}):
            return ["pattern"]
        return ["patternProperties"] if "patternProperties" in node else ["pattern"]
    if "format" in error.lower() and "format" in node:
        return ["format"]
    return [next((k for k in node if not str(k).startswith("x-")), "type")]


def _short(error: str) -> str:
    return " ".join(error.split())[:200]


@functools.cache
def _compiler() -> Callable[[Any], str | None] | None:
    """The compile-and-validate of llguidance as vLLM calls it, or None without llguidance."""
    try:
        import llguidance
    except ImportError:
        return None

    def compile_error(schema: Any) -> str | None:
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(decoding.engine_schema(schema)), defaults={"whitespace_flexible": False}
            )
        except ValueError as error:
            return str(error)
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, None)
        return (messages[0] if messages else "invalid grammar") if is_error else None

    return compile_error
