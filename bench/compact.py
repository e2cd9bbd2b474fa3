"""Phase 1 of `make bench`, on one engine with compact JSON decoding (the product's):

* P1 pipeline overhead: ``extractor batch`` (files, fsync, parse, validate, ground, re-ask)
  vs raw ``VLLMEngine.generate`` on the same rendered prompts and schemas, same concurrency;
* P2 vs the seed: a seed-style client (one request at a time, free generation, ``json.loads``
  and a corrector loop of up to 3 tries) vs ``Extractor.aextract`` run concurrently;
* P3, compact side: output tokens per extraction (the raw P1 pass);
* quality: ``extractor eval`` on a per-intent sample of the SNIPS dev set.

Writes one JSON file; ``bench/run.py`` runs this in its own process and renders the report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common
from extractor import ExtractionResult, Extractor, Task
from extractor.engines.base import Engine, GenerationRequest, Message
from extractor.jobs.batch import BatchConfig, run_batch
from extractor.jobs.evaluation import evaluate
from extractor.jobs.gold import GoldItem
from extractor.options import ExtractOptions

SEED_TRIES = 3


async def extractor_batches(
    extractor: Extractor, items: Sequence[GoldItem], *, grounded: bool | None = None, max_attempts: int | None = None
) -> dict[str, Any]:
    """Run ``extractor batch`` once per task, one after another, as a user would.

    ``grounded``: the batch's grounded-decoding option (None: each task's setting, as shipped);
    ``max_attempts``: None for the settings' (3).
    """
    totals = {"docs": 0, "ok": 0, "attempts": 0, "completion_tokens": 0, "seconds": 0.0}
    with tempfile.TemporaryDirectory() as folder:
        for task in dict.fromkeys(i.task for i in items):
            source, out = Path(folder, f"{task}.in.jsonl"), Path(folder, f"{task}.out.jsonl")
            rows = [{"id": i.id, "text": i.text} for i in items if i.task == task]
            source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            config = BatchConfig(
                task=task,
                input=source,
                output=out,
                concurrency=common.CONCURRENCY,
                options=ExtractOptions(
                    temperature=common.TEMPERATURE, grounded_decoding=grounded, max_attempts=max_attempts
                ),
            )
            summary = await run_batch(extractor, config)
            totals["docs"] += summary.rows
            totals["ok"] += summary.ok
            totals["attempts"] += summary.attempts
            totals["completion_tokens"] += summary.completion_tokens
            totals["seconds"] += summary.elapsed_s
    return totals


async def raw_passes(
    engine: Engine,
    extractor: Extractor,
    items: Sequence[GoldItem],
    *,
    grounded: bool = False,
    transform: Callable[[GenerationRequest], GenerationRequest] | None = None,
) -> dict[str, Any]:
    """Raw generate, grouped by task like the batches; tokens and schema validity per output.

    ``grounded``: each request under the task's grounded decoding, as the pipeline's first attempt.
    """
    seconds, tokens, valid = 0.0, [], 0
    for task_name in dict.fromkeys(i.task for i in items):
        task = extractor.task(task_name)
        requests = [common.request(task, i.text, grounded=grounded) for i in items if i.task == task_name]
        requests = [transform(r) for r in requests] if transform else requests
        generations, took = await common.generate_all(engine, requests)
        seconds += took
        tokens += [g.completion_tokens for g in generations]
        valid += sum(_schema_valid(task, g.text) for g in generations)
    return {"docs": len(tokens), "seconds": seconds, "completion_tokens": sum(tokens), "valid": valid}


def add_passes(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two passes over the same documents as one: counts and seconds added, each pass's seconds in ``passes_s``."""
    summed = {k: a[k] + b[k] if isinstance(a[k], int | float) else a[k] for k in a}
    summed["passes_s"] = [*a.get("passes_s", [a["seconds"]]), *b.get("passes_s", [b["seconds"]])]
    return summed


def _schema_valid(task: Task, text: str) -> bool:
    try:
        return bool(task.validator.is_valid(json.loads(text)))
    except ValueError:
        return False


@dataclass
class SeedOutcome:
    tries: int
    json_ok: bool
    schema_valid: bool
    completion_tokens: int


async def seed_extract(engine: Engine, task: Task, text: str) -> SeedOutcome:
    """The seed's client: free generation, ``json.loads``, re-ask with the parse error."""
    first = common.request(task, text, schema=False)
    messages: list[Message] = list(first.messages)
    tokens = 0
    for tries in range(1, SEED_TRIES + 1):
        generation = await engine.generate(
            GenerationRequest(messages=messages, temperature=first.temperature, max_tokens=first.max_tokens)
        )
        tokens += generation.completion_tokens
        try:
            value = json.loads(generation.text)
        except ValueError as error:
            messages = [
                *messages,
                {"role": "assistant", "content": generation.text},
                {"role": "user", "content": f"That is not valid JSON ({error}). Answer with the JSON object only."},
            ]
            continue
        return SeedOutcome(tries, True, bool(task.validator.is_valid(value)), tokens)
    return SeedOutcome(SEED_TRIES, False, False, tokens)


