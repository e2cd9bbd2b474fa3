"""The phrases of a text that state a value of a field's kind: what a typed field's evidence may be.

A 135M model asked to copy "the words that state the date" out of "The lease starts on May 20,
2014, runs for two (2) years and costs 1,200 dollars a month." copies "2014, runs for two (2) years
and costs…", and copies it again when re-asked. The service already reads each kind (dates in
200+ languages, durations, amounts and numbers in words and digits, Chinese forms): it finds the
phrases of the text that read as the field's kind (:func:`phrases`), and grounded decoding holds
the field's evidence to one of them, or null (:mod:`extractor.constraints.substring`). A field of
readings (a union: any words may be its value) has no such list.

Evidence written without that hold (a remote engine, a schema the grammar cannot spell out) is
fitted afterwards (:func:`fit`): widened to the phrase holding words cut short, narrowed to the
phrase that words running past it start in or hold.

Pure: no I/O, no engine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from extractor.values import evidence
from extractor.values.context import Context, EvidenceError
from extractor.values.fields import EVIDENCE_MAX_CHARS, KIND_READINGS, NUMBERS, ValueField
from extractor.values.normalize import normalize

# An absolute date (a four-digit year in it): the numbers and durations inside it ("20", "2014年")
# are parts of the date, not phrases of their own.
_YEAR = re.compile(r"\d{4}")


def spans(
    text: str, value_field: ValueField, ctx: Context | None = None, *, within: tuple[int, int] | None = None
) -> list[tuple[int, int]]:
    """``(start, end)`` of each phrase of ``text`` that reads as a value of the field's kind, in reading order.

    Empty for a field of readings (any words may be its value: no list holds them). ``within``:
    only the phrases overlapping those offsets (the others are not read). Reading them leaves no
    note on ``ctx``: they are candidates, not the answer.
    """
    kind = value_field.kind
    if kind == KIND_READINGS:
        return []
    context = _probe(ctx)
    inside: list[tuple[int, int]] = []
    if kind in (*NUMBERS, "duration"):
        inside = [(s, e) for s, e in evidence.candidates(text, "date") if _YEAR.search(text[s:e])]
    found: list[tuple[int, int]] = []
    for start, end in evidence.candidates(text, kind):
        words = text[start:end].strip()
        if not words or len(words) > EVIDENCE_MAX_CHARS:
            continue
        start = text.index(words, start)
        end = start + len(words)
        if within is not None and not (start < within[1] and within[0] < end):
            continue
        if any(s <= start and end <= e and (s, e) != (start, end) for s, e in inside):
            continue
        try:
            normalize(value_field, words, context)
        except EvidenceError:
            continue
        found.append((start, end))
    return sorted(set(found))


def phrases(text: str, value_field: ValueField, ctx: Context | None = None) -> tuple[str, ...]:
    """The distinct phrases of ``text`` that read as a value of the field's kind, in reading order."""
    return tuple(dict.fromkeys(text[s:e] for s, e in spans(text, value_field, ctx)))


def fit(text: str, value_field: ValueField, words: str, ctx: Context | None = None) -> tuple[str, str | None]:
    """The copied ``words`` fitted to a phrase of ``text`` that states the field's kind, and a note when narrowed.

    Words cut short ("2014" of "May 20, 2014") are widened to the phrase holding them
    (:func:`extractor.values.evidence.widen`). Words that run past a phrase or hold one and more
    ("2014, runs for two (2) years and costs…") are narrowed: words that cannot be read to the
    phrase they start in, else the first phrase they hold; words that read to the longest such
    phrase stating the same value ("two (2) years and costs" -> "two (2) years"). A phrase as
    written ("1 year and 6 months") is kept.
    """
    widened = evidence.widen(text, value_field, words)
    if widened != words or value_field.kind == KIND_READINGS:
        return widened, None
    context = _probe(ctx)
    core = words.strip()
    at = text.find(core) if core else -1
    if at < 0:
        return words, None
    end = at + len(core)
    found = spans(text, value_field, context, within=(at, end))  # the phrases these words touch
    if (at, end) in found:
        return words, None
    starting = [(s, e) for s, e in found if s <= at < e]
    held = [(s, e) for s, e in found if at <= s and e <= end]
    try:  # words that read keep their value: only a phrase stating that same value stands for them
        value = normalize(value_field, words, context).value
        same = [span for span in starting + held if _reads(text[span[0] : span[1]], value_field, context) == value]
        chosen = max(same, key=lambda span: span[1] - span[0]) if same else None
    except EvidenceError:
        chosen = max(starting, key=lambda span: span[1] - span[0]) if starting else held[0] if held else None
    if chosen is None:
        return words, None
    phrase = text[chosen[0] : chosen[1]]
    return phrase, f"{value_field.path or '/'}: the evidence {_short(core)!r} was narrowed to {phrase!r}"


