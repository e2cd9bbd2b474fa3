"""DOCX -> text through python-docx: body paragraphs and table cells in order, each traced to its index and path.

The zip is checked before anything is unpacked: the members' declared sizes must add up to at
most ``limits.max_unzipped_bytes`` (Python's zipfile never inflates a member past its declared
size, so a lying header fails its CRC check instead of filling memory). Headers, footers,
footnotes and comments are not read. A DOCX has no pages until a word processor lays it out, so
its locations are paragraphs, not pages.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator

import docx
import docx.document
import docx.table
import docx.text.paragraph
from docx.opc.exceptions import PackageNotFoundError

from extractor.documents.model import DOCX, Document, Limits, Segment
from extractor.errors import DocumentError, DocumentTooLargeError


def check_zip(data: bytes, *, limits: Limits) -> None:
    """Refuse a zip bomb (413) or a zip that is no DOCX (422) before python-docx unpacks anything."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise DocumentError(f"not a readable DOCX: the zip is broken ({error})") from None
    if len(members) > limits.max_zip_entries:
        raise DocumentTooLargeError(
            f"the DOCX holds {len(members)} files, over the limit of {limits.max_zip_entries} (a zip bomb?)"
        )
    unpacked = sum(m.file_size for m in members)
    if unpacked > limits.max_unzipped_bytes:
        raise DocumentTooLargeError(
            f"the DOCX unpacks to {unpacked} bytes, over the limit of {limits.max_unzipped_bytes} (a zip bomb?)"
        )
    if not any(m.filename == "word/document.xml" for m in members):
        raise DocumentError("not a DOCX: the zip has no word/document.xml (an .xlsx, .pptx or other zip?)")


def convert(data: bytes, *, limits: Limits, name: str | None = None) -> Document:
    """The body's text, one line per paragraph, each a segment naming its paragraph index and path."""
    check_zip(data, limits=limits)
    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, KeyError, ValueError, zipfile.BadZipFile, OSError) as error:
        raise DocumentError(f"not a readable DOCX ({type(error).__name__}: {error})") from None
    except Exception as error:  # noqa: BLE001 - lxml's XMLSyntaxError and the like: a broken part is the file's fault
        raise DocumentError(f"not a readable DOCX: a part is broken ({type(error).__name__})") from None
    out: list[str] = []
    segments: list[Segment] = []
    length = 0
    for index, (path, paragraph) in enumerate(_paragraphs(document)):
        text = paragraph.text.replace("\t", " ")
        if index and out:
            out.append("\n")
            length += 1
        if text:
            segments.append(Segment(length, length + len(text), element=path, paragraph=index))
            out.append(text)
            length += len(text)
        if length > limits.max_chars:
            raise DocumentTooLargeError(
                f"the DOCX's text is over {limits.max_chars} characters (EXTRACTOR_MAX_DOCUMENT_CHARS); split it"
            )
    text = "".join(out)
    if not text.strip():
        raise DocumentError("the DOCX has no text in its body")
    return Document(text, DOCX, tuple(segments), name=name)


def _paragraphs(document: docx.document.Document) -> Iterator[tuple[str, docx.text.paragraph.Paragraph]]:
    """Every paragraph in reading order with its path: ``/body/p[3]``, ``/body/tbl[1]/tr[2]/tc[1]/p[1]``."""
    counts = {"p": 0, "tbl": 0}
    for block in document.iter_inner_content():
        if isinstance(block, docx.text.paragraph.Paragraph):
            counts["p"] += 1
            yield f"/body/p[{counts['p']}]", block
        else:
            counts["tbl"] += 1
            yield from _table(block, f"/body/tbl[{counts['tbl']}]")


def _table(table: docx.table.Table, path: str) -> Iterator[tuple[str, docx.text.paragraph.Paragraph]]:
    # A merged cell is listed once per grid column it spans: read it once. The elements are kept
    # (not their ids) so that lxml hands back the same proxy for the same cell.
    seen: list[object] = []
    for r, row in enumerate(table.rows, start=1):
        for c, cell in enumerate(row.cells, start=1):
            if any(cell._tc is tc for tc in seen):
                continue
            seen.append(cell._tc)
            for p, paragraph in enumerate(cell.paragraphs, start=1):
                yield f"{path}/tr[{r}]/tc[{c}]/p[{p}]", paragraph
