"""What an extraction returns: every attempt, summed usage, the data, its spans and its typed value."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Usage(BaseModel):
    """Tokens spent, summed over attempts."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class BoxModel(BaseModel):
    """A rectangle on a PDF page: points (1/72 inch) from the page's top-left corner, as the page is drawn."""

    page: int = Field(description="1-based page number")
    x0: float
    y0: float
    x1: float
    y1: float


class LocationModel(BaseModel):
    """Where a span sits in the document it was converted from."""

    pages: list[int] = Field(default_factory=list, description="PDF: the 1-based pages the span is on")
    boxes: list[BoxModel] = Field(default_factory=list, description="PDF: one box per line the span touches")
    elements: list[str] = Field(
        default_factory=list,
        description="HTML: XPath of each element holding part of the span; DOCX: body path (/body/p[3], "
        "/body/tbl[1]/tr[2]/tc[1]/p[1])",
    )
    paragraphs: list[int] = Field(
        default_factory=list, description="DOCX: 0-based indices of the paragraphs (table cells' included)"
    )
    ocr_confidence: float | None = Field(
        default=None,
        description="PDF pages read by OCR: the lowest confidence (0-1) tesseract gave a word of the span; "
        "null when no character of it was OCR'd",
    )


class PageModel(BaseModel):
    """A PDF page's size in points."""

    width: float
    height: float


class DocumentModel(BaseModel):
    """The document a result was extracted from: spans' offsets point into ``text``, its conversion."""

    name: str | None = None
    media_type: str
    pages: list[PageModel] = Field(default_factory=list, description="PDF: each page's size, in order")
    text: str = Field(description="the text the document converted to: every span's start/end index it")
    notes: list[str] = Field(
        default_factory=list, description="what the conversion left out (pages with no text) or read by OCR"
    )
    ocr_pages: list[int] = Field(default_factory=list, description="PDF: the 1-based pages read by OCR")


class SpanModel(BaseModel):
    """Where one extracted string sits in the source text (code-point offsets)."""

    path: str = Field(description="JSON pointer of the value in `data`")
    value: str = Field(
        description="the value as the text states it; for a typed value (a date, a number): its evidence"
    )
    start: int | None
    end: int | None
    status: Literal["exact", "normalized", "fuzzy", "missing"] = Field(
        description="exact: text[start:end] == value; normalized: equal up to case, Unicode form and "
        "whitespace; fuzzy: a near match (start/end give the text it matched); missing: not found"
    )
    confidence: float | None = Field(
        default=None,
        description="the probability that this value is right, from the model's own token probabilities under "
        "the constraint (calibrated on the task's pool when `extractor calibrate` was run); null when the engine "
        "gave no token probabilities",
    )
    location: LocationModel | None = Field(
        default=None, description="for a document: where the span sits in it (null for a plain text, or not found)"
    )
    normalized: str | int | float | None = Field(
        default=None,
        description="a typed value read from the evidence in `value` (as `data` holds it: a date as YYYY-MM-DD, "
        "a duration as ISO 8601, a number); null for a value copied as is",
    )
    unit: str | None = Field(
        default=None, description="the currency (ISO 4217) or unit of a typed number, when the evidence names one"
    )


class ChunkModel(BaseModel):
    """One piece of a long document, extracted on its own (code-point offsets)."""

    start: int
    end: int


class Attempt(BaseModel):
    """One generate -> parse -> validate round."""

    number: int
    raw: str = Field(description="the model's output, verbatim")
    repaired: bool = Field(description="the output was not valid JSON and json-repair fixed it")
    errors: list[str] = Field(description="validation and grounding problems; empty when the attempt was accepted")
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    latency_ms: float
    chunk: int | None = Field(
        default=None, description="index in `chunks` of the piece this attempt read; null when the text was whole"
    )

    @property
    def valid(self) -> bool:
        return not self.errors


class ExtractionResult(BaseModel):
    """A successful extraction. ``data`` is valid against the task schema."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    task: str
    task_version: str = Field(default="", description="the version of the task that produced it (GET /tasks/{task})")
    data: Any = Field(description="the extracted value, as the task schema describes it (an object, an array, ...)")
    value: Any = Field(default=None, exclude=True, description="`data` as a typed pydantic object")
    spans: list[SpanModel] = Field(default_factory=list)
    removed: list[SpanModel] = Field(
        default_factory=list,
        description="values dropped: by strict grounding after the last attempt, or past an array's "
        "maxItems when merging the chunks of a long document",
    )
    chunks: list[ChunkModel] = Field(
        default_factory=list, description="the pieces a long text was split into; empty when it was read whole"
    )
    grounded_fields: list[str] = Field(
        default_factory=list,
        description="schema pointers of the fields whose decoding was constrained to spans of the text",
    )
    grounded_decoding: Literal["grammar", "enum", "posthoc", "off"] = Field(
        default="off",
        description="how grounded fields were held to the text while decoding: a substring grammar, an enum of "
        "spans, not at all (checked after generation; `notes` says why), or off (no grounded decoding asked)",
    )
    notes: list[str] = Field(
        default_factory=list,
        description="why it ran other than asked: decoding weaker than asked, a max_tokens clamped to the window",
    )
    confidences: dict[str, float] = Field(
        default_factory=dict,
        description="every non-null scalar value's confidence (as `spans[*].confidence`), by JSON pointer in `data`",
    )
    confidence: float | None = Field(
        default=None,
        description="the lowest confidence of any value (1.0 when nothing was extracted); null when the engine "
        "gave no token probabilities",
    )
    calibrated: bool = Field(
        default=False,
        description="the confidences were mapped through the task's calibration (`calibration/<task>.json`); "
        "false: the model's raw probabilities",
    )
    cuts: int = Field(
        default=0,
        description="attempts cut at max_tokens (finish reason `length`); each was re-asked with a larger budget",
    )
    document: DocumentModel | None = Field(
        default=None, description="when a document was sent: its media type, pages and converted text"
    )
    attempts: list[Attempt]
    usage: Usage
    model: str
    latency_ms: float
