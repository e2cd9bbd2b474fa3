"""Find each extracted string in the source text -> character spans. Pure functions.

Offsets are Python string indices (code points) into the original text, so
``text[start:end] == value`` holds for every ``exact`` span, on any script.

Each value is looked for in three ways, the first that finds it wins:

* ``exact``: the value occurs verbatim;
* ``normalized``: it occurs once case, Unicode composition (NFD) and runs of whitespace are
  ignored (``new york`` in ``New  York``; ``Café`` in ``Cafe\u0301``);
* ``fuzzy``: a near match (rapidfuzz's best partial alignment, then the Indel ratio of the
  matched text >= :data:`FUZZY_THRESHOLD` out of 100, case and accents ignored, values of at
  least :data:`FUZZY_MIN_CHARS` characters) such as ``Lago Vista, Tennessee`` for ``Lago Vista
  Tennessee``; the span is the text that matched, widened or narrowed to whole words in spaced
  scripts. Only the best match is reported, so repeats are not spread over occurrences.

Otherwise the value is ``missing``. Strict grounding treats ``fuzzy`` like ``missing``: the
value is not in the text as written.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rapidfuzz import fuzz

from extractor.schema import escape, walk_fields

SpanStatus = Literal["exact", "normalized", "fuzzy", "missing"]
GroundingPolicy = Literal["strict", "flag", "off"]
UNGROUNDED: frozenset[str] = frozenset({"fuzzy", "missing"})
"""Statuses strict grounding rejects: the value is not in the text as written."""
FUZZY_THRESHOLD = 90.0
FUZZY_MIN_CHARS = 3
_INDEX = re.compile(r"/\d+(?=/|$)")
# Scripts written without spaces between words: each character is a word boundary there.
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]"
)


@dataclass(frozen=True)
class Span:
    """Where one extracted string was found (start/end are None when missing)."""

    path: str
    value: str
    start: int | None
    end: int | None
    status: SpanStatus
    confidence: float | None = None
    # A typed value read from this evidence (extractor.values), and its currency or unit.
    normalized: Any = None
    unit: str | None = None


def scalar_leaves(data: Any, pointer: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(json_pointer, value)`` for every non-null scalar in ``data``, in document order."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            yield from scalar_leaves(value, f"{pointer}/{escape(str(key))}")
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from scalar_leaves(value, f"{pointer}/{index}")
    elif data is not None:
        yield pointer, data


def string_leaves(data: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """Yield ``(json_pointer, string)`` for every string value in ``data``."""
    return ((p, v) for p, v in scalar_leaves(data, pointer) if isinstance(v, str))


def field_path(pointer: str) -> str:
    """A data pointer without array indices: ``/conditions/0/value`` -> ``/conditions/value``."""
    return _INDEX.sub("", pointer)


def ungrounded_paths(schema: Mapping[str, Any]) -> frozenset[str]:
    """Field paths (see :func:`field_path`) whose schema says ``"x-grounded": false``.

    Such fields hold normalized values (dates, numbers, enums) that need not occur verbatim.
    """
    found: set[str] = set()
    if '"x-grounded"' in json.dumps(schema, default=str):  # nothing to find: no walk at all

        def visit(path: str, node: Mapping[str, Any]) -> bool:
            if node.get("x-grounded") is False:
                found.add(path)
            return False

        walk_fields(schema, visit)
    return frozenset(found)


def is_grounded_field(pointer: str, skipped: frozenset[str]) -> bool:
    """Whether the value at ``pointer`` must be found in the text."""
    path = field_path(pointer)
    return not any(path == s or path.startswith(s + "/") for s in skipped)


@functools.lru_cache(maxsize=512)  # a passage is grounded again at each attempt and for each field read from it
def _normalize(text: str, *, marks: bool = True) -> tuple[str, tuple[int, ...]]:
    """Decompose (NFD), lower-case, collapse whitespace; return the new text and each char's original index.

    ``marks=False`` also drops combining marks (accents), for the fuzzy comparison.
    """
    out: list[str] = []
    index: list[int] = []
    previous_space = False
    for i, char in enumerate(text):
        if char.isspace():
            if previous_space:
                continue
            previous_space = True
            out.append(" ")
            index.append(i)
            continue
        previous_space = False
        for piece in unicodedata.normalize("NFD", char):
            if not marks and unicodedata.combining(piece):
                continue
            lowered = piece.lower()
            out.append(lowered if len(lowered) == 1 else piece)
            index.append(i)
    return "".join(out), tuple(index)


def _occurrences(haystack: str, needle: str) -> Iterator[int]:
    start = haystack.find(needle)
    while start != -1:
        yield start
        start = haystack.find(needle, start + 1)


def _pick(candidates: list[tuple[int, int]], used: set[tuple[int, int]]) -> tuple[int, int] | None:
    """The first span not already given to an equal value (repeats map to distinct spans)."""
    for span in candidates:
        if span not in used:
            return span
    return candidates[0] if candidates else None


def locate(text: str, data: Any, *, skip: frozenset[str] = frozenset()) -> list[Span]:
    """Locate every string of ``data`` in ``text``; fields under ``skip`` paths are left out."""
    view = _Views(text)
    used: set[tuple[int, int]] = set()
    spans: list[Span] = []
    for pointer, value in string_leaves(data):
        if not is_grounded_field(pointer, skip):
            continue
        spans.append(_locate_one(view, pointer, value, used))
    return spans


class _Views:
    """The text as written, normalized, and (built on first need) without accents for fuzzy matching."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.normalized, self.index = _normalize(text)
        self._loose: tuple[str, tuple[int, ...]] | None = None

    @property
    def loose(self) -> tuple[str, tuple[int, ...]]:
        if self._loose is None:
            self._loose = _normalize(self.text, marks=False)
        return self._loose


