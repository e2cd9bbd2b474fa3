"""A task's settings: the schema's ``x-extractor`` block, checked like any other schema, and read.

Each setting says what it changes where it is declared; the defaults are the global settings
(:class:`extractor.config.Settings`) wherever a field is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jsonschema.validators import Draft202012Validator

from extractor.catalog import tuned
from extractor.config import MAX_ATTEMPTS_LIMIT
from extractor.errors import TaskError
from extractor.examples.pool import Example, PoolSettings
from extractor.models import MODELS
from extractor.schema import join

SETTINGS_KEY = "x-extractor"

# The per-task settings block, checked like any other schema.
_SETTINGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 8192},
        "max_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT},
        "grounding": {"enum": ["strict", "flag", "off"]},
        "system": {"type": "string"},
        "allow_unenforced": {"type": "boolean"},
        "strict_enforcement": {"type": "boolean"},
        "grounded_decoding": {"type": "boolean"},
        # the model that serves this task, by a packaged model's name (default: the service's, EXTRACTOR_MODEL)
        "model": {"type": "string", "minLength": 1},
        # tesseract's languages for the PDF pages of this task's documents read by OCR (EXTRACTOR_OCR_LANGUAGES)
        "ocr_languages": {"type": "string", "pattern": "^[a-z]{3}(_[a-z]+)*(\\+[a-z]{3}(_[a-z]+)*)*$"},
        # each value's confidence from its tokens' logprobs (default: the global EXTRACTOR_CONFIDENCES)
        "confidences": {"type": "boolean"},
        # how typed values' evidence is read (extractor.values): dateparser's languages, day/month order
        "languages": {"type": "array", "items": {"type": "string", "minLength": 2}},
        "date_order": {"enum": ["DMY", "MDY", "YMD"]},
        # a LoRA adapter: a folder under the catalog root, false for none (default: adapters/<task>/ if there)
        "adapter": {"type": ["string", "boolean"], "minLength": 1},
        "adapter_examples": {"type": "boolean"},  # show worked examples to the adapter too (default: no)
        "examples_from_pool": {  # true/false, or how many and how chosen
            "type": ["boolean", "object"],
            "additionalProperties": False,
            "properties": {
                "k": {"type": "integer", "minimum": 0, "maximum": 16},
                "diverse": {"type": "boolean"},
                "hints": {"type": "boolean"},  # show the pool's labelled values found in the text
            },
        },
        "chunking": {  # true, or the sizes (object keywords apply to objects only: specific errors)
            "type": ["boolean", "object"],
            "additionalProperties": False,
            "properties": {
                "max_chars": {"type": "integer", "minimum": 100},
                "overlap": {"type": "integer", "minimum": 0},
                "by_field": {"type": "boolean"},  # each field from its own best passages (extractor.passages)
            },
        },
        "review": {  # send results less confident than `below` to the review queue
            "type": "object",
            "additionalProperties": False,
            "required": ["below"],
            "properties": {"below": {"type": "number", "minimum": 0, "maximum": 1}},
        },
        "examples": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["text", "output"],
                "additionalProperties": False,
                "properties": {"text": {"type": "string", "minLength": 1}, "output": {}},
            },
        },
    },
}
_SETTINGS_VALIDATOR = Draft202012Validator(_SETTINGS_SCHEMA)


@dataclass(frozen=True)
class ChunkSettings:
    """Long-document splitting (``x-extractor.chunking``); None sizes are derived from the model window."""

    max_chars: int | None = None
    overlap: int | None = None
    # Read each top-level field from the passages most about it, instead of merging whole answers.
    by_field: bool = False


@dataclass(frozen=True)
class ReviewSettings:
    """``x-extractor.review``: a result whose lowest value confidence is under ``below`` goes to the review queue."""

    below: float


@dataclass(frozen=True)
class TaskSettings:
    """Per-task settings from the schema's ``x-extractor`` block (None: use the global default)."""

    temperature: float | None = None
    max_tokens: int | None = None
    max_attempts: int | None = None
    grounding: Literal["strict", "flag", "off"] = "flag"
    system: str | None = None
    # A keyword the grammar cannot enforce is left out of decoding and checked after generation (a
    # load warning), unless ``strict_enforcement`` refuses the task for it; ``allow_unenforced``
    # (the older name) says the same the other way round when set.
    allow_unenforced: bool | None = None
    strict_enforcement: bool = False
    grounded_decoding: bool = False
    chunking: ChunkSettings | None = None
    # How examples are drawn from the task's pool (None: the fixed examples only).
    examples_from_pool: PoolSettings | None = field(default_factory=PoolSettings)
    adapter: str | bool = True
    adapter_examples: bool = False
    # Results sent to the review queue by their confidence (None: only those a request asks for).
    review: ReviewSettings | None = None
    # Ask vLLM for each token's logprob, what confidences are made of (None: the global setting). False
    # saves what vLLM charges for them (on an H200 `extractor batch` 0.84 -> 1.09 of raw vLLM).
    confidences: bool | None = None
    # Typed values' evidence (extractor.values): the languages it is in (empty: detected), day/month order.
    languages: tuple[str, ...] = ()
    date_order: Literal["DMY", "MDY", "YMD"] | None = None
    # tesseract's languages for the OCR'd pages of this task's documents (None: EXTRACTOR_OCR_LANGUAGES)
    ocr_languages: str | None = None
    # A packaged model serving this task on an engine of its own (None: the service's model).
    model: str | None = None

    @property
    def unenforced_allowed(self) -> bool:
        """Whether keywords decoding cannot enforce are checked after generation (else the task is refused)."""
        return self.allow_unenforced if self.allow_unenforced is not None else not self.strict_enforcement


