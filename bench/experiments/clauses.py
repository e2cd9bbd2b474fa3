"""Grounded values within one clause, or anywhere in the text: which rule to ship by default.

With ``grounded_clauses`` on, each grounded value is a substring of one clause of the text (the
text cut after ``，。；：！？`` and ``; ! ?``, and ``.`` before a space); off, of the whole text.
Two measurements on one engine, each rule in turn:

* SNIPS dev, the first N lines of each intent, shipped tasks and pools;
* Chinese: `landmark_slots` over its own pool's 38 sentences as gold (fixed examples only, so no
  sentence is shown its own answer), many with a clause after `，`.

Reported: F1, and returned values that run across clause punctuation.

    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.experiments.clauses --per-intent 20
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from bench.common import ADAPTER_SERVING, GOLD, RESULTS, ROOT, machine
from extractor import Catalog, Extractor, Settings
from extractor.jobs.evaluation import Prediction, evaluate
from extractor.jobs.gold import GoldItem, load_gold, select, task_map

CROSSES = re.compile(r"[，。；：！？;!?]|\.\s")


def landmark_gold() -> list[GoldItem]:
    lines = (ROOT / "examples" / "landmark_slots.jsonl").read_text(encoding="utf-8").splitlines()
    items = []
    for number, line in enumerate(lines, start=1):
        value = json.loads(line)
        expected = {k: [v] for k, v in value["output"].items() if v is not None}
        items.append(
            GoldItem(line=number, id=value["id"], task="landmark_slots", text=value["text"], expected=expected)
        )
    return items


def crossing(predictions: list[Prediction]) -> int:
    return sum(
        bool(CROSSES.search(s.value.strip()))
        for p in predictions
        if p.result is not None
        for s in p.result.spans
        if isinstance(s.value, str)
    )


async def run(settings: Settings, per_intent: int) -> list[dict[str, Any]]:
    base = Extractor(settings=settings)
    snips = load_gold(GOLD, task=None, known=base.catalog.names(), task_field="intent", mapping=task_map("snips"))
    snips = select(snips, per_task=per_intent)
    # landmark_slots with its fixed examples only: the pool holds the gold sentences themselves
    catalog = Catalog.load(ROOT)
    landmark = catalog.tasks["landmark_slots"]
    catalog.tasks["landmark_slots"] = dataclasses.replace(
        landmark, settings=dataclasses.replace(landmark.settings, examples_from_pool=None)
    )
    rows = []
    async with base:
        await base.astart()
        for clauses in (False, True):
            ruled = dataclasses.replace(settings, grounded_clauses=clauses)
            for name, items, cat in (
                ("SNIPS dev", snips, base.catalog),
                ("landmark (Chinese)", landmark_gold(), catalog),
            ):
                extractor = Extractor(settings=ruled, engine=base.engine, catalog=cat)
                await evaluate(extractor, items[:7], concurrency=16)  # warm-up
                report, predictions = await evaluate(extractor, items, concurrency=64)
                rows.append(
                    {
                        "data": name,
                        "rule": "one clause" if clauses else "whole text",
                        "docs": report["docs"],
                        "f1": report["f1"],
                        "precision": report["precision"],
                        "recall": report["recall"],
                        "crossing": crossing(predictions),
                        "values": sum(len(p.result.spans) for p in predictions if p.result is not None),
                        "docs_per_s": report["docs_per_s"],
                    }
                )
                print(f"bench: {rows[-1]}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-intent", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS / "clauses.md")
    args = parser.parse_args()
    settings = Settings.from_env(kv_cache_space_gib=2, adapter_serving=ADAPTER_SERVING)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_space_gib))
    started = time.perf_counter()
    rows = asyncio.run(run(settings, args.per_intent))
    m = machine()
    lines = [
        "# Grounded values: one clause or the whole text",
        "",
        f"{m['date']}, {m['cores']} CPU cores, default model, grounded decoding by substring grammar. "
        f"`python -m bench.experiments.clauses --per-intent {args.per_intent}`, "
        f"{(time.perf_counter() - started) / 60:.0f} min.",
        "",
        "| data | rule | docs | F1 | P | R | values across clause punctuation | docs/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['data']} | {r['rule']} | {r['docs']} | {r['f1']:.3f} | {r['precision']:.3f} | {r['recall']:.3f} | "
            f"{r['crossing']}/{r['values']} | {r['docs_per_s']:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
