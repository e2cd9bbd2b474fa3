"""The seed's chat on the extraction engine: one implementation for ``POST /chat`` and ``Extractor.chat``.

Window rule (the seed's): the system prompt and the query always go in; earlier turns are kept
newest first, as many as fit in ``max_model_len - max_tokens`` once rendered with the model's
chat template.

Stop words: the text is cut at the first user stop word and the engine request is aborted, not
only the stream (the engine is also given them as stop strings, so a reply that is not streamed
stops there too). Streamed text never shows the start of a stop word that may still complete.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from extractor.catalog.budget import fit_window
from extractor.engines.base import Engine, GenerationRequest, Message, stream_text
from extractor.errors import InputError, TextTooLongError

DEFAULT_SYSTEM = "You are a helpful assistant."
DEFAULT_TEMPERATURE = 0.7


@dataclass(frozen=True)
class ChatReply:
    """A whole reply: its text (cut before any stop word), why it ended, and the tokens it took."""

    text: str
    finish_reason: str  # "stop" (the model ended, or a stop word) or "length" (max_tokens)
    prompt_tokens: int
    completion_tokens: int


def turns(history: Any) -> list[tuple[str, str]]:
    """``history`` as ``(user, assistant)`` pairs of strings, oldest first; :class:`InputError` naming the bad turn."""
    if isinstance(history, str | bytes) or not hasattr(history, "__iter__"):
        raise InputError("history must be a list of [user, assistant] pairs, oldest first")
    pairs: list[tuple[str, str]] = []
    for number, turn in enumerate(history):
        if isinstance(turn, str | bytes) or not hasattr(turn, "__len__") or len(turn) != 2:
            raise InputError(f"history[{number}] must be a [user, assistant] pair, got {turn!r:.80}")
        user, assistant = turn
        if not isinstance(user, str) or not isinstance(assistant, str):
            raise InputError(f"history[{number}] must hold two strings (the user's turn, the assistant's)")
        pairs.append((user, assistant))
    return pairs


def check_unicode(name: str, value: str) -> None:
    """JSON may carry lone UTF-16 surrogates, which no tokenizer takes: :class:`InputError` naming where."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InputError(
            f"{name} holds an invalid character at {error.start} (a lone UTF-16 surrogate); send valid Unicode"
        ) from None


def request(
    engine: Engine,
    query: str,
    *,
    history: Any = (),
    system: str | None = DEFAULT_SYSTEM,
    stop_words: Sequence[str] = (),
    max_tokens: int,
    temperature: float = DEFAULT_TEMPERATURE,
) -> GenerationRequest:
    """The engine request for one chat turn: the window over the history, the stop words (4xx on bad input)."""
    if not isinstance(query, str):
        raise InputError("query must be a string: the user's message")
    pairs = turns(history)
    check_unicode("query", query)
    check_unicode("system", system or "")
    for number, (user, assistant) in enumerate(pairs):
        check_unicode(f"history[{number}]", user + assistant)
    if not 0.0 <= temperature <= 2.0:
        raise InputError(f"temperature must be between 0 and 2, got {temperature}")
    if max_tokens < 1:
        raise InputError(f"max_tokens must be at least 1, got {max_tokens}")
    if max_tokens >= engine.max_model_len // 2:
        # max_tokens is an upper bound: one the window cannot hold beside the query is clamped to
        # what the query leaves (history then fits in what max_tokens leaves, as always).
        alone = build_messages(
            query,
            (),
            system or "",
            count_tokens=engine.count_prompt_tokens,
            max_model_len=engine.max_model_len,
            max_tokens=1,
        )
        prompt_tokens = engine.count_prompt_tokens(alone)
        max_tokens = fit_window(max_tokens, at_least=1, prompt_tokens=prompt_tokens, max_model_len=engine.max_model_len)
    messages = build_messages(
        query,
        pairs,
        system or "",
        count_tokens=engine.count_prompt_tokens,
        max_model_len=engine.max_model_len,
        max_tokens=max_tokens,
    )
    words = tuple(w for w in stop_words if w)
    return GenerationRequest(messages=messages, temperature=temperature, max_tokens=max_tokens, stop=words)


