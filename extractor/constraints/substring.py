r"""Task schema -> llguidance Lark grammar whose grounded strings are substrings of the text. Pure.

The grammar spells out the JSON the model writes, compact (no whitespace), keys in the schema's
order. A grounded string field becomes ``"\\"" SUB "\\""`` where ``SUB`` is llguidance's
substring automaton over the text's chunks (``%regex {"substring_chunks": [...]}``), intersected
with the field's length bounds (at least one character). Chunks are runs of whitespace, runs of
word characters of spaced scripts, and single characters otherwise, each character of an
unspaced script (CJK, kana, Thai) on its own, so a value may start and end at any word (or CJK
character) boundary. Each chunk is JSON-escaped, so every concatenation is a valid JSON string
body that decodes to the text as written.

Every part of the schema without a grounded string below it is embedded as ``%json {...}``
and compiled by llguidance's own JSON Schema support. Objects and arrays holding grounded
strings are spelled out: properties in order, required and optional keys, ``maxItems`` and
``minItems``, ``null`` where the type allows it, ``anyOf`` as alternatives. Objects are written
closed (no keys beyond ``properties``): a narrowing, never a widening, of what validates.
Where a node holding grounded strings uses anything else (``oneOf``, ``allOf``,
``patternProperties``, ``prefixItems``...), :func:`translate` raises :class:`UntranslatableError`
and the caller keeps the older enum path. A grounded field with a ``pattern`` or ``format``
is decoded by its schema and grounded after generation (named in ``Grammar.posthoc``). A grounded
field's ``not: {"pattern": ...}`` (a learned shape's refused words, a hand-written list) is
intersected with its terminal as a negated lexeme (``& ~/.../``, llguidance's own operators) where
the pattern reads as one (no lookaround, anchor or backreference; ``\\b`` only around the whole
pattern): the model cannot write a refused value, so a re-ask need not meet it again.

Only the ``TEXT`` terminal depends on the text: :func:`skeleton` builds the rest once per schema
(a :class:`Skeleton`; :mod:`~extractor.constraints.grounded_decoding` keeps one per task schema),
and :meth:`Skeleton.grammar` adds the text's automaton per request.

The grammar is compiled for every request (by vLLM's engine core, on the host CPU, before the
request's first step), so it is kept small: a grounded value is written in place (no rule per
field), and a field's length bound is intersected only where a clause of the text is longer than
it (a substring is never longer than its clause; the trim rule already asks for one character).
On SNIPS that saved 6 % of llguidance's compile (2.59 against 2.76 ms), masks unchanged
(`python -m bench.grammar_cost`): most of a compile is llguidance's own cost of any Lark grammar
(its build step takes 1.1 ms for a bare ``%json`` object), against 0.7 ms for the schema alone.

With ``clauses_only=True`` (the default, setting ``grounded_clauses``) a value is a substring of
one clause: the text is cut after clause punctuation (``，。；：！？`` and ``; ! ?`` and ``.``
followed by a space, but for an initial's), so a value cannot run across ``，``. `bench/clauses.py` measured it: F1
0.441 -> 0.491 on a Chinese task, 0.599 -> 0.590 on SNIPS (within noise).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extractor.constraints import decoding
from extractor.grounding import split_unspaced
from extractor.schema import resolve, types_of
from extractor.values.fields import PHRASES_KEY

# One JSON string character as written: an escape or a character that needs none.
_JSON_CHAR = r'(\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4}|[^"\\\x00-\x1f])'
# A value neither starts nor ends with whitespace (or an escape), does not start with closing or
# clause punctuation, and does not end with opening punctuation or a comma: no " Paris", "?", ", in"
# or "Oslo (" as a value. One regex on the first and last character: a "holds a letter or digit"
# intersection said more but doubled the grammar's compile time and its per-token mask cost
# (`bench/grammar_mask.py`).
_TRIMMED = r"/[^\s\\,.;:!?)\]}。，、；：！？）」』】](.*[^\s\\(\[{,;:（「『【，、；：])?/"
_CHUNK = re.compile(r"\s+|\w+|.", re.S)
# A full stop ends a clause before a space, unless it ends an initial ("Kenneth M. Bate", "U.S. law").
_CLAUSE_END = re.compile(r"[，。；：！？;!?]+|(?<!\b[A-Z])\.(?=\s)")
# Where a string node keeps the ``not`` pattern decoding cannot enforce as a schema keyword
# (:mod:`extractor.constraints.enforcement` moves it here); the substring grammar negates it.
REFUSED_KEY = "x-refused"
# Keywords that describe a node without constraining it: ignored by the translation.
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "$id", "$schema", "$anchor", "deprecated"}
    | {"readOnly", "writeOnly", "$defs", "definitions"}
)
# llguidance's JSON options for embedded schemas: compact, as the engine writes JSON elsewhere.
_COMPACT = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"})
_ARRAY_KEYS = frozenset({"type", "items", "minItems", "maxItems", "uniqueItems"})


class UntranslatableError(Exception):
    """A node holding grounded strings uses a construct the grammar does not spell out."""

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(f"{pointer}: {reason}")
        self.pointer = pointer


@dataclass(frozen=True)
class Grammar:
    """A Lark grammar for one text, and the grounded fields it holds to the text."""

    lark: str
    fields: tuple[str, ...]  # schema pointers constrained to substrings while decoding
    posthoc: tuple[str, ...] = ()  # grounded fields decoded by their schema, checked after generation


def chunks(text: str) -> list[str]:
    """The text cut into whitespace runs, spaced-script words, and single other characters."""
    found: list[str] = []
    for match in _CHUNK.finditer(text):
        piece = match.group(0)
        found += [piece] if piece[0].isspace() else split_unspaced(piece)
    return found


def clauses(text: str) -> list[str]:
    """The text cut after each clause-ending punctuation run (the punctuation stays in its clause)."""
    pieces, start = [], 0
    for match in _CLAUSE_END.finditer(text):
        pieces.append(text[start : match.end()])
        start = match.end()
    pieces.append(text[start:])
    return [p for p in pieces if p.strip()]


def word_count(text: str) -> int:
    """Words as the substring automaton's size grows: spaced words plus unspaced characters."""
    return sum(1 for c in chunks(text) if not c.isspace())


