"""From the model's probability to how often a value is right: fitting, storing, scoring.

A raw confidence (:mod:`extractor.review.confidence`) ranks values well but is not a frequency:
a small model is often sure and wrong. :func:`fit` learns a monotone map from raw confidence to
the share of values that were right (isotonic regression, scipy's), on values whose answers
are known: the task's own pool, each line extracted without seeing itself (``extractor
calibrate``). The map is stored as ``calibration/<task>.json`` beside the task's schema and
applied to every result (``calibrated: true``).

One map for all values, and one per verdict of the pool (:mod:`extractor.review.agreement`:
the pool agrees with the value, labels it otherwise, never saw it) where the verdict held at
least ``MIN_STRATUM`` of the fitted values: a value the pool contradicts is then as sure as
values the pool contradicted turned out to be, which ranks it for review before an equally
probable value the pool agrees with.

Scores: :func:`ece` (expected calibration error over equal-width bins), :func:`catch_rate`
(the share of the wrong values found when the least confident share of values is reviewed)
and :func:`reliability` (the plot's points).
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from extractor.catalog.calibration import Calibration, Points
from extractor.catalog.calibration import load as load  # the map's reader, beside its writer (save)
from extractor.comparison import leaves, normalize
from extractor.storage import write_atomic

BINS = 10
MIN_STRATUM = 25  # fewer values with one verdict: they take the map of all values


def fit(
    raw: Sequence[float], correct: Sequence[bool], *, verdicts: Sequence[str] | None = None, **about: Any
) -> Calibration:
    """The isotonic map from ``raw`` confidences to being ``correct``; ``about``: the stored facts.

    ``verdicts``: the pool's verdict on each value; a verdict held by ``MIN_STRATUM`` values or more
    gets a map of its own.
    """
    if len(raw) != len(correct) or not raw or (verdicts is not None and len(verdicts) != len(raw)):
        raise ValueError("calibration needs at least one value, and a label (and a verdict, if any) for each")
    strata: dict[str, Points] = {}
    for kind in sorted(set(verdicts or ())):
        mine = [i for i, v in enumerate(verdicts or ()) if v == kind]
        if len(mine) >= MIN_STRATUM and len(mine) < len(raw):
            strata[kind] = _isotonic([raw[i] for i in mine], [correct[i] for i in mine])
    return Calibration(points=_isotonic(raw, correct), values=len(raw), strata=strata, **about)


def _isotonic(raw: Sequence[float], correct: Sequence[bool]) -> Points:
    from scipy.optimize import isotonic_regression  # type: ignore[import-untyped]

    tally: dict[float, list[float]] = {}
    for x, ok in zip(raw, correct, strict=True):
        slot = tally.setdefault(float(x), [0.0, 0.0])
        slot[0] += 1.0 if ok else 0.0
        slot[1] += 1.0
    xs = sorted(tally)  # equal raw values pooled: one point each, weighted by how many
    weights = [tally[x][1] for x in xs]
    fitted = isotonic_regression([tally[x][0] / tally[x][1] for x in xs], weights=weights).x
    # One point per block of equal fitted values, at the block's weighted mean raw confidence: the
    # map is linear between blocks, so it keeps the raw order (flat only beyond the outer blocks)
    # and the least confident values stay apart for review.
    points: list[tuple[float, float]] = []
    start = 0
    for end in range(1, len(xs) + 1):
        if end == len(xs) or fitted[end] != fitted[start]:
            block = range(start, end)
            mass = sum(weights[i] for i in block)
            center = sum(xs[i] * weights[i] for i in block) / mass
            points.append((center, min(1.0, max(0.0, float(fitted[start])))))
            start = end
    return tuple(points)


def save(calibration: Calibration, path: Path) -> None:
    """Write the map as JSON (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(calibration.as_dict(), ensure_ascii=False, indent=1) + "\n")


def label(expected: Any, predicted: Iterable[tuple[str, Any]]) -> list[bool]:
    """Whether each predicted ``(field path, value)`` is right: in the gold, in that field, not used up.

    Values compare as :mod:`extractor.jobs.metrics` does (normalized, a multiset per document).
    """
    left = Counter(leaves(expected))
    marks: list[bool] = []
    for path, value in predicted:
        leaf = (path, normalize(value))
        marks.append(left[leaf] > 0)
        left[leaf] -= 1
    return marks


def ece(confidences: Sequence[float], correct: Sequence[bool], *, bins: int = BINS) -> float:
    """Expected calibration error: the mean gap between confidence and accuracy over equal-width bins."""
    if not confidences:
        return 0.0
    gap = 0.0
    for _, mean, accuracy, count in reliability(confidences, correct, bins=bins):
        gap += count * abs(mean - accuracy)
    return gap / len(confidences)


def reliability(
    confidences: Sequence[float], correct: Sequence[bool], *, bins: int = BINS
) -> list[tuple[float, float, float, int]]:
    """Per non-empty bin: its lower edge, mean confidence, accuracy and count."""
    sums: dict[int, list[float]] = {}
    for c, ok in zip(confidences, correct, strict=True):
        b = min(bins - 1, max(0, int(c * bins)))
        slot = sums.setdefault(b, [0.0, 0.0, 0.0])
        slot[0] += c
        slot[1] += ok
        slot[2] += 1
    return [(b / bins, s[0] / s[2], s[1] / s[2], int(s[2])) for b, s in sorted(sums.items())]


def catch_rate(confidences: Sequence[float], correct: Sequence[bool], *, share: float = 0.2) -> float:
    """The share of wrong values among the least confident ``share`` of all values (1.0 when none is wrong).

    Ties are broken toward the wrong value's disadvantage: the figure is never flattered by order.
    """
    wrong = sum(not ok for ok in correct)
    if not wrong:
        return 1.0
    reviewed = math.ceil(share * len(confidences))
    ranked = sorted(zip(confidences, correct, strict=True), key=lambda p: (p[0], not p[1]))
    return sum(not ok for _, ok in ranked[:reviewed]) / wrong


def summary(confidences: Sequence[float], correct: Sequence[bool], *, share: float = 0.2) -> dict[str, Any]:
    """What ``extractor eval`` prints: ECE, the catch rate at ``share`` and its ceiling, accuracy, AUROC."""
    n, wrong = len(confidences), sum(not ok for ok in correct)
    return {
        "values": n,
        "wrong": wrong,
        "accuracy": (n - wrong) / n if n else 0.0,
        "mean_confidence": sum(confidences) / n if n else 0.0,
        "ece": ece(confidences, correct),
        "review_share": share,
        "catch_rate": catch_rate(confidences, correct, share=share),
        # Reviewing a share of the values cannot find more wrong ones than it holds.
        "catch_ceiling": min(1.0, math.ceil(share * n) / wrong) if wrong else 1.0,
        "auroc": auroc(confidences, correct),
    }


def auroc(confidences: Sequence[float], correct: Sequence[bool]) -> float | None:
    """The chance a right value is more confident than a wrong one (ties count half); None without both."""
    right = sorted(c for c, ok in zip(confidences, correct, strict=True) if ok)
    wrong = [c for c, ok in zip(confidences, correct, strict=True) if not ok]
    if not right or not wrong:
        return None
    above = 0.0
    for c in wrong:
        lower = bisect.bisect_left(right, c)
        upper = bisect.bisect_right(right, c)
        above += (len(right) - upper) + 0.5 * (upper - lower)
    return above / (len(right) * len(wrong))
