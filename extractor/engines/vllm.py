"""In-process vLLM (AsyncLLM) engine.

vLLM's AsyncLLM is bound to the event loop it was created on. We give it a loop of its own on
a background thread, so one engine serves any caller: a sync CLI, pytest's per-test loops, or
uvicorn's loop. Calls cross over with ``run_coroutine_threadsafe``; cancelling the caller
cancels the engine-side task, which aborts the vLLM request.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
from collections.abc import AsyncIterator, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from extractor.config import Settings
from extractor.engines.base import Generation, GenerationRequest, Message
from extractor.errors import EngineError
from extractor.models import resolve_model_dir

T = TypeVar("T")
_ids = itertools.count()


def has_cuda() -> bool:
    """Whether an NVIDIA GPU is usable (decides CPU-only engine settings)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch or a broken CUDA stack both mean "no GPU"
        return False


class VLLMEngine:
    """vLLM in this process, decoding constrained by the request's JSON Schema."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._model_dir: Path = resolve_model_dir(settings)
        self._llm: Any = None
        self._tokenizer: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return self._model_dir.name if self._settings.model == "default" else str(self._settings.model)

    @property
    def max_model_len(self) -> int:
        return self._settings.max_model_len

    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer (loaded at start)."""
        if self._tokenizer is None:
            raise EngineError("engine not started")
        return self._tokenizer

    async def start(self) -> None:
        await asyncio.to_thread(self.start_sync)

    def start_sync(self) -> None:
        """Load the model (about a minute for the default model on 2 CPU cores); idempotent."""
        with self._start_lock:
            if self._llm is not None:
                return
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self._model_dir))
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="extractor-vllm", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
            try:
                self._llm = asyncio.run_coroutine_threadsafe(self._build(), loop).result()
            except Exception as error:
                loop.call_soon_threadsafe(loop.stop)
                self._loop = None
                raise EngineError(f"vLLM failed to start on {self._model_dir}: {error}") from error

    def _engine_args(self) -> Any:
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs

        s = self._settings
        dtype: Any = s.dtype
        return AsyncEngineArgs(
            model=str(self._model_dir),
            dtype=dtype,
            max_model_len=s.max_model_len,
            gpu_memory_utilization=s.gpu_memory_utilization,
            tensor_parallel_size=s.tensor_parallel_size,
            quantization=s.quantization,
            max_num_seqs=s.max_num_seqs,
            # Compact JSON engine-wide: per-request disable_any_whitespace is silently ignored.
            structured_outputs_config=StructuredOutputsConfig(backend=s.grammar_backend, disable_any_whitespace=True),
            disable_log_stats=True,
            enable_prefix_caching=True,
        )

    async def _build(self) -> Any:
        if not has_cuda():
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self._settings.kv_cache_space_gib))
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(self._engine_args())

    def _submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        if self._loop is None or self._llm is None:
            coro.close()
            raise EngineError("engine not started; call start() first")
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def render_prompt(self, messages: Sequence[Message]) -> str:
        """The chat rendered with the model's chat template, ready for generation."""
        return str(self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True))

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        return len(self.tokenizer(self.render_prompt(messages), add_special_tokens=False)["input_ids"])

    def _sampling(self, request: GenerationRequest) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = StructuredOutputsParams(json=dict(request.json_schema)) if request.json_schema else None
        return SamplingParams(
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            stop=list(request.stop) or None,
            structured_outputs=structured,
        )

    async def generate(self, request: GenerationRequest) -> Generation:
        prompt = self.render_prompt(request.messages)
        return await self._submit(self._generate(prompt, self._sampling(request)))

    async def _generate(self, prompt: str, params: Any) -> Generation:
        final: Any = None
        async for output in self._llm.generate(prompt, params, request_id=f"ex-{next(_ids)}"):
            final = output
        if final is None or not final.outputs:
            raise EngineError("vLLM returned no output")
        completion = final.outputs[0]
        return Generation(
            text=completion.text,
            prompt_tokens=len(final.prompt_token_ids or ()),
            completion_tokens=len(completion.token_ids),
            finish_reason=str(completion.finish_reason or "stop"),
        )

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str]:
        """Yield the cumulative text as it grows; closing the iterator aborts the request."""
        prompt = self.render_prompt(request.messages)
        queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        caller = asyncio.get_running_loop()

        async def pump() -> None:
            try:
                async for output in self._llm.generate(prompt, self._sampling(request), request_id=f"ex-{next(_ids)}"):
                    caller.call_soon_threadsafe(queue.put_nowait, output.outputs[0].text)
            except BaseException as error:  # noqa: BLE001 - handed to the consumer
                caller.call_soon_threadsafe(queue.put_nowait, error)
            finally:
                caller.call_soon_threadsafe(queue.put_nowait, None)

        future = self._submit(pump())
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise EngineError(f"generation failed: {item}") from item
                yield item
        finally:
            future.cancel()

    async def close(self) -> None:
        self.close_sync()

    def close_sync(self) -> None:
        """Shut vLLM down and stop its loop; idempotent."""
        llm, loop, thread = self._llm, self._loop, self._thread
        self._llm = self._loop = self._thread = None
        if llm is not None:
            llm.shutdown()
        if loop is not None:
            # Let vLLM's background tasks see their cancellation before the loop goes away.
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout=10)
            if not loop.is_running():
                loop.close()


async def _cancel_pending() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
