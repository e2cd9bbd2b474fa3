"""Whether one setting's F1 beats another's beyond the noise of the cases: a paired bootstrap. Pure.

Two candidates measured on the same cases differ by what they read right and by which cases
happen to be in the sample. Resampling the cases with replacement, the same draw for both
(paired: the cases' difficulty cancels), and recomputing each micro F1 gives the difference's
distribution; its central 95 % is the interval. A gain whose interval holds 0 is noise: on
``landmark_slots``' 38 pool lines, 0.625 against 0.594 was one (`bench/results/tuning.md`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ROUNDS = 2000
LEVEL = 0.95

CaseCounts = tuple[int, int, int]  # one case's true positives, false positives and false negatives, all fields


@dataclass(frozen=True)
class Difference:
    """``F1(b) - F1(a)`` on the cases, and its paired-bootstrap interval."""

    delta: float
    low: float
    high: float

    @property
    def beyond_noise(self) -> bool:
        """True when the whole interval is above 0: ``b`` is better than ``a`` beyond the cases' noise."""
        return self.low > 0

    def shown(self) -> str:
        """``+0.031 [-0.012, +0.074]``."""
        return f"{self.delta:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def micro_f1(counts: Sequence[CaseCounts]) -> float:
    """Micro F1 of the cases' summed counts (0 when nothing was expected or predicted)."""
    tp = sum(c[0] for c in counts)
    wrong = sum(c[1] + c[2] for c in counts)
    return 2 * tp / (2 * tp + wrong) if tp else 0.0


def difference(
    a: Sequence[CaseCounts], b: Sequence[CaseCounts], *, rounds: int = ROUNDS, level: float = LEVEL, seed: int = 0
) -> Difference:
    """``F1(b) - F1(a)`` over the same cases (in the same order), with its paired-bootstrap interval."""
    if len(a) != len(b):
        raise ValueError(f"paired cases: {len(a)} against {len(b)}")
    delta = micro_f1(b) - micro_f1(a)
    if not a:
        return Difference(delta, delta, delta)
    left, right = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    draws = np.random.default_rng(seed).integers(0, len(a), size=(rounds, len(a)))
    deltas = _f1(right[draws].sum(axis=1)) - _f1(left[draws].sum(axis=1))
    tail = (1 - level) / 2
    low, high = np.quantile(deltas, [tail, 1 - tail])
    return Difference(delta, float(low), float(high))


def _f1(sums: np.ndarray) -> np.ndarray:
    tp, wrong = sums[:, 0], sums[:, 1] + sums[:, 2]
    denominator = 2 * tp + wrong
    return np.where(tp > 0, 2 * tp / np.maximum(denominator, 1), 0.0)
