"""Documents over HTTP (scripted engine): multipart and base64 JSON in, located spans out; bad documents a 4xx."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from extractor import Extractor, ScriptedEngine

from .conftest import landmark
from .documents import LANDMARK_TEXT, PERIOD, Printed, docx_bytes, landmark_html, landmark_pages, printer

DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


@pytest.fixture(scope="module")
def printed() -> Printed:
    with printer() as chromium:  # closed before the tests: Playwright's sync API holds an event loop
        return chromium.print_pages(landmark_pages())


@pytest.fixture
async def client(extractor: Extractor) -> AsyncIterator[httpx.AsyncClient]:
    from extractor.server import create_app

    app = create_app(extractor)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


def period(body: dict[str, Any]) -> dict[str, Any]:
    span: dict[str, Any] = next(s for s in body["spans"] if s["path"] == "/period")
    assert body["document"]["text"][span["start"] : span["end"]] == PERIOD
    return span


async def test_multipart_pdf_gives_page_two_and_its_box(
    client: httpx.AsyncClient, engine: ScriptedEngine, printed: Printed
) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫", period=PERIOD)])
    response = await client.post(
        "/extract/landmark_slots",
        files={"file": ("alhambra.pdf", printed.pdf, "application/pdf")},
        data={"options": json.dumps({"temperature": 0}), "review": "false"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    location = period(body)["location"]
    assert location["pages"] == [2] and len(location["boxes"]) == 1
    box = location["boxes"][0]
    (page, x0, y0, x1, y1) = printed.marks["period"][0]
    edges = (box["x0"] - x0, box["y0"] - y0, box["x1"] - x1, box["y1"] - y1)
    assert box["page"] == page and max(map(abs, edges)) < 1.5
    assert body["document"]["name"] == "alhambra.pdf" and body["document"]["media_type"] == "application/pdf"
    assert body["document"]["pages"][1] == {"width": 450.0, "height": 600.0}


async def test_json_base64_html_and_docx(client: httpx.AsyncClient, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(period=PERIOD)] * 2)
    html = {"content": base64.b64encode(landmark_html()).decode(), "media_type": "text/html"}
    response = await client.post("/extract/landmark_slots", json={"document": html})
    assert response.status_code == 200, response.text
    assert period(response.json())["location"]["elements"] == ["/html/body/div/p[2]/b"]
    docx = {"content": base64.b64encode(docx_bytes(["x", LANDMARK_TEXT])).decode(), "name": "a.docx"}
    response = await client.post("/extract/landmark_slots", json={"document": docx})
    assert response.status_code == 200, response.text
    assert period(response.json())["location"]["paragraphs"] == [1]


async def test_batch_of_uploads_one_record_per_file(
    client: httpx.AsyncClient, engine: ScriptedEngine, printed: Printed
) -> None:
    engine.enqueue([landmark(period=PERIOD)] * 2)
    files = [
        ("file", ("a.pdf", printed.pdf, "application/pdf")),
        ("file", ("b.docx", docx_bytes([LANDMARK_TEXT]), DOCX_TYPE)),
        ("file", ("c.pdf", b"%PDF-1.7 broken", "application/pdf")),
    ]
    response = await client.post("/extract/landmark_slots/batch", files=files)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["id"] for r in results] == ["a.pdf", "b.docx", "c.pdf"]
    assert [r["status"] for r in results] == [200, 200, 422]
    assert results[2]["error"]["error"] == "bad_document"
    assert results[0]["result"]["spans"][-1]["location"]["pages"] == [2]


@pytest.mark.parametrize(
    ("files", "json_body", "status", "code"),
    [
        ({"file": ("x.png", b"\x89PNG\r\n\x1a\n0000", "image/png")}, None, 415, "unsupported_media_type"),
        ({"file": ("x.pdf", b"%PDF-1.7 broken", "application/pdf")}, None, 422, "bad_document"),
        ({"nofile": ("x.pdf", b"%PDF-", "application/pdf")}, None, 400, "bad_request"),
        (None, {"document": {"content": "***"}}, 422, "bad_document"),
        (None, {"text": "x", "document": {"content": "eA=="}}, 422, "bad_request"),
        (None, {}, 422, "bad_request"),
    ],
)
async def test_bad_uploads_are_a_4xx(
    client: httpx.AsyncClient,
    engine: ScriptedEngine,
    files: dict[str, Any] | None,
    json_body: dict[str, Any] | None,
    status: int,
    code: str,
) -> None:
    if files is not None:
        response = await client.post("/extract/landmark_slots", files=files)
    else:
        response = await client.post("/extract/landmark_slots", json=json_body)
    assert response.status_code == status, response.text
    assert response.json()["error"] == code
    assert engine.history == []


async def test_multipart_without_a_boundary_is_a_400(client: httpx.AsyncClient) -> None:
    headers = {"content-type": "multipart/form-data"}
    response = await client.post("/extract/landmark_slots", content=b'{"text": "x"}', headers=headers)
    assert response.status_code == 400 and "boundary" in response.json()["message"]


async def test_page_image_of_a_pdf(client: httpx.AsyncClient, printed: Printed) -> None:
    response = await client.post("/documents/pages/2", content=printed.pdf, headers={"content-type": "application/pdf"})
    assert response.status_code == 200 and response.content.startswith(b"\x89PNG")
    missing = await client.post("/documents/pages/3", content=printed.pdf, headers={"content-type": "application/pdf"})
    assert missing.status_code == 422 and "page 3" in missing.json()["message"]
    html = await client.post("/documents/pages/1", content=landmark_html(), headers={"content-type": "text/html"})
    assert html.status_code == 422


async def test_document_limits_are_a_413_naming_the_setting(
    catalog: Any, settings: Any, engine: ScriptedEngine, printed: Printed
) -> None:
    from extractor.server import create_app

    small = Extractor(settings=settings.with_(max_document_pages=1), engine=engine, catalog=catalog)
    transport = httpx.ASGITransport(app=create_app(small))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post("/extract/landmark_slots", files={"file": ("a.pdf", printed.pdf)})
    assert response.status_code == 413, response.text
    body = response.json()
    assert body["error"] == "document_too_large" and "EXTRACTOR_MAX_DOCUMENT_PAGES" in body["message"]
    assert engine.history == []


async def test_unknown_task_is_404_before_any_conversion(client: httpx.AsyncClient) -> None:
    response = await client.post("/extract/nope", files={"file": ("x.pdf", b"%PDF-1.7 broken", "application/pdf")})
    assert response.status_code == 404


@pytest.mark.parametrize(
    "declared",
    [
        "",
        "text/plain",
        " TEXT/Html ; charset=utf-8",
        "application/octet-stream",
        "text/markdown",
        "image/png",
        "text/plain\n;x",
        "text/plainx",
        "application/pdf ;",
        "\x1ctext/plain",
        "pdf",
    ],
)
def test_the_documents_media_type_pattern_is_what_the_reader_takes(declared: str) -> None:
    import re

    from extractor.documents.sniffing import media_type_of
    from extractor.errors import UnsupportedDocumentError
    from extractor.server.protocol import MEDIA_TYPE

    try:
        media_type_of(b"hello", declared=declared)
        read = True
    except UnsupportedDocumentError:
        read = False
    assert (re.fullmatch(MEDIA_TYPE, declared) is not None) == read


@pytest.mark.parametrize(
    "content", ["", "AAAA", "AA==", "AAA=", "AAA", "A===", "AA=A", "not base64!", "AAAA\n", "+/+/"]
)
def test_the_documents_base64_pattern_is_what_the_decoder_takes(content: str) -> None:
    import binascii
    import re

    from extractor.server.protocol import BASE64

    try:
        base64.b64decode(content, validate=True)
        decoded = True
    except (binascii.Error, ValueError):
        decoded = False
    assert (re.fullmatch(BASE64, content) is not None) == decoded
