"""Grounded decoding vs post-hoc grounding on a SNIPS dev sample, with the default model.

Three runs over the same utterances (the first N of each of the 7 intents):

* post-hoc, flag: decode by the schema, then mark values not in the text;
* post-hoc, strict: as above, but a value not in the text is fed back and re-asked, and removed
  after the last attempt;
* grounded decoding: every slot constrained to spans of the utterance while decoding (flag).

Scored with `extractor eval`'s own code (extractor.jobs.gold, extractor.jobs.evaluation), so the numbers
mean what they mean in `extractor eval`; plus values removed by strict grounding, failed
extractions and constrained utterances. The runs follow each other on one engine, after a warm-up.

Run (starts vLLM: take the engine lock):
    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.experiments.grounded_decoding --per-intent 6
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from bench.common import ADAPTER_SERVING, GOLD, RESULTS
from extractor import Extractor, Settings
from extractor.jobs.evaluation import Prediction, evaluate
from extractor.jobs.gold import GoldItem, load_gold, select, task_map

DEV = GOLD
OUT = RESULTS / "grounded_decoding.md"
RUNS: list[tuple[str, dict[str, Any]]] = [
    ("post-hoc, flag", {"grounding": "flag", "grounded_decoding": False}),
    ("post-hoc, strict re-ask", {"grounding": "strict", "grounded_decoding": False}),
    ("grounded decoding", {"grounding": "flag", "grounded_decoding": True}),
]
HEADER = (
    "| run | F1 | precision | recall | ungrounded rate | returned values not in the text | removed | failed | "
    "attempts | output tokens | constrained | wall |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def row(name: str, report: dict[str, Any], predictions: list[Prediction]) -> str:
    """One table row: `extractor eval`'s metrics plus what only this comparison needs."""
    done = [p.result for p in predictions if p.result is not None]
    removed = sum(len(r.removed) for r in done)
    returned = [s for r in done for s in r.spans]
    invented = sum(s.status not in ("exact", "normalized") for s in returned)
    constrained = sum(bool(r.grounded_fields) for r in done)
    ungrounded = report["ungrounded_rate"]
    return (
        f"| {name} | {report['f1']:.3f} | {report['precision']:.3f} | {report['recall']:.3f} | "
        f"{'n/a' if ungrounded is None else f'{ungrounded:.1%}'} | {invented}/{len(returned)} | {removed} | "
        f"{len(predictions) - len(done)}/{len(predictions)} | {report['mean_attempts']:.2f} | "
        f"{report['output_tokens_per_doc']:.1f} | {constrained}/{len(predictions)} | {report['elapsed_s']:.0f} s |"
    )


async def run_all(extractor: Extractor, items: list[GoldItem]) -> list[str]:
    rows = []
    async with extractor:
        # Warm-up (not scored): one utterance per task under each run's options, so no run pays
        # for compiling its first grammars or filling the prefix cache.
        warm = select(items, per_task=1)
        for _, options in RUNS:
            await evaluate(extractor, warm, concurrency=16, options=options)
        for name, options in RUNS:
            report, predictions = await evaluate(extractor, items, concurrency=16, options=options)
            rows.append(row(name, report, predictions))
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-intent", type=int, default=6)
    parser.add_argument("--dev", type=Path, default=DEV)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    settings = Settings.from_env(engine="vllm", max_num_seqs=16, kv_cache_space_gib=2, adapter_serving=ADAPTER_SERVING)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_space_gib))
    extractor = Extractor(settings=settings)  # the engine starts on first use, below
    known = extractor.catalog.names()
    items = load_gold(args.dev, task=None, known=known, task_field="intent", mapping=task_map("snips"))
    items = select(items, per_task=args.per_intent)
    table = "\n".join([HEADER, *asyncio.run(run_all(extractor, items))])
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        f"# Grounded decoding vs post-hoc grounding\n\nSNIPS dev, first {args.per_intent} utterances of each intent "
        f"({len(items)} utterances), default model (SmolLM2-135M-Instruct) on vLLM CPU, 2 CPU cores, "
        f"`python -m bench.grounded_decoding --per-intent {args.per_intent}`.\n\n{table}\n\n"
        "Columns: micro precision / recall / F1 and the ungrounded rate exactly as `extractor eval` computes\n"
        "them (leaf values normalized by case and surrounding whitespace/punctuation; ungrounded rate: values\n"
        "the model proposed that are not in the text as written, `missing` or `fuzzy`, including those strict\n"
        "grounding removed); returned values not in the text: the same count over the results' values only;\n"
        "removed: values strict grounding dropped after the last attempt; failed: no valid result;\n"
        "attempts and output tokens: means per utterance; constrained: utterances decoded under span\n"
        "enums; wall: each run on the warm engine (16 concurrent).\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