def translate(
    schema: Mapping[str, Any], text: str, targets: Mapping[int, str], *, clauses_only: bool = True
) -> Grammar:
    """The grammar for ``text``; ``targets`` maps ``id(subschema)`` to the pointer of each grounded field.

    Raises:
        UntranslatableError: a node holding grounded fields uses a construct the grammar does not spell out.

    """
    return skeleton(schema, targets).grammar(text, clauses_only=clauses_only)


def skeleton(schema: Mapping[str, Any], targets: Mapping[int, str]) -> Skeleton:
    """The schema's part of every grammar for it: all but the text's substring automaton.

    Raises:
        UntranslatableError: a node holding grounded fields uses a construct the grammar does not spell out.

    """
    return _Translator(schema, targets).run()


@dataclass(frozen=True)
class PhraseRule:
    """A grounded field held to a list of the text's phrases (``x-phrases``: a typed value's evidence).

    Completed per text by :meth:`Skeleton.grammar`: one of the phrases, or null (where the field
    allows it); with no list for the text, the substring rule ``fallback``.
    """

    name: str  # the rule the field's value is written as
    pointer: str
    kind: str  # the kind of value the phrases state (a date, a duration, a number...)
    nullable: bool
    fallback: str  # the field's substring expression, without null


@dataclass(frozen=True)
class Skeleton:
    """A task schema's grammar without the text: built once per schema, completed per text by :meth:`grammar`."""

    rules: tuple[str, ...]  # ``start`` and the rules below it
    # each grounded terminal over ``TEXT``: name, min and max length, the regex its values must not match
    bounds: tuple[tuple[str, int, int | None, str | None], ...]
    fields: tuple[str, ...]
    posthoc: tuple[str, ...]
    phrase_rules: tuple[PhraseRule, ...] = ()

    def grammar(
        self, text: str, *, clauses_only: bool = True, phrases: Mapping[str, Sequence[str]] | None = None
    ) -> Grammar:
        """The grammar for ``text``: ``TEXT`` is the substring automaton of its chunks (of each clause's).

        ``phrases`` maps the pointer of each field of :attr:`phrase_rules` to the phrases of the
        text its value may be (empty: null only, where the field allows null); a field not in it
        is held to substrings of the text like any grounded string.
        """
        rules = [*self.rules, *(_phrase_rule(rule, (phrases or {}).get(rule.pointer)) for rule in self.phrase_rules)]
        used = [bound for bound in self.bounds if any(_uses(r, bound[0]) for r in rules)]
        if not used:
            return Grammar("\n".join(rules) + "\n", self.fields, self.posthoc)
        pieces = clauses(text) if clauses_only else [text]
        longest = max((len(p) for p in pieces), default=0)
        terminals = [_terminal(name, low, high, refused, longest) for name, low, high, refused in used]
        lines = [*rules, f"TEXT: {_substring(pieces)}", *terminals]
        return Grammar("\n".join(lines) + "\n", self.fields, self.posthoc)


