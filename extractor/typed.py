"""Task schema -> a pydantic model class built at run time, so ``result.value.country`` works.

The model *types* a value that already passed the task's JSON Schema (2020-12) check; it does
not re-check constraints such as ``maxLength`` or ``pattern`` (jsonschema did that). Pure: no
I/O, no engine; the caller caches the result per task.

How constructs map:

* object with ``properties`` -> a model class; fields not in ``required`` are ``T | None = None``.
  ``additionalProperties: false`` forbids extra keys; otherwise extra keys are kept (typed when
  ``additionalProperties`` is a schema). Nested objects get classes named parent + field
  (PascalCase); ``$ref`` targets are named after the definition, one class per ref.
* object without ``properties`` -> ``dict[str, T]``; ``items`` -> ``list[T]``; ``prefixItems``
  -> ``tuple[...]``; ``enum``/``const`` -> ``Literal[...]``; ``anyOf``/``oneOf`` and ``type``
  lists -> unions; single-branch ``allOf`` -> that branch. Without ``type``, ``properties`` means
  an object and ``items`` an array.
* Property names that are not plain identifiers (keywords, leading ``_``, non-ASCII, names
  BaseModel uses, such as ``json`` or ``model_config``) get a sanitized field name and the
  original as alias. Models validate by either and serialize by alias.
* ``not``, ``if``/``then``/``else``, multi-branch ``allOf``, ``patternProperties`` and the like
  cannot be typed: the value is typed from the other keywords, or as ``Any``, and a warning
  names the pointer. Extension keys (``x-*``) are ignored.

Round trip: ``build_value(t, data).model_dump()`` equals ``data`` except that optional fields
absent from ``data`` dump as None (``exclude_unset=True`` drops them) and ``prefixItems``
tuples dump as tuples (``mode="json"`` gives lists).
"""

from __future__ import annotations

import builtins
import datetime
import keyword
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ForwardRef, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, RootModel, create_model

from extractor.schema import escape, resolve, unescape

# Typing forms subscripted with run-time tuples: typed Any so mypy reads them as expressions.
_LITERAL: Any = Literal
_UNION: Any = Union
_ROOT_MODEL: Any = RootModel
_NUMBER: Any = float | int
# Typed values (extractor.values) arrive as ISO strings; their models hold Python's date types. A
# duration stays its ISO 8601 string (P2Y: years and months are no timedelta).
# String formats typed as a Python date or time (extractor.catalog.codegen imports them by these types' names).
FORMAT_TYPES: dict[str, type] = {"date": datetime.date, "date-time": datetime.datetime, "time": datetime.time}
_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": _NUMBER, "boolean": bool, "null": type(None)}

# Keywords with no pydantic counterpart: warned about, the rest of the schema types the value.
_UNTYPED = ("not", "if", "then", "else", "dependentSchemas", "$dynamicRef", "$recursiveRef")
_UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")
# Keywords that decide a value's shape; a schema with none of them constrains nothing we type.
_SHAPE_KEYS = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "patternProperties",
        "items",
        "prefixItems",
        "enum",
        "const",
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
    }
)
_OBJECT_KEYS = ("properties", "additionalProperties", "patternProperties")
_ARRAY_KEYS = ("items", "prefixItems")
_MAX_DEPTH = 64
_MAX_TUPLE = 16
_NON_IDENT = re.compile(r"[^0-9A-Za-z_]+")
_WORD = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class TypedModel:
    """A model class for one task schema, and what it could not type precisely."""

    model: type[BaseModel]
    warnings: tuple[str, ...] = ()


def model_for_schema(schema: Mapping[str, Any], *, name: str) -> TypedModel:
    """Build a pydantic model class from a JSON Schema (2020-12).

    Args:
        schema: The task schema; local ``$ref``s (``#/$defs/X``, ``#/definitions/X``) resolve in it.
        name: Names the root class (PascalCased); nested classes derive their names from it.

    Returns:
        The model (a ``RootModel`` subclass when the root is not an object with properties)
        and one warning, ``"<pointer>: <reason>"``, per construct typed loosely.

    """
    builder = _Builder(schema)
    model = builder.root(name)
    return TypedModel(model=model, warnings=tuple(builder.warnings))


