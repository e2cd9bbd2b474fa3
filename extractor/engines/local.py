"""What the two vLLM engines share: a local model folder, its window, its tokenizer and prompt ids."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from extractor.config import Settings
from extractor.engines.base import Message
from extractor.engines.tokenizer import ChatIds, TokenPlaces, load_tokenizer
from extractor.errors import EngineError

PROMPT_IDS_CACHE = 1024  # prompts counted and not yet sent: about the requests in flight


class LocalModel:
    """The model's name and context window from the settings; its tokenizer and prompt ids once started."""

    _settings: Settings
    _model_dir: Path
    _chat_ids: ChatIds | None  # set at start
    _places: TokenPlaces | None = None  # set at start

    def _load_tokenizer(self) -> None:
        """Load the model's tokenizer and start remembering prompt ids (at start)."""
        tokenizer = load_tokenizer(self._model_dir)
        self._chat_ids = ChatIds(tokenizer, PROMPT_IDS_CACHE)
        self._places = TokenPlaces(tokenizer)

    @property
    def model_name(self) -> str:
        return self._model_dir.name if self._settings.model == "default" else str(self._settings.model)

    @property
    def max_model_len(self) -> int:
        return self._settings.max_model_len

    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer (loaded at start)."""
        if self._chat_ids is None:
            raise EngineError("engine not started")
        return self._chat_ids.tokenizer

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        return len(self.prompt_ids(messages))

    @property
    def places(self) -> TokenPlaces:
        """The answers' token places and texts for this tokenizer (made at start, or on first use)."""
        if self._places is None:
            self._places = TokenPlaces(self.tokenizer)
        return self._places

    def token_ends(self, token_ids: Sequence[int], text: str) -> tuple[int, ...]:
        """Where each generated token ends in ``text`` (code points): :class:`TokenPlaces`."""
        return self.places(token_ids, text)

    def answer_text(self, token_ids: Sequence[int]) -> str:
        """An answer's text from its token ids, as vLLM's detokenizer writes it: :meth:`TokenPlaces.text`."""
        return self.places.text(token_ids)

    def forget_prompts(self) -> None:
        """Drop the remembered prompt ids (the pieces' stay): the benchmarks' passes tokenize their prompts afresh."""
        if self._chat_ids is not None:
            self._chat_ids.forget()

    def prompt_ids(self, messages: Sequence[Message]) -> tuple[int, ...]:
        """The chat's token ids under the model's chat template, remembered for the latest prompts."""
        if self._chat_ids is None:
            raise EngineError("engine not started")
        return self._chat_ids(messages)
