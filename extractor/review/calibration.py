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
import itertools
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extractor.errors import ConfigError
from extractor.jobs.metrics import leaves, normalize

FORMAT = 1
BINS = 10
MIN_STRATUM = 25  # fewer values with one verdict: they take the map of all values

Points = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Calibration:
    """A monotone, piecewise-linear map from raw confidence to the chance of being right.

    ``points`` are ``(raw, calibrated)`` pairs with ``raw`` increasing, one per block of the
    isotonic fit (at the block's mean raw confidence); between them the map is linear, beyond
    them flat. ``strata``: a map of the same kind per pool verdict that had enough values.
    ``adapter`` says whether it was fitted on the task served with its adapter: the map applies
    to that serving only.
    """

    points: Points
    values: int = 0
    adapter: bool = False
    model: str = ""
    task_version: str = ""
    scores: dict[str, Any] = field(default_factory=dict)
    strata: dict[str, Points] = field(default_factory=dict)

    def __call__(self, raw: float, verdict: str | None = None) -> float:
        """The chance of being right of a value of ``raw`` confidence, given the pool's ``verdict`` on it."""
        points = self.strata.get(verdict, self.points) if verdict is not None else self.points
        xs = [p[0] for p in points]
        i = bisect.bisect_left(xs, raw)
        if i == 0:
            return points[0][1]
        if i == len(xs):
            return points[-1][1]
        (x0, y0), (x1, y1) = points[i - 1], points[i]
        return y0 if x1 == x0 else y0 + (y1 - y0) * (raw - x0) / (x1 - x0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "method": "isotonic, per pool verdict" if self.strata else "isotonic",
            "values": self.values,
            "adapter": self.adapter,
            "model": self.model,
            "task_version": self.task_version,
            "scores": self.scores,
            "points": [list(p) for p in self.points],
            "strata": {v: [list(p) for p in points] for v, points in self.strata.items()},
        }


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
    from extractor.jobs.journal import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(calibration.as_dict(), ensure_ascii=False, indent=1) + "\n")


def load(path: Path) -> Calibration:
    """Read a map written by :func:`save`; :class:`ConfigError` naming the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        points = _points(data["points"])
        strata = {str(v): _points(p) for v, p in (data.get("strata") or {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(
            f"{path}: not a calibration written by `extractor calibrate` ({error}); run it again"
        ) from None
    return Calibration(
        points=points,
        values=int(data.get("values") or 0),
        adapter=bool(data.get("adapter")),
        model=str(data.get("model") or ""),
        task_version=str(data.get("task_version") or ""),
        scores=dict(data.get("scores") or {}),
        strata=strata,
    )


def _points(raw: Any) -> Points:
    points = tuple((float(x), float(y)) for x, y in raw)
    if not points:
        raise ValueError("no points")
    if any(b[0] < a[0] for a, b in itertools.pairwise(points)) or not all(0.0 <= y <= 1.0 for _, y in points):
        raise ValueError("points must rise in raw confidence and stay within 0..1")
    return points


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
