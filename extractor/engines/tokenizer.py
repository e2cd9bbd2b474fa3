"""The model's chat template and token counts, shared by the in-process and remote engines."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
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
    text prompt would be tokenized again there, on the thread that feeds the engine). Where the
    tokenizer allows (:class:`PieceIds`), the text between special tokens is encoded piece by
    piece and each piece remembered, so a task's system turn is encoded once, not per document.
    """

    def __init__(self, tokenizer: Any, size: int = 1024) -> None:
        self.tokenizer = tokenizer
        self._encoded = lru_cache(maxsize=size)(self._encode)
        self._pieces = PieceIds.of(tokenizer)

    def __call__(self, messages: Sequence[Message]) -> tuple[int, ...]:
        return self._encoded(tuple(tuple(sorted(m.items())) for m in messages))

    def forget(self) -> None:
        """Drop the remembered chats (each piece's ids stay known)."""
        self._encoded.cache_clear()

    def _encode(self, key: tuple[tuple[tuple[str, Any], ...], ...]) -> tuple[int, ...]:
        messages: list[Any] = [dict(m) for m in key]
        if self._pieces is None:
            return tuple(chat_token_ids(self.tokenizer, messages))
        text = render_chat(self.tokenizer, messages)
        ids = self._pieces(text)
        if self._pieces.checks_left > 0:  # the first prompts are checked against one whole encode
            self._pieces.checks_left -= 1
            whole = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if ids != whole:
                self._pieces = None
                return whole
        return ids


