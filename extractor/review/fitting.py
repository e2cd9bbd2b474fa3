"""``extractor calibrate``: fit a task's calibration on texts whose answers are known, never seen by the model.

Where the labelled texts come from, by how the task is served:

* **worked examples from the pool** (retrieval, hints): the pool itself, cross-fitted. A sample
  of its lines is cut into folds; each fold is extracted with a pool that lacks that fold, so no
  line is shown itself as an example or hint (what a new text would meet).
* **an adapter**: the lines ``extractor train`` held out from training (its manifest lists them):
  the adapter saw every other line and would be sure of them.
* ``--gold FILE``: any labelled file, for either.

Each value of each answer is marked right or wrong against the known answer, and given the
pool's verdict on it (:mod:`extractor.review.agreement`, from the pool the text was extracted
with); the raw confidences, the marks and the verdicts fit the isotonic maps
(:func:`extractor.review.calibration.fit`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from extractor.catalog.calibration import Calibration
from extractor.catalog.tasks import Task
from extractor.constraints import wrapping
from extractor.errors import ConfigError, EngineError, ExtractorError
from extractor.examples import reading
from extractor.examples.importing import LabelledDocument
from extractor.examples.pool import Example, ExamplePool
from extractor.grounding import field_path, scalar_leaves
from extractor.results import ExtractionResult
from extractor.review import agreement, calibration

DEFAULT_LINES = 400
DEFAULT_FOLDS = 5


@dataclass(frozen=True)
class Case:
    """One labelled text, and the task (its pool without the text's fold) that extracts it."""

    task: Task
    text: str
    expected: Any
    document: str | None = None  # a labelled document's id (by document): its pool lines' ``source``


class Mark(NamedTuple):
    """One value of an answer: its confidence, whether it was right, and the pool's verdict on it."""

    confidence: float
    right: bool
    verdict: str = agreement.OTHER


def marks(expected: Any, result: ExtractionResult, task: Task | None = None) -> list[Mark]:
    """A :class:`Mark` for every value of ``result`` that has a confidence, in document order.

    ``task``: the task as it extracted the text, whose pool gives the verdicts (None: ``other``).
    """
    pairs = [(p, v) for p, v in scalar_leaves(result.data) if p in result.confidences]
    labels = calibration.label(expected, [(field_path(p), v) for p, v in pairs])
    found = agreement.of_task(task, result.data) if task is not None else {}
    return [
        Mark(result.confidences[p], ok, found.get(p, agreement.OTHER)) for (p, _), ok in zip(pairs, labels, strict=True)
    ]


def without(pool: ExamplePool, drop: set[int], *, skip: frozenset[str]) -> ExamplePool:
    """``pool`` less the examples at the ``drop`` indices (its index and hints rebuilt; ``skip``: ungrounded fields)."""
    from extractor.examples.lexicon import Lexicon
    from extractor.examples.selection import Selector

    kept = tuple(e for i, e in enumerate(pool.examples) if i not in drop)
    lexicon = Lexicon.build((e.output for e in kept), skip=skip)
    texts = {e.text.strip(): i for i, e in enumerate(kept)}
    return replace(pool, examples=kept, selector=Selector([e.text for e in kept]), _texts=texts, lexicon=lexicon)


def pool_cases(task: Task, *, lines: int = DEFAULT_LINES, folds: int = DEFAULT_FOLDS, seed: int = 0) -> list[Case]:
    """A sample of the pool's lines, each extracted by the task with a pool lacking its fold."""
    if task.pool is None or not len(task.pool):
        raise ConfigError(f"task {task.name!r} has no example pool to calibrate on: pass --gold FILE")
    chosen = random.Random(seed).sample(range(len(task.pool)), min(lines, len(task.pool)))
    folds = max(2, min(folds, len(chosen)))
    cases: list[Case] = []
    for fold in range(folds):
        held = set(chosen[fold::folds])
        served = replace(task, pool=without(task.pool, held, skip=task.ungrounded), calibration=None)
        shown = [task.pool.examples[i] for i in sorted(held)]
        cases += [Case(served, e.text, wrapping.unwrap(e.output, task.wrapped)) for e in shown]
    return cases


def document_cases(
    task: Task, documents: Sequence[LabelledDocument], *, count: int, folds: int = DEFAULT_FOLDS, seed: int = 0
) -> list[Case]:
    """A sample of whole labelled documents, each extracted with a pool lacking its fold's documents.

    The fold's documents' passages leave the pool (their lines' ``source``), and the reading is
    learned again from what is left (:mod:`extractor.examples.reading`): no document is read with
    what its own labels taught. ``task.reading`` of each case is that pure lesson.
    """
    chosen = random.Random(seed).sample(range(len(documents)), min(count, len(documents)))
    if not chosen:
        raise ConfigError(f"task {task.name!r}: no labelled document to tune on")
    folds = max(2, min(folds, len(chosen)))
    cases: list[Case] = []
    for fold in range(folds):
        shown = [documents[i] for i in chosen[fold::folds]]
        held = {d.id for d in shown}
        served = replace(task, calibration=None)
        if task.pool is not None:
            drop = {i for i, e in enumerate(task.pool.examples) if e.source is not None and e.source.document in held}
            pool = without(task.pool, drop, skip=task.ungrounded)
            served = replace(served, pool=pool, reading=reading.of_schema(pool.examples, task.schema) or {})
        cases += [Case(served, d.text, d.expected, d.id) for d in shown]
    return cases


def example_cases(task: Task, examples: Sequence[Example]) -> list[Case]:
    """Labelled texts extracted by the task as it is (an adapter's held-out lines, a gold file)."""
    served = replace(task, calibration=None)
    return [Case(served, e.text, wrapping.unwrap(e.output, task.wrapped)) for e in examples]


async def collect(
    extract: Callable[[Task, str], Any],
    cases: Sequence[Case],
    *,
    concurrency: int = 64,
    progress: Callable[[int], None] | None = None,
) -> list[Mark]:
    """Extract every case (``extract(task, text)``, awaitable) and mark each value; failures count no value."""
    gate = asyncio.Semaphore(concurrency)

    async def one(case: Case) -> list[Mark]:
        async with gate:
            try:
                result: ExtractionResult = await extract(case.task, case.text)
            except EngineError:
                raise
            except ExtractorError:
                found: list[Mark] = []
            else:
                found = marks(case.expected, result, case.task)
        if progress is not None:
            progress(1)
        return found

    done = await asyncio.gather(*(one(c) for c in cases))
    return [pair for found in done for pair in found]


def fit(pairs: Sequence[Mark], *, task: Task, model: str, source: str) -> Calibration:
    """The calibration of ``task`` from marked raw confidences, with its scores before and after (in sample)."""
    if len(pairs) < 20:
        raise ConfigError(
            f"task {task.name!r}: only {len(pairs)} values to calibrate on; at least 20 are needed (more lines)"
        )
    raw = [m.confidence for m in pairs]
    right = [m.right for m in pairs]
    verdicts = [m.verdict for m in pairs]
    fitted = calibration.fit(
        raw,
        right,
        verdicts=verdicts,
        adapter=task.adapter is not None,
        model=model,
        task_version=task.version or task.name,
    )
    mapped = [fitted(m.confidence, m.verdict) for m in pairs]
    scores = {
        "source": source,
        "raw": calibration.summary(raw, right),
        "calibrated_in_sample": calibration.summary(mapped, right),
        "verdicts": {
            v: {"values": len(mine), "accuracy": sum(mine) / len(mine), "own_map": v in fitted.strata}
            for v in sorted(set(verdicts))
            for mine in [[m.right for m in pairs if m.verdict == v]]
        },
    }
    return replace(fitted, scores=scores)


def own_cases(task: Task, *, lines: int = DEFAULT_LINES, folds: int = DEFAULT_FOLDS, seed: int = 0) -> list[Case]:
    """The task's own labelled lines it did not learn from: its adapter's held-out lines, else its pool cross-fitted."""
    if task.adapter is not None:
        return held_out_cases(task)
    return pool_cases(task, lines=lines, folds=folds, seed=seed)


def held_out_cases(task: Task) -> list[Case]:
    """The adapter's held-out lines, extracted by the task with a pool that lacks them (its hints too)."""
    examples = held_out_examples(task)
    texts = {e.text.strip() for e in examples}
    served = task
    if task.pool is not None:
        drop = {i for i, e in enumerate(task.pool.examples) if e.text.strip() in texts}
        served = replace(task, pool=without(task.pool, drop, skip=task.ungrounded))
    return example_cases(served, examples)


def held_out_examples(task: Task) -> list[Example]:
    """The pool lines ``extractor train`` kept out of the task's adapter (its manifest lists them)."""
    from extractor.adapters import manifest
    from extractor.examples.pool import check_line

    assert task.adapter is not None
    numbers = set((manifest.read(task.adapter).get("config") or {}).get("held_out_lines", {}).get(task.name) or ())
    if not numbers or task.pool is None:
        raise ConfigError(
            f"{task.adapter}: the adapter lists no pool lines it did not train on, and it would be sure of the "
            "others: pass --gold FILE (labelled texts it never saw), retrain with --held-out, or calibrate the "
            "task served without it (EXTRACTOR_ADAPTER_SERVING=off)"
        )
    found: list[Example] = []
    with task.pool.path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number in numbers:
                try:
                    found.append(check_line(raw, validator=task.validator, ungrounded=task.ungrounded))
                except ValueError:
                    continue  # the line changed since training
    return found
