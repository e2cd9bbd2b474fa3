"""The regex engine behind ``pattern``: RE2, linear in the length of the text, so no pattern backtracks.

jsonschema checks ``pattern``, ``patternProperties`` (and through it ``additionalProperties``)
and ``format: regex`` with Python's backtracking ``re``: ``^(a+)+$`` against forty ``a`` and a ``!``
takes minutes. :func:`linear_time` returns a validator class whose keywords run on RE2 instead
(google-re2), :func:`format_checker` a format checker whose ``regex`` format does. RE2 refuses
what cannot run in linear time (look-around, backreferences): :func:`problem` says why, and the
task loader turns that into a load error, as the grammar backends refuse those patterns too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, cast

import re2
from jsonschema import FormatChecker, ValidationError
from jsonschema.validators import extend

V = TypeVar("V")
MAX_PATTERN_CHARS = 1000
MAX_MEMORY_BYTES = 8 << 20  # RE2's budget for one compiled pattern


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_MEMORY_BYTES
    options.log_errors = False
    return options


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached); raises ``re2.error`` for one RE2 cannot run."""
    return re2.compile(pattern, _options())


def problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be checked in linear time, or None when it can."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"a pattern of {len(pattern)} characters (at most {MAX_PATTERN_CHARS})"
    try:
        compiled(pattern)
    except re2.error as error:
        reason = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        return (
            f"pattern {pattern[:80]!r} is not supported by the linear-time regex engine (RE2): {reason}; "
            "look-around and backreferences are not allowed"
        )
    return None


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's unanchored semantics)."""
    return compiled(pattern).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [key for key in instance if key not in properties and not any(search(pattern, key) for pattern in patterns)]


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    # jsonschema's own, with the patternProperties match on RE2
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        if "patternProperties" in schema:
            patterns = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            joined = ", ".join(repr(e) for e in sorted(extras))
            yield ValidationError(
                f"{joined} {'does' if len(extras) == 1 else 'do'} not match any of the regexes: {patterns}"
            )
        else:
            listed = ", ".join(repr(e) for e in sorted(extras, key=str))
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {'was' if len(extras) == 1 else 'were'} unexpected)"
            )


_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


def linear_time(validator_class: type[V]) -> type[V]:
    """``validator_class`` with ``pattern``, ``patternProperties`` and ``additionalProperties`` on RE2."""
    extended = extend(cast(Any, validator_class), _KEYWORDS)  # type: ignore[no-untyped-call]
    return cast(type[V], extended)


def format_checker(base: FormatChecker) -> FormatChecker:
    """A copy of ``base`` whose ``regex`` format is checked by RE2 (a string RE2 can compile)."""
    checker = FormatChecker(formats=())
    checker.checkers = dict(base.checkers)

    @checker.checks("regex", raises=re2.error)
    def is_regex(instance: object) -> bool:
        return not isinstance(instance, str) or compiled(instance) is not None

    return checker
