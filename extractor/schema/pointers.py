"""JSON Pointers (RFC 6901): a token escaped and unescaped, a pointer joined, the node it names. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def escape(token: str) -> str:
    """One pointer token, escaped: ``~`` -> ``~0``, ``/`` -> ``~1`` (in that order)."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """One pointer token as written in the data: ``~1`` -> ``/``, ``~0`` -> ``~`` (in that order)."""
    return token.replace("~1", "/").replace("~0", "~")


def join(parts: Iterable[Any], root: str = "") -> str:
    """``root`` followed by each part escaped: ``join(["a/b", 0], "#")`` is ``#/a~1b/0``."""
    return root + "".join("/" + escape(str(part)) for part in parts)


def node_at(root: Any, pointer: str) -> Any:
    """The node a JSON pointer (``""``, ``/a/0/b``; ``~0``/``~1`` escaped) names in ``root``, or None."""
    node = root
    for token in pointer.split("/")[1:] if pointer else []:
        token = unescape(token)
        if isinstance(node, Mapping):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node
