"""Scanned PDF pages read by OCR (Debian's tesseract): text, page, boxes and confidences; auto, always, off."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from extractor import Extractor, ScriptedEngine, documents
from extractor.catalog.tasks import task_from_schema
from extractor.config import Settings
from extractor.documents import Limits, Ocr, ocr
from extractor.documents.provenance import attach
from extractor.errors import ConfigError, NoTextLayerError, OcrUnavailableError, TaskError
from extractor.results import ExtractionResult, SpanModel, Usage

from .conftest import landmark
from .documents import LANDMARK_TEXT, PERIOD, Scan, scanned_pdf, text_page_then

ENGLISH = ["This Agreement is made between", "Acme Corporation and Beta LLC."]
LATIN_PT = 1.5  # tesseract boxes Latin words to the pixel
CJK_PT = 13.0  # and CJK characters within about one character's width (12 pt here)


@pytest.fixture(scope="module")
def scan() -> Scan:
    """Two scanned pages: English on page 1, the seed's Chinese sentence on page 2."""
    return scanned_pdf([ENGLISH, [LANDMARK_TEXT]], marks=["Acme", PERIOD])


def located(document: documents.Document, value: str) -> documents.Location:
    start = document.text.index(value)
    return document.locate(start, start + len(value))


def assert_near(box: documents.Box, mark: tuple[int, float, float, float, float], tolerance: float) -> None:
    page, *edges = mark
    assert box.page == page
    for ours, theirs in zip((box.x0, box.y0, box.x1, box.y1), edges, strict=True):
        assert abs(ours - theirs) <= tolerance, (box, mark)


def test_scanned_pages_are_read_with_their_pages_boxes_and_confidences(scan: Scan) -> None:
    document = documents.read(scan.pdf)
    assert "This Agreement is made between Acme Corporation and Beta LLC." in document.text
    assert LANDMARK_TEXT in document.text  # CJK words join with nothing, as a text layer's lines do
    assert document.ocr_pages == (1, 2) and "pages read by OCR" in document.notes[0]
    english = located(document, "Acme")
    assert english.pages == (1,)
    assert_near(english.boxes[0], scan.marks["Acme"][0], LATIN_PT)
    chinese = located(document, PERIOD)
    assert chinese.pages == (2,)
    assert_near(chinese.boxes[0], scan.marks[PERIOD][0], CJK_PT)
    for location in (english, chinese):
        assert location.ocr_confidence is not None and 0.5 < location.ocr_confidence <= 1.0


@pytest.mark.parametrize("rotate", [90, 180, 270])
def test_a_page_stored_turned_is_read_upright_with_boxes_in_the_pages_own_frame(rotate: int) -> None:
    scan = scanned_pdf([ENGLISH], marks=["Acme"], rotate=rotate)
    document = documents.read(scan.pdf)
    assert "Acme Corporation and Beta LLC." in document.text
    assert_near(located(document, "Acme").boxes[0], scan.marks["Acme"][0], LATIN_PT)


def test_off_reads_no_scan_and_a_pdf_without_text_stays_a_422(scan: Scan) -> None:
    with pytest.raises(NoTextLayerError, match="OCR is off"):
        documents.read(scan.pdf, limits=Limits(ocr=Ocr(mode="off")))


def test_auto_reads_only_pages_without_a_text_layer_and_always_every_page() -> None:
    mixed = text_page_then("The Nasrid dynasty of Granada built it.", scanned_pdf([ENGLISH]).pdf)

    auto = documents.read(mixed)
    assert auto.ocr_pages == (2,) and "Nasrid dynasty" in auto.text and "Acme Corporation" in auto.text
    assert located(auto, "Nasrid").ocr_confidence is None  # the text layer's: no OCR confidence
    assert located(auto, "Acme").ocr_confidence is not None

    off = documents.read(mixed, limits=Limits(ocr=Ocr(mode="off")))
    assert off.ocr_pages == () and "Acme" not in off.text and "pages without text" in off.notes[-1]

    always = documents.read(mixed, limits=Limits(ocr=Ocr(mode="always")))
    assert always.ocr_pages == (1, 2) and "Nasrid dynasty" in always.text
    assert located(always, "Nasrid").ocr_confidence is not None


def test_a_value_on_ocr_text_takes_the_ocr_confidence_into_its_own(scan: Scan) -> None:
    document = documents.read(scan.pdf)
    start = document.text.index("Acme Corporation")
    span = SpanModel(
        path="/party", value="Acme Corporation", start=start, end=start + 16, status="exact", confidence=0.9
    )
    result = ExtractionResult(
        task="t",
        data={"party": "Acme Corporation"},
        spans=[span],
        confidences={"/party": 0.9},
        confidence=0.9,
        attempts=[],
        usage=Usage(prompt_tokens=0, completion_tokens=0),
        model="m",
        latency_ms=0.0,
    )
    attached = attach(result, document)
    [out] = attached.spans
    assert out.location is not None and out.location.ocr_confidence is not None
    assert out.confidence == pytest.approx(0.9 * out.location.ocr_confidence, abs=1e-4)
    assert attached.confidences["/party"] == out.confidence == attached.confidence
    assert attached.document is not None and attached.document.ocr_pages == [1, 2]


def test_a_blank_scan_is_still_a_422_saying_ocr_read_nothing() -> None:
    blank = scanned_pdf([[]]).pdf
    with pytest.raises(NoTextLayerError, match=r"OCR \(eng\+chi_sim\) read no text"):
        documents.read(blank)


