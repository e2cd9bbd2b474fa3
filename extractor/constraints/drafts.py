"""JSON Schema drafts: check each schema with its own draft, translate it to the one form we decode from.

Analysts arrive with schemas of every draft the ``jsonschema`` library implements (04, 06, 07,
2019-09, 2020-12). Each is checked against its own draft's meta-schema and its outputs are
validated by its own draft's validator (:func:`jsonschema.validators.validator_for`). What reads
differently between drafts is translated here, in one place, into a 2020-12 schema that the rest of
extractor (prompt fields, grounding, typed results, the substring grammar) and the grammar backend
read:

=============================================  ==================================================
as written (draft)                             as decoded (2020-12)
=============================================  ==================================================
``definitions`` (all)                          ``$defs``
``$ref`` to anything (``id``/``$id`` bases,    ``$ref`` to a local JSON pointer (``#/$defs/x``),
anchors, ``#foo``), ``$recursiveRef``,         resolved once with the draft's own rules
``$dynamicRef``
keywords beside ``$ref`` (04, 06, 07)          dropped (those drafts ignore them); titles kept
``id`` / ``$id`` / ``$anchor`` / ...           dropped (every ref is already a local pointer)
boolean ``exclusiveMaximum`` (04)              ``exclusiveMaximum: <maximum>`` or nothing
``items: [...]`` + ``additionalItems``         ``prefixItems: [...]`` + ``items``
``dependencies`` (04, 06, 07)                  ``dependentRequired`` / ``dependentSchemas``
a 2020-12 keyword unknown to the draft         dropped (``const`` means nothing to draft-04)
=============================================  ==================================================

Pure: no file or network access (a ``$ref`` that does not resolve inside the schema is refused).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.protocols import Validator
from jsonschema.validators import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
)
from referencing._core import Resolver

from extractor.schema import SUBSCHEMA_KEYS, escape, join

if TYPE_CHECKING:
    from referencing._core import Resolver

LATEST = "https://json-schema.org/draft/2020-12/schema"
# Newest first: a schema without ``$schema`` is read as the newest draft it is valid in.
DRAFTS: dict[str, type[Validator]] = {
    "2020-12": Draft202012Validator,
    "2019-09": Draft201909Validator,
    "draft-07": Draft7Validator,
    "draft-06": Draft6Validator,
    "draft-04": Draft4Validator,
}
# Meta-schemas that are a draft plus annotations of their own, read as that draft.
DIALECTS = {
    # Snowplow's self-describing schemas (Iglu): draft-04 with a "self" block.
    "http://iglucentral.com/schemas/com.snowplowanalytics.self-desc/schema/jsonschema/1-0-0#": "draft-04",
}
# "The current draft", as older tools wrote it: read like a schema without ``$schema``.
UNVERSIONED = frozenset({"http://json-schema.org/schema#", "https://json-schema.org/schema"})
_LEGACY = frozenset({"draft-04", "draft-06", "draft-07"})  # keywords beside $ref are ignored
_BASE = "urn:extractor:task"

# Where subschemas sit, in 2020-12 terms, plus the older spellings read on the way in.
_MAP_KEYS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_LIST_KEYS = ("allOf", "anyOf", "oneOf", "prefixItems")
_ONE_KEYS = SUBSCHEMA_KEYS
_DATA_KEYS = frozenset({"const", "enum", "default", "examples"})
_IDENTITY_KEYS = frozenset({"$schema", "id", "$id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary"})
_REF_KEYS = ("$ref", "$recursiveRef", "$dynamicRef")
# Kept beside a draft-04/06/07 ``$ref`` although the draft ignores them: they only describe.
_ANNOTATIONS = frozenset({"title", "description", "$comment", "$defs", "definitions"})
# Every 2020-12 keyword (``then``/``else`` are read by the ``if`` validator, so they are added).
_ALL_2020 = frozenset(Draft202012Validator.VALIDATORS) | {"then", "else"}


class DraftError(Exception):
    """A schema no draft accepts, or a ref that leads nowhere; ``pointer`` says where."""

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(f"{pointer}: {reason}")
        self.pointer = pointer
        self.reason = reason


@dataclass(frozen=True)
class Draft:
    """The draft a schema is written in, and the validator class that checks it."""

    name: str
    validator: type[Validator]
    declared: bool  # the schema says so with ``$schema`` (False: inferred)

    @property
    def uri(self) -> str:
        return _uri_of(self.validator)


def _uri_of(cls: type[Validator]) -> str:
    return str(cls.META_SCHEMA.get("$id") or cls.META_SCHEMA.get("id"))


def _same_uri(known: str, declared: Any) -> bool:
    # ``http://json-schema.org/draft-07/schema`` and ``...schema#`` name the same draft.
    return isinstance(declared, str) and known.rstrip("#") == declared.strip().rstrip("#")


def detect(schema: Mapping[str, Any]) -> Draft:
    """The schema's draft, checked against that draft's meta-schema.

    A declared ``$schema`` decides; without one, the newest draft whose meta-schema accepts the
    schema (draft-04's boolean ``exclusiveMaximum`` is not valid 2020-12, so such a schema is read
    as draft-04).

    Raises:
        DraftError: an unknown ``$schema``, or a schema its draft's meta-schema rejects.

    """
    declared = schema.get("$schema")
    if any(_same_uri(uri, declared) for uri in UNVERSIONED):
        declared = None
    if declared is not None:
        name = next((n for n, c in DRAFTS.items() if _same_uri(_uri_of(c), declared)), None)
        name = name or next((d for uri, d in DIALECTS.items() if _same_uri(uri, declared)), None)
        if name is None:
            known = ", ".join(DRAFTS)
            raise DraftError("#/$schema", f"unknown $schema {declared!r}; the drafts read here are {known}")
        _check(schema, DRAFTS[name], name)
        return Draft(name, DRAFTS[name], declared=True)
    first: DraftError | None = None
    for name, cls in DRAFTS.items():
        try:
            _check(schema, cls, name)
        except DraftError as error:
            first = first or error
            continue
        return Draft(name, cls, declared=False)
    assert first is not None
    raise first


def _check(schema: Mapping[str, Any], cls: type[Validator], name: str) -> None:
    try:
        cls.check_schema(dict(schema))
    except jsonschema.SchemaError as error:
        raise DraftError(join(error.path, "#"), f"invalid schema ({name}): {error.message}") from None


@dataclass(frozen=True)
class Translated:
    """A schema in 2020-12 terms, and where each of its subschemas came from in the schema as written."""

    schema: dict[str, Any]
    origins: Mapping[str, str]  # pointer of a subschema here -> its pointer in the schema as written


def translate(schema: Mapping[str, Any], draft: Draft) -> Translated:
    """The schema in 2020-12 terms (see the module table); refs become local JSON pointers.

    Raises:
        DraftError: a ``$ref`` that does not resolve inside the schema.

    """
    translation = _Translation(schema, draft)
    return Translated(translation.run(), translation.origins)


class _Translation:
    def __init__(self, schema: Mapping[str, Any], draft: Draft) -> None:
        self.source = schema
        self.draft = draft
        known = frozenset(draft.validator.VALIDATORS)
        self.known = known | {"then", "else"} if "if" in known else known
        spec = referencing.jsonschema.specification_with(draft.uri)
        resource = spec.create_resource(schema)
        self.spec = spec
        self.base = resource.id() or _BASE
        self.registry: referencing.Registry[Any] = referencing.Registry().with_resource(self.base, resource)
        # The resources each $id names inside the schema. referencing takes what is not a subschema
        # for one in some places (a draft-07 property dependency, ["begin"], in JSON Schema Store's
        # tmlanguage): without the crawl, a $ref to an embedded $id fails to resolve with its pointer
        # named, and every other $ref resolves.
        with contextlib.suppress(TypeError, AttributeError):
            self.registry = self.registry.crawl()
        self.placed: dict[int, str] = {}  # id(source subschema) -> its pointer in the translation
        # (translated node holding the ref, the target as resolved, its resolver, the ref as written)
        self.refs: list[tuple[dict[str, Any], Any, Resolver[Any], str]] = []
        self.origins: dict[str, str] = {}

    def run(self) -> dict[str, Any]:
        out = self.node(self.source, "#", "#", self.registry.resolver(base_uri=self.base))
        assert isinstance(out, dict)
        hoisted: dict[str, Any] = {}
        while self.refs:
            pending, self.refs = self.refs, []
            for node, target, resolver, ref in pending:
                if id(target) not in self.placed:
                    # A ref into a spot no keyword names (``#/definitions`` spelt ``#/shapes``): the
                    # target becomes a ``$defs`` entry of its own (its refs go through the loop again).
                    name = _free_name(ref.rsplit("/", 1)[-1] or "ref", {*hoisted, *out.get("$defs", {})})
                    hoisted[name] = self.node(target, f"#/$defs/{escape(name)}", ref, resolver)
                    if not isinstance(target, Mapping):
                        node["$ref"] = _as_ref(f"#/$defs/{escape(name)}")
                        continue
                node["$ref"] = _as_ref(self.placed[id(target)])
        if hoisted:
            out["$defs"] = {**out.get("$defs", {}), **hoisted}
        return out

    def node(self, node: Any, pointer: str, source: str, resolver: Resolver[Any]) -> Any:
        if not isinstance(node, Mapping):
            return node
        self.placed[id(node)] = pointer
        self.origins[pointer] = source
        if node is not self.source and any(isinstance(node.get(k), str) for k in ("$id", "id")):
            resolver = resolver.in_subresource(self.spec.create_resource(node))
        ref_key = next((k for k in _REF_KEYS if isinstance(node.get(k), str)), None)
        keys = list(node)
        if ref_key is not None and self.draft.name in _LEGACY:
            keys = [k for k in keys if k == ref_key or k in _ANNOTATIONS or str(k).startswith("x-")]
        out: dict[str, Any] = {}
        for key in keys:
            value = node[key]

            def child(sub: Any, where: str, *path: Any, key: str = key) -> Any:
                # ``path``: the steps below ``key`` in the schema as written
                return self.node(sub, where, source + join([key, *path]), resolver)

            if key == "$schema" and node is self.source:
                out[key] = LATEST  # in place: a 2020-12 schema comes out as it went in, key order too
                continue
            if key in _IDENTITY_KEYS:
                continue
            if key in _REF_KEYS:
                if isinstance(value, str):
                    self.refs.append((out, self._target(resolver, value, f"{pointer}/{key}"), resolver, value))
                    out["$ref"] = value
                continue
            if key in ("definitions", "$defs") and isinstance(value, Mapping):
                defs = out.setdefault("$defs", {})
                for name, sub in value.items():
                    defs[name] = child(sub, f"{pointer}/$defs/{escape(str(name))}", name)
                continue
            if key in ("exclusiveMaximum", "exclusiveMinimum") and isinstance(value, bool):
                bound = "maximum" if key == "exclusiveMaximum" else "minimum"
                if value and bound in node:
                    out[key] = node[bound]
                continue
            if key in ("maximum", "minimum") and node.get(f"exclusive{key.title()}") is True:
                continue
            if key == "items" and isinstance(value, list):
                out["prefixItems"] = [child(v, f"{pointer}/prefixItems/{i}", i) for i, v in enumerate(value)]
                if "additionalItems" in node:
                    out["items"] = child(node["additionalItems"], f"{pointer}/items", key="additionalItems")
                continue
            if key == "additionalItems":
                continue  # read with a list ``items``; meaningless otherwise
            if key == "dependencies":
                if "dependencies" in self.known and isinstance(value, Mapping):
                    self._dependencies(out, value, pointer, lambda sub, where, name: child(sub, where, name))
                continue
            if key in _ALL_2020 and key not in self.known:
                continue  # a later draft's keyword: an unknown word (no constraint) in this draft
            if key in _DATA_KEYS or str(key).startswith("x-"):
                out[key] = copy.deepcopy(value)
            elif key in _MAP_KEYS and isinstance(value, Mapping):
                out[key] = {n: child(s, f"{pointer}/{key}/{escape(str(n))}", n) for n, s in value.items()}
            elif key in _LIST_KEYS and isinstance(value, list):
                out[key] = [child(s, f"{pointer}/{key}/{i}", i) for i, s in enumerate(value)]
            elif key in _ONE_KEYS:
                out[key] = child(value, f"{pointer}/{key}")
            else:
                out[key] = copy.deepcopy(value)
        return out

    def _dependencies(
        self, out: dict[str, Any], value: Mapping[str, Any], pointer: str, child: Callable[[Any, str, str], Any]
    ) -> None:
        for name, dep in value.items():
            if isinstance(dep, list):
                out.setdefault("dependentRequired", {})[name] = list(dep)
            else:
                where = f"{pointer}/dependentSchemas/{escape(str(name))}"
                out.setdefault("dependentSchemas", {})[name] = child(dep, where, name)

    def _target(self, resolver: Resolver[Any], ref: str, where: str) -> Any:
        try:
            resolved = resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            if ref.startswith("#"):
                raise DraftError(where, f"$ref {ref!r} does not resolve to a schema in this file") from None
            raise DraftError(
                where, f"$ref {ref!r} points outside this schema; only refs inside it ('#/$defs/...') are allowed"
            ) from None
        if not isinstance(resolved.contents, Mapping | bool):
            raise DraftError(where, f"$ref {ref!r} does not resolve to a schema in this file")
        return resolved.contents


def _free_name(name: str, taken: set[str]) -> str:
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in name) or "ref"
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    return candidate


def _as_ref(pointer: str) -> str:
    # A JSON pointer as a URI fragment: each token percent-encoded (``#/$defs/a b`` -> ``#/$defs/a%20b``).
    return "#" + "".join("/" + quote(t, safe="$!&'()*+,;=:@-._~") for t in pointer.split("/")[1:])
