"""Typed value -> the words of a text that state it: the way back, for labels written as values.

An analyst's label says ``"effective_date": "2014-05-20"`` or ``"term": "3 years"``; the text says
"as of May 20, 2014" and "three (3) years". A worked example must show the model the words (it
answers evidence), and a labelled document imported into a pool keeps its own words as the
evidence. Each kind proposes candidate phrases of the text (patterns for dates, counts with units,
numbers); the normalizer of the field reads each, and the first whose value equals the label wins.
"""

from __future__ import annotations

import copy
import functools
import itertools
import re
from collections.abc import Iterator
from typing import Any

from extractor.grounding import field_path, scalar_leaves
from extractor.schema import unescape
from extractor.values import dates, durations, readings
from extractor.values.context import Context, EvidenceError
from extractor.values.fields import KIND_READINGS, ValueField
from extractor.values.normalize import normalize

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|"
    r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_DATE_PATTERNS = [
    rf"{_DAY}\s+(?:(?:day\s+)?of\s+)?{_MONTH},?\s+\d{{4}}",
    rf"{_MONTH}\s+{_DAY},?\s+\d{{4}}",
    rf"{_MONTH},?\s+\d{{4}}",
    r"\d{4}-\d{1,2}-\d{1,2}",
    r"\d{1,2}[/.]\d{1,2}[/.]\d{2,4}",
    r"[\d零〇一二三四五六七八九十]{2,4}年[\d一二三四五六七八九十]{1,3}月(?:[\d一二三四五六七八九十]{1,3}[日号])?",
    r"[\d一二三四五六七八九十]{1,3}月[\d一二三四五六七八九十]{1,3}[日号]",
    # relative: "下周五", "明天", "3天后", "tomorrow", "in two weeks", "2 days ago"
    r"(?:上|下|这|本|下下)?个?(?:周|星期|礼拜)[一二三四五六日天1-7]",
    r"大?后天|明天|今天|昨天|前天",
    r"[\d一二三四五六七八九十两]+\s*(?:天|周|个月|年)[后前]",
    r"\b(?:tomorrow|yesterday|today)\b",
    r"\bin\s+(?:\d+|[a-z]+)\s+(?:days?|weeks?|months?|years?)\b",
    r"\b(?:\d+|[a-z]+)\s+(?:days?|weeks?|months?|years?)\s+ago\b",
    r"\b(?:next|last|this)\s+(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|week|month)\b",
]
_DATE = "|".join(f"(?:{p})" for p in _DATE_PATTERNS)
_DATES = re.compile(_DATE, re.IGNORECASE)
_DATE_TIMES = re.compile(
    rf"\d{{4}}-\d{{1,2}}-\d{{1,2}}[T ]\d{{1,2}}:\d{{2}}(?::\d{{2}})?|(?:{_DATE})(?:,?\s*(?:at\s+)?(?:{dates.CLOCK}))?",
    re.IGNORECASE,
)
_NUMBERS = re.compile(
    r"(?:(?:USD|EUR|GBP|CNY|RMB|JPY|US\$)\s*|[$€£¥￥]\s*)?[-+−]?\d(?:[\d,.]*\d)?"
    r"(?:\s*(?:%|％|per\s?cent|percent|euros?|dollars?|yuan|pounds?|万|亿|千|元|美元|欧元|英镑|日元|港元|公里|千米|公斤|千克|克|米|"
    r"个百分点|[a-zA-Z]{1,3}\b|€))?"
    r"|百分之[零〇一二两三四五六七八九十百点]+|[零〇一二两三四五六七八九十百千万亿点]+(?:元|美元|万|亿|个)?"
)


