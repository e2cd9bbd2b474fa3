"""P5 with vLLM's own token-mask fill vs llguidance's thread pool (issue 28; ``extractor/vllm_plugins/masks.py``).

    EXTRACTOR_MASK_THREADS=0  python -m bench.mask_fill --per-task 50 --out mask-0.json
    EXTRACTOR_MASK_THREADS=16 python -m bench.mask_fill --per-task 50 --out mask-16.json

One engine per run (the plugin is loaded when the engine core starts), so each run's P5 compares
its own constrained and free sides: output tokens/s of the task schema and of the substring grammar
against free text of the same answers (``free_schema``, ``free_grounded``: each request's free twin
cut at its own constrained answer's length), and against free generation cut at the answers' mean
length (``free``: the method until 2026-12-04), greedy, ``max_tokens`` 128.
Per task (one batch of ``--per-task`` requests at a time) and every task mixed, 256 at once; each
side twice, in the order constrained, free, free, constrained (the first pass after the warm-up is
the slowest). On the GPU host: ``EXTRACTOR_MODEL=/tmp/dummy7b EXTRACTOR_LOAD_FORMAT=dummy`` as for
``bench.gpu_bench``; a dry run here: ``EXTRACTOR_ENGINE=scripted``. The pages these runs made
(``bench/results/mask_fill.md``, ``mask_levers.md``, the P5 sections of ``gpu.md``) were rendered by code
removed since (in git history at ffef660), as was ``--profile`` (py-spy of a pass per side: bf0fea1); each run's
JSON holds what they showed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import re
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import common, compact
from extractor import Extractor
from extractor.engines.base import GenerationRequest
from extractor.jobs.gold import GoldItem
from extractor.vllm_plugins import masks as vllm_masks

P5_MAX_TOKENS = 128


def capped(r: GenerationRequest) -> GenerationRequest:
    """The request as the pipeline sends it, its answer cut at P5's ``max_tokens``."""
    return dataclasses.replace(r, max_tokens=P5_MAX_TOKENS)


def request_key(request: GenerationRequest) -> str:
    """What pairs a constrained request with its free twin: its prompt (the same on every side)."""
    return repr(request.messages)


def free_as(lengths: Mapping[str, int] | int) -> Callable[[GenerationRequest], GenerationRequest]:
    """Each request without its constraint, cut at its own constrained answer's length (free text of the same answers),
    or at ``lengths`` tokens where it is one number (the mean-cut side).

    Random weights never end free text before the cap; real weights may (its tokens then count as generated).
    """

    def free(request: GenerationRequest) -> GenerationRequest:
        tokens = lengths if isinstance(lengths, int) else max(1, lengths[request_key(request)])
        return dataclasses.replace(request, json_schema=None, grammar=None, max_tokens=tokens)

    return free


async def answer_lengths(extractor: Extractor, work: Sequence[GoldItem], *, grounded: bool) -> dict[str, int]:
    """Each request's answer length in tokens (one untimed pass, task after task, as P5 runs them)."""
    lengths: dict[str, int] = {}
    for task_name in dict.fromkeys(i.task for i in work):
        task = extractor.task(task_name)
        requests = [capped(common.request(task, i.text, grounded=grounded)) for i in work if i.task == task_name]
        generations, _ = await common.generate_all(extractor.engine, requests)
        lengths.update((request_key(r), g.completion_tokens) for r, g in zip(requests, generations, strict=True))
    return lengths


async def mixed_pass(
    extractor: Extractor, work: list[GoldItem], *, grounded: bool = False, transform: Any = None
) -> dict[str, Any]:
    """Raw generation of ``work`` with every task mixed, 256 requests at once: tokens and seconds."""
    requests = [transform(common.request(extractor.task(i.task), i.text, grounded=grounded)) for i in work]
    generations, seconds = await common.generate_all(extractor.engine, requests, concurrency=256)
    return {
        "docs": len(generations),
        "seconds": seconds,
        "completion_tokens": sum(g.completion_tokens for g in generations),
    }


