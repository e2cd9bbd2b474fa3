"""A value that may be a number, an amount, a date, a duration or a time, or stay the words: its first reading.

A field typed ``["number", "string"]`` with ``"x-extractor": {"readings": [...]}`` (a search
condition's value: "1200元", "下周五", "16GB", "4 stars", "Hangzhou") holds whatever the text states.
The model copies the words, like any value field; the service tries the readings in the order the
schema lists them, and the first that *fits* gives the value; evidence none of them fits stays the
words (a place, a brand, "free parking" are not errors).

A reading fits only evidence that is wholly a value of its kind, so an order can put numbers
before dates without "4.5" becoming the 5th of April, and "Terminal 2", "iPhone 15" or "in two
weeks" are not read as numbers or durations:

* ``percent``: a percent sign or word (``20%``, ``百分之二十``, ``5 percent``);
* ``amount``: a number with a currency (``$600``, ``1200元``, ``500 yuan``); the unit is its ISO 4217 code;
* ``duration``: only counts with units (``two weeks``, ``3天``, ``1.5 hours``; not ``3天后``, a date);
* ``number``: a number and at most one unit word after it (``16GB``, ``4 stars``, ``两室``, ``100平米``),
  the unit as a symbol where it has a common one (``km``, ``m²``), else the word, singular;
* ``date`` / ``date-time``: :mod:`extractor.values.dates`, day and month named, never digits alone;
* ``time``: a clock time (``上午10点``, ``6pm``, ``10:30``, ``noon``).

A date that reads two ways (``05/06/2014`` without a date order) is kept as the words, with a note.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from extractor.values import dates, durations, numbers
from extractor.values.context import AmbiguousEvidenceError, Context, EvidenceError

READINGS: tuple[str, ...] = ("percent", "amount", "duration", "number", "date", "date-time", "time")

_NUMBER_WORD = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|"
    r"seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand"
)
_CN_NUMERALS = "零〇一二两三四五六七八九十百千万亿"
_COUNT = (
    rf"\d{{1,3}}(?:[,，]\d{{3}})+(?:\.\d+)?|\d+(?:\.\d+)?|[{_CN_NUMERALS}][{_CN_NUMERALS}点]*"
    rf"|\b(?:{_NUMBER_WORD})(?:[\s-]+(?:{_NUMBER_WORD}|and))*\b"
)
_MULTIPLIER = r"万|亿|千|thousand\b|million\b|mn\b|billion\b|bn\b"
# Han characters that end a unit: numerals, and the words around a number ("5000到8000", "3晚的", "以上").
_NOT_HAN_UNIT = _CN_NUMERALS + "到至以的左右多起和或及与内外"
# One unit word: an area in words, Latin letters (``GB``, ``stars``), or one to three Han characters
# (a currency word ends one: "5000元人民币" is 5000元).
_UNIT = (
    r"sq\.?\s*(?:ft|m)\b|square\s+(?:feet|foot|meters?|metres?)\b"
    rf"|[A-Za-z][A-Za-z.²³]{{0,11}}|[^\W\d_{_NOT_HAN_UNIT}A-Za-z元块]{{0,2}}[元块]|[^\W\d_{_NOT_HAN_UNIT}A-Za-z元块]{{1,3}}"
)
QUANTITY = re.compile(
    rf"[-+−]?(?P<count>{_COUNT})\s*(?P<multiplier>{_MULTIPLIER})?(?:\s*-?\s*(?P<unit>{_UNIT}))?", re.IGNORECASE
)
# Words that make a number a date or a clock time, not a quantity ("1 May", "6pm", "20号", "3天后").
_NOT_UNITS = re.compile(
    r"^(?:[ap]\.?m\.?|o'?clock|h|jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|"
    r"june|july|august|september|october|november|december|mon|tue|wed|thu|fri|sat|sun|st|nd|rd|th)\.?$"
    r"|[日号號月点點时時秒周天后前底初]|^[级等号]",
    re.IGNORECASE,
)
# Common unit words as their symbols; other words are kept, lowercased and singular ("stars" -> "star").
_SYMBOLS = {
    "sq ft": "ft²",
    "sq. ft": "ft²",
    "sqft": "ft²",
    "square feet": "ft²",
    "square foot": "ft²",
    "sq m": "m²",
    "square meter": "m²",
    "square metre": "m²",
    "lbs": "lb",
    "平米": "m²",
    "平方米": "m²",
    "平方": "m²",
    "平": "m²",
    "sqm": "m²",
    "公里": "km",
    "千米": "km",
    "公斤": "kg",
    "千克": "kg",
    "克": "g",
    "米": "m",
    "厘米": "cm",
    "升": "L",
    "kilometer": "km",
    "kilometre": "km",
    "kilogram": "kg",
    "kilo": "kg",
    "gram": "g",
    "meter": "m",
    "metre": "m",
    "mile": "mi",
    "foot": "ft",
    "feet": "ft",
    "inch": "in",
    "inche": "in",
    "liter": "L",
    "litre": "L",
}
# Between a duration's parts: "1 year and 6 months", "一年零三个月".
# A count in Chinese numerals is a quantity only before a measure word or a unit ("两张", "七座", "三百平米"):
# "三亚" and "二手" are words.
_MEASURES = "个张次间室晚位人座层台件套本只条家岁星居折匹寸码辆双对杯瓶箱份倍"
_HAN_COUNT = re.compile(f"^[{_CN_NUMERALS}][{_CN_NUMERALS}点]*$")
# Counted days or hours with nothing that makes them a date: "7天6晚" is a stay, not 7 days ago.
_COUNTED = re.compile(r"\d\s*(?:天|晚|小时|周|个月|days?|weeks?|nights?|hours?|months?|years?)\b", re.IGNORECASE)
_RELATIVE = re.compile(r"后|前|\bago\b|\bin\b|\blater\b|\bfrom now\b|\bhence\b", re.IGNORECASE)
_DURATION_GLUE = re.compile(r"^[\s,，、]*(?:and|又|零|和)?[\s,，、]*$", re.IGNORECASE)
# A month or a day of the calendar, not a count of them (a count says 个月, 天).
_CALENDAR = re.compile(r"^\d+\s*[月日号]$")
_YEARS_AT_MOST = 999  # "2025年" is a year, not 2025 years
_DIGITS_ONLY = re.compile(r"^[\d\s.,/-]+$")


@dataclass(frozen=True)
class Reading:
    """What evidence reads as: the typed value, its currency or unit, and which reading fit."""

    value: Any
    unit: str | None
    name: str


def read(evidence: str, order: tuple[str, ...], ctx: Context) -> Reading | None:
    """The first reading in ``order`` that fits ``evidence``; None when none does (the words stay)."""
    text = evidence.strip()
    if not text:
        return None
    for name in order:
        try:
            found = _READERS[name](text, ctx)
        except AmbiguousEvidenceError as error:
            ctx.notes.append(f"{evidence!r} is kept as written: {error}")
            return None
        except EvidenceError:
            continue
        if found is not None:
            return found
    return None


def _percent(text: str, ctx: Context) -> Reading | None:
    if not numbers.PERCENT.search(text):
        return None
    number = numbers.parse(text, replace(ctx, unit=None, currency=None, currency_required=False))
    return Reading(numbers.as_json(number.value), "%" if ctx.percent == "points" else None, "percent")


def _amount(text: str, ctx: Context) -> Reading | None:
    number = numbers.parse(text, replace(ctx, unit=None, currency=None, currency_required=False))
    if number.currency is None or number.percent:
        return None
    return Reading(numbers.as_json(number.value), number.currency, "amount")


def _duration(text: str, ctx: Context) -> Reading | None:
    as_digits = dates.digits(text)
    parts = list(durations.PART.finditer(as_digits))
    if not parts or not all(_DURATION_GLUE.match(g) for g in _gaps(as_digits, parts)):
        return None  # words around the counts: "in two weeks", "3天后" are dates
    if any(_CALENDAR.match(p.group(0)) for p in parts):
        return None  # "12月24日" is a day of the year
    value = durations.parse(text)
    years = re.match(r"P(\d+)Y", value)
    if years is not None and int(years.group(1)) > _YEARS_AT_MOST:
        return None
    return Reading(value, None, "duration")


def _gaps(text: str, parts: list[re.Match[str]]) -> list[str]:
    ends = [0, *(m.end() for m in parts)]
    starts = [*(m.start() for m in parts), len(text)]
    return [text[a:b] for a, b in zip(ends, starts, strict=True)]


def _number(text: str, ctx: Context) -> Reading | None:
    match = QUANTITY.fullmatch(text)
    if match is None or match.group("count").lower() in ("and",):
        return None
    unit = match.group("unit")
    if unit is not None and _NOT_UNITS.search(unit):
        return None
    if _HAN_COUNT.match(match.group("count")) and unit and unit[0] not in _MEASURES and unit not in _SYMBOLS:
        return None
    number = numbers.parse(text, replace(ctx, unit=None, currency=None, currency_required=False))
    return Reading(numbers.as_json(number.value), symbol(unit) if unit else None, "number")


def symbol(word: str) -> str:
    """A unit word as the unit: its symbol (``公里`` -> ``km``), an abbreviation as written (``GB``), else singular."""
    lowered = re.sub(r"\s+", " ", word.lower().rstrip("."))
    singular = lowered[:-1] if len(lowered) > 3 and lowered.endswith("s") and not lowered.endswith("ss") else lowered
    found = _SYMBOLS.get(word) or _SYMBOLS.get(lowered) or _SYMBOLS.get(singular)
    if found is not None:
        return found
    if not word.isascii() or word[1:] != word[1:].lower() or (len(word) <= 3 and word != lowered):
        return word  # "GB", "mAh", "Hz", "K", "星", "号线": as written
    return singular


def _date(kind: str) -> Callable[[str, Context], Reading | None]:
    def reader(text: str, ctx: Context) -> Reading | None:
        if _DIGITS_ONLY.match(text) and len(re.findall(r"\d+", text)) < 3:
            return None  # "4.5", "12", "2024": numbers, never a day and a month
        if _COUNTED.search(dates.digits(text)) and not _RELATIVE.search(text):
            return None  # dateparser reads "7天" as 7 days ago
        return Reading(dates.parse(text, kind, ctx), None, kind)

    return reader


def _time(text: str, ctx: Context) -> Reading | None:
    if not dates.TIMES.search(text):
        return None  # dateparser reads "Sun" or "May" as midnight of a day: a time needs a clock
    return Reading(dates.parse(text, "time", ctx), None, "time")


_READERS: dict[str, Callable[[str, Context], Reading | None]] = {
    "percent": _percent,
    "amount": _amount,
    "duration": _duration,
    "number": _number,
    "date": _date("date"),
    "date-time": _date("date-time"),
    "time": _time,
}
