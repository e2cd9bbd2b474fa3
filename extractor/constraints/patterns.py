"""The regex engine behind ``pattern``: RE2, linear in the length of the text, so no pattern backtracks.

jsonschema checks ``pattern``, ``patternProperties`` (and through it ``additionalProperties``)
and ``format: regex`` with Python's backtracking ``re``: ``^(a+)+$`` against forty ``a`` and a ``!``
takes minutes. :func:`linear_time` returns a validator class whose keywords run on RE2 instead
(google-re2), :func:`format_checker` a format checker whose ``regex`` format does.

RE2 refuses what cannot run in linear time (look-around, backreferences). Such a pattern is still a
real constraint an analyst wrote (``^(?!admin$)``, a password with ``(?=.*[0-9])``): the grammar
backends cannot hold decoding to it either, so it is checked after generation only, by a
backtracking engine (the ``regex`` package) bounded in time: a value it cannot check within
:data:`MATCH_TIMEOUT_S` fails the check (and is re-asked) instead of holding the worker.
:func:`problem` says why a pattern cannot be checked at all, :func:`backtracking` which ones take
the bounded engine.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, cast

import re2
import regex
from jsonschema import FormatChecker, ValidationError
from jsonschema.validators import extend

V = TypeVar("V")
# A sanity cap on the text of one pattern; what bounds the cost is RE2's memory budget (linear time),
# or, for a pattern RE2 cannot run, the time bound of each match.
MAX_PATTERN_CHARS = 20_000
MAX_MEMORY_BYTES = 8 << 20  # RE2's budget for one compiled pattern
MATCH_TIMEOUT_S = 0.1  # one match of a pattern RE2 cannot run (look-around, backreferences)


class PatternTimeoutError(ValueError):
    """A pattern RE2 cannot run took longer than :data:`MATCH_TIMEOUT_S` on one value."""


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_MEMORY_BYTES
    options.log_errors = False
    return options


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached); raises ``re2.error`` for one RE2 cannot run."""
    return re2.compile(pattern, _options())


@functools.lru_cache(maxsize=256)
def _bounded(pattern: str) -> Any:
    """``pattern`` compiled by the backtracking ``regex`` engine (cached), for the few RE2 refuses."""
    return regex.compile(pattern)


def backtracking(pattern: str) -> str | None:
    """What RE2 cannot run in ``pattern`` (its error) when the bounded engine must check it; None when RE2 can."""
    try:
        compiled(pattern)
    except re2.error as error:
        return error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
    return None


def problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be checked at all, or None when it can (in linear time, or bounded in time)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"a pattern of {len(pattern)} characters (at most {MAX_PATTERN_CHARS})"
    reason = backtracking(pattern)
    if reason is None:
        return None
    try:
        _bounded(pattern)
    except (regex.error, RecursionError, OverflowError) as error:
        return f"pattern {pattern[:80]!r} compiles neither in RE2 ({reason}) nor in the regex package ({error})"
    return None


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's unanchored semantics).

    Raises:
        PatternTimeoutError: a pattern RE2 cannot run took over :data:`MATCH_TIMEOUT_S` on ``text``.

    """
    try:
        return compiled(pattern).search(text) is not None
    except re2.error:
        pass
    try:
        return _bounded(pattern).search(text, timeout=MATCH_TIMEOUT_S) is not None
    except TimeoutError:
        raise PatternTimeoutError(
            f"{pattern!r} took over {MATCH_TIMEOUT_S} s on a value of {len(text)} characters"
        ) from None


def _timed_out(error: PatternTimeoutError) -> ValidationError:
    return ValidationError(f"cannot be checked in time: {error}; a value that can be checked is needed")


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        found = search(pattern, instance)
    except PatternTimeoutError as error:
        yield _timed_out(error)
        return
    if not found:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            try:
                found = search(pattern, key)
            except PatternTimeoutError as error:
                yield _timed_out(error)
                continue
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _matches_any(patterns: list[str], key: str) -> bool:
    # A key a pattern cannot be checked against in time counts as matched: _pattern_properties reports it.
    for pattern in patterns:
        try:
            if search(pattern, key):
                return True
        except PatternTimeoutError:
            return True
    return False


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [key for key in instance if key not in properties and not _matches_any(patterns, key)]


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
