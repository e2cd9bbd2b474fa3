"""The Python API on documents (scripted engine): a path or bytes in, every span with its location out."""

from __future__ import annotations

from pathlib import Path

import pytest

from extractor import DocumentError, Extractor, ScriptedEngine

from .conftest import landmark
from .documents import LANDMARK_TEXT, PERIOD, Printed, docx_bytes, landmark_html, landmark_pages, printer


@pytest.fixture(scope="module")
def printed() -> Printed:
    # printed, and the browser closed, before any test runs: Playwright's sync API holds an event loop open
    with printer() as chromium:
        return chromium.print_pages(landmark_pages())


def period_span(result: object) -> object:
    return next(s for s in result.spans if s.path == "/period")  # type: ignore[attr-defined]


def test_pdf_path_gives_page_two_and_the_box_of_the_characters(
    extractor: Extractor, engine: ScriptedEngine, printed: Printed, tmp_path: Path
) -> None:
    path = tmp_path / "alhambra.pdf"
    path.write_bytes(printed.pdf)
    engine.enqueue([landmark(name="阿尔罕布拉宫", country="西班牙", period=PERIOD)])
    result = extractor.extract_document("landmark_slots", path)
    assert result.data["period"] == PERIOD
    span = period_span(result)
    assert span.status == "exact" and result.document.text[span.start : span.end] == PERIOD
    assert span.location.pages == [2]
    [box] = span.location.boxes
    [(page, x0, y0, x1, y1)] = printed.marks["period"]
    assert box.page == page == 2
    assert abs(box.x0 - x0) < 1.5 and abs(box.x1 - x1) < 1.5 and abs(box.y0 - y0) < 1.5 and abs(box.y1 - y1) < 1.5
    assert result.document.name == "alhambra.pdf" and len(result.document.pages) == 2
    # the model read the converted text, as any text
    assert LANDMARK_TEXT in engine.history[-1].messages[-1]["content"]


def test_html_and_docx_bytes_give_element_and_paragraph(extractor: Extractor, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(period=PERIOD)] * 2)
    html = extractor.extract_document("landmark_slots", landmark_html(), media_type="text/html")
    assert period_span(html).location.elements == ["/html/body/div/p[2]/b"]
    docx = extractor.extract_document("landmark_slots", docx_bytes(["Granada.", LANDMARK_TEXT]), name="a.docx")
    location = period_span(docx).location
    assert location.paragraphs == [1] and location.elements == ["/body/p[2]"]


def test_a_bad_document_fails_before_the_engine(extractor: Extractor, engine: ScriptedEngine) -> None:
    with pytest.raises(DocumentError, match="not a readable PDF"):
        extractor.extract_document("landmark_slots", b"%PDF-1.7 broken")
    assert engine.history == []