def _locate_one(view: _Views, pointer: str, value: str, used: set[tuple[int, int]]) -> Span:
    text, normalized, index = view.text, view.normalized, view.index
    if value and (hit := _pick([(s, s + len(value)) for s in _occurrences(text, value)], used)):
        used.add(hit)
        return Span(pointer, value, hit[0], hit[1], "exact")
    needle, _ = _normalize(value.strip())
    if needle:
        candidates = [
            (index[s], index[s + len(needle) - 1] + 1)
            for s in _occurrences(normalized, needle)
            if _on_char_boundary(index, s) and _on_char_boundary(index, s + len(needle))
        ]
        if hit := _pick(candidates, used):
            used.add(hit)
            return Span(pointer, value, hit[0], hit[1], "normalized")
        if hit := _fuzzy(text, *view.loose, _normalize(value.strip(), marks=False)[0]):
            return Span(pointer, value, hit[0], hit[1], "fuzzy")
    return Span(pointer, value, None, None, "missing")


def _fuzzy(text: str, normalized: str, index: Sequence[int], needle: str) -> tuple[int, int] | None:
    """The original-text span that best matches ``needle``, if close enough (accents and case ignored)."""
    if len(needle) < FUZZY_MIN_CHARS or len(needle) > len(normalized):
        return None
    # The alignment compares windows as long as the needle; a word-snapped span can score higher
    # (``Dijonn`` vs the window ``dijon.``), so it is found with a looser cutoff, then re-scored.
    found = fuzz.partial_ratio_alignment(needle, normalized, score_cutoff=FUZZY_THRESHOLD - 15)
    if found is None or found.dest_end <= found.dest_start:
        return None
    start, end = index[found.dest_start], index[found.dest_end - 1] + 1
    best: tuple[float, tuple[int, int]] | None = None
    # Never cut a word of a spaced script: widen or narrow each end to a word boundary.
    lefts = {_word_start(text, start), _next_word_start(text, start)}
    rights = {_word_end(text, end), _previous_word_end(text, end)}
    for left in lefts:
        for right in rights:
            left_, right_ = _strip_span(text, left, right)
            if right_ <= left_:
                continue
            score = fuzz.ratio(needle, _normalize(text[left_:right_], marks=False)[0])
            if score >= FUZZY_THRESHOLD and (best is None or score > best[0]):
                best = (score, (left_, right_))
    return best[1] if best else None


def is_unspaced(char: str) -> bool:
    """Whether ``char`` belongs to a script written without spaces between words (CJK, Thai...)."""
    return bool(_UNSPACED.match(char))


def has_unspaced(text: str) -> bool:
    """Whether ``text`` holds a character of a script written without spaces between words."""
    return _UNSPACED.search(text) is not None


def split_unspaced(word: str) -> list[str]:
    """``word`` with each character of an unspaced script on its own: ``故宫Beijing`` -> ``故``, ``宫``, ``Beijing``."""
    if not has_unspaced(word):  # the common case, without a Python step per character
        return [word] if word else []
    pieces: list[str] = []
    run = ""
    for char in word:
        if is_unspaced(char):
            if run:
                pieces.append(run)
                run = ""
            pieces.append(char)
        else:
            run += char
    if run:
        pieces.append(run)
    return pieces


def is_word_char(char: str) -> bool:
    """A letter or digit of a spaced script: words of such characters are never cut in two."""
    return char.isalnum() and not is_unspaced(char)


def _inside_word(text: str, position: int) -> bool:
    return 0 < position < len(text) and is_word_char(text[position - 1]) and is_word_char(text[position])


def _word_start(text: str, position: int) -> int:
    while _inside_word(text, position):
        position -= 1
    return position


def _next_word_start(text: str, position: int) -> int:
    moved = position
    while _inside_word(text, moved):
        moved += 1
    return moved


def _word_end(text: str, position: int) -> int:
    while _inside_word(text, position):
        position += 1
    return position


def _previous_word_end(text: str, position: int) -> int:
    moved = position
    while _inside_word(text, moved):
        moved -= 1
    return moved


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _on_char_boundary(index: Sequence[int], position: int) -> bool:
    """Whether ``position`` in the normalized text does not split one original character."""
    inside = 0 < position < len(index)
    return not inside or index[position - 1] != index[position]


def missing_messages(spans: list[Span], text: str = "") -> list[str]:
    """One feedback line per value that is not in the text as written (``missing`` or ``fuzzy``).

    A fuzzy value's line quotes the text it nearly matches (``text`` is the source text).
    """
    lines: list[str] = []
    for span in spans:
        if span.status not in UNGROUNDED:
            continue
        line = f"{span.path or '/'}: {span.value!r} does not occur in the text"
        if span.status == "fuzzy" and text and span.start is not None and span.end is not None:
            line += f"; the text says {text[span.start : span.end]!r}: copy it exactly"
        else:
            line += "; copy values exactly from the text"
        lines.append(line)
    return lines
