"""The task: a loaded, checked schema + prompt template + settings + worked examples, and its fields.

What a request is served from. It knows what the analyst wrote and what the loader derived from
it (the decoded schemas, the validator, the typed model, the pool); an adapter and a calibration
are attached to it by the loader (:mod:`extractor.catalog.loading`), which reads them from the
catalog's folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
from jsonschema.protocols import Validator

from extractor.catalog import templating
from extractor.catalog.calibration import Calibration
from extractor.catalog.settings import TaskSettings
from extractor.engines.base import Message
from extractor.examples.pool import Example, ExamplePool
from extractor.schema import resolve, walk
from extractor.typed import TypedModel
from extractor.values import ValueField


@dataclass(frozen=True)
class FieldInfo:
    """One top-level field as the prompt describes it."""

    name: str
    description: str
    type: str
    required: bool


@dataclass(frozen=True, eq=False)
class Task:
    """A loaded, checked task: schema + prompt template + settings + worked examples."""

    name: str
    schema: Mapping[str, Any]
    schema_path: Path
    prompt_path: Path
    template: jinja2.Template
    settings: TaskSettings
    examples: tuple[Example, ...]
    fields: tuple[FieldInfo, ...]
    validator: Validator
    ungrounded: frozenset[str]
    warnings: tuple[str, ...] = ()
    engine_schema: Mapping[str, Any] = field(default_factory=dict)
    typed: TypedModel | None = None
    # Labelled texts to draw worked examples from per request (``examples/<task>.jsonl``).
    pool: ExamplePool | None = None
    # The template renders only the instruction (it does not use ``text``): the instruction goes
    # in the system turn, identical for every request, and examples are compact demonstrations.
    instruction_only: bool = False
    # A LoRA adapter trained for this task (``extractor train``): its requests go through it.
    adapter: Path | None = None
    # The adapter learned the task read by field (one field over a passage): it serves only those
    # requests (extractor.passages.field_task), and the whole-answer requests go to the base model.
    adapter_by_field: bool = False
    # A request's own chat (the OpenAI front's ad-hoc tasks): sent as given instead of the
    # template's rendering; a re-ask appends the previous answer and its problems.
    conversation: tuple[Message, ...] = ()
    # The schema as written (``schema`` is it in 2020-12 terms, as decoded), its draft, and the
    # property a non-object top level is wrapped in for decoding (None: not wrapped).
    source_schema: Mapping[str, Any] = field(default_factory=dict)
    draft: str = "2020-12"
    wrapped: str | None = None
    # A hash of the files the task was built from (set by ``extractor.catalog.reload``; empty otherwise).
    version: str = ""
    # The map from raw to calibrated confidence (``calibration/<task>.json``, ``extractor calibrate``).
    calibration: Calibration | None = None
    # Typed value fields by field path (extractor.values): the model answers their evidence, the
    # service reads the typed value from it; ``engine_schema`` is then the evidence schema.
    values: Mapping[str, ValueField] = field(default_factory=dict)
    # The schema the model answers in: ``schema`` with each typed value field as its evidence, a
    # string (``schema`` itself without value fields); ``engine_schema`` is it without ``x-*`` keys.
    answer_schema: Mapping[str, Any] = field(default_factory=dict)
    # Per top-level field, the reading options learned from a pool of labelled documents
    # (extractor.examples.reading): under the field's own ``x-extractor``, which wins.
    reading: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def reads_by_field(self) -> bool:
        """Whether a long document is read field by field (``chunking.by_field``; a pool from documents turns it on)."""
        return self.settings.chunking is not None and self.settings.chunking.by_field

    @cached_property
    def drops_repeats(self) -> bool:
        """Whether the schema holds an array to ``uniqueItems``: an answer's repeated items there are dropped."""
        # ``schema`` is as decoded, which leaves uniqueItems out (no grammar backend enforces it)
        return any(node.get("uniqueItems") is True for _, node in walk(self.source_schema or self.schema))

    @property
    def uses_pool(self) -> bool:
        """Whether requests draw their worked examples from the pool."""
        settings = self.settings.examples_from_pool
        return self.pool is not None and len(self.pool) > 0 and settings is not None

    @property
    def examples_per_request(self) -> int:
        """How many worked examples each request shows (at most: a small pool may have fewer)."""
        settings = self.settings.examples_from_pool
        return settings.k if self.uses_pool and settings is not None else len(self.examples)

    @property
    def title(self) -> str:
        return str(self.schema.get("title") or self.name)

    @property
    def description(self) -> str:
        return str(self.schema.get("description") or "")

    def instruction(self, text: str, *, feedback: Sequence[str] = (), previous: str | None = None) -> str:
        """The task template rendered for one text (the instruction of :func:`extractor.catalog.prompting.render`)."""
        return self.template.render(
            text=text,
            fields=self.fields,
            task={"name": self.name, "title": self.title, "description": self.description},
            schema=templating.compact_json(self.engine_schema),
            feedback=list(feedback),
            previous=previous,
        ).strip()

    def fingerprint(self) -> str:
        """SHA-256 of what shapes the task's prompt and answer: prompt file, schema, system prompt.

        What an adapter's manifest records (:mod:`extractor.adapters.manifest`). The schema's
        ``x-extractor`` block is left out but for ``system`` and the pool's ``hints``: how many
        attempts, grounding or whether the adapter also sees examples do not change what the
        adapter learned.
        """
        h = hashlib.sha256(self.prompt_path.read_bytes())
        schema = {k: v for k, v in self.schema.items() if k != "x-extractor"}
        h.update(json.dumps(schema, sort_keys=True, ensure_ascii=False).encode())
        h.update((self.settings.system or "").encode())
        pool = self.settings.examples_from_pool
        if pool is not None and pool.hints and self.uses_pool:  # the adapter learned to read the pool's hints
            h.update(b"\0hints")
        return h.hexdigest()


def describe_fields(schema: Mapping[str, Any]) -> tuple[FieldInfo, ...]:
    """The top-level fields with a short type label each, for the prompt."""
    required = set(schema.get("required") or [])
    return tuple(
        FieldInfo(
            name=name,
            description=str(sub.get("description") or sub.get("title") or ""),
            type=type_label(schema, sub),
            required=name in required,
        )
        for name, sub in (schema.get("properties") or {}).items()
        if isinstance(sub, Mapping)
    )


def type_label(root: Mapping[str, Any], sub: Mapping[str, Any], depth: int = 0) -> str:
    """A human label such as ``string or null`` or ``one of "eq", "lt"``."""
    if depth > 8:
        return "value"
    if isinstance(sub.get("$ref"), str):
        target = resolve(root, sub["$ref"])
        return type_label(root, target, depth + 1) if isinstance(target, Mapping) else "value"
    if "const" in sub:
        return f"exactly {json.dumps(sub['const'], ensure_ascii=False)}"
    if "enum" in sub:
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in sub["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(sub.get(key), list):
            return " or ".join(type_label(root, b, depth + 1) for b in sub[key] if isinstance(b, Mapping))
    kind = sub.get("type", "value")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if kind == "array":
        items = sub.get("items")
        label = "list of " + (type_label(root, items, depth + 1) if isinstance(items, Mapping) else "values")
        return label + (f" (at most {sub['maxItems']})" if "maxItems" in sub else "")
    return str(kind)
