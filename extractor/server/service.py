"""The serving logic behind the routes: engine start and readiness, admission, timeouts, metrics."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import jinja2
import jinja2.meta

from extractor import chat, documents
from extractor.api import Extractor
from extractor.catalog.tasks import TASK_NAME, Catalog, Task
from extractor.documents.provenance import attach
from extractor.engines.base import Generation, GenerationRequest, stream_text
from extractor.errors import (
    DocumentError,
    EngineDeadError,
    EngineNotReadyError,
    ExtractionFailed,
    ExtractorError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ShuttingDownError,
    TaskNotLoadedError,
    UnknownTaskError,
)
from extractor.options import ExtractOptions, Options
from extractor.results import ExtractionResult
from extractor.review.store import ReviewStore
from extractor.server.admission import Admission, Ticket
from extractor.server.metrics import Metrics
from extractor.server.protocol import BatchItem, ChatRequest, DocumentIn

log = logging.getLogger("extractor.server")
CANARY = GenerationRequest(messages=[{"role": "user", "content": "ping"}], temperature=0.0, max_tokens=1)
_CANARY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Extracted:
    """A result, and the review queue item it was stored as (None: not sent to review)."""

    result: ExtractionResult
    review_id: int | None = None


def needs_review(task: Task, result: ExtractionResult, *, requested: bool) -> bool:
    """Whether a result goes to the review queue: asked for, or less confident than the task's threshold.

    A result without a confidence (the engine gave no token probabilities) is sent only when asked for.
    """
    if requested:
        return True
    threshold = task.settings.review
    return threshold is not None and result.confidence is not None and result.confidence < threshold.below


class Service:
    """One extractor behind the HTTP routes."""

    def __init__(self, extractor: Extractor, *, review: ReviewStore | None = None) -> None:
        self.extractor = extractor
        self.settings = extractor.settings
        # The review queue (nothing connects before its first use or the app's start).
        self.review = review if review is not None else ReviewStore.from_settings(self.settings)
        self.admission = Admission(max_in_flight=self.settings.max_in_flight, max_queued=self.settings.max_queued)
        self.metrics = Metrics(self.admission)
        self.draining = False
        self._start: asyncio.Task[None] | None = None
        self._start_error: str | None = None
        self._wait_for_start = False
        self._ready: tuple[float, bool, str] = (float("-inf"), False, "")
        self._ready_lock = asyncio.Lock()
        self._prompt_variables: dict[str, list[str]] = {}
        # Set when the engine died: every request gets 503, and ``on_engine_dead`` (the runner's
        # hook) ends the process so a supervisor can restart it.
        self.engine_dead: str | None = None
        self.on_engine_dead: Callable[[], None] | None = None

    # -- engine ---------------------------------------------------------------------------

    def begin_start(self) -> asyncio.Task[None]:
        """Start the engine in the background (the app answers /healthz meanwhile); idempotent."""
        if self._start is None:
            self._start = asyncio.create_task(self._start_engine())
        return self._start

    async def _start_engine(self) -> None:
        started = time.perf_counter()
        try:
            await self.extractor.astart()
        except Exception as error:  # noqa: BLE001 - any start failure is reported by /readyz and 503s
            self._start_error = f"{type(error).__name__}: {error}"
            log.error("the engine failed to start: %s", self._start_error)
        else:
            log.info("engine ready after %.1f s: %s", time.perf_counter() - started, self.extractor.engine.model_name)

    async def stop(self) -> None:
        """Stop a start still in progress (the engine itself is closed by its owner)."""
        if self._start is not None and not self._start.done():
            self._start.cancel()

    def engine_died(self, error: EngineDeadError) -> None:
        """The engine is gone for good: refuse everything from now on and tell the runner (once)."""
        if self.engine_dead is not None:
            return
        self.engine_dead = str(error)
        log.error("the engine died: %s; refusing requests and stopping", error)
        if self.on_engine_dead is not None:
            self.on_engine_dead()

    async def _not_started(self) -> EngineNotReadyError | None:
        """Why requests cannot run yet (503), or None. Without a lifespan, the engine starts here."""
        refused = self._stopping()
        if refused is not None:
            return refused
        start = self._start
        if start is None:  # no lifespan ran (e.g. an ASGI test client): start on first use, and wait
            start = self.begin_start()
            self._wait_for_start = True
        if self._wait_for_start:
            await asyncio.shield(start)
        if not start.done():
            return EngineNotReadyError("the engine is starting; GET /readyz turns 200 when it is ready")
        if self._start_error:
            return EngineNotReadyError(f"the engine failed to start: {self._start_error}")
        return None

    def _stopping(self) -> EngineNotReadyError | None:
        if self.engine_dead is not None:
            return EngineNotReadyError(f"the engine died ({self.engine_dead}); the service is stopping", retry_after=1)
        if self.draining:
            return ShuttingDownError("shutting down: not taking new requests; retry later or elsewhere", retry_after=1)
        return None

    async def _accepting(self) -> None:
        refused = await self._not_started()
        if refused is not None:
            raise refused

    def refusal(self) -> ExtractorError | None:
        """Why a new engine job is refused right now (503 or 429), or None.

        503 while the service drains or after its engine died, 429 while the admission limit has
        no room for one more job. Cheap and synchronous, so the HTTP gate asks it before reading
        and parsing a body (a client over the limit costs the server almost nothing); the full
        checks (task, body, text, engine start, room for the whole job) still run, in order, once
        the body is parsed.
        """
        return self._stopping() or self.admission.refusal(1)

    def hold(self) -> Ticket:
        """Room for one engine job, held while a request's body is parsed (503 or 429 when there is none).

        The HTTP gate holds it (:meth:`Admission.holding`); the request's own admission takes it over.
        """
        stopping = self._stopping()
        if stopping is not None:
            raise stopping
        return self.admission.admit(1)  # the 429 of refusal() when there is no room

    def begin_drain(self) -> None:
        """Refuse new engine work from now on (503, ``/readyz`` 503); what is admitted runs on.

        Only sets a flag, so a signal handler may call it.
        """
        self.draining = True

    async def drain(self, *, timeout_s: float) -> bool:
        """Begin draining, then wait up to ``timeout_s`` for every admitted job to end; whether all did."""
        self.begin_drain()
        try:
            async with asyncio.timeout(timeout_s):
                await self.admission.idle()
        except TimeoutError:
            return False
        return True

    async def readiness(self) -> tuple[bool, str]:
        """Ready when a 1-token canary generation succeeds; the answer is cached ``ready_cache_s``."""
        refused = await self._not_started()
        if refused is not None:
            return False, str(refused)
        async with self._ready_lock:
            checked, ok, why = self._ready
            if time.monotonic() - checked < self.settings.ready_cache_s:
                return ok, why
            try:
                async with asyncio.timeout(min(_CANARY_TIMEOUT_S, self.settings.request_timeout_s)):
                    await self.extractor.engine.generate(CANARY)
                ok, why = True, "ok"
            except TimeoutError:
                ok, why = False, "the canary generation timed out"
            except EngineDeadError as error:
                self.engine_died(error)
                ok, why = False, f"the engine died: {error}"
            except ExtractorError as error:
                ok, why = False, f"the canary generation failed: {error}"
            self._ready = (time.monotonic(), ok, why)
            return ok, why

    # -- extraction -----------------------------------------------------------------------

    def task(self, name: str, catalog: Catalog | None = None) -> Task:
        """A loaded task; a left-out one says why, any other name is unknown (404 either way)."""
        if catalog is None:
            catalog = self.extractor.catalog  # read once: a reload swaps it whole
        try:
            return catalog.get(name)
        except UnknownTaskError:
            # Matched against what the catalog recorded at load, never joined into a path.
            errors = [e for e in catalog.errors if TASK_NAME.match(name) and _stem(e.path) == name]
            if errors:
                raise TaskNotLoadedError(name, errors) from None
            raise

    def task_label(self, name: Any) -> str:
        """A metrics label: the task's name when it is loaded, else ``-``."""
        return name if isinstance(name, str) and name in self.extractor.catalog.tasks else "-"

    def prompt_variables(self, task: Task) -> list[str]:
        """The variables the task's template uses (parsed once)."""
        key = f"{task.name}@{task.version}"  # a reload may bring another template under the name
        if key not in self._prompt_variables:
            try:
                source = task.prompt_path.read_text(encoding="utf-8")
                names = jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(source))
            except (OSError, UnicodeDecodeError, jinja2.TemplateSyntaxError):
                names = set()  # changed on disk since load; the loaded template still serves
            self._prompt_variables[key] = sorted(names)
        return self._prompt_variables[key]

    def _check_text(self, text: str) -> None:
        chat.check_unicode("text", text)
        if len(text) > self.settings.max_text_chars:
            raise PayloadTooLargeError(
                f"text is {len(text)} characters, over the limit of {self.settings.max_text_chars} "
                "(EXTRACTOR_MAX_TEXT_CHARS); split it"
            )

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.settings.request_timeout_s

    def _timed_out(self) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"no answer within {self.settings.request_timeout_s:g} s (EXTRACTOR_REQUEST_TIMEOUT_S); "
            "its engine work was aborted"
        )

    async def read_document(self, upload: DocumentIn, *, ocr_languages: str | None = None) -> documents.Document:
        """A sent document converted to text beside the event loop (the extractor's converter): 415, 422 or 413.

        Its cost is bounded before the engine sees anything: the body limit bounds its bytes, the
        page and character limits (EXTRACTOR_MAX_DOCUMENT_PAGES, _CHARS) its conversion.
        """
        try:
            data = base64.b64decode(upload.content, validate=True)
        except (binascii.Error, ValueError):
            raise DocumentError("document.content is not base64 (RFC 4648, with padding)") from None
        limits = documents.Limits.from_settings(self.settings, ocr_languages=ocr_languages)
        converter = self.extractor.converter
        return await converter.convert(data, media_type=upload.media_type, name=upload.name, limits=limits)

    async def _source(
        self, text: str | None, document: DocumentIn | None, *, task: Task
    ) -> tuple[str, documents.Document | None]:
        """The text to extract from: ``text`` checked, or ``document`` converted (OCR in the task's languages)."""
        if document is not None:
            converted = await self.read_document(document, ocr_languages=task.settings.ocr_languages)
            chat.check_unicode("document", converted.text)
            return converted.text, converted
        assert text is not None  # the wire models hold exactly one of the two
        self._check_text(text)
        return text, None

    async def extract(
        self,
        task: str,
        text: str | None,
        options: ExtractOptions,
        *,
        review: bool = False,
        document: DocumentIn | None = None,
    ) -> Extracted:
        """One extraction: 404, 413 (415, 422 for a document), 503, 429 in that order, then the pipeline.

        (Over HTTP, :meth:`refusal` may answer 503 or 429 before the body is even read.) A
        document converts to text first; the result's spans then get their locations in it. Once
        the pipeline has returned, the result is stored in the review queue when
        :func:`needs_review` says so (``review``: asked for by the request); a queue that cannot
        store it is a 503.
        """
        spec = self.task(task)  # the version this request runs, whatever reloads meanwhile
        source, converted = await self._source(text, document, task=spec)
        await self._accepting()
        with self.admission.admit(1):
            result = await self._run(spec, source, options, deadline=self._deadline())
        if converted is not None:
            result = attach(result, converted)
        return Extracted(result, await self._queue(spec, source, result, requested=review))

    async def _queue(self, task: Task, text: str, result: ExtractionResult, *, requested: bool) -> int | None:
        """Store ``result`` in the review queue when it needs review; its item's id, else None."""
        if not needs_review(task, result, requested=requested):
            return None
        item = await asyncio.to_thread(
            self.review.add,
            task=task.name,
            task_version=result.task_version,
            text=text,
            result=result.model_dump(mode="json"),
            confidence=result.confidence,
        )
        return item.id

    async def extract_batch(
        self, task: str, items: Sequence[BatchItem], options: ExtractOptions, *, review: bool = False
    ) -> list[Extracted | ExtractorError]:
        """One result or one error per item, in order; the batch is admitted whole (and runs one version).

        Each result goes to the review queue as :meth:`extract`'s does (a queue failure is that item's error).
        """
        spec = self.task(task)
        # A batch is admitted whole, so it can be no larger than the room in flight + queued.
        limit = min(self.settings.max_batch_items, self.admission.capacity)
        if len(items) > limit:
            raise PayloadTooLargeError(
                f"the batch has {len(items)} items, over the limit of {limit} (EXTRACTOR_MAX_BATCH_ITEMS, at most "
                "EXTRACTOR_MAX_IN_FLIGHT + EXTRACTOR_MAX_QUEUED); split it"
            )
        await self._accepting()
        deadline = self._deadline()

        async def one(item: BatchItem) -> Extracted | ExtractorError:
            try:
                text, converted = await self._source(item.text, item.document, task=spec)
                result = await self._run(spec, text, options, deadline=deadline)
                if converted is not None:
                    result = attach(result, converted)
                return Extracted(result, await self._queue(spec, text, result, requested=review))
            except ExtractorError as error:
                return error

        with self.admission.admit(len(items)):
            return list(await asyncio.gather(*(one(item) for item in items)))

    async def extract_task(self, task: Task, text: str, options: Options, *, label: str) -> ExtractionResult:
        """One extraction of a task object (a catalog task or one built from a request's schema).

        The checks, admission, deadline and metrics of :meth:`extract`; ``label`` is the metrics
        task label (a catalog name, or ``-``: a client must not grow the label set).
        """
        self._check_text(text)
        await self._accepting()
        with self.admission.admit(1):
            return await self._run_task(task, text, options, label=label, deadline=self._deadline())

    async def _run(self, spec: Task, text: str, options: ExtractOptions, *, deadline: float) -> ExtractionResult:
        # the task looked up once per request: a reload mid-request does not change its version
        return await self._run_task(spec, text, Options.of(options), label=spec.name, deadline=deadline)

    async def _run_task(
        self, task: Task, text: str, options: Options, *, label: str, deadline: float
    ) -> ExtractionResult:
        try:
            async with asyncio.timeout_at(deadline), self.admission.slot():
                result = await self.extractor.arun(task, text, options=options)
        except TimeoutError:
            raise self._timed_out() from None
        except EngineDeadError as error:
            self.engine_died(error)
            raise
        except ExtractionFailed as failed:
            self.metrics.observe_attempts(label, failed.attempts)
            raise
        self.metrics.observe_attempts(label, result.attempts)
        self.metrics.observe_result(label, result.grounded_decoding)
        return result

    # -- chat -----------------------------------------------------------------------------

    def chat_request(self, body: ChatRequest) -> GenerationRequest:
        """The engine request for a chat: the seed's window over the history (4xx on bad input)."""
        return chat.request(
            self.extractor.engine,
            body.query,
            history=body.history,
            system=body.system,
            stop_words=body.user_stop_words,
            max_tokens=body.max_tokens or self.settings.chat_max_tokens,
            temperature=body.temperature,
        )

    async def admit_chat(self) -> Ticket:
        """Room for one chat (503 or 429 when there is none); release it when the chat ends."""
        await self._accepting()
        return self.admission.admit(1)

    async def generate(self, request: GenerationRequest) -> Generation:
        """One engine generation for an admitted chat, under the request deadline."""
        deadline = self._deadline()
        try:
            async with asyncio.timeout_at(deadline), self.admission.slot():
                return await self.extractor.engine.generate(request)
        except TimeoutError:
            raise self._timed_out() from None

    async def chat_reply(self, request: GenerationRequest) -> chat.ChatReply:
        """The whole reply of an admitted chat (:func:`extractor.chat.reply`), under the request deadline."""
        deadline = self._deadline()
        try:
            async with asyncio.timeout_at(deadline), self.admission.slot():
                return await chat.reply(self.extractor.engine, request)
        except TimeoutError:
            raise self._timed_out() from None
        except EngineDeadError as error:
            self.engine_died(error)
            raise

    async def chat(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        """Cumulative text of an admitted chat, cut at a stop word, under the request deadline."""
        deadline = self._deadline()
        try:
            async with self.admission.slot(deadline=deadline):  # TimeoutError: no slot in time
                limited = self._until(stream_text(self.extractor.engine, request), deadline)
                async with aclosing(chat.until_stop_word(limited, request.stop)) as texts:
                    async for text in texts:
                        yield text
        except TimeoutError:
            raise self._timed_out() from None
        except EngineDeadError as error:
            self.engine_died(error)
            raise

    async def _until(self, chunks: AsyncGenerator[str, None], deadline: float) -> AsyncGenerator[str, None]:
        # The deadline wraps each step, never a yield: a timeout must not fire in the consumer.
        async with aclosing(chunks):
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        text = await anext(chunks)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise self._timed_out() from None
                yield text


def _stem(path: str) -> str:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name.split(".", 1)[0]
