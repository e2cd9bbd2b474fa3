"""An adapter trained on tasks' example pools: samples, recipe, the run and its manifest.

``extractor train`` and ``extractor tune --documents --train`` both train through :func:`train`. A
task read by field (:attr:`~extractor.catalog.tasks.Task.reads_by_field`) learns the requests
serving sends it, one field over a passage (:func:`field_tasks`); any other learns whole answers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extractor.adapters import manifest
from extractor.catalog.tasks import Task
from extractor.examples.pool import summarize
from extractor.passages import field_task
from extractor.training import data, trainer
from extractor.training.recipe import recipe

# A contract's field request is about 1,100 tokens (a 1,600-character passage, the instruction, hints)
FIELD_MAX_LENGTH = 2048


@dataclass(frozen=True)
class Training:
    """How to train (each None: from the pool's size, or the trainer's default)."""

    epochs: float | None = None
    rank: int | None = None
    limit: int | None = None  # at most this many samples per task
    held_out: float = 0.05
    batch_size: int = 8
    learning_rate: float = 2e-4
    max_length: int | None = None  # 2,048 tokens for a task read by field, else the trainer's
    seed: int = 0
    resume: bool = False


def field_tasks(task: Task) -> dict[str, Task]:
    """Each top-level field's task as serving asks a passage for it, no worked examples: what the adapter learns."""
    return {name: field_task(data.bare(task), name) for name in task.schema.get("properties", {})}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def train(
    tasks: Sequence[Task],
    out: Path,
    model_dir: Path,
    how: Training = Training(),
    *,
    exclude: Collection[str] = (),
    documents: Collection[str] = (),
    deadline: float | None = None,
    say: Callable[[str], None] = _say,
) -> dict[str, Any]:
    """One adapter for ``tasks`` saved in ``out`` with its manifest; the manifest's metrics.

    ``exclude``: texts never trained on (a gold file's); ``documents``: pool lines imported from
    these documents are left out (held out); ``deadline``: see :func:`extractor.training.trainer.train`.
    """
    kept: list[data.Sample] = []
    by_field = len(tasks) == 1 and tasks[0].reads_by_field
    for task in tasks:
        found, refused = data.samples(
            task, exclude=exclude, fields=field_tasks(task) if by_field else None, documents=documents
        )
        if refused:
            say(f"{task.name}: {len(refused)} line(s) refused:")
            for line in summarize([str(r) for r in refused]):
                say(f"  {line}")
        kept += found[: how.limit] if how.limit else found
    train_set, held_out = data.split(kept, held_out=how.held_out, seed=how.seed)
    plan = recipe(len(train_set), epochs=how.epochs, rank=how.rank)
    length = how.max_length or (FIELD_MAX_LENGTH if by_field else trainer.TrainConfig.max_length)
    config = plan.config(learning_rate=how.learning_rate, batch_size=how.batch_size, seed=how.seed, max_length=length)
    say(
        f"train: {len(train_set)} samples ({len(held_out)} held out) from {', '.join(t.name for t in tasks)}"
        f"{' read by field (one field over a passage a chat)' if by_field else ''} -> {out}; {plan.describe()}"
    )
    report = trainer.train(
        model_dir, train_set, held_out, out, config, resume=how.resume, progress=say, deadline=deadline
    )
    written = manifest.write(
        out,
        model_dir=model_dir,
        tasks=list(tasks),
        data_hash=data.digest(train_set),
        config=vars(config)
        | {"samples": len(train_set), "held_out": len(held_out), "held_out_lines": data.lines_by_task(held_out)},
        metrics=report.as_dict(),
        by_field=by_field,
    )
    return dict(written["metrics"])