def _phrase_rule(rule: PhraseRule, phrases: Sequence[str] | None) -> str:
    """``rule``'s definition for one text: one of ``phrases`` as a JSON string, null, or the substring fallback."""
    if phrases is None or (not phrases and not rule.nullable):
        body = rule.fallback
    elif phrases:
        body = " | ".join(_literal(json.dumps(p, ensure_ascii=False)) for p in dict.fromkeys(phrases))
    else:
        return f'{rule.name}: "null"'
    return f'{rule.name}: "null" | {body}' if rule.nullable else f"{rule.name}: {body}"


def _uses(rule: str, terminal: str) -> bool:
    return re.search(rf"\b{terminal}\b", rule.split(":", 1)[1]) is not None


def _terminal(name: str, low: int, high: int | None, refused: str | None, longest: int) -> str:
    """A grounded terminal: ``TEXT`` trimmed, bounded where a clause of ``longest`` characters could be too long.

    Never matching ``refused`` (a negated lexeme) where a ``not`` pattern gave one.
    """
    needed = low > 1 or (high is not None and high < longest)
    bound = f"{{{low},{high}}}" if high is not None else f"{{{low},}}"
    text = f"TEXT & ~/{refused}/" if refused is not None else "TEXT"
    return f"{name}: {text} & /{_JSON_CHAR}{bound}/ & {_TRIMMED}" if needed else f"{name}: {text} & {_TRIMMED}"


# What a ``not`` pattern may hold to be negated in the grammar: none of lookaround, anchors,
# backreferences, inline flags or a word boundary but the two around the whole pattern.
_UNNEGATABLE = re.compile(r"\\[bBAzZ1-9kpPu\\\"]|\(\?[=!<>imsx]|\^|\$|/|\"")
_WORD_CHARS = "A-Za-z0-9_"
# The longest pattern negated: past it llguidance's lexer may run out of fuel on a contract's passage
# (a 419-character alternation failed on 14 of 40 Kleister passages, 272 characters on none).
MAX_NEGATED = 300


@functools.lru_cache(maxsize=256)
def refusal(pattern: str) -> str | None:
    r"""The lexeme regex a grounded string's values must not match: a ``not`` pattern, searched anywhere.

    ``\b(?:a|b)\b`` (a learned shape's words) reads as the words between non-word characters
    or the value's ends; None where the pattern is not one the grammar can negate.
    """
    bounded = pattern.startswith("\\b") and pattern.endswith("\\b") and len(pattern) > 4
    inner = pattern[2:-2] if bounded else pattern
    if not inner or len(inner) > MAX_NEGATED or _UNNEGATABLE.search(inner):
        return None
    try:
        re.compile(inner)
    except re.error:
        return None
    if bounded:
        return f"(.*[^{_WORD_CHARS}])?({inner})([^{_WORD_CHARS}].*)?"
    return f".*({inner}).*"


def _substring(pieces: Sequence[str]) -> str:
    automata = []
    for piece in pieces:
        escaped = [json.dumps(c, ensure_ascii=False)[1:-1] for c in chunks(piece)]
        automata.append('%regex {"substring_chunks": ' + json.dumps(escaped, ensure_ascii=False) + "}")
    return " | ".join(automata) if automata else '""'


