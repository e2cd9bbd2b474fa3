"""P5 with vLLM's own token-mask fill vs llguidance's thread pool (issue 28; ``extractor/vllm_plugins/masks.py``).

    EXTRACTOR_MASK_THREADS=0  python -m bench.mask_fill --per-task 50 --out mask-0.json
    EXTRACTOR_MASK_THREADS=16 python -m bench.mask_fill --per-task 50 --out mask-16.json
    python -m bench.mask_fill --render    # bench/results/mask_fill.md from raw/mask-fill-{0,16}.json

One engine per run (the plugin is loaded when the engine core starts), so each run's P5 compares
its own constrained and free sides: output tokens/s of the task schema and of the substring grammar
against free text of the same answers (``free_schema``, ``free_grounded``: each request's free twin
cut at its own constrained answer's length, ``bench/answer_lengths.py``), and against free
generation cut at the answers' mean length (``free``: the method until 2026-12-04), greedy,
``max_tokens`` 128.
Per task (one batch of ``--per-task`` requests at a time) and every task mixed, 256 at once; each
side twice, in the order constrained, free, free, constrained (the first pass after the warm-up is
the slowest). On the GPU host: ``EXTRACTOR_MODEL=/tmp/dummy7b EXTRACTOR_LOAD_FORMAT=dummy`` as for
``bench.gpu_bench``; a dry run here: ``EXTRACTOR_ENGINE=scripted``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import common, compact
from bench.common import RESULTS
from bench.gpu_bench import answer_lengths, capped, free_as, free_at, mixed_pass, profiled
from extractor.vllm_plugins import masks as vllm_masks

RUNS = tuple(RESULTS / "raw" / f"mask-fill-{n}.json" for n in ("0", "16", "16-skip"))
# runs with free text of the same answers (``free_schema``, ``free_grounded``)
SAME_RUNS = tuple(sorted((RESULTS / "raw").glob("mask-fill-same-*.json")))
# P1 (`bench.gpu_bench engine --per-task 100 --parts p1`) with EXTRACTOR_MASK_THREADS 0 and 16, one host, one
# call; then, on another host, 16 with vLLM's grammar check per request (BENCH_VLLM_RECHECK=1) and skipped
P1_RUNS = tuple(RESULTS / "raw" / f"gpu-p1-{n}.json" for n in ("pool0", "pool16", "recheck", "skip"))


# the mask levers, one staging A-B-C-A on the H200 (``mask_levers.md``): one run per lever, numbered in order
LEVER_RUNS = sorted(
    (RESULTS / "raw").glob("mask-fill-levers-*.json"), key=lambda p: int(re.findall(r"-(\d+)-", p.name)[0])
)


def lever(run: dict[str, Any]) -> str:
    """What a run changed from the engine as shipped (the pool of 16 threads on CUDA)."""
    named = []
    if run.get("mask_ahead"):
        named.append("masks ahead (`EXTRACTOR_MASK_AHEAD=1`)")
    if run.get("mask_staging"):
        named.append("kept pinned staging (`EXTRACTOR_MASK_STAGING=1`)")
    if run.get("replicas", 1) > 1:
        named.append(f"{run['replicas']} engines (`EXTRACTOR_ENGINE_REPLICAS`)")
    if run.get("mask_threads") != 16:
        named.append(f"a pool of {run['mask_threads']} threads")
    return ", ".join(named) or "as shipped"


def _lever_rates(layout: dict[str, Any]) -> str:
    schema, grounded = layout["schema"]["tok_s"], layout["grounded"]["tok_s"]
    twins = layout["free_schema"]["tok_s"], layout["free_grounded"]["tok_s"]
    return (
        f"{layout['free']['tok_s']:,.0f} | {schema:,.0f} | **{schema / twins[0]:.2f}** "
        f"| {grounded:,.0f} | **{grounded / twins[1]:.2f}**"
    )


def lever_table(paths: list[Path]) -> list[str]:
    """One row per run: free, schema and grounded tok/s and P5 against free text of the same answers, both layouts."""
    runs = [(p, json.loads(p.read_text(encoding="utf-8"))) for p in paths]
    first = runs[0][1]["answer_lengths_digest"] if runs else {}
    lines = [
        "| # | run | per task: free tok/s | schema tok/s | P5 schema | grounded tok/s | P5 grounded "
        "| mixed: free tok/s | schema tok/s | P5 schema | grounded tok/s | P5 grounded "
        "| schema answers valid | answers' digest = run 1's | engine start s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for number, (path, run) in enumerate(runs, 1):
        same = run["answer_lengths_digest"] == first
        valid = f"{run['per_task']['schema']['valid']} / {run['per_task']['schema']['docs']}"
        lines.append(
            f"| {number} | {lever(run)} (`raw/{path.name}`) | {_lever_rates(run['per_task'])} "
            f"| {_lever_rates(run['mixed'])} "
            f"| {valid} | {'yes' if same else '**no**'} | {run['engine_start_s']:.0f} |"
        )
    return lines


def _who(threads: int, check: str | None) -> str:
    """A run's label: the mask fill, and whether vLLM checked each request's grammar again."""
    who = f"llguidance pool, {threads} threads" if threads else "vLLM's own"
    return who + ("; vLLM's grammar check skipped" if check == "skipped" else "")


async def measure(per_task: int) -> dict[str, Any]:
    extractor, items, start_s = await common.started()
    settings = extractor.settings
    report: dict[str, Any] = {
        "mask_threads": vllm_masks.threads(),
        "vllm_grammar_check": common.grammar_check(),
        "grammar_form": common.grammar_form(),
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
            "free": free_at(matched),
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
ORDER = (
    "schema",
    "grounded",
    "free_schema",
    "free_grounded",
    "free",
    "free",
    "free_grounded",
    "free_schema",
    "grounded",
    "schema",
)


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


def _busy(layout: dict[str, Any]) -> str:
    """The share of each pass the GPU ran kernels (NVML), constrained sides and their twins; — before it was kept."""
    sides = ("schema", "free_schema", "grounded", "free_grounded")
    if not all("gpu_busy" in layout[side] for side in sides):
        return "—"
    return " / ".join(f"{layout[side]['gpu_busy']:.0%}" for side in sides)


def tries_a_lever(run: dict[str, Any]) -> bool:
    """Whether a run changed the engine from the one shipped (``EXTRACTOR_VLLM_ARGS``, replicas, the mask levers)."""
    lever = run.get("replicas", 1) > 1 or bool(run.get("mask_ahead")) or bool(run.get("mask_staging"))
    return bool(run.get("vllm_args")) or lever


def _levers(run: dict[str, Any]) -> str:
    """The engine arguments a run added (``EXTRACTOR_VLLM_ARGS``), as a label's tail."""
    extra = run.get("vllm_args") or {}
    engines = f"; {run['replicas']} engines on the GPU" if run.get("replicas", 1) > 1 else ""
    engines += "; the next step's masks filled ahead (`EXTRACTOR_MASK_AHEAD=1`)" if run.get("mask_ahead") else ""
    if run.get("mask_staging"):
        engines += "; masks staged through kept pinned buffers (`EXTRACTOR_MASK_STAGING=1`)"
    return engines + "".join(f"; `{k}`: `{json.dumps(v)}`" for k, v in extra.items())


