"""The vLLM engines tokenize each prompt once: counting it and sending it share the ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from extractor.config import Settings
from extractor.engines.process import ProcessEngine
from extractor.engines.tokenizer import ChatIds, chat_token_ids, count_chat_tokens, load_tokenizer
from extractor.engines.vllm import VLLMEngine
from extractor.models import resolve_model_dir


class CountingTokenizer:
    """A stand-in for a Hugging Face tokenizer: one id per character, and a count of encode calls."""

    def __init__(self) -> None:
        self.encoded = 0

    def apply_chat_template(self, messages: list[dict[str, str]], **_: Any) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        assert add_special_tokens is False  # the chat template adds any BOS itself
        self.encoded += 1
        return {"input_ids": [ord(c) for c in text]}


@pytest.fixture(params=[VLLMEngine, ProcessEngine])
def kind(request: pytest.FixtureRequest) -> Any:
    return request.param


def _engine(tmp_path: Path, kind: Any = VLLMEngine) -> tuple[Any, CountingTokenizer]:
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    engine = kind(Settings(model=str(tmp_path)))
    tokenizer = CountingTokenizer()
    engine._chat_ids = ChatIds(tokenizer)
    return engine, tokenizer


def test_counting_then_sending_encodes_once(tmp_path: Path, kind: Any) -> None:
    engine, tokenizer = _engine(tmp_path, kind)
    chat = [{"role": "system", "content": "Extract."}, {"role": "user", "content": "weather in Oslo"}]
    count = engine.count_prompt_tokens(chat)  # type: ignore[arg-type]
    ids = engine.prompt_ids(chat)  # type: ignore[arg-type]
    assert tokenizer.encoded == 1
    assert count == len(ids) == count_chat_tokens(CountingTokenizer(), chat)  # type: ignore[arg-type]
    assert list(ids) == chat_token_ids(CountingTokenizer(), chat)  # type: ignore[arg-type]


def test_another_prompt_is_encoded_on_its_own(tmp_path: Path) -> None:
    engine, tokenizer = _engine(tmp_path)
    first = engine.prompt_ids([{"role": "user", "content": "a"}])
    second = engine.prompt_ids([{"role": "user", "content": "b"}])
    assert first != second and tokenizer.encoded == 2


def test_prompts_encoded_piece_by_piece_between_special_tokens_equal_one_whole_encode() -> None:
    tokenizer = load_tokenizer(resolve_model_dir(Settings.from_env({})))
    ids = ChatIds(tokenizer)
    assert ids._pieces is not None
    ids._pieces.checks_left = 0  # the pieces alone, unchecked
    system = {"role": "system", "content": "Extract the slots.\nSlots:\n- artist: the singer"}
    users = ["play  Yesterday by the Beatles ", "摩尔人统治时期 ", "x<|im_end|>y <repo_name>\n\n", " ", "\t😀"]
    for user in users:
        chat = [system, {"role": "user", "content": user}]
        assert list(ids(chat)) == chat_token_ids(tokenizer, chat)  # type: ignore[arg-type]
    assert ids._pieces is not None and ids._pieces._piece.cache_info().hits >= len(users) - 1  # the system turn


def test_a_tokenizer_the_pieces_disagree_with_goes_back_to_whole_encodes() -> None:
    tokenizer = load_tokenizer(resolve_model_dir(Settings.from_env({})))
    ids = ChatIds(tokenizer)
    assert ids._pieces is not None
    ids._pieces._added = {k: 0 for k in ids._pieces._added}  # pieces that no longer agree
    chat = [{"role": "user", "content": "weather in Oslo"}]
    assert list(ids(chat)) == chat_token_ids(tokenizer, chat)  # type: ignore[arg-type]
    assert ids._pieces is None  # for good
    assert ChatIds(CountingTokenizer())._pieces is None  # no fast tokenizer behind it: whole encodes


def test_a_long_passage_is_encoded_line_by_line_as_one_whole_encode_and_its_lines_once() -> None:
    """Each field of a passage asks its lines again in another turn: they are encoded once, the ids unchanged."""
    tokenizer = load_tokenizer(resolve_model_dir(Settings.from_env({})))
    ids = ChatIds(tokenizer)
    assert ids._pieces is not None and ids._pieces.by_lines
    ids._pieces.checks_left = 0
    passage = "\n".join(
        f"{n}. This Agreement, dated May {n}, 2014,\nruns for two (2) years;  see §{n}(b).\n\n  Delaware law governs."
        for n in range(1, 40)
    )
    for field in ("party", "term"):
        chat = [{"role": "user", "content": f"Read the {field}.\n\n{passage}\n摩尔人 😀"}]
        assert list(ids(chat)) == chat_token_ids(tokenizer, chat)  # type: ignore[arg-type]
    assert ids._pieces._piece.cache_info().hits > 40  # the second field's turn: its passage lines known


def test_a_tokenizer_that_joins_words_across_a_line_break_keeps_whole_pieces() -> None:
    from extractor.engines.tokenizer import PieceIds

    class Joining:
        """One token for the whole text given: a word is never cut, not even at a line break."""

        def encode(self, text: str, add_special_tokens: bool = False) -> Any:
            return type("Encoding", (), {"ids": [len(text)]})()

    pieces = PieceIds(Joining(), {"<s>": 1})
    assert not pieces.by_lines
