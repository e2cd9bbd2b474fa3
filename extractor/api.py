"""The Python API: an :class:`Extractor` holds the catalog and one engine, started once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Collection, Coroutine, Iterable, Sequence
from contextlib import aclosing
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, Unpack, overload

from pydantic import BaseModel

from extractor import chat as chatting
from extractor import documents, pipeline
from extractor.catalog.reload import load_catalog
from extractor.catalog.tasks import Catalog, Task
from extractor.chat import ChatReply
from extractor.config import Settings
from extractor.documents import Document
from extractor.documents.converting import Converter
from extractor.documents.provenance import attach
from extractor.engines import Engine, create_engine
from extractor.engines.base import GenerationRequest
from extractor.errors import ExtractionFailed, ExtractorError
from extractor.options import OptionArgs, Options, checked
from extractor.results import ExtractionResult
from extractor.stages import stage
from extractor.typed import TypedModel

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class Extractor:
    """The task catalog plus one engine. Create one per process and reuse it.

    Example:
        >>> with Extractor() as ex:  # doctest: +SKIP
        ...     result = ex.extract("landmark_slots", "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。")
        ...     result.value.country

    """

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        engine: Engine | None = None,
        catalog: Catalog | None = None,
        tasks: Collection[str] | None = None,
    ) -> None:
        """``tasks``: the only tasks this extractor will run (a CLI command's one task), None for any.

        Only their adapters get an engine of their own (each merged adapter adds an engine start).
        """
        self.settings = settings or Settings.from_env()
        self._tasks = None if tasks is None else frozenset(tasks)
        # Swapped whole by a reload (extractor.catalog.reload); a request reads it once, at its start.
        self.catalog = catalog or load_catalog(
            self.settings.tasks_dir, backend=self.settings.grammar_backend, pools=self.settings.pools_dir
        )
        if self.settings.adapter_serving == "auto" and self.settings.engine == "vllm":
            self.settings = self.settings.with_(adapter_serving=self._auto_serving())
        if self.settings.max_lora_rank == 0:
            self.settings = _lora_settings(self.settings, self.catalog)
        self._engine = engine
        # The engines of the models tasks name besides the service's (``x-extractor.model``), by name.
        self._models: dict[str, Engine] = {}
        self._started = False
        self._lock = threading.Lock()
        self._converter: Converter | None = None  # documents converted beside the pipeline, started on first use

    @property
    def engine(self) -> Engine:
        """The engine, built from the settings on first use."""
        with self._lock:
            if self._engine is None:
                share = 1 + len(self._task_models())  # the engines share the machine, as merged adapters do
                self._engine = create_engine(self.settings, adapters=self._merged_adapters(), share=share)
            return self._engine

    def _task_models(self) -> list[str]:
        """The models this extractor's tasks name besides the service's (each an engine of its own)."""
        names = [n for n in self.catalog.names() if self._tasks is None or n in self._tasks]
        named = {self.catalog.tasks[n].settings.model for n in names}
        return sorted(m for m in named if m is not None and m != self.settings.model)

    def engine_for(self, task: Task) -> Engine:
        """The engine serving ``task``: its own model's (``x-extractor.model``), else the service's."""
        model = task.settings.model
        if model is None or model == self.settings.model or self.settings.engine == "remote":
            return self.engine
        return self._model_engine(model)

    def _model_engine(self, model: str) -> Engine:
        with self._lock:
            found = self._models.get(model)
            if found is None:
                share = 1 + len(self._task_models())
                found = self._models[model] = create_engine(self.settings.with_(model=model), share=share)
            return found

    def _auto_serving(self) -> str:
        """``auto`` made concrete for the tasks' adapters on this device (:mod:`extractor.engines.adapter_serving`)."""
        from extractor.engines import adapter_serving
        from extractor.engines.memory import folder_bytes
        from extractor.engines.vllm import has_cuda
        from extractor.models import resolve_model_dir

        names = [n for n in self.catalog.names() if self._tasks is None or n in self._tasks]
        adapters = _unmerged_adapters(self.settings, self.catalog, names)
        if not adapters:
            return "merged"  # nothing to serve either way
        cuda = has_cuda()
        try:
            weights = folder_bytes(resolve_model_dir(self.settings)) if cuda else 0
        except ExtractorError:  # no model yet: the engine says so when it starts
            weights = 0
        mode, why = adapter_serving.choose(
            adapters=len(adapters),
            cuda=cuda,
            weights_bytes=weights,
            gpu_bytes=adapter_serving.gpu_total_bytes() if cuda else None,
            memory_utilization=self.settings.gpu_memory_utilization,
        )
        adapter_serving.log.info("EXTRACTOR_ADAPTER_SERVING=auto: %s (%s)", mode, why)
        return mode

    def _merged_adapters(self) -> list[Path]:
        """The catalog's adapters, when the in-process engine serves each one merged (the default)."""
        if not self.settings.serves_adapters_merged:
            return []
        names = [n for n in self.catalog.names() if self._tasks is None or n in self._tasks]
        return sorted(_unmerged_adapters(self.settings, self.catalog, names))

    def task(self, name: str) -> Task:
        """A loaded task; unknown names raise :class:`~extractor.errors.UnknownTaskError`."""
        return self.catalog.get(name)

    def typed_model(self, name: str) -> TypedModel:
        """The pydantic model built from the task's schema (built once, when the catalog loads it)."""
        typed = self.task(name).typed
        if typed is None:
            raise ExtractorError(f"task {name!r} has no typed model; its load warnings say why")
        return typed

    async def astart(self, *, documents: bool = False) -> None:
        """Start the engine (loads the model); idempotent.

        ``documents``: documents will come (a folder's batch): the conversion workers
        (``EXTRACTOR_CONVERSION_PROCESSES``) start while the engine loads, not at the first document.
        """
        warming = [self.converter.astart()] if documents else []
        if self._started:
            await asyncio.gather(*warming)
            return
        tasks = [t for n, t in self.catalog.tasks.items() if self._tasks is None or n in self._tasks]
        # while the engine loads: what the tasks' first texts would build (each field's pool index)
        await asyncio.gather(self.engine.start(), asyncio.to_thread(self._prepare, tasks), *warming)
        for model in self._task_models():  # one after another: each sizes its share of the memory
            await self._model_engine(model).start()
        self._started = True

    def _prepare(self, tasks: Sequence[Task]) -> None:
        for task in tasks:
            try:
                pipeline.prepare(task, self.settings)
            except ExtractorError:  # its first text meets the same error, with the request that asked
                continue

    def start(self) -> None:
        """Blocking :meth:`astart`."""
        _run_sync(self.astart())

    @overload
    async def aextract(
        self, task: str | Task, text: str, *, output_type: None = None, **options: Unpack[OptionArgs]
    ) -> ExtractionResult: ...

    @overload
    async def aextract(
        self, task: str | Task, text: str, *, output_type: type[M], **options: Unpack[OptionArgs]
    ) -> M: ...

    async def aextract(
        self, task: str | Task, text: str, *, output_type: type[M] | None = None, **options: Unpack[OptionArgs]
    ) -> ExtractionResult | M:
        """Extract one text. With ``output_type``, return the data as that pydantic model.

        ``options`` (:class:`~extractor.options.ExtractOptions`' fields) left None take the task's
        setting (``x-extractor``), then the global one: ``temperature``; ``max_attempts`` (1 to 3);
        ``max_tokens`` (1 to 8192); ``grounding`` (strict, flag or off); ``chunk`` (split a text too
        long for the model window into overlapping chunks instead of failing with TextTooLongError);
        ``grounded_decoding`` (True: constrain every grounded string field to spans of the text while
        decoding; False: not even fields marked ``x-extractive``); ``reference_date`` (what a relative
        date in a typed value, "next Friday", is read against; None: today, with a note in the
        result). A bad option raises :class:`~extractor.errors.InputError` naming it. ``task`` may be
        a :class:`Task` already looked up (the version a caller checked is the one that runs).
        """
        spec = task if isinstance(task, Task) else self.task(task)
        result = await self.arun(spec, text, options=checked(options))
        if output_type is not None:
            return output_type.model_validate(result.data)
        return result

    async def arun(self, task: Task, text: str, *, options: Options | None = None) -> ExtractionResult:
        """Extract with a task object: a catalog task, or one built in memory (``tasks.task_from_schema``)."""
        await self.astart()
        engine, chosen = self.engine_for(task), options or Options()
        if engine is not self.engine:  # a model of its own, which a task may have named since the start
            await engine.start()
        try:
            result = await pipeline.run(
                task, text, engine=engine, settings=self.settings, options=chosen, typed=task.typed
            )
        except ExtractionFailed as failed:
            failed.task_version = task.version
            raise
        result.task_version = task.version
        return result

    @overload
    def extract(
        self, task: str | Task, text: str, *, output_type: None = None, **options: Unpack[OptionArgs]
    ) -> ExtractionResult: ...

    @overload
    def extract(self, task: str | Task, text: str, *, output_type: type[M], **options: Unpack[OptionArgs]) -> M: ...

    def extract(
        self, task: str | Task, text: str, *, output_type: type[M] | None = None, **options: Unpack[OptionArgs]
    ) -> ExtractionResult | M:
        """Blocking :meth:`aextract` (same arguments)."""
        if output_type is None:
            return _run_sync(self.aextract(task, text, **options))
        return _run_sync(self.aextract(task, text, output_type=output_type, **options))

    def read_document(
        self,
        source: str | Path | bytes,
        *,
        media_type: str | None = None,
        name: str | None = None,
        ocr_languages: str | None = None,
    ) -> Document:
        """Convert a document (a path, or bytes) under this extractor's limits; see :func:`extractor.documents.read`.

        ``ocr_languages``: tesseract's languages for pages read by OCR (default: EXTRACTOR_OCR_LANGUAGES).
        """
        limits = documents.Limits.from_settings(self.settings, ocr_languages=ocr_languages)
        return documents.read(source, media_type=media_type, name=name, limits=limits)

    async def aextract_document(
        self,
        task: str | Task,
        source: str | Path | bytes | Document,
        *,
        media_type: str | None = None,
        name: str | None = None,
        options: Options | None = None,
    ) -> ExtractionResult:
        """Extract from a document: a PDF, HTML, DOCX or text file's path, its bytes, or a converted :class:`Document`.

        The document converts to text (in a worker thread, or in a worker process:
        EXTRACTOR_CONVERSION_PROCESSES), the pipeline runs on that text as on any other, and every
        span of the result gets its ``location`` (page and one box per line for a PDF, element path
        for HTML, paragraph for DOCX); ``result.document`` holds the converted text the offsets
        point into. Bad documents raise
        :class:`~extractor.errors.DocumentError` (or :class:`~extractor.errors.DocumentTooLargeError`).
        """
        spec = task if isinstance(task, Task) else self.task(task)
        if isinstance(source, Document):
            document = source
        else:
            limits = documents.Limits.from_settings(self.settings, ocr_languages=spec.settings.ocr_languages)
            with stage("conversion"):
                document = await self.converter.read(source, media_type=media_type, name=name, limits=limits)
        result = await self.arun(spec, document.text, options=options)
        return attach(result, document)

    def extract_document(
        self,
        task: str,
        source: str | Path | bytes | Document,
        *,
        media_type: str | None = None,
        name: str | None = None,
        **options: Unpack[OptionArgs],
    ) -> ExtractionResult:
        """Blocking :meth:`aextract_document`; ``options`` as :meth:`aextract`'s (temperature, chunk, ...)."""
        return _run_sync(
            self.aextract_document(task, source, media_type=media_type, name=name, options=checked(options))
        )

    async def aextract_many(
        self, task: str, texts: Iterable[str], *, concurrency: int = 64, **options: Unpack[OptionArgs]
    ) -> list[ExtractionResult | ExtractorError]:
        """Extract many texts concurrently (vLLM batches them); one result or error per text, in order."""
        self.task(task)
        await self.astart()
        gate = asyncio.Semaphore(concurrency)

        async def one(text: str) -> ExtractionResult | ExtractorError:
            async with gate:
                try:
                    result: ExtractionResult = await self.aextract(task, text, **options)
                    return result
                except ExtractorError as error:
                    return error

        return list(await asyncio.gather(*(one(t) for t in texts)))

    def extract_many(
        self, task: str, texts: Sequence[str], **options: Unpack[OptionArgs]
    ) -> list[ExtractionResult | ExtractorError]:
        """Blocking :meth:`aextract_many`."""
        return _run_sync(self.aextract_many(task, texts, **options))

    # -- chat: the seed's in-process chat, on the extraction engine (extractor.chat, as POST /chat) --

    def _chat_request(
        self,
        query: str,
        history: Iterable[Sequence[str]],
        system: str | None,
        stop_words: Sequence[str],
        max_tokens: int | None,
        temperature: float | None,
    ) -> GenerationRequest:
        return chatting.request(
            self.engine,
            query,
            history=history,
            system=system,
            stop_words=stop_words,
            max_tokens=max_tokens or self.settings.chat_max_tokens,
            temperature=chatting.DEFAULT_TEMPERATURE if temperature is None else temperature,
        )

    async def achat(
        self,
        query: str,
        *,
        history: Iterable[Sequence[str]] = (),
        system: str | None = chatting.DEFAULT_SYSTEM,
        stop_words: Sequence[str] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ChatReply:
        """One chat turn with the model's own chat template, on the engine extraction uses.

        ``history``: earlier ``(user, assistant)`` turns, oldest first; the newest that fit the
        window go in (the seed's rule). ``system``: None or "" for no system turn. The reply ends
        at the first of ``stop_words`` (left out): the engine stops there, generating nothing past
        it. ``max_tokens`` defaults to ``chat_max_tokens``, ``temperature`` to 0.7 (the seed's).
        Bad input raises :class:`~extractor.errors.InputError` (a history that is not pairs) or
        :class:`~extractor.errors.TextTooLongError` (the query alone past the window), as ``/chat``.
        """
        await self.astart()
        request = self._chat_request(query, history, system, stop_words, max_tokens, temperature)
        return await chatting.reply(self.engine, request)

    def chat(
        self,
        query: str,
        *,
        history: Iterable[Sequence[str]] = (),
        system: str | None = chatting.DEFAULT_SYSTEM,
        stop_words: Sequence[str] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ChatReply:
        """Blocking :meth:`achat`."""
        return _run_sync(
            self.achat(
                query,
                history=history,
                system=system,
                stop_words=stop_words,
                max_tokens=max_tokens,
                temperature=temperature,
            )
        )

    async def astream_chat(
        self,
        query: str,
        *,
        history: Iterable[Sequence[str]] = (),
        system: str | None = chatting.DEFAULT_SYSTEM,
        stop_words: Sequence[str] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[str]:
        """:meth:`achat` as it is generated: the reply's text so far, growing (cumulative, as ``/chat`` streams).

        Text that may be the start of a stop word is held back until it is not; at a stop word the
        stream ends and the engine request is aborted. Closing the iterator early aborts it too.
        """
        await self.astart()
        request = self._chat_request(query, history, system, stop_words, max_tokens, temperature)
        async with aclosing(chatting.stream(self.engine, request)) as texts:
            async for text in texts:
                yield text

    @property
    def converter(self) -> Converter:
        """Where documents convert: in worker processes (``EXTRACTOR_CONVERSION_PROCESSES``), else in a thread."""
        with self._lock:
            if self._converter is None:
                explicit = self.settings.conversion_processes is not None
                self._converter = Converter(self.settings.conversion_workers, fallback=not explicit)
            return self._converter

    async def aclose(self) -> None:
        """Release the engine and the conversion workers."""
        if self._converter is not None:
            await asyncio.to_thread(self._converter.close)
        for engine in [*self._models.values(), *([self._engine] if self._engine is not None else [])]:
            await engine.close()
        self._models.clear()
        self._started = False

    def close(self) -> None:
        """Blocking :meth:`aclose`."""
        _run_sync(self.aclose())

    def __enter__(self) -> Extractor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Extractor:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise ExtractorError("called the blocking API inside a running event loop; use the a-prefixed async method")


_default: Extractor | None = None
_default_lock = threading.Lock()


def default_extractor() -> Extractor:
    """The process-wide extractor behind :func:`extract`, configured from the environment."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Extractor()
        return _default


@overload
def extract(task: str, text: str, *, output_type: None = None, **options: Unpack[OptionArgs]) -> ExtractionResult: ...


@overload
def extract(task: str, text: str, *, output_type: type[M], **options: Unpack[OptionArgs]) -> M: ...


def extract(
    task: str, text: str, *, output_type: type[M] | None = None, **options: Unpack[OptionArgs]
) -> ExtractionResult | M:
    """Extract ``task`` from ``text`` with the process-wide :class:`Extractor` (as :meth:`Extractor.extract`)."""
    return default_extractor().extract(task, text, output_type=output_type, **options)


@overload
async def aextract(
    task: str, text: str, *, output_type: None = None, **options: Unpack[OptionArgs]
) -> ExtractionResult: ...


@overload
async def aextract(task: str, text: str, *, output_type: type[M], **options: Unpack[OptionArgs]) -> M: ...


async def aextract(
    task: str, text: str, *, output_type: type[M] | None = None, **options: Unpack[OptionArgs]
) -> ExtractionResult | M:
    """Async :func:`extract`."""
    return await default_extractor().aextract(task, text, output_type=output_type, **options)


def _lora_settings(settings: Settings, catalog: Catalog) -> Settings:
    """LoRA on, sized to the catalog's adapters, when any task has one and they go through LoRA (else off)."""
    from extractor.adapters.manifest import adapter_rank

    if settings.adapter_serving != "lora":  # merged models of their own, or off
        return settings

    adapters = _unmerged_adapters(settings, catalog, catalog.names())
    if not adapters:
        return settings
    rank = max(adapter_rank(a) for a in adapters)
    return settings.with_(max_lora_rank=rank or 16, max_loras=max(settings.max_loras, len(adapters)))


def _unmerged_adapters(settings: Settings, catalog: Catalog, names: Iterable[str]) -> set[Path]:
    """The adapters of the tasks ``names`` that the engine's model does not already hold (`extractor model merge`)."""
    found = {catalog.get(n).adapter for n in names}
    return {a for a in found if a is not None and not _merged(settings, a)}


def _merged(settings: Settings, adapter: Path) -> bool:
    """True when the engine's model is a merge of ``adapter`` (`extractor model merge`): no LoRA needed."""
    from extractor.adapters.merge import holds
    from extractor.models import resolve_model_dir

    if settings.engine != "vllm":
        return False
    try:
        return holds(resolve_model_dir(settings), adapter)
    except ExtractorError:  # no model yet, or another merge: the engine reports it on first use
        return False
