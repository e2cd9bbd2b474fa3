"""A task schema's load checks: limits, draft, meta-schema, refs, settings, keywords, typing, examples, compile.

Each check raises :class:`TaskError` naming the file and the JSON pointer, or adds a load warning
(a keyword decoding cannot enforce, a construct the typed model types loosely).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.protocols import Validator

from extractor import grounding, values
from extractor.catalog import limits
from extractor.catalog.settings import SETTINGS_KEY, TaskSettings, read_settings
from extractor.config import GrammarBackend
from extractor.constraints import decoding, grounded_decoding, loosening, task_schema
from extractor.errors import TaskError
from extractor.examples.pool import Example
from extractor.schema import join, resolve, types_of, walk
from extractor.typed import TypedModel, model_for_schema
from extractor.values import ValueField


@dataclass(frozen=True)
class Checked:
    """What the schema-level load checks produce."""

    settings: TaskSettings
    examples: tuple[Example, ...]  # as decoded (wrapped when the top level is not an object)
    warnings: tuple[str, ...]
    typed: TypedModel | None
    validator: Validator
    ungrounded: frozenset[str]
    engine_schema: dict[str, Any]
    answer_schema: dict[str, Any]
    prepared: task_schema.TaskSchema
    as_written: tuple[Validator, frozenset[str]]  # the validator and ungrounded paths of unwrapped values
    values: dict[str, ValueField]


def check_all(
    where: str,
    source: dict[str, Any],
    name: str,
    backend: GrammarBackend,
    *,
    layers: tuple[Mapping[str, Any], str] | None = None,
) -> Checked:
    """Every load check of a schema: limits, draft, meta-schema, refs, settings, keywords, typing, examples, compile."""
    bounded = limits.check_schema(where, source)
    settings, examples = read_settings(where, source, layers=layers)
    prepared = task_schema.prepare(where, source, backend=backend, allow_unenforced=settings.unenforced_allowed)
    schema = prepared.schema  # 2020-12, an object top level, only what decoding enforces
    _check_schema(where, schema)
    warnings = [*prepared.warnings, *bounded]
    warnings += [f"{where}: {w}" for w in grounded_decoding.check(schema)]
    typed, typed_warnings = _build_typed(where, prepared.meaning or schema, name)
    warnings += typed_warnings
    ungrounded = grounding.ungrounded_paths(schema)
    typed_values = values.value_fields(schema)
    warnings += [f"{where}: {w}" for w in values.check_settings(schema, typed_values)]
    # Examples are written as the schema describes them (unwrapped) and shown as decoded; their
    # typed values are checked by the schema, not looked for verbatim (the text states them in words).
    as_written = task_schema.as_written(prepared, ungrounded | frozenset(typed_values))
    _check_examples(where, examples, *as_written)
    examples = task_schema.wrap_examples(prepared, examples)
    # Value fields are decoded as their evidence: the model copies the words, the service types them.
    answer_schema = values.evidence_schema(schema) if typed_values else schema
    if typed_values and backend == "guidance":  # evidence may overlap where the values did not
        answer_schema = loosening.with_one_of_coerced(answer_schema)
    engine_schema = decoding.engine_schema(answer_schema)
    warnings += limits.check_compiles(
        where, engine_schema, backend=backend, allow_unenforced=settings.unenforced_allowed
    )
    return Checked(
        settings,
        examples,
        tuple(warnings),
        typed,
        prepared.validator,
        ungrounded,
        engine_schema,
        answer_schema,
        prepared,
        as_written,
        typed_values,
    )


def _check_schema(where: str, schema: dict[str, Any]) -> None:
    # ``schema`` is already checked by its own draft and translated (extractor.constraints.task_schema).
    for pointer, sub in walk(schema):
        for key in ("$ref", "$dynamicRef"):
            ref = sub.get(key)
            if ref is None:
                continue
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise TaskError(
                    where,
                    f"{pointer}/{key}",
                    f"{key} {ref!r} points outside this schema; only local refs ('#/$defs/...') are allowed",
                )
            if not isinstance(resolve(schema, ref), (Mapping, bool)):
                raise TaskError(where, f"{pointer}/{key}", f"{key} {ref!r} does not resolve to a schema in this file")
        if "$id" in sub and pointer != "#":
            raise TaskError(where, f"{pointer}/$id", "nested $id is not allowed (it changes how refs resolve)")
    _check_ref_cycles(where, schema)
    _check_finite(where, schema)


_FINITE_PASSES = 64  # a fixpoint deeper than this is taken as finite (not refused)


def _check_finite(where: str, schema: Mapping[str, Any]) -> None:
    """Refuse a schema no finite value satisfies: a required property that needs its own kind inside, without end.

    The grammar backend compiles such a schema (``Foo`` requires ``childFoos``, an ``allOf`` of
    ``Foo`` and more), and decoding would run to ``max_tokens`` every time. The finite subschemas
    are found as a least fixpoint: one is finite when its refs, all its ``allOf``, one of its
    ``anyOf``/``oneOf``, and the required properties (and the items of a non-empty array) of an
    object-only (array-only) type are.
    """
    nodes = list(walk(schema))
    finite: set[int] = set()

    def ok(node: Any) -> bool:
        return node is not False and (not isinstance(node, Mapping) or id(node) in finite)

    def has_finite(sub: Mapping[str, Any]) -> bool:
        ref = sub.get("$ref")
        if isinstance(ref, str) and not ok(resolve(schema, ref)):
            return False
        if not all(ok(b) for b in sub.get("allOf") or []):
            return False
        for key in ("anyOf", "oneOf"):
            if isinstance(sub.get(key), list) and not any(ok(b) for b in sub[key]):
                return False
        kinds = types_of(sub)
        properties = sub.get("properties") or {}
        if kinds == {"object"} and isinstance(properties, Mapping):
            required = sub.get("required") or []
            return all(ok(properties.get(name, True)) for name in required if isinstance(name, str))
        if kinds == {"array"} and isinstance(sub.get("minItems"), int) and sub["minItems"] > 0:
            return ok(sub.get("items", True))
        return True

    for _ in range(_FINITE_PASSES):
        grown = [sub for _, sub in nodes if id(sub) not in finite and has_finite(sub)]
        finite.update(id(sub) for sub in grown)
        if not grown:
            break
    else:
        return  # not settled: never refused on a guess
    if ok(schema):
        return
    pointer = next((p for p, sub in nodes if p.startswith("#/$defs/") and p.count("/") == 2 and not ok(sub)), "#")
    raise TaskError(
        where,
        pointer,
        "no finite value satisfies this schema: each required property or branch leads back to a value of the same "
        "kind inside it, without end, so no answer could ever be accepted",
    )


def _check_ref_cycles(where: str, schema: Mapping[str, Any]) -> None:
    """Reject refs that loop back without going into the instance (validation would recurse forever)."""
    pointers = {id(sub): pointer for pointer, sub in walk(schema)}
    done: set[int] = set()

    def in_place(sub: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
        # Subschemas applied to the same instance as ``sub``, each with its keyword.
        for key in ("not", "if", "then", "else"):
            yield key, sub.get(key)
        for key in ("allOf", "anyOf", "oneOf"):
            for branch in sub.get(key) or []:
                yield key, branch
        for branch in (sub.get("dependentSchemas") or {}).values():
            yield "dependentSchemas", branch
        for key in ("$ref", "$dynamicRef"):
            if isinstance(sub.get(key), str):
                yield key, resolve(schema, sub[key])

    def visit(sub: Mapping[str, Any], stack: list[int]) -> None:
        if id(sub) in done:
            return
        stack.append(id(sub))
        for key, child in in_place(sub):
            if not isinstance(child, Mapping):
                continue
            if id(child) in stack:
                raise TaskError(
                    where,
                    f"{pointers.get(id(sub), '#')}/{key}",
                    f"{key} loops back to {pointers.get(id(child), '#')} without going into a property or item; "
                    "validation would never end",
                )
            visit(child, stack)
        stack.pop()
        done.add(id(sub))

    for _, sub in walk(schema):
        visit(sub, [])


def _build_typed(where: str, schema: Mapping[str, Any], name: str) -> tuple[TypedModel | None, list[str]]:
    """The pydantic model behind ``result.value``; constructs it types loosely become load warnings."""
    try:
        typed = model_for_schema(schema, name=name)
    except Exception as error:  # noqa: BLE001 - a typing gap must never cost the task itself
        return None, [f"{where}: cannot build the typed model ({error}); result.value will be None"]
    return typed, [f"{where}: {w} (in result.value)" for w in typed.warnings]


def _check_examples(where: str, examples: Sequence[Example], validator: Validator, ungrounded: frozenset[str]) -> None:
    for i, example in enumerate(examples):
        base = f"#/{SETTINGS_KEY}/examples/{i}/output"
        error = jsonschema.exceptions.best_match(validator.iter_errors(example.output))
        if error is not None:
            raise TaskError(where, base + join(error.path), f"example does not match the schema: {error.message}")
        for span in grounding.locate(example.text, example.output, skip=ungrounded):
            if span.status == "missing":
                raise TaskError(where, base + span.path, f"example value {span.value!r} does not occur in its text")
