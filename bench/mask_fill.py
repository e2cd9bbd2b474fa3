"""P5 with vLLM's own token-mask fill vs llguidance's thread pool (issue 28; ``extractor/engines/vllm_masks.py``).

    EXTRACTOR_MASK_THREADS=0  python -m bench.mask_fill --per-task 50 --out mask-0.json
    EXTRACTOR_MASK_THREADS=16 python -m bench.mask_fill --per-task 50 --out mask-16.json
    python -m bench.mask_fill --render raw/mask-0.json raw/mask-16.json   # the table

One engine per run (the plugin is loaded when the engine core starts), so each run's P5 compares
its own constrained and free sides: output tokens/s of the task schema and of the substring grammar
against free generation cut at the constrained answers' mean length, greedy, ``max_tokens`` 128.
Per task (one batch of ``--per-task`` requests at a time) and every task mixed, 256 at once; each
side twice, in the order constrained, free, free, constrained (the first pass after the warm-up is
the slowest). On the GPU host: ``EXTRACTOR_MODEL=/tmp/dummy7b EXTRACTOR_LOAD_FORMAT=dummy`` as for
``bench.gpu_bench``; a dry run here: ``EXTRACTOR_ENGINE=scripted``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import common, compact
from bench.gpu_bench import P5_MAX_TOKENS, mixed_pass
from extractor import Extractor
from extractor.engines import vllm_masks

SIDES = ("schema", "grounded")


async def measure(per_task: int) -> dict[str, Any]:
    settings = common.settings()
    common.CONCURRENCY = settings.max_num_seqs
    extractor = Extractor(settings=settings)
    items = common.gold_items(extractor.catalog.names())
    started = time.perf_counter()
    await extractor.astart()
    report: dict[str, Any] = {
        "mask_threads": vllm_masks.threads(),
        "engine_start_s": time.perf_counter() - started,
        "machine": common.machine(),
        "model": str(settings.model),
        "load_format": settings.load_format,
        "per_task": per_task,
    }
    engine = extractor.engine
    tasks = sorted({i.task for i in items})
    work = common.jobs(items, tasks, per_task)

    def capped(r: Any) -> Any:
        return dataclasses.replace(r, max_tokens=P5_MAX_TOKENS)

    try:
        warm = common.jobs(items, tasks, 4)
        await compact.raw_passes(engine, extractor, warm, grounded=True)
        await compact.raw_passes(engine, extractor, warm)
        first = await compact.raw_passes(engine, extractor, work, transform=capped)
        matched = max(1, round(first["completion_tokens"] / first["docs"]))

        def free(r: Any) -> Any:
            return dataclasses.replace(r, json_schema=None, grammar=None, max_tokens=matched)

        report["matched_tokens"] = matched
        for layout in ("per_task", "mixed"):
            passes: dict[str, list[dict[str, Any]]] = {"free": [], "schema": [], "grounded": []}
            for side in ("schema", "grounded", "free", "free", "grounded", "schema"):
                transform, grounded = (free, False) if side == "free" else (capped, side == "grounded")
                if layout == "per_task":
                    row = await compact.raw_passes(engine, extractor, work, grounded=grounded, transform=transform)
                else:
                    row = await mixed_pass(extractor, work, grounded=grounded, transform=transform)
                passes[side].append(row)
            report[layout] = {side: _summed(rows) for side, rows in passes.items()}
            print(f"bench: mask threads {report['mask_threads']}, {layout}: {_line(report[layout])}", flush=True)
    finally:
        await extractor.aclose()
    return report


def _summed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    docs, seconds = sum(r["docs"] for r in rows), sum(r["seconds"] for r in rows)
    tokens = sum(r["completion_tokens"] for r in rows)
    return {"docs": docs, "seconds": seconds, "completion_tokens": tokens, "tok_s": tokens / seconds}


def _line(layout: dict[str, Any]) -> str:
    free = layout["free"]["tok_s"]
    return ", ".join(f"{side} {row['tok_s']:,.0f} tok/s ({row['tok_s'] / free:.2f})" for side, row in layout.items())


def render(paths: list[Path]) -> str:
    """The table of several runs: output tok/s per side and P5 (constrained / free) per run."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    lines = [
        "| mask fill | layout | free tok/s | schema tok/s | P5 schema | grounded tok/s | P5 grounded |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        who = f"llguidance pool, {run['mask_threads']} threads" if run["mask_threads"] else "vLLM's own"
        for layout in ("per_task", "mixed"):
            row = run[layout]
            free = row["free"]["tok_s"]
            lines.append(
                f"| {who} | {layout.replace('_', ' ')} | {free:,.0f} | {row['schema']['tok_s']:,.0f} | "
                f"**{row['schema']['tok_s'] / free:.2f}** | {row['grounded']['tok_s']:,.0f} | "
                f"**{row['grounded']['tok_s'] / free:.2f}** |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-task", type=int, default=50)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--render", type=Path, nargs="+", help="print the table of these runs' JSON files")
    args = parser.parse_args()
    if args.render:
        print(render(args.render))
        return 0
    report = asyncio.run(measure(args.per_task))
    if args.out:
        common.save(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