async def versus_seed(engine: Engine, extractor: Extractor, items: Sequence[GoldItem]) -> dict[str, Any]:
    started = time.perf_counter()
    outcomes = [await seed_extract(engine, extractor.task(i.task), i.text) for i in items]  # one at a time
    seed_s = time.perf_counter() - started

    gate = asyncio.Semaphore(common.CONCURRENCY)

    async def one(item: GoldItem) -> ExtractionResult | None:
        async with gate:
            try:
                return await extractor.aextract(item.task, item.text, temperature=common.TEMPERATURE)
            except Exception:  # noqa: BLE001 - a failed extraction counts as not valid
                return None

    started = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in items))
    ours_s = time.perf_counter() - started
    n = len(items)
    ok = [r for r in results if r is not None]
    return {
        "docs": n,
        "seed": {
            "seconds": seed_s,
            "json_ok_rate": sum(o.json_ok for o in outcomes) / n,
            "schema_valid_rate": sum(o.schema_valid for o in outcomes) / n,
            "mean_tries": sum(o.tries for o in outcomes) / n,
            "completion_tokens": sum(o.completion_tokens for o in outcomes),
        },
        "extractor": {
            "seconds": ours_s,
            "schema_valid_rate": len(ok) / n,
            "mean_tries": sum(len(r.attempts) for r in ok) / len(ok) if ok else 0.0,
            "completion_tokens": sum(r.usage.completion_tokens for r in ok),
        },
    }


async def p1_same_work(
    extractor: Extractor, items: Sequence[GoldItem], *, new_pass: Callable[[], None] | None = None
) -> dict[str, Any]:
    """P1: ``extractor batch`` vs raw generation on the same prompts, grounded on both, then off on both.

    Each side runs twice in A-B-B-A order and the two passes are summed: the first pass after the
    warm-up is the slowest (measured: 11.0 s, then 9.3 s for the same raw work), and a fixed order
    handed that penalty to one side (P1 0.72 in one run, 1.05 in another). The extractor side's
    per-stage times are in ``extractor.stages``. ``new_pass`` runs before each pass (the GPU
    benchmark drops the remembered prompt ids there, so that every pass tokenizes its prompts).
    """
    engine = extractor.engine

    async def ours_(grounded: bool | None = None) -> dict[str, Any]:
        _ = new_pass and new_pass()
        return await extractor_batches(extractor, items, grounded=grounded)

    async def raw_(grounded: bool = False) -> dict[str, Any]:
        _ = new_pass and new_pass()
        return await raw_passes(engine, extractor, items, grounded=grounded)

    with common.stage_times(engine) as spent:
        first = await ours_()
    raw = add_passes(await raw_(grounded=True), await raw_(grounded=True))
    with common.stage_times(engine) as spent_again:
        ours = add_passes(first, await ours_())
    ours["stages"] = {k: spent.get(k, 0.0) + spent_again.get(k, 0.0) for k in {*spent, *spent_again}}
    raw_first = await raw_()
    ours_off = add_passes(await ours_(grounded=False), await ours_(grounded=False))
    raw_off = add_passes(raw_first, await raw_())
    print(
        f"bench: P1 done: grounded extractor {ours['seconds']:.1f} s, raw {raw['seconds']:.1f} s; "
        f"ungrounded extractor {ours_off['seconds']:.1f} s, raw {raw_off['seconds']:.1f} s",
        flush=True,
    )
    return {"extractor": ours, "raw": raw, "extractor_ungrounded": ours_off, "raw_ungrounded": raw_off}


async def main(quick: bool, out: Path) -> None:
    size = common.sizes(quick)
    extractor, items, engine_start_s = await common.started()
    engine = extractor.engine
    throughput = common.jobs(items, size.throughput_tasks, size.throughput_per_task)
    try:
        # Warm-up: compile each schema's grammar and fill the prefix cache, for both sides alike.
        await raw_passes(engine, extractor, throughput, grounded=True)
        await raw_passes(engine, extractor, throughput)
        p1 = await p1_same_work(extractor, throughput)
        seed = await versus_seed(engine, extractor, common.jobs(items, size.throughput_tasks, size.seed_per_task))
        print(
            f"bench: P2 done: seed {seed['seed']['seconds']:.1f} s, extractor {seed['extractor']['seconds']:.1f} s",
            flush=True,
        )
        quality_items = common.jobs(items, sorted({i.task for i in items}), size.quality_per_task)
        quality, _ = await evaluate(extractor, quality_items, concurrency=common.CONCURRENCY)
        print(f"bench: quality done: F1 {quality['f1']:.3f} on {quality['docs']} docs", flush=True)
    finally:
        await extractor.aclose()
    common.save(
        out,
        {
            "quick": quick,
            "machine": common.machine(),
            "model": engine.model_name,
            "engine_start_s": engine_start_s,
            "p1": {**p1, "tasks": list(size.throughput_tasks)},
            "p2": seed,
            "quality": quality,
        },
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.out))
