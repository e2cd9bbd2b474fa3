"""Grounded decoding: constrain extractive string fields to spans of the input text. Pure.

Post-hoc grounding finds an invented value after the model wrote it; grounded decoding makes
inventing impossible. For one request, :func:`constrain` picks, in this order:

1. **grammar** (:mod:`extractor.constraints.substring`): the schema as a Lark grammar in which
   each grounded string field is a substring of the text (llguidance's suffix automaton: a few
   ms to compile, linear in the text). Texts up to ``max_words`` words (a setting; past it a
   large-vocabulary tokenizer makes llguidance fail silently) are grounded while decoding;
2. **enum**, where the schema holds grounded fields under constructs the grammar does not spell
   out (``oneOf``, ``allOf``...): each extractive field's subschema replaced by an ``enum`` of
   candidate spans (up to :data:`MAX_CANDIDATES`, about 170 words);
3. **posthoc**: past both, decoding follows the task schema and grounding is checked after
   generation. The result says which one ran (``result.grounded_decoding``) and why.

Enum candidates are the text's runs of 1 to :data:`MAX_UNITS` units, where a unit is a word of a
spaced script (a whitespace-free run), one character of an unspaced script (CJK, Thai...) or one
punctuation mark of those; each run is offered as written and with its edge punctuation stripped
(``2nd, 2037?`` and ``2nd, 2037``). A field keeps the candidates that satisfy its ``minLength``,
``maxLength`` (default :data:`MAX_CHARS`) and ``pattern``.

A schema's grounded fields and its grammar skeleton are worked out once per schema object and
remembered (a task's schema is never changed in place; a reload makes new ones): per request only
the text's part is built.

Which fields: a string subschema (``type`` string, or string and null; no ``enum``/``const``)
marked ``"x-extractive": true``; with the task setting ``"grounded_decoding": true`` (or the
request option), every string subschema whose value is grounded (not under ``"x-grounded":
false``) unless marked ``"x-extractive": false``. A subschema reached both from grounded and
ungrounded places (a shared ``$ref``) is left alone.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from extractor.constraints import decoding, patterns, substring
from extractor.grounding import is_unspaced
from extractor.schema import escape, resolve, types_of, walk
from extractor.values.fields import PHRASES_KEY

MAX_UNITS = 12
MAX_CHARS = 64
MAX_CANDIDATES = 2000
# Substring grammars past this many words go unconstrained (llguidance's default parser fuel,
# 131k-token vocabulary: generation fails silently past ~6,000 words). See `bench/grounded_grammar.py`.
MAX_WORDS = 5000
Mode = Literal["grammar", "enum", "posthoc"]
# ``(field pointer, kind) -> the phrases of the text`` a typed value's evidence may be (None: any span).
Phrases = Callable[[str, str], Sequence[str] | None]
_UNIT = re.compile(r"\s+")


@dataclass(frozen=True)
class Constrained:
    """What one request is decoded under, and the schema pointers of the fields held to the text.

    Exactly one of ``grammar`` (mode ``grammar``) and ``schema`` (mode ``enum``) is set; mode
    ``posthoc`` sets neither (the task schema applies). ``note`` says why a weaker mode ran.
    """

    fields: tuple[str, ...]
    mode: Mode
    schema: dict[str, Any] | None = None
    grammar: str | None = None
    note: str | None = None
    # (schema pointer, kind) of each typed value held to the text's phrases of its kind where the text
    # has none: null is all it may be, or, where it may not be null, the substring rule's guess
    unstated: tuple[tuple[str, str], ...] = ()


def extractive_nodes(schema: Mapping[str, Any], *, everywhere: bool) -> dict[int, str]:
    """``id(subschema) -> pointer`` of the string subschemas to constrain.

    Args:
        schema: The task schema, ``x-*`` annotations included.
        everywhere: Constrain every grounded string subschema (task setting or request option),
            not only those marked ``"x-extractive": true``.

    """
    grounded: dict[int, str] = {}
    ungrounded: set[int] = set()
    seen: set[tuple[int, bool]] = set()

    def visit(node: Any, pointer: str, free: bool, depth: int) -> None:
        # ``free``: the value here need not occur in the text (under "x-grounded": false).
        if not isinstance(node, Mapping) or depth > 64 or (id(node), free) in seen:
            return
        seen.add((id(node), free))
        free = free or node.get("x-grounded") is False
        if _is_string_node(node):
            marked = node.get("x-extractive")
            if free:
                ungrounded.add(id(node))
            elif marked is True or (everywhere and marked is not False):
                grounded[id(node)] = pointer
        ref = node.get("$ref")
        if isinstance(ref, str):
            visit(resolve(schema, ref), ref, free, depth + 1)
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            for index, branch in enumerate(node.get(key) or []):
                visit(branch, f"{pointer}/{key}/{index}", free, depth + 1)
        for name, child in (node.get("properties") or {}).items():
            visit(child, f"{pointer}/properties/{escape(str(name))}", free, depth + 1)
        for key in ("items", "additionalProperties"):
            visit(node.get(key), f"{pointer}/{key}", free, depth + 1)

    visit(schema, "#", False, 0)
    return {key: pointer for key, pointer in grounded.items() if key not in ungrounded}


def check(schema: Mapping[str, Any]) -> list[str]:
    """Warnings for ``"x-extractive": true`` on subschemas that cannot be constrained to spans."""
    return [
        f"{pointer}/x-extractive: only string fields (type string, or string and null, without enum/const) "
        "can be constrained to spans of the text; ignored here"
        for pointer, sub in walk(schema)
        if sub.get("x-extractive") is True and not _is_string_node(sub)
    ]


def candidates(
    text: str, *, max_units: int = MAX_UNITS, max_chars: int = MAX_CHARS, limit: int | None = None
) -> list[str]:
    """Every run of 1..``max_units`` units of ``text`` (as written and edge-stripped), in text order.

    With ``limit``, stops once more than ``limit`` are found (the caller falls back anyway).
    """
    units = list(_units(text))
    found: dict[str, None] = {}
    for i, (start, _) in enumerate(units):
        for _, end in units[i : i + max_units]:
            if end - start > max_chars:
                break
            raw = text[start:end]
            stripped = _strip_punctuation(raw)
            if stripped:  # punctuation alone is no value
                found.setdefault(raw)
                found.setdefault(stripped)
        if limit is not None and len(found) > limit:
            break
    return list(found)


def constrain(
    schema: Mapping[str, Any],
    text: str,
    *,
    everywhere: bool,
    max_words: int = MAX_WORDS,
    clauses: bool = True,
    max_candidates: int = MAX_CANDIDATES,
    grammar: bool = True,
    phrases: Phrases | None = None,
) -> Constrained | None:
    """How to decode ``text`` so that its extractive fields stay in it (None: no field is extractive).

    Args:
        schema: The task schema, ``x-*`` annotations included.
        text: The text (or chunk) the request reads.
        everywhere: Every grounded string field, not only those marked ``"x-extractive": true``.
        max_words: Past this many words the grammar is not used (post-hoc check instead).
        clauses: Hold each value to one clause of the text (no value across ``，`` or ``;``).
        max_candidates: The enum path's bound on candidate spans.
        grammar: The engine reads llguidance's Lark (the guidance backend); False: the enum of spans.
        phrases: ``(pointer, kind) -> the phrases of the text`` a typed value's evidence (a field
            marked ``x-phrases``) may be, or None to hold it to any span like other grounded strings.

    """
    targets, planned = _plan(schema, everywhere)
    if not targets:
        return None
    words = substring.word_count(text)
    if words > max_words:
        return Constrained(
            (), "posthoc", note=f"the text has {words} words, past the grounded-decoding limit of {max_words}"
        )
    if not grammar:
        return without_grammar(
            schema,
            text,
            everywhere=everywhere,
            why="the grammar backend is not guidance, which alone reads the substring grammar",
            max_candidates=max_candidates,
            phrases=phrases,
        )
    if isinstance(planned, substring.UntranslatableError):
        return without_grammar(
            schema,
            text,
            everywhere=everywhere,
            why=f"the grammar cannot spell out {planned}",
            max_candidates=max_candidates,
            phrases=phrases,
        )
    listed = {r.pointer: phrases(r.pointer, r.kind) for r in planned.phrase_rules} if phrases is not None else {}
    lark = planned.grammar(text, clauses_only=clauses, phrases={k: v for k, v in listed.items() if v is not None})
    note = None
    if lark.posthoc:
        note = f"checked after generation (pattern or format): {', '.join(lark.posthoc)}"
    unstated = tuple(
        (r.pointer, r.kind) for r in planned.phrase_rules if listed.get(r.pointer) is not None and not listed[r.pointer]
    )
    return Constrained(lark.fields, "grammar", grammar=lark.lark, note=note, unstated=unstated)


# (id(schema), everywhere) -> (the schema, kept so that its id is not reused; its grounded fields;
# its grammar skeleton, or why it has none). A schema is never changed once loaded (a reload makes new ones).
_PLANS: dict[tuple[int, bool], tuple[Mapping[str, Any], dict[int, str], Any]] = {}
_PLANS_KEPT = 256


def _plan(
    schema: Mapping[str, Any], everywhere: bool
) -> tuple[dict[int, str], substring.Skeleton | substring.UntranslatableError]:
    """A schema's grounded fields and grammar skeleton, worked out once per schema object, not per request."""
    key = (id(schema), everywhere)
    found = _PLANS.get(key)
    if found is not None and found[0] is schema:
        return found[1], found[2]
    targets = extractive_nodes(schema, everywhere=everywhere)
    planned: substring.Skeleton | substring.UntranslatableError
    try:
        planned = substring.skeleton(schema, targets) if targets else substring.UntranslatableError("#", "no field")
    except substring.UntranslatableError as error:
        planned = error
    if len(_PLANS) >= _PLANS_KEPT:
        _PLANS.pop(next(iter(_PLANS)))
    _PLANS[key] = (schema, targets, planned)
    return targets, planned


