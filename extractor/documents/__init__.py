"""Documents in: PDF, HTML and DOCX -> a text for the pipeline, and a map from its offsets back to pages and boxes.

The pipeline never sees a document: :func:`read` converts one to a :class:`Document` (its text
and where each piece came from), the unchanged pipeline extracts from ``document.text``, and
:func:`~extractor.documents.provenance.attach` puts each span's location on the result.
"""

from __future__ import annotations

from pathlib import Path

from extractor.documents.model import DOCX, HTML, MEDIA_TYPES, PDF, TEXT, Box, Document, Limits, Location, Ocr, Segment
from extractor.documents.sniffing import media_type_of
from extractor.errors import DocumentError

__all__ = [
    "DOCX",
    "HTML",
    "MEDIA_TYPES",
    "PDF",
    "TEXT",
    "Box",
    "Document",
    "Limits",
    "Location",
    "Ocr",
    "Segment",
    "convert",
    "media_type_of",
    "read",
]


def convert(data: bytes, *, media_type: str | None = None, name: str | None = None, limits: Limits) -> Document:
    """Convert a document's bytes (media type as declared, else told by its content and name).

    Raises :class:`~extractor.errors.DocumentError` and its kinds (415 unsupported, 422 unreadable,
    encrypted or without text, 413 over ``limits``).
    """
    kind = media_type_of(data, declared=media_type, name=name)
    if kind == PDF:
        from extractor.documents import pdf

        return pdf.convert(data, limits=limits, name=name)
    if kind == DOCX:
        from extractor.documents import docx

        return docx.convert(data, limits=limits, name=name)
    if kind == HTML:
        from extractor.documents import html

        return html.convert(data, limits=limits, name=name)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(f"a text/plain document must be UTF-8 (bad byte at {error.start})") from None
    if len(text) > limits.max_chars:
        from extractor.errors import DocumentTooLargeError

        raise DocumentTooLargeError(f"the text is over {limits.max_chars} characters (EXTRACTOR_MAX_DOCUMENT_CHARS)")
    return Document(text, TEXT, (Segment(0, len(text)),) if text else (), name=name)


def read(
    source: str | Path | bytes, *, media_type: str | None = None, name: str | None = None, limits: Limits | None = None
) -> Document:
    """Convert a document given as a path or as bytes (see :func:`convert`)."""
    if isinstance(source, bytes):
        return convert(source, media_type=media_type, name=name, limits=limits or Limits())
    path = Path(source)
    try:
        size = path.stat().st_size
        data = path.read_bytes() if size <= 512 * 1024 * 1024 else b""
    except OSError as error:
        raise DocumentError(f"{path}: cannot read it ({error.strerror})") from None
    if not data and size:
        raise DocumentError(f"{path}: {size} bytes is too large to read")
    return convert(data, media_type=media_type, name=name or path.name, limits=limits or Limits())
