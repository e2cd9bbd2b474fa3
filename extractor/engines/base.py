"""The engine interface: chat messages (+ an optional JSON Schema) in, text out."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable


class Message(TypedDict):
    """One chat turn."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class GenerationRequest:
    """What to generate: the chat, an optional constraint, sampling.

    The constraint is a JSON Schema (``json_schema``) or an llguidance Lark grammar
    (``grammar``, starting with ``start:``), never both.
    """

    messages: Sequence[Message]
    json_schema: Mapping[str, Any] | None = None
    grammar: str | None = None
    temperature: float = 0.1
    max_tokens: int = 256
    stop: Sequence[str] = field(default_factory=tuple)
    # A LoRA adapter folder (``extractor train``) to generate with; None: the base model.
    adapter: str | None = None
    top_p: float | None = None  # None: the engine's default (1.0)
    seed: int | None = None
    # Ask for each generated token's log-probability (under the constraint): what confidences are made of.
    logprobs: bool = False

    def __post_init__(self) -> None:
        if self.json_schema is not None and self.grammar is not None:
            raise ValueError("a request is constrained by a JSON Schema or a grammar, not both")


@dataclass(frozen=True)
class Generation:
    """What the engine produced for one request."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = "stop"
    # With ``logprobs`` asked and given: per generated token, where it ends in ``text`` (code points)
    # and its log-probability under the constraint (a token the constraint forced has 0.0).
    token_ends: tuple[int, ...] = ()
    token_logprobs: tuple[float, ...] = ()
    # The generated token ids, where an engine leaves placing them (``token_ends``) to its caller.
    token_ids: tuple[int, ...] = ()


@runtime_checkable
class Engine(Protocol):
    """An async text generator.

    Many concurrent ``generate`` calls must be safe: that is how vLLM batches continuously.
    """

    @property
    def model_name(self) -> str:
        """The model's name as reported in results."""
        ...

    @property
    def max_model_len(self) -> int:
        """The context window in tokens (prompt + completion)."""
        ...

    async def start(self) -> None:
        """Load the model; idempotent."""
        ...

    async def generate(self, request: GenerationRequest) -> Generation:
        """Generate one completion."""
        ...

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens the chat takes once rendered with the model's chat template."""
        ...

    async def close(self) -> None:
        """Release the model; idempotent."""
        ...


@runtime_checkable
class StreamingEngine(Engine, Protocol):
    """An engine that can also stream: the server's ``/chat`` uses it when available."""

    def stream(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        """Yield the cumulative text as it grows; closing the iterator early aborts the request."""
        ...


async def stream_text(engine: Engine, request: GenerationRequest) -> AsyncGenerator[str, None]:
    """Cumulative text from ``engine``: streamed where it can stream, else one final chunk.

    Closing this iterator closes the engine's, which aborts its request.
    """
    if not isinstance(engine, StreamingEngine):
        yield (await engine.generate(request)).text
        return
    async with aclosing(engine.stream(request)) as chunks:
        async for text in chunks:
            yield text
