"""The HTTP layer's cost and the service's concurrency gain (not a timed test).

1. Scripted engine: requests/s and latency of ``POST /extract/landmark_slots`` through
   ``extractor serve`` at 1, 8 and 64 concurrent keep-alive clients, beside the same calls made
   in-process (``Extractor.aextract``, no HTTP) at the same concurrency; the difference is the
   latency the HTTP layer adds. The server is pinned to one core and the load generator (a
   minimal raw-socket HTTP/1.1 client, so it costs little) to the other.
2. Real engine (vLLM on the default model): docs/s of concurrent ``POST /extract`` against the
   seed-style client (one request at a time, waiting for each), on the same documents.

    python -m bench.experiments.http_bench                 # both parts (part 2 starts vLLM: ~1 min on 2 cores)
    python -m bench.experiments.http_bench --part scripted # part 1 only
    python -m bench.experiments.http_bench --out bench/http_results.md
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import percentile, publish
from bench.service import TASK, TEXT, apart, host, keepalive_posts, pin, running
from extractor import Extractor, Settings

CONCURRENCY = (1, 8, 64)
DOCS = [  # the real-engine part: landmark sentences and SNIPS dev utterances (CC0)
    ("landmark_slots", TEXT),
    ("landmark_slots", "故宫是中国明清两代的皇家宫殿，位于北京。"),
    ("landmark_slots", "埃菲尔铁塔是法国巴黎的铁塔，建于十九世纪末。"),
    ("landmark_slots", "吴哥窟是柬埔寨的寺庙建筑，始建于十二世纪。"),
    ("snips_get_weather", "What will the weather be in Lago Vista Tennessee on feb. 2nd, 2037?"),
    ("snips_get_weather", "will it be sunny in Paris tomorrow"),
    ("snips_play_music", "play the top-20 Ramin Djawadi album on Deezer"),
    ("snips_play_music", "play some jazz by Miles Davis"),
    ("snips_book_restaurant", "book a table for 3 at a restaurant in Montana"),
    ("snips_book_restaurant", "reserve a table for two at a pizzeria in Boston at 7pm"),
    ("snips_rate_book", "rate this novel 2 out of 6"),
    ("snips_rate_book", "give The Hobbit five stars"),
    ("snips_search_screening_event", "find movie schedules for Bow Tie Cinemas"),
    ("snips_search_screening_event", "when is Dune playing at the closest cinema"),
    ("snips_add_to_playlist", "add clem burke in my playlist Pre-Party R&B Jams"),
    ("snips_search_creative_work", "find the TV series The Wire"),
]


# -- part 1: the HTTP layer on the scripted engine ------------------------------------------


async def in_process(concurrency: int, total: int) -> tuple[float, list[float]]:
    """Requests/s and latencies of ``aextract`` called directly, ``concurrency`` at a time."""
    extractor = Extractor(settings=Settings.from_env({}, engine="scripted"))
    await extractor.astart()
    latencies: list[float] = []

    async def worker(n: int) -> None:
        for _ in range(n):
            t0 = time.perf_counter()
            await extractor.aextract(TASK, TEXT)
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker(50) for _ in range(concurrency)))  # warm-up
    latencies.clear()
    started = time.perf_counter()
    await asyncio.gather(*(worker(total // concurrency) for _ in range(concurrency)))
    return len(latencies) / (time.perf_counter() - started), latencies


async def over_http(port: int, concurrency: int, total: int) -> tuple[float, list[float]]:
    """Requests/s and latencies of keep-alive ``POST /extract``, ``concurrency`` connections at a time."""
    path, payload = f"/extract/{TASK}", {"text": TEXT}
    await keepalive_posts(port, path, payload, concurrency=concurrency, total=50 * concurrency)  # warm-up
    started = time.perf_counter()
    latencies = await keepalive_posts(port, path, payload, concurrency=concurrency, total=total)
    return len(latencies) / (time.perf_counter() - started), latencies


def scripted_part(total: int) -> list[dict[str, Any]]:
    try:
        import uvloop

        new_loop = uvloop.new_event_loop
    except ImportError:
        new_loop = asyncio.new_event_loop
    pin({0})
    baseline = {c: asyncio.run(in_process(c, total)) for c in CONCURRENCY}
    rows = []
    with apart() as port:
        for c in CONCURRENCY:
            with asyncio.Runner(loop_factory=new_loop) as runner:
                rate, latencies = runner.run(over_http(port, c, total))
            base_rate, base = baseline[c]
            rows.append(
                {
                    "clients": c,
                    "req_s": rate,
                    "p50_ms": percentile(latencies, 0.5) * 1000,
                    "p99_ms": percentile(latencies, 0.99) * 1000,
                    "in_process_req_s": base_rate,
                    "in_process_p50_ms": percentile(base, 0.5) * 1000,
                    "in_process_p99_ms": percentile(base, 0.99) * 1000,
                }
            )
    for row in rows:
        row["added_p50_ms"] = row["p50_ms"] - row["in_process_p50_ms"]
        row["added_p99_ms"] = row["p99_ms"] - row["in_process_p99_ms"]
    return rows


# -- part 2: concurrency on the real engine -------------------------------------------------


def seed_style(url: str) -> tuple[float, int]:
    """One request at a time, waiting for each (the seed's client)."""
    ok = 0
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=600) as client:
        for task, text in DOCS:
            ok += client.post(f"/extract/{task}", json={"text": text}).status_code == 200
    return time.perf_counter() - started, ok


