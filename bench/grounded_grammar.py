"""Grounded decoding by substring grammar: compile cost and throughput by text length, on vs off.

Two parts, one run:

* compile: building llguidance's matcher for one request (the work vLLM's guidance backend does
  per grounded request) with the default model's tokenizer — the substring grammar vs the older
  enum of spans (and the plain task schema), for texts of 20 to 5,000 words;
* throughput: `snips_get_weather` over texts of N words (SNIPS pool utterances run together,
  the question last), grounded decoding on vs off, docs/s on the in-process engine
  (`max_model_len` 8192 so that 5,000 words fit the default model's window).

    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.grounded_grammar
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import ADAPTER_SERVING, RESULTS, SNIPS, machine, publish, save
from extractor import Extractor, Settings
from extractor.constraints import substring
from extractor.constraints.grounded_decoding import enum_constrain, extractive_nodes

POOL = SNIPS / "pool.jsonl"
TASK = "snips_get_weather"
LENGTHS = (20, 170, 300, 1000, 5000)
DOCS = {20: 48, 170: 32, 300: 24, 1000: 8, 5000: 3}
QUESTION = "Will it be windy in Brookhaven, Vermont next weekend?"


def texts(words: int, count: int) -> list[str]:
    """``count`` different texts of about ``words`` words: pool utterances, then the question."""
    pool = [json.loads(line)["text"].strip() for line in POOL.read_text(encoding="utf-8").splitlines()]
    made, start = [], 0
    for _ in range(count):
        picked: list[str] = []
        while sum(len(p.split()) for p in picked) < words - len(QUESTION.split()):
            picked.append(pool[start % len(pool)].rstrip(".?!") + ".")
            start += 1
        made.append(" ".join([*picked, QUESTION]) if words > 20 else QUESTION + " " + picked[0])
    return made


def compile_ms(extractor: Extractor, lengths: tuple[int, ...] = LENGTHS) -> list[dict[str, Any]]:
    import llguidance
    import llguidance.hf

    tokenizer = llguidance.hf.from_tokenizer(extractor.engine.tokenizer)  # type: ignore[attr-defined]
    task = extractor.task(TASK)
    targets = extractive_nodes(task.schema, everywhere=True)
    rows = []
    for words in lengths:
        text = texts(words, 1)[0]

        def timed(grammar: Any) -> float:
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                matcher = llguidance.LLMatcher(tokenizer, grammar)
                runs.append((time.perf_counter() - start) * 1000)
                assert not matcher.is_error(), matcher.get_error()
            return statistics.median(runs)

        lark = substring.translate(task.schema, text, targets).lark
        grammar_ms = timed(llguidance.LLMatcher.grammar_from_lark(lark))
        enum = enum_constrain(task.schema, text, targets, max_candidates=10**9)
        enum_ms = None
        if enum is not None and enum.schema is not None and words <= 300:  # the enum path stops at 2,000 spans
            enum_ms = timed(llguidance.LLMatcher.grammar_from_json_schema(enum.schema))
        schema_ms = timed(llguidance.LLMatcher.grammar_from_json_schema(dict(task.engine_schema)))
        rows.append(
            {"words": substring.word_count(text), "grammar_ms": grammar_ms, "enum_ms": enum_ms, "schema_ms": schema_ms}
        )
        print(f"bench: compile {rows[-1]}", flush=True)
    return rows


async def throughput(extractor: Extractor, docs: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """Docs/s with grounded decoding on and off, for each length in ``docs`` (words -> documents)."""
    rows = []
    for words, count in (docs or DOCS).items():
        # Different texts for each side: vLLM's prefix cache would hand the second side the first
        # side's prefill of the same texts for free (most of the time at 1,000+ words on a CPU).
        # Each side runs twice, A-B-B-A (on, off, off, on), on four distinct sets of texts: the first
        # pass after the warm-up is the slowest, and a fixed order handed that penalty to one side.
        per_pass = max(1, count // 2)
        sets = texts(words, 4 * per_pass + 2)
        warm = {True: sets[-2], False: sets[-1]}
        row: dict[str, Any] = {"words": words, "docs": 2 * per_pass}
        totals: dict[bool, dict[str, Any]] = {g: {"seconds": 0.0, "ok": [], "docs": 0} for g in (True, False)}
        for grounded in (True, False):
            await extractor.aextract(TASK, warm[grounded], temperature=0.0, grounded_decoding=grounded)
        for slot, grounded in enumerate((True, False, False, True)):
            batch = sets[slot * per_pass : (slot + 1) * per_pass]
            start = time.perf_counter()
            results = await asyncio.gather(
                *(extractor.aextract(TASK, t, temperature=0.0, grounded_decoding=grounded) for t in batch),
                return_exceptions=True,
            )
            totals[grounded]["seconds"] += time.perf_counter() - start
            totals[grounded]["docs"] += len(batch)
            totals[grounded]["ok"] += [r for r in results if not isinstance(r, BaseException)]
        for grounded, side in totals.items():
            ok = side["ok"]
            key = "on" if grounded else "off"
            row[f"{key}_docs_per_s"] = side["docs"] / side["seconds"]
            row[f"{key}_ok"] = len(ok)
            row[f"{key}_modes"] = sorted({r.grounded_decoding for r in ok})
            row[f"{key}_output_tokens"] = sum(r.usage.completion_tokens for r in ok) / max(1, len(ok))
            row[f"{key}_not_in_text"] = sum(s.status not in ("exact", "normalized") for r in ok for s in r.spans)
        row["ratio"] = row["on_docs_per_s"] / row["off_docs_per_s"]
        print(f"bench: throughput {row}", flush=True)
        rows.append(row)
    return rows


def markdown(compile_rows: list[dict[str, Any]], speed_rows: list[dict[str, Any]], minutes: float) -> str:
    m = machine()
    lines = [
        "# Grounded decoding: substring grammar",
        "",
        f"{m['date']}, {m['cpu']}, {m['cores']} cores, vLLM {m.get('vllm', '?')}, default model "
        f"(SmolLM2-135M-Instruct, 49,152-token vocabulary), task `{TASK}`. "
        f"`python -m bench.grounded_grammar`, {minutes:.0f} min.",
        "",
        "## Compile per request (llguidance matcher, median of 3)",
        "",
        "| words | substring grammar ms | enum of spans ms | task schema ms |",
        "|---:|---:|---:|---:|",
    ]
    for r in compile_rows:
        enum = f"{r['enum_ms']:.1f}" if r["enum_ms"] is not None else "—"
        lines.append(f"| {r['words']} | {r['grammar_ms']:.1f} | {enum} | {r['schema_ms']:.1f} |")
    lines += [
        "",
        "## Throughput, grounded decoding on vs off (all requests at once, greedy)",
        "",
        "| words | docs | on docs/s | off docs/s | on / off | output tok/doc (on / off) | on: decoding "
        "| values not in text (on / off) |",
        "|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in speed_rows:
        lines.append(
            f"| {r['words']} | {r['docs']} | {r['on_docs_per_s']:.2f} | {r['off_docs_per_s']:.2f} | "
            f"**{r['ratio']:.2f}** | {r.get('on_output_tokens', 0):.1f} / {r.get('off_output_tokens', 0):.1f} | "
            f"{', '.join(r['on_modes'])} | {r['on_not_in_text']} / {r['off_not_in_text']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "grounded_grammar.md")
    args = parser.parse_args()
    settings = Settings.from_env(kv_cache_space_gib=3, max_model_len=8192, adapter_serving=ADAPTER_SERVING)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_space_gib))
    extractor = Extractor(settings=settings)
    started = time.perf_counter()

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with extractor:
            await extractor.astart()
            return compile_ms(extractor), await throughput(extractor)

    compile_rows, speed_rows = asyncio.run(run())
    text = markdown(compile_rows, speed_rows, (time.perf_counter() - started) / 60)
    publish(text, args.out)
    save(RESULTS / "raw" / "grounded_grammar.json", {"compile": compile_rows, "throughput": speed_rows})


if __name__ == "__main__":
    main()
