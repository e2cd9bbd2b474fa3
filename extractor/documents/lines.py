"""Lines of a page joined into one text, as a reader reads them, with a box and an OCR confidence per character.

A line break becomes a space, or nothing between two wide (CJK) characters, so a value wrapped
over two lines (or two pages) is one run of the text; after a sentence's final punctuation, or
above a gap of over half a line (a new paragraph), it becomes a newline. PDFium's text layer
(:mod:`extractor.documents.pdf`) and tesseract's words (:mod:`extractor.documents.ocr`) both
feed a :class:`Lines`.
"""

from __future__ import annotations

import unicodedata
from array import array
from itertools import chain, repeat

from extractor.documents.model import Limits, Segment
from extractor.errors import DocumentTooLargeError

NAN = float("nan")
NO_BOX = (NAN, NAN, NAN, NAN)
Rect = tuple[float, float, float, float]


def wide(char: str) -> bool:
    """Whether a character is wide (CJK): lines of them join with nothing between."""
    return unicodedata.east_asian_width(char) in ("W", "F")


SENTENCE_ENDS = frozenset("。！？；：.!?;:")


def separator(previous: str, following: str) -> str:
    """What a line break between two characters becomes: a newline after a sentence, else a space, else nothing.

    Nothing between two wide (CJK) characters: Chinese and Japanese wrap mid-word, without spaces.
    """
    if previous.isspace():
        return ""
    if previous in SENTENCE_ENDS:
        return "\n"
    return "" if wide(previous) and wide(following) else " "


class Lines:
    """The text being assembled, page after page: characters, their boxes and confidences, line segments."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.out: list[str] = []
        self.boxes = array("f")
        self.confidences = array("f")
        self.segments: list[Segment] = []
        self.pending_break = False  # a line (or page) ended: the next character decides the separator
        self.joined = False  # the line ended in a dropped hyphen: join without a separator
        self.paragraph = False  # the line ended a paragraph (OCR's): a newline, whatever the gap
        self.line_start = 0
        self.last: tuple[int, float, float] | None = None  # page, top and bottom of the last character with ink

    @property
    def length(self) -> int:
        """How many characters the text has so far."""
        return len(self.out)

    def end_line(self, page: int) -> None:
        """The current line of ``page`` ends: the next character added decides what the break becomes."""
        if self.length > self.line_start:
            self.segments.append(Segment(self.line_start, self.length, page=page))
        self.line_start = self.length
        self.pending_break = True

    def add(self, char: str, box: Rect, page: int, confidence: float = NAN) -> None:
        """Append a character of ``page`` with its box (NO_BOX: no ink) and OCR confidence (NaN: none)."""
        if self.pending_break and self.length > 0:
            # a gap of over half a line above this line (same page): a new paragraph
            last = self.last
            gap = last is not None and last[0] == page and box[1] - last[2] > 0.5 * (last[2] - last[1])
            joint = "" if self.joined else "\n" if gap or self.paragraph else separator(self.out[-1], char)
            if joint:
                self._append(joint, NO_BOX, NAN, page)
            self.line_start = self.length
        self.pending_break = self.joined = self.paragraph = False
        self._append(char, box, confidence, page)
        if box[0] == box[0]:  # not NaN: this character has ink
            self.last = (page, box[1], box[3])

    def run(self, chars: list[str], boxes: list[Rect], page: int) -> None:
        """:meth:`add` for each of ``chars`` (one line's, no confidence) with its box, the run's rest at once."""
        if not chars:
            return
        self.add(chars[0], boxes[0], page)
        if len(chars) == 1:
            return
        rest = boxes[1:]
        self.out.extend(chars[1:])
        self.boxes.extend(chain.from_iterable(rest))
        self.confidences.extend(repeat(NAN, len(rest)))
        inked = next((box for box in reversed(rest) if box[0] == box[0]), None)  # not NaN: ink
        if inked is not None:
            self.last = (page, inked[1], inked[3])
        self._check(page)

    def _append(self, char: str, box: Rect, confidence: float, page: int) -> None:
        self.out.append(char)
        self.boxes.extend(box)
        self.confidences.append(confidence)
        self._check(page)

    def _check(self, page: int) -> None:
        if len(self.out) > self.limits.max_chars:
            raise DocumentTooLargeError(
                f"the PDF's text is over {self.limits.max_chars} characters by page {page} "
                "(EXTRACTOR_MAX_DOCUMENT_CHARS); split it"
            )
