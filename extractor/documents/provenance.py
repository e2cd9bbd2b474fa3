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
        ocr_confidence=location.ocr_confidence,
    )


def describe(document: Document) -> DocumentModel:
    """The wire form of a document: name, media type, page sizes, converted text, notes."""
    return DocumentModel(
        name=document.name,
        media_type=document.media_type,
        pages=[PageModel(width=p.width, height=p.height) for p in document.pages],
        text=document.text,
        notes=list(document.notes),
        ocr_pages=list(document.ocr_pages),
    )


def _located(span: SpanModel, document: Document) -> SpanModel:
    """``span`` with its location; a span on OCR'd text has its confidence times the OCR's.

    The model's confidence is the probability that the value is right given the text; the OCR's
    (the lowest of the span's words) stands for the probability that the text is what the page
    says. Their product ranks a misread value as doubtful in the review queue.
    """
    if span.start is None or span.end is None:
        return span
    location = document.locate(span.start, span.end)
    update: dict[str, object] = {"location": location_model(location)}
    if location.ocr_confidence is not None and span.confidence is not None:
        update["confidence"] = round(span.confidence * location.ocr_confidence, 4)
    return span.model_copy(update=update)


def attach(result: ExtractionResult, document: Document) -> ExtractionResult:
    """``result`` (extracted from ``document.text``) with every span located and the document described.

    Values read by OCR have their confidence (``spans``, ``confidences`` and the lowest, ``confidence``)
    times the OCR's.
    """
    spans = [_located(s, document) for s in result.spans]
    update: dict[str, object] = {
        "spans": spans,
        "removed": [_located(s, document) for s in result.removed],
        "document": describe(document),
    }
    if document.ocr_pages and result.confidences:
        confidences = dict(result.confidences)
        for span in spans:
            ocr_read = span.location is not None and span.location.ocr_confidence is not None
            if ocr_read and span.confidence is not None and span.path in confidences:
                confidences[span.path] = min(confidences[span.path], span.confidence)
        update["confidences"] = confidences
        update["confidence"] = min(confidences.values())
    return result.model_copy(update=update)