async def measure(per_task: int) -> dict[str, Any]:
    extractor, items, start_s = await common.started()
    settings = extractor.settings
    report: dict[str, Any] = {
        "mask_threads": vllm_masks.threads(),
        "engine_start_s": start_s,
        "machine": common.machine(),
        "model": str(settings.model),
        "load_format": settings.load_format,
        "lines_per_task": per_task,
        "speculative_tokens": settings.speculative_tokens,
        "vllm_args": settings.engine_arguments,  # EXTRACTOR_VLLM_ARGS: the lever a run tried
    }
    engine = extractor.engine
    tasks = sorted({i.task for i in items})
    work = common.jobs(items, tasks, per_task)

    try:
        warm = common.jobs(items, tasks, 4)
        await compact.raw_passes(engine, extractor, warm, grounded=True)
        await compact.raw_passes(engine, extractor, warm)
        # Each answer's length (untimed): the free twins of the same answers, and the old mean-cut free side
        lengths = {
            side: await answer_lengths(extractor, work, grounded=side == "grounded") for side in ("schema", "grounded")
        }
        matched = max(1, round(statistics.mean(lengths["schema"].values())))
        report["matched_tokens"] = matched
        # every constrained answer's length, as one digest per side: the same answers as another run's (greedy)
        report["answer_lengths_digest"] = {
            side: hashlib.sha256(json.dumps(sorted(found.items())).encode()).hexdigest()[:16]
            for side, found in lengths.items()
        }
        free_sides = {
            "free": free_as(matched),
            "free_schema": free_as(lengths["schema"]),
            "free_grounded": free_as(lengths["grounded"]),
        }
        for layout in ("per_task", "mixed"):
            passes: dict[str, list[dict[str, Any]]] = {side: [] for side in (*free_sides, "schema", "grounded")}
            for side in ORDER:
                free = free_sides.get(side)
                transform, grounded = (free, False) if free is not None else (capped, side == "grounded")
                busy: dict[str, Any] = {}
                with common.gpu_busy(busy):  # how much of the pass the GPU ran kernels (CUDA only)
                    if layout == "per_task":
                        row = await compact.raw_passes(engine, extractor, work, grounded=grounded, transform=transform)
                    else:
                        row = await mixed_pass(extractor, work, grounded=grounded, transform=transform)
                passes[side].append({**row, **busy})
            report[layout] = {side: _summed(rows) for side, rows in passes.items()}
            print(f"bench: mask threads {report['mask_threads']}, {layout}: {_line(report[layout])}", flush=True)
    finally:
        await extractor.aclose()
    return report


# Each constrained side and its free twin around it (A-B-B-A), the old mean-cut free side in the middle
_HALF = ("schema", "grounded", "free_schema", "free_grounded", "free")
ORDER = (*_HALF, *reversed(_HALF))


def _summed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    docs, seconds = sum(r["docs"] for r in rows), sum(r["seconds"] for r in rows)
    tokens = sum(r["completion_tokens"] for r in rows)
    summed = {"docs": docs, "seconds": seconds, "completion_tokens": tokens, "tok_s": tokens / seconds}
    if all("valid" in r for r in rows):  # answers valid under the task's schema (constrained sides)
        summed["valid"] = sum(r["valid"] for r in rows)
    if all("gpu_busy" in r for r in rows):  # weighted by each pass's seconds
        summed["gpu_busy"] = sum(r["gpu_busy"] * r["seconds"] for r in rows) / seconds
    return summed


def _line(layout: dict[str, Any]) -> str:
    free = layout["free"]["tok_s"]
    line = ", ".join(
        f"{side} {row['tok_s']:,.0f} tok/s ({row['tok_s'] / free:.2f})"
        + (f", GPU busy {row['gpu_busy']:.0%}" if "gpu_busy" in row else "")
        for side, row in layout.items()
    )
    same = ", ".join(
        f"{side} {layout[side]['tok_s'] / layout['free_' + side]['tok_s']:.2f}"
        for side in ("schema", "grounded")
        if "free_" + side in layout
    )
    return line + (f"; P5 against free text of the same answers: {same}" if same else "")


