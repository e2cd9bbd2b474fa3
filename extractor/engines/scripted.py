"""A scripted engine for tests and dry runs: it answers from a queue or a function."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from extractor.engines.base import Generation, GenerationRequest, Message
from extractor.errors import EngineError

Responder = Callable[[GenerationRequest], str]


class ScriptedEngine:
    """Answers each request with the next queued text, or with ``respond(request)``.

    Every request is recorded in :attr:`history`, so tests can assert on the prompts the
    pipeline sent (for example that a re-ask carries the validation errors).

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
    ) -> None:
        self._queue: deque[str] = deque(responses)
        self._respond = respond
        self._model_name = model_name
        self._max_model_len = max_model_len
        self._delay_s = delay_s
        self.history: list[GenerationRequest] = []

    @classmethod
    def echo_examples(cls) -> ScriptedEngine:
        """A dry-run engine: answers with the task's first worked example (or ``{}``)."""

        def respond(request: GenerationRequest) -> str:
            answers = [m["content"] for m in request.messages if m["role"] == "assistant"]
            return answers[0] if answers else "{}"

        return cls(respond=respond, model_name="scripted-dry-run")

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
        # A stand-in tokenizer: roughly one token per 4 characters, as for English BPE.
        return sum(len(m["content"]) // 4 + 4 for m in messages)

    async def generate(self, request: GenerationRequest) -> Generation:
        self.history.append(request)
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        if self._queue:
            text = self._queue.popleft()
        elif self._respond is not None:
            text = self._respond(request)
        else:
            raise EngineError("scripted engine: no response queued for this request")
        return Generation(
            text=text,
            prompt_tokens=self.count_prompt_tokens(request.messages),
            completion_tokens=max(1, len(text) // 4),
        )
