"""Extraction quality as precision/recall/F1 over leaf values. Pure functions.

Leaves and how values compare: :mod:`extractor.comparison`. Leaves are counted as multisets:
a value expected twice must be predicted twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extractor import values
from extractor.comparison import leaves
from extractor.schema import escape
from extractor.values import ValueField


@dataclass
class Counts:
    """True positives, false positives, false negatives, and the scores they give."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def __iadd__(self, other: Counts) -> Counts:
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn
        return self

    @property
    def precision(self) -> float:
        """The share of predicted values that are right: tp / (tp + fp), 0 when none."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        """The share of expected values found: tp / (tp + fn), 0 when none."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall; 0 when both are 0."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "support": self.tp + self.fn,
        }


def compare(expected: Any, predicted: Any, *, typed: Mapping[str, ValueField] | None = None) -> dict[str, Counts]:
    """Counts per field path for one document (``predicted`` None: nothing predicted).

    ``typed``: the task's value fields; their values compare as typed (``May 20, 2014`` and
    ``2014-05-20`` are one date, ``3 years`` and ``P3Y`` one duration).
    """
    gold = Counter(leaves(_typed(expected, typed)))
    pred = Counter(leaves(_typed(predicted, typed))) if predicted is not None else Counter()
    per_field: dict[str, Counts] = {}
    for leaf in gold.keys() | pred.keys():
        matched = min(gold[leaf], pred[leaf])
        counts = per_field.setdefault(leaf[0], Counts())
        counts += Counts(tp=matched, fp=pred[leaf] - matched, fn=gold[leaf] - matched)
    return per_field


def _typed(data: Any, fields: Mapping[str, ValueField] | None) -> Any:
    if not fields or data is None:
        return data
    as_text = values.apply(_strings(data, fields), dict(fields), values.Context())
    return as_text.data


def _strings(data: Any, fields: Mapping[str, ValueField], pointer: str = "") -> Any:
    """``data`` with the typed fields' values as text, so a label written either way is read the same."""
    if isinstance(data, Mapping):
        return {k: _strings(v, fields, f"{pointer}/{escape(str(k))}") for k, v in data.items()}
    if isinstance(data, list):
        return [_strings(v, fields, pointer) for v in data]
    if pointer in fields and data is not None and not isinstance(data, bool):
        return str(data)
    return data


def total(per_field: Mapping[str, Counts]) -> Counts:
    """Micro-average counts: the sum over fields."""
    summed = Counts()
    for counts in per_field.values():
        summed += counts
    return summed