def _probe(ctx: Context | None) -> Context:
    """``ctx`` for reading candidates: its settings, notes of its own (a relative date's note is the answer's)."""
    return replace(ctx, notes=[]) if ctx is not None else Context()


def _reads(words: str, value_field: ValueField, ctx: Context) -> object:
    try:
        return normalize(value_field, words, ctx).value
    except EvidenceError:
        return None


def _short(words: str, limit: int = 60) -> str:
    return words if len(words) <= limit else words[:limit] + "…"


class Lookup:
    """The phrases of one text for each typed field of a task: what grounded decoding holds evidence to.

    Each field's phrases are found once per text; evidence an attempt had refused leaves its
    field's list (:meth:`refuse`), so that a re-ask does not send the same request again.
    Called as ``lookup(pointer, kind)`` with a schema pointer of the evidence schema
    (:data:`extractor.constraints.grounded_decoding.Phrases`).
    """

    def __init__(self, text: str, fields: Mapping[str, ValueField], ctx: Context | None = None) -> None:
        self.text = text
        self.fields = fields
        self.ctx = ctx or Context()
        self.refused: dict[str, set[str]] = {}
        self._found: dict[str, tuple[str, ...]] = {}

    def __call__(self, pointer: str, kind: str) -> tuple[str, ...] | None:
        """The phrases the evidence at schema ``pointer`` may be (None: the field is not a typed one here)."""
        value_field = field_at(pointer, kind, self.fields)
        if value_field is None or value_field.kind == KIND_READINGS:
            return None
        return self.left(value_field)

    def left(self, value_field: ValueField) -> tuple[str, ...]:
        """The field's phrases, less those refused."""
        refused = self.refused.get(value_field.path, set())
        return tuple(p for p in self.found(value_field) if p not in refused)

    def found(self, value_field: ValueField) -> tuple[str, ...]:
        """Every phrase of the text that reads as the field's kind, refused or not."""
        if value_field.path not in self._found:
            self._found[value_field.path] = phrases(self.text, value_field, self.ctx)
        return self._found[value_field.path]

    def refuse(self, path: str, words: str) -> bool:
        """Leave ``words`` out of the phrases of the field at ``path``; True when they were among them."""
        value_field = self.fields.get(path)
        if value_field is None or words not in self.found(value_field):
            return False
        held = self.refused.setdefault(path, set())
        if words in held:
            return False
        held.add(words)
        return True


def field_at(pointer: str, kind: str, fields: Mapping[str, ValueField]) -> ValueField | None:
    """The value field an evidence schema's ``pointer`` is (``#/properties/a/items/properties/b`` -> ``/a/b``).

    Under ``$defs`` the path from the root is not in the pointer: the field of that kind whose
    path ends as the pointer's does stands for it.
    """
    tokens = pointer.removeprefix("#").split("/")[1:]
    path, partial, i = "", False, 0
    while i < len(tokens):
        token = tokens[i]
        if token in ("$defs", "definitions"):
            path, partial, i = "", True, i + 2
        elif token in ("properties", "patternProperties") and i + 1 < len(tokens):
            path, i = f"{path}/{tokens[i + 1]}", i + 2
        elif token in ("anyOf", "oneOf", "allOf", "prefixItems"):
            i += 2
        else:
            i += 1
    if not partial:
        found = fields.get(path)
        return found if found is not None and found.kind == kind else None
    return next((f for f in fields.values() if f.kind == kind and f.path.endswith(path)), None)
