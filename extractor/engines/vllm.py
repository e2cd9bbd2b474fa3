"""In-process vLLM (AsyncLLM) engine.

vLLM's AsyncLLM is bound to the event loop it was created on. We give it a loop of its own on
a background thread (:class:`~extractor.engines.loop.LoopThread`), so one engine serves any
caller; cancelling the caller cancels the engine-side task, which aborts the vLLM request.

What extractor changes inside vLLM lives in :mod:`extractor.vllm_plugins`, which vLLM loads
through its plugin entry points; this module imports none of it. It speaks to those hooks through
the environment (``EXTRACTOR_MASK_THREADS``) and a mark on each request's parameters (:func:`mark`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import itertools
import logging
import os
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from extractor.config import Settings
from extractor.engines import gpu_start, lifeline, main_guard, memory, priority
from extractor.engines.base import Generation, GenerationRequest
from extractor.engines.local import LocalModel
from extractor.engines.loop import LoopThread
from extractor.engines.tokenizer import ChatIds
from extractor.errors import ConfigError, EngineDeadError, EngineError
from extractor.models import resolve_model_dir

T = TypeVar("T")
log = logging.getLogger("extractor.engine")
_ids = itertools.count()

MASK_THREADS = "EXTRACTOR_MASK_THREADS"  # the mask pool's threads, read by the hook in vLLM's processes
CUDA_MASK_THREADS = 16  # measured on an H200 with 16 host cores (bench/results/mask_fill.md)
SMALL_MACHINE_CORES = 2  # up to this many cores, vLLM's CPU worker is not kept off one of them (cpu_environment)
CHECKED = "extractor_checked"  # in SamplingParams.extra_args: extractor checked this request's constraint
UNWRAPPED = "extractor_wrapped"  # on vLLM's grammar check, where the checks hook wrapped it: vLLM's own


def has_cuda() -> bool:
    """Whether an NVIDIA GPU is usable (decides CPU-only engine settings).

    Asks NVML rather than initialising CUDA in this process: vLLM forks its engine core, and a
    child of a process that already initialised CUDA dies ("Cannot re-initialize CUDA in forked
    subprocess"). vLLM sets the same variable itself, but only once it is imported.
    """
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch or a broken CUDA stack both mean "no GPU"
        return False


def cuda_environment(environ: MutableMapping[str, str]) -> None:
    """What the engine sets on CUDA before vLLM starts, where the user has not set it."""
    # The engine core runs in a child process; a forked child of a process in which anything
    # (a tokenizer's torch import, a test's check) touched CUDA fails "CUDA error:
    # initialization error". A spawned child starts clean.
    environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    # Each step's token masks in llguidance's pool (the engine core inherits the variable):
    # constrained output 1.2-1.8x faster on an H200, latency at 1 and 16 clients as before
    # (bench/results/mask_fill.md); EXTRACTOR_MASK_THREADS=0 keeps vLLM's own fill.
    environ.setdefault(MASK_THREADS, str(cuda_mask_threads()))


def cpu_environment(environ: MutableMapping[str, str]) -> None:
    """What the engine sets on a CPU before vLLM starts, where the user has not set it.

    vLLM binds its CPU worker's threads to every core but one, kept for its scheduler. On a machine
    of two cores that is half of it: there the worker gets both (``VLLM_CPU_NUM_OF_RESERVED_CPU=0``),
    which read prompts 2.0x as fast on the 2-core AMD EPYC (387-391 against 196 prompt tokens/s,
    float32, constrained answers; docs/reference/settings.md). Larger machines keep vLLM's reserve.
    """
    if (os.cpu_count() or 1) <= SMALL_MACHINE_CORES:
        environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


SHUTDOWN_NOISE = "AsyncLLM output_handler failed"


class _ShutdownNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(SHUTDOWN_NOISE)


@contextlib.contextmanager
def quiet_shutdown() -> Iterator[None]:
    """Leave out vLLM's "output_handler failed" traceback while we shut it down ourselves.

    ``AsyncLLM.shutdown`` stops the engine core before it cancels its output handler, which may
    first read the core's going as a death and log an ``EngineDeadError`` traceback at ERROR
    (vLLM issue 48745, a race; the fix, PR 49000, is not merged): seen once at the end of an
    ``extractor tune`` that had closed a second model's engine. An engine core that dies on its
    own, outside a shutdown, is still logged, and still fails its requests.
    """
    logger = logging.getLogger("vllm.v1.engine.async_llm")
    noise = _ShutdownNoise()
    logger.addFilter(noise)
    try:
        yield
    finally:
        logger.removeFilter(noise)


def cuda_mask_threads() -> int:
    """The mask pool's threads on CUDA when ``EXTRACTOR_MASK_THREADS`` is unset: 16, at most the host's cores."""
    return min(CUDA_MASK_THREADS, os.cpu_count() or 1)


def mark(sampling_params: Any) -> Any:
    """The same parameters, marked: their constraint comes from extractor, which has checked it.

    The grammar checks hook (:mod:`extractor.vllm_plugins.checks`) skips vLLM's second check for them.
    """
    sampling_params.extra_args = {**(sampling_params.extra_args or {}), CHECKED: True}
    return sampling_params


def rejection(sampling_params: Any) -> str | None:
    """Why vLLM's check refuses this request's constraint (None: it compiles), asked after an empty answer."""
    from vllm.v1.structured_output import backend_guidance

    check = backend_guidance.validate_guidance_grammar
    check = getattr(check, UNWRAPPED, check)
    try:
        check(sampling_params, tokenizer=None)
    except Exception as error:  # noqa: BLE001 - VLLMValidationError: a ValueError in 0.26, not in 0.32
        return str(error)
    return None


def with_extra_arguments(ours: dict[str, Any], extra: dict[str, Any], kind: Any) -> dict[str, Any]:
    """``ours`` with ``extra`` (EXTRACTOR_VLLM_ARGS) over them; a name the dataclass ``kind`` lacks: ConfigError."""
    known = {f.name for f in dataclasses.fields(kind)}
    unknown = sorted(set(extra) - known)
    if unknown:
        raise ConfigError(
            f"EXTRACTOR_VLLM_ARGS: not vLLM engine arguments: {', '.join(unknown)} "
            "(AsyncEngineArgs' fields: `vllm serve`'s flags with underscores)"
        )
    return {**ours, **extra}


def speculation(tokens: int) -> dict[str, Any] | None:
    """The engine's speculative config: ``tokens`` per step from vLLM's prompt lookup ("ngram", 2-5 tokens), or None."""
    if tokens <= 0:
        return None
    return {"method": "ngram", "num_speculative_tokens": tokens, "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def sampled_logprobs(steps: Any, ids: Sequence[int]) -> tuple[float, ...]:
    """Each sampled token's log-probability from vLLM's logprobs (a dict per token, or flat); () if absent."""
    if steps is None or len(steps) != len(ids):
        return ()
    starts = getattr(steps, "start_indices", None)
    if starts is not None:  # FlatLogprobs: one list; the sampled token comes first at each position
        flat_ids, values = steps.token_ids, steps.logprobs
        if all(flat_ids[start] == token for start, token in zip(starts, ids, strict=True)):
            return tuple(float(values[start]) for start in starts)
    return tuple(float(step[token].logprob) for step, token in zip(steps, ids, strict=True))


def _lora_rank(rank: int) -> Any:
    """VLLM takes only some ranks (1, 8, 16, 32, 64, ...): the smallest of them that holds ``rank``."""
    return next((r for r in (1, 8, 16, 32, 64, 128, 256, 320, 512) if r >= rank), 512)


class VLLMEngine(LocalModel):
    """vLLM in this process, decoding constrained by the request's JSON Schema."""

    def __init__(self, settings: Settings, *, share: int = 1) -> None:
        """``share``: how many engines share this machine; each takes that share of the memory."""
        self._settings = settings
        self._share = share
        self._model_dir: Path = resolve_model_dir(settings)
        self._llm: Any = None
        self._chat_ids: ChatIds | None = None  # the prompts' token ids (the tokenizer, loaded at start)
        self._loop: LoopThread | None = None
        self._start_lock = threading.Lock()
        self._adapters: dict[str, Any] = {}  # adapter folder -> its LoRARequest, None if merged (checked once)
        # Where logprobs are asked: place each token in the text here (False: the caller does, from
        # ``Generation.token_ids``; vLLM in its own process leaves it to the service's process)
        self.places_tokens = True

    @property
    def unfinished_requests(self) -> int:
        """Requests vLLM still holds (0 when idle: an aborted request is gone too)."""
        # output_processor's count exists in vLLM 0.26 (the CUDA build) and 0.32 (the CPU build) alike;
        # AsyncLLM.get_num_unfinished_requests() only in the latter.
        return int(self._llm.output_processor.get_num_unfinished_requests()) if self._llm is not None else 0

    async def start(self) -> None:
        await asyncio.to_thread(self.start_sync)

    def start_sync(self) -> None:
        """Load the model (about a minute for the default model on 2 CPU cores); idempotent."""
        with self._start_lock:
            if self._llm is not None:
                return
            main_guard.check(cuda=has_cuda())  # before vLLM spawns a process that cannot import the main program
            lifeline.claim(self._settings.home)  # vLLM's processes die with this one, however it dies
            self._load_tokenizer()
            loop = LoopThread("extractor-vllm")
            try:
                # on a GPU, engines sharing it start one after another (their memory sizing would collide)
                with gpu_start.one_at_a_time(self._settings.home) if has_cuda() else contextlib.nullcontext():
                    self._llm = loop.run(self._build())
            except ConfigError:  # a setting to fix (EXTRACTOR_VLLM_ARGS), not vLLM failing
                loop.stop()
                raise
            except Exception as error:
                loop.stop()
                raise EngineError(f"vLLM failed to start on {self._model_dir}: {error}") from error
            self._loop = loop
            if not has_cuda():  # on a GPU the engine core's CPU time is the grammar masks: leave it be
                priority.lower_engine(self._settings.engine_nice or 0)

    def _engine_args(self) -> Any:
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs

        s = self._settings
        dtype: Any = s.dtype
        ours: dict[str, Any] = dict(
            model=str(self._model_dir),
            dtype=dtype,
            max_model_len=s.max_model_len,
            gpu_memory_utilization=s.gpu_memory_utilization / self._share,
            tensor_parallel_size=s.tensor_parallel_size,
            quantization=s.quantization,
            load_format=s.load_format,
            max_num_seqs=s.max_num_seqs,
            enforce_eager=s.enforce_eager,
            block_size=s.block_size,
            # Compact JSON engine-wide: per-request disable_any_whitespace is silently ignored.
            structured_outputs_config=StructuredOutputsConfig(backend=s.grammar_backend, disable_any_whitespace=True),
            disable_log_stats=True,
            enable_prefix_caching=True,
            # LoRA only when the catalog holds adapters: on CPU it turns torch.compile off (slower decoding)
            enable_lora=s.max_lora_rank > 0,
            max_lora_rank=_lora_rank(s.max_lora_rank),
            max_loras=s.max_loras,
            speculative_config=speculation(s.speculative_tokens),
        )
        return AsyncEngineArgs(**with_extra_arguments(ours, s.engine_arguments, AsyncEngineArgs))

    async def _build(self) -> Any:
        if self._settings.mask_threads is not None:  # the hook reads it in vLLM's processes
            os.environ[MASK_THREADS] = str(self._settings.mask_threads)
        if has_cuda():
            cuda_environment(os.environ)
        else:
            cpu_environment(os.environ)
            if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
                size = memory.cpu_kv_cache_size(
                    requested=self._settings.kv_cache_space_gib,
                    available_bytes=memory.free_bytes() // self._share,
                    model_bytes=memory.folder_bytes(self._model_dir),
                )
                if size.note is not None:
                    log.warning("%s", size.note)
                os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(size.gib)
        if self._settings.speculative_tokens and not has_cuda():
            log.warning(
                "EXTRACTOR_SPECULATIVE_TOKENS on vLLM's CPU backend: sampled (temperature > 0) constrained "
                "answers came out corrupted in our runs; greedy ones are unchanged (README, Benchmarks)"
            )
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        # An offline engine's batch per step, not an embedded one's: vLLM sizes a step's tokens by its
        # caller (max_num_batched_tokens 16,384 on an H100 or H200, 8,192 on a smaller GPU, 4,096 on CPU
        # as LLM's; 2,048 anywhere as AsyncLLM's), and a contract's prompts of ~1,400 tokens each then
        # prefill one or two a step (issue 58; bench/results/documents.md). EXTRACTOR_VLLM_ARGS overrides.
        return AsyncLLM.from_engine_args(self._engine_args(), usage_context=UsageContext.LLM_CLASS)

    def _running(self) -> LoopThread:
        if self._loop is None or self._llm is None:
            raise EngineError("engine not started; call start() first")
        if self._llm.errored:
            raise EngineDeadError("vLLM's engine core is gone (it died or was killed); restart the service")
        return self._loop

    def _failed(self, error: Exception) -> EngineError:
        """Our error for one of vLLM's: dead when its engine core is gone (nothing more will run)."""
        if self._llm is None or self._llm.errored:
            return EngineDeadError(f"vLLM's engine core died ({type(error).__name__}: {error}); restart the service")
        return EngineError(f"vLLM generation failed: {type(error).__name__}: {error}")

    def _submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        try:
            loop = self._running()
        except EngineError:
            coro.close()
            raise
        return loop.submit(coro)

    @staticmethod
    def _prompt(ids: Sequence[int]) -> Any:
        """What vLLM is given: the chat's token ids (vLLM tokenizes a text prompt again)."""
        from vllm.inputs import TokensPrompt

        return TokensPrompt(prompt_token_ids=list(ids))

    def _sampling(self, request: GenerationRequest, *, stream: bool = False) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = None
        if request.grammar is not None:
            structured = StructuredOutputsParams(grammar=request.grammar)
        elif request.json_schema:
            structured = StructuredOutputsParams(json=dict(request.json_schema))
        params = SamplingParams(
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            stop=list(request.stop) or None,
            structured_outputs=structured,
            top_p=1.0 if request.top_p is None else request.top_p,
            seed=request.seed,
            # 0: the sampled token's own log-probability only (computed after the grammar's mask)
            logprobs=0 if request.logprobs else None,
            **({} if stream else self._tokens_only(request, SamplingParams)),
        )
        # every constraint was checked before it got here (catalog, ad-hoc task, grounded builder)
        return mark(params) if structured is not None else params

    def _tokens_only(self, request: GenerationRequest, sampling: Any) -> dict[str, Any]:
        """Where the answer's tokens come back anyway (logprobs asked), its text comes from them here.

        vLLM then skips its incremental detokenizer and the per-token decode of each logprob, work
        its front end does for every sequence at every step; one decode of the finished answer's
        bytes here replaces it. Not with stop strings (vLLM looks for them in its text) nor where
        the tokenizer's bytes are not trusted; the logprobs come flat (one list, not a dict per
        token) where vLLM can.
        """
        if not request.logprobs or request.stop or self._places is None or not self._places.reads_bytes:
            return {}
        flat = "flat_logprobs" in getattr(sampling, "__struct_fields__", ())  # vLLM 0.11.1 on
        return {"detokenize": False, **({"flat_logprobs": True} if flat else {})}

    def _lora(self, request: GenerationRequest) -> Any:
        """The request's ``LoRARequest`` (None: the base model); the adapter is checked on first use."""
        if request.adapter is None:
            return None
        if request.adapter in self._adapters:
            return self._adapters[request.adapter]
        from extractor.adapters.merge import holds

        if holds(self._model_dir, Path(request.adapter)):  # `extractor model merge`: already in the weights
            self._adapters[request.adapter] = None
            return None
        if self._settings.max_lora_rank <= 0:
            raise EngineError(
                f"{request.adapter}: the engine was started without LoRA; set EXTRACTOR_MAX_LORA_RANK "
                "to the adapter's rank (an Extractor sets it itself when its catalog holds adapters)"
            )
        from vllm.lora.request import LoRARequest

        from extractor.adapters.manifest import check_model

        folder = Path(request.adapter)
        check_model(folder, self._model_dir)
        found = LoRARequest(folder.name, len(self._adapters) + 1, str(folder))
        self._adapters[request.adapter] = found
        return found

    async def generate(self, request: GenerationRequest) -> Generation:
        return await self._submit(self.generate_here(self.prompt_ids(request.messages), request))

    async def generate_here(self, ids: Sequence[int], request: GenerationRequest) -> Generation:
        """Generate from the prompt's token ids; on the engine's own loop (``request.messages`` unread)."""
        from vllm.sampling_params import RequestOutputKind

        self._running()
        params = self._sampling(request)
        params.output_kind = RequestOutputKind.FINAL_ONLY  # one output, not one per token, through the shared loop
        return await self._generate(self._prompt(ids), params, self._lora(request))

    async def _generate(self, prompt: Any, params: Any, lora: Any = None) -> Generation:
        final: Any = None
        try:
            async for output in self._llm.generate(prompt, params, request_id=f"ex-{next(_ids)}", lora_request=lora):
                final = output
        except Exception as error:
            raise self._failed(error) from error
        if final is None or not final.outputs:
            raise EngineError("vLLM returned no output")
        completion = final.outputs[0]
        ids = list(completion.token_ids)
        text = completion.text if params.detokenize else self.answer_text(ids)
        if not text and params.structured_outputs is not None:
            # an empty answer under a constraint: the engine core's matcher may have refused the grammar
            refused = rejection(params)
            if refused is not None:
                raise EngineError(f"vLLM refused the request's constraint: {refused}")
        ends: tuple[int, ...] = ()
        logprobs = sampled_logprobs(completion.logprobs, ids)
        if logprobs and self.places_tokens:
            ends = self.token_ends(ids, text)
        return Generation(
            text=text,
            prompt_tokens=len(final.prompt_token_ids or ()),
            completion_tokens=len(ids),
            finish_reason=str(completion.finish_reason or "stop"),
            token_ends=ends,
            token_logprobs=logprobs,
            token_ids=() if self.places_tokens or not logprobs else tuple(ids),
        )

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        """Yield the cumulative text as it grows; closing the iterator aborts the request."""
        ids = self.prompt_ids(request.messages)
        async for text in self._running().stream(lambda: self.texts_here(ids, request)):
            yield text

    async def texts_here(self, ids: Sequence[int], request: GenerationRequest) -> AsyncIterator[str]:
        """The cumulative text from the prompt's token ids as it grows; on the engine's own loop."""
        self._running()
        prompt, params, lora = self._prompt(ids), self._sampling(request, stream=True), self._lora(request)
        try:
            async for output in self._llm.generate(prompt, params, request_id=f"ex-{next(_ids)}", lora_request=lora):
                yield output.outputs[0].text
        except Exception as error:
            raise self._failed(error) from error

    def schedule(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the engine's own loop (where ``generate_here`` and ``texts_here`` run)."""
        return asyncio.run_coroutine_threadsafe(coro, self._running().loop)

    async def close(self) -> None:
        self.close_sync()

    def close_sync(self) -> None:
        """Shut vLLM down and stop its loop; idempotent."""
        llm, loop = self._llm, self._loop
        self._llm = self._loop = None
        with quiet_shutdown():
            if llm is not None:
                llm.shutdown()
            if loop is not None:
                loop.stop()
