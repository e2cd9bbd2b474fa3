"""Durations from the words that state them, as ISO 8601 (isodate writes them: ``P2Y``, ``P18M``, ``PT36H``).

No maintained library reads contract English or Chinese durations ("two (2) years", "a period of
eighteen months", "十八个月", "1 year and 6 months"), so this is the small layer on top: each
part is a count (digits, number words through text2num, Chinese numerals through cn2an, both
forms of "two (2)") and a unit word; isodate writes the result. Evidence already in ISO 8601
(``P2Y``) is read by isodate itself.
"""

from __future__ import annotations

import re
from decimal import Decimal

import cn2an
import isodate

from extractor.values.context import EvidenceError
from extractor.values.dates import digits
from extractor.values.numbers import word_number

_UNITS = {
    "year": "years",
    "yr": "years",
    "年": "years",
    "month": "months",
    "mo": "months",
    "个月": "months",
    "月": "months",
    "week": "weeks",
    "wk": "weeks",
    "周": "weeks",
    "星期": "weeks",
    "礼拜": "weeks",
    "day": "days",
    "天": "days",
    "日": "days",
    "hour": "hours",
    "hr": "hours",
    "小时": "hours",
    "钟头": "hours",
    "minute": "minutes",
    "min": "minutes",
    "分钟": "minutes",
    "second": "seconds",
    "sec": "seconds",
    "秒": "seconds",
}
_NUMBER_WORDS = (
    "a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
    "sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|half"
)
_UNIT = "|".join(sorted((re.escape(u) for u in _UNITS), key=len, reverse=True))
# A count ("2", "2.5", "two", "twenty-four", "half a") optionally followed by its digits in
# parentheses ("two (2)"), then a unit word ("years", "个月", "calendar months").
PART = re.compile(
    rf"(?P<count>\d+(?:\.\d+)?|(?:\b(?:{_NUMBER_WORDS})\b[\s-]*)+|[零〇一二两三四五六七八九十百千万]+|半)"
    r"[\s-]*(?:\((?P<paren>\d+(?:\.\d+)?)\)\s*)?"
    rf"(?:full\s+|calendar\s+|consecutive\s+|个)?(?P<unit>{_UNIT})(?:s|\(s\))?(?![A-Za-z])",
    re.IGNORECASE,
)
_HALF = re.compile(r"\b(?:half\s+(?:a|an)|one[- ]half)\b|半", re.IGNORECASE)


def parse(evidence: str) -> str:
    """``evidence`` as an ISO 8601 duration (``"two (2) years"`` -> ``"P2Y"``).

    Raises:
        EvidenceError: no count with a unit in the evidence.

    """
    text = evidence.strip()
    if text.upper().startswith("P"):
        try:
            return str(isodate.duration_isoformat(isodate.parse_duration(text.upper())))
        except (isodate.ISO8601Error, ValueError):
            pass
    text = digits(text)
    parts: dict[str, Decimal] = {}
    for match in PART.finditer(text):
        count = _count(match.group("paren") or match.group("count"))
        if count is None:
            continue
        unit = _UNITS[_unit_key(match.group("unit"))]
        parts[unit] = parts.get(unit, Decimal(0)) + count
    if not parts:
        raise EvidenceError(f"{evidence!r} states no duration (a count and a unit such as '2 years' or '18个月')")
    return _iso(parts)


def words(iso: str) -> str:
    """An ISO 8601 duration in words, one unit: ``P2Y`` -> ``2 years``, ``P18M`` -> ``18 months``."""
    value = isodate.parse_duration(iso)
    if isinstance(value, isodate.Duration):
        years, months, rest = int(value.years), int(value.months), value.tdelta
    else:
        years, months, rest = 0, 0, value
    pieces = [(years, "year"), (months, "month"), (rest.days, "day"), (rest.seconds // 3600, "hour")]
    shown = [f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in pieces if n]
    return " ".join(shown) or "0 days"


def _unit_key(word: str) -> str:
    lowered = word.lower()
    return next(u for u in sorted(_UNITS, key=len, reverse=True) if lowered.startswith(u) or lowered == u)


def _count(word: str) -> Decimal | None:
    word = word.strip().lower()
    for filler in ("a period of ", "period of ", "of ", "for ", "the ", "an ", "a "):
        if word.startswith(filler):
            word = word[len(filler) :]
    if word in ("", "a", "an", "one"):
        return Decimal(1)
    if _HALF.fullmatch(word) or word == "半":
        return Decimal("0.5")
    if re.fullmatch("[零〇一二两三四五六七八九十百千万]+", word):
        return Decimal(str(cn2an.cn2an(word.replace("两", "二"), "smart")))
    try:
        return Decimal(word)
    except ArithmeticError:
        pass
    tokens = word.split()
    for start in range(len(tokens)):  # "for a period of eighteen": the longest tail that is a number
        number = word_number(" ".join(tokens[start:]))
        if number is not None:
            return Decimal(number)
    return None


def _iso(parts: dict[str, Decimal]) -> str:
    # Written unit by unit, as stated ("24 hours" stays PT24H: isodate's writer would fold it into P1D).
    years, months = parts.get("years", Decimal(0)), parts.get("months", Decimal(0))
    if years % 1:  # "1.5 years": whole months
        months += (years % 1) * 12
        years -= years % 1
    dates = [(years, "Y"), (months, "M"), (parts.get("weeks", Decimal(0)), "W"), (parts.get("days", Decimal(0)), "D")]
    times = [(parts.get("hours", Decimal(0)), "H"), (parts.get("minutes", Decimal(0)), "M")]
    times.append((parts.get("seconds", Decimal(0)), "S"))
    head = "".join(f"{_plain(n)}{u}" for n, u in dates if n)
    tail = "".join(f"{_plain(n)}{u}" for n, u in times if n)
    return "P" + head + (f"T{tail}" if tail else "") if head or tail else "PT0S"


def _plain(number: Decimal) -> str:
    return str(int(number)) if number == number.to_integral_value() else format(number.normalize(), "f")
