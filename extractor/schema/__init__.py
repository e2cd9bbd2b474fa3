"""JSON Schema and JSON Pointer, once: the leaf every other layer builds on. Pure; imports nothing of extractor.

- :mod:`extractor.schema.pointers`: one token escaped and unescaped (RFC 6901), a pointer joined
  from its parts, the node a pointer names;
- :mod:`extractor.schema.refs`: the subschema a local ``$ref`` names (a pointer or an anchor);
- :mod:`extractor.schema.walkers`: every subschema with its pointer, the types a subschema names;
- :mod:`extractor.schema.fields`: each subschema that describes a field, local refs followed.
"""

from extractor.schema.fields import walk_fields
from extractor.schema.pointers import escape, join, node_at, unescape
from extractor.schema.refs import find_anchor, resolve
from extractor.schema.walkers import SUBSCHEMA_KEYS, types_of, walk

__all__ = [
    "SUBSCHEMA_KEYS",
    "escape",
    "find_anchor",
    "join",
    "node_at",
    "resolve",
    "types_of",
    "unescape",
    "walk",
    "walk_fields",
]