async def profile(per_task: int, folder: Path, *, idle: bool = False) -> str:
    """The mixed pass under py-spy, vLLM's engine core included (issue 58's item 4): each constrained side and
    its free twin of the same answers, ``PROFILED_PASSES`` times each, after the warm-up.

    Writes ``pyspy-p5-mixed-{side}.txt`` (raw) into ``folder`` and returns the summary: each pass's tok/s, then
    the engine core's threads (cores busy) and its main thread's busiest frames. ``idle``: waits sampled too
    (a thread's "cores" is then its share of the pass, and the frames it waits in show with the rest).
    """
    from bench.gpu_bench import SPY_RATE, profiled

    extractor, items, _ = await common.started()
    tasks = sorted({i.task for i in items})
    work = common.jobs(items, tasks, per_task)
    lines: list[str] = []
    try:
        warm = common.jobs(items, tasks, 4)
        await compact.raw_passes(extractor.engine, extractor, warm, grounded=True)
        await compact.raw_passes(extractor.engine, extractor, warm)
        lengths = {side: await answer_lengths(extractor, work, grounded=side == "grounded") for side in _CONSTRAINED}
        for side in (*_CONSTRAINED, *(f"free_{s}" for s in _CONSTRAINED)):
            constrained = side.removeprefix("free_")
            transform = capped if side == constrained else free_as(lengths[constrained])
            with profiled(folder / f"pyspy-p5-mixed-{side}.txt", subprocesses=True, idle=idle):
                row = _summed(
                    [
                        await mixed_pass(extractor, work, grounded=constrained == "grounded", transform=transform)
                        for _ in range(PROFILED_PASSES)
                    ]
                )
            tok_s = row["completion_tokens"] / row["seconds"]
            lines.append(f"== {side}: {tok_s:,.0f} tok/s, {row['docs']} requests in {row['seconds']:.2f} s")
            print(f"bench: {lines[-1]}", flush=True)
            raw = folder / f"pyspy-p5-mixed-{side}.txt"
            if raw.exists():  # none where py-spy is missing
                lines.append(engine_core(raw, row["seconds"] * SPY_RATE))
    finally:
        await extractor.aclose()
    return "\n".join(lines) + "\n"


_CONSTRAINED = ("schema", "grounded")
PROFILED_PASSES = 3  # a side's passes under one profile: enough samples at py-spy's rate


def engine_core(raw: Path, samples_per_core: float, top: int = 45) -> str:
    """A py-spy raw file cut to vLLM's engine core: each thread's cores busy, then its main thread's frames
    (inclusive) and leaves, as shares of the main thread's samples."""
    threads: Counter[str] = Counter()
    frames: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for line in raw.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if "EngineCore" not in stack or not count.isdigit():
            continue
        parts = stack.split(";")
        named = [p for p in parts if p.startswith("thread (")]
        thread = named[0].split(":", 1)[-1].strip().strip('"') if named else "?"
        threads[thread] += int(count)
        if thread == "MainThread":
            called = [re.sub(r":\d+\)$", ")", p) for p in parts if p.endswith(")")]
            for frame in dict.fromkeys(called):
                frames[frame] += int(count)
            if called:
                leaves[called[-1]] += int(count)
    main_samples = max(1, threads["MainThread"])
    return "\n".join(
        [
            *(f"thread {name}: {n / samples_per_core:.2f} cores" for name, n in threads.most_common(8)),
            "main thread, inclusive:",
            *(f"  {n / main_samples:6.1%} {frame[:160]}" for frame, n in frames.most_common(top)),
            "main thread, leaves:",
            *(f"  {n / main_samples:6.1%} {frame[:160]}" for frame, n in leaves.most_common(top // 2)),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-task", type=int, default=50)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", type=Path, help="a folder: the mixed pass per side under py-spy (item 4)")
    parser.add_argument("--idle", action="store_true", help="with --profile: threads' waits sampled too")
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        summary = asyncio.run(profile(args.per_task, args.profile, idle=args.idle))
        (args.profile / "pyspy-p5-mixed-summary.txt").write_text(summary, encoding="utf-8")
        print(summary)
        return 0
    report = asyncio.run(measure(args.per_task))
    if args.out:
        common.save(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