_ISO_DURATIONS = re.compile(r"\bP(?:\d+(?:[.,]\d+)?[YMWD])*(?:T(?:\d+(?:[.,]\d+)?[HMS])+)?(?<!P)\b")
_JOINER = re.compile(r"\s*(?:,\s*|\s+and\s+|,\s*and\s+|和|又|零)\s*", re.IGNORECASE)
_NUMBER_WORD = (
    "zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|"
    "seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million|billion"
)
# English numbers in words ("twenty-four", "five hundred", "one thousand two hundred and five").
_NUMBER_WORDS = re.compile(
    rf"\b(?:{_NUMBER_WORD})(?:(?:[\s-]+|\s+and\s+)(?:{_NUMBER_WORD}))*\b(?:\s+(?:percent|per\s?cent|dollars?|euros?|pounds?))?",
    re.IGNORECASE,
)

# An amount its currency precedes, nothing after it ("$150,000 a year"): the readings' amounts.
_PREFIXED = re.compile(r"(?:(?:USD|EUR|GBP|CNY|RMB|JPY|US\$)\s*|[$€£¥￥]\s*)[-+−]?\d(?:[\d,.]*\d)?(?:\s*[kK]\b)?")

_PERCENTS = re.compile(
    r"\d+(?:\.\d+)?\s*(?:%|％|per\s?cent\b|percent\b)|百分之[零〇一二两三四五六七八九十百点]+", re.IGNORECASE
)


def find(
    text: str, value_field: ValueField, value: Any, ctx: Context | None = None, *, unit: str | None = None
) -> tuple[int, int] | None:
    """The span of ``text`` whose words the field's normalizer reads as ``value`` (in ``unit``, when given), or None.

    For a field of readings, ``unit`` None means a value stated without a unit.
    """
    context = ctx or Context()
    if value_field.kind == "duration" and isinstance(value, str) and not value.upper().startswith("P"):
        try:  # a label in words ("3 years") is compared as the duration it states, read once
            value = durations.parse(value)
        except EvidenceError:
            return None
    for start, end in candidates(text, value_field.kind):
        try:
            typed = normalize(value_field, text[start:end], context)
        except EvidenceError:
            continue
        # A field of readings: a label without a unit is stated without one ("2018", not "2018 or").
        exact_unit = unit is not None or value_field.kind == KIND_READINGS
        if _same(typed.value, value, value_field.kind) and (not exact_unit or typed.unit == unit):
            return start, end
    return None


def candidates(text: str, kind: str) -> Iterator[tuple[int, int]]:
    """Phrases of ``text`` that may state a value of ``kind``, in reading order."""
    return iter(_candidates(text, kind))


# A passage's phrases are looked for again by each attempt's answer (widened, fitted) and each
# field's grammar: the regular expressions over the whole passage were a third of reading an answer.
@functools.lru_cache(maxsize=256)
def _candidates(text: str, kind: str) -> tuple[tuple[int, int], ...]:
    return tuple(_scan(text, kind))


def _scan(text: str, kind: str) -> Iterator[tuple[int, int]]:
    if kind in ("date", "date-time"):
        for match in (_DATE_TIMES if kind == "date-time" else _DATES).finditer(text):
            yield match.span()
    elif kind == "duration":
        as_digits = dates.digits(text)  # offsets hold only where the numerals kept their length
        parts = [m.span() for m in durations.PART.finditer(as_digits if len(as_digits) == len(text) else text)]
        yield from parts
        yield from _joined(text, parts)  # "1 year and 6 months": the parts together too
        for match in _ISO_DURATIONS.finditer(text):
            yield match.span()
    elif kind == "time":
        for match in dates.TIMES.finditer(text):
            yield match.span()
    elif kind == KIND_READINGS:  # any kind's phrases, in reading order; of two that start together, the longer
        found = {span for other in ("date", "time", "duration") for span in candidates(text, other)}
        found |= set(_quantities(text)) | {m.span() for m in (*_PREFIXED.finditer(text), *_PERCENTS.finditer(text))}
        yield from sorted(found, key=lambda span: (span[0], -span[1]))
    else:
        found = {m.span() for m in _NUMBERS.finditer(text)} | {m.span() for m in _NUMBER_WORDS.finditer(text)}
        yield from sorted(found)


