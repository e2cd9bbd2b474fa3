"""What a converted document is: its text, and a map from offsets in that text back into the document."""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from extractor.config import Settings

PDF = "application/pdf"
HTML = "text/html"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
TEXT = "text/plain"
MEDIA_TYPES = (PDF, HTML, DOCX, TEXT)


@dataclass(frozen=True)
class Ocr:
    """Which PDF pages are read by OCR (tesseract), in which languages, at what cost.

    ``mode``: "auto" reads the pages without a text layer, "always" every page (its text layer
    ignored), "off" none. ``languages``: tesseract's codes joined by "+". A page is drawn at
    ``dpi`` (its longer side at most ``max_pixels``) and read within ``timeout_s`` seconds, by
    ``workers`` tesseract processes at once (one core each).
    """

    mode: str = "auto"
    languages: str = "eng+chi_sim"
    dpi: int = 300
    max_pixels: int = 5000
    timeout_s: float = 30.0
    workers: int = 2


@dataclass(frozen=True)
class Limits:
    """What a document may cost before it is refused (each refusal is a 4xx naming the limit), and its OCR."""

    max_pages: int = 1000
    max_chars: int = 1_000_000
    # DOCX: the sum of the declared sizes of the zip's members, and how many there may be (zip bombs)
    max_unzipped_bytes: int = 64 * 1024 * 1024
    max_zip_entries: int = 5000
    ocr: Ocr = field(default_factory=Ocr)

    @classmethod
    def from_settings(cls, settings: Settings, *, ocr_languages: str | None = None) -> Limits:
        """The limits a service or CLI runs under (EXTRACTOR_MAX_DOCUMENT_PAGES, _CHARS, EXTRACTOR_OCR*).

        ``ocr_languages``: a task's own (``x-extractor.ocr_languages``), over EXTRACTOR_OCR_LANGUAGES.
        """
        ocr = Ocr(
            mode=settings.ocr,
            languages=ocr_languages or settings.ocr_languages,
            dpi=settings.ocr_dpi,
            timeout_s=settings.ocr_timeout_s,
            workers=settings.ocr_workers,
        )
        return cls(max_pages=settings.max_document_pages, max_chars=settings.max_document_chars, ocr=ocr)


@dataclass(frozen=True)
class Segment:
    """A run ``text[start:end]`` that comes from one place: a line of a PDF page, an HTML element, a DOCX paragraph.

    ``page`` is 1-based (PDF); ``element`` is an XPath (HTML) or a body path (DOCX);
    ``paragraph`` is the 0-based paragraph index in document order (DOCX, table cells included).
    """

    start: int
    end: int
    page: int | None = None
    element: str | None = None
    paragraph: int | None = None


@dataclass(frozen=True)
class PageSize:
    """A PDF page's size in points (1/72 inch)."""

    width: float
    height: float


@dataclass(frozen=True)
class Box:
    """A rectangle on a page, in points from the page's top-left corner (as the page is drawn)."""

    page: int
    x0: float
    y0: float
    x1: float
    y1: float


@dataclass(frozen=True)
class Location:
    """Where a span of the text sits in the document."""

    pages: tuple[int, ...] = ()
    boxes: tuple[Box, ...] = ()  # PDF: one per line the span touches
    elements: tuple[str, ...] = ()
    paragraphs: tuple[int, ...] = ()
    # PDF pages read by OCR: the lowest word confidence (0-1) among the span's characters; None: no OCR'd character
    ocr_confidence: float | None = None


@dataclass(frozen=True, eq=False)
class Document:
    """A document converted to text, with where each piece of the text came from.

    ``segments`` are sorted and disjoint; characters the conversion put in (line and paragraph
    breaks) belong to none. ``boxes`` (PDF) holds four floats per character of ``text``
    (x0, y0, x1, y1, top-left origin), NaN for characters with no ink of their own.
    ``confidences`` (a PDF with pages read by OCR) holds one float per character: the OCR's
    confidence (0-1) in the word the character is part of, NaN for characters from a text layer
    or put in by the conversion. ``ocr_pages`` lists the pages read by OCR (1-based).
    """

    text: str
    media_type: str
    segments: tuple[Segment, ...] = ()
    pages: tuple[PageSize, ...] = ()
    boxes: array[float] | None = None
    name: str | None = None
    notes: tuple[str, ...] = ()
    confidences: array[float] | None = None
    ocr_pages: tuple[int, ...] = ()
    _starts: tuple[int, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", tuple(s.start for s in self.segments))

    def locate(self, start: int, end: int) -> Location:
        """Where ``text[start:end]`` sits: pages and one box per line (PDF), elements, paragraphs."""
        if start >= end:
            return Location()
        first = max(0, bisect.bisect_right(self._starts, start) - 1)
        pages: list[int] = []
        boxes: list[Box] = []
        elements: list[str] = []
        paragraphs: list[int] = []
        for segment in self.segments[first:]:
            if segment.start >= end:
                break
            lo, hi = max(start, segment.start), min(end, segment.end)
            if lo >= hi:
                continue
            if segment.page is not None and segment.page not in pages:
                pages.append(segment.page)
            if segment.element is not None and segment.element not in elements:
                elements.append(segment.element)
            if segment.paragraph is not None and segment.paragraph not in paragraphs:
                paragraphs.append(segment.paragraph)
            box = self._box(segment.page, lo, hi) if segment.page is not None else None
            if box is not None:
                boxes.append(box)
        return Location(tuple(pages), tuple(boxes), tuple(elements), tuple(paragraphs), self._confidence(start, end))

    def _confidence(self, start: int, end: int) -> float | None:
        """The lowest OCR confidence among ``text[start:end]``'s characters, None when none was OCR'd."""
        if self.confidences is None:
            return None
        found = [c for c in self.confidences[start:end] if c == c]  # NaN: not OCR'd
        return round(min(found), 4) if found else None

    def _box(self, page: int, lo: int, hi: int) -> Box | None:
        """The union of the ink boxes of ``text[lo:hi]`` (one line of one page), or None when none has ink."""
        if self.boxes is None:
            return None
        x0 = y0 = float("inf")
        x1 = y1 = float("-inf")
        for i in range(lo, hi):
            a, b, c, d = self.boxes[4 * i : 4 * i + 4]
            if a != a:  # NaN: no ink
                continue
            x0, y0, x1, y1 = min(x0, a), min(y0, b), max(x1, c), max(y1, d)
        if x0 == float("inf"):
            return None
        return Box(page, round(x0, 2), round(y0, 2), round(x1, 2), round(y1, 2))
