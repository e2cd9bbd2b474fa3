"""Several in-process vLLM engines of one model, each request to the one holding fewest: ``EXTRACTOR_ENGINE_REPLICAS``.

One vLLM engine core is one Python thread: it schedules each step, prepares the step's inputs, advances
every request's grammar and waits for the token masks. With structured outputs vLLM 0.26 cannot queue a
step before the previous step's tokens have advanced the grammars, so the GPU waits on that thread
every step, the longer the larger the batch (``bench/results/mask_fill.md``: constrained output at 0.57
of free text with 256 requests at once, 0.78 with 50). Replicas are engine cores of their own, in
processes of their own, each holding ``1/N`` of ``EXTRACTOR_GPU_MEMORY_UTILIZATION`` (of the CPU KV
cache on CPU): while one prepares its step, the GPU can run another's.

Off (1) by default: what it is worth on a GPU is measured by ``bench.mask_fill`` and ``bench.gpu_bench``
with ``EXTRACTOR_ENGINE_REPLICAS=2`` (``bench/gpu/README.md``); on CPU cores the replicas share the
cores the one engine had. Adapters served merged (an engine per adapter) do not combine with it: serve
them through LoRA in each replica (``EXTRACTOR_ADAPTER_SERVING=lora``) or not at all (``off``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from extractor.config import Settings
from extractor.engines.base import Generation, GenerationRequest, Message


class EngineReplicas:
    """Engines of one model as one engine; a request goes to the engine holding fewest (the first of equals)."""

    def __init__(self, engines: Sequence[Any]) -> None:
        if not engines:
            raise ValueError("EngineReplicas needs at least one engine")
        self._engines = list(engines)
        self._held = [0] * len(self._engines)

    @classmethod
    def of(cls, settings: Settings) -> EngineReplicas:
        """``settings.engine_replicas`` in-process vLLM engines of the settings' model, each a share of the memory."""
        from extractor.engines.process import vllm_engine

        count = settings.engine_replicas
        return cls([vllm_engine(settings, share=count) for _ in range(count)])

    @property
    def engines(self) -> list[Any]:
        return list(self._engines)

    @property
    def model_name(self) -> str:
        return str(self._engines[0].model_name)

    @property
    def max_model_len(self) -> int:
        return int(self._engines[0].max_model_len)

    @property
    def unfinished_requests(self) -> int:
        """Requests the engines still hold, all of them together."""
        return sum(int(getattr(e, "unfinished_requests", 0)) for e in self._engines)

    def held(self) -> list[int]:
        """Requests in flight through each engine, in order."""
        return list(self._held)

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        return int(self._engines[0].count_prompt_tokens(messages))  # one model, one tokenizer

    def forget_prompts(self) -> None:
        """Drop the prompt token ids every engine remembers (a benchmark's pass meets its prompts anew)."""
        for engine in self._engines:
            forget = getattr(engine, "forget_prompts", None)
            if forget is not None:
                forget()

    async def start(self) -> None:
        """Start the engines one after another: each sizes its memory on what the ones before it left."""
        for engine in self._engines:
            await engine.start()

    def _pick(self) -> int:
        return min(range(len(self._engines)), key=self._held.__getitem__)

    async def generate(self, request: GenerationRequest) -> Generation:
        index = self._pick()
        self._held[index] += 1
        try:
            return await self._engines[index].generate(request)  # type: ignore[no-any-return]
        finally:
            self._held[index] -= 1

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        """Yield the cumulative text as it grows, from one engine; closing it aborts the request there."""
        index = self._pick()
        self._held[index] += 1
        try:
            chunks = self._engines[index].stream(request)
            async with contextlib.aclosing(chunks):
                async for text in chunks:
                    yield text
        finally:
            self._held[index] -= 1

    async def close(self) -> None:
        for engine in self._engines:
            await engine.close()
