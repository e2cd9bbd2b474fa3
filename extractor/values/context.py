"""What a normalizer needs besides the evidence: languages, day/month order, a reference date."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

DateOrder = Literal["DMY", "MDY", "YMD"]
DATE_ORDERS: tuple[str, ...] = ("DMY", "MDY", "YMD")
PERCENT_MODES: tuple[str, ...] = ("ratio", "points")


class EvidenceError(ValueError):
    """The evidence cannot be read as the field's type; the message says why (fed back to the model)."""


class AmbiguousEvidenceError(EvidenceError):
    """The evidence reads two ways and nothing says which (e.g. ``05/06/2014`` without a date order)."""


@dataclass(frozen=True)
class Context:
    """How to read evidence: the task's (or field's) settings and the request's reference date.

    ``reference_date`` anchors relative dates ("next Friday", "下周五"); None means today, and the
    result says so in a note. ``languages`` are dateparser's codes (``en``, ``zh``); empty: detect.
    """

    languages: tuple[str, ...] = ()
    date_order: DateOrder | None = None
    reference_date: dt.date | None = None
    # The unit or currency a number is in when its evidence names none (``x-extractor.unit``/``currency``).
    unit: str | None = None
    currency: str | None = None
    currency_required: bool = False
    percent: Literal["ratio", "points"] = "ratio"
    notes: list[str] = field(default_factory=list, compare=False, hash=False)

    @property
    def today(self) -> dt.date:
        """The reference date, or today's date when the request gave none."""
        return self.reference_date or dt.date.today()
