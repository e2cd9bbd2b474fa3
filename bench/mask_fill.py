"""P5 with vLLM's own token-mask fill vs llguidance's thread pool (issue 28; ``extractor/engines/vllm_masks.py``).

    EXTRACTOR_MASK_THREADS=0  python -m bench.mask_fill --per-task 50 --out mask-0.json
    EXTRACTOR_MASK_THREADS=16 python -m bench.mask_fill --per-task 50 --out mask-16.json
    python -m bench.mask_fill --render    # bench/results/mask_fill.md from raw/mask-fill-{0,16}.json

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
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import common, compact
from bench.common import RESULTS
from bench.gpu_bench import capped, free_at, mixed_pass
from extractor import Extractor
from extractor.engines import vllm_masks

RUNS = (RESULTS / "raw" / "mask-fill-0.json", RESULTS / "raw" / "mask-fill-16.json")
# P1 (`bench.gpu_bench engine --per-task 100 --parts p1`) with EXTRACTOR_MASK_THREADS 0 and 16, one host, one call
P1_RUNS = (RESULTS / "raw" / "gpu-p1-pool0.json", RESULTS / "raw" / "gpu-p1-pool16.json")


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
        "lines_per_task": per_task,
        "speculative_tokens": settings.speculative_tokens,
        "speculative_method": settings.speculative_method,
    }
    engine = extractor.engine
    tasks = sorted({i.task for i in items})
    work = common.jobs(items, tasks, per_task)

    try:
        warm = common.jobs(items, tasks, 4)
        await compact.raw_passes(engine, extractor, warm, grounded=True)
        await compact.raw_passes(engine, extractor, warm)
        first = await compact.raw_passes(engine, extractor, work, transform=capped)
        matched = max(1, round(first["completion_tokens"] / first["docs"]))
        free = free_at(matched)
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
        if run.get("speculative_tokens"):
            who += f"; drafts: {run['speculative_method']}, {run['speculative_tokens']}"
        for layout in ("per_task", "mixed"):
            row = run[layout]
            free = row["free"]["tok_s"]
            lines.append(
                f"| {who} | {layout.replace('_', ' ')} | {free:,.0f} | {row['schema']['tok_s']:,.0f} | "
                f"**{row['schema']['tok_s'] / free:.2f}** | {row['grounded']['tok_s']:,.0f} | "
                f"**{row['grounded']['tok_s'] / free:.2f}** |"
            )
    return "\n".join(lines)


def p1_table(paths: Sequence[Path] = P1_RUNS) -> str:
    """P1 (``extractor batch`` against raw vLLM on the same 700 lines twice) with each mask fill, docs/s."""
    lines = [
        "| mask fill | grounded: `extractor batch` | raw vLLM | P1 "
        "| grounding off: `extractor batch` | raw vLLM | P1 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        p1 = json.loads(path.read_text(encoding="utf-8"))["p1"]
        rate = {
            k: p1[k]["docs"] / p1[k]["seconds"] for k in ("extractor", "raw", "extractor_ungrounded", "raw_ungrounded")
        }
        who = "llguidance pool, 16 threads" if "pool16" in path.name else "vLLM's own"
        lines.append(
            f"| {who} | {rate['extractor']:.0f} | {rate['raw']:.0f} | **{rate['extractor'] / rate['raw']:.2f}** | "
            f"{rate['extractor_ungrounded']:.0f} | {rate['raw_ungrounded']:.0f} | "
            f"**{rate['extractor_ungrounded'] / rate['raw_ungrounded']:.2f}** |"
        )
    return "\n".join(lines)


def markdown(paths: list[Path]) -> str:
    """``bench/results/mask_fill.md``: the runs, how they were made, what they say."""
    first = json.loads(paths[0].read_text(encoding="utf-8"))
    machine = first["machine"]
    return "\n".join(
        [
            "# Token masks: vLLM's own fill vs llguidance's thread pool (issue 28)",
            "",
            f"{machine.get('date')}, one {machine.get('gpu', 'GPU')}, vLLM {machine.get('vllm')}, "
            f"{machine.get('cores')} host cores; "
            "7B-class dummy weights (`bench.gpu_bench model`), guidance backend, greedy, `max_tokens` 128. "
            f"{first['per_task']['free']['docs'] // 2} SNIPS dev lines (50 per intent); "
            "each side twice (constrained, free, free, constrained), "
            "one engine per row (`EXTRACTOR_MASK_THREADS` 0 and 16: the plugin is loaded when the engine "
            f"core starts). Free text is cut at the constrained answers' mean length ({first['matched_tokens']} "
            "tokens), so P5 compares the same prefill and the same output length. `python -m bench.mask_fill` "
            "(commands: `bench/gpu/README.md`); rendered by `python -m bench.mask_fill --render`.",
            "",
            render(paths),
            "",
            "## What it says",
            "",
            "- For the task schema the token masks were most of what constraints cost (one task at a time, the",
            "  seconds over free text fell from 4.1 to 1.1; for the substring grammar from 3.9 to 2.6).",
            "  vLLM 0.26 fills them on its engine",
            "  core's main thread, one sequence after another below 129 structured sequences in a step, while",
            "  the sampler waits; llguidance's Rust pool fills a step's masks in one call at any batch size.",
            "  One task at a time (50 sequences) the schema's output went 1.82x faster (P5 0.40 -> 0.71), the",
            "  substring grammar's 1.25x (0.34 -> 0.42); every task mixed, 256 at once, 1.38x and 1.32x",
            "  (0.36 -> 0.50, 0.28 -> 0.37): above 128 sequences vLLM's 8 Python threads of 16 sequences each",
            "  were not enough either. Free generation is the same in both engines (6,885 vs 7,052 tok/s).",
            "- A third engine with vLLM's own fill, under py-spy, gave the baseline again (0.38 / 0.37 per task,",
            "  0.38 / 0.31 mixed); its profile (17 MB) did not come back: over the transfer limit, and the host",
            "  was gone before it could be compressed.",
            "- What is left: the substring grammar's mask costs more per token (0.25 ms on 2 cores here,",
            "  `grammar_mask.md`, against about 0.1 ms for a schema) and it is compiled per request; each",
            "  matcher is still advanced by its token one after another (`update_from_output`). P5 >= 0.9",
            "  is not reached.",
            "- The masks are the same either way (`tests/test_vllm_masks.py` compares them row by row, with",
            "  speculative drafts too: a row per draft position), so answers do not change.",
            "  `EXTRACTOR_MASK_THREADS=16` turns it on (on `vllm serve` too, where extractor is installed).",
            "",
            "## P1 with the pool",
            "",
            "The same host, one call, one engine per row (2026-12-03, `EXTRACTOR_MASK_THREADS=0|16 python3 -m",
            "bench.gpu_bench engine --per-task 100 --parts p1`; 700 SNIPS dev lines twice, 256 at once,",
            "temperature 0.1), docs/s:",
            "",
            p1_table(),
            "",
            "- Everything got faster with the pool: `extractor batch` 1.20x grounded and 1.86x with grounding",
            "  off, raw vLLM 1.29x and 2.28x. P1 fell (0.78 -> 0.73, 0.82 -> 0.67) because raw vLLM gained",
            "  more: what is left between them is extractor's own work, on the event loop of the process that",
            "  also runs vLLM's front end (the prompt stage alone timed 2.6-3.0 s of wall time in these runs,",
            "  against 7 us a prompt computed alone on 2 CPU cores).",
            "- Still off by default: the latency figures at 1, 16 and 256 clients were not re-run with it (that",
            "  call failed: the staging lacked the PDF library the HTTP service now imports; `stage.sh` brings",
            "  it now).",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-task", type=int, default=50)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--render", action="store_true", help="write bench/results/mask_fill.md from the raw runs")
    args = parser.parse_args()
    if args.render:
        out = RESULTS / "mask_fill.md"
        out.write_text(markdown(list(RUNS)), encoding="utf-8")
        print(out)
        return 0
    report = asyncio.run(measure(args.per_task))
    if args.out:
        common.save(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
