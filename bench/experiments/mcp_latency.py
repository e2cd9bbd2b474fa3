"""Round trip of one extraction over MCP (``tools/call`` at ``/mcp``) against ``POST /extract/<task>``.

One ``extractor serve`` (the real engine by default), one text, the two paths alternated
(``/extract``, MCP, MCP, ``/extract``, ...) one request at a time, so drift in the machine's load
falls on both; each path keeps its connection (httpx keep-alive; one MCP session, opened before
the clock starts). The first pair is a warm-up, off the clock.

    python -m bench.experiments.mcp_latency                                  # real engine: prints the table
    python -m bench.experiments.mcp_latency --engine scripted --pairs 200    # the protocol's own cost
    python -m bench.experiments.mcp_latency --out bench/results/mcp_latency.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from mcp import Client

from bench.common import publish
from bench.service import TASK, TEXT, host, running


async def measure(url: str, *, pairs: int) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Seconds of each round trip, per path; and the warm-up's answer on each."""
    times: dict[str, list[float]] = {"extract": [], "mcp": []}
    async with httpx.AsyncClient(base_url=url, timeout=600) as http, Client(url + "/mcp") as mcp:

        async def extract() -> Any:
            response = await http.post(f"/extract/{TASK}", json={"text": TEXT})
            response.raise_for_status()
            return response.json()["data"]

        async def call() -> Any:
            result = await mcp.call_tool(TASK, {"text": TEXT})
            assert not result.is_error, result.content
            return result.structured_content

        sides = {"extract": extract, "mcp": call}
        answers = {"extract": await extract(), "mcp": await call()}  # the warm-up
        for n in range(pairs):
            for side in ("extract", "mcp") if n % 2 == 0 else ("mcp", "extract"):
                started = time.perf_counter()
                await sides[side]()
                times[side].append(time.perf_counter() - started)
    return times, answers


def report(times: dict[str, list[float]], answers: dict[str, Any], *, engine: str, pairs: int) -> str:
    median = {side: statistics.median(values) * 1000 for side, values in times.items()}
    mean = {side: statistics.fmean(values) * 1000 for side, values in times.items()}
    lines = [
        f"# Round trip over MCP vs `POST /extract/{TASK}` ({engine} engine)",
        "",
        f"`python -m bench.experiments.mcp_latency --engine {engine} --pairs {pairs}`: one request at a time, "
        f"the paths alternated (A-B, B-A, ...), {pairs} of each after a warm-up pair; {host()}.",
        "",
        "| path | median ms | mean ms | min ms | max ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for side, label in (("extract", f"`POST /extract/{TASK}`"), ("mcp", f"MCP `tools/call {TASK}` at `/mcp`")):
        values = [v * 1000 for v in times[side]]
        lines.append(f"| {label} | {median[side]:.1f} | {mean[side]:.1f} | {min(values):.1f} | {max(values):.1f} |")
    lines += [
        "",
        f"**MCP ÷ `/extract` (medians): {median['mcp'] / median['extract']:.3f}** "
        f"(means: {mean['mcp'] / mean['extract']:.3f}).",
        "",
        "The warm-up's `data` on each path (the same text; a CPU engine's answers may differ between runs):",
        "",
        *(f"- {side}: `{json.dumps(answer, ensure_ascii=False)}`" for side, answer in answers.items()),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="vllm", choices=("vllm", "scripted"))
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--out", type=Path, help="write the markdown report here")
    args = parser.parse_args()
    with running(args.engine) as (_, url):
        times, answers = asyncio.run(measure(url, pairs=args.pairs))
    text = report(times, answers, engine=args.engine, pairs=args.pairs)
    publish(text, args.out)


if __name__ == "__main__":
    main()
