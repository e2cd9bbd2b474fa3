"""``extractor eval``: run tasks over gold lines (:mod:`extractor.jobs.gold`) and score them.

Scores are in :mod:`extractor.jobs.metrics`. Rates are fractions between 0 and 1; the
ungrounded rate is None when no predicted value was checked against its text.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extractor.api import Extractor
from extractor.errors import EngineError, ExtractionFailed, ExtractorError
from extractor.jobs.gold import GoldItem
from extractor.jobs.metrics import Counts, compare, total
from extractor.jobs.progress import Progress
from extractor.options import OptionArgs
from extractor.results import Attempt, ExtractionResult
from extractor.review import calibration, fitting
from extractor.storage import write_atomic

# The review loop's targets (issue 23): calibrated within 5 points; the least sure 20 % hold 60 % of the errors.
ECE_TARGET = 0.05
CATCH_TARGET = 0.6


@dataclass
class Tally:
    """Everything the metrics are computed from, for one task or for all."""

    docs: int = 0
    valid: int = 0
    first_valid: int = 0
    repaired: int = 0
    attempted: int = 0
    attempts: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    values: int = 0  # predicted string values checked against the text
    ungrounded: int = 0
    fields: dict[str, Counts] = field(default_factory=dict)
    scored: list[tuple[float, bool]] = field(default_factory=list)  # (confidence, right) per value
    calibrated: int = 0  # docs whose confidences came through the task's calibration

    def add(
        self,
        result: ExtractionResult | None,
        attempts: Sequence[Attempt],
        counts: dict[str, Counts],
        scored: Sequence[tuple[float, bool]] = (),
    ) -> None:
        self.docs += 1
        self.scored.extend(scored)
        self.calibrated += result is not None and result.calibrated
        self.valid += result is not None
        # Valid with no re-ask: every attempt (one per chunk of a long text) was accepted.
        self.first_valid += result is not None and all(a.valid for a in attempts)
        self.repaired += any(a.repaired for a in attempts)
        self.attempted += bool(attempts)
        self.attempts += len(attempts)
        self.completion_tokens += sum(a.completion_tokens for a in attempts)
        self.prompt_tokens += sum(a.prompt_tokens for a in attempts)
        if result is not None:
            spans = [*result.spans, *result.removed]
            self.values += len(spans)
            # Not in the text as written: missing, or only a near (fuzzy) match.
            self.ungrounded += sum(s.status not in ("exact", "normalized") for s in spans)
        for name, c in counts.items():
            slot = self.fields.setdefault(name, Counts())
            slot += c

    def metrics(self, elapsed_s: float) -> dict[str, Any]:
        micro = total(self.fields)
        return {
            "docs": self.docs,
            **micro.as_dict(),
            "schema_valid_rate": _rate(self.valid, self.docs),
            "first_attempt_valid_rate": _rate(self.first_valid, self.docs),
            "repaired_rate": _rate(self.repaired, self.docs),
            "mean_attempts": self.attempts / self.attempted if self.attempted else 0.0,
            "ungrounded_rate": self.ungrounded / self.values if self.values else None,
            "docs_per_s": self.docs / elapsed_s if elapsed_s > 0 else 0.0,
            "output_tokens_per_doc": _rate(self.completion_tokens, self.docs),
            "prompt_tokens_per_doc": _rate(self.prompt_tokens, self.docs),
            "per_field": {name: c.as_dict() for name, c in sorted(self.fields.items())},
            "calibration": self.calibration(),
        }

    def calibration(self) -> dict[str, Any] | None:
        """How well confidences tell right values from wrong (None: no value had one)."""
        if not self.scored:
            return None
        confidences, right = [c for c, _ in self.scored], [ok for _, ok in self.scored]
        return {**calibration.summary(confidences, right), "calibrated_docs": self.calibrated}


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


@dataclass(frozen=True)
class Prediction:
    """What one gold line produced."""

    item: GoldItem
    result: ExtractionResult | None
    attempts: list[Attempt]
    error: str | None
    counts: dict[str, Counts]
    scored: list[tuple[float, bool]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """The line written to ``--out``."""
        micro = total(self.counts)
        return {
            "id": self.item.id,
            "line": self.item.line,
            "task": self.item.task,
            "text": self.item.text,
            "expected": self.item.expected,
            "predicted": self.result.data if self.result is not None else None,
            "error": self.error,
            "attempts": len(self.attempts),
            "tp": micro.tp,
            "fp": micro.fp,
            "fn": micro.fn,
            "confidences": self.result.confidences if self.result is not None else None,
            "calibrated": self.result.calibrated if self.result is not None else None,
        }


async def predict(extractor: Extractor, item: GoldItem, options: OptionArgs | None = None) -> Prediction:
    """Extract one gold line; a failed extraction is a prediction with no data.

    ``options`` are :meth:`Extractor.aextract`'s keyword arguments (temperature, max_tokens, ...).
    """
    result: ExtractionResult | None = None
    attempts: list[Attempt] = []
    error: str | None = None
    try:
        result = await extractor.aextract(item.task, item.text, **(options or {}))
        attempts = result.attempts
    except ExtractionFailed as failed:
        attempts, error = failed.attempts, str(failed)
    except EngineError:
        raise
    except ExtractorError as failed:
        error = str(failed)
    try:
        typed = extractor.task(item.task).values
    except ExtractorError:  # an unknown task: its error is the prediction's already
        typed = {}
    counts = compare(item.expected, result.data if result is not None else None, typed=typed)
    scored = [(m.confidence, m.right) for m in fitting.marks(item.expected, result)] if result is not None else []
    return Prediction(item, result, attempts, error, counts, scored)


async def evaluate(
    extractor: Extractor,
    items: Sequence[GoldItem],
    *,
    concurrency: int = 64,
    options: OptionArgs | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], list[Prediction]]:
    """Run every item (``concurrency`` at once) and return the report and the predictions."""
    await extractor.astart()  # the model's load time is not part of docs/s
    gate = asyncio.Semaphore(concurrency)
    if progress is not None:
        progress.start(total=len(items))

    async def one(item: GoldItem) -> Prediction:
        async with gate:
            prediction = await predict(extractor, item, options)
        if progress is not None:
            progress.update(done=1, errors=prediction.result is None)
        return prediction

    started = time.perf_counter()
    predictions = list(await asyncio.gather(*(one(item) for item in items)))
    elapsed = time.perf_counter() - started
    if progress is not None:
        progress.finish()
    return report(predictions, elapsed), predictions


def run(
    extractor: Extractor,
    items: Sequence[GoldItem],
    *,
    concurrency: int = 64,
    options: OptionArgs | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], list[Prediction]]:
    """Blocking :func:`evaluate` that closes the extractor at the end."""

    async def main() -> tuple[dict[str, Any], list[Prediction]]:
        try:
            return await evaluate(extractor, items, concurrency=concurrency, options=options, progress=progress)
        finally:
            await extractor.aclose()

    return asyncio.run(main())


def write_predictions(path: Path, predictions: Sequence[Prediction]) -> None:
    """One JSON line per gold line, in gold order, written atomically."""
    write_atomic(path, "".join(json.dumps(p.record(), ensure_ascii=False) + "\n" for p in predictions))


def report(predictions: Sequence[Prediction], elapsed_s: float) -> dict[str, Any]:
    """The metrics over all predictions, per task and per field (``task/path``)."""
    overall = Tally()
    tasks: dict[str, Tally] = {}
    for p in predictions:
        overall.add(p.result, p.attempts, {f"{p.item.task}{k}": c for k, c in p.counts.items()}, p.scored)
        tasks.setdefault(p.item.task, Tally()).add(p.result, p.attempts, p.counts, p.scored)
    # Each task's docs/s is over the whole run's time: they ran interleaved.
    return {
        **overall.metrics(elapsed_s),
        "elapsed_s": elapsed_s,
        "per_task": {name: t.metrics(elapsed_s) for name, t in sorted(tasks.items())},
    }


def report_text(result: dict[str, Any], *, fields: bool = False) -> str:
    """A short human report: the overall scores, then one line per task (and per field)."""
    ungrounded = result["ungrounded_rate"]
    lines = [
        f"{result['docs']} docs over {len(result['per_task'])} task(s) in {result['elapsed_s']:.1f} s "
        f"({result['docs_per_s']:.2f} docs/s)",
        f"micro P {result['precision']:.3f}  R {result['recall']:.3f}  F1 {result['f1']:.3f}  "
        f"(tp {result['tp']}, fp {result['fp']}, fn {result['fn']})",
        f"schema-valid {result['schema_valid_rate']:.1%}  first-attempt valid {result['first_attempt_valid_rate']:.1%}"
        f"  repaired {result['repaired_rate']:.1%}  mean attempts {result['mean_attempts']:.2f}",
        "ungrounded values "
        + (f"{ungrounded:.1%}" if ungrounded is not None else "n/a")
        + f"  output tokens/doc {result['output_tokens_per_doc']:.1f}"
        + f"  prompt tokens/doc {result['prompt_tokens_per_doc']:.0f}",
        "",
        f"{'task':32} {'docs':>5} {'P':>6} {'R':>6} {'F1':>6} {'valid':>7} {'1st ok':>7} {'attempts':>8}",
    ]
    for name, t in result["per_task"].items():
        lines.append(
            f"{name:32} {t['docs']:5d} {t['precision']:6.3f} {t['recall']:6.3f} {t['f1']:6.3f} "
            f"{t['schema_valid_rate']:7.1%} {t['first_attempt_valid_rate']:7.1%} {t['mean_attempts']:8.2f}"
        )
    lines += calibration_text(result.get("calibration"))
    if fields:
        lines += ["", f"{'field':48} {'support':>7} {'P':>6} {'R':>6} {'F1':>6}"]
        for name, f in result["per_field"].items():
            lines.append(f"{name:48} {f['support']:7d} {f['precision']:6.3f} {f['recall']:6.3f} {f['f1']:6.3f}")
    return "\n".join(lines)


def calibration_text(scores: Mapping[str, Any] | None) -> list[str]:
    """The calibration lines of the report: ECE, the catch rate at the review share, AUROC."""
    if not scores:
        return ["confidence: none (the engine gave no token probabilities)"]
    share, ceiling = scores["review_share"], scores["catch_ceiling"]
    source = "calibrated" if scores["calibrated_docs"] else "raw, not calibrated (run extractor calibrate)"
    auroc = f"{scores['auroc']:.3f}" if scores["auroc"] is not None else "n/a"
    return [
        f"confidence ({source}): {scores['values']} values, {scores['wrong']} wrong; "
        f"mean confidence {scores['mean_confidence']:.3f} vs accuracy {scores['accuracy']:.3f}",
        f"  ECE {scores['ece']:.3f} (target <= {ECE_TARGET})  "
        f"reviewing the least sure {share:.0%} of values catches {scores['catch_rate']:.1%} of the wrong ones "
        f"(target >= {CATCH_TARGET:.0%}; at most {ceiling:.1%} here)  AUROC {auroc}",
    ]
