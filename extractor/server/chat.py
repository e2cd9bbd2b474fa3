"""The seed's chat, reproduced on our engine: the prompt window and user stop words (pure logic).

Window rule (the seed's): the system prompt and the query always go in; earlier turns are kept
newest first, as many as fit in ``max_model_len - max_tokens`` once rendered with the model's
chat template.

Stop words: the text is cut at the first user stop word and the engine request is aborted, not
only the stream. Streamed text never shows the start of a stop word that may still complete.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing

from extractor.engines.base import Message
from extractor.errors import InputError, TextTooLongError


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