@dataclass
class _Translator:
    schema: Mapping[str, Any]
    targets: Mapping[int, str]
    names: dict[int, str] = field(default_factory=dict)  # id(node) -> its rule's name
    bodies: dict[str, str] = field(default_factory=dict)  # rule name -> body, in definition order
    terminals: dict[tuple[int, int | None, str | None], str] = field(default_factory=dict)
    fields: list[str] = field(default_factory=list)
    posthoc: list[str] = field(default_factory=list)
    phrase_rules: dict[int, PhraseRule] = field(default_factory=dict)  # id(node) -> its rule
    _holds: dict[int, bool] = field(default_factory=dict)

    def run(self) -> Skeleton:
        top = self.rule(self.schema, "#")
        rules = [f"start: {top}"] + [f"{name}: {body}" for name, body in self.bodies.items()]
        bounds = tuple((name, *key) for key, name in self.terminals.items())
        fields, posthoc = tuple(sorted(set(self.fields))), tuple(sorted(set(self.posthoc)))
        return Skeleton(tuple(rules), bounds, fields, posthoc, tuple(self.phrase_rules.values()))

    # -- nodes --------------------------------------------------------------------------------

    def rule(self, node: Any, pointer: str) -> str:
        """A rule name for ``node`` (defined once, so shared and recursive refs work); a grounded value in place."""
        if not isinstance(node, Mapping):
            return self.json(node)
        if id(node) in self.targets and "pattern" not in node and "format" not in node:
            value = self.string(node, pointer)
            return f"({value})" if "|" in value else value
        if id(node) in self.names:
            return self.names[id(node)]
        name = self.names[id(node)] = f"n{len(self.names)}"
        self.bodies[name] = self.expression(node, pointer)
        return name

    def expression(self, node: Mapping[str, Any], pointer: str) -> str:
        if not self.holds(node):
            return self.json(node)
        if id(node) in self.targets:
            return self.string(node, pointer)
        if isinstance(node.get("$ref"), str):
            self.only(node, {"$ref"}, pointer)
            return self.rule(resolve(self.schema, node["$ref"]), node["$ref"])
        if "anyOf" in node:
            self.only(node, {"anyOf"}, pointer)
            branches = [self.rule(b, f"{pointer}/anyOf/{i}") for i, b in enumerate(node["anyOf"])]
            return " | ".join(branches)
        kinds = types_of(node)
        if "properties" in node or kinds & {"object"}:
            return self.nullable(self.object(node, pointer), kinds)
        if "items" in node or kinds & {"array"}:
            return self.nullable(self.array(node, pointer), kinds)
        used = sorted(k for k in node if k not in _ANNOTATIONS and not str(k).startswith("x-")) or ["no type"]
        raise UntranslatableError(pointer, f"{', '.join(used)} beside grounded fields")

    def string(self, node: Mapping[str, Any], pointer: str) -> str:
        if "pattern" in node or "format" in node:
            self.posthoc.append(self.targets[id(node)])
            return self.json(node)
        self.fields.append(self.targets[id(node)])
        low = max(1, int(node.get("minLength", 0)))
        high = node.get("maxLength")
        refused = node.get(REFUSED_KEY)
        key = (low, int(high) if high is not None else None, refusal(refused) if isinstance(refused, str) else None)
        name = self.terminals.setdefault(key, f"SUB{len(self.terminals)}")
        quoted = f'"\\"" {name} "\\""'
        kind = node.get(PHRASES_KEY)
        if isinstance(kind, str):  # a typed value's evidence: one of the text's phrases of its kind
            rule = self.phrase_rules.get(id(node))
            if rule is None:
                nullable = "null" in types_of(node)
                rule = PhraseRule(f"ph{len(self.phrase_rules)}", self.targets[id(node)], kind, nullable, quoted)
                self.phrase_rules[id(node)] = rule
            return rule.name
        return self.nullable(quoted, types_of(node))

    def object(self, node: Mapping[str, Any], pointer: str) -> str:
        self.only(node, _OBJECT_KEYS, pointer)
        properties = node.get("properties") or {}
        required = set(node.get("required") or [])
        missing = required - set(properties)
        if missing:
            raise UntranslatableError(pointer, f"required key(s) {sorted(missing)} without a property schema")
        members = [
            (_literal(json.dumps(str(name), ensure_ascii=False) + ":"), self.rule(sub, f"{pointer}/properties/{name}"))
            for name, sub in properties.items()
        ]
        flags = [name in required for name in properties]
        return '"{" ' + self.members(members, flags) + ' "}"'

    def members(self, members: Sequence[tuple[str, str]], required: Sequence[bool]) -> str:
        """Keys in order, optional ones skippable, commas only between members present."""
        if all(required):
            return ' "," '.join(f"{key} {value}" for key, value in members) or '""'
        # rest(i, first): the members from i on; ``first`` when none was written yet.
        names: dict[tuple[int, bool], str] = {}

        def rest(i: int, first: bool) -> str:
            if i == len(members):
                return '""'
            if (i, first) in names:
                return names[(i, first)]
            key, value = members[i]
            comma = "" if first else '"," '
            here = f"{comma}{key} {value} {rest(i + 1, False)}"
            body = here if required[i] else f"({here}) | {rest(i + 1, first)}"
            name = names[(i, first)] = f"m{len(self.bodies)}"
            self.bodies[name] = body
            return name

        return rest(0, True)

    def array(self, node: Mapping[str, Any], pointer: str) -> str:
        self.only(node, _ARRAY_KEYS, pointer)
        item = self.rule(node.get("items", {}), f"{pointer}/items")
        low, high = int(node.get("minItems", 0)), node.get("maxItems")
        if high is not None and int(high) == 0:
            return '"[]"'
        more = f'("," {item})' + (
            f"{{{max(0, low - 1)},{int(high) - 1}}}" if high is not None else f"{{{max(0, low - 1)},}}"
        )
        body = f"{item} {more}"
        return f'"[" {body} "]"' if low > 0 else f'"[" ({body})? "]"'

    def nullable(self, expression: str, kinds: set[str]) -> str:
        return f'"null" | {expression}' if "null" in kinds else expression

    def only(self, node: Mapping[str, Any], allowed: frozenset[str] | set[str], pointer: str) -> None:
        extra = sorted(k for k in node if k not in allowed and k not in _ANNOTATIONS and not str(k).startswith("x-"))
        if extra:
            raise UntranslatableError(pointer, f"{', '.join(extra)} beside grounded fields")

    def json(self, node: Any) -> str:
        """Any value of ``node`` (the root's ``$defs`` carried along for its refs), compact."""
        if node is True:
            node = {}
        if not isinstance(node, Mapping):
            raise UntranslatableError("#", f"schema {node!r} admits no value")
        embedded: Any = decoding.engine_schema(node)
        if isinstance(embedded, dict):
            for key in ("$defs", "definitions"):
                if key in self.schema and key not in embedded:
                    embedded[key] = decoding.engine_schema(self.schema[key])
            # the root's options (coerce_one_of) hold for every embedded part of it
            options = self.schema.get(decoding.GUIDANCE)
            embedded[decoding.GUIDANCE] = {**(options if isinstance(options, Mapping) else {}), **_COMPACT}
        return "%json " + json.dumps(embedded, ensure_ascii=False, separators=(",", ":"))

    def holds(self, node: Any, seen: frozenset[int] = frozenset()) -> bool:
        """Whether ``node`` or anything below it is a grounded field."""
        if not isinstance(node, Mapping) or id(node) in seen:
            return False
        if self._holds.get(id(node)):
            return True
        seen = seen | {id(node)}
        found = id(node) in self.targets
        children: list[Any] = []
        if isinstance(node.get("$ref"), str):
            children.append(resolve(self.schema, node["$ref"]))
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            children += list(node.get(key) or [])
        children += list((node.get("properties") or {}).values())
        children += [node.get("items"), node.get("additionalProperties")]
        found = found or any(self.holds(child, seen) for child in children)
        if found:  # a False under a cycle cut may be partial: only True is cached
            self._holds[id(node)] = True
        return found


def _literal(text: str) -> str:
    """A Lark string literal matching ``text`` exactly."""
    return json.dumps(text, ensure_ascii=False)
