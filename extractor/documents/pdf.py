"""PDF -> text with a box per character, through PDFium (pypdfium2): its text layer, in its reading order.

Lines are joined as a reader reads them (:mod:`extractor.documents.lines`). A hyphen PDFium
marks as a line-end hyphen is dropped and the word joined ("exam-/ple" -> "example"). The order
is PDFium's (the content stream's); columns a producer wrote out of order are not re-ordered.
Boxes are relative to the crop box's top-left corner (what a renderer draws); a page's /Rotate
is not applied to them. Pages without a text layer (scans) are read by OCR (``EXTRACTOR_OCR``,
:mod:`extractor.documents.ocr`): the words' boxes become the characters' boxes, in the same
frame; a PDF with no text at all, OCR'd or not, is refused.
"""

from __future__ import annotations

import ctypes
import io
import math
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import pypdfium2 as pdfium
import pypdfium2.raw as raw

from extractor.documents import ocr
from extractor.documents.lines import NO_BOX, Lines
from extractor.documents.model import PDF, Document, Limits, PageSize
from extractor.errors import DocumentError, DocumentTooLargeError, EncryptedDocumentError, NoTextLayerError

# PDFium is not thread-safe: every call into it, from any thread, holds this lock.
PDFIUM_LOCK = threading.Lock()
# PDFium marks a line-end hyphen-minus U+0002 (U+FFFE in its text API); Chromium prints a soft hyphen as U+2010
_SOFT_HYPHENS = frozenset("\x02\ufffe\u00ad\u2010")
MAX_RENDER_PIXELS = 2400  # the longer side of a rendered page image


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
    """The PDF's text layer as one text, with a segment per line and a loose box per character.

    Pages without a text layer (every page under ``limits.ocr.mode == "always"``) are read by OCR
    (:mod:`extractor.documents.ocr`), ``limits.ocr.workers`` pages at once; PDFium's lock is let go
    while tesseract reads.
    """
    with PDFIUM_LOCK:
        pdf = open_pdf(data, limits=limits)
    try:
        return _convert(pdf, limits=limits, name=name)
    finally:
        with PDFIUM_LOCK:
            pdf.close()


def _convert(pdf: pdfium.PdfDocument, *, limits: Limits, name: str | None) -> Document:
    text = Lines(limits)
    sizes: list[PageSize] = []
    empty_pages: list[int] = []
    ocr_pages: list[int] = []
    timed_out: list[int] = []
    with PDFIUM_LOCK:
        count = len(pdf)
    # pages in order, each a text layer's items or tesseract's words to come; at most ``workers``
    # pages are being read by OCR at once (their images held), and at most 4 * workers pages wait
    # for the first to be read (their text layers held)
    waiting: deque[tuple[int, list[_Item], Future[list[ocr.Word] | None] | None, ocr.Placement | None]] = deque()
    workers = max(1, limits.ocr.workers)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="ocr")

    def settle(
        page_number: int,
        layer: list[_Item],
        words: Future[list[ocr.Word] | None] | None,
        placement: ocr.Placement | None,
    ) -> None:
        before = text.length
        if words is None:
            _add_layer(text, layer, page_number)
        else:
            read = words.result()
            if read is None:
                timed_out.append(page_number)
            else:
                assert placement is not None
                ocr_pages.append(page_number)
                ocr.add_words(text, read, placement, page_number)
        text.end_line(page_number)
        if text.length == before:
            empty_pages.append(page_number)

    try:
        for index in range(count):
            page_number = index + 1
            layer, image = _read_page(pdf, index, limits=limits, sizes=sizes)
            if image is None:
                waiting.append((page_number, layer, None, None))
            else:
                pixels, placement = image
                words = pool.submit(
                    ocr.recognize,
                    pixels,
                    languages=limits.ocr.languages,
                    dpi=round(72 * placement.scale),
                    timeout_s=limits.ocr.timeout_s,
                )
                waiting.append((page_number, [], words, placement))
            while waiting and (
                waiting[0][2] is None
                or waiting[0][2].done()
                or len(waiting) > 4 * workers
                or sum(1 for w in waiting if w[2] is not None) > workers
            ):
                settle(*waiting.popleft())
        while waiting:
            settle(*waiting.popleft())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    joined = "".join(text.out)
    past = f"pages where OCR ran past {limits.ocr.timeout_s:g} s (EXTRACTOR_OCR_TIMEOUT_S), not read"
    unread = [f"{past}: {_pages(timed_out)}"] if timed_out else []
    if not joined.strip():
        if limits.ocr.mode == "off":
            raise NoTextLayerError(
                f"the PDF's {len(sizes)} page(s) have no text layer (a scan?) and OCR is off (EXTRACTOR_OCR=off): "
                "set EXTRACTOR_OCR=auto, or run OCR first (e.g. ocrmypdf -l chi_sim+eng) and send the result"
            )
        raise NoTextLayerError(
            f"the PDF's {len(sizes)} page(s) have no text layer and OCR ({limits.ocr.languages}) read no text "
            "either (blank pages, or images without writing)" + (f"; {'; '.join(unread)}" if unread else "")
        )
    notes: list[str] = []
    if ocr_pages:
        notes.append(f"pages read by OCR (tesseract, {limits.ocr.languages}): {_pages(ocr_pages)}")
    notes += unread
    blank = [p for p in empty_pages if p in ocr_pages]
    if blank:
        notes.append(f"pages where OCR read no text (blank, or images without writing): {_pages(blank)}")
    skipped = [p for p in empty_pages if p not in ocr_pages and p not in timed_out]
    if skipped:
        notes.append(f"pages without text (images or scans, not read): {_pages(skipped)}")
    return Document(
        joined,
        PDF,
        tuple(text.segments),
        tuple(sizes),
        text.boxes,
        name=name,
        notes=tuple(notes),
        confidences=text.confidences if ocr_pages else None,
        ocr_pages=tuple(ocr_pages),
    )


