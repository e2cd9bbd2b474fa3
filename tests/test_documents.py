"""Documents -> text + locations: PDFs printed by Chromium, HTML, DOCX by python-docx; Chinese and English."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from extractor import documents
from extractor.documents import Document, Limits

from .documents import LANDMARK_TEXT, PERIOD, Printer, docx_bytes, landmark_html, landmark_pages, printer

TOLERANCE_PT = 1.5


@pytest.fixture(scope="module")
def chromium() -> Iterator[Printer]:
    with printer() as running:
        yield running


def find(document: Document, value: str) -> tuple[int, int]:
    start = document.text.index(value)
    return start, start + len(value)


def assert_covers(box: documents.Box, mark: tuple[int, float, float, float, float]) -> None:
    """Our box is the measured box of the characters (page, and each edge within TOLERANCE_PT)."""
    page, x0, y0, x1, y1 = mark
    assert box.page == page
    for ours, theirs in zip((box.x0, box.y0, box.x1, box.y1), (x0, y0, x1, y1), strict=True):
        assert abs(ours - theirs) <= TOLERANCE_PT, (box, mark)


def test_pdf_value_on_page_two_has_its_page_and_box(chromium: Printer) -> None:
    printed = chromium.print_pages(landmark_pages())
    document = documents.read(printed.pdf)
    assert document.media_type == documents.PDF and len(document.pages) == 2
    assert LANDMARK_TEXT in document.text
    location = document.locate(*find(document, PERIOD))
    assert location.pages == (2,)
    [box] = location.boxes
    [mark] = printed.marks["period"]
    assert_covers(box, mark)


def test_pdf_value_across_a_line_break_is_one_run_with_a_box_per_line(chromium: Printer) -> None:
    narrow = '<p style="width:140px">阿尔罕布拉宫是西班牙<span data-mark="v">摩尔人统治时期</span>的宫殿建筑。</p>'
    english = (
        '<p style="width:200px">The palace was built by the <span data-mark="e">Nasrid dynasty of Granada</span>.</p>'
    )
    printed = chromium.print_pages([narrow + english])
    document = documents.read(printed.pdf)
    assert LANDMARK_TEXT in document.text  # CJK lines join with nothing
    assert "Nasrid dynasty of Granada" in document.text  # Latin lines join with a space
    for value, mark in ((PERIOD, "v"), ("Nasrid dynasty of Granada", "e")):
        location = document.locate(*find(document, value))
        assert len(printed.marks[mark]) == 2 and len(location.boxes) == 2, (value, printed.marks[mark], location)
        for box, measured in zip(location.boxes, printed.marks[mark], strict=True):
            assert_covers(box, measured)


def test_pdf_value_across_a_page_break_spans_both_pages(chromium: Printer) -> None:
    printed = chromium.print_pages(
        [
            '<p>It was the palace of the <span data-mark="v">Nasrid</span></p>',
            '<p><span data-mark="v">dynasty</span>.</p>',
        ]
    )
    document = documents.read(printed.pdf)
    location = document.locate(*find(document, "Nasrid dynasty"))
    assert location.pages == (1, 2)
    for box, measured in zip(location.boxes, printed.marks["v"], strict=True):
        assert_covers(box, measured)


def test_pdf_line_end_hyphen_is_dropped_and_the_word_joined(chromium: Printer) -> None:
    printed = chromium.print_pages(['<p style="width:120px; hyphens: manual">An extra&shy;ordinary palace.</p>'])
    document = documents.read(printed.pdf)
    assert "extraordinary palace" in document.text, document.text
    assert len(document.locate(*find(document, "extraordinary")).boxes) == 2


def test_html_text_and_element_paths_and_scripts_never_read() -> None:
    document = documents.read(landmark_html(), media_type="text/html; charset=utf-8")
    assert document.media_type == documents.HTML
    assert LANDMARK_TEXT in document.text
    assert document.text.count(PERIOD) == 1  # not from <title>, <style> or <script>
    assert "fetch" not in document.text and "alert" not in document.text
    location = document.locate(*find(document, PERIOD))
    assert location.elements == ("/html/body/div/p[2]/b",)
    start, end = find(document, LANDMARK_TEXT)
    assert document.locate(start, end).elements == (
        "/html/body/div/p[2]",
        "/html/body/div/p[2]/b",
    )


def test_html_in_a_legacy_encoding_reads_its_meta_charset() -> None:
    page = f"<html><head><meta charset='gbk'></head><body><p>{LANDMARK_TEXT}</p></body></html>".encode("gbk")
    assert LANDMARK_TEXT in documents.read(page, name="page.html").text


def test_docx_paragraph_index_and_path_and_table_cells() -> None:
    data = docx_bytes(["A report on Granada.", LANDMARK_TEXT], table=[["name", "period"], ["阿尔罕布拉宫", PERIOD]])
    document = documents.read(data, name="report.docx")
    assert document.media_type == documents.DOCX
    first = document.text.index(PERIOD)
    location = document.locate(first, first + len(PERIOD))
    assert location.paragraphs == (1,) and location.elements == ("/body/p[2]",)
    second = document.text.index(PERIOD, first + 1)
    cell = document.locate(second, second + len(PERIOD))
    assert cell.elements == ("/body/tbl[1]/tr[2]/tc[2]/p[1]",)


def test_plain_text_passes_through_with_offsets_only() -> None:
    document = documents.read(LANDMARK_TEXT.encode(), name="seed.txt")
    assert document.text == LANDMARK_TEXT and document.locate(0, 3).boxes == ()


def test_read_takes_a_path(tmp_path: Path, chromium: Printer) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(chromium.print_pages(landmark_pages()).pdf)
    document = documents.read(path)
    assert document.name == "report.pdf" and PERIOD in document.text


def test_pdf_page_renders_as_png(chromium: Printer) -> None:
    from extractor.documents.pdf import render_page

    image = render_page(chromium.print_pages(landmark_pages()).pdf, page=2, limits=Limits())
    assert image.startswith(b"\x89PNG")


def test_pdf_character_outside_the_basic_plane_is_one_character_with_its_box(chromium: Printer) -> None:
    # PDFium counts UTF-16 units: a pair is one character of the text, and its box is the glyph's
    printed = chromium.print_pages(['<p>Paid in <span data-mark="v">𝟐𝟎𝟐𝟒</span> by wire.</p>'])
    document = documents.read(printed.pdf)
    assert "Paid in 𝟐𝟎𝟐𝟒 by wire." in document.text
    [box] = document.locate(*find(document, "𝟐𝟎𝟐𝟒")).boxes
    [(page, x0, _, x1, _)] = printed.marks["v"]  # across: a fallback font's line box is taller than its glyphs
    assert box.page == page and abs(box.x0 - x0) <= TOLERANCE_PT and abs(box.x1 - x1) <= TOLERANCE_PT, box
