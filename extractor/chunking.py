"""Long documents: split into overlapping chunks on sentence boundaries, merge the chunks' results. Pure.

Splitting: a chunk ends at the last paragraph or sentence end (``.!?`` + space, or ``。！？``
in unspaced scripts, which need no space) that keeps it within ``max_chars``; failing that at a
word boundary (a space, or between two CJK characters); failing that anywhere that does not cut a
character sequence (combining marks, emoji ZWJ sequences). The next chunk starts ``overlap``
characters before the end, moved forward to the first sentence (else word) boundary there, so a
fact near a cut is seen whole by at least one chunk.

Merging, by the schema (each chunk's data is already valid and its spans are mapped to offsets in
the whole document):

* arrays (a top-level property holding a list): concatenated in document order, an item dropped
  when an earlier item has the same value and shares a span with it (the same mention seen by two
  overlapping chunks) or when neither has a span (equal numbers, enums, ungrounded values); the
  same value found at two different places is kept twice. Past the schema's ``maxItems`` the
  later items are dropped and listed in ``removed``.
* any other property (strings, numbers, objects): the first grounded value in document order, a
  value whose strings are all ``exact`` or ``normalized``. When no chunk has one, the first
  ``fuzzy`` value, then the first non-null value, then null. When two chunks give different
  grounded values, the earlier chunk wins.
"""

from __future__ import annotations

import bisect
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from extractor.grounding import Span, is_unspaced
from extractor.schema import escape

# A paragraph break, or a sentence end: terminator(s), closing quotes/brackets, then space;
# CJK terminators need no space after them.
_SENTENCE_END = re.compile(r"\n[ \t]*\n\s*|[.!?…]+[\"'”’)\]»]*\s+|[。！？；]+[”’」』）]*\s*|\n\s*")
_JOINERS = frozenset("\u200d\ufe0e\ufe0f")


@dataclass(frozen=True)
class Chunk:
    """One piece of the document: ``text[start:end]``."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class ChunkOutcome:
    """One chunk's accepted data, its spans (document offsets) and the values strict grounding dropped."""

    chunk: Chunk
    data: Mapping[str, Any]
    spans: Sequence[Span]
    removed: Sequence[Span] = ()


@dataclass
class Merged:
    """The merged data with its spans; ``removed`` adds the items cut at ``maxItems``."""

    data: dict[str, Any]
    spans: list[Span] = field(default_factory=list)
    removed: list[Span] = field(default_factory=list)


def split(text: str, *, max_chars: int, overlap: int) -> list[Chunk]:
    """Cut ``text`` into chunks of at most ``max_chars`` characters, consecutive ones sharing about ``overlap``.

    Whitespace-only chunks are left out. Raises ValueError on sizes that cannot make progress.
    """
    if max_chars < 1 or not 0 <= overlap < max_chars:
        raise ValueError(f"chunk sizes: need max_chars >= 1 and 0 <= overlap < max_chars, got {max_chars}, {overlap}")
    sentences = [m.end() for m in _SENTENCE_END.finditer(text)]
    chunks: list[Chunk] = []
    start = end = 0
    while start < len(text):
        # Each chunk must reach past the previous one, or it would repeat it.
        end = _cut(text, max(start, end), min(len(text), start + max_chars), sentences)
        if text[start:end].strip():
            chunks.append(Chunk(start, end, text[start:end]))
        if end >= len(text):
            break
        start = _next_start(text, start, end, overlap, sentences)
    return chunks


def _cut(text: str, start: int, limit: int, sentences: Sequence[int]) -> int:
    """The best end in ``(start, limit]``: a sentence, then a word, then a grapheme boundary."""
    if limit >= len(text):
        return len(text)
    last = bisect.bisect_right(sentences, limit) - 1
    if last >= 0 and sentences[last] > start:
        return sentences[last]
    for position in range(limit, start, -1):
        if _word_boundary(text, position):
            return position
    return _grapheme_boundary(text, limit, start)


def _next_start(text: str, start: int, end: int, overlap: int, sentences: Sequence[int]) -> int:
    if overlap == 0:
        return end
    low = max(start + 1, end - overlap)
    first = bisect.bisect_left(sentences, low)
    if first < len(sentences) and sentences[first] < end:
        return sentences[first]
    for position in range(low, end):
        if _word_boundary(text, position):
            return position
    return max(start + 1, _grapheme_boundary(text, low, start))