def _read_page(
    pdf: pdfium.PdfDocument, index: int, *, limits: Limits, sizes: list[PageSize]
) -> tuple[list[_Item], tuple[bytes, ocr.Placement] | None]:
    """Page ``index``'s text layer, and its image when OCR is to read it (its size appended to ``sizes``)."""
    with PDFIUM_LOCK:
        page = pdf[index]
        try:
            width, height = page.get_size()
            sizes.append(PageSize(round(width, 2), round(height, 2)))
            layer = _layer(page) if limits.ocr.mode != "always" else []
            if limits.ocr.mode == "always" or (limits.ocr.mode == "auto" and not any(c.strip() for c, _ in layer)):
                return layer, ocr.draw(page, ocr=limits.ocr)
            return layer, None
        finally:
            page.close()


def _pages(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers[:20])) + (" ..." if len(numbers) > 20 else "")


# one item of a page's text layer: a character and its box, "\n" (a line break) or "-" with a NaN box at
# a line end (PDFium's line-end hyphen: the word goes on on the next line)
_Item = tuple[str, tuple[float, float, float, float]]
_JOIN = ("\x02", NO_BOX)


def _layer(page: pdfium.PdfPage) -> list[_Item]:
    """The page's text layer: each character with its box (relative to the crop box's top-left corner).

    Characters PDFium generated (the spaces and line breaks it inserts) and glyphs without area have no box:
    PDFium gives a generated character an empty box at its origin. The page's text is read in one call
    (:func:`_codes`) and each box through one reused buffer: a contract's text layer costs a third of
    what a call per character for its text, its kind and its box did.
    """
    # boxes relative to the visible page (the crop box, which is what a renderer draws)
    left, _, _, top = page.get_cropbox()
    textpage = page.get_textpage()
    handle = textpage.raw
    loose_box = raw.FPDFText_GetLooseCharBox
    rect = raw.FS_RECTF()
    into, box_floats = ctypes.byref(rect), memoryview(rect).cast("B").cast("f")  # left, top, right, bottom
    items: list[_Item] = []
    append = items.append
    try:
        count = raw.FPDFText_CountChars(handle)
        codes = _codes(handle, count)
        low = False  # the previous character was a surrogate pair's high half: this one is done
        for i, code in enumerate(codes):
            if low:
                low = False
                continue
            char, low = _char(codes, i) if 0xD800 <= code < 0xE000 else (chr(code), False)
            if char in "\r\n":
                append(("\n", NO_BOX))
            elif char in _SOFT_HYPHENS and i + 1 < count and codes[i + 1] in _LINE_BREAKS:
                append(_JOIN)  # a hyphen at a line's end (not at the page's: the next page may be anything)
            elif char.isspace():
                append((char, NO_BOX))
            else:
                loose_box(handle, i, into)
                x0, y0, x1, y1 = box_floats
                empty = x0 == x1 and y0 == y1
                append((char, NO_BOX if empty else (x0 - left, top - y0, x1 - left, top - y1)))
    finally:
        textpage.close()
    return items


_LINE_BREAKS = frozenset(map(ord, "\r\n"))


def _codes(handle: object, count: int) -> list[int]:
    """The page's ``count`` characters as UTF-16 code units, by index.

    Its text in one call where PDFium's text view has them all (it may leave out control characters: then
    a call per character).
    """
    buffer = (ctypes.c_ushort * (count + 1))()
    if raw.FPDFText_GetText(handle, 0, count, buffer) == count + 1:  # with the terminating NUL
        # the text view writes a line-end hyphen U+FFFE where a character's own code is U+0002
        return [0x02 if code == 0xFFFE else code for code in buffer[:count]]
    return [raw.FPDFText_GetUnicode(handle, i) for i in range(count)]


def _add_layer(text: Lines, items: list[_Item], page: int) -> None:
    chars: list[str] = []
    boxes: list[tuple[float, float, float, float]] = []
    for item in items:
        if item is _JOIN or item[0] == "\n":
            text.run(chars, boxes, page)
            chars, boxes = [], []
            if item is _JOIN:
                text.joined = True
            else:
                text.end_line(page)
        else:
            chars.append(item[0])
            boxes.append(item[1])
    text.run(chars, boxes, page)


def _char(codes: list[int], i: int) -> tuple[str, bool]:
    """Character ``i`` where it is a surrogate, and whether it took ``i + 1`` too.

    PDFium counts UTF-16 units: a pair is one character.
    """
    code = codes[i]
    if code < 0xDC00 and i + 1 < len(codes) and 0xDC00 <= codes[i + 1] < 0xE000:
        return chr(0x10000 + ((code - 0xD800) << 10) + (codes[i + 1] - 0xDC00)), True
    return "\ufffd", False  # half a pair: a broken font map


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
