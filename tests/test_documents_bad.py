"""Bad documents: each a clear error (4xx over HTTP) at a bounded cost, never a hang or a 500."""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Callable, Iterator

import pytest

from extractor import documents
from extractor.errors import (
    DocumentError,
    DocumentTooLargeError,
    EncryptedDocumentError,
    NoTextLayerError,
    UnsupportedDocumentError,
)

from .documents import LANDMARK_TEXT, Printer, docx_bytes, landmark_pages, printer

MAX_SECONDS = 3.0  # each refusal, on 2 shared CPU cores


@pytest.fixture(scope="module")
def chromium() -> Iterator[Printer]:
    with printer() as running:
        yield running


def encrypted_pdf(chromium: Printer) -> bytes:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=io.BytesIO(chromium.print_pages(landmark_pages()).pdf))
    writer.encrypt(user_password="secret", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def many_pages(count: int) -> bytes:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument.new()
    for _ in range(count):
        pdf.new_page(200, 200)
    out = io.BytesIO()
    pdf.save(out)
    pdf.close()
    return out.getvalue()


def zip_bomb() -> bytes:
    """A .docx-looking zip whose document.xml inflates to 1 GiB (about 1 MiB on the wire)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            block = b" " * (1 << 20)
            for _ in range(1024):
                member.write(block)
    return out.getvalue()


def lying_zip() -> bytes:
    """A zip whose member header claims a small size but inflates to far more."""
    data = docx_bytes([LANDMARK_TEXT])
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            body = source.read(info)
            if info.filename == "word/document.xml":
                body = body.replace(b"</w:body>", b"<w:p>" + b" " * (50 << 20) + b"</w:p></w:body>")
            archive.writestr(info, body)
    raw = bytearray(out.getvalue())
    # the central directory's entry for document.xml: its uncompressed size (offset 24) claims 1 KiB
    at = raw.rfind(b"PK\x01\x02", 0, raw.rfind(b"word/document.xml"))
    raw[at + 24 : at + 28] = (1024).to_bytes(4, "little")
    return bytes(raw)


def cases(chromium: Printer) -> list[tuple[str, Callable[[], bytes], str | None, type[Exception], str]]:
    return [
        ("encrypted PDF", lambda: encrypted_pdf(chromium), None, EncryptedDocumentError, "password"),
        ("corrupt PDF", lambda: b"%PDF-1.7\n" + b"\x00garbage" * 100, None, DocumentError, "not a readable PDF"),
        ("truncated PDF", lambda: chromium.print_pages(landmark_pages()).pdf[:300], None, DocumentError, "PDF"),
        ("5,000-page PDF", lambda: many_pages(5000), None, DocumentTooLargeError, "5000 pages"),
        (
            "scanned PDF (no text layer)",
            lambda: chromium.print_pages(['<div style="width:300px;height:300px;background:#345"></div>']).pdf,
            None,
            NoTextLayerError,
            "no text layer",
        ),
        ("zip bomb as DOCX", zip_bomb, None, DocumentTooLargeError, "zip bomb"),
        ("zip with a lying size as DOCX", lying_zip, None, DocumentError, "DOCX"),
        ("zip that is no DOCX", lambda: _zip({"xl/workbook.xml": "<x/>"}), None, DocumentError, "word/document.xml"),
        (
            "legacy .doc",
            lambda: b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 500,
            None,
            UnsupportedDocumentError,
            ".doc",
        ),
        ("an image", lambda: b"\x89PNG\r\n\x1a\n" + b"\0" * 50, "image/png", UnsupportedDocumentError, "image/png"),
        ("PDF that is not one", lambda: b"hello", "application/pdf", DocumentError, "not a readable PDF"),
        (
            "HTML with only scripts",
            lambda: b"<html><script>alert(1)</script></html>",
            "text/html",
            DocumentError,
            "no visible text",
        ),
        ("text not UTF-8", lambda: b"\xff\xfe\xfa", "text/plain", DocumentError, "UTF-8"),
    ]


def _zip(members: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, body in members.items():
            archive.writestr(name, body)
    return out.getvalue()


def test_every_bad_document_is_refused_quickly_with_what_to_do(chromium: Printer) -> None:
    for label, build, media_type, kind, words in cases(chromium):
        data = build()
        started = time.perf_counter()
        with pytest.raises(kind) as caught:
            documents.read(data, media_type=media_type)
        seconds = time.perf_counter() - started
        assert words in str(caught.value), (label, str(caught.value))
        assert seconds < MAX_SECONDS, (label, seconds)


def test_limits_bound_pages_and_characters(chromium: Printer) -> None:
    pdf = chromium.print_pages(landmark_pages()).pdf
    with pytest.raises(DocumentTooLargeError, match="over the limit of 1 "):
        documents.read(pdf, limits=documents.Limits(max_pages=1))
    with pytest.raises(DocumentTooLargeError, match="over 10 characters"):
        documents.read(pdf, limits=documents.Limits(max_chars=10))