def without_grammar(
    schema: Mapping[str, Any],
    text: str,
    *,
    everywhere: bool,
    why: str,
    max_candidates: int = MAX_CANDIDATES,
    phrases: Phrases | None = None,
) -> Constrained:
    """The next best thing to the grammar: the enum of spans, else a post-hoc check; ``why`` goes in the note."""
    targets = extractive_nodes(schema, everywhere=everywhere)
    enum = enum_constrain(schema, text, targets, max_candidates=max_candidates, phrases=phrases)
    if enum is None:
        return Constrained((), "posthoc", note=f"{why}; the text has too many spans for an enum: checked after")
    return Constrained(enum.fields, "enum", schema=enum.schema, note=f"{why}; an enum of spans was used")


def enum_constrain(
    schema: Mapping[str, Any],
    text: str,
    targets: Mapping[int, str],
    *,
    max_candidates: int = MAX_CANDIDATES,
    phrases: Phrases | None = None,
) -> Constrained | None:
    """The engine schema for one text, extractive fields turned into enums of its spans.

    A typed value's evidence (``x-phrases``) is an enum of the phrases ``phrases`` lists for it.
    Returns None when the text has more than ``max_candidates`` candidate spans, or no field
    could be turned into an enum.
    """
    pool = candidates(text, limit=max_candidates)
    if len(pool) > max_candidates:
        return None
    changed: list[str] = []

    def rebuild(node: Any, names: bool = False) -> Any:
        if isinstance(node, Mapping):
            if not names and id(node) in targets:
                kind = node.get(PHRASES_KEY)
                listed = phrases(targets[id(node)], kind) if phrases is not None and isinstance(kind, str) else None
                held = listed is not None and (bool(listed) or "null" in types_of(node))  # none, not nullable: any span
                replaced = _enum_node(node, list(listed) if listed is not None and held else pool)
                if replaced is not None:
                    changed.append(targets[id(node)])
                    return replaced
            return {k: rebuild(v, not names and k in _NAME_MAPS) if k not in _DATA else v for k, v in node.items()}
        if isinstance(node, list):
            return [rebuild(v) for v in node]
        return node

    rebuilt = rebuild(schema)
    if not changed:
        return None
    return Constrained(tuple(sorted(set(changed))), "enum", schema=decoding.engine_schema(rebuilt))


