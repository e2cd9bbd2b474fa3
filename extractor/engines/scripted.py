"""A scripted engine for tests and dry runs: it answers from a queue or a function."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence

from extractor.engines.base import Generation, GenerationRequest, Message
from extractor.engines.tokenizer import estimate_tokens
from extractor.errors import EngineError

Responder = Callable[[GenerationRequest], str]
CHARS_PER_TOKEN = 4  # the scripted engine's token: what completion_tokens counts


class ScriptedEngine:
    """Answers each request with the next queued text, or with ``respond(request)``.

    Every request is recorded in :attr:`history`, so tests can assert on the prompts the
    pipeline sent (for example that a re-ask carries the validation errors). A request given up
    before its answer was complete (a cancelled ``generate``, a stream closed early) is also
    recorded in :attr:`aborted`. ``delay_s`` makes each answer take that long; a stream spreads
    it over its chunks of ``chunk_chars`` characters. ``keep`` bounds both records (the newest
    are kept), for long dry runs. With ``cut_at_max_tokens``, an answer longer than the request's
    ``max_tokens`` (counted as :data:`CHARS_PER_TOKEN` characters a token) is cut there and
    finishes with ``length``, as a real engine's would. ``generate`` ends an answer at the
    request's first ``stop`` string, leaving it out, as vLLM does. Asked for ``logprobs``, it reports tokens
    of :data:`CHARS_PER_TOKEN` characters, each with ``token_logprob`` (0.0: every value certain),
    or ``token_logprob(text, start, end)`` when it is a function.

    Example:
        >>> engine = ScriptedEngine(['{"name": "x"}'])
        >>> engine.enqueue(['not json', '{"name": "y"}'])

    """

    def __init__(
        self,
        responses: Iterable[str] = (),
        *,
        respond: Responder | None = None,
        model_name: str = "scripted",
        max_model_len: int = 4096,
        delay_s: float = 0.0,
        chunk_chars: int = 4,
        keep: int | None = None,
        cut_at_max_tokens: bool = False,
        token_logprob: float | Callable[[str, int, int], float] = 0.0,
    ) -> None:
        self._queue: deque[str] = deque(responses)
        self._respond = respond
        self._model_name = model_name
        self._max_model_len = max_model_len
        self._delay_s = delay_s
        self._chunk_chars = max(1, chunk_chars)
        self._keep = keep
        self._cut = cut_at_max_tokens
        self._token_logprob = token_logprob
        self.history: list[GenerationRequest] = []
        self.aborted: list[GenerationRequest] = []

    @classmethod
    def echo_examples(cls, *, delay_s: float = 0.0) -> ScriptedEngine:
        """A dry-run engine: answers with the task's first worked example (or ``{}``)."""

        def respond(request: GenerationRequest) -> str:
            answers = [m["content"] for m in request.messages if m["role"] == "assistant"]
            return answers[0] if answers else "{}"

        # A dry run may serve for days: keep only the newest requests.
        return cls(respond=respond, model_name="scripted-dry-run", delay_s=delay_s, keep=100)

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    def enqueue(self, responses: Iterable[str]) -> None:
        """Queue more answers, used in order before ``respond``."""
        self._queue.extend(responses)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        return estimate_tokens(messages)

    def _record(self, records: list[GenerationRequest], request: GenerationRequest) -> None:
        records.append(request)
        if self._keep is not None and len(records) > 2 * self._keep:
            del records[: -self._keep]

    def _answer(self, request: GenerationRequest) -> str:
        self._record(self.history, request)
        if self._queue:
            return self._queue.popleft()
        if self._respond is not None:
            return self._respond(request)
        raise EngineError("scripted engine: no response queued for this request")

    async def generate(self, request: GenerationRequest) -> Generation:
        text = self._answer(request)
        if self._delay_s:
            try:
                await asyncio.sleep(self._delay_s)
            except asyncio.CancelledError:
                self._record(self.aborted, request)
                raise
        finish = "stop"
        stops = [i for i in (text.find(w) for w in request.stop if w) if i >= 0]
        if stops:  # as vLLM: generation ends at a stop string, which is left out
            text = text[: min(stops)]
        if self._cut and len(text) > request.max_tokens * CHARS_PER_TOKEN:
            text, finish = text[: request.max_tokens * CHARS_PER_TOKEN], "length"
        ends = tuple([*range(CHARS_PER_TOKEN, len(text), CHARS_PER_TOKEN), len(text)]) if request.logprobs else ()
        score = self._token_logprob
        starts = (0, *ends[:-1])
        logprobs = tuple(score(text, a, b) if callable(score) else score for a, b in zip(starts, ends, strict=False))
        return Generation(
            text=text,
            prompt_tokens=self.count_prompt_tokens(request.messages),
            completion_tokens=max(1, len(text) // CHARS_PER_TOKEN),
            finish_reason=finish,
            token_ends=ends,
            token_logprobs=logprobs,
        )

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        """Yield the answer cumulatively, ``chunk_chars`` characters more each time."""
        text = self._answer(request)
        ends = [*range(self._chunk_chars, len(text), self._chunk_chars), len(text)]
        done = False
        try:
            for end in ends:
                if self._delay_s:
                    await asyncio.sleep(self._delay_s / len(ends))
                done = end == len(text)  # the last chunk carries the whole answer
                yield text[:end]
        finally:
            if not done:
                self._record(self.aborted, request)
