"""Load-time limits on task files: what a catalog may hold, checked before anything else reads it.

A task file is input like any other: it may point outside the catalog, be huge, nest without
end, carry a $ref chain that recursion cannot follow, an enum that no grammar compiles, a
length bound no regex engine takes, or a pattern that backtracks. Each is a load error
(:class:`TaskError` naming the file and the JSON pointer) against a stated limit, so one bad
task never costs the catalog, the process or a request. README "Limits and guarantees" lists them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from extractor.constraints import patterns
from extractor.constraints.decoding import MAX_DECODED_LENGTH, past_decoded_length
from extractor.errors import TaskError
from extractor.schema import join, resolve, unescape

MAX_FILE_BYTES = 1_000_000  # a schema (or a prompt template) file
MAX_DEPTH = 64  # JSON nesting of a schema file
MAX_NODES = 50_000  # objects and arrays in one schema
MAX_ENUM = 10_000  # values of one enum (JSON Schema Store's largest real ones: 5,383; compiled within MAX_COMPILE_S)
MAX_STRING_LENGTH = MAX_DECODED_LENGTH  # minLength; a larger maxLength is decoded as this (no answer is longer)
MAX_COUNT = 10_000  # maxItems, minItems, maxProperties, minProperties, maxContains, minContains
MAX_REF_CHAIN = 32  # a $ref to a $ref to ...
MAX_EXPANDED = 20_000  # subschemas applied to one value of an answer, $refs followed (refs can multiply them)
MAX_COMPILE_S = 5.0  # compiling the decoding grammar of one task at load

_LENGTHS = ("minLength",)
_COUNTS = ("maxItems", "minItems", "maxProperties", "minProperties", "maxContains", "minContains")
_DATA = ("enum", "const", "default", "examples", "x-extractor")  # values, not subschemas
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def check_inside(path: Path, root: Path) -> Path:
    """``path`` with symlinks resolved, which must lie under ``root``: a link out of the catalog is not followed."""
    try:
        resolved, base = path.resolve(strict=True), root.resolve(strict=True)
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop
        raise TaskError(str(path), "", f"cannot resolve the path: {error}") from None
    if not resolved.is_relative_to(base):
        raise TaskError(str(path), "", f"a symlink pointing outside the catalog root ({base}); not followed")
    return resolved


def check_file(path: Path, root: Path) -> None:
    """``path`` lies under ``root`` (:func:`check_inside`), has at most ``MAX_FILE_BYTES``, nests ``MAX_DEPTH`` deep."""
    where = str(path)
    resolved = check_inside(path, root)
    try:
        size = resolved.stat().st_size
        if size > MAX_FILE_BYTES:
            raise TaskError(where, "", f"the file is {size} bytes, over the limit of {MAX_FILE_BYTES}")
        if path.suffix == ".json":
            _check_nesting(where, resolved.read_bytes().decode("utf-8", errors="replace"))
    except OSError as error:
        raise TaskError(where, "", f"cannot read the file: {error}") from None


def _check_nesting(where: str, text: str) -> None:
    # Before json.loads, whose recursion a deep enough document exhausts.
    depth = 0
    for token in _TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, token.start()) + 1
                raise TaskError(where, "", f"the JSON nests deeper than {MAX_DEPTH} levels (line {line})")
        elif char in "]}":
            depth -= 1


def check_schema(where: str, schema: Any) -> list[str]:
    """Every limit of this module on a parsed schema; raise :class:`TaskError` at the first one past its limit.

    Returns load warnings: the patterns RE2 cannot run, checked after generation by a bounded engine.
    """
    warnings: list[str] = []
    nodes = 0
    stack: list[tuple[Any, list[str]]] = [(schema, [])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            nodes += 1
            stack.extend(reversed([(item, [*path, str(i)]) for i, item in enumerate(node)]))
        if not isinstance(node, Mapping):
            continue
        nodes += 1
        if nodes > MAX_NODES:
            raise TaskError(where, "", f"the schema has more than {MAX_NODES} objects and arrays")
        warnings += _check_keywords(where, schema, node, path)
        stack.extend(reversed([(value, [*path, key]) for key, value in node.items() if key not in _DATA]))
    _check_expansion(where, schema)
    return warnings


def _check_keywords(where: str, schema: Any, node: Mapping[str, Any], path: list[str]) -> list[str]:
    enum = node.get("enum")
    if isinstance(enum, list) and len(enum) > MAX_ENUM:
        raise TaskError(where, join([*path, "enum"], "#"), f"an enum of {len(enum)} values (at most {MAX_ENUM})")
    bounds: tuple[tuple[tuple[str, ...], int], ...] = ((_LENGTHS, MAX_STRING_LENGTH), (_COUNTS, MAX_COUNT))
    for keys, limit in bounds:
        for key in keys:
            value = node.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > limit:
                raise TaskError(where, join([*path, key], "#"), f"{key} {value} is over the limit of {limit}")
    warnings = []
    longest = past_decoded_length(node)
    if longest is not None:
        warnings.append(
            f"{where}: {join([*path, 'maxLength'], '#')}: maxLength {longest} is decoded as {MAX_DECODED_LENGTH} "
            "(no answer is longer); the schema's own bound holds all the same"
        )
    pattern = node.get("pattern")
    found: list[tuple[list[str], str]] = [(["pattern"], pattern)] if isinstance(pattern, str) else []
    if isinstance(node.get("patternProperties"), Mapping):
        found += [(["patternProperties", key], key) for key in node["patternProperties"]]
    for where_in, text in found:
        if not _is_regex(text):
            continue  # not a regex at all: the meta-schema check says so, better
        pointer = join([*path, *where_in], "#")
        reason = patterns.problem(text)
        if reason is not None:
            raise TaskError(where, pointer, reason)
        needs = patterns.backtracking(text)
        if needs is not None:
            warnings.append(
                f"{where}: {pointer}: the linear-time regex engine (RE2) cannot run this pattern ({needs}): "
                f"checked after generation only, by a backtracking engine bounded to {patterns.MATCH_TIMEOUT_S} s "
                "a value (a value it cannot check in time is re-asked)"
            )
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        _check_chain(where, schema, ref, path)
    return warnings


def _is_regex(text: str) -> bool:
    try:
        re.compile(text)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _check_chain(where: str, schema: Any, ref: str, path: list[str]) -> None:
    seen = [ref]
    target = resolve(schema, ref)
    while isinstance(target, Mapping) and isinstance(target.get("$ref"), str):
        ref = target["$ref"]
        if not ref.startswith("#"):
            return  # a remote ref: the task loader refuses it, naming it
        if ref in seen:
            loop = " -> ".join([*seen, ref])
            raise TaskError(where, join([*path, "$ref"], "#"), f"a $ref cycle ({loop}): it never reaches a schema")
        seen.append(ref)
        if len(seen) > MAX_REF_CHAIN:
            raise TaskError(
                where, join([*path, "$ref"], "#"), f"a chain of more than {MAX_REF_CHAIN} $refs, each to another $ref"
            )
        target = resolve(schema, ref)
    if target is None or not isinstance(target, Mapping | bool):
        raise TaskError(where, join([*path, "$ref"], "#"), f"$ref {ref!r} does not resolve to a schema in this file")


# Where a subschema applies: to the same value (in place), or to a value below it (an item, a property).
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MAPS = ("dependentSchemas", "dependencies")
_BELOW_MAPS = ("properties", "patternProperties")
_BELOW_ONE = (
    "additionalProperties",
    "additionalItems",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_BELOW_LISTS = ("prefixItems", "items")  # ``items`` as a list in drafts before 2020-12; as one schema, below too


def _check_expansion(where: str, schema: Any) -> None:
    """Bound what validating one answer walks: the subschemas that apply to one of its values, $refs followed.

    Shared definitions can multiply (a "billion laughs"): ``anyOf`` of two refs to ``anyOf`` of two
    refs ... applies 2**40 subschemas to one value. What is counted is what a validator visits, not
    the schema with every $ref written out: a definition shared by many properties (an API schema's
    ``author`` under every ``credits``) applies once per value of the answer, and the answer is
    bounded by its tokens; the grammar compiles each definition once. Counted per value: the
    subschemas applied in place (``allOf``, ``anyOf``, ``$ref``, ...), and, along any path down the
    answer, the subschemas applied to one value below (each branch of an ``anyOf`` takes the
    properties below with it). Recursion (a $ref back to a schema it is inside of) is counted once:
    validating it consumes the instance. A $ref chain that loops without doing so is
    :func:`_check_chain`'s (and the task loader's, through ``allOf`` and the like).
    """
    memo: dict[int, tuple[int, int]] = {}
    active: list[str] = []

    def applied(node: Any, path: list[str], depth: int) -> tuple[int, int]:
        # (subschemas applied in place to a value, subschemas applied to one value below it, at most)
        if not isinstance(node, Mapping):
            return 0, 0
        if depth > 2 * MAX_DEPTH:
            raise TaskError(
                where, join(path, "#"), f"the schema nests deeper than {2 * MAX_DEPTH} levels once $refs are followed"
            )
        if id(node) in memo:
            return memo[id(node)]
        here, below = 1, 0
        in_place: list[tuple[Any, list[str]]] = []
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and ref not in active:
            in_place.append((resolve(schema, ref), [unescape(t) for t in unquote(ref[1:]).split("/")[1:]]))
        in_place += [(node.get(k), [*path, k]) for k in _IN_PLACE_ONE]
        in_place += [(b, [*path, k, str(i)]) for k in _IN_PLACE_LISTS for i, b in enumerate(_listed(node.get(k)))]
        in_place += [(b, [*path, k, n]) for k in _IN_PLACE_MAPS for n, b in _mapped(node.get(k))]
        children = [(node.get(k), [*path, k]) for k in _BELOW_ONE]
        children += [(b, [*path, k, n]) for k in _BELOW_MAPS for n, b in _mapped(node.get(k))]
        items = node.get("items")
        children += [(items, [*path, "items"])] if isinstance(items, Mapping) else []
        children += [(b, [*path, k, str(i)]) for k in _BELOW_LISTS for i, b in enumerate(_listed(node.get(k)))]
        if isinstance(ref, str):
            active.append(ref)
        try:
            for child, child_path in in_place:
                count, deeper = applied(child, child_path, depth + 1)
                here, below = here + count, below + deeper
            below += max((max(applied(c, p, depth + 1)) for c, p in children), default=0)
        finally:
            if isinstance(ref, str):
                active.pop()
        if max(here, below) > MAX_EXPANDED:
            raise TaskError(
                where,
                join(path, "#"),
                f"more than {MAX_EXPANDED} subschemas apply to one value of an answer once the schema's $refs are "
                "followed: validating an answer would not end in time",
            )
        memo[id(node)] = here, below
        return here, below

    applied(schema, [], 0)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _mapped(value: Any) -> list[tuple[str, Any]]:
    return [(str(k), v) for k, v in value.items()] if isinstance(value, Mapping) else []


def check_compiles(where: str, engine_schema: Mapping[str, Any], *, backend: str, allow_unenforced: bool) -> list[str]:
    """The decoding grammar compiles at load, within llguidance's own bounds (guidance backend, where installed).

    vLLM compiles the same schema with the same library on every request; a schema it cannot
    compile would fail every request, so it fails the load instead. Keywords llguidance does not
    implement are a warning when the task allows unenforced keywords (its author opted in).
    """
    if backend != "guidance":
        return []
    try:
        import llguidance
    except ImportError:  # the remote engine without vLLM here: the servers compile it
        return []
    started = time.perf_counter()
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(engine_schema), defaults={"whitespace_flexible": False}
        )
        error = llguidance.LLMatcher.validate_grammar(grammar)
    except (ValueError, TypeError, KeyError) as failure:
        error = str(failure)
    elapsed = time.perf_counter() - started
    if elapsed > MAX_COMPILE_S:
        raise TaskError(where, "", f"the decoding grammar took {elapsed:.1f} s to compile (at most {MAX_COMPILE_S} s)")
    if not error:
        return []
    reason = " ".join(line.strip() for line in error.splitlines() if line.strip())[:300]
    if allow_unenforced and reason.startswith("Unimplemented keys"):
        return [f"{where}: vLLM's guidance backend refuses this schema as it is ({reason})"]
    raise TaskError(where, "", f"the decoding grammar does not compile (llguidance): {reason}")
