"""Prompt-lookup speculation: off by default, vLLM's ngram proposer when asked, bad values refused."""

from __future__ import annotations

import pytest

from extractor import Settings
from extractor.engines.vllm import VLLMEngine, speculation
from extractor.errors import ConfigError


def test_speculation_is_off_by_default_and_asks_vllms_ngram_proposer_when_set() -> None:
    assert Settings.from_env({}).speculative_tokens == 0 and speculation(0) is None
    settings = Settings.from_env({"EXTRACTOR_SPECULATIVE_TOKENS": "4"})
    args = VLLMEngine(settings)._engine_args()
    assert args.speculative_config == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 5,
    }
    assert VLLMEngine(Settings.from_env({}))._engine_args().speculative_config is None


def test_a_negative_count_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="EXTRACTOR_SPECULATIVE_TOKENS"):
        Settings.from_env({"EXTRACTOR_SPECULATIVE_TOKENS": "-1"})