def same_answers(paths: Sequence[Path]) -> str:
    """P5 against free text of the same answers (each free twin cut at its own answer's length), per run."""
    lines = [
        "| mask fill | layout | schema tok/s | its free twin | P5 schema | grounded tok/s | its free twin "
        "| P5 grounded | P5s against free cut at the mean | GPU busy: schema, twin, grounded, twin |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
    for run in sorted(runs, key=tries_a_lever):  # as shipped first
        for layout in ("per_task", "mixed"):
            row = run[layout]
            if "free_schema" not in row:
                continue
            rates = {k: row[k]["tok_s"] for k in row}
            who = _who(run["mask_threads"], run.get("vllm_grammar_check")) + _levers(run)
            lines.append(
                f"| {who} | {layout.replace('_', ' ')} "
                f"| {rates['schema']:,.0f} | {rates['free_schema']:,.0f} "
                f"| **{rates['schema'] / rates['free_schema']:.2f}** "
                f"| {rates['grounded']:,.0f} | {rates['free_grounded']:,.0f} "
                f"| **{rates['grounded'] / rates['free_grounded']:.2f}** "
                f"| {rates['schema'] / rates['free']:.2f} / {rates['grounded'] / rates['free']:.2f} "
                f"| {_busy(row)} |"
            )
    return "\n".join(lines)


def render(paths: list[Path]) -> str:
    """The table of several runs: output tok/s per side and P5 (constrained / free) per run."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    lines = [
        "| mask fill | layout | free tok/s | schema tok/s | P5 schema | grounded tok/s | P5 grounded |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        who = _who(run["mask_threads"], run.get("vllm_grammar_check"))
        if run.get("speculative_tokens"):
            who += f"; drafts: {run['speculative_method']}, {run['speculative_tokens']}"
        lines += _p5_rows(who, run)
    return "\n".join(lines)


def _p5_rows(label: str, run: dict[str, Any]) -> list[str]:
    """A run's two rows (per task, mixed): free, schema and grounded tok/s, P5 against free cut at the mean."""
    rows = []
    for layout in ("per_task", "mixed"):
        row = run[layout]
        free = row["free"]["tok_s"]
        rows.append(
            f"| {label} | {layout.replace('_', ' ')} | {free:,.0f} | {row['schema']['tok_s']:,.0f} | "
            f"**{row['schema']['tok_s'] / free:.2f}** | {row['grounded']['tok_s']:,.0f} | "
            f"**{row['grounded']['tok_s'] / free:.2f}** |"
        )
    return rows


def p1_table(paths: Sequence[Path] = P1_RUNS) -> str:
    """P1 (``extractor batch`` against raw vLLM on the same 700 lines twice) with each mask fill, docs/s."""
    lines = [
        "| mask fill | grounded: `extractor batch` | raw vLLM | P1 "
        "| grounding off: `extractor batch` | raw vLLM | P1 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        run = json.loads(path.read_text(encoding="utf-8"))
        p1 = run["p1"]
        rate = {
            k: p1[k]["docs"] / p1[k]["seconds"] for k in ("extractor", "raw", "extractor_ungrounded", "raw_ungrounded")
        }
        start = run.get("start", {})
        threads = start.get("mask_threads", 0 if "pool0" in path.name else 16)
        who = _who(threads, start.get("vllm_grammar_check"))
        lines.append(
            f"| {who} | {rate['extractor']:.0f} | {rate['raw']:.0f} | **{rate['extractor'] / rate['raw']:.2f}** | "
            f"{rate['extractor_ungrounded']:.0f} | {rate['raw_ungrounded']:.0f} | "
            f"**{rate['extractor_ungrounded'] / rate['raw_ungrounded']:.2f}** |"
        )
    return "\n".join(lines)


def same_answers_section(paths: Sequence[Path] = SAME_RUNS) -> list[str]:
    """Why the free side changed (``bench/results/answer_lengths.md``), and the runs measured since."""
    lines = [
        "## Free text of the same answers (the method since 2026-12-04)",
        "",
        "The rows above compare constrained answers with free text cut at their *mean* length. One task at a",
        "time a batch lasts as long as its longest answer, its free twin as long as the mean: SmolLM2's real",
        "answers (`answer_lengths.md`) average 20-21 tokens where each task's longest averages 35-38, so where a",
        "step costs about the same at any batch size that layout's P5 could not pass 0.55-0.58 whatever the",
        "constraints cost (SmolLM2's schema row in `drafts.md`: 0.54). `python -m bench.mask_fill` now also",
        "times each request's free twin cut at its own answer's length (`free_schema`, `free_grounded`: the",
        "issue's 'free generation of the same answers'), A-B-B-A around each constrained side.",
        "",
    ]
    if not paths:
        return [*lines, "No GPU run with it yet (2026-12-04: that session's device time went to the runs below).", ""]
    return [*lines, same_answers(paths), "", *SAME_FINDINGS]


# What the runs of `raw/mask-fill-same-*.json` said (2026-12-04, second session of the day)
SAME_FINDINGS = [
    "2026-12-04, one H200 (16 host cores), vLLM 0.26.0, the 7B-class dummy, `--per-task 50`, the pool of 16",
    "threads; one engine per row pair. The first two pairs ran back to back on one start of the machine, the",
    "last two on a second (free text one task at a time 6,944 tok/s there against 6,996: comparable). The",
    "levers went in through `EXTRACTOR_VLLM_ARGS` (new: any of vLLM's engine arguments, over the service's).",
    "",
    "- **As shipped**: P5 against free text of the same answers **0.78** (schema) / **0.87** (grounded) one task",
    "  at a time, 50 at once, and **0.57** / **0.61** with every task mixed, 256 at once. The free twins of the",
    "  grounded answers run at 0.67-0.73 of the mean cut's tok/s: answers of unequal length leave a batch",
    "  part empty towards its end, free or not; the mean cut hid that, charging it to the grammar.",
    "- **CUDA graphs captured up to 2,048 tokens a step** (`compilation_config.max_cudagraph_capture_size`;",
    "  vLLM's default 512): nothing (0.74 / 0.87, 0.54 / 0.62). The grounded pass's steps outside CUDA graphs",
    "  (the profile below) are not where its time goes.",
    "- **vLLM's multiprocess executor** (`distributed_executor_backend: mp`: the model runner in a worker",
    "  process, the engine core's thread left the scheduler and the masks): free text mixed 1.09x (15,439",
    "  vs 14,182 tok/s), the constrained sides not (7,476 / 6,609): P5 mixed 0.50 / 0.53, per task 0.82 / 0.87.",
    "- **Async scheduling off** (`async_scheduling: false`): free text 0.65x per task and 0.61x mixed, the",
    "  constrained sides 0.70x per task and 0.77x (schema) / 0.85x (grounded) mixed. Async scheduling gives",
    "  constrained decoding part of its overlap: 1.2-1.4x where free text gets 1.55-1.6x.",
    "",
    "Why, in vLLM 0.26's source (`vllm/v1/engine/core.py`, `step_with_batch_queue`): a step whose batch",
    "holds structured requests cannot fill its masks before the previous step's tokens are known",
    "(`pending_structured_output_tokens`: its sampling is deferred). The engine core launches step N+1's",
    "forward pass, blocks on step N's tokens, advances every grammar (`update_from_output`, `accept_tokens`),",
    "fills N+1's masks, and only then launches N+1's sampling; step N+2 is scheduled and its inputs prepared",
    "after that. The forward pass overlaps the grammars' work, but the next step's scheduling and input",
    "preparation (the engine core's largest shares in the profile below: `schedule` 65 and `execute_model` 145",
    "of 398 samples in the schema pass) no longer overlap the GPU's work: every step waits for them. Free",
    "text keeps a step queued ahead. The more sequences a step holds, the more there is to schedule, advance",
    "and mask: 0.78-0.87 at 50 at once, 0.57-0.61 at 256. vLLM's own figures for that design (pull request",
    "26866: constrained output at 0.68-0.70 of free text, a 1.7B model, 800 at once) agree.",
    "",
    "Next to try (`bench/gpu/README.md` has the commands): the grammars' advance and the next masks filled",
    "in one job off the engine core's main thread while it goes through the rest of `update_from_output`",
    "(`EXTRACTOR_MASK_AHEAD=1`, `extractor/engines/vllm_ahead.py`: the advance and the masks were a quarter",
    "of that thread's samples in the schema pass below, `accept_tokens` 37 and `grammar_bitmask` 57 of 398,",
    "and the thread is busy throughout, free text too);",
    "two engines of the model on the GPU (`EXTRACTOR_ENGINE_REPLICAS=2`, `extractor/engines/replicas.py`:",
    "each an engine core of its own, whose CPU work runs beside the other's while the GPU runs the other's",
    "step); a pool of 4 threads. The grammar's fast-forward tokens under async scheduling would need the",
    "grammar on the worker's side of the step: a change to vLLM, which the issue rules out.",
    "",
]


def runners_and_profile() -> list[str]:
    """2026-12-04: vLLM's V1 model runner against its V2 (0.26's default here), and where a P5 pass's time goes."""
    runs = {
        n: json.loads((RESULTS / "raw" / f"mask-fill-runner-{n}.json").read_text(encoding="utf-8"))
        for n in ("v2", "v1")
    }
    labels = {"v2": "V2 (default)", "v1": "V1 (`VLLM_USE_V2_MODEL_RUNNER=0`)"}
    rows = [line for name, run in runs.items() for line in _p5_rows(labels[name], run)]
    return [
        "## vLLM's model runners, and where a pass goes (2026-12-04)",
        "",
        "One host, one engine each, the pool of 16, free text cut at the mean as above "
        "(`raw/mask-fill-runner-{v2,v1}.json`):",
        "",
        "| model runner | layout | free tok/s | schema tok/s | P5 schema | grounded tok/s | P5 grounded |",
        "|---|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "- The V1 runner is no faster constrained (schema 4,889 vs 5,319 tok/s one task at a time, grounded",
        "  3,663 vs 3,631; mixed grounded 6,540 vs 7,621): V2 stays. The mixed free figure of the V2 run",
        "  (8,855) is low against every earlier run (12,245-14,070), so its mixed ratios are not comparable.",
        "- py-spy of the engine core over one pass each, one task's 100 requests at once, on another host",
        "  (`raw/gpu-pyspy-p5-summary.txt`: grounded 6.2 s, schema 4.7 s, free 2.7 s): the main thread is",
        "  busy throughout (503, 398 and 235 samples). Constraints show as the pool's fill (43 and 40 samples,",
        "  the main thread waiting on it) and `accept_tokens` (22 and 37), and the grounded pass ran the",
        "  model's compiled code outside CUDA graphs three to four times as often (77 samples under the",
        "  piecewise backend against 23 and 18): requests start as their grammars compile (8 threads, about",
        "  half a second of CPU each over the grounded pass), so more steps mix a prefill with decodes and exceed the",
        "  captured sizes. What to measure next on the GPU: P5 against free text of the same answers (above),",
        "  then larger CUDA-graph capture sizes and fewer pool threads for the grounded side.",
        "",
    ]


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
            "  speculative drafts too: a row per draft position), so answers do not change. The in-process",
            "  engine turns the pool on on CUDA (16 threads, at most the host's cores) unless",
            "  `EXTRACTOR_MASK_THREADS` is set; `vllm serve` gets it from the same variable where extractor",
            "  is installed.",
            "- The third pair of rows (another host, 2026-12-03, `raw/mask-fill-16-skip.json`) is the pool",
            "  with vLLM's own check of each request's grammar skipped (`extractor/engines/vllm_checks.py`):",
            "  vLLM's front end compiled every grammar once more to see that it compiles, 1.5 ms a grounded",
            "  request on 2 CPU cores, one request after another on the thread that feeds the engine, before",
            "  the engine core compiled it again to decode. extractor checks its constraints before they get",
            "  there. P5 went 0.71 -> **0.85** for the schema and 0.42 -> **0.61** for the substring grammar",
            "  one task at a time, 0.50 -> 0.69 and 0.37 -> 0.53 mixed. P5 >= 0.9 is still not reached.",
            "",
            *same_answers_section(),
            *runners_and_profile(),
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
            "  also runs vLLM's front end.",
            "- The last two rows: another host, one engine each, back to back (`BENCH_VLLM_RECHECK=1` for the",
            "  first: vLLM's check of each request's grammar as before; `raw/gpu-p1-recheck.json`,",
            "  `raw/gpu-p1-skip.json`). Skipping it made raw vLLM 1.40x faster grounded and 1.33x with",
            "  grounding off, `extractor batch` 1.03x and 1.06x: P1 fell to 0.53 and 0.63. The batch is held",
            "  by its own thread: py-spy of the service in that run (`raw/gpu-pyspy-http-skip.txt`) put 72 %",
            "  of the pipeline thread's samples in rendering the prompt, most of them in bm25s's scoring",
            "  (`np.add.at`, a third of the thread) and the template's instruction, rendered again for every",
            "  request (under adapter serving \"off\", the benchmarks' layout, each request's copy of the",
            "  task was a new key for the prompt's caches). Both are now cheaper (the scores summed from",
            "  bm25s's index with one indexed add a word, the same float32 sums; one copy per task); not yet",
            "  measured on the GPU. Why 0.15 ms of work took 2-3 ms there: the calls that let the GIL go (numpy, the",
            "  tokenizer, file writes) wait to take it back while vLLM's front-end loop churns it",
            "  (`gil_starvation.md`, `python -m bench.gil_starvation`).",
            "",
        ]
    )


async def profile(per_task: int, folder: Path) -> None:
    """One per-task pass per side (each task's lines twice at once) under py-spy, vLLM's engine core included.

    Writes ``pyspy-p5-{grounded,free,schema}.txt`` (raw) and ``pyspy-p5-summary.txt`` (each pass's
    tok/s, then the engine core's threads and its main thread's busiest frames) into ``folder``.
    """
    extractor, items, _ = await common.started()
    tasks = sorted({i.task for i in items})
    work = common.jobs(items, tasks, per_task)
    lines: list[str] = []
    try:
        await compact.raw_passes(extractor.engine, extractor, common.jobs(items, tasks, 4), grounded=True)
        matched = max(1, round(statistics.mean((await answer_lengths(extractor, work, grounded=False)).values())))
        for side in ("grounded", "free", "schema"):
            transform, grounded = (free_at(matched), False) if side == "free" else (capped, side == "grounded")
            with profiled(folder / f"pyspy-p5-{side}.txt", subprocesses=True):
                row = await compact.raw_passes(
                    extractor.engine, extractor, [*work, *work], grounded=grounded, transform=transform
                )
            lines.append(f"{side}: {row['completion_tokens'] / row['seconds']:,.0f} tok/s, {row}")
            print(f"bench: {lines[-1]}", flush=True)
    finally:
        await extractor.aclose()
    raws = [folder / f"pyspy-p5-{side}.txt" for side in ("grounded", "schema", "free")]
    summaries = [engine_core(raw) for raw in raws if raw.exists()]  # none where py-spy is missing
    (folder / "pyspy-p5-summary.txt").write_text("\n".join([*lines, *summaries]) + "\n", encoding="utf-8")


def engine_core(raw: Path, top: int = 60) -> str:
    """A py-spy raw file cut to vLLM's engine core: samples per thread, then the main thread's frames (inclusive)."""
    threads: Counter[str] = Counter()
    frames: Counter[str] = Counter()
    for line in raw.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if "EngineCore" not in stack or not count.isdigit():
            continue
        parts = stack.split(";")
        named = [p for p in parts if p.startswith("thread (")]
        thread = named[0].split(":", 1)[-1].strip() if named else "?"
        threads[thread] += int(count)
        if thread == "MainThread":
            for frame in dict.fromkeys(re.sub(r":\d+\)$", ")", p) for p in parts if p.endswith(")")):
                frames[frame] += int(count)
    return "\n".join(
        [
            f"== {raw.name}: {sum(threads.values())} samples",
            *(f"thread {n} {name}" for name, n in threads.most_common(8)),
            *(f"{n} {frame}" for frame, n in frames.most_common(top)),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-task", type=int, default=50)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", type=Path, help="a folder: one pass per side under py-spy (pyspy-p5-*.txt)")
    parser.add_argument("--render", action="store_true", help="write bench/results/mask_fill.md from the raw runs")
    args = parser.parse_args()
    if args.render:
        out = RESULTS / "mask_fill.md"
        out.write_text(markdown(list(RUNS)), encoding="utf-8")
        print(out)
        return 0
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        asyncio.run(profile(args.per_task, args.profile))
        return 0
    report = asyncio.run(measure(args.per_task))
    if args.out:
        common.save(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