def test_a_page_past_its_timeout_is_left_unread_with_a_note(scan: Scan) -> None:
    with pytest.raises(NoTextLayerError, match=r"OCR ran past 0\.01 s \(EXTRACTOR_OCR_TIMEOUT_S\), not read: 1, 2"):
        documents.read(scan.pdf, limits=Limits(ocr=Ocr(timeout_s=0.01)))


def test_a_missing_language_or_tesseract_names_the_package(monkeypatch: pytest.MonkeyPatch, scan: Scan) -> None:
    with pytest.raises(OcrUnavailableError, match="apt-get install tesseract-ocr-deu"):
        documents.read(scan.pdf, limits=Limits(ocr=Ocr(languages="eng+deu")))
    ocr.installed_languages.cache_clear()
    monkeypatch.setattr(ocr, "TESSERACT", "tesseract-not-installed")
    try:
        with pytest.raises(OcrUnavailableError, match="apt-get install tesseract-ocr tesseract-ocr-eng"):
            documents.read(scan.pdf)
    finally:
        ocr.installed_languages.cache_clear()


def test_settings_choose_the_mode_and_languages() -> None:
    limits = Limits.from_settings(Settings.from_env({"EXTRACTOR_OCR": "always", "EXTRACTOR_OCR_LANGUAGES": "chi_sim"}))
    assert limits.ocr.mode == "always" and limits.ocr.languages == "chi_sim"
    assert Limits.from_settings(Settings()).ocr == Ocr()
    with pytest.raises(ConfigError, match="EXTRACTOR_OCR: unknown mode 'sometimes'"):
        Settings(ocr="sometimes")
    with pytest.raises(ConfigError, match="EXTRACTOR_OCR_LANGUAGES"):
        Settings(ocr_languages="eng; rm -rf /")


def test_tsv_rows_other_than_words_are_skipped() -> None:
    tsv = (
        "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext\n"
        "4\t1\t1\t1\t1\t0\t10\t20\t300\t40\t-1\t\n"
        "5\t1\t1\t1\t1\t1\t10\t20\t100\t40\t91.5\tAcme\n"
        "5\t1\t1\t1\t1\t2\t120\t20\t10\t40\t95\t \n"
    )
    assert ocr.parse_tsv(tsv) == [ocr.Word("Acme", 0.915, (10.0, 20.0, 110.0, 60.0), (1, 1, 1))]


async def post_scan(extractor: Extractor, pdf: bytes) -> httpx.Response:
    from extractor.server import create_app

    transport = httpx.ASGITransport(app=create_app(extractor))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post("/extract/landmark_slots", files={"file": ("scan.pdf", pdf, "application/pdf")})


async def test_over_http_a_scan_is_read_and_off_or_no_tesseract_answer_what_to_do(
    catalog: Any, settings: Settings, engine: ScriptedEngine, scan: Scan, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫", period=PERIOD)])
    response = await post_scan(Extractor(settings=settings, engine=engine, catalog=catalog), scan.pdf)
    assert response.status_code == 200, response.text
    body = response.json()
    span = next(s for s in body["spans"] if s["path"] == "/period")
    assert body["document"]["text"][span["start"] : span["end"]] == PERIOD
    assert span["location"]["pages"] == [2] and span["location"]["ocr_confidence"] > 0.5
    assert body["document"]["ocr_pages"] == [1, 2]

    off = Extractor(settings=settings.with_(ocr="off"), engine=engine, catalog=catalog)
    response = await post_scan(off, scan.pdf)
    assert response.status_code == 422 and response.json()["error"] == "no_text_layer"

    ocr.installed_languages.cache_clear()
    monkeypatch.setattr(ocr, "TESSERACT", "tesseract-not-installed")
    try:
        response = await post_scan(Extractor(settings=settings, engine=engine, catalog=catalog), scan.pdf)
    finally:
        ocr.installed_languages.cache_clear()
    assert response.status_code == 503 and response.json()["error"] == "ocr_unavailable"
    assert "apt-get install tesseract-ocr" in response.json()["message"]


async def test_a_tasks_own_languages_reach_ocr_and_bad_ones_fail_at_load(extractor: Extractor, scan: Scan) -> None:
    schema = {"type": "object", "properties": {"party": {"type": "string"}}}
    german = task_from_schema("nda", {**schema, "x-extractor": {"ocr_languages": "deu"}}, where="nda")
    assert german.settings.ocr_languages == "deu"
    with pytest.raises(OcrUnavailableError, match="apt-get install tesseract-ocr-deu"):
        await extractor.aextract_document(german, scan.pdf)
    with pytest.raises(TaskError, match="ocr_languages"):
        task_from_schema("nda", {**schema, "x-extractor": {"ocr_languages": "eng; rm"}}, where="nda")


def test_pages_read_at_once_come_back_in_page_order() -> None:
    pages = [["Alpha is the first scanned page."], ["Bravo is the second one."], ["Charlie is the third one."]]
    mixed = text_page_then("The Nasrid dynasty of Granada built it.", scanned_pdf(pages).pdf)
    one = documents.read(mixed, limits=Limits(ocr=Ocr(workers=1)))
    three = documents.read(mixed, limits=Limits(ocr=Ocr(workers=3)))
    assert three.text == one.text and three.ocr_pages == one.ocr_pages == (2, 3, 4)
    order = [three.text.index(word) for word in ("Nasrid", "Alpha", "Bravo", "Charlie")]
    assert order == sorted(order)
    assert [located(three, word).pages for word in ("Alpha", "Bravo", "Charlie")] == [(2,), (3,), (4,)]
