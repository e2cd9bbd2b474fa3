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
    """Two pages: English filler on page 1, the seed's sentence on page 2 with the period marked."""
    before, after = LANDMARK_TEXT.split(PERIOD)
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
