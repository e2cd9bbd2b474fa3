"""The model's chat template and token counts, shared by the in-process and remote engines."""

from __future__ import annotations

from collections.abc import Sequence
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


def count_chat_tokens(tokenizer: Any, messages: Sequence[Message]) -> int:
    """Tokens the chat takes once rendered with the model's chat template."""
    return len(chat_token_ids(tokenizer, messages))


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A low estimate without a tokenizer: one token per 4 characters (English BPE), 4 per message."""
    return sum(len(m["content"]) // 4 + 4 for m in messages)


def token_ends(tokenizer: Any, token_ids: Sequence[int], text: str) -> tuple[int, ...]:
    """Where each generated token ends in ``text`` (code points), from decoding every prefix.

    Decoding prefixes, not tokens one by one, keeps a character split over two byte tokens
    (Chinese in byte-level BPE) whole: its first token ends where the character starts. Ends are
    kept non-decreasing and within ``text`` (a stop string may have cut it).
    """
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
