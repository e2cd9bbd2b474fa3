"""The model's chat template and token counts, shared by the in-process and remote engines."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from extractor.engines.base import Message


def load_tokenizer(model_dir: Path) -> Any:
    """The Hugging Face tokenizer saved in ``model_dir`` (transformers is imported here only)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def render_chat(tokenizer: Any, messages: Sequence[Message]) -> str:
    """The chat rendered with the model's chat template, ready for generation."""
    return str(tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True))


def chat_token_ids(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """The chat's token ids once rendered with the model's chat template (the template adds any BOS)."""
    return list(tokenizer(render_chat(tokenizer, messages), add_special_tokens=False)["input_ids"])


class ChatIds:
    """A chat's token ids under the model's chat template, remembered for the latest ``size`` chats.

    A prompt is tokenized once: the pipeline counts its tokens, then the same ids go to vLLM (a
    text prompt would be tokenized again there, on the thread that feeds the engine).
    """

    def __init__(self, tokenizer: Any, size: int = 1024) -> None:
        self.tokenizer = tokenizer
        self._encoded = lru_cache(maxsize=size)(self._encode)

    def __call__(self, messages: Sequence[Message]) -> tuple[int, ...]:
        return self._encoded(tuple(tuple(sorted(m.items())) for m in messages))

    def _encode(self, key: tuple[tuple[tuple[str, Any], ...], ...]) -> tuple[int, ...]:
        messages: list[Any] = [dict(m) for m in key]
        return tuple(chat_token_ids(self.tokenizer, messages))


def count_chat_tokens(tokenizer: Any, messages: Sequence[Message]) -> int:
    """Tokens the chat takes once rendered with the model's chat template."""
    return len(chat_token_ids(tokenizer, messages))


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A low estimate without a tokenizer: one token per 4 characters (English BPE), 4 per message."""
    return sum(len(m["content"]) // 4 + 4 for m in messages)


# Tokens decoded before the one being placed, so that a tokenizer which treats a sequence's first
# token apart (a SentencePiece leading space, a byte-level merge) places it as in the whole text.
_CONTEXT = 4


def token_ends(tokenizer: Any, token_ids: Sequence[int], text: str) -> tuple[int, ...]:
    """Where each generated token ends in ``text`` (code points), decoded incrementally.

    Each token is placed by decoding a short window ending at it, against the same window without
    the tokens after the last clean boundary (vLLM's incremental detokenizer does the same), so a
    long answer costs linear time, not a decode of every prefix. A character split over byte tokens
    (Chinese in byte-level BPE) stays whole: its first token ends where the character starts. Ends
    are kept non-decreasing and within ``text`` (a stop string may have cut it).
    """

    def decode(start: int, stop: int) -> str:
        return str(tokenizer.decode(list(token_ids[start:stop]), skip_special_tokens=True))

    ends: list[int] = []
    previous = 0
    anchor = 0  # token_ids[:anchor] decode to a clean text of anchor_end code points
    anchor_end = 0
    window = 0
    base = ""
    for index in range(len(token_ids)):
        decoded = decode(window, index + 1)
        clean = not decoded.endswith("\ufffd")
        length = len(decoded) if clean else len(decoded.rstrip("\ufffd"))
        complete = anchor_end + length - len(base)
        previous = min(len(text), max(previous, complete))
        ends.append(previous)
        if clean:
            anchor, anchor_end = index + 1, complete
            window = max(0, anchor - _CONTEXT)
            base = decode(window, anchor)
    return tuple(ends)


def prefix_token_ends(tokenizer: Any, token_ids: Sequence[int], text: str) -> tuple[int, ...]:
    """``token_ends`` by decoding every prefix (quadratic): the reference the incremental one is tested against."""
    if not token_ids:
        return ()
    prefixes = [list(token_ids[: i + 1]) for i in range(len(token_ids))]
    decoded = tokenizer.batch_decode(prefixes, skip_special_tokens=True)
    ends: list[int] = []
    previous = 0
    for prefix in decoded:
        complete = len(prefix.rstrip("\ufffd")) if prefix.endswith("\ufffd") else len(prefix)
        previous = min(len(text), max(previous, complete))
        ends.append(previous)
    return tuple(ends)


def bytes_ends(pieces: Sequence[bytes]) -> tuple[int, ...]:
    """Where each token ends, in code points, from the UTF-8 bytes of every token (an OpenAI ``logprobs`` list)."""
    ends: list[int] = []
    buffer = b""
    for piece in pieces:
        buffer += piece
        ends.append(len(buffer.decode("utf-8", errors="ignore")))
    return tuple(ends)
