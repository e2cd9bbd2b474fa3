"""Adapters served merged: one vLLM engine per adapter, on its own copy of the weights, beside the base model's.

vLLM's per-request LoRA costs throughput on a model as small as the default one: on 2 CPU cores
adapter requests decode several times slower (plain-PyTorch LoRA, torch.compile off for the whole
engine), and on an H200 its LoRA kernels still took 38 % of the base layout's docs/s. An adapter
folded into the weights (``extractor model merge``) serves the same answers at the speed of a plain
model, but a merged model would serve every task with that adapter's training. So each adapter
gets an engine of its own on its merged weights, and every other task the base model's engine:
the tasks that have an adapter get it, the others the base model, and LoRA stays off everywhere.

The merge is made once per adapter and base model (``$EXTRACTOR_HOME/models/merged-*``, under a file
lock, a few seconds), when the engine starts. The engines share the machine: each gets an equal
share of the CPU KV cache's room or of the GPU memory share.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from pathlib import Path

from extractor.adapters.manifest import AdapterError, check_model, model_fingerprint
from extractor.config import Settings
from extractor.engines.base import Generation, GenerationRequest, Message
from extractor.engines.process import ProcessEngine, vllm_engine
from extractor.engines.vllm import VLLMEngine
from extractor.errors import EngineError
from extractor.models import resolve_model_dir

log = logging.getLogger("extractor.engine")


@dataclass(frozen=True)
class MergedAdapter:
    """An adapter the engine serves from a merged model (``folder``; made at start when missing)."""

    adapter: Path
    folder: Path


def merged_folder(settings: Settings, base_dir: Path, adapter: Path) -> Path:
    """Where ``adapter`` merged into ``base_dir``'s weights is kept: named by the adapter and both weights."""
    digest = hashlib.sha256(model_fingerprint(base_dir).encode())
    for path in [*sorted(adapter.glob("*.safetensors")), adapter / "adapter_config.json"]:
        digest.update(path.read_bytes() if path.is_file() else b"")
    return settings.models_dir / f"merged-{adapter.name}-{digest.hexdigest()[:12]}"


def ensure_merged(base_dir: Path, entry: MergedAdapter) -> Path:
    """The merged model of ``entry``, merged now (a few seconds) unless an earlier start made it."""
    from extractor.adapters.merge import MERGED, merge

    entry.folder.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.folder.parent / ".merge.lock", "w") as lock:  # one process merges, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (entry.folder / MERGED).is_file():
            log.info("merging %s into %s (once)", entry.adapter, entry.folder)
            merge(base_dir, entry.adapter, entry.folder)
    return entry.folder


class MergedAdapters:
    """The base model's engine plus one engine per merged adapter; each request goes to its adapter's."""

    def __init__(self, settings: Settings, adapters: Sequence[Path], *, share: int = 1) -> None:
        self._settings = settings
        self._base_dir = resolve_model_dir(settings)
        self._merged: list[MergedAdapter] = []
        self._refused: dict[str, str] = {}
        for adapter in dict.fromkeys(adapters):
            try:
                check_model(adapter, self._base_dir)
            except AdapterError as error:  # its tasks fail, saying why; the other tasks serve
                self._refused[str(adapter)] = str(error)
                log.warning("%s", error)
                continue
            self._merged.append(MergedAdapter(adapter, merged_folder(settings, self._base_dir, adapter)))
        self._share = share + len(self._merged)  # each engine takes this share of the memory
        self._base = vllm_engine(settings.with_(max_lora_rank=0), share=self._share)
        self._engines: dict[str, VLLMEngine | ProcessEngine] = {}

    @property
    def adapters(self) -> dict[str, Path]:
        """Each served adapter's folder -> the merged model serving it."""
        return {str(m.adapter): m.folder for m in self._merged}

    @property
    def model_name(self) -> str:
        return self._base.model_name

    @property
    def max_model_len(self) -> int:
        return self._base.max_model_len

    @property
    def unfinished_requests(self) -> int:
        """Requests the engines still hold, all of them together."""
        return self._base.unfinished_requests + sum(e.unfinished_requests for e in self._engines.values())

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        return self._base.count_prompt_tokens(messages)  # a merge keeps the base model's tokenizer

    async def start(self) -> None:
        """Merge what is not merged yet, then start the engines one after another.

        The base engine sizes the CPU KV cache for its share of the free memory; the others take the same size.
        """
        await self._base.start()
        for entry in self._merged:
            if str(entry.adapter) in self._engines:
                continue
            folder = await asyncio.to_thread(ensure_merged, self._base_dir, entry)
            engine = vllm_engine(self._settings.with_(model=str(folder), max_lora_rank=0), share=self._share)
            await engine.start()
            self._engines[str(entry.adapter)] = engine

    def _engine_for(self, request: GenerationRequest) -> VLLMEngine | ProcessEngine:
        if request.adapter is None:
            return self._base
        engine = self._engines.get(request.adapter)
        if engine is not None:
            return engine
        if request.adapter in self._refused:
            raise EngineError(
                f"{self._refused[request.adapter]}; or serve its tasks by the base model with their worked "
                "examples: EXTRACTOR_ADAPTER_SERVING=off"
            )
        raise EngineError(
            f"{request.adapter}: this adapter was not in the catalog when the engine started; restart the "
            "service to serve it merged (or serve adapters through LoRA: EXTRACTOR_ADAPTER_SERVING=lora)"
        )

    async def generate(self, request: GenerationRequest) -> Generation:
        return await self._engine_for(request).generate(request)

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        """Yield the cumulative text as it grows (the adapter's engine); closing it aborts the request."""
        chunks = self._engine_for(request).stream(request)
        async with contextlib.aclosing(chunks):
            async for text in chunks:
                yield text

    async def close(self) -> None:
        for engine in (*self._engines.values(), self._base):
            await engine.close()
        self._engines.clear()