async def concurrent(url: str) -> tuple[float, int]:
    """Every document at once; the service batches them on one engine."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        started = time.perf_counter()
        responses = await asyncio.gather(*(client.post(f"/extract/{t}", json={"text": x}) for t, x in DOCS))
        return time.perf_counter() - started, sum(r.status_code == 200 for r in responses)


def real_part() -> dict[str, Any]:
    with running("vllm", extra=["--max-num-seqs", str(len(DOCS))]) as (_, url):
        httpx.post(f"{url}/extract/{TASK}", json={"text": TEXT}, timeout=600)  # warm-up
        seq_s, seq_ok = seed_style(url)
        conc_s, conc_ok = asyncio.run(concurrent(url))
    return {
        "docs": len(DOCS),
        "sequential_s": seq_s,
        "sequential_ok": seq_ok,
        "concurrent_s": conc_s,
        "concurrent_ok": conc_ok,
        "ratio": seq_s / conc_s,
    }


# -- report ---------------------------------------------------------------------------------


def report(rows: list[dict[str, Any]] | None, real: dict[str, Any] | None) -> str:
    lines = [f"machine: {host()}", ""]
    if rows:
        lines += [
            "HTTP layer, scripted engine (server on 1 core, load generator on the other):",
            "",
            "| clients | req/s | p50 ms | p99 ms | in-process req/s | in-process p50 ms | in-process p99 ms "
            "| added p50 ms | added p99 ms | added CPU ms/request |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            added_cpu = 1000 / r["req_s"] - 1000 / r["in_process_req_s"]
            lines.append(
                f"| {r['clients']} | {r['req_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                f"{r['in_process_req_s']:,.0f} | {r['in_process_p50_ms']:.2f} | {r['in_process_p99_ms']:.2f} | "
                f"{r['added_p50_ms']:.2f} | {r['added_p99_ms']:.2f} | {added_cpu:.2f} |"
            )
        best = max(r["req_s"] for r in rows)
        added = rows[0]["added_p50_ms"]
        lines += [
            "",
            "In-process, the scripted engine never yields, so concurrent calls run one after another and their",
            "latency leaves out the wait; over HTTP, 8 or 64 clients on one core wait for each other (Little's law:",
            "latency ~ clients / req/s). The added latency of the HTTP layer is the 1-client row; under load,",
            "the last column is what each request costs the server on top of the pipeline.",
            "",
            f"targets: >= 1,000 req/s: {best:,.0f} ({best / 1000:.2f}x); <= 1 ms added p50 (1 client): {added:.2f} ms",
        ]
    if real:
        lines += [
            "",
            f"Real engine (vLLM, default model), {real['docs']} documents:",
            "",
            "| client | seconds | docs/s | HTTP 200 |",
            "|---|---:|---:|---:|",
            f"| seed-style, one at a time | {real['sequential_s']:.1f} | {real['docs'] / real['sequential_s']:.2f} | "
            f"{real['sequential_ok']} |",
            f"| concurrent POST /extract | {real['concurrent_s']:.1f} | {real['docs'] / real['concurrent_s']:.2f} | "
            f"{real['concurrent_ok']} |",
            "",
            f"concurrent / sequential: {real['ratio']:.2f}x (target >= 1.4x)",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description="benchmark the HTTP service")
    parser.add_argument("--part", choices=["scripted", "real", "all"], default="all")
    parser.add_argument("--requests", type=int, default=6400, help="requests per concurrency level (part 1)")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    rows = scripted_part(args.requests) if args.part in ("scripted", "all") else None
    real = real_part() if args.part in ("real", "all") else None
    publish(report(rows, real), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