def stream(engine: Engine, chat: GenerationRequest) -> AsyncGenerator[str, None]:
    """Cumulative text of the reply as it may be shown, cut at a stop word (the engine request then stops)."""
    return until_stop_word(stream_text(engine, chat), chat.stop)


async def reply(engine: Engine, chat: GenerationRequest) -> ChatReply:
    """The whole reply: the engine stops at a stop word itself; the text is cut there whatever the engine."""
    generation = await engine.generate(chat)
    text = generation.text
    cut = first_stop(text, chat.stop)
    finish = generation.finish_reason
    if cut >= 0:
        text, finish = text[:cut], "stop"
    return ChatReply(text, finish, generation.prompt_tokens, generation.completion_tokens)


def build_messages(
    query: str,
    history: Sequence[tuple[str, str]],
    system: str,
    *,
    count_tokens: Callable[[Sequence[Message]], int],
    max_model_len: int,
    max_tokens: int,
) -> list[Message]:
    """The chat for the engine: system, the newest history turns that fit, the query."""
    if not query.strip():
        raise InputError("query is empty: send the user's message in `query`")
    budget = max_model_len - max_tokens
    if budget <= 0:
        raise InputError(f"max_tokens ({max_tokens}) leaves no room for a prompt in a {max_model_len}-token window")

    def chat(turns: Sequence[tuple[str, str]]) -> list[Message]:
        messages: list[Message] = [{"role": "system", "content": system}] if system else []
        for user, assistant in turns:
            messages.append({"role": "user", "content": user})
            messages.append({"role": "assistant", "content": assistant})
        messages.append({"role": "user", "content": query})
        return messages

    needed = count_tokens(chat(()))
    if needed > budget:
        raise TextTooLongError(prompt_tokens=needed, max_tokens=max_tokens, max_model_len=max_model_len)
    # The longest fitting run of newest turns; prompt length grows with each older turn, so a
    # binary search gives what adding turns newest first until one does not fit would give.
    low, high = 0, len(history)
    while low < high:
        mid = (low + high + 1) // 2
        if count_tokens(chat(history[len(history) - mid :])) <= budget:
            low = mid
        else:
            high = mid - 1
    return chat(history[len(history) - low :])


def held_back(text: str, stop_words: Sequence[str]) -> int:
    """How many trailing characters of ``text`` could be the start of a stop word."""
    longest = 0
    for word in stop_words:
        for size in range(min(len(word) - 1, len(text)), longest, -1):
            if word.startswith(text[len(text) - size :]):
                longest = size
                break
    return longest


def first_stop(text: str, stop_words: Sequence[str], *, start: int = 0) -> int:
    """Where the first stop word begins in ``text`` (searching from ``start``), or -1."""
    found = [i for i in (text.find(w, start) for w in stop_words if w) if i >= 0]
    return min(found, default=-1)


async def until_stop_word(chunks: AsyncGenerator[str, None], stop_words: Sequence[str]) -> AsyncGenerator[str, None]:
    """Cumulative text as it may be shown: at a stop word, the text before it, and the engine is stopped.

    Closing ``chunks`` (on a stop word, or when this generator is closed) aborts the engine
    request. At least one text is always yielded (an empty answer yields ``""``).
    """
    words = [w for w in stop_words if w]
    longest = max((len(w) for w in words), default=0)
    shown: str | None = None
    text = ""
    async with aclosing(chunks) as source:
        async for text in source:
            if words:
                cut = first_stop(text, words, start=max(0, len(shown or "") - longest))
                if cut >= 0:
                    text = text[:cut]
                    break
                visible = text[: len(text) - held_back(text, words)]
            else:
                visible = text
            if visible != shown:
                shown = visible
                yield visible
    if text != shown:
        yield text  # the end: nothing is held back any more
