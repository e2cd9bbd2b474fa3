"""A task's calibration as the catalog reads it: ``calibration/<task>.json``, the map from raw confidence to right.

Written by ``extractor calibrate`` (:mod:`extractor.review.calibration` fits it, from the task's
pool); read here when the catalog loads, attached to the task, applied to every result's
confidences by the pipeline.
"""

from __future__ import annotations

import bisect
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extractor.errors import ConfigError

FORMAT = 1

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


def calibration_path(root: Path, name: str) -> Path:
    """Where a task's calibration lives: ``calibration/<task>.json`` under the catalog root."""
    return root / "calibration" / f"{name}.json"
