"""Evidence -> typed value, field by field: what the pipeline calls after parsing an answer.

Each value field's evidence (the words the model copied) is read by the normalizer of its kind;
the answer's data then holds the typed value, and the evidence keeps its place for the span. A
value that cannot be read becomes a problem line, fed back to the model as a re-ask; the pipeline
nulls it after the last attempt, with a note naming the evidence and why: never a made-up value.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from extractor.grounding import field_path
from extractor.schema import escape
from extractor.values import dates, durations, numbers, readings
from extractor.values.context import DATE_ORDERS, PERCENT_MODES, Context, EvidenceError
from extractor.values.fields import KIND_READINGS, ValueField


@dataclass(frozen=True)
class Typed:
    """One field's typed value beside the evidence it was read from."""

    value: Any
    evidence: str
    unit: str | None = None  # a number's currency (ISO 4217) or unit
    # A field of readings: the one that fit (``amount``, ``date``, ...); None: the value is the words.
    reading: str | None = None


@dataclass
class Applied:
    """An answer with its value fields typed: the data, each typed value by pointer, the problems."""

    data: Any
    typed: dict[str, Typed] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)  # pointer -> why its evidence was not read
    notes: list[str] = field(default_factory=list)


def field_context(value_field: ValueField, base: Context) -> Context:
    """``base`` (the task's and the request's settings) with the field's own ``x-extractor`` settings."""
    s = value_field.settings
    languages = s.get("languages")
    order = s.get("date_order")
    percent = s.get("percent")
    currency = s.get("currency")
    return replace(
        base,
        languages=tuple(languages) if isinstance(languages, list) else base.languages,
        date_order=order if order in DATE_ORDERS else base.date_order,
        unit=str(s["unit"]) if isinstance(s.get("unit"), str) else None,
        currency=str(currency) if isinstance(currency, str) and currency != "required" else None,
        currency_required=currency is not None,
        percent=percent if percent in PERCENT_MODES else base.percent,
        notes=base.notes,
    )


def normalize(value_field: ValueField, evidence: str, ctx: Context) -> Typed:
    """The typed value ``evidence`` states for ``value_field``.

    Raises:
        EvidenceError: the evidence does not state a value of the field's kind (the message says why).

    """
    local = field_context(value_field, ctx)
    kind = value_field.kind
    if kind == KIND_READINGS:  # the first reading that fits, else the words: never an error
        found = readings.read(evidence, value_field.readings, local)
        if found is None:
            return Typed(evidence, evidence)
        return Typed(found.value, evidence, unit=found.unit, reading=found.name)
    if kind in ("date", "date-time", "time"):
        return Typed(dates.parse(evidence, kind, local), evidence)
    if kind == "duration":
        return Typed(durations.parse(evidence), evidence)
    number = numbers.parse(evidence, local)
    if kind == "integer" and number.value != number.value.to_integral_value():
        raise EvidenceError(f"{evidence!r} is {number.value}, not a whole number")
    return Typed(numbers.as_json(number.value), evidence, unit=number.currency or number.unit)


def apply(data: Any, fields: Mapping[str, ValueField], ctx: Context) -> Applied:
    """``data`` (an answer in the evidence schema) with each value field's evidence typed.

    A field whose evidence cannot be read keeps its evidence in ``data`` (the schema then says it is
    not a date or a number) and gets a problem line. A field of readings none of which fits keeps
    its words, with no typed value and no problem; one that has a ``unit_key`` gets its currency or
    unit written to that sibling.
    """
    out = copy.deepcopy(data)
    applied = Applied(out, notes=ctx.notes)
    if not fields:
        return applied
    for pointer, parent, key, evidence in _leaves(out, ""):
        found = fields.get(field_path(pointer))
        if found is None or not isinstance(evidence, str):
            continue
        try:
            typed = normalize(found, evidence, ctx)
        except EvidenceError as error:
            applied.problems[pointer] = f"{pointer}: {evidence!r} cannot be read as a {_what(found)}: {error}"
            continue
        if found.kind == KIND_READINGS and typed.reading is None:
            continue  # the words stay: a place or a brand is not a value to type
        parent[key] = typed.value
        applied.typed[pointer] = typed
        if found.unit_key is not None and typed.unit is not None and isinstance(parent, dict):
            parent[found.unit_key] = typed.unit
    return applied


def _what(value_field: ValueField) -> str:
    return {"date-time": "date and time", "number": "number", "integer": "whole number"}.get(
        value_field.kind, value_field.kind
    )


def _leaves(node: Any, pointer: str) -> list[tuple[str, Any, Any, Any]]:
    """``(pointer, parent, key, value)`` of every scalar under ``node`` (parents are mutable)."""
    found: list[tuple[str, Any, Any, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            child = f"{pointer}/{escape(str(key))}"
            if isinstance(value, dict | list):
                found += _leaves(value, child)
            elif value is not None:
                found.append((child, node, key, value))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, dict | list):
                found += _leaves(value, f"{pointer}/{index}")
            elif value is not None:
                found.append((f"{pointer}/{index}", node, index, value))
    return found
