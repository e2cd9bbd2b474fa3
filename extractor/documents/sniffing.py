"""Which kind of document some bytes are: their content first (magic numbers), then the declared type and name."""

from __future__ import annotations

import io
import zipfile

from extractor.documents.model import DOCX, HTML, MEDIA_TYPES, PDF, TEXT
from extractor.errors import UnsupportedDocumentError

_SUFFIXES = {
    ".pdf": PDF,
    ".html": HTML,
    ".htm": HTML,
    ".xhtml": HTML,
    ".docx": DOCX,
    ".txt": TEXT,
    ".text": TEXT,
    ".md": TEXT,
}
MEDIA_TYPE_ALIASES = {"application/xhtml+xml": HTML, "text/markdown": TEXT}
SUPPORTED = "PDF (application/pdf), HTML (text/html), DOCX (" + DOCX + ") or UTF-8 text (text/plain)"


def _declared(media_type: str | None) -> str | None:
    if not media_type:
        return None
    base = media_type.split(";", 1)[0].strip().lower()
    base = MEDIA_TYPE_ALIASES.get(base, base)
    if base == "application/octet-stream":
        return None
    if base not in MEDIA_TYPES:
        raise UnsupportedDocumentError(f"unsupported media type {base[:100]!r}; send {SUPPORTED}")
    return base


def media_type_of(data: bytes, *, declared: str | None = None, name: str | None = None) -> str:
    """The media type to read ``data`` as; 415 for a type extractor does not read (an image, a .doc, an .xlsx...)."""
    stated = _declared(declared)
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    if data[:1024].find(b"%PDF-") != -1:
        return PDF
    if data.startswith(b"PK\x03\x04"):
        if stated in (None, DOCX) or _is_docx(data):
            return DOCX
        raise UnsupportedDocumentError(f"the content is a zip, not {stated}; send {SUPPORTED}")
    if data.startswith(b"\xd0\xcf\x11\xe0"):
        raise UnsupportedDocumentError(f"a legacy Word/Office (.doc) file; save it as .docx, or send {SUPPORTED}")
    if stated == PDF:
        return PDF  # not a PDF after all: the reader says so (422)
    if stated == DOCX:
        return DOCX
    if stated is not None:
        return stated
    suffix = ("." + name.rsplit(".", 1)[-1].lower()) if name and "." in name else ""
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    lowered = head[:200].lower()
    if lowered.startswith((b"<!doctype html", b"<html")) or b"<body" in data[:4096].lower():
        return HTML
    if suffix:
        raise UnsupportedDocumentError(f"cannot read a {suffix} file; send {SUPPORTED}")
    return TEXT


def _is_docx(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "word/document.xml" in archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False
