"""Done when (issue 24), on the real engine: the seed's sentence on page 2 of a PDF, in HTML and in DOCX, traced."""

from __future__ import annotations

import asyncio

import pytest

from extractor import ExtractionResult, Extractor
from extractor.pipeline import Options

from .documents import COUNTRY, LANDMARK_TEXT, docx_bytes, landmark_html, landmark_pages, printer

pytestmark = pytest.mark.engine


def test_a_value_traced_to_page_two_box_html_element_and_docx_paragraph(real_extractor: Extractor) -> None:
    # The country, which SmolLM2 names with a confidence of 0.83-1.0 in all three forms. The period is
    # a near tie for it once a page of English comes first (0.18-0.27 here; another CPU's float
    # rounding flipped it to the country in CI): the seed's sentence alone keeps asserting the period
    # (test_real_engine), and tests/test_documents.py locates the period in each form without a model.
    with printer() as chromium:
        printed = chromium.print_pages(landmark_pages())
    sources = [
        (printed.pdf, None),
        (landmark_html(), "text/html"),
        (docx_bytes(["A report on Granada.", LANDMARK_TEXT]), None),
    ]

    async def run_all() -> list[ExtractionResult]:
        greedy = Options(temperature=0.0)
        calls = [
            real_extractor.aextract_document("landmark_slots", data, media_type=kind, options=greedy)
            for data, kind in sources
        ]
        return list(await asyncio.gather(*calls))

    pdf, html, docx = asyncio.run(run_all())
    for result in (pdf, html, docx):
        assert result.data["country"] == COUNTRY, result.data
        span = next(s for s in result.spans if s.path == "/country")
        assert span.status == "exact" and result.document is not None
        assert result.document.text[span.start : span.end] == COUNTRY
    located = next(s for s in pdf.spans if s.path == "/country").location
    assert located is not None and located.pages == [2]
    [box] = located.boxes
    [(page, x0, y0, x1, y1)] = printed.marks["country"]
    assert box.page == page and max(abs(box.x0 - x0), abs(box.y0 - y0), abs(box.x1 - x1), abs(box.y1 - y1)) < 1.5
    html_location = next(s for s in html.spans if s.path == "/country").location
    assert html_location is not None and html_location.elements == ["/html/body/div/p[2]"]
    docx_location = next(s for s in docx.spans if s.path == "/country").location
    assert docx_location is not None and docx_location.paragraphs == [1]
