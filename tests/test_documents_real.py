"""Done when (issue 24), on the real engine: the seed's sentence on page 2 of a PDF, in HTML and in DOCX."""

from __future__ import annotations

import asyncio

import pytest

from extractor import ExtractionResult, Extractor
from extractor.pipeline import Options

from .documents import LANDMARK_TEXT, PERIOD, docx_bytes, landmark_html, landmark_pages, printer

pytestmark = pytest.mark.engine


def test_period_traced_to_page_two_box_html_element_and_docx_paragraph(real_extractor: Extractor) -> None:
    with printer() as chromium:
        printed = chromium.print_pages(landmark_pages())
    sources = [
        (printed.pdf, None),
        (landmark_html(), "text/html"),
        (docx_bytes(["A report on Granada.", LANDMARK_TEXT]), None),
    ]

    async def run_all() -> list[ExtractionResult]:
        greedy = Options(temperature=0.0)  # as the seed's own test: the pool's nearest examples show "...统治时期"
        calls = [
            real_extractor.aextract_document("landmark_slots", data, media_type=kind, options=greedy)
            for data, kind in sources
        ]
        return list(await asyncio.gather(*calls))

    pdf, html, docx = asyncio.run(run_all())
    for result in (pdf, html, docx):
        assert result.data["period"] == PERIOD, result.data
        span = next(s for s in result.spans if s.path == "/period")
        assert span.status == "exact" and result.document is not None
        assert result.document.text[span.start : span.end] == PERIOD
    located = next(s for s in pdf.spans if s.path == "/period").location
    assert located is not None and located.pages == [2]
    [box] = located.boxes
    [(page, x0, y0, x1, y1)] = printed.marks["period"]
    assert box.page == page and max(abs(box.x0 - x0), abs(box.y0 - y0), abs(box.x1 - x1), abs(box.y1 - y1)) < 1.5
    html_location = next(s for s in html.spans if s.path == "/period").location
    assert html_location is not None and html_location.elements == ["/html/body/div/p[2]/b"]
    docx_location = next(s for s in docx.spans if s.path == "/period").location
    assert docx_location is not None and docx_location.paragraphs == [1]
