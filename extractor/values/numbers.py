"""Numbers, amounts, percentages and quantities from the words that state them.

Libraries, each for what it does best:

* price-parser reads an amount and its currency symbol out of a string, guessing the decimal
  separator (``$1,200.50``, ``EUR 12,5``, ``1.200,50 €``);
* babel maps currency symbols and names to ISO 4217 codes (its CLDR data: ``€``, ``euros``);
* text2num reads English number words (``twenty-four``); cn2an Chinese numerals (``一千二百``,
  ``1.2万``);
* pint converts quantities to the field's unit (``16GB`` for a field in ``MB`` -> 16000).

The layer here: which of them to ask, percentages (``12.5 %`` -> 0.125 unless the field keeps
points), Chinese currency words (``元``, ``美元``) and units (``公里``) that the libraries do not
know, and the checks that say why a number could not be read.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import cn2an
from babel import Locale
from price_parser import Price
from text_to_num import text2num

from extractor.values.context import Context, EvidenceError

PERCENT = re.compile(r"%|％|\bper\s?cent\b|\bpercent(?:age)?\b|百分之|个百分点", re.IGNORECASE)
_CN_NUMERAL = re.compile("[零〇一二两三四五六七八九十百千万亿]")
_CN_MULTIPLIER = re.compile(r"(\d+(?:\.\d+)?)\s*(万|亿|千)")
# "k" only in an amount ("$18k"): alone, "4K" is more often a resolution than 4000.
_EN_MULTIPLIER = re.compile(r"(\d+(?:\.\d+)?)\s*(thousand|million|mn|billion|bn)\b", re.IGNORECASE)
_K = re.compile(r"(\d+(?:\.\d+)?)\s*(k)\b", re.IGNORECASE)
_EN_TIMES = {"k": 1_000, "thousand": 1_000, "million": 10**6, "mn": 10**6, "billion": 10**9, "bn": 10**9}
_PLAIN = re.compile(r"(?<![\d,.])[-+−]?\d+(?:\.\d+)?(?![\d,.]*\d)")
_DIGITS = re.compile(r"[-+]?\d[\d,.\s\u00a0'’]*")
# Currency words the CLDR names miss (Chinese colloquial, bare dollars).
_CURRENCY_WORDS = {
    "人民币": "CNY",
    "元": "CNY",
    "块": "CNY",
    "rmb": "CNY",
    "美元": "USD",
    "美金": "USD",
    "欧元": "EUR",
    "英镑": "GBP",
    "日元": "JPY",
    "港币": "HKD",
    "港元": "HKD",
    "yuan": "CNY",
    "yen": "JPY",
    "dollars": "USD",
    "dollar": "USD",
    "bucks": "USD",
}
# Longest first: "美元" is found before the "元" inside it.
_CURRENCY_BY_LENGTH = tuple(sorted(_CURRENCY_WORDS.items(), key=lambda item: -len(item[0])))
_UNIT_WORDS = {"公里": "km", "千米": "km", "公斤": "kg", "千克": "kg", "克": "g", "米": "m", "厘米": "cm", "升": "L"}
_UNIT_WORDS.update({"小时": "hour", "分钟": "minute", "秒": "second", "吨": "tonne"})


@dataclass(frozen=True)
class Number:
    """A number read from evidence, with the currency or unit it is in (None when it names neither)."""

    value: Decimal
    currency: str | None = None
    unit: str | None = None
    percent: bool = False


def word_number(words: str) -> int | None:
    """English number words as an int (``twenty-four`` -> 24), or None."""
    try:
        return int(text2num(words.strip().lower(), "en"))
    except ValueError:
        return None


def parse(evidence: str, ctx: Context) -> Number:
    """The number ``evidence`` states, as a :class:`Number` in the field's unit or currency.

    Raises:
        EvidenceError: no number in the evidence, a currency other than the field's or none
            where the field requires one, or a unit that does not convert to the field's.

    """
    text = evidence.strip()
    if not text:
        raise EvidenceError("the evidence is empty")
    percent = bool(PERCENT.search(text))
    currency = _currency(text)
    value = _value(text, in_currency=currency is not None)
    if value is None:
        raise EvidenceError(f"{evidence!r} states no number")
    if percent and ctx.percent == "ratio":
        value = value / 100
    if ctx.currency is not None or ctx.currency_required:
        return Number(value, currency=_checked_currency(evidence, currency, ctx), percent=percent)
    if ctx.unit is not None and not percent:
        return Number(_converted(text, value, ctx.unit), unit=ctx.unit)
    return Number(value, currency=currency, percent=percent)


def _value(text: str, *, in_currency: bool = False) -> Decimal | None:
    if _CN_NUMERAL.search(text):
        smart = _chinese(text)
        if smart is not None:
            return smart
    multiplier = _CN_MULTIPLIER.search(text)  # "1.2万" (digits with a Chinese multiplier)
    if multiplier is not None:
        return Decimal(multiplier.group(1)) * {"万": 10_000, "亿": 100_000_000, "千": 1_000}[multiplier.group(2)]
    multiplier = _EN_MULTIPLIER.search(text) or (_K.search(text) if in_currency else None)  # "$1.5 million", "$5k"
    if multiplier is not None and len(_DIGITS.findall(text)) == 1:
        return Decimal(multiplier.group(1)) * _EN_TIMES[multiplier.group(2).lower()]
    plain = _PLAIN.search(text)
    if plain is not None and len(_DIGITS.findall(text)) == 1:  # "12.5%", "-3.5", "16GB": one plain number
        return Decimal(plain.group(0).replace("−", "-"))
    if _DIGITS.search(text):
        amount = Price.fromstring(text).amount
        if amount is not None:
            return _signed(text, amount)
    number = _words(text)
    return Decimal(number) if number is not None else None


def as_json(value: Decimal) -> int | float:
    """A number as JSON holds it: an int when whole, else a float."""
    return int(value) if value == value.to_integral_value() else float(value)


def _signed(text: str, amount: Decimal) -> Decimal:
    # price-parser drops a minus sign ("-3.5", "−3.5"): it reads prices.
    return -amount if re.search(r"[-−]\s*\d", text) and amount > 0 else amount


def _chinese(text: str) -> Decimal | None:
    core = re.sub(r"[^零〇一二两三四五六七八九十百千万亿点\d.]", "", text.replace("百分之", ""))
    try:
        return Decimal(str(cn2an.cn2an(core, "smart")))
    except (ValueError, KeyError, IndexError, InvalidOperation):
        return None


def _words(text: str) -> int | None:
    tokens = re.findall(r"[a-z\-]+", text.lower())
    for start in range(len(tokens)):
        for end in range(len(tokens), start, -1):
            found = word_number(" ".join(tokens[start:end]))
            if found is not None:
                return found
    return None


def _currency(text: str) -> str | None:
    lowered = text.lower()
    for word, code in _CURRENCY_BY_LENGTH:
        if word in lowered:
            return code
    symbol = Price.fromstring(text).currency
    if symbol is None:
        return None
    return currency_code(symbol)


def currency_code(symbol: str) -> str | None:
    """The ISO 4217 code of a currency symbol, code or name (``€``, ``eur``, ``euros``), from babel's CLDR data."""
    cleaned = symbol.strip()
    if re.fullmatch("[A-Za-z]{3}", cleaned) and cleaned.upper() in _codes():
        return cleaned.upper()
    return _by_symbol().get(cleaned) or _by_symbol().get(cleaned.lower())


