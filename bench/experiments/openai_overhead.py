"""What the OpenAI-compatible layer costs: requests/s of ``/v1/chat/completions`` vs ``/extract/<task>``.

The same work on the scripted engine (``extractor serve --engine scripted``): the catalog task
``landmark_slots`` on the same sentence, once as ``POST /extract/landmark_slots`` (``{"text"}``)
and once as ``POST /v1/chat/completions`` with the task as ``model`` (the OpenAI body in, a
chat completion with the ``extractor`` extension out). One server, the two sides interleaved
A-B-B-A (twice) so drift in the machine's load falls on both; the server is pinned to one core,
the load generator (raw keep-alive HTTP/1.1 sockets) to the other.

    python -m bench.experiments.openai_overhead                      # prints the table
    python -m bench.experiments.openai_overhead --out bench/results/openai_overhead.md
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from bench.common import percentile, publish
from bench.service import TASK, TEXT, apart, host, keepalive_posts

SIDES: dict[str, tuple[str, dict[str, Any]]] = {
    "extract": (f"/extract/{TASK}", {"text": TEXT}),
    "openai": ("/v1/chat/completions", {"model": TASK, "messages": [{"role": "user", "content": TEXT}]}),
}
ORDER = ("extract", "openai", "openai", "extract") * 2  # A-B-B-A, twice
# Each answer holds the extraction: /extract's `data`, the chat completion's `choices`.
ANSWERS = (b'"data"', b'"choices"')


def measure(*, concurrency: int, total: int) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = []
    with apart() as port:
        for side in SIDES:  # warm-up: first-call costs (imports, caches) off the clock
            asyncio.run(keepalive_posts(port, *SIDES[side], concurrency=concurrency, total=200, expect=ANSWERS))
        for side in ORDER:
            started = time.perf_counter()
            latencies = asyncio.run(
                keepalive_posts(port, *SIDES[side], concurrency=concurrency, total=total, expect=ANSWERS)
            )
            seconds = time.perf_counter() - started
            segments.append({"side": side, "req_s": len(latencies) / seconds, "latencies": latencies})
    return segments


def summarize(segments: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for side in SIDES:
        mine = [s for s in segments if s["side"] == side]
        latencies = [x for s in mine for x in s["latencies"]]
        out[side] = {
            "req_s": sum(s["req_s"] for s in mine) / len(mine),
            "min_req_s": min(s["req_s"] for s in mine),
            "max_req_s": max(s["req_s"] for s in mine),
            "p50_ms": percentile(latencies, 0.5) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
        }
    return out


def report(
    summary: dict[str, dict[str, float]], segments: list[dict[str, Any]], *, concurrency: int, total: int
) -> str:
    ratio = summary["openai"]["req_s"] / summary["extract"]["req_s"]
    lines = [
        "# OpenAI-compatible layer: `/v1/chat/completions` vs `/extract/<task>` (scripted engine)",
        "",
        f"`python -m bench.experiments.openai_overhead` — task `{TASK}`, {concurrency} keep-alive clients, "
        f"{total} requests per segment, segments in the order "
        f"{'-'.join('A' if s == 'extract' else 'B' for s in ORDER)} "
        f"(A = `/extract`, B = `/v1/chat/completions`); server on one core, load generator on the other; {host()}.",
        "",
        "| route | req/s (mean of segments) | min–max | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for side, label in (("extract", "`POST /extract/landmark_slots`"), ("openai", "`POST /v1/chat/completions`")):
        row = summary[side]
        lines.append(
            f"| {label} | {row['req_s']:,.0f} | {row['min_req_s']:,.0f}–{row['max_req_s']:,.0f} | "
            f"{row['p50_ms']:.2f} | {row['p99_ms']:.2f} |"
        )
    lines += [
        "",
        f"**`/v1/chat/completions` ÷ `/extract`: {ratio:.3f}** ({(1 - ratio) * 100:+.1f} % overhead; target ≤ 10 %).",
        "",
        "Segments in order (req/s): " + ", ".join(f"{s['side']} {s['req_s']:,.0f}" for s in segments) + ".",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--total", type=int, default=3000, help="requests per segment")
    parser.add_argument("--out", type=Path, help="write the markdown report here")
    args = parser.parse_args()
    segments = measure(concurrency=args.concurrency, total=args.total)
    text = report(summarize(segments), segments, concurrency=args.concurrency, total=args.total)
    publish(text, args.out)


if __name__ == "__main__":
    main()
