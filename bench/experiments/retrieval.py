"""Example selection cost: BM25 index build and one query, for pools of 1,000 to 10,000 texts.

.venv/bin/python -m bench.experiments.retrieval
"""

from __future__ import annotations

import json
import statistics
import time

from bench.common import GOLD, SNIPS, write_table
from extractor.examples.selection import Selector

POOL = SNIPS / "pool.jsonl"


def main() -> None:
    texts = [json.loads(line)["text"] for line in POOL.read_text(encoding="utf-8").splitlines()]
    queries = [json.loads(line)["text"] for line in GOLD.read_text(encoding="utf-8").splitlines()][:200]
    rows = []
    for size in (1_000, 5_000, 10_000):
        pool = (texts * (size // len(texts) + 1))[:size]
        start = time.perf_counter()
        selector = Selector(pool)
        build_ms = (time.perf_counter() - start) * 1000
        for q in queries[:20]:  # warm-up
            selector.nearest(q, 3)
        times = []
        for q in queries:
            start = time.perf_counter()
            selector.nearest(q, 3)
            times.append((time.perf_counter() - start) * 1000)
        times.sort()
        rows.append((size, build_ms, statistics.median(times), times[int(len(times) * 0.99) - 1]))
        print(f"bench: {size} texts: index {build_ms:.0f} ms, query p50 {rows[-1][2]:.3f} ms, p99 {rows[-1][3]:.3f} ms")
    write_table(
        "retrieval.md",
        "Example selection cost (BM25, bm25s)",
        "SNIPS pool texts (repeated past 6,999), 200 SNIPS dev utterances as queries, k = 3 with the "
        "near-duplicate filter, one core. `python -m bench.experiments.retrieval`.",
        ["pool texts", "index build ms", "query p50 ms", "query p99 ms"],
        [f"| {s:,} | {b:.0f} | {p50:.3f} | {p99:.3f} |" for s, b, p50, p99 in rows],
    )


if __name__ == "__main__":
    main()
