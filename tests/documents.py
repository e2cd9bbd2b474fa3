"""Documents built by the tests themselves: PDFs printed from HTML by Debian's Chromium, DOCX by python-docx.

Pages are 600 x 800 CSS px (450 x 600 pt), no margins: a position measured in the page's layout
is a position on the printed page (px * 0.75 = pt).
"""

from __future__ import annotations

import html as html_lib
import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
PAGE_W, PAGE_H = 600, 800  # CSS px
PX_TO_PT = 0.75
STYLE = (
    "@page { size: 600px 800px; margin: 0 } html, body { margin: 0; padding: 0 } "
    "body { font-family: 'WenQuanYi Micro Hei', sans-serif; font-size: 20px; line-height: 30px } "
    ".page { height: 800px; overflow: hidden; padding: 40px; box-sizing: border-box; break-after: page } "
    "p { margin: 0 0 10px 0 }"
)
LANDMARK_TEXT = "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。"
PERIOD = "摩尔人统治时期"
COUNTRY = "西班牙"


@dataclass(frozen=True)
class Printed:
    """A printed PDF and the boxes (page, x0, y0, x1, y1 in pt) of its marked spans, by id."""

    pdf: bytes
    marks: dict[str, list[tuple[int, float, float, float, float]]]


class Printer:
    """One headless Chromium, printing HTML pages to PDF."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser

    def print_pages(self, pages: Sequence[str]) -> Printed:
        """Each item of ``pages`` is one page's inner HTML; elements with ``data-mark`` are measured."""
        body = "".join(f'<div class="page">{p}</div>' for p in pages)
        page = self.browser.new_page(viewport={"width": PAGE_W, "height": PAGE_H})
        try:
            page.emulate_media(media="print")
            page.set_content(
                f"<!doctype html><html><head><meta charset=utf-8><style>{STYLE}</style></head>"
                f"<body>{body}</body></html>"
            )
            rects = page.evaluate(
                """() => Array.from(document.querySelectorAll('[data-mark]')).map(e => [e.dataset.mark,
                   Array.from(e.getClientRects()).map(r => [r.left, r.top + window.scrollY, r.right,
                   r.bottom + window.scrollY])])"""
            )
            pdf = page.pdf(prefer_css_page_size=True, print_background=True)
        finally:
            page.close()
        marks: dict[str, list[tuple[int, float, float, float, float]]] = {}
        for mark, boxes in rects:
            for x0, y0, x1, y1 in boxes:
                number = int(y0 // PAGE_H)
                top = number * PAGE_H
                marks.setdefault(mark, []).append(
                    (number + 1, x0 * PX_TO_PT, (y0 - top) * PX_TO_PT, x1 * PX_TO_PT, (y1 - top) * PX_TO_PT)
                )
        return Printed(pdf, marks)


@contextmanager
def printer() -> Iterator[Printer]:
    """A Chromium for the duration (skips, saying how to install it, when /usr/bin/chromium is missing)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make setup-browser` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--headless"])
        try:
            yield Printer(browser)
        finally:
            browser.close()


def landmark_pages() -> list[str]:
    """Two pages: English filler on page 1, the seed's sentence on page 2 with its country and period marked."""
    before, after = LANDMARK_TEXT.split(PERIOD)
    before = before.replace(COUNTRY, f'<span data-mark="country">{COUNTRY}</span>')
    return [
        "<p>The first page is about something else entirely: a report on the weather in Granada.</p>",
        f'<p>{before}<span data-mark="period">{PERIOD}</span>{after}</p>',
    ]


def landmark_html() -> bytes:
    """An HTML page with the seed's sentence, a script that must never run, and a style that must not be read."""
    before, after = LANDMARK_TEXT.split(PERIOD)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>摩尔人统治时期的标题</title>"
        "<style>p::before { content: '摩尔人统治时期' }</style>"
        "<script>document.title = '摩尔人统治时期'; fetch('http://example.invalid/')</script></head>"
        "<body><nav>首页</nav><div id='main'><h1>阿尔罕布拉宫</h1>"
        f"<p>介绍</p><p>{html_lib.escape(before)}<b>{PERIOD}</b>{html_lib.escape(after)}</p>"
        '<img src=x onerror="alert(1)"></div></body></html>'
    ).encode()