@functools.cache
def _codes() -> frozenset[str]:
    return frozenset(Locale("en").currencies)


@functools.cache
def _by_symbol() -> dict[str, str]:
    found: dict[str, str] = {}
    english = Locale("en")
    for code, name in english.currencies.items():
        found.setdefault(name.lower(), code)
        found.setdefault(name.lower() + "s", code)
    for code, symbol in english.currency_symbols.items():
        if symbol != code:
            found.setdefault(symbol, code)
    # The common reading of a bare symbol several currencies share.
    found.update({"$": "USD", "US$": "USD", "€": "EUR", "£": "GBP", "¥": "CNY", "￥": "CNY", "₩": "KRW", "₹": "INR"})
    found.update({"euro": "EUR", "euros": "EUR", "yen": "JPY", "yuan": "CNY", "pounds": "GBP", "pound": "GBP"})
    return found


def _checked_currency(evidence: str, currency: str | None, ctx: Context) -> str:
    expected = ctx.currency.upper() if ctx.currency not in (None, "required") else None
    if currency is None:
        if expected is None:
            raise EvidenceError(f"{evidence!r} names no currency, and the field requires one: copy the currency too")
        return expected
    if expected is not None and currency != expected:
        raise EvidenceError(f"{evidence!r} is in {currency}, the field holds {expected}")
    return currency


def _converted(text: str, value: Decimal, unit: str) -> Decimal:
    import pint  # a large registry: built only for fields with a unit

    named = _unit_in(text)
    if named is None:
        return value
    registry = _registry()
    try:
        quantity = registry.Quantity(float(value), named).to(unit)
    except (pint.errors.PintError, ValueError, AttributeError) as error:
        raise EvidenceError(f"{text!r} is not in a unit convertible to {unit}: {error}") from None
    return Decimal(str(quantity.magnitude)).normalize()


def _unit_in(text: str) -> str | None:
    for word, unit in _UNIT_WORDS.items():
        if word in text:
            return unit
    match = re.search(r"\d\s*([A-Za-z][A-Za-z/²³0-9]*)", text)
    return match.group(1) if match else None


@functools.cache
def _registry() -> Any:
    import pint

    return pint.UnitRegistry()