_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"})
_DATA = frozenset({"enum", "const", "default", "examples"})


def _enum_node(node: Mapping[str, Any], pool: list[str]) -> dict[str, Any] | None:
    low = node.get("minLength", 0)
    high = node.get("maxLength", MAX_CHARS)
    pattern = node.get("pattern")
    if isinstance(pattern, str) and patterns.problem(pattern) is not None:
        return None  # a pattern RE2 cannot run in linear time: leave the field to post-hoc checking
    allowed = [
        c for c in pool if low <= len(c) <= high and (not isinstance(pattern, str) or patterns.search(pattern, c))
    ]  # RE2, as validation: a backtracking pattern ("^(a+)+$") stays linear in the candidate's length
    nullable = "null" in types_of(node)
    if not allowed and not nullable:
        return None
    kept = {k: v for k, v in node.items() if k not in _STRING_KEYWORDS}
    kept["enum"] = [*allowed, None] if nullable else allowed
    return kept


_STRING_KEYWORDS = frozenset({"type", "minLength", "maxLength", "pattern", "format", "x-extractive"})


def _is_string_node(node: Mapping[str, Any]) -> bool:
    kinds = types_of(node)
    return "string" in kinds and kinds <= {"string", "null"} and "enum" not in node and "const" not in node


def _units(text: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each unit: a spaced-script word, or one unspaced-script character or mark."""
    position = 0
    for gap in (*_UNIT.finditer(text), None):
        stop = gap.start() if gap is not None else len(text)
        yield from _split_word(text, position, stop)
        if gap is not None:
            position = gap.end()


def _split_word(text: str, start: int, stop: int) -> Iterator[tuple[int, int]]:
    run = start
    for i in range(start, stop):
        char = text[i]
        beside_unspaced = (i > start and is_unspaced(text[i - 1])) or (i + 1 < stop and is_unspaced(text[i + 1]))
        single = is_unspaced(char) or (_is_mark(char) and (_wide(char) or beside_unspaced))
        if single and not unicodedata.combining(char):
            if run < i:
                yield run, i
            end = i + 1
            while end < stop and unicodedata.combining(text[end]):
                end += 1
            yield i, end
            run = end
    if run < stop:
        yield run, stop


def _is_mark(char: str) -> bool:
    return unicodedata.category(char)[0] == "P"


def _wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def _strip_punctuation(value: str) -> str:
    start, end = 0, len(value)
    while start < end and _is_mark(value[start]):
        start += 1
    while end > start and _is_mark(value[end - 1]):
        end -= 1
    return value[start:end]
