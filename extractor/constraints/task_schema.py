"""A task's schema as loaded: any draft, any top level, only what decoding really enforces.

One call from the catalog (:func:`prepare`) turns the schema as the analyst wrote it into

- its draft and a validator of that draft (:mod:`extractor.constraints.drafts`), which checks
  every output after generation;
- the schema the pipeline works from: translated to 2020-12, with an object top level
  (:mod:`extractor.constraints.wrapping`) and only keywords the grammar backend enforces
  (:mod:`extractor.constraints.enforcement`), ``x-*`` annotations kept;
- load warnings, or a :class:`TaskError` naming the keyword, the pointer in the analyst's file
  and the two ways out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from jsonschema.protocols import Validator

from extractor.config import GrammarBackend
from extractor.constraints import decoding, drafts, enforcement, wrapping
from extractor.errors import TaskError
from extractor.examples.pool import Example
from extractor.schema import node_at

SETTINGS_KEY = "x-extractor"
E = TypeVar("E", bound="Example")
_RENAMED = {"dependentRequired": "dependencies", "dependentSchemas": "dependencies", "prefixItems": "items"}


@dataclass(frozen=True)
class TaskSchema:
    """The schema as written, its draft, and the schema decoding and the pipeline work from."""

    source: Mapping[str, Any]
    draft: drafts.Draft
    schema: dict[str, Any]  # translated, shaped, and without what decoding cannot enforce
    validator: Validator
    wrapped: str | None  # the property the top level was wrapped in (None: an object top level)
    warnings: tuple[str, ...] = ()
    # Translated and shaped, every keyword kept (what typed results are built from).
    meaning: dict[str, Any] | None = None


def prepare(where: str, source: Mapping[str, Any], *, backend: GrammarBackend, allow_unenforced: bool) -> TaskSchema:
    """Check ``source`` with its own draft, translate and shape it; refuse what decoding would not enforce.

    Raises:
        TaskError: an invalid schema, a ref that leads outside it, or (without ``allow_unenforced``)
            a keyword the grammar backend cannot enforce.

    """
    try:
        draft = drafts.detect(source)
        translated = drafts.translate(source, draft)
    except drafts.DraftError as error:
        raise TaskError(where, error.pointer, error.reason) from None
    except RecursionError:
        raise TaskError(where, "#", "the schema nests too deeply to read") from None
    shaped = wrapping.shape(translated.schema)

    def origin(pointer: str) -> str:
        return _origin(pointer, source, shaped, translated.origins)

    warnings = []
    if not draft.declared and draft.name != "2020-12":
        warnings.append(f"{where}: no $schema, and not valid 2020-12: read as {draft.name}")
    if shaped.key is not None:
        warnings.append(
            f'{where}: the top level is not an object: decoded as {{"{shaped.key}": ...}}, '
            "returned unwrapped (data is what the schema describes)"
        )
    schema = shaped.schema
    if backend == "guidance":
        decodable = enforcement.check(schema)
        schema = decodable.schema
        for pointer, name in decodable.formats:
            warnings.append(
                f"{where}: {origin(pointer)}: llguidance does not know format {name!r}; "
                "not enforced while decoding (checked after generation where jsonschema knows it)"
            )
        for pointer, why in decodable.impossible:
            warnings.append(
                f"{where}: {origin(pointer)}: no value satisfies it ({why}); an answer can only leave it out "
                "(decoded as false where it is referenced)"
            )
        # One keyword as written may be reached twice in what decoding sees (a top-level $ref, wrapped).
        found = list(
            dict.fromkeys(
                (origin(u.pointer), _as_written(origin(u.pointer), u.keyword), u.reason) for u in decodable.unenforced
            )
        )
        if decodable.unsatisfiable is not None:
            raise TaskError(
                where,
                origin(decodable.unsatisfiable) if decodable.unsatisfiable != "#" else "#",
                f"no value satisfies this schema, so no answer could ever be accepted ({decodable.error})",
            )
        if decodable.error is not None:
            raise TaskError(
                where, "#", f"the grammar backend (llguidance) cannot compile this schema: {decodable.error}"
            )
    else:
        found = [(origin(p), p.rsplit("/", 1)[-1], r) for p, r in decoding.unenforced_keywords(schema, backend)]
    if found and not allow_unenforced:
        pointer, keyword, reason = found[0]
        others = f" (and {len(found) - 1} more: {', '.join(p for p, _, _ in found[1:4])})" if len(found) > 1 else ""
        raise TaskError(
            where,
            pointer,
            f"{backend} does not enforce {keyword!r} while decoding ({reason}){others}; remove it, or drop "
            f'"strict_enforcement" from "{SETTINGS_KEY}" to check it after generation only',
        )
    # uniqueItems holds without the grammar: an answer's repeated items are dropped (extractor.parsing.drop_repeats).
    warnings += [
        f"{where}: {p}: {backend} does not enforce {k!r} (checked after generation only)"
        for p, k, _ in found
        if k != "uniqueItems"
    ]
    return TaskSchema(
        source=source,
        draft=draft,
        schema=schema,
        validator=wrapping.validator(source, draft, shaped.key),
        wrapped=shaped.key,
        warnings=tuple(warnings),
        meaning=shaped.schema,
    )


def as_written(prepared: TaskSchema, ungrounded: frozenset[str]) -> tuple[Validator, frozenset[str]]:
    """The validator and ungrounded paths of values as the schema describes them (unwrapped).

    Worked examples and pool lines are written that way; they are wrapped for showing.
    """
    if prepared.wrapped is None:
        return prepared.validator, ungrounded
    paths = frozenset(wrapping.unwrap_pointer(p, prepared.wrapped) for p in ungrounded)
    return wrapping.validator(prepared.source, prepared.draft, None), paths


def wrap_examples(prepared: TaskSchema, examples: tuple[E, ...]) -> tuple[E, ...]:
    """Examples as decoded: each output under the wrapping key when the top level is wrapped."""
    if prepared.wrapped is None:
        return examples
    return tuple(dataclasses.replace(e, output={prepared.wrapped: e.output}) for e in examples)


def unenforced_keyword(message: str) -> str | None:
    """The keyword a refusal from :func:`prepare` names (None for another load error)."""
    if "does not enforce '" not in message:
        return None
    return message.split("does not enforce '", 1)[1].split("'", 1)[0]


def _as_written(pointer: str, keyword: str) -> str:
    # The keyword as the analyst's file spells it (``dependencies`` for a draft-07 ``dependentSchemas``).
    written = pointer.rsplit("/", 1)[-1]
    return written if _RENAMED.get(keyword) == written else keyword


def _origin(pointer: str, source: Mapping[str, Any], shaped: wrapping.Shaped, origins: Mapping[str, str]) -> str:
    """A pointer into the decoded schema as a pointer into the analyst's file."""
    translated = shaped.origin(pointer)
    node, _, keyword = translated.rpartition("/")
    if node in origins:
        written = origins[node]
        found = node_at(source, written)
        if isinstance(found, Mapping) and keyword not in found:
            keyword = _RENAMED.get(keyword, keyword)
        return f"{written}/{keyword}"
    return origins.get(translated, translated)
