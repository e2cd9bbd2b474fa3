"""PDF -> text with a box per character, through PDFium (pypdfium2): its text layer, in its reading order.

Lines are joined as a reader reads them: a line break becomes a space, or nothing between two
wide (CJK) characters, so a value wrapped over two lines (or two pages) is one run of the text;
after a sentence's final punctuation, or above a gap of over half a line (a new paragraph), it
becomes a newline. A hyphen PDFium marks as a line-end hyphen is dropped and the word joined
("exam-/ple" -> "example"). The order is PDFium's (the content stream's); columns a producer
wrote out of order are not re-ordered. Boxes are relative to the crop box's top-left corner (what
a renderer draws); a page's /Rotate is not applied to them. Pages without a text layer (scans)
have no text: a PDF with none at all is refused, since extractor does not run OCR.
"""

from __future__ import annotations

import ctypes
import io
import math
import threading
import unicodedata
from array import array

import pypdfium2 as pdfium
import pypdfium2.raw as raw

from extractor.documents.model import PDF, Document, Limits, PageSize, Segment
from extractor.errors import DocumentError, DocumentTooLargeError, EncryptedDocumentError, NoTextLayerError

# PDFium is not thread-safe: every call into it, from any thread, holds this lock.
PDFIUM_LOCK = threading.Lock()
_NAN = float("nan")
# PDFium marks a line-end hyphen-minus U+0002 (U+FFFE in its text API); Chromium prints a soft hyphen as U+2010
_SOFT_HYPHENS = frozenset("\x02\ufffe\u00ad\u2010")
MAX_RENDER_PIXELS = 2400  # the longer side of a rendered page image


def _wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


_SENTENCE_ENDS = frozenset("。！？；：.!?;:")


def _separator(previous: str, following: str) -> str:
    """What a line break between two characters becomes: a newline after a sentence, else a space, else nothing.

    Nothing between two wide (CJK) characters: Chinese and Japanese wrap mid-word, without spaces.
    """
    if previous.isspace():
        return ""
    if previous in _SENTENCE_ENDS:
        return "\n"
    return "" if _wide(previous) and _wide(following) else " "


def open_pdf(data: bytes, *, limits: Limits) -> pdfium.PdfDocument:
    """The PDF opened, or a 4xx-mapped error: encrypted, not a PDF, or more pages than ``limits.max_pages``."""
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as error:
        code = getattr(error, "err_code", None)
        if code in (raw.FPDF_ERR_PASSWORD, raw.FPDF_ERR_SECURITY):
            raise EncryptedDocumentError("the PDF is encrypted (it needs a password); send a decrypted copy") from None
        raise DocumentError(f"not a readable PDF ({error}); check that the file is complete") from None
    pages = len(pdf)
    if pages > limits.max_pages:
        pdf.close()
        raise DocumentTooLargeError(
            f"the PDF has {pages} pages, over the limit of {limits.max_pages} (EXTRACTOR_MAX_DOCUMENT_PAGES); split it"
        )
    if pages == 0:
        pdf.close()
        raise DocumentError("the PDF has no pages")
    return pdf


def convert(data: bytes, *, limits: Limits, name: str | None = None) -> Document:
    """The PDF's text layer as one text, with a segment per line and a loose box per character."""
    with PDFIUM_LOCK:
        pdf = open_pdf(data, limits=limits)
        try:
            return _convert(pdf, limits=limits, name=name)
        finally:
            pdf.close()


