"""The OpenAI front's serving logic: a job from :mod:`.translate` run on the service behind ``/extract``.

Extractions go through :meth:`Service.extract_task` (the same text limits, admission, deadline
and metrics as ``POST /extract``); plain chats through the service's chat admission, deadline
and engine abort (as ``POST /chat``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing

from extractor.catalog.budget import fit_window
from extractor.catalog.tasks import Task
from extractor.engines.base import GenerationRequest, Message
from extractor.errors import ExtractorError, TextTooLongError
from extractor.server.admission import Ticket
from extractor.server.openai import translate
from extractor.server.openai.adhoc import AdHocTasks
from extractor.server.openai.protocol import ChatCompletionOut, ChatCompletionRequest, DeltaOut, ModelOut, ModelsOut
from extractor.server.openai.translate import Head, Job
from extractor.server.service import Service


def new_id() -> str:
    """A completion id."""
    return f"chatcmpl-{uuid.uuid4().hex}"


class OpenAIFront:
    """``/v1`` on one :class:`Service`; holds the cache of tasks built from request schemas."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.adhoc = AdHocTasks(backend=service.settings.grammar_backend)
        self.created = int(time.time())

    @property
    def model_name(self) -> str:
        """The engine's model, as ``GET /v1/models`` lists it."""
        return self.service.extractor.engine.model_name

    def models(self) -> ModelsOut:
        """The engine's model, then one entry per catalog task."""
        names = self.service.extractor.catalog.names()
        data = [ModelOut(id=self.model_name, created=self.created, owned_by="extractor")]
        data += [ModelOut(id=name, created=self.created, owned_by="extractor-task") for name in names]
        return ModelsOut(data=data)

    def plan(self, body: ChatCompletionRequest) -> Job:
        """What the request asks for (400/404 for what cannot be served)."""
        return translate.plan(
            body, catalog=self.service.extractor.catalog.tasks, engine_model=self.model_name, adhoc=self._adhoc
        )

    def _adhoc(self, name: str, schema: object, where: str) -> Task:
        return self.adhoc.get(name, schema, where=where)

    async def extract(self, job: Job, *, model: str) -> ChatCompletionOut:
        """Run an extraction job; :class:`ExtractionFailed` (422) carries every attempt."""
        assert job.task is not None
        result = await self.service.extract_task(job.task, job.text, job.options, label=job.label)
        return translate.completion(result, job=job, model=model, ident=new_id(), created=int(time.time()))

    def chat_request(self, job: Job) -> GenerationRequest:
        """The engine request of a plain chat (422 when the prompt does not fit the window; max_tokens clamped)."""
        engine = self.service.extractor.engine
        options = job.options
        configured = self.service.settings.chat_max_tokens
        max_tokens = options.max_tokens or configured
        prompt_tokens = engine.count_prompt_tokens(job.messages)
        # an upper bound: what the window cannot hold after the prompt is clamped (README, Limits)
        max_tokens = fit_window(
            max_tokens,
            at_least=min(max_tokens, configured),
            prompt_tokens=prompt_tokens,
            max_model_len=engine.max_model_len,
        )
        if prompt_tokens + max_tokens > engine.max_model_len:
            raise TextTooLongError(
                prompt_tokens=prompt_tokens, max_tokens=max_tokens, max_model_len=engine.max_model_len
            )
        temperature = options.temperature if options.temperature is not None else translate.CHAT_TEMPERATURE
        return GenerationRequest(
            messages=job.messages,
            temperature=temperature,
            max_tokens=max_tokens,
            stop=options.stop,
            top_p=options.top_p,
            seed=options.seed,
        )

    async def chat(self, job: Job, *, model: str) -> ChatCompletionOut:
        """A plain chat, answered whole."""
        request = self.chat_request(job)
        with await self.service.admit_chat():
            generation = await self.service.generate(request)
        return translate.chat_completion(
            generation.text,
            finish_reason=generation.finish_reason,
            prompt_tokens=generation.prompt_tokens,
            completion_tokens=generation.completion_tokens,
            model=model,
            ident=new_id(),
            created=int(time.time()),
        )

    async def admit_chat(self) -> Ticket:
        """Room for a streamed chat; release it when the stream ends."""
        return await self.service.admit_chat()

    async def chat_events(
        self, request: GenerationRequest, *, model: str, include_usage: bool
    ) -> AsyncGenerator[bytes, None]:
        """A plain chat as server-sent events; an error once streaming has begun is an ``error`` event.

        The engine streams cumulative text without token counts: the completion's tokens are
        counted with the prompt's tokenizer (the answer as one more turn, less the prompt).
        """
        head = Head(new_id(), int(time.time()), model)
        engine = self.service.extractor.engine
        yield translate.sse(head.chunk(DeltaOut(role="assistant", content="")))
        shown = ""
        try:
            async with aclosing(self.service.chat(request)) as texts:
                async for text in texts:
                    if len(text) > len(shown):
                        yield translate.sse(head.chunk(DeltaOut(content=text[len(shown) :])))
                        shown = text
        except ExtractorError as error:
            yield translate.sse(translate.error(error)[1])
            yield translate.SSE_DONE
            return
        prompt_tokens = engine.count_prompt_tokens(request.messages)
        answered: list[Message] = [*request.messages, {"role": "assistant", "content": shown}]
        completion_tokens = max(0, engine.count_prompt_tokens(answered) - prompt_tokens)
        cut = completion_tokens >= request.max_tokens
        yield translate.sse(head.chunk(DeltaOut(), finish_reason="length" if cut else "stop"))
        if include_usage:
            yield translate.sse(translate.usage_chunk(translate.usage(prompt_tokens, completion_tokens), head))
        yield translate.SSE_DONE
