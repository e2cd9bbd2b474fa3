"""How an extracted value compares with an expected one: normalized text, scalars by field path. Pure.

A leaf is a scalar in the data, named by its JSON pointer without array indices
(``/artist/0`` -> ``/artist``), so a gold list ``{"artist": ["x"]}`` and a predicted scalar
``{"artist": "x"}`` agree. Values are compared after normalizing case and surrounding
whitespace and punctuation; nulls and values empty after normalizing are not values. What the
metrics (:mod:`extractor.jobs.metrics`), the diagnosis and the calibration's labels count.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

from extractor.schema import escape

Leaf = tuple[str, str]  # (field path, normalized value)


def normalize(value: Any) -> str:
    """Case-folded text without surrounding whitespace or punctuation (numbers as JSON)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = value if isinstance(value, str) else json.dumps(value)
    text = unicodedata.normalize("NFKC", text).casefold()
    start, end = 0, len(text)
    while start < end and _is_edge(text[start]):
        start += 1
    while end > start and _is_edge(text[end - 1]):
        end -= 1
    return text[start:end]


def _is_edge(char: str) -> bool:
    return char.isspace() or unicodedata.category(char).startswith("P")


def leaves(data: Any, pointer: str = "") -> Iterator[Leaf]:
    """``(field path, normalized value)`` for every non-null scalar in ``data``."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            yield from leaves(value, f"{pointer}/{escape(str(key))}")
    elif isinstance(data, list):
        for value in data:
            yield from leaves(value, pointer)
    elif data is not None:
        value = normalize(data)
        if value:
            yield pointer, value
