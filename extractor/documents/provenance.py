"""Provenance: a result's spans (offsets in a document's text) -> where each sits in the document."""

from __future__ import annotations

from extractor.documents.model import Document, Location
from extractor.results import BoxModel, DocumentModel, ExtractionResult, LocationModel, PageModel, SpanModel


def location_model(location: Location) -> LocationModel:
    """The wire form of a :class:`Location`."""
    return LocationModel(
        pages=list(location.pages),
        boxes=[BoxModel(page=b.page, x0=b.x0, y0=b.y0, x1=b.x1, y1=b.y1) for b in location.boxes],
        elements=list(location.elements),
        paragraphs=list(location.paragraphs),
    )


def describe(document: Document) -> DocumentModel:
    """The wire form of a document: name, media type, page sizes, converted text, notes."""
    return DocumentModel(
        name=document.name,
        media_type=document.media_type,
        pages=[PageModel(width=p.width, height=p.height) for p in document.pages],
        text=document.text,
        notes=list(document.notes),
    )


def _located(span: SpanModel, document: Document) -> SpanModel:
    if span.start is None or span.end is None:
        return span
    return span.model_copy(update={"location": location_model(document.locate(span.start, span.end))})


def attach(result: ExtractionResult, document: Document) -> ExtractionResult:
    """``result`` (extracted from ``document.text``) with every span located and the document described."""
    return result.model_copy(
        update={
            "spans": [_located(s, document) for s in result.spans],
            "removed": [_located(s, document) for s in result.removed],
            "document": describe(document),
        }
    )