def _word_boundary(text: str, position: int) -> bool:
    """Between words: after whitespace before a non-space, or beside a character of an unspaced script."""
    before, after = text[position - 1], text[position]
    if after.isspace() or not _grapheme_ok(text, position):
        return False
    return before.isspace() or is_unspaced(before) or is_unspaced(after)


def _grapheme_ok(text: str, position: int) -> bool:
    after = text[position]
    return not (
        unicodedata.combining(after)
        or after in _JOINERS
        or text[position - 1] == "\u200d"
        or "\U0001f3fb" <= after <= "\U0001f3ff"  # skin-tone modifiers
    )


def _grapheme_boundary(text: str, position: int, floor: int) -> int:
    """``position`` moved back until it does not split a combining sequence (never to ``floor`` or below)."""
    moved = position
    while moved - 1 > floor and not _grapheme_ok(text, moved):
        moved -= 1
    return moved if moved > floor else position


def offset_spans(spans: Sequence[Span], by: int) -> list[Span]:
    """Spans moved ``by`` characters (chunk offsets -> document offsets)."""
    return [s if s.start is None or s.end is None else replace(s, start=s.start + by, end=s.end + by) for s in spans]


def merge(outcomes: Sequence[ChunkOutcome], *, schema: Mapping[str, Any]) -> Merged:
    """Merge the chunks' data (in document order) as the module docstring says."""
    merged = Merged(data={})
    keys = list(dict.fromkeys(key for o in outcomes for key in o.data))
    properties = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    for key in keys:
        pointer = "/" + escape(key)
        if any(isinstance(o.data.get(key), list) for o in outcomes):
            sub = properties.get(key) if isinstance(properties, Mapping) else None
            limit = sub.get("maxItems") if isinstance(sub, Mapping) else None
            _merge_array(merged, outcomes, key, pointer, limit if isinstance(limit, int) else None)
        else:
            _merge_scalar(merged, outcomes, key, pointer)
    merged.removed = [*(s for o in outcomes for s in o.removed), *merged.removed]
    return merged


def _merge_array(merged: Merged, outcomes: Sequence[ChunkOutcome], key: str, pointer: str, limit: int | None) -> None:
    kept: list[tuple[str, frozenset[tuple[int, int]]]] = []
    items: list[Any] = []
    for outcome in outcomes:
        values = outcome.data.get(key)
        if not isinstance(values, list):
            continue
        for index, item in enumerate(values):
            spans = _under(outcome.spans, f"{pointer}/{index}")
            identity = json.dumps(item, sort_keys=True, ensure_ascii=False)
            places = frozenset((s.start, s.end) for s in spans if s.start is not None and s.end is not None)
            if any(identity == other and (not places or not seen or places & seen) for other, seen in kept):
                continue
            moved = _rebase(spans, f"{pointer}/{index}", f"{pointer}/{len(items)}")
            if limit is not None and len(items) >= limit:
                merged.removed.extend(moved or [Span(f"{pointer}/{len(items)}", identity, None, None, "missing")])
                continue
            kept.append((identity, places))
            items.append(item)
            merged.spans.extend(moved)
    merged.data[key] = items


def _merge_scalar(merged: Merged, outcomes: Sequence[ChunkOutcome], key: str, pointer: str) -> None:
    present = [o for o in outcomes if key in o.data]
    ranked: list[tuple[int, int, ChunkOutcome]] = []
    for order, outcome in enumerate(present):
        if outcome.data[key] is None:
            continue
        statuses = {s.status for s in _under(outcome.spans, pointer)}
        rank = 2 if "missing" in statuses else 1 if "fuzzy" in statuses else 0
        ranked.append((rank, order, outcome))
    if not ranked:
        merged.data[key] = present[0].data[key]
        return
    _, _, chosen = min(ranked, key=lambda r: (r[0], r[1]))
    merged.data[key] = chosen.data[key]
    merged.spans.extend(_under(chosen.spans, pointer))


def _under(spans: Sequence[Span], pointer: str) -> list[Span]:
    return [s for s in spans if s.path == pointer or s.path.startswith(pointer + "/")]


def _rebase(spans: Sequence[Span], old: str, new: str) -> list[Span]:
    return [replace(s, path=new + s.path[len(old) :]) for s in spans]
