"""``extractor tune TASK``: a task's settings chosen by measuring candidates on its own labelled lines.

DSPy's optimizers choose a program's demonstrations by scoring candidates against a metric on
labelled data; this chooses a task's settings the same way, with the engine that will serve it:

1. **Lines**: a sample of the task's pool cut into folds (:func:`extractor.review.fitting.pool_cases`,
   as ``extractor calibrate`` does): each line is extracted by the task with a pool that lacks its
   fold, so no line is ever its own worked example or hint, and every sampled line serves once.
2. **Candidates** (:func:`candidates`): the task as it is first, then how many worked examples
   (``k`` in 0, 3, 5), the pool's hints on and off, and the adapter on and off where it has one;
   last, each other model asked for (``--model``), with the settings that scored highest on the
   task's own (its best, not the simplest within noise: a base model shown no worked example is
   not the model at its best).
3. Each candidate extracts every line; its row holds micro F1 (the typed comparison of
   ``extractor eval``), the schema-valid rate and docs/s. Candidates start while the time budget
   lasts (the first always runs): the winner is chosen among those measured.
4. **The winner** (:func:`winner`): a setting is kept only where what it adds measures beyond the
   noise of the cases. Among the candidates whose F1 the best one does not beat beyond noise (a
   paired bootstrap over the cases at 95 %, :mod:`extractor.jobs.noise`), the simplest (fewer
   worked examples and hints in the prompt), then the faster. It is written to
   ``tuned/<task>.json`` (:mod:`extractor.catalog.tuned`) with the table and each candidate's
   interval, unless a dry run.
5. **By document with** ``--train``: an adapter trained on the pool's passages of the documents no
   case reads (:mod:`extractor.jobs.adapting`) serves the chosen readings on the same cases
   (:func:`adapter_candidate`), kept only beyond noise too (:func:`with_adapter`).
6. **Calibration follows the choice**: the winner's answers on the same held-out lines (each value's
   raw confidence, whether it was right, the pool's verdict) fit the task's calibration, as
   ``extractor calibrate`` would on those lines (:func:`extractor.review.fitting.fit`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from extractor.catalog.tasks import Task
from extractor.catalog.tuned import READING, tuned_path
from extractor.errors import ConfigError, EngineError, ExtractionFailed, ExtractorError
from extractor.examples import reading
from extractor.examples.pool import PoolSettings
from extractor.jobs import noise
from extractor.jobs.evaluation import Tally
from extractor.jobs.metrics import compare
from extractor.results import ExtractionResult
from extractor.review import fitting
from extractor.review.fitting import Case, Mark
from extractor.schema import unescape
from extractor.storage import write_atomic

K_CHOICES = (0, 3, 5)
TIE = 0.005  # F1 within this of the best is a tie, which the faster candidate wins
# One extraction of a short text while tuning, on 2 CPU cores with SmolLM2: CLUENER's 6 candidates x 100
# lines took 775 s with the engine's start (bench/results/tuning.md)
CPU_SECONDS_PER_LINE = 1.1


@dataclass(frozen=True)
class Candidate:
    """One way to serve the task: a label and the ``x-extractor`` settings it writes."""

    label: str
    settings: Mapping[str, Any]

    def apply(self, task: Task) -> Task:
        """``task`` served this way (its pool, already lacking the case's fold, kept)."""
        chosen = dict(self.settings)
        settings = task.settings
        if "examples_from_pool" in chosen:
            block = chosen["examples_from_pool"]
            base = settings.examples_from_pool or PoolSettings()
            pool = replace(base, **block) if isinstance(block, Mapping) else (base if block else None)
            settings = replace(settings, examples_from_pool=pool)
        if "model" in chosen:
            settings = replace(settings, model=str(chosen["model"]))
        if isinstance(chosen.get("chunking"), Mapping) and settings.chunking is not None:
            settings = replace(settings, chunking=replace(settings.chunking, **chosen["chunking"]))
        served = replace(task, settings=settings)
        if isinstance(chosen.get(READING), Mapping):  # the case's learned reading, each field under its variant
            variants = chosen[READING]
            served = replace(
                served,
                reading={f: reading.variant(variants[f], o) if f in variants else o for f, o in task.reading.items()},
            )
        if chosen.get("adapter") is False or "model" in chosen:  # an adapter is trained for one model
            served = replace(served, adapter=None)
        elif isinstance(chosen.get("adapter"), str):  # tune's own (--train), under the catalog root
            folder = task.schema_path.parent.parent / str(chosen["adapter"])
            served = replace(served, adapter=folder, adapter_by_field=task.reads_by_field)
        return served


@dataclass
class Row:
    """What one candidate measured."""

    candidate: Candidate
    metrics: dict[str, Any] = field(default_factory=dict)
    # Each value's raw confidence and whether it was right: the chosen row calibrates the task.
    marks: list[Mark] = field(default_factory=list)
    # Each case's (tp, fp, fn) over all fields, in the cases' order: what the noise of a difference is drawn from.
    cases: list[noise.CaseCounts] = field(default_factory=list)
    # Per top-level field, each case's (tp, fp, fn): a field read on its own is chosen on its own counts.
    fields: dict[str, list[noise.CaseCounts]] = field(default_factory=dict)
    # F1 against the best row's, with its interval (set by :func:`winner`).
    against_best: noise.Difference | None = None
    # Cases measured before the time budget ran out, when it did (the row is shown, not chosen).
    stopped: int | None = None

    @property
    def f1(self) -> float:
        return float(self.metrics.get("f1", 0.0))

    def record(self) -> dict[str, Any]:
        keys = ("docs", "f1", "precision", "recall", "schema_valid_rate", "docs_per_s", "elapsed_s")
        interval = {}
        if self.against_best is not None:
            d = self.against_best
            interval = {"f1_vs_best": [round(d.delta, 4), round(d.low, 4), round(d.high, 4)]}
        return (
            {"label": self.candidate.label, "settings": dict(self.candidate.settings)}
            | {k: self.metrics[k] for k in keys if k in self.metrics}
            | interval
            | ({"stopped_after": self.stopped} if self.stopped is not None else {})
        )


def candidates(task: Task, *, ks: Sequence[int] = K_CHOICES) -> list[Candidate]:
    """The task as it is, then each setting worth measuring for it (nothing already measured twice)."""
    pool = task.settings.examples_from_pool
    current: dict[str, Any] = {}
    if task.pool is not None and len(task.pool):
        current["examples_from_pool"] = {"k": pool.k, "hints": pool.hints} if pool is not None else False
    found = [Candidate("as it is", current)]
    if task.pool is not None and len(task.pool):
        for k in ks:
            for hints in (True, False):
                settings = {"examples_from_pool": {"k": k, "hints": hints}}
                found.append(Candidate(f"k={k}, hints {'on' if hints else 'off'}", settings))
    if task.adapter is not None:
        found += [Candidate(f"{c.label}, no adapter", {**c.settings, "adapter": False}) for c in list(found)]
    return _unique(found)


def _unique(found: Sequence[Candidate]) -> list[Candidate]:
    """``found`` without a candidate whose settings an earlier one already measures."""
    unique: dict[str, Candidate] = {}
    for c in found:
        unique.setdefault(json.dumps(c.settings, sort_keys=True), c)
    return list(unique.values())


WHOLE_ANSWERS = "whole answers"


def reading_candidates(task: Task, current: Mapping[str, str] | None = None) -> list[Candidate]:
    """By document: the task as it reads now, then every field under each reading variant, then whole answers.

    A run reads every field under one variant: the fields of a document are read on their own
    (``chunking.by_field``), so one run per variant measures each field under it, and
    :func:`by_field` then chooses per field. ``current``: each field's variant in the tuned file.
    """
    if not task.reads_by_field or not task.reading:
        raise ConfigError(
            f"task {task.name!r} does not read its documents field by field (a pool imported from labelled "
            "documents turns it on, unless the schema or tuned/<task>.json says chunking.by_field false): "
            "tune by document measures each field's reading"
        )
    fields = list(task.reading)
    now = {f: str((current or {}).get(f, "learned")) for f in fields}
    found = [Candidate("as it is", {READING: now})]
    found += [Candidate(f"every field {v}", {READING: {f: v for f in fields}}) for v in reading.VARIANTS]
    found.append(Candidate(WHOLE_ANSWERS, {"chunking": {"by_field": False}}))
    return _unique(found)


@dataclass(frozen=True)
class FieldChoice:
    """One field's reading: its F1 under each run, the run chosen, and its gain over the task as it reads now."""

    name: str
    f1: dict[str, float]  # run label -> the field's F1
    chosen: str
    gain: noise.Difference


def by_field(rows: Sequence[Row]) -> tuple[Row, list[FieldChoice]]:
    """Each field's reading chosen on its own counts, and the winner: those readings, or whole answers.

    A field leaves the first row's reading (the task as it is) only for a run that beats it on
    that field beyond noise (a paired bootstrap over the documents at 95 %); whole answers win
    only where they beat the chosen readings, summed per document, beyond noise too.
    """
    measured = [r for r in rows if r.stopped is None and READING in r.candidate.settings]
    if not measured:
        return winner(rows), []
    base = measured[0]
    chosen: dict[str, str] = {}
    choices: list[FieldChoice] = []
    summed: list[noise.CaseCounts] = [(0, 0, 0)] * len(base.cases)
    for name in base.fields:
        best = max(measured, key=lambda r: (noise.micro_f1(r.fields[name]), -measured.index(r)))
        gain = noise.difference(base.fields[name], best.fields[name])
        pick = best if gain.beyond_noise else base
        chosen[name] = str(pick.candidate.settings[READING].get(name, "learned"))
        f1 = {r.candidate.label: round(noise.micro_f1(r.fields[name]), 4) for r in measured}
        choices.append(FieldChoice(name, f1, pick.candidate.label, gain))
        summed = [(a + x, b + y, c + z) for (a, b, c), (x, y, z) in zip(summed, pick.fields[name], strict=True)]
    label = "per field: " + ", ".join(f"{n} {v}" for n, v in chosen.items())
    tp, fp, fn = (sum(c[i] for c in summed) for i in range(3))
    metrics = {
        "docs": len(summed),
        "f1": round(noise.micro_f1(summed), 4),
        "precision": round(tp / (tp + fp), 4) if tp + fp else 0.0,
        "recall": round(tp / (tp + fn), 4) if tp + fn else 0.0,
    }
    combined = Row(Candidate(label, {READING: chosen}), metrics, list(base.marks), summed)
    whole = next((r for r in rows if r.candidate.label == WHOLE_ANSWERS and r.stopped is None), None)
    if whole is not None and len(whole.cases) == len(summed):
        whole.against_best = noise.difference(summed, whole.cases)
        if whole.against_best.beyond_noise:
            return whole, choices
    return combined, choices


def adapter_folder(name: str) -> str:
    """Where ``tune --train`` trains a task's adapter, under the catalog root: ``tuned/<task>.adapter``."""
    return f"tuned/{name}.adapter"


def adapter_candidate(chosen: Row, folder: str) -> Candidate:
    """The chosen settings served through the adapter ``tune --train`` trained (``folder``: :func:`adapter_folder`)."""
    return Candidate(f"{chosen.candidate.label}, adapter", {**chosen.candidate.settings, "adapter": folder})


def with_adapter(chosen: Row, row: Row) -> Row:
    """``row`` (the chosen settings with the adapter) where it beats ``chosen`` beyond noise, else ``chosen``.

    The two are measured on the same documents: a paired bootstrap over them at 95 %
    (:mod:`extractor.jobs.noise`), its interval set on ``row``. A run the budget cut short is never kept.
    """
    if row.stopped is not None or not row.cases or len(row.cases) != len(chosen.cases):
        return chosen
    row.against_best = noise.difference(chosen.cases, row.cases)
    return row if row.against_best.beyond_noise else chosen


def field_table(choices: Sequence[FieldChoice]) -> str:
    """Each field's F1 under each run, the run chosen and its gain over the task as it is, with its interval."""
    if not choices:
        return ""
    runs = list(choices[0].f1)
    lines = [
        "| field | " + " | ".join(runs) + " | chosen | gain [95 %] |",
        "|---|" + "---|" * (len(runs) + 2),
    ]
    for c in choices:
        cells = " | ".join(f"{c.f1[r]:.3f}" for r in runs)
        lines.append(f"| {c.name} | {cells} | {c.chosen} | {c.gain.shown()} |")
    return "\n".join(lines)


Extract = Callable[[Task, str], Awaitable[ExtractionResult]]


async def measure(
    extract: Extract,
    cases: Sequence[Case],
    candidate: Candidate,
    *,
    concurrency: int = 64,
    progress: Callable[[int], None] | None = None,
    deadline: float | None = None,
) -> Row:
    """Every case extracted as ``candidate`` serves it, scored against its labels.

    ``deadline`` (``time.perf_counter()``): no case starts after it, and the cases still running at
    it are stopped; the row then says how many were measured (a run cut short is never chosen).
    """
    gate = asyncio.Semaphore(concurrency)
    tally = Tally()
    marks: list[Mark] = []
    per_case: list[noise.CaseCounts] = [(0, 0, 0)] * len(cases)
    fields: dict[str, list[noise.CaseCounts]] = {name: [(0, 0, 0)] * len(cases) for name in _fields(cases)}
    ran = 0

    async def one(index: int, case: Case) -> None:
        nonlocal ran
        async with gate:
            if deadline is not None and time.perf_counter() > deadline:
                return
            task = candidate.apply(case.task)
            result: ExtractionResult | None = None
            attempts: list[Any] = []
            try:
                result = await extract(task, case.text)
                attempts = list(result.attempts)
            except EngineError:
                raise
            except ExtractionFailed as failed:
                attempts = list(failed.attempts)
            except ExtractorError:
                pass
            counts = compare(case.expected, result.data if result is not None else None, typed=task.values)
            ran += 1
            tally.add(result, attempts, counts)
            found = counts.values()
            per_case[index] = (sum(c.tp for c in found), sum(c.fp for c in found), sum(c.fn for c in found))
            for path, c in counts.items():
                top = unescape(path.split("/")[1]) if path.count("/") else path  # a pointer: "a~1b" is "a/b"
                if top in fields:
                    tp, fp, fn = fields[top][index]
                    fields[top][index] = (tp + c.tp, fp + c.fp, fn + c.fn)
            if result is not None:
                marks.extend(fitting.marks(case.expected, result, task))
        if progress is not None:
            progress(1)

    started = time.perf_counter()
    jobs = [asyncio.ensure_future(one(i, c)) for i, c in enumerate(cases)]
    left = None if deadline is None else max(0.0, deadline - started)
    done, running = await asyncio.wait(jobs, timeout=left) if jobs else (set(), set())
    for job in running:  # the budget is spent: a case still being read is not waited for
        job.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    for job in done:
        job.result()  # an engine failure stops tune
    elapsed = time.perf_counter() - started
    metrics = {**tally.metrics(elapsed), "elapsed_s": round(elapsed, 1)}
    return Row(candidate, metrics, marks, per_case, fields, stopped=ran if ran < len(cases) else None)


def _fields(cases: Sequence[Case]) -> list[str]:
    """The top-level fields of the cases' task."""
    return list((cases[0].task.schema.get("properties") or {}) if cases else {})


async def tune(
    extract: Extract,
    cases: Sequence[Case],
    options: Sequence[Candidate],
    *,
    budget_s: float | None = None,
    concurrency: int = 64,
    on_row: Callable[[Row], None] | None = None,
    models: Sequence[str] = (),
    start: Callable[[Task], Awaitable[None]] | None = None,
) -> list[Row]:
    """Measure ``options`` in order while the budget lasts (the first always); the rows measured.

    ``models``: other models to try last, each with the settings that scored highest on the task's own model.
    ``start``: readies what serves a candidate's task (another model's engine) before its clock starts.
    """
    rows: list[Row] = []
    started = time.perf_counter()
    queue = list(options)
    while queue:
        spent = time.perf_counter() - started
        if rows and budget_s is not None and spent + spent / len(rows) > budget_s:
            break  # the next one would not end within the budget
        candidate = queue.pop(0)
        if start is not None and cases:
            await start(candidate.apply(cases[0].task))
        deadline = started + budget_s if budget_s is not None else None
        row = await measure(extract, cases, candidate, concurrency=concurrency, deadline=deadline)
        rows.append(row)
        if on_row is not None:
            on_row(row)
        if not queue and models:
            best = highest(rows).candidate
            queue = [Candidate(f"{best.label}, model {m}", {**best.settings, "model": m}) for m in models]
            models = ()
    return rows


def highest(rows: Sequence[Row]) -> Row:
    """The row of the highest F1 (the first measured among equals), a row the budget cut short only if all were."""
    rows = [r for r in rows if r.stopped is None] or list(rows[:1])
    return max(rows, key=lambda r: (r.f1, -rows.index(r)))


def winner(rows: Sequence[Row]) -> Row:
    """The simplest candidate the best one does not beat beyond noise; then the fastest; then the first measured.

    Each row's difference from the best (F1 and its paired-bootstrap interval) is set on it.
    Rows measured without per-case counts compare by F1 alone, within :data:`TIE`.
    """
    rows = [r for r in rows if r.stopped is None] or list(rows[:1])  # a row the budget cut short is not chosen
    best = highest(rows)
    close = []
    for r in rows:
        if r.cases and len(r.cases) == len(best.cases):
            r.against_best = noise.difference(best.cases, r.cases)
            if r is best or r.against_best.high >= 0:  # the best's gain over r is not beyond noise
                close.append(r)
        elif r.f1 >= best.f1 - TIE:
            close.append(r)
    return min(close, key=lambda r: (simplicity(r.candidate), -float(r.metrics.get("docs_per_s", 0.0)), rows.index(r)))


def simplicity(candidate: Candidate) -> int:
    """How much a candidate adds to each prompt: worked examples (1) and the pool's hints (1)."""
    block = candidate.settings.get("examples_from_pool")
    if not isinstance(block, Mapping):
        return 0
    return int(int(block.get("k", PoolSettings().k)) > 0) + int(bool(block.get("hints", False)))


def table(rows: Sequence[Row], chosen: Row | None = None) -> str:
    """The measured rows as a Markdown table, the chosen one marked."""
    lines = [
        "| candidate | F1 | F1 - best [95 %] | P | R | valid | docs/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m = r.metrics
        mark = " **(chosen)**" if r is chosen else ""
        if r.stopped is not None:
            mark += f" (budget spent after {r.stopped} of {len(r.cases)})"
        interval = r.against_best.shown() if r.against_best is not None else ""
        lines.append(
            f"| {r.candidate.label}{mark} | {r.f1:.3f} | {interval} | {m.get('precision', 0):.3f} "
            f"| {m.get('recall', 0):.3f} | {m.get('schema_valid_rate', 0):.1%} | {m.get('docs_per_s', 0):.2f} |"
        )
    return "\n".join(lines)


def write(
    root: Path,
    task: Task,
    rows: Sequence[Row],
    chosen: Row,
    *,
    lines: int,
    folds: int,
    fields: Sequence[FieldChoice] = (),
) -> Path:
    """``tuned/<task>.json``: the chosen settings (what the catalog reads) and the table they won.

    ``fields``: by document, each field's reading as :func:`by_field` chose it (``lines``: documents).
    """
    path = tuned_path(root, task.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    body: dict[str, Any] = {
        "x-extractor": dict(chosen.candidate.settings),
        "chosen": chosen.candidate.label,
        "lines": lines,
        "folds": folds,
        "task_version": task.version or task.name,
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "candidates": [r.record() for r in rows],
    }
    if fields:
        body["by"] = "document"
        body["fields"] = [
            {"field": c.name, "f1": c.f1, "chosen": c.chosen, "gain": [c.gain.delta, c.gain.low, c.gain.high]}
            for c in fields
        ]
    write_atomic(path, json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    return path


def plan_text(
    task: Task,
    options: Sequence[Candidate],
    *,
    lines: int,
    seconds_per_line: float | None = None,
    models: Sequence[str] = (),
    preparing: Sequence[str] = (),
) -> str:
    """What ``tune`` would measure, and about how long it would take (``seconds_per_line``: measured here).

    ``models``: other models tried last with the winning settings, a candidate each; ``preparing``:
    those of them converted first (packaged weights not prepared here), within the budget.
    """
    runs = (len(options) + len(models)) * lines
    if seconds_per_line is not None:
        took = f", about {runs * seconds_per_line / 60:.0f} min"
    else:
        took = f", about {runs * CPU_SECONDS_PER_LINE / 60:.0f} min on 2 CPU cores with the default model"
    return (
        f"`extractor tune {task.name}` would measure {len(options)} candidate settings "
        f"({'; '.join(c.label for c in options)})"
        + (f", then the winner on {', '.join(models)}" if models else "")
        + (f" (after preparing {', '.join(preparing)}: about a minute each, within the budget)" if preparing else "")
        + f" on {lines} pool lines held out in folds: {runs} extractions{took}"
    )
