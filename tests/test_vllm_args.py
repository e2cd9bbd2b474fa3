"""EXTRACTOR_VLLM_ARGS: more of vLLM's engine arguments, over the service's own, checked before vLLM starts."""

from __future__ import annotations

import pytest

from extractor import Settings
from extractor.engines.vllm import VLLMEngine
from extractor.errors import ConfigError


def engine_args(raw: str) -> object:
    return VLLMEngine(Settings.from_env({"EXTRACTOR_VLLM_ARGS": raw}))._engine_args()


def test_extra_arguments_reach_vllm_and_replace_the_services_own() -> None:
    args = engine_args(
        '{"max_num_batched_tokens": 2048, "enable_prefix_caching": false,'
        ' "compilation_config": {"max_cudagraph_capture_size": 1024}}'
    )
    assert args.max_num_batched_tokens == 2048  # type: ignore[attr-defined]
    assert args.enable_prefix_caching is False  # type: ignore[attr-defined]
    assert args.compilation_config.max_cudagraph_capture_size == 1024  # type: ignore[attr-defined]
    default = VLLMEngine(Settings.from_env({}))._engine_args()
    assert default.enable_prefix_caching is True  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{max_num_batched_tokens: 2048}", "not JSON"),
        ("[2048]", "a JSON object of vLLM engine arguments"),
        ('"2048"', "a JSON object of vLLM engine arguments"),
    ],
)
def test_a_value_that_is_not_a_json_object_names_the_setting(raw: str, says: str) -> None:
    with pytest.raises(ConfigError, match=f"EXTRACTOR_VLLM_ARGS: {says}"):
        Settings.from_env({"EXTRACTOR_VLLM_ARGS": raw})


def test_an_argument_vllm_does_not_have_is_named_before_it_starts() -> None:
    with pytest.raises(ConfigError, match="not vLLM engine arguments: max_batch_tokens, temprature"):
        engine_args('{"temprature": 0, "max_batch_tokens": 1, "max_num_seqs": 8}')


def test_empty_means_none() -> None:
    assert Settings.from_env({"EXTRACTOR_VLLM_ARGS": ""}).engine_arguments == {}
    assert Settings.from_env({"EXTRACTOR_VLLM_ARGS": " {} "}).engine_arguments == {}


def test_starting_with_an_argument_vllm_lacks_is_a_config_error_not_a_failed_engine() -> None:
    engine = VLLMEngine(Settings.from_env({"EXTRACTOR_VLLM_ARGS": '{"temprature": 0}'}))
    with pytest.raises(ConfigError, match="not vLLM engine arguments: temprature"):
        engine.start_sync()
    assert engine._llm is None  # nothing started, nothing left running


def test_vllm_in_its_own_process_fails_to_start_with_the_same_config_error() -> None:
    """The child names the bad argument; the parent raises it as a ConfigError too (the user's to fix)."""
    from extractor.engines.process import ProcessEngine

    settings = Settings.from_env({"EXTRACTOR_VLLM_ARGS": '{"temprature": 0}'}, engine_process="own")
    engine = ProcessEngine(settings)
    try:
        with pytest.raises(ConfigError, match="not vLLM engine arguments: temprature"):
            engine.start_sync()
    finally:
        engine.close_sync()
