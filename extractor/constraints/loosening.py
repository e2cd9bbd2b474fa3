"""What decoding is loosened to where llguidance refuses a whole schema that no one subschema shows.

:func:`extractor.constraints.enforcement.check` first leaves out, subschema by subschema, the
keywords llguidance does not implement. Four refusals appear only on the whole schema; each is met
here by a schema llguidance compiles, and the answer is held to the task's whole schema after
generation by jsonschema (a broken rule is re-asked like any validation error):

- ``oneOf`` branches llguidance cannot prove disjoint ("Enable 'coerce_one_of'"): every ``oneOf``
  decoded as ``anyOf`` by llguidance's own option (``"x-guidance": {"coerce_one_of": true}`` at the
  root); exactly one branch is checked after. Branches it can prove disjoint lose nothing (their
  ``anyOf`` is their ``oneOf``), so only the others are named;
- a recursive ``$ref`` merged with keywords beside it ("circular references with sibling keys"):
  beside the ``$ref`` itself, in an ``allOf`` with it, around an ``anyOf``/``oneOf`` that has it
  as a branch (directly, or through refs that lead to it in place), or in a ``patternProperties``
  entry that matches a property holding it. The reference is decoded alone; what sat beside it is
  checked after;
- ``minProperties``/``maxProperties`` over properties an ``allOf`` brings: left out, checked after;
- a ``$ref`` to a subschema no value satisfies (llguidance refuses every reference to one, even
  where an answer may leave it out: an optional property, one ``anyOf`` branch, the items of an
  array that may be empty): the reference decoded as ``false``, which admits the same values (none),
  named in a load warning. Where the answer cannot do without one, the root itself is found
  unsatisfiable and the task is refused.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from extractor.constraints.decoding import GUIDANCE
from extractor.schema import escape, resolve, walk
from extractor.schema.walkers import SCHEMA_LIST_KEYS, SCHEMA_MAP_KEYS, SUBSCHEMA_KEYS

UNSATISFIABLE = "Unsatisfiable schema"
ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly", "$id"}
)
_COERCE = "coerce_one_of"
_MAX_ROUNDS = 64  # one fix per compile: a target at a time
_MAX_ONE_OF_S = 2.0  # the time spent naming which oneOf needed coercing (past it, the rest are named unproved)
_ALONE = "beside a recursive $ref, which llguidance compiles only alone"
# Kept beside a recursive branch: what names or documents the node, not what constrains it.
_KEPT_BESIDE = ANNOTATIONS | {"$defs", "definitions", "$schema", "$anchor"}

CompileError = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Unenforced:
    """One keyword the grammar backend cannot hold decoding to."""

    pointer: str  # of the keyword, in the schema checked
    keyword: str
    reason: str


@dataclass(frozen=True)
class Loosened:
    """What :func:`loosen` left out of decoding, and llguidance's last word on what is left."""

    unenforced: tuple[Unenforced, ...] = ()
    # (pointer, why) of each subschema no value satisfies, whose references are decoded as ``false``
    impossible: tuple[tuple[str, str], ...] = ()
    error: str | None = None


def loosen(schema: dict[str, Any], error: str, compile_error: CompileError) -> Loosened:
    """``schema`` loosened in place, one refusal at a time, until llguidance compiles it or none applies.

    ``error`` is llguidance's refusal of ``schema`` as it is; ``compile_error`` compiles a schema
    as the engine would receive it and returns the refusal, or None.
    """
    found: list[Unenforced] = []
    impossible: list[tuple[str, str]] = []
    last: str | None = error
    for _ in range(_MAX_ROUNDS):
        if last is None:
            break
        changed = False
        if _COERCE in last and not coerced(schema):
            schema[GUIDANCE] = {**schema.get(GUIDANCE, {}), _COERCE: True}
            changed = True
        elif "min/maxProperties" in last:
            dropped = _drop_property_counts(schema)
            found += dropped
            changed = bool(dropped)
        elif "circular references with sibling keys" in last:
            stripped, changed = _strip_circular_siblings(schema, _target(last))
            found += stripped
        elif last.startswith(UNSATISFIABLE):
            target = resolve(schema, _target(last))
            if isinstance(target, Mapping) and target is not schema and _refs_to_false(schema, target):
                impossible.append((_target(last), last.splitlines()[0]))
                changed = True
        if not changed:
            break
        last = compile_error(schema)
    return Loosened(tuple(found), tuple(impossible), last)


