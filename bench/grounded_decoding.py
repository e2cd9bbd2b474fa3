"""Grounded decoding vs post-hoc grounding on a SNIPS dev sample, with the default model.

Three runs over the same utterances (the first N of each of the 7 intents):

* post-hoc, flag: decode by the schema, then mark values not in the text;
* post-hoc, strict: as above, but a value not in the text is fed back and re-asked, and removed
  after the last attempt;
* grounded decoding: every slot constrained to spans of the utterance while decoding (flag).

Reported per run: slot F1 (micro, over (slot, value) pairs, case- and space-insensitive),
ungrounded rate (returned values that are not in the text as written: missing or fuzzy), values
removed by strict grounding, failed extractions, mean attempts, mean output tokens (summed over
attempts) and wall time (the runs follow each other on one engine, after a warm-up pass).

Run (starts vLLM: take the engine lock):
    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.grounded_decoding --per-intent 6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEV = Path(__file__).resolve().parents[2] / "shared" / "eval" / "snips" / "dev.jsonl"
OUT = Path(__file__).resolve().parent / "results" / "grounded_decoding.md"
RUNS: list[tuple[str, dict[str, Any]]] = [
    ("post-hoc, flag", {"grounding": "flag", "grounded_decoding": False}),
    ("post-hoc, strict re-ask", {"grounding": "strict", "grounded_decoding": False}),
    ("grounded decoding", {"grounding": "flag", "grounded_decoding": True}),
]


@dataclass
class Score:
    name: str
    tp: int = 0
    predicted: int = 0
    gold: int = 0
    ungrounded: int = 0
    removed: int = 0
    failed: int = 0
    attempts: int = 0
    output_tokens: int = 0
    constrained: int = 0
    n: int = 0
    seconds: float = 0.0

    def row(self) -> str:
        precision = self.tp / self.predicted if self.predicted else 0.0
        recall = self.tp / self.gold if self.gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        done = max(1, self.n - self.failed)
        return (
            f"| {self.name} | {f1:.3f} | {precision:.3f} | {recall:.3f} | "
            f"{self.ungrounded}/{self.predicted} ({self.ungrounded / max(1, self.predicted):.1%}) | {self.removed} | "
            f"{self.failed}/{self.n} | {self.attempts / done:.2f} | {self.output_tokens / done:.1f} | "
            f"{self.constrained}/{self.n} | {self.seconds:.0f} s |"
        )


HEADER = (
    "| run | F1 | precision | recall | ungrounded values | removed | failed | attempts | output tokens | "
    "constrained | wall |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def task_name(intent: str) -> str:
    return "snips_" + re.sub(r"(?<!^)(?=[A-Z])", "_", intent).lower()


def load(path: Path, per_intent: int) -> list[dict[str, Any]]:
    taken: dict[str, int] = {}
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if taken.get(row["intent"], 0) < per_intent:
            taken[row["intent"]] = taken.get(row["intent"], 0) + 1
            rows.append(row)
    return rows


def norm(value: str) -> str:
    return " ".join(value.lower().split())


def score(name: str, rows: list[dict[str, Any]], results: list[Any], seconds: float) -> Score:
    from extractor import ExtractionFailed, ExtractionResult

    s = Score(name=name, n=len(rows), seconds=seconds)
    for row, result in zip(rows, results, strict=True):
        gold = {(slot, norm(v)) for slot, values in row["expected"].items() for v in values}
        s.gold += len(gold)
        if isinstance(result, ExtractionFailed):
            s.failed += 1
            continue
        if not isinstance(result, ExtractionResult):
            raise result
        predicted = {(k, norm(v)) for k, v in result.data.items() if isinstance(v, str) and v.strip()}
        s.predicted += len(predicted)
        s.tp += len(predicted & gold)
        s.ungrounded += sum(1 for span in result.spans if span.status in ("missing", "fuzzy"))
        s.removed += len(result.removed)
        s.attempts += len(result.attempts)
        s.output_tokens += result.usage.completion_tokens
        s.constrained += bool(result.grounded_fields)
    return s


async def run_all(per_intent: int, dev: Path) -> list[Score]:
    from extractor import Extractor, Settings

    rows = load(dev, per_intent)
    settings = Settings.from_env(engine="vllm", max_num_seqs=16, kv_cache_space_gib=2)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_space_gib))
    scores = []
    async with Extractor(settings=settings) as extractor:
        t0 = time.perf_counter()
        await extractor.astart()
        print(f"engine started in {time.perf_counter() - t0:.0f} s", flush=True)
        gate = asyncio.Semaphore(16)

        async def one(row: dict[str, Any], options: dict[str, Any]) -> Any:
            async with gate:
                try:
                    return await extractor.aextract(task_name(row["intent"]), row["text"], **options)
                except Exception as error:  # noqa: BLE001 - scored as a failure
                    return error

        # Warm-up (not scored): one utterance per intent, so no run pays for first requests.
        warm = [next(r for r in rows if r["intent"] == intent) for intent in dict.fromkeys(r["intent"] for r in rows)]
        await asyncio.gather(*(one(row, options) for row in warm for _, options in RUNS))
        for name, options in RUNS:
            t0 = time.perf_counter()
            results = await asyncio.gather(*(one(row, options) for row in rows))
            scores.append(score(name, rows, list(results), time.perf_counter() - t0))
            print(scores[-1].row(), flush=True)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-intent", type=int, default=6)
    parser.add_argument("--dev", type=Path, default=DEV)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    scores = asyncio.run(run_all(args.per_intent, args.dev))
    n = len(load(args.dev, args.per_intent))
    table = "\n".join([HEADER, *(s.row() for s in scores)])
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        f"# Grounded decoding vs post-hoc grounding\n\nSNIPS dev, first {args.per_intent} utterances of each intent "
        f"({n} utterances), default model (SmolLM2-135M-Instruct) on vLLM CPU, 2 CPU cores, "
        f"`python -m bench.grounded_decoding --per-intent {args.per_intent}`.\n\n{table}\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
