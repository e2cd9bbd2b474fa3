"""Values the pool already labelled, found again in a new text: hints for the model. Pure.

Worked examples show *how* to answer; a lexicon says *what* the pool's labellers called the
strings of this very text. Each grounded string of a pool line's output is remembered with its
field (``/company``: the path without array positions). For a text, every remembered value that
occurs in it is found, leftmost-longest and without overlaps, and shown with the field it was
labelled most often (ties: the first labelled). The model still decides: a hint is a string the
labellers once marked, not a fact about this text.

On CLUENER (Chinese, ten entity types) 64 % of the dev set's mentions occur in the pool as labelled
values (`bench/results/learning_curve.md`): names, companies and games recur across news texts,
as customer, product and place names recur in most analysts' documents.

Matching works on the text as written. A value must be at least ``MIN_CHARS`` characters, and a
value whose edge is a letter or digit of a spaced script (Latin, Cyrillic...) must sit on word
boundaries, so ``art`` is not found inside ``party``; CJK values match anywhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extractor.grounding import field_path, is_grounded_field, is_word_char, string_leaves

MIN_CHARS = 2
MAX_CHARS = 40  # longer labelled values are kept out: a lexicon of sentences only slows the scan


@dataclass(frozen=True)
class Hint:
    """One remembered value found in a text: where, and the field it was labelled as."""

    value: str
    field: str
    start: int


@dataclass(eq=False)
class Lexicon:
    """Labelled value -> how often each field got it, over a pool."""

    fields: dict[str, Counter[str]] = field(default_factory=dict)
    # the lengths of the values that start with each pair of characters, longest first: a text is
    # scanned once, trying at each place only the lengths of values that start there
    _lengths: dict[str, tuple[int, ...]] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, outputs: Iterable[Mapping[str, Any]], *, skip: frozenset[str] = frozenset()) -> Lexicon:
        """From pool outputs; ``skip``: field paths that are not grounded (enums, dates, ...)."""
        lexicon = cls()
        for output in outputs:
            for pointer, value in string_leaves(output):
                if is_grounded_field(pointer, skip):
                    lexicon.add(field_path(pointer), value, 1)
        return lexicon

    @staticmethod
    def keeps(value: str) -> bool:
        """Whether a labelled value of this length and shape is remembered at all."""
        return MIN_CHARS <= len(value) <= MAX_CHARS and value == value.strip()

    def add(self, path: str, value: str, count: int) -> None:
        if not self.keeps(value):
            return
        counts = self.fields.setdefault(value, Counter())
        counts[path] += count
        if counts[path] <= 0:
            del counts[path]
        self._lengths = None

    def lengths(self) -> dict[str, tuple[int, ...]]:
        """Each pair of first characters -> the lengths of the remembered values that start with it, longest first."""
        if self._lengths is None:
            by_start: dict[str, set[int]] = {}
            for value in self.fields:
                by_start.setdefault(value[:MIN_CHARS], set()).add(len(value))
            self._lengths = {start: tuple(sorted(sizes, reverse=True)) for start, sizes in by_start.items()}
        return self._lengths

    def find(self, text: str, *, without: Sequence[Mapping[str, Any]] = ()) -> list[Hint]:
        """Remembered values in ``text``, in text order; ``without``: pool outputs left out (a line, its document)."""
        own = Counter((field_path(p), v) for output in without for p, v in string_leaves(output))
        hints: list[Hint] = []
        lengths = self.lengths()
        i = 0
        while i < len(text):
            for size in lengths.get(text[i : i + MIN_CHARS], ()):
                j = i + size
                if j > len(text):
                    continue
                label = self._label(text[i:j], own)
                if label is not None and _bounded(text, i, j):
                    hints.append(Hint(text[i:j], label, i))
                    i = j
                    break
            else:
                i += 1
        return hints

    def _label(self, value: str, own: Counter[tuple[str, str]]) -> str | None:
        counts = self.fields.get(value)
        if not counts:
            return None
        left = {path: n - own[(path, value)] for path, n in counts.items()}
        best = max(left.values())
        return next(path for path, n in left.items() if n == best) if best > 0 else None


def _bounded(text: str, start: int, end: int) -> bool:
    before = start == 0 or not (is_word_char(text[start]) and is_word_char(text[start - 1]))
    after = end == len(text) or not (is_word_char(text[end - 1]) and is_word_char(text[end]))
    return before and after