def _convert(pdf: pdfium.PdfDocument, *, limits: Limits, name: str | None) -> Document:
    out: list[str] = []
    boxes = array("f")
    segments: list[Segment] = []
    sizes: list[PageSize] = []
    empty_pages: list[int] = []
    rect = raw.FS_RECTF()
    pending_break = False  # a line (or page) ended: the next character decides the separator
    joined = False  # the line ended in a dropped hyphen: join without a separator
    line_start = 0
    length = 0
    last: tuple[int, float, float] | None = None  # page, top and bottom of the last character with ink

    def end_line(page: int) -> None:
        nonlocal line_start
        if length > line_start:
            segments.append(Segment(line_start, length, page=page))
        line_start = length

    for index in range(len(pdf)):
        page_number = index + 1
        page = pdf[index]
        width, height = page.get_size()
        # boxes relative to the visible page (the crop box, which is what a renderer draws)
        left, _, _, top = page.get_cropbox()
        sizes.append(PageSize(round(width, 2), round(height, 2)))
        textpage = page.get_textpage()
        count = textpage.count_chars()
        before = length
        try:
            low = False  # the previous character was a surrogate pair's high half: this one is done
            for i in range(count):
                if low:
                    low = False
                    continue
                char, low = _char(textpage, i, count)
                if char in "\r\n":
                    end_line(page_number)
                    pending_break = True
                    continue
                if char in _SOFT_HYPHENS and _at_line_end(textpage, i, count):
                    joined = True  # PDFium's line-end hyphen: the word goes on on the next line
                    continue
                box = (_NAN, _NAN, _NAN, _NAN)
                if not (char.isspace() or raw.FPDFText_IsGenerated(textpage, i)):
                    raw.FPDFText_GetLooseCharBox(textpage, i, ctypes.byref(rect))
                    box = (rect.left - left, top - rect.top, rect.right - left, top - rect.bottom)
                if pending_break and length > 0:
                    # a gap of over half a line above this line (same page): a new paragraph
                    gap = last is not None and last[0] == page_number and box[1] - last[2] > 0.5 * (last[2] - last[1])
                    separator = "" if joined else "\n" if gap else _separator(out[-1], char)
                    if separator:
                        out.append(separator)
                        boxes.extend((_NAN, _NAN, _NAN, _NAN))
                        length += 1
                    line_start = length
                pending_break = joined = False
                boxes.extend(box)
                if box[0] == box[0]:  # not NaN: this character has ink
                    last = (page_number, box[1], box[3])
                out.append(char)
                length += 1
                if length > limits.max_chars:
                    raise DocumentTooLargeError(
                        f"the PDF's text is over {limits.max_chars} characters by page {page_number} "
                        "(EXTRACTOR_MAX_DOCUMENT_CHARS); split it"
                    )
        finally:
            textpage.close()
            page.close()
        end_line(page_number)
        pending_break = True
        if length == before:
            empty_pages.append(page_number)
    text = "".join(out)
    if not text.strip():
        raise NoTextLayerError(
            f"the PDF's {len(sizes)} page(s) have no text layer (a scan?); extractor does not run OCR: "
            "run OCR first (e.g. ocrmypdf -l chi_sim+eng) and send the result"
        )
    notes: tuple[str, ...] = ()
    if empty_pages:
        shown = ", ".join(map(str, empty_pages[:20])) + (" ..." if len(empty_pages) > 20 else "")
        notes = (f"pages without text (images or scans, not read): {shown}",)
    return Document(text, PDF, tuple(segments), tuple(sizes), boxes, name=name, notes=notes)


def _char(textpage: pdfium.PdfTextPage, i: int, count: int) -> tuple[str, bool]:
    """Character ``i`` (PDFium counts UTF-16 units: a pair is one character), and whether it took ``i + 1`` too."""
    code = raw.FPDFText_GetUnicode(textpage, i)
    if 0xD800 <= code < 0xDC00 and i + 1 < count:
        following = raw.FPDFText_GetUnicode(textpage, i + 1)
        if 0xDC00 <= following < 0xE000:
            return chr(0x10000 + ((code - 0xD800) << 10) + (following - 0xDC00)), True
    if 0xD800 <= code < 0xE000:
        return "\ufffd", False  # half a pair: a broken font map
    return chr(code), False


def _at_line_end(textpage: pdfium.PdfTextPage, i: int, count: int) -> bool:
    """Whether character ``i`` is the last of its line (the next is a line break, or the page ends)."""
    if i + 1 >= count:
        return False  # a hyphen at the very end of a page: kept (the next page may be anything)
    return chr(raw.FPDFText_GetUnicode(textpage, i + 1)) in "\r\n"


def render_page(data: bytes, *, page: int, limits: Limits, max_pixels: int = MAX_RENDER_PIXELS) -> bytes:
    """Page ``page`` (1-based) as a PNG whose longer side is at most ``max_pixels`` (the playground's image)."""
    with PDFIUM_LOCK:
        pdf = open_pdf(data, limits=limits)
        try:
            if not 1 <= page <= len(pdf):
                raise DocumentError(f"page {page} is not in the PDF (it has {len(pdf)} pages)")
            handle = pdf[page - 1]
            try:
                width, height = handle.get_size()
                scale = min(2.0, max_pixels / max(width, height, 1.0))
                if not math.isfinite(scale) or scale <= 0:
                    raise DocumentError(f"page {page} has no drawable size")
                image = handle.render(scale=scale).to_pil()
            finally:
                handle.close()
        finally:
            pdf.close()
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
