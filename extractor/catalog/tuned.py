"""A task's settings in three layers: the project's defaults, what the analyst wrote, what tuning measured.

A task's ``x-extractor`` block is read over two other layers:

1. **the project's defaults** (:data:`DEFAULTS`): what measured better across tasks is on for a task
   that says nothing: grounded decoding for grounded fields (`bench/results/grounded_decoding.md`),
   the pool's hints where a pool exists (the Chinese entity task, 3 examples: 0.311 without, 0.454
   with them; `bench/results/tuning.md`), chunking for texts longer than the model's window (no 422 "text too
   long"). A task turns one off by writing it: ``"grounded_decoding": false``, ``"chunking": false``,
   ``"examples_from_pool": {"hints": false}``.
2. **the schema's** ``x-extractor`` block, as the analyst wrote it;
3. **``tuned/<task>.json``** under the catalog root: the settings ``extractor tune`` measured best on
   the task's own labelled lines or documents (:mod:`extractor.jobs.tuning`), with the table it
   measured; by document, also each field's reading (a :data:`~extractor.examples.reading.VARIANTS`
   name, applied to what the pool teaches, under what the analyst wrote on the field). Tuning
   writes it, a reload picks it up, deleting it goes back to the schema's settings.

Pure: reading the tuned file is the caller's (:func:`read`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from extractor.errors import ConfigError
from extractor.examples.reading import VARIANTS

DEFAULTS: dict[str, Any] = {
    "grounded_decoding": True,
    "chunking": True,
    "examples_from_pool": {"hints": True},
}
READING = "reading"  # the tuned file's per-field reading variants
# Settings that are on or off or hold a block: a layer may write the block, true (its defaults) or false (off).
_BLOCKS = ("examples_from_pool", "chunking")
# What tuning chooses (the rest of a task's settings are the analyst's).
TUNED_SETTINGS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "examples_from_pool": {
            "type": ["boolean", "object"],
            "additionalProperties": False,
            "properties": {"k": {"type": "integer", "minimum": 0, "maximum": 16}, "hints": {"type": "boolean"}},
        },
        "grounded_decoding": {"type": "boolean"},
        # by document (``extractor tune --documents``): whole answers or field by field, and each field's reading
        "chunking": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"by_field": {"type": "boolean"}},
        },
        READING: {"type": "object", "additionalProperties": {"enum": list(VARIANTS)}},
        # false: served without the task's adapter; a folder under the catalog root: tune --train's
        "adapter": {"type": ["boolean", "string"], "minLength": 1, "pattern": "^tuned/[^/]+[.]adapter$"},
        "model": {"type": "string", "minLength": 1},
    },
}
_FILE = Draft202012Validator(
    {
        "type": "object",
        "required": ["x-extractor"],
        "properties": {"x-extractor": TUNED_SETTINGS, "candidates": {"type": "array"}, "chosen": {"type": "string"}},
    }
)


def tuned_path(root: Path, name: str) -> Path:
    """Where ``extractor tune`` writes a task's settings: ``tuned/<task>.json`` under the catalog root."""
    return root / "tuned" / f"{name}.json"


def read(path: Path) -> dict[str, Any]:
    """The settings of a tuned file (its ``x-extractor`` block); :class:`ConfigError` naming what to fix."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path}: not a readable JSON file ({error}); run `extractor tune` again") from None
    wrong = next(iter(sorted(_FILE.iter_errors(data), key=lambda e: list(e.path))), None)
    if wrong is not None:
        where = "/".join(str(p) for p in wrong.path)
        raise ConfigError(f"{path}: {where or 'the file'}: {wrong.message}; run `extractor tune` again")
    return dict(data["x-extractor"])


def reading_of(root: Path, name: str) -> dict[str, str]:
    """Each field's reading variant in a task's tuned file (``extractor tune --documents``); none: empty."""
    path = tuned_path(root, name)
    return dict(read(path).get(READING) or {}) if path.is_file() else {}


def layered(written: Mapping[str, Any], tuned: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The defaults, then ``written`` (the schema's block), then ``tuned``: one ``x-extractor`` block."""
    merged: dict[str, Any] = dict(DEFAULTS)
    for layer in (written, tuned or {}):
        for key, value in layer.items():
            if key == READING:
                continue  # not a task setting: the catalog applies it to the learned reading (loading)
            if key in _BLOCKS and isinstance(value, Mapping):
                below = merged.get(key)
                merged[key] = {**(below if isinstance(below, Mapping) else {}), **value}
            elif key in _BLOCKS and value is True:
                below = merged.get(key)
                merged[key] = dict(below) if isinstance(below, Mapping) else True
            else:
                merged[key] = value
    return merged
