"""Phase 2 of `make bench`: P3's other side, vLLM's default JSON whitespace.

``disable_any_whitespace`` is engine-wide (vLLM ignores it per request), so this phase starts
its own engine, identical to the product's but for that flag, and generates P1's raw prompts
(same schemas, greedy) twice, counting output tokens per extraction: as extractor renders
them (worked examples as compact JSON), and with the examples as ``json.dumps`` writes them by
default (``", "`` and ``": "``), as a client that does not compact would show them. The model
copies the examples' style, so the second pass is the baseline compact JSON is measured against.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from bench import common
from bench.compact import raw_passes
from extractor.engines.base import GenerationRequest, Message
from extractor.engines.vllm import VLLMEngine


class WhitespaceEngine(VLLMEngine):
    """The product's engine with vLLM's default: any whitespace allowed between JSON tokens."""

    def _engine_args(self) -> Any:
        from vllm.config import StructuredOutputsConfig

        args = super()._engine_args()
        backend = args.structured_outputs_config.backend
        config = StructuredOutputsConfig(backend=backend, disable_any_whitespace=False)
        return dataclasses.replace(args, structured_outputs_config=config)


async def main(quick: bool, out: Path) -> None:
    size = common.sizes(quick)
    extractor, items, engine_start_s = await common.started(
        lambda s: WhitespaceEngine(s) if s.engine == "vllm" else None
    )
    engine = extractor.engine
    items = common.jobs(items, size.throughput_tasks, size.throughput_per_task)
    try:
        raw = await raw_passes(engine, extractor, items)
        spaced = await raw_passes(engine, extractor, items, transform=spaced_examples)
    finally:
        await extractor.aclose()
    per_doc = [r["completion_tokens"] / r["docs"] for r in (raw, spaced)]
    print(f"bench: P3 done: {per_doc[0]:.1f} / {per_doc[1]:.1f} output tokens per extraction", flush=True)
    common.save(out, {"quick": quick, "engine_start_s": engine_start_s, "raw": raw, "spaced": spaced})


def spaced_examples(request: GenerationRequest) -> GenerationRequest:
    """The request with its worked examples shown as ``json.dumps`` writes them by default."""
    messages: list[Message] = [
        {"role": m["role"], "content": json.dumps(json.loads(m["content"]), ensure_ascii=False)}
        if m["role"] == "assistant"
        else m
        for m in request.messages
    ]
    return dataclasses.replace(request, messages=messages)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.out))
