"""The model registry's pure parts: Gemma's chat template, the BOS post-processor, the config fixes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from extractor.config import Settings
from extractor.errors import ConfigError, ModelNotPreparedError
from extractor.models import (
    GEMMA_CHAT_TEMPLATE,
    MODELS,
    bos_post_processor,
    fix_config,
    known_model,
    resolve_model_dir,
)

GEMMA = MODELS["gemma3-270m"]


def render(messages: list[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
    # the environment transformers renders chat templates in
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(GEMMA_CHAT_TEMPLATE)
    return template.render(messages=messages, bos_token="<bos>", add_generation_prompt=add_generation_prompt)


def test_gemma_template_folds_the_system_prompt_into_the_first_user_turn() -> None:
    text = render(
        [
            {"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": "阿尔罕布拉宫在哪里？ "},
            {"role": "assistant", "content": '{"country": "西班牙"}'},
            {"role": "user", "content": "And the Louvre?"},
        ]
    )
    assert text == (
        "<bos><start_of_turn>user\nAnswer in JSON.\n\n阿尔罕布拉宫在哪里？<end_of_turn>\n"
        '<start_of_turn>model\n{"country": "西班牙"}<end_of_turn>\n'
        "<start_of_turn>user\nAnd the Louvre?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_gemma_template_without_system_or_generation_prompt() -> None:
    text = render([{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert text == "<bos><start_of_turn>user\nHi<end_of_turn>\n"


def test_bos_post_processor_prepends_bos() -> None:
    from tokenizers import Tokenizer

    spec = {
        "version": "1.0",
        "added_tokens": [
            {
                "id": 2,
                "content": "<bos>",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": bos_post_processor("<bos>", 2),
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "a": 1, "<bos>": 2, "b": 3}, "unk_token": "<unk>"},
    }
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    assert tokenizer.encode("a b").ids == [2, 1, 3]
    assert tokenizer.encode("a b", add_special_tokens=False).ids == [1, 3]


def test_fix_config_sets_architecture_and_stop_ids() -> None:
    loaded = {"model_type": "gemma3_text", "eos_token_id": 1, "quantization_config": {"quant_method": "gguf"}}
    fixed = fix_config(loaded, GEMMA)
    assert fixed["architectures"] == ["Gemma3ForCausalLM"]
    assert fixed["eos_token_id"] == [1, 106]  # <eos> and <end_of_turn>
    assert "quantization_config" not in fixed
    assert fix_config({"eos_token_id": 2}, MODELS["default"])["eos_token_id"] == 2


def test_registry_names_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="gemma3-270m"):
        known_model("gemma-7b")
    settings = Settings.from_env({}, home=str(tmp_path), model="gemma3-270m")
    with pytest.raises(ModelNotPreparedError, match="extractor model prepare --model gemma3-270m"):
        resolve_model_dir(settings)


def test_prepared_gemma_folder(tmp_path: Path) -> None:
    folder = Settings.from_env({}).models_dir / GEMMA.dir_name
    if not (folder / "config.json").is_file():
        pytest.skip(f"gemma3-270m is not prepared in {folder} (`extractor model prepare --model gemma3-270m`)")
    from transformers import AutoTokenizer

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["Gemma3ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (640, 18, 256)
    assert config["rope_parameters"]["sliding_attention"]["rope_theta"] == 10000.0
    assert json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))["eos_token_id"] == [1, 106]
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    assert tokenizer("The capital of France is").input_ids == [2, 818, 5279, 529, 7001, 563]  # as llama.cpp
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert tokenizer(chat, add_special_tokens=False).input_ids[:2] == [2, 105]
