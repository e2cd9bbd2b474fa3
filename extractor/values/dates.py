"""Dates, times and date-times from the words that state them: dateparser, with a thin layer for Chinese.

dateparser reads absolute and relative dates in 200+ languages (``May 20, 2014``, ``20 May 2014``,
``2014年5月20日``, ``tomorrow``, ``明天``, ``2 days ago``). What it misses and this module adds:

* Chinese numerals are turned into digits first (cn2an): ``三月五日`` -> ``3月5日``;
* Chinese weekdays relative to the week (``下周五``, ``本周三``, ``上星期一``);
* Chinese clock times (``下午3点``, ``三点半``, ``晚上8点15分``);
* a Chinese month and day without a year (``12月24日``: dateparser takes the 12 for a year);
* an English weekday alone or after next/this/coming/on (``next Friday``, ``Saturday``): dateparser
  reads them, as the coming one, but its check that a date names a day and a month refuses them;
* evidence with words around the date (``as of May 20, 2014``): dateparser's search, one date only.

AmbiguousEvidenceError is explicit: an all-digit date whose day and month could swap (``05/06/2014``) needs a
date order (``x-extractor.date_order``), and a relative date is read against the request's
reference date, or today's with a note.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import warnings
from typing import Any

import cn2an
import dateparser
from dateparser.search import search_dates

from extractor.values.context import AmbiguousEvidenceError, Context, EvidenceError

_CN_DIGITS = re.compile("[零〇一二两三四五六七八九十百千万]")
_CN_WEEKDAY = re.compile("(上|下|这|本|今|下下)?(?:个)?(?:周|星期|礼拜)([一二三四五六日天1-7])")
_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_CN_CLOCK = re.compile(r"(上午|早上|中午|下午|晚上|傍晚|凌晨)?\s*(\d{1,2})\s*[点點时](?:\s*(半|(\d{1,2})\s*分?))?")
_AFTERNOON = {"下午", "晚上", "傍晚"}
_AMBIGUOUS_DIGITS = re.compile(r"^\s*(\d{1,2})\s*[./-]\s*(\d{1,2})\s*[./-]\s*(\d{2}|\d{4})\s*$")
_FAR = dt.timedelta(days=400)
_CN_MONTH_DAY = re.compile(r"^(\d{1,2})\s*月\s*(\d{1,2})\s*[日号號]$")
_WEEKDAY_LEAD = re.compile(r"^(?:on|coming|the\s+coming)\s+", re.IGNORECASE)  # words dateparser does not read
_WEEKDAY = re.compile(r"^(?:(?:next|this)\s+)?(?:mon|tues|wednes|thurs|fri|satur|sun)day$", re.IGNORECASE)
# A clock time as a text writes it ("3:30 pm", "10am", "noon", "下午3点", "三点半"): where a time can be.
CLOCK = (
    r"\d{1,2}:\d{2}(?:\s*[ap]\.?m\.?)?|\d{1,2}\s*[ap]\.?m\.?|\bnoon\b|\bmidnight\b"
    r"|(?:上午|早上|中午|下午|晚上|傍晚|凌晨)?[\d零一二两三四五六七八九十]{1,3}[点點时](?:半|[\d一二三四五六七八九十]{1,3}分?)?"
)
TIMES = re.compile(CLOCK, re.IGNORECASE)


def parse(evidence: str, kind: str, ctx: Context) -> str:
    """``evidence`` as the schema's format: ``date`` -> ``YYYY-MM-DD``, ``time`` -> ``HH:MM:SS``, ``date-time``.

    Raises:
        EvidenceError: no date (or time) in the evidence, or more than one.
        AmbiguousEvidenceError: day and month could swap and the task names no date order.

    """
    text = evidence.strip()
    if not text:
        raise EvidenceError("the evidence is empty")
    text = digits(text)
    _check_order(text, ctx)
    clock = _chinese_clock(text)
    if clock is not None:
        text = _CN_CLOCK.sub(" ", text).strip()
    if kind == "time":
        if clock is not None:
            return clock.isoformat()
        return _parsed(text, ctx, what="a time").time().isoformat()
    found = _parsed(text, ctx, what="a date", whole=True) if text else None
    if found is None:
        raise EvidenceError("no date in the evidence")
    if kind == "date":
        return found.date().isoformat()
    if clock is not None:
        found = dt.datetime.combine(found.date(), clock)
    return found.replace(tzinfo=None).isoformat()


def _parsed(text: str, ctx: Context, *, what: str, whole: bool = False) -> dt.datetime:
    weekday = _chinese_weekday(text, ctx)
    if weekday is None:
        weekday = _month_day(text, ctx) or _weekday(text, ctx)
    if weekday is not None:
        return weekday
    base = dt.datetime.combine(ctx.today, dt.time())
    found = _read(text, ctx, base, whole=whole)
    if found is None:
        if whole and _read(text, ctx, base) is not None:  # "2014", "May 2014": a day would be made up
            raise EvidenceError(f"{text!r} states no day of a month: copy the whole date")
        raise EvidenceError(f"{what} cannot be read from {text!r}")
    if _read(text, ctx, base + _FAR, whole=whole) != found:  # it moved with the reference: a relative date
        _relative(ctx, text)
    return found


@functools.lru_cache(maxsize=2048)  # dateparser takes milliseconds; a phrase is read again at each attempt and field
def _read(text: str, ctx: Context, base: dt.datetime, *, whole: bool = False) -> dt.datetime | None:
    settings: dict[str, Any] = {
        "RELATIVE_BASE": base,
        "PREFER_DAY_OF_MONTH": "first",
        "RETURN_AS_TIMEZONE_AWARE": False,
    }
    if whole:  # a date names its day and month (the year may come from the reference date)
        settings["REQUIRE_PARTS"] = ["day", "month"]
    if ctx.date_order is not None:
        settings["DATE_ORDER"] = ctx.date_order
    languages = list(ctx.languages) or None
    found: dt.datetime | None = dateparser.parse(text, languages=languages, settings=settings)
    if found is not None:
        return found
    hits = search_dates(text, languages=languages, settings=settings) or []
    # search_dates reads pieces parse() would refuse ("2019年12月" -> year 6): keep what parse() agrees with.
    hits = [h for h in hits if dateparser.parse(h[0], languages=languages, settings=settings) == h[1]]
    if len(hits) > 1 and len({h[1] for h in hits}) > 1:
        raise EvidenceError(f"{text!r} states more than one date: copy only the one asked for")
    return hits[0][1] if hits else None


def digits(text: str) -> str:
    """``text`` with Chinese numerals as digits (cn2an): ``二〇一四年五月二十日`` -> ``2014年5月20日``."""
    if not _CN_DIGITS.search(text):
        return text
    try:
        with warnings.catch_warnings():  # cn2an warns of a numeral it cannot place ("10万公里") and keeps it
            warnings.simplefilter("ignore", UserWarning)
            return str(cn2an.transform(text, "cn2an"))
    except (ValueError, KeyError, IndexError):  # cn2an refuses some mixes; the text as written is tried
        return text


def _check_order(text: str, ctx: Context) -> None:
    match = _AMBIGUOUS_DIGITS.match(text)
    if match is None or ctx.date_order is not None:
        return
    first, second = int(match.group(1)), int(match.group(2))
    if first <= 12 and second <= 12 and first != second:
        raise AmbiguousEvidenceError(
            f"{text!r} reads as day/month or month/day: the task must say which "
            '(x-extractor "date_order": "DMY" or "MDY")'
        )


def _relative(ctx: Context, text: str) -> None:
    if ctx.reference_date is None:
        note = f"{text!r} is relative: read against today's date {ctx.today.isoformat()} (no reference_date given)"
        if note not in ctx.notes:
            ctx.notes.append(note)


def _chinese_weekday(text: str, ctx: Context) -> dt.datetime | None:
    match = _CN_WEEKDAY.search(text)
    if match is None:
        return None
    which, day = match.group(1) or "", match.group(2)
    target = int(day) - 1 if day.isdigit() else _WEEKDAYS[day]
    today = ctx.today
    monday = today - dt.timedelta(days=today.weekday())
    weeks = {"上": -1, "下": 1, "下下": 2}.get(which, 0)
    _relative(ctx, text)
    return dt.datetime.combine(monday + dt.timedelta(weeks=weeks, days=target), dt.time())


def _month_day(text: str, ctx: Context) -> dt.datetime | None:
    match = _CN_MONTH_DAY.match(text)
    if match is None:
        return None
    try:
        found = dt.datetime(ctx.today.year, int(match.group(1)), int(match.group(2)))
    except ValueError:
        raise EvidenceError(f"{text!r} is not a day of the year") from None
    _relative(ctx, text)  # the year is the reference date's
    return found


def _weekday(text: str, ctx: Context) -> dt.datetime | None:
    words = _WEEKDAY_LEAD.sub("", text.strip())
    if not _WEEKDAY.match(words):
        return None
    settings = {"RELATIVE_BASE": dt.datetime.combine(ctx.today, dt.time()), "PREFER_DATES_FROM": "future"}
    found: dt.datetime | None = dateparser.parse(words, languages=["en"], settings=settings)
    if found is not None:
        _relative(ctx, text)
    return found


def _chinese_clock(text: str) -> dt.time | None:
    match = _CN_CLOCK.search(text)
    if match is None:
        return None
    part, hour = match.group(1), int(match.group(2))
    minute = 30 if match.group(3) == "半" else int(match.group(4) or 0)
    if part in _AFTERNOON and hour < 12:
        hour += 12
    if part == "中午" and hour < 6:
        hour += 12
    if hour > 23 or minute > 59:
        raise EvidenceError(f"{text!r}: {hour}:{minute:02d} is not a time of day")
    return dt.time(hour, minute)