def build_value(typed: TypedModel, data: Mapping[str, Any]) -> BaseModel:
    """Validate ``data`` (already checked against the schema) into an instance of ``typed.model``.

    Raises:
        pydantic.ValidationError: ``data`` does not fit the model (e.g. an extra key where
            ``additionalProperties`` is false).

    """
    return typed.model.model_validate(dict(data))


class _Builder:
    """One build: the classes made so far, refs in progress, warnings."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root_schema = root
        self.warnings: list[str] = []
        self.models: dict[str, type[BaseModel]] = {}
        self.used_names: set[str] = set()
        self.done: dict[str, Any] = {}
        self.pending: dict[str, str | None] = {}
        self.depth = 0

    def root(self, name: str) -> type[BaseModel]:
        cls_name = self._reserve(_pascal(name) or "Model")
        schema = self.root_schema
        if _is_model(schema):
            self.pending["#"] = cls_name
            annotation = self._type(schema, "#", cls_name, fixed=cls_name)
        else:
            self.pending["#"] = None
            annotation = self._type(schema, "#", cls_name)
        del self.pending["#"]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            model = create_model(cls_name, __base__=_ROOT_MODEL[annotation], __doc__=_doc(schema))
            self.models[cls_name] = model
        self._complete()
        return model

    def _complete(self) -> None:
        """Resolve forward references (recursive ``$ref``s) now that every class exists."""
        for _ in range(len(self.models)):
            incomplete = [m for m in self.models.values() if not m.__pydantic_complete__]
            if not incomplete:
                return
            for model in incomplete:
                model.model_rebuild(_types_namespace=dict(self.models), raise_errors=False)

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def _reserve(self, base: str) -> str:
        if not base or not base.isidentifier():
            base = "M" + base
        if keyword.iskeyword(base) or hasattr(builtins, base) or base in globals():
            base += "Model"
        candidate, n = base, 2
        while candidate in self.used_names:
            candidate, n = f"{base}{n}", n + 1
        self.used_names.add(candidate)
        return candidate

    def _type(self, node: Any, pointer: str, hint: str, *, fixed: str | None = None) -> Any:
        """Type ``node``; ``fixed`` is the class name reserved for it when ``_is_model(node)``."""
        if not isinstance(node, Mapping):
            return Any  # true, false (nothing validates), or not a schema
        if self.depth >= _MAX_DEPTH:
            self._warn(f"{pointer}: nested deeper than {_MAX_DEPTH} levels; typed as Any")
            return Any
        self.depth += 1
        try:
            return self._node(node, pointer, hint, fixed)
        finally:
            self.depth -= 1

    def _node(self, node: Mapping[str, Any], pointer: str, hint: str, fixed: str | None) -> Any:
        shaped = _shapes(node)
        for key in _UNTYPED:
            if key in node:
                self._warn(f"{pointer}/{key}: {key!r} cannot be typed; " + _fallback(shaped))
        for key in _UNEVALUATED:
            if isinstance(node.get(key), Mapping):
                self._warn(f"{pointer}/{key}: {key!r} cannot be typed; values it covers are typed as Any")
        if "$ref" in node:
            return self._ref_node(node, pointer)
        if "const" in node:
            return self._literal([node["const"]], node, f"{pointer}/const")
        if isinstance(node.get("enum"), list):
            return self._literal(node["enum"], node, f"{pointer}/enum")
        all_of = node.get("allOf")
        if isinstance(all_of, list) and all_of:
            rest = _without(node, "allOf")
            shaping = [i for i, branch in enumerate(all_of) if _shapes(branch) or branch is False]
            if len(shaping) <= 1:  # the other branches only add constraints, which are not typed
                index = shaping[0] if shaping else 0
                return self._branches([all_of[index]], rest, f"{pointer}/allOf", hint, first=index)
            shaped = _shapes(rest)
            self._warn(f"{pointer}/allOf: an allOf of {len(all_of)} branches cannot be typed; " + _fallback(shaped))
            if not shaped:
                return Any
            node = rest
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and any(_shapes(b) for b in branches):
                return self._branches(branches, _without(node, key), f"{pointer}/{key}", hint)
        kinds = _types_of(node)
        if kinds is None:
            return Any
        return _union([self._kind(node, kind, pointer, hint, fixed if len(kinds) == 1 else None) for kind in kinds])

    def _branches(
        self, branches: Sequence[Any], rest: Mapping[str, Any], pointer: str, hint: str, *, first: int = 0
    ) -> Any:
        """Type the union of ``branches``, each intersected (shallowly) with the sibling keywords ``rest``."""
        live = [(i, b) for i, b in enumerate(branches, start=first) if b is not False]
        named = [b for _, b in live if not (isinstance(b, Mapping) and b.get("type") == "null")]
        members: list[Any] = []
        for index, branch in live:
            branch_hint = hint if len(named) <= 1 else f"{hint}Option{index + 1}"
            if _shapes(rest):
                branch = _merge(rest, branch if isinstance(branch, Mapping) else {})
            members.append(self._type(branch, f"{pointer}/{index}", branch_hint))
        return _union(members)

    def _ref_node(self, node: Mapping[str, Any], pointer: str) -> Any:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            self._warn(f"{pointer}/$ref: {ref!r} is not a local reference; typed as Any")
            return Any
        if _shapes(_without(node, "$ref", "type")):
            self._warn(f"{pointer}/$ref: keywords beside $ref are not typed; typed from the reference alone")
        if ref in self.done:
            return self.done[ref]
        if ref in self.pending:
            cls_name = self.pending[ref]
            if cls_name is None:
                self._warn(f"{pointer}/$ref: recursive reference {ref!r} to a non-object schema; typed as Any")
                return Any
            return ForwardRef(cls_name)
        target = resolve(self.root_schema, ref)
        target = target if isinstance(target, Mapping | bool) else None
        if target is None:
            self._warn(f"{pointer}/$ref: {ref!r} does not resolve; typed as Any")
            return Any
        last = unescape(ref.rsplit("/", 1)[-1])
        base = _pascal(last) or "Ref"
        cls_name = self._reserve(base) if _is_model(target) else None
        self.pending[ref] = cls_name
        try:
            annotation = self._type(target, ref, cls_name or base, fixed=cls_name)
        finally:
            del self.pending[ref]
        self.done[ref] = annotation
        return annotation

    def _literal(self, values: Sequence[Any], node: Mapping[str, Any], pointer: str) -> Any:
        kinds = _types_of(node) if "type" in node else None
        allowed = [v for v in values if kinds is None or any(_is_json_type(v, k) for k in kinds)]
        literals: list[Any] = []
        others: list[Any] = []
        for value in allowed:
            if value is None or isinstance(value, (str, bool)):
                literals.append(value)
            elif isinstance(value, (int, float)):
                # JSON Schema compares numbers by value: 1 and 1.0 are the same enum member.
                literals.append(value)
                if isinstance(value, int) or value.is_integer():
                    literals.append(float(value) if isinstance(value, int) else int(value))
            else:
                others.append(_dict_of(Any) if isinstance(value, Mapping) else _list_of(Any))
        if others:
            self._warn(f"{pointer}: object and array values cannot be literals; typed by their JSON type")
        members = [_LITERAL[tuple(literals)]] if literals else []
        return _union(members + others)

    def _kind(self, node: Mapping[str, Any], kind: str, pointer: str, hint: str, fixed: str | None) -> Any:
        if kind == "object":
            return self._object(node, pointer, hint, fixed)
        if kind == "array":
            return self._array(node, pointer, hint)
        if kind == "string" and node.get("format") in FORMAT_TYPES:
            return FORMAT_TYPES[node["format"]]
        if kind in _SCALARS:
            return _SCALARS[kind]
        self._warn(f"{pointer}/type: unknown type {kind!r}; typed as Any")
        return Any

    def _object(self, node: Mapping[str, Any], pointer: str, hint: str, fixed: str | None) -> Any:
        patterns = node.get("patternProperties")
        if isinstance(patterns, Mapping) and patterns:
            self._warn(f"{pointer}/patternProperties: cannot be typed; keys matching it are kept as Any")
        if fixed is not None or _has_properties(node):
            return self._model(node, pointer, fixed or self._reserve(hint))
        extra = node.get("additionalProperties", True)
        if (isinstance(patterns, Mapping) and patterns) or not isinstance(extra, Mapping):
            return _dict_of(Any)
        return _dict_of(self._type(extra, f"{pointer}/additionalProperties", f"{hint}Value"))

    def _model(self, node: Mapping[str, Any], pointer: str, cls_name: str) -> type[BaseModel]:
        properties = node.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = {key for key in node.get("required") or () if isinstance(key, str)}
        fields: dict[str, Any] = {}
        for key, python_name in _field_names([str(k) for k in properties]).items():
            sub = properties[key]
            annotation = self._type(sub, f"{pointer}/properties/{escape(key)}", cls_name + _pascal(python_name))
            if key not in required:
                annotation = _union([annotation, None])
            fields[python_name] = (
                annotation,
                Field(
                    ... if key in required else None,
                    alias=key if key != python_name else None,
                    title=_text(sub, "title"),
                    description=_text(sub, "description") or _text(sub, "title"),
                ),
            )
        patterns = node.get("patternProperties")
        has_patterns = isinstance(patterns, Mapping) and bool(patterns)
        extra = node.get("additionalProperties", True)
        if isinstance(extra, Mapping) and extra and not has_patterns:
            extra_type = self._type(extra, f"{pointer}/additionalProperties", f"{cls_name}Extra")
            fields["__pydantic_extra__"] = (_dict_of(extra_type), None)
        config = ConfigDict(
            extra="forbid" if extra is False and not has_patterns else "allow",
            populate_by_name=True,  # validate by alias or by field name
            serialize_by_alias=True,  # pydantic >= 2.11; model_dump(by_alias=True) works on any 2.x
            protected_namespaces=(),
        )
        model: type[BaseModel] = create_model(cls_name, __config__=config, __doc__=_doc(node), **fields)
        self.models[cls_name] = model
        return model

    def _array(self, node: Mapping[str, Any], pointer: str, hint: str) -> Any:
        items = node.get("items", True)
        prefix = node.get("prefixItems")
        if not (isinstance(prefix, list) and prefix):
            if not isinstance(items, Mapping):
                return _list_of(Any)
            return _list_of(self._type(items, f"{pointer}/items", f"{hint}Item"))
        positions = [self._type(p, f"{pointer}/prefixItems/{i}", f"{hint}Item{i + 1}") for i, p in enumerate(prefix)]
        low, high = node.get("minItems", 0), node.get("maxItems")
        top = len(prefix) if not isinstance(high, int) else min(len(prefix), high)
        if items is False or (isinstance(high, int) and high <= len(prefix)):
            if len(prefix) <= _MAX_TUPLE:
                lengths = range(min(low if isinstance(low, int) else 0, top), top + 1)
                return _union([types.GenericAlias(tuple, tuple(positions[:n])) for n in lengths])
            self._warn(f"{pointer}/prefixItems: more than {_MAX_TUPLE} positions; typed as a list")
        else:
            self._warn(f"{pointer}/prefixItems: items past the prefix cannot be typed as a tuple; typed as a list")
        rest = self._type(items, f"{pointer}/items", f"{hint}Item") if isinstance(items, Mapping) else Any
        return _list_of(_union([*positions, rest]))


def _is_model(node: Any) -> bool:
    """Whether ``_Builder._type`` turns ``node`` into exactly one model class (recursion-safe)."""
    if not isinstance(node, Mapping) or "$ref" in node or "const" in node or isinstance(node.get("enum"), list):
        return False
    if isinstance(node.get("allOf"), list) and node["allOf"]:
        return False
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list) and any(_shapes(b) for b in branches):
            return False
    return _types_of(node) == ["object"] and _has_properties(node)


def _has_properties(node: Mapping[str, Any]) -> bool:
    properties = node.get("properties")
    return isinstance(properties, Mapping) and bool(properties)


def _shapes(node: Any) -> bool:
    return isinstance(node, Mapping) and any(key in node for key in _SHAPE_KEYS)


def _fallback(shaped: bool) -> str:
    return "typed from the other keywords" if shaped else "typed as Any"


def _types_of(node: Mapping[str, Any]) -> list[str] | None:
    """Return the JSON types a schema allows, from ``type`` or inferred; None: any type."""
    declared = node.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return list(dict.fromkeys(str(kind) for kind in declared)) or None
    implied = (("object", _OBJECT_KEYS), ("array", _ARRAY_KEYS))
    inferred = [kind for kind, keys in implied if any(k in node for k in keys)]
    return inferred if len(inferred) == 1 else None


def _is_json_type(value: Any, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return not isinstance(value, bool) and (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        )
    if kind == "number":
        return not isinstance(value, bool) and isinstance(value, (int, float))
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, Mapping)
    return True


def _list_of(item: Any) -> Any:
    return types.GenericAlias(list, (item,))


def _dict_of(value: Any) -> Any:
    return types.GenericAlias(dict, (str, value))


def _union(members: Sequence[Any]) -> Any:
    unique: list[Any] = []
    for member in members:
        member = type(None) if member is None else member
        if member is Any:
            return Any
        if member not in unique:
            unique.append(member)
    if not unique:
        return Any
    return unique[0] if len(unique) == 1 else _UNION[tuple(unique)]


def _without(node: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """``node`` less ``keys`` and the keywords already warned about at its own pointer."""
    return {k: v for k, v in node.items() if k not in keys and k not in _UNTYPED and k not in _UNEVALUATED}


def _merge(base: Mapping[str, Any], branch: Mapping[str, Any]) -> dict[str, Any]:
    """Intersect shallowly: ``properties`` joined, ``required`` united, other keys from ``branch``."""
    merged = dict(base)
    for key, value in branch.items():
        if key == "properties" and isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **value}
        elif key == "required" and isinstance(value, list) and isinstance(merged.get(key), list):
            merged[key] = list(dict.fromkeys([*merged[key], *value]))
        else:
            merged[key] = value
    return merged


def _text(node: Any, key: str) -> str | None:
    value = node.get(key) if isinstance(node, Mapping) else None
    return value if isinstance(value, str) and value else None


def _doc(node: Mapping[str, Any]) -> str | None:
    return _text(node, "description") or _text(node, "title")


def _pascal(text: str) -> str:
    """``first_name`` / ``firstName`` / ``first-name`` -> ``FirstName``; non-ASCII letters dropped."""
    return "".join(word[:1].upper() + word[1:] for word in _WORD.findall(text))


def _usable(name: str) -> bool:
    """Whether a property name can be a pydantic field name as it is."""
    return (
        name.isascii()
        and name.isidentifier()
        and not keyword.iskeyword(name)
        and not name.startswith("_")
        and not hasattr(BaseModel, name)
    )


def _sanitize(key: str) -> str:
    name = _NON_IDENT.sub("_", key).strip("_")
    if not name:
        return ""
    if name[0].isdigit():
        name = "field_" + name
    return name if _usable(name) else name + "_"


def _field_names(keys: Sequence[str]) -> dict[str, str]:
    """Property name -> field name, in property order; usable names are kept, the others sanitized."""
    taken = {key for key in keys if _usable(key)}
    names: dict[str, str] = {}
    for index, key in enumerate(keys):
        if _usable(key):
            names[key] = key
            continue
        base = _sanitize(key) or f"field_{index + 1}"
        candidate, n = base, 2
        while candidate in taken or not _usable(candidate):
            candidate, n = f"{base}_{n}", n + 1
        taken.add(candidate)
        names[key] = candidate
    return names
