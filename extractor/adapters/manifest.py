"""An adapter's manifest (``extractor-adapter.json``): what it was trained for, checked before it serves.

An adapter is only right for the base model it was trained on and for the prompt it learned:
the manifest records a fingerprint of each, and :func:`check` refuses an adapter whose base
model or task template (prompt file, schema, system prompt) changed since, naming what and how
to fix it (train again, or point the task at the right adapter).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from extractor.errors import ConfigError

MANIFEST = "extractor-adapter.json"
FORMAT = 1
BY_FIELD = "by_field"  # a task entry's "requests": the adapter learned one field over a passage at a time
_EDGE = 1 << 20  # bytes read from each end of a weight file for its fingerprint


class AdapterError(ConfigError):
    """An adapter that does not fit the model or the task it is asked to serve."""


class Fingerprinted(Protocol):
    """What the manifest reads of a task: its name and the fingerprint of its prompt and answer."""

    @property
    def name(self) -> str: ...

    def fingerprint(self) -> str:
        """SHA-256 of what shapes the task's prompt and answer (:meth:`extractor.catalog.tasks.Task.fingerprint`)."""
        ...


# The config keys that fix the network's shape. The rest of config.json (``transformers_version``,
# ``dtype`` spelling, rope key layout) changes with the transformers release that converted the
# model, not with the weights: an adapter trained on the GPU host serves here.
_SHAPE_KEYS = (
    "model_type",
    "architectures",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)


def model_fingerprint(model_dir: Path) -> str:
    """SHA-256 over the model's shape (config) and, per weight file, its size and first and last MiB."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    shape = {key: config.get(key) for key in _SHAPE_KEYS} if isinstance(config, dict) else config
    h = hashlib.sha256(json.dumps(shape, sort_keys=True).encode())
    for path in sorted(model_dir.glob("*.safetensors")) + sorted(model_dir.glob("*.bin")):
        size = path.stat().st_size
        h.update(f"{path.name}:{size}".encode())
        with path.open("rb") as handle:
            h.update(handle.read(_EDGE))
            handle.seek(max(0, size - _EDGE))
            h.update(handle.read(_EDGE))
    return h.hexdigest()


def write(
    folder: Path,
    *,
    model_dir: Path,
    tasks: Sequence[Fingerprinted],
    data_hash: str,
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    by_field: bool = False,
) -> dict[str, Any]:
    """Write ``folder``'s manifest: fingerprints of the base model and of each task, data hash, figures.

    ``by_field``: the adapter learned the requests of a task read by field (one field over a
    passage: :func:`by_field`), which it then serves alone.
    """
    entry = {"requests": BY_FIELD} if by_field else {}
    manifest = {
        "format": FORMAT,
        "base_model": model_dir.name,
        "base_model_sha256": model_fingerprint(model_dir),
        "tasks": {t.name: {"template_sha256": t.fingerprint(), **entry} for t in tasks},
        "data_sha256": data_hash,
        "config": dict(config),
        "metrics": dict(metrics),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def add_metrics(folder: Path, metrics: Mapping[str, Any]) -> None:
    """Record more figures (e.g. the dev F1 measured after training) in ``folder``'s manifest."""
    manifest = read(folder)
    manifest["metrics"] = {**manifest.get("metrics", {}), **metrics}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def read(folder: Path) -> dict[str, Any]:
    """The adapter's manifest; :class:`AdapterError` when missing, unreadable or of another format."""
    path = folder / MANIFEST
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(
            f"{folder}: not an extractor adapter (no {MANIFEST}); train one with `extractor train`"
        ) from None
    except ValueError as error:
        raise AdapterError(f"{path}: unreadable manifest: {error}") from None
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise AdapterError(
            f"{path}: manifest format {value.get('format') if isinstance(value, dict) else '?'}, "
            f"expected {FORMAT}; train the adapter again"
        )
    return value


def check_task(folder: Path, task: Fingerprinted) -> dict[str, Any]:
    """The manifest, if the adapter was trained for ``task`` as it is now; else :class:`AdapterError`."""
    manifest = read(folder)
    entry = manifest.get("tasks", {}).get(task.name)
    if entry is None:
        trained = ", ".join(sorted(manifest.get("tasks", {}))) or "none"
        raise AdapterError(f"{folder}: trained for {trained}, not for task {task.name!r}")
    if entry.get("template_sha256") != task.fingerprint():
        raise AdapterError(
            f"{folder}: trained on another version of task {task.name!r} (its prompt, schema or system "
            f"prompt changed since); run `extractor train {task.name}` again"
        )
    return manifest


def by_field(manifest: Mapping[str, Any], task: str) -> bool:
    """True when the adapter learned ``task``'s requests by field (one field over a passage), not whole answers."""
    entry = manifest.get("tasks", {}).get(task)
    return isinstance(entry, Mapping) and entry.get("requests") == BY_FIELD


def check_model(folder: Path, model_dir: Path) -> None:
    """:class:`AdapterError` unless the adapter was trained on the model in ``model_dir``."""
    manifest = read(folder)
    if manifest.get("base_model_sha256") != model_fingerprint(model_dir):
        raise AdapterError(
            f"{folder}: trained on base model {manifest.get('base_model')!r}, not on the engine's "
            f"{model_dir.name!r} ({model_dir}); serve it with that model or train it again on this one"
        )


def adapter_rank(folder: Path) -> int:
    """The LoRA rank in the adapter's ``adapter_config.json`` (peft's), 0 when unreadable."""
    try:
        return int(json.loads((folder / "adapter_config.json").read_text(encoding="utf-8")).get("r", 0))
    except (OSError, ValueError, TypeError):
        return 0
