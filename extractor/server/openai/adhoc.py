"""Tasks built from a request's JSON Schema, checked like catalog tasks and cached by schema hash.

A schema comes from the client, so it is bounded (size, nesting) before the catalog's load
checks run on it (:func:`extractor.catalog.tasks.task_from_schema`: 2020-12 meta-schema, local ``$ref``
only, no keyword the grammar backend would skip, the typed model). Building a task compiles a
validator and a pydantic model: the last :data:`CACHE_SIZE` schemas are kept (least recently
used out), and so are the errors of bad ones, so a client repeating a schema pays once.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from typing import Any

from extractor.catalog.tasks import Task, task_from_schema
from extractor.config import GrammarBackend
from extractor.errors import TaskError
from extractor.schema import escape

CACHE_SIZE = 256
MAX_SCHEMA_BYTES = 65_536
MAX_SCHEMA_DEPTH = 32
_NAME = re.compile(r"[^a-z0-9_-]+")


def task_name(name: str) -> str:
    """A task name (``^[a-z0-9_-]{1,64}$``) from a client's schema or function name."""
    cleaned = _NAME.sub("_", name.lower()).strip("_")[:64]
    return cleaned or "response"


def check_bounds(where: str, schema: Any) -> None:
    """Refuse a schema over :data:`MAX_SCHEMA_BYTES` or nested deeper than :data:`MAX_SCHEMA_DEPTH`."""
    size = len(json.dumps(schema, ensure_ascii=False).encode("utf-8"))
    if size > MAX_SCHEMA_BYTES:
        raise TaskError(where, "#", f"the schema is {size} bytes, over the limit of {MAX_SCHEMA_BYTES}")
    stack: list[tuple[Any, str, int]] = [(schema, "#", 0)]
    while stack:
        node, pointer, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise TaskError(where, pointer, f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        if isinstance(node, dict):
            items = [(str(k), v) for k, v in node.items()]
        elif isinstance(node, list):
            items = [(str(i), v) for i, v in enumerate(node)]
        else:
            continue
        for key, child in items:
            stack.append((child, f"{pointer}/{escape(key)}", depth + 1))


class AdHocTasks:
    """A bounded LRU cache of tasks built from request schemas, keyed by the schema's hash."""

    def __init__(self, *, backend: GrammarBackend, size: int = CACHE_SIZE) -> None:
        self.backend = backend
        self.size = size
        self._cache: OrderedDict[str, Task | TaskError] = OrderedDict()

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, name: str, schema: Any, *, where: str) -> Task:
        """The task for ``schema`` (built and checked on first sight); :class:`TaskError` for a bad one."""
        if not isinstance(schema, dict):
            raise TaskError(where, "#", "a schema must be a JSON object")
        name = task_name(name)
        canonical = json.dumps([name, where, schema], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        key = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        found = self._cache.get(key)
        if found is None:
            found = self._build(name, schema, where)
            self._cache[key] = found
            if len(self._cache) > self.size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        if isinstance(found, TaskError):
            raise found
        return found

    def _build(self, name: str, schema: dict[str, Any], where: str) -> Task | TaskError:
        try:
            check_bounds(where, schema)
            return task_from_schema(name, schema, where=where, backend=self.backend)
        except TaskError as error:
            return error
        except RecursionError:
            return TaskError(where, "#", "the schema is too deeply nested to check")
