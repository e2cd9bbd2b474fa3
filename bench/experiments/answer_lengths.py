"""How long the constrained answers are, and what that does to P5 as it was measured (issue 28).

    python -m bench.experiments.answer_lengths --per-task 50 --out bench/results/raw/answer-lengths-smollm2-cpu.json
    python -m bench.experiments.answer_lengths --render   # answer_lengths.md from raw/answer-lengths-*.json

P5 compares the output tokens/s of constrained answers with free generation on the same engine.
Until 2026-12-04 the free side was cut at the constrained answers' *mean* length, every free
request alike; a constrained answer is as long as it is. One task at a time (``bench.mask_fill``'s
"per task" layout: a batch of that task's requests, then the next task's), a batch lasts as many
decoding steps as its longest answer, while its free twin lasts the mean: where a step costs about
the same at any batch size (a GPU decoding a small model), the free side's tok/s is up to
(longest / mean) higher for the method alone. This measures the answers (the pipeline's first
attempt, greedy, ``max_tokens`` 128, the schema and the substring grammar) and that ceiling;
:func:`free_as` gives P5 its fair free side: each request's twin cut at its own answer's length.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.common import RESULTS
from bench.gpu_bench import answer_lengths

RUNS = sorted((RESULTS / "raw").glob("answer-lengths-*.json"))


def summary(per_task: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """Mean, median, 90th percentile and longest answer; the mean of each task's longest; mean / that."""
    every = sorted(n for lengths in per_task.values() for n in lengths)
    longest = statistics.mean(max(lengths) for lengths in per_task.values())
    mean = statistics.mean(every)
    return {
        "mean": mean,
        "median": statistics.median(every),
        "p90": every[int(0.9 * (len(every) - 1))],
        "max": every[-1],
        "per_task_longest": longest,
        "ceiling": mean / longest,
    }


async def measure(per_task: int) -> dict[str, Any]:
    extractor, items, start_s = await common.started()
    tasks = sorted({i.task for i in items})
    work = common.jobs(items, tasks, per_task)
    report: dict[str, Any] = {
        "machine": common.machine(),
        "model": str(extractor.settings.model),
        "load_format": extractor.settings.load_format,
        "lines_per_task": per_task,
        "engine_start_s": start_s,
    }
    try:
        for side, grounded in (("schema", False), ("grounded", True)):
            per: dict[str, list[int]] = {}
            for task in tasks:
                lengths = await answer_lengths(extractor, [i for i in work if i.task == task], grounded=grounded)
                per[task] = list(lengths.values())
            report[side] = {"per_task": per, **summary(per)}
            print(f"bench: {side}: {_line(report[side])}", flush=True)
    finally:
        await extractor.aclose()
    return report


def _line(row: Mapping[str, Any]) -> str:
    return (
        f"mean {row['mean']:.1f} tokens, median {row['median']:.0f}, p90 {row['p90']}, longest {row['max']}; "
        f"each task's longest {row['per_task_longest']:.1f} on average: ceiling {row['ceiling']:.2f}"
    )


def render(paths: Sequence[Path]) -> str:
    """``bench/results/answer_lengths.md``: the answers' lengths per run and the ceiling they put on the old P5."""
    lines = [
        "# How long constrained answers are: what P5 measured until 2026-12-04 (issue 28)",
        "",
        "`python -m bench.answer_lengths` (commands in the module's docstring): the pipeline's first attempt on "
        "SNIPS dev lines (the same lines as `bench.mask_fill`), greedy, `max_tokens` 128, one task's requests at "
        "once. P5 compared these with free text cut at their *mean* length. One task at a time, a batch lasts as "
        "many decoding steps as its longest answer, its free twin as many as the mean: where a step costs about "
        "the same at any batch size (the GPU decoding a model this size), the old method alone capped that "
        "layout's P5 near *ceiling* = mean / each task's longest, whatever the constraints cost. "
        "`bench.mask_fill` now also measures free text of the same answers (each request's twin cut at its own "
        "answer's length: `free_schema`, `free_grounded`).",
        "",
        "| run | model | side | mean | median | p90 | longest | each task's longest (mean) | ceiling |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        run = json.loads(path.read_text(encoding="utf-8"))
        machine = run["machine"]
        where = f"{machine.get('date')}, {machine.get('gpu') or str(machine.get('cores')) + ' CPU cores'}"
        name = "SmolLM2-135M-Instruct (the default)" if run["model"] == "default" else Path(run["model"]).name
        model = name + (", dummy weights" if run.get("load_format") == "dummy" else "")
        for side in ("schema", "grounded"):
            row = run[side]
            lines.append(
                f"| {where}, {run['lines_per_task']} lines per task | {model} | {side} | {row['mean']:.1f} | "
                f"{row['median']:.0f} | {row['p90']} | {row['max']} | {row['per_task_longest']:.1f} | "
                f"**{row['ceiling']:.2f}** |"
            )
    lines += [
        "",
        "## What it says",
        "",
        "- On the H200 (2026-12-03, `drafts.md`, the pool on, no drafts) SmolLM2's schema answers ran at 0.54 of",
        "  free text cut at the mean one task at a time, and this ceiling for its schema answers is 0.55: for",
        "  that model the gap measured one task at a time was the method's, not the constraint's. Its",
        "  substring grammar's 0.43 is below its ceiling of 0.58: there the grammar costs too. For the",
        "  7B-class dummy (the P5 figures' model) the answers' lengths were not recorded; the next GPU run of",
        "  `bench.mask_fill` times free text of the same answers beside the old side.",
        "- Mixed (256 requests at once, each finished one replaced) the longest answer matters only at the end",
        "  of a pass: that layout's figures stand closer to the constraints' own cost.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-task", type=int, default=50)
    parser.add_argument("--out", type=Path, help="where the raw JSON goes")
    parser.add_argument("--render", action="store_true", help="write bench/results/answer_lengths.md from raw/")
    args = parser.parse_args(argv)
    if args.render:
        target = RESULTS / "answer_lengths.md"
        target.write_text(render(RUNS), encoding="utf-8")
        print(target)
        return 0
    report = asyncio.run(measure(args.per_task))
    if args.out is not None:
        common.save(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