class PieceIds:
    """A text's token ids as its pieces' between added tokens (special ones included), each encoded once.

    A Hugging Face fast tokenizer cuts the text at its added tokens before it normalizes,
    pre-tokenizes and encodes each piece on its own, so encoding the pieces apart gives the same
    ids, as long as no added token strips its neighbours' spaces or matches after normalization
    (:meth:`of` refuses such a tokenizer). :class:`ChatIds` still compares the first prompts with a
    whole encode and drops back to it for good on any difference.
    """

    CHECKS = 16  # prompts compared with a whole encode before the pieces are trusted
    # A long piece (a passage in its turn) is encoded line by line where a line break stands between
    # two words: each field of a passage, and each attempt, asks the same lines again in another
    # turn. Byte-level BPE cuts its words there anyway; :meth:`of` checks the tokenizer does.
    LINES = re.compile(r"(?<=\S\n)(?=\S)")
    LONG = 512  # characters from which a piece is cut into lines
    SAMPLE = "Agreement dated May 20, 2014.\nThe term is two (2) years;\n(b) Governing law:\nDelaware, U.S.A.\n\nEnd"

    def __init__(self, backend: Any, added: dict[str, int], size: int = 65536) -> None:
        self._backend = backend
        self._added = added
        self._cut = re.compile("(" + "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True)) + ")")
        self._piece = lru_cache(maxsize=size)(self._encode)
        self.checks_left = self.CHECKS
        self.by_lines = tuple(self._lines(self.SAMPLE)) == self._encode(self.SAMPLE)

    @classmethod
    def of(cls, tokenizer: Any) -> PieceIds | None:
        """For a fast tokenizer whose added tokens match the raw text and keep their neighbours; else None."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        decoder = getattr(tokenizer, "added_tokens_decoder", None)
        if backend is None or not isinstance(decoder, dict) or not decoder:
            return None
        tokens = list(decoder.items())
        if any(t.lstrip or t.rstrip or t.single_word or t.normalized for _, t in tokens):
            return None
        return cls(backend, {t.content: i for i, t in tokens if t.content})

    def __call__(self, text: str) -> tuple[int, ...]:
        ids: list[int] = []
        for index, piece in enumerate(self._cut.split(text)):
            if index % 2:
                ids.append(self._added[piece])
            elif len(piece) >= self.LONG and self.by_lines:
                ids += self._lines(piece)
            elif piece:
                ids += self._piece(piece)
        return tuple(ids)

    def _lines(self, piece: str) -> list[int]:
        return [token for line in self.LINES.split(piece) if line for token in self._piece(line)]

    def _encode(self, piece: str) -> tuple[int, ...]:
        return tuple(self._backend.encode(piece, add_special_tokens=False).ids)


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


class TokenPlaces:
    """:func:`token_ends` for one tokenizer; from each token's bytes where its decoder is GPT-2's byte level.

    A byte-level BPE token stands for fixed bytes, so an answer's token ends come from one pass
    over its bytes (a few µs) instead of two decodes a token (about 1 ms an answer, on the thread
    that runs the pipeline). Other tokenizers, or one that cleans up spaces when it decodes, keep
    :func:`token_ends`. The first answers are placed both ways, and any difference drops back to
    :func:`token_ends` for good.
    """

    CHECKS = 16  # answers placed both ways before the bytes are trusted

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._bytes = _byte_level(tokenizer)
        self._pieces: dict[int, bytes] = {}
        self.checks_left = self.CHECKS
        self.text_checks_left = self.CHECKS

    def __call__(self, token_ids: Sequence[int], text: str) -> tuple[int, ...]:
        if self._bytes is None:
            return token_ends(self.tokenizer, token_ids, text)
        ends = _decoded_ends([self._piece(i) for i in token_ids], text)
        if self.checks_left > 0:
            self.checks_left -= 1
            reference = token_ends(self.tokenizer, token_ids, text)
            if ends != reference:
                self._bytes = None
                return reference
        return ends

    @property
    def reads_bytes(self) -> bool:
        """Whether an answer's text comes from its tokens' bytes (:meth:`text` without a decode)."""
        return self._bytes is not None

    def text(self, token_ids: Sequence[int]) -> str:
        """The answer's text as vLLM writes it (special tokens skipped): its tokens' bytes, decoded once.

        For an engine that asks vLLM for the tokens only, not the text (vLLM then skips its
        incremental detokenizer and the logprobs' per-token decode). Checked against a decode on
        the first uses, as the places are.
        """
        if self._bytes is None:
            return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=True))
        text = b"".join(self._piece(i) for i in token_ids).decode("utf-8", errors="replace")
        if self.text_checks_left > 0:
            self.text_checks_left -= 1
            reference = str(self.tokenizer.decode(list(token_ids), skip_special_tokens=True))
            if text != reference:
                self._bytes = None
                return reference
        return text

    def _piece(self, token_id: int) -> bytes:
        piece = self._pieces.get(token_id)
        if piece is None:
            assert self._bytes is not None
            piece = self._pieces[token_id] = self._bytes(token_id)
        return piece


def _byte_level(tokenizer: Any) -> Callable[[int], bytes] | None:
    """``token id -> bytes`` for a fast tokenizer with GPT-2's byte-level decoder that keeps spaces; else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or type(backend.decoder).__name__ != "ByteLevel":
        return None
    probe = "a . b , c ! d ? e 's f n't"  # what a decode that cleans up spaces would change
    if tokenizer.decode(tokenizer(probe, add_special_tokens=False)["input_ids"], skip_special_tokens=True) != probe:
        return None
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = {char: byte for byte, char in bytes_to_unicode().items()}  # type: ignore[no-untyped-call]
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special = {*tokenizer.all_special_ids, *(i for i, t in added.items() if t.special)}

    def piece(token_id: int) -> bytes:
        if token_id in special:
            return b""  # decoded with skip_special_tokens, as vLLM writes the text
        token = backend.id_to_token(token_id) or ""
        if all(c in table for c in token):
            return bytes(table[c] for c in token)
        return token.encode("utf-8")  # an added token outside the byte alphabet stands for itself

    return piece


def _decoded_ends(pieces: Sequence[bytes], text: str) -> tuple[int, ...]:
    """Each token's end in ``text`` as decoding every prefix (invalid bytes replaced) would place it."""
    ends: list[int] = []
    previous = 0
    done = 0  # code points of the prefix up to the last token that ended cleanly
    pending = b""
    for piece in pieces:
        pending += piece
        decoded = pending.decode("utf-8", errors="replace")
        if decoded.endswith("\ufffd"):  # a character not complete yet (or bytes that never will be)
            length = done + len(decoded.rstrip("\ufffd"))
        else:
            length = done = done + len(decoded)
            pending = b""
        previous = min(len(text), max(previous, length))
        ends.append(previous)
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
