"""A confidence for every value, from the engine's own token probabilities. Pure functions.

The engine reports, for each token it generated, where the token ends in the answer and its
log-probability under the constraint: the grammar's mask is applied before the softmax, so a
token the schema or the text forced has probability 1 and adds nothing, and a choice between
few allowed tokens is scored among those only.

A value is decided by the tokens from the end of the previous value to the end of its own:
the choice to go on (another item rather than closing the list, which key comes next), the
value itself, and the token that closes it (where the value ends is a decision too). The raw
confidence is the probability of that whole stretch, ``exp`` of the summed log-probabilities.
A sum, never a mean: tokens that were forced must not raise it, and a long value is as sure
as its least sure choices allow. Nulls are not values; the tokens of a null go with it (the
decision to leave a field empty is not charged to the next value).

The raw figure is a model probability, not yet a frequency of being right:
:mod:`extractor.review.calibration` maps it to one, fitted on the task's pool.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from extractor.grounding import scalar_leaves
from extractor.schema import escape

_SPACE = re.compile(r"[ \t\n\r]*")
# The standard library's own readers: a string after its opening quote, and any scalar at an offset.
_scan_string: Any = getattr(json.decoder, "scanstring")  # noqa: B009 - untyped in typeshed
_scan_scalar: Any = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009


@dataclass(frozen=True)
class Leaf:
    """A scalar in the raw answer: its JSON pointer and where its text ends (a null is a leaf too)."""

    pointer: str
    end: int
    is_null: bool


def leaves(raw: str) -> list[Leaf]:
    """Every scalar of the JSON text ``raw`` in order, with where it ends; [] when ``raw`` is not JSON.

    Positions are code-point offsets into ``raw``. Pointers follow RFC 6901 (``~0``, ``~1``).
    """
    found: list[Leaf] = []
    try:
        end = _walk(raw, _SPACE.match(raw, 0).end(), "", found)  # type: ignore[union-attr]
    except (ValueError, IndexError, StopIteration):
        return []
    if raw[end:].strip():
        return []
    return found


def _walk(s: str, i: int, pointer: str, found: list[Leaf]) -> int:
    """Read the value at ``s[i]`` (no leading space), record its scalars, return where it ends."""
    opener = s[i]
    if opener in "{[":
        closer = "}" if opener == "{" else "]"
        i = _skip(s, i + 1)
        if s[i] == closer:
            return i + 1
        index = 0
        while True:
            if opener == "{":
                if s[i] != '"':
                    raise ValueError(f"a key expected at {i}")
                key, i = _scan_string(s, i + 1)
                i = _skip(s, i)
                if s[i] != ":":
                    raise ValueError(f"':' expected at {i}")
                child = f"{pointer}/{escape(key)}"
                i = _skip(s, i + 1)
            else:
                child = f"{pointer}/{index}"
            i = _skip(s, _walk(s, i, child, found))
            index += 1
            if s[i] == closer:
                return i + 1
            if s[i] != ",":
                raise ValueError(f"',' or {closer!r} expected at {i}")
            i = _skip(s, i + 1)
    value, end = _scan_scalar(s, i)
    found.append(Leaf(pointer, end, value is None))
    return int(end)


def _skip(s: str, i: int) -> int:
    return _SPACE.match(s, i).end()  # type: ignore[union-attr]


def token_starts(ends: Sequence[int]) -> Iterator[int]:
    """Where each token starts: where the one before it ended (0 for the first)."""
    previous = 0
    for end in ends:
        yield previous
        previous = max(previous, end)


def value_logprobs(raw: str, ends: Sequence[int], logprobs: Sequence[float]) -> dict[str, float]:
    """Each non-null scalar's summed log-probability (see the module's docstring), by pointer.

    ``ends`` and ``logprobs`` are per generated token (:class:`~extractor.engines.base.Generation`'s
    ``token_ends`` and ``token_logprobs``). A token belongs to the value whose stretch it starts in.
    Empty when there are no token probabilities or ``raw`` is not one JSON value.
    """
    if not ends or len(ends) != len(logprobs):
        return {}
    found = leaves(raw)
    if not found:
        return {}
    sums = [0.0] * len(found)
    k = 0
    for start, logprob in zip(token_starts(ends), logprobs, strict=True):
        while k < len(found) and start >= found[k].end:
            k += 1
        if k == len(found):
            break  # the closing brackets after the last value
        if math.isfinite(logprob):
            sums[k] += logprob
        else:
            sums[k] += -1e4  # a token the model ranked impossible: not a value to trust
    return {leaf.pointer: total for leaf, total in zip(found, sums, strict=True) if not leaf.is_null}


def raw_confidences(raw: str, ends: Sequence[int], logprobs: Sequence[float]) -> dict[str, float]:
    """Each non-null scalar's raw confidence: the probability of the tokens that decided it."""
    return {pointer: math.exp(total) for pointer, total in value_logprobs(raw, ends, logprobs).items()}


def lowest(confidences: dict[str, float]) -> float:
    """A result's confidence: its least sure value's (1.0 when it holds no value)."""
    return min(confidences.values(), default=1.0)


def follow(before: Any, after: Any, confidences: dict[str, float]) -> dict[str, float]:
    """``confidences`` of ``before``'s values, keyed by their pointers in ``after`` (values dropped or nulled).

    ``after`` keeps ``before``'s values in order, less some: each of its values takes the
    confidence of the next equal value of ``before``.
    """
    old = list(scalar_leaves(before))
    moved: dict[str, float] = {}
    i = 0
    for pointer, value in scalar_leaves(after):
        while i < len(old) and old[i][1] != value:
            i += 1
        if i == len(old):
            break
        if old[i][0] in confidences:
            moved[pointer] = confidences[old[i][0]]
        i += 1
    return moved
