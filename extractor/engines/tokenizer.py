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