def read_settings(
    where: str, schema: Mapping[str, Any], *, layers: tuple[Mapping[str, Any], str] | None = None
) -> tuple[TaskSettings, tuple[Example, ...]]:
    """A task's settings and fixed examples from its ``x-extractor`` block.

    ``layers``: a catalog task's block is read over the project's defaults and under its tuned
    settings (:mod:`extractor.catalog.tuned`; the tuned file's settings and its path); None: the
    schema's block alone (a task built in memory). :class:`TaskError` at the first bad setting.
    """
    raw = schema.get(SETTINGS_KEY, {})
    error = next(iter(sorted(_SETTINGS_VALIDATOR.iter_errors(raw), key=lambda e: list(e.path))), None)
    if error is not None:
        raise TaskError(where, join([SETTINGS_KEY, *error.path], "#"), error.message)
    if layers is not None:
        raw = tuned.layered(raw, layers[0])
        error = next(iter(_SETTINGS_VALIDATOR.iter_errors(raw)), None)
        if error is not None:  # the tuned file's values, once layered
            raise TaskError(layers[1], join([SETTINGS_KEY, *error.path], "#"), error.message)
        where = f"{where} (with {layers[1]})" if layers[0] else where
    examples = tuple(Example(text=e["text"], output=e["output"]) for e in raw.get("examples", []))
    values = {k: v for k, v in raw.items() if k not in ("examples", "chunking", "examples_from_pool", "review")}
    if "languages" in raw:
        values["languages"] = tuple(raw["languages"])
    if "review" in raw:
        values["review"] = ReviewSettings(below=float(raw["review"]["below"]))
    from_pool = raw.get("examples_from_pool", True)
    values["examples_from_pool"] = (
        PoolSettings(**from_pool) if isinstance(from_pool, dict) else (PoolSettings() if from_pool else None)
    )
    chunking = raw.get("chunking", False)
    if isinstance(chunking, dict):
        size, overlap = chunking.get("max_chars"), chunking.get("overlap")
        by_field = bool(chunking.get("by_field", False))
        if size is not None and overlap is not None and overlap * 2 > size:
            raise TaskError(where, f"#/{SETTINGS_KEY}/chunking/overlap", "overlap must be at most half of max_chars")
        values["chunking"] = ChunkSettings(max_chars=size, overlap=overlap, by_field=by_field)
    elif chunking:
        values["chunking"] = ChunkSettings()
    if raw.get("confidences") is False and "review" in raw:
        raise TaskError(
            where,
            f"#/{SETTINGS_KEY}/confidences",
            "review sends results by their confidence: keep confidences on, or drop the review block",
        )
    if raw.get("allow_unenforced") is not None and raw.get("strict_enforcement") is not None:
        raise TaskError(
            where, f"#/{SETTINGS_KEY}/strict_enforcement", "set strict_enforcement or allow_unenforced, not both"
        )
    model = values.get("model")
    if model is not None and model not in MODELS and not Path(model).is_dir():
        raise TaskError(
            where,
            f"#/{SETTINGS_KEY}/model",
            f"unknown model {model!r}: name a packaged model ({', '.join(sorted(MODELS))}) or a model directory",
        )
    settings = TaskSettings(**values)
    return settings, examples
