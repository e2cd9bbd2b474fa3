"""A merged model: an adapter folded into the base model's weights (``extractor model merge``).

On a CPU, vLLM serves LoRA adapters in plain PyTorch with torch.compile off: adapter requests
decode several times slower than base ones. Merging the adapter into the weights (peft's
``merge_and_unload``) gives a plain model as fast as the base, at the price of one model per
merge: every task of the catalog is then served by the merged weights. The merged folder carries
``extractor-merged.json`` naming the adapter it holds, so that the engine serves that adapter's
tasks with no LoRA at all, and refuses to stack another adapter on top.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from extractor.adapters.manifest import AdapterError, check_model, read
from extractor.models import save_weights

MERGED = "extractor-merged.json"
# Files of a model folder that are not weights: copied as they are (tokenizer, chat template).
_KEEP = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "vocab.json")


def merge(model_dir: Path, adapter: Path, out: Path) -> Path:
    """Write ``adapter`` merged into ``model_dir``'s weights as a model folder ``out``; returns ``out``."""
    check_model(adapter, model_dir)
    manifest = read(adapter)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    merged: Any = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_weights(merged, staging)
    shutil.copy(model_dir / "config.json", staging / "config.json")
    for name in _KEEP:
        if (model_dir / name).is_file():
            shutil.copy(model_dir / name, staging / name)
    marker = {
        "base_model": model_dir.name,
        "base_model_sha256": manifest["base_model_sha256"],
        "adapter": str(adapter),
        "adapter_data_sha256": manifest.get("data_sha256"),
        "tasks": sorted(manifest.get("tasks", {})),
    }
    (staging / MERGED).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def merged_marker(model_dir: Path) -> dict[str, Any] | None:
    """The merge record of ``model_dir``, None for a model that is not a merge."""
    path = model_dir / MERGED
    if not path.is_file():
        return None
    value = json.loads(path.read_text(encoding="utf-8"))
    return value if isinstance(value, dict) else None


def holds(model_dir: Path, adapter: Path) -> bool:
    """True when ``adapter`` is already merged into ``model_dir``'s weights (serve it without LoRA).

    :class:`AdapterError` for another adapter on a merged model: LoRA on top of a merge would
    apply the merged adapter twice or mix two tasks' training.
    """
    marker = merged_marker(model_dir)
    if marker is None:
        return False
    manifest = read(adapter)
    if manifest.get("data_sha256") == marker.get("adapter_data_sha256") and manifest.get(
        "base_model_sha256"
    ) == marker.get("base_model_sha256"):
        return True
    raise AdapterError(
        f"{adapter}: the engine's model {model_dir} is a merge of another adapter ({marker.get('adapter')}); "
        "serve this adapter on the base model, or merge it instead"
    )