def with_one_of_coerced(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` that decodes every ``oneOf`` as ``anyOf``, where it has one.

    For a schema rewritten from a checked one: the typed values' evidence schema, where a number's
    evidence (words) and a word may overlap though the number and the word did not. Coercing a
    ``oneOf`` llguidance could prove disjoint changes nothing, so no compile is asked for here.
    """
    if coerced(schema) or not any(isinstance(node.get("oneOf"), list) for _, node in walk(schema)):
        return dict(schema)
    return {**schema, GUIDANCE: {**schema.get(GUIDANCE, {}), _COERCE: True}}


def coerced(schema: Mapping[str, Any]) -> bool:
    """Whether ``schema`` asks llguidance to decode every ``oneOf`` as ``anyOf``."""
    options = schema.get(GUIDANCE)
    return isinstance(options, Mapping) and options.get(_COERCE) is True


def one_of_unproved(schema: dict[str, Any], compile_error: CompileError, *, compiles: bool) -> list[Unenforced]:
    """Each ``oneOf`` of a coerced ``schema`` whose branches llguidance cannot prove disjoint.

    One compile per ``oneOf``: the schema with every other one an ``anyOf``, and no coercion.
    Where the schema does not compile anyway, or past the time allowed, the rest are named unproved.
    """
    pointers = [p for p, node in walk(schema) if isinstance(node.get("oneOf"), list)]
    why = "oneOf branches llguidance cannot prove disjoint: decoded as anyOf, exactly one checked after generation"
    unproved = []
    started = time.perf_counter()
    for index, pointer in enumerate(pointers):
        if not compiles or time.perf_counter() - started > _MAX_ONE_OF_S:
            unproved += pointers[index:]
            break
        trial = copy.deepcopy(schema)
        trial.pop(GUIDANCE)
        for other, node in list(walk(trial)):
            if other != pointer and "oneOf" in node and isinstance(node, dict):
                _rename(node, "oneOf", "anyOf")
        error = compile_error(trial)
        if error is not None and _COERCE in error:
            unproved.append(pointer)
    return [Unenforced(f"{p}/oneOf", "oneOf", why) for p in unproved or pointers]


def _drop_property_counts(schema: dict[str, Any]) -> list[Unenforced]:
    # llguidance counts properties only where every listed one is required; where the properties
    # come from elsewhere (an ``allOf`` of refs), no one node's skeleton shows it, so every count goes.
    found = []
    for pointer, node in list(walk(schema)):
        keys = [k for k in ("minProperties", "maxProperties") if k in node]
        if keys and isinstance(node, dict):
            why = "llguidance counts properties only when every listed property is required"
            found += [Unenforced(f"{pointer}/{k}", k, why) for k in keys]
            for key in keys:
                del node[key]
    return found


def _strip_circular_siblings(schema: dict[str, Any], target: str) -> tuple[list[Unenforced], bool]:
    """Keywords merged with each ``$ref`` that leads to ``target`` (a recursive one), left out of decoding.

    llguidance compiles a recursive ``$ref`` only alone; what is merged with it (a ``required``
    beside it, the other branches of an ``allOf``, a ``type`` around an ``anyOf`` that has it as
    a branch, directly or through refs that lead to it in place) is checked after generation only.
    Annotations beside a ``$ref`` are dropped without a word.
    """
    goal = resolve(schema, target)
    if not isinstance(goal, Mapping):
        return [], False

    def leads(branch: Any) -> bool:
        return _reaches(schema, branch, goal, in_place=True)

    def in_cycle(branch: Any) -> bool:
        # a $ref into the recursion: what it names reaches the target, anywhere below, and back
        ref = branch.get("$ref") if isinstance(branch, Mapping) else None
        named = resolve(schema, ref) if isinstance(ref, str) else None
        return isinstance(named, Mapping) and (
            named is goal
            or (_reaches(schema, named, goal, in_place=False) and _reaches(schema, goal, named, in_place=False))
        )

    found, changed = _strip_beside(schema, leads)
    if not changed:  # merged elsewhere: a property and a pattern that matches its name
        found = _drop_overlapping_patterns(schema, goal)
        changed = bool(found)
    if not changed:  # a ref into the recursion that reaches the target only through a property or a pattern
        found, changed = _strip_beside(schema, in_cycle)
    return found, changed


def _strip_beside(schema: dict[str, Any], leads: Callable[[Any], bool]) -> tuple[list[Unenforced], bool]:
    """The keywords merged with each ``$ref`` (or branch) that ``leads`` says is recursive, left out of decoding."""
    found: list[Unenforced] = []
    changed = False
    for pointer, node in list(walk(schema)):
        if not isinstance(node, dict):
            continue
        for key in ("allOf", "anyOf", "oneOf"):
            branches = node.get(key)
            if not isinstance(branches, list) or not any(leads(b) for b in branches):
                continue
            if key == "allOf" and len(branches) > 1:
                # merged with the other branches, the recursive ref is not alone: decoding keeps it alone
                found.append(Unenforced(f"{pointer}/allOf", "allOf", _ALONE))
                node["allOf"] = [b for b in branches if leads(b)][:1]
                changed = True
            # llguidance merges the keywords around the branches into each: the ref is not alone
            beside = [k for k in node if k != key and k not in _KEPT_BESIDE and not str(k).startswith("x-")]
            found += [Unenforced(f"{pointer}/{k}", k, _ALONE) for k in beside]
            for k in beside:
                del node[k]
            changed = changed or bool(beside)
        if isinstance(node.get("$ref"), str) and leads(node):
            beside = [k for k in node if k != "$ref" and not str(k).startswith("x-")]
            found += [Unenforced(f"{pointer}/{k}", k, _ALONE) for k in beside if k not in ANNOTATIONS]
            for k in beside:
                del node[k]
            changed = changed or bool(beside)
    return found, changed


def _drop_overlapping_patterns(schema: dict[str, Any], goal: Mapping[str, Any]) -> list[Unenforced]:
    """``patternProperties`` that match a named property, where either holds ``goal``: left out of decoding.

    llguidance decodes a named property by its schema merged with every pattern's that matches the
    name, and a recursive ``$ref`` cannot be merged. The property keeps its own schema.
    """
    found = []
    why = "matches a named property and holds a recursive $ref, which llguidance cannot merge"
    for pointer, node in list(walk(schema)):
        patterns, named = node.get("patternProperties"), node.get("properties")
        if not isinstance(patterns, dict) or not isinstance(named, Mapping):
            continue
        for pattern in list(patterns):
            overlapping = [named[n] for n in named if _matches(pattern, str(n))]
            if overlapping and any(
                _reaches(schema, s, goal, in_place=False) for s in [patterns[pattern], *overlapping]
            ):
                found.append(Unenforced(f"{pointer}/patternProperties/{escape(pattern)}", "patternProperties", why))
                del patterns[pattern]
    return found


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return True  # not Python's dialect: taken to match, so the merge is not left in


def _reaches(schema: Mapping[str, Any], start: Any, goal: Mapping[str, Any], *, in_place: bool) -> bool:
    """Whether ``goal`` is ``start`` or behind it: through refs and in-place branches only, or anywhere below."""
    todo, seen = [start], set()
    while todo:
        node = todo.pop()
        if not isinstance(node, Mapping) or id(node) in seen:
            continue
        seen.add(id(node))
        for sub in [node] if in_place else [sub for _, sub in walk(node)]:
            if sub is goal:
                return True
            if isinstance(sub.get("$ref"), str):
                todo.append(resolve(schema, sub["$ref"]))
            if in_place:
                todo += [b for key in ("allOf", "anyOf", "oneOf") for b in sub.get(key) or () if isinstance(b, Mapping)]
    return False


def _refs_to_false(schema: dict[str, Any], target: Mapping[str, Any]) -> int:
    """Every subschema that is a ``$ref`` to ``target`` replaced by ``false``; how many were."""

    def leads(child: Any) -> bool:
        ref = child.get("$ref") if isinstance(child, Mapping) else None
        return isinstance(ref, str) and resolve(schema, ref) is target

    replaced = 0
    for _, node in list(walk(schema)):
        if not isinstance(node, dict):
            continue
        for key in SCHEMA_MAP_KEYS:
            children = node.get(key)
            if isinstance(children, dict):
                for name in [n for n, child in children.items() if leads(child)]:
                    children[name] = False
                    replaced += 1
        for key in SCHEMA_LIST_KEYS:
            children = node.get(key)
            if isinstance(children, list):
                for index in [i for i, child in enumerate(children) if leads(child)]:
                    children[index] = False
                    replaced += 1
        for key in SUBSCHEMA_KEYS:
            if leads(node.get(key)):
                node[key] = False
                replaced += 1
    return replaced


def _target(error: str) -> str:
    """The subschema an llguidance error names ("... while processing json-schema:///#/$defs/x")."""
    named = re.findall(r"json-schema://(?:/)?(#\S*)", error)
    return named[-1] if named else "#"


def _rename(node: dict[str, Any], old: str, new: str) -> None:
    # In place, keeping the key's position (llguidance orders properties by keyword order).
    items = [(new if k == old else k, v) for k, v in node.items()]
    node.clear()
    node.update(items)