def docx_bytes(paragraphs: Sequence[str], *, table: Sequence[Sequence[str]] = ()) -> bytes:
    """A DOCX written by python-docx: the paragraphs, then a table of the rows given."""
    import docx

    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


SCAN_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
SCAN_DPI = 300


@dataclass(frozen=True)
class Scan:
    """An image-only PDF (a scan: no text layer) and the boxes (page, x0, y0, x1, y1 in pt) of its marked words."""

    pdf: bytes
    marks: dict[str, list[tuple[int, float, float, float, float]]]


def scanned_pdf(
    pages: Sequence[Sequence[str]], *, marks: Sequence[str] = (), size_px: int = 50, rotate: int = 0
) -> Scan:
    """Each page's lines drawn black on white by Pillow at SCAN_DPI and saved as an image-only PDF.

    A page is 450 x 600 pt, the text 12 pt (50 px); each string of ``marks`` is measured where it is drawn.
    ``rotate`` (90, 180, 270): each image is stored turned that much counter-clockwise, on a page whose
    /Rotate shows it upright (as scanners store landscape pages); marks are in the stored page's frame.
    """
    from PIL import Image, ImageDraw, ImageFont

    if not SCAN_FONT.exists():
        pytest.fail(f"{SCAN_FONT} is missing: `make setup-ocr` installs Debian's fonts-wqy-microhei")
    font = ImageFont.truetype(str(SCAN_FONT), size_px)
    width, height = round(450 * SCAN_DPI / 72), round(600 * SCAN_DPI / 72)
    images = []
    found: dict[str, list[tuple[int, float, float, float, float]]] = {}
    to_pt = 72 / SCAN_DPI
    for number, lines in enumerate(pages, start=1):
        image = Image.new("L", (width, height), 255)
        draw = ImageDraw.Draw(image)
        y = 150
        for line in lines:
            draw.text((150, y), line, font=font, fill=0)
            for mark in marks:
                at = line.find(mark)
                if at >= 0:
                    x0 = 150 + draw.textlength(line[:at], font=font)
                    _, top, _, bottom = draw.textbbox((150, y), mark, font=font)
                    x1 = x0 + draw.textlength(mark, font=font)
                    box = (x0 * to_pt, top * to_pt, x1 * to_pt, bottom * to_pt)
                    box = _stored(box, rotate)
                    found.setdefault(mark, []).append((number, *box))
            y += round(size_px * 1.4)
        images.append(image.rotate(rotate, expand=True) if rotate else image)
    out = io.BytesIO()
    images[0].save(out, format="PDF", resolution=SCAN_DPI, save_all=True, append_images=images[1:])
    if rotate:
        import pypdfium2 as pdfium

        pdf = pdfium.PdfDocument(out.getvalue())
        for page in pdf:
            page.set_rotation(rotate)
        out = io.BytesIO()
        pdf.save(out)
    return Scan(out.getvalue(), found)


def _stored(box: tuple[float, float, float, float], rotate: int) -> tuple[float, float, float, float]:
    """A box on the upright 450 x 600 pt page, on the page as stored turned ``rotate`` degrees counter-clockwise."""
    x0, y0, x1, y1 = box
    if rotate == 90:  # stored 600 wide, 450 high: the upright page's left edge is the stored page's bottom
        return (y0, 450 - x1, y1, 450 - x0)
    if rotate == 180:
        return (450 - x1, 600 - y1, 450 - x0, 600 - y0)
    if rotate == 270:
        return (600 - y1, x0, 600 - y0, x1)
    return box


def text_page_then(line: str, scan: bytes) -> bytes:
    """A PDF whose page 1 has ``line`` as a text layer (Helvetica, drawn by PDFium), followed by ``scan``'s pages."""
    import ctypes

    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    pdf = pdfium.PdfDocument.new()
    page = pdf.new_page(450, 600)
    text = raw.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", ctypes.c_float(14))
    wide = ctypes.create_string_buffer((line + "\0").encode("utf-16-le"))
    raw.FPDFText_SetText(text, ctypes.cast(wide, ctypes.POINTER(raw.FPDF_WCHAR)))
    raw.FPDFPageObj_Transform(text, 1, 0, 0, 1, 72, 500)
    raw.FPDFPage_InsertObject(page.raw, text)
    raw.FPDFPage_GenerateContent(page.raw)
    pdf.import_pages(pdfium.PdfDocument(scan))
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()