def _joined(text: str, parts: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Runs of two or more consecutive parts with only a joining word between them ("1 year and 6 months")."""
    start = None
    for (s1, e1), (s2, _) in itertools.pairwise(parts):
        if _JOINER.fullmatch(text[e1:s2]):
            start = s1 if start is None else start
            continue
        if start is not None:
            yield start, e1
        start = None
    if start is not None and parts:
        yield start, parts[-1][1]


def _quantities(text: str) -> Iterator[tuple[int, int]]:
    """Numbers with a unit word after them ("4 stars", "3晚"), a Han unit also cut to one or two characters."""
    for match in readings.QUANTITY.finditer(text):
        yield match.span()
        yield match.start(), match.end("count")
        unit = match.group("unit")
        if unit and not unit.isascii():
            for shorter in range(1, len(unit)):
                yield match.start(), match.start("unit") + shorter


def _same(found: Any, label: Any, kind: str) -> bool:
    if kind in ("number", "integer") or (kind == KIND_READINGS and _numeric(found) and _numeric(label)):
        try:
            return abs(float(found) - float(label)) < 1e-9
        except (TypeError, ValueError):
            return False
    return bool(str(found) == str(label))


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def as_evidence(text: str, output: Any, fields: dict[str, ValueField] | Any) -> Any:
    """A labelled ``output`` as the model answers it: each typed value replaced by the words of ``text`` stating it.

    A value whose words are not found is shown as written (a string): the label stays visible. A
    value's currency or unit (its ``unit_key`` sibling, which the service fills) picks the words
    that state it in that unit, and is left out: the model does not write it.
    """
    if not fields:
        return output
    shown = copy.deepcopy(output)
    for pointer, value in list(scalar_leaves(output)):
        found = fields.get(field_path(pointer))
        if found is None or isinstance(value, bool):
            continue
        parent = pointer.rsplit("/", 1)[0]
        unit = _get(output, f"{parent}/{found.unit_key}") if found.unit_key is not None else None
        span = find(text, found, value, unit=unit if isinstance(unit, str) else None)
        _set(shown, pointer, text[span[0] : span[1]] if span is not None else str(value))
        if found.unit_key is not None:
            holder = _get(shown, parent)
            if isinstance(holder, dict):
                holder.pop(found.unit_key, None)
    return shown


def _get(data: Any, pointer: str) -> Any:
    node = data
    for token in _tokens(pointer):
        if isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        elif isinstance(node, dict) and token in node:
            node = node[token]
        else:
            return None
    return node


def _tokens(pointer: str) -> list[str]:
    return [unescape(t) for t in pointer.split("/")[1:]]


def _set(data: Any, pointer: str, value: Any) -> None:
    tokens = _tokens(pointer)
    node = data
    for token in tokens[:-1]:
        node = node[int(token)] if isinstance(node, list) else node[token]
    last = tokens[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


_EDGES = " \t\n.,;:!?。，；：！？、"


def widen(text: str, value_field: ValueField, words: str) -> str:
    """The whole phrase of ``text`` that holds the copied ``words`` and states a value of the field's kind.

    A small model copies the least it can: "2014" of "May 20, 2014", "3" of "three (3) years",
    "1.2" of "1.2万". The value is read from the phrase around the words (still the text's own
    words, and where they are); words no such phrase holds are kept as copied.
    """
    core = words.strip(_EDGES)  # "2014." of "May 20, 2014.": the sentence's stop is no part of the value
    at = text.find(words)
    if at < 0 or not core:
        return words
    at += words.find(core)
    end = at + len(core)
    holding = [(s, e) for s, e in candidates(text, value_field.kind) if s <= at and end <= e and e - s > len(core)]
    if value_field.kind == KIND_READINGS:  # a phrase none of the readings fits ("五从杭州") holds no value
        holding = [(s, e) for s, e in holding if normalize(value_field, text[s:e], Context()).reading is not None]
    if not holding:
        return words
    start, stop = min(holding, key=lambda span: span[1] - span[0])
    return text[start:stop].strip()
