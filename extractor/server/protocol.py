"""Wire models of the HTTP API, apart from the logic behind them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema

from extractor.documents.model import MEDIA_TYPES
from extractor.documents.sniffing import MEDIA_TYPE_ALIASES
from extractor.options import ExtractOptions, TokenCount, whole_number
from extractor.results import Attempt, ExtractionResult

# Every request body is strict, on every route: a value of the wrong JSON type is a 422 naming the
# field, never coerced (no `false` for a number, no `0` for a boolean, no `"5"` for an integer).
STRICT = ConfigDict(extra="forbid", strict=True)


Integer = Annotated[int, BeforeValidator(whole_number)]
# Within a database integer, and exact as a JSON number everywhere (2**53 - 1): larger is a bad body, not an overflow.
ItemVersion = Annotated[int, Field(ge=1, le=2**53 - 1), BeforeValidator(whole_number)]
# A JSON array is the wire form of a tuple (strict mode alone takes tuples only); its items stay strict.
Turn = Annotated[tuple[str, str], BeforeValidator(lambda v: tuple(v) if isinstance(v, list) else v)]


_ESCAPED = {".": r"\.", "+": r"\+"}  # the rest of a media type's punctuation is literal in ECMA-262 and Python


def _any_case(text: str) -> str:
    # JSON Schema's patterns take no flags: each letter matches either case, as a media type does.
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else _ESCAPED.get(c, c) for c in text)


# What `base64.b64decode(validate=True)` takes: the service's check; here for the document to declare it.
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
# What `documents.sniffing` reads a declared type as (any case, parameters after `;`); "" is no type.
MEDIA_TYPE = (
    r"^(?:\s*(?:"
    + "|".join(_any_case(t) for t in (*MEDIA_TYPES, *MEDIA_TYPE_ALIASES, "application/octet-stream"))
    + r")\s*(?:;[\s\S]*)?)?$"
)


class DocumentIn(BaseModel):
    """A document sent in a JSON body (a multipart upload's ``file`` part becomes one of these)."""

    model_config = STRICT

    content: str = Field(
        min_length=1,
        description="the file's bytes, base64 (RFC 4648, with padding)",
        json_schema_extra={"pattern": BASE64},  # checked where it is decoded: a 422 naming document.content
    )
    media_type: str | None = Field(
        default=None,
        max_length=200,
        description="application/pdf, text/html, application/vnd.openxmlformats-officedocument."
        "wordprocessingml.document or text/plain (any case, with parameters; application/xhtml+xml, "
        "text/markdown and application/octet-stream too); null or empty: told by the content (and `name`); "
        "another type is a 415",
        json_schema_extra={"pattern": MEDIA_TYPE},  # checked where the document is read, as for an upload's part
    )
    name: str | None = Field(default=None, max_length=255, description="the file's name, echoed in the result")


# Either `text` or `document`, as the schema says: the fields are not nullable there (null is taken as absent).
ONE_SOURCE: dict[str, Any] = {"oneOf": [{"required": ["text"]}, {"required": ["document"]}]}


def _not_null(value: Any) -> Any:
    if value is None:
        raise ValueError("null is not allowed here: leave the field out")
    return value


def _one_source(text: str | None, document: DocumentIn | None) -> None:
    if (text is None) == (document is None):
        raise ValueError("send either `text` or `document` (a base64 file), not both and not neither")


class ExtractRequest(BaseModel):
    """Body of ``POST /extract/{task}``: a text, or a document (or a multipart upload with a ``file`` part)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=ONE_SOURCE)

    text: Annotated[str, Field(min_length=1)] | SkipJsonSchema[None] = Field(
        default=None, description="the text to extract from"
    )
    document: DocumentIn | SkipJsonSchema[None] = Field(
        default=None, description="a PDF, HTML, DOCX or text file instead of `text`: each span gets its location"
    )
    options: ExtractOptions = Field(default_factory=ExtractOptions)
    review: bool = Field(
        default=False,
        description="send the result to the review queue whatever its confidence (the task's "
        "`x-extractor.review.below` sends the results under it either way)",
    )

    _present = field_validator("text", "document", mode="before")(_not_null)

    @model_validator(mode="after")
    def _source(self) -> ExtractRequest:
        _one_source(self.text, self.document)
        return self


class ExtractOut(ExtractionResult):
    """Body of ``POST /extract/{task}``: the result, and its review item when it was sent to review."""

    review_id: int | None = Field(
        default=None, description="the review queue item holding this result (GET /review/{id}); null: not queued"
    )


def _unpatterned(schema: dict[str, Any]) -> None:
    for field in schema.get("properties", {}).values():
        field.pop("pattern", None)


class BatchDocumentIn(DocumentIn):
    """A batch item's document: its content and media type are checked as the item runs, an error of that item."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_unpatterned)


class BatchItem(BaseModel):
    """One text of a batch. Problems with the text itself become this item's error record."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=ONE_SOURCE)

    id: str | Integer | None = Field(default=None, description="echoed in the item's result, for matching")
    text: str | SkipJsonSchema[None] = None
    document: BatchDocumentIn | SkipJsonSchema[None] = Field(
        default=None,
        description="a document instead of `text`; one that cannot be read is this item's error (415, 422)",
    )

    _present = field_validator("text", "document", mode="before")(_not_null)

    @model_validator(mode="after")
    def _source(self) -> BatchItem:
        _one_source(self.text, self.document)
        return self


class BatchRequest(BaseModel):
    """Body of ``POST /extract/{task}/batch``."""

    model_config = STRICT

    items: list[BatchItem] = Field(min_length=1)
    options: ExtractOptions = Field(default_factory=ExtractOptions)
    review: bool = Field(default=False, description="send every item's result to the review queue")


class FieldOut(BaseModel):
    """One top-level field of a task."""

    name: str
    description: str
    type: str
    required: bool


class TaskOut(BaseModel):
    """A task as listed by ``GET /tasks``."""

    name: str
    title: str
    description: str
    fields: list[FieldOut]
    examples: int = Field(description="the task's fixed worked examples")
    pool: int = Field(0, description="labelled examples in examples/<task>.jsonl (0: none)")
    examples_per_request: int = Field(description="worked examples each request shows")
    model: str = Field("", description="the model serving the task (its x-extractor.model, else the service's)")
    warnings: list[str]
    version: str = Field(default="", description="a hash of the files the task was built from; each result names it")
    stale: bool = Field(
        default=False, description="an edit failed the load checks: the last good version serves, `error` says why"
    )
    error: TaskErrorOut | None = Field(default=None, description="when stale: the new version's load error")


class TaskErrorOut(BaseModel):
    """A task left out of the catalog, and why."""

    file: str
    pointer: str
    message: str


class ReloadOut(BaseModel):
    """Body of ``POST /tasks/reload``."""

    generation: int = Field(description="reloads since the service started")
    added: list[str]
    changed: list[str]
    removed: list[str]
    stale: list[str] = Field(description="tasks serving their last good version (GET /tasks says why)")
    errors: list[TaskErrorOut]
    duration_ms: float


class TasksOut(BaseModel):
    """Body of ``GET /tasks``."""

    tasks: list[TaskOut]
    errors: list[TaskErrorOut]


class PromptOut(BaseModel):
    """A task's prompt template."""

    file: str
    variables: list[str] = Field(description="the variables the template uses")
    layout: str = Field(
        description="'instruction': the template renders the instruction once, examples are compact "
        "demonstrations; 'turns': the template renders each text"
    )


class TaskDetailOut(TaskOut):
    """Body of ``GET /tasks/{task}``."""

    json_schema: dict[str, Any] = Field(alias="schema", description="the task's JSON Schema, as written")
    engine_schema: dict[str, Any] = Field(description="the schema that constrains decoding (x-* keys removed)")
    prompt: PromptOut
    settings: dict[str, Any] = Field(description="the task's x-extractor settings (null: the global default)")
    example_texts: list[str] = Field(
        default_factory=list, description="texts to try the task on: its fixed examples', then its pool's first"
    )

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class ErrorOut(BaseModel):
    """Body of every error response."""

    error: str = Field(description="a stable machine-readable code")
    message: str
    attempts: list[Attempt] | None = None
    detail: Any = None
    task_version: str | None = Field(default=None, description="with attempts: the version of the task that ran them")


class BatchItemOut(BaseModel):
    """One item of a batch: its result, or its error record (never both, never dropped)."""

    id: str | int | None = None
    status: int = Field(description="the status code this item alone would have had")
    result: ExtractionResult | None = None
    error: ErrorOut | None = None
    review_id: int | None = Field(default=None, description="the review queue item holding the result, if queued")


class BatchOut(BaseModel):
    """Body of ``POST /extract/{task}/batch``: one entry per item, in order."""

    results: list[BatchItemOut]


class ReadyOut(BaseModel):
    """Body of ``GET /readyz``."""

    ready: bool
    model: str
    reason: str


class ChatRequest(BaseModel):
    """Body of ``POST /chat``, the seed server's."""

    model_config = STRICT

    query: str = Field(
        min_length=1,
        description="the user's message",
        # some text, not only spaces: checked by the chat (a 422 naming `query`). Python's strip() also takes
        # U+001C-U+001F and U+0085, which a schema's \s (ECMA 262) does not: the pattern names them too
        json_schema_extra={"pattern": r"[^\s\u001c-\u001f\u0085]"},
    )
    history: list[Turn] = Field(default_factory=list, description="earlier [user, assistant] turns, oldest first")
    system: str = "You are a helpful assistant."
    stream: bool = Field(default=False, description="stream cumulative {'text'} JSON objects, each followed by \\0")
    user_stop_words: list[str] = Field(default_factory=list, description="stop (and strip) when the text ends in one")
    max_tokens: TokenCount | None = Field(default=None, description="default: EXTRACTOR_CHAT_MAX_TOKENS")
    temperature: float = Field(default=0.7, ge=0, le=2)


class ChatResponse(BaseModel):
    """Body of a non-streamed ``POST /chat``; each streamed chunk has this shape too."""

    text: str


ReviewStatus = Literal["pending", "accepted", "corrected", "rejected"]


class ReviewItemOut(BaseModel):
    """One item of the review queue."""

    id: int
    task: str
    task_version: str = Field(description="the version of the task that produced the result")
    text: str
    result: dict[str, Any] = Field(description="the extraction result as it was returned (POST /extract/{task})")
    confidence: float | None = Field(description="the result's lowest value confidence (null: none given)")
    status: ReviewStatus
    corrected: Any = Field(default=None, description="the corrected data (null unless corrected)")
    reviewer: str | None = Field(description="who decided: the X-Reviewer header, else the API key's fingerprint")
    created_at: datetime
    reviewed_at: datetime | None
    version: int = Field(description="changes of the item so far; a decision may name the version it was made on")


class ReviewPageOut(BaseModel):
    """Body of ``GET /review``."""

    items: list[ReviewItemOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null: no more items")


class DecisionRequest(BaseModel):
    """Body of ``POST /review/{id}/accept`` and ``/reject`` (optional)."""

    model_config = STRICT

    version: ItemVersion | None = Field(
        default=None, description="the item's version the decision was made on: 409 if it changed since"
    )
    nothing_found: bool = Field(
        default=False,
        description="the reviewer confirms that the text holds none of the task's values: only then may an "
        "answer without any value (every field null or empty) join the pool",
    )


def _an_answer(value: Any) -> Any:
    if value is None:
        raise ValueError("null is no answer: send the task's answer, shaped as `data` of a result")
    return value


# A task's answer as `data` of a result holds it: an object, or an array or scalar where the task's
# top level is not an object; never null. The document says so, so no schema-valid correction is
# refused for its form (the item's task, unknown to the document, checks the rest: 422 bad_correction).
Answer = Annotated[
    Any,
    AfterValidator(_an_answer),
    WithJsonSchema(
        {
            "type": ["object", "array", "string", "number", "boolean"],
            "description": "the right answer, as the task's schema describes it (as `data` of a result): an "
            "object, or what a top level that is not an object describes; never null",
        }
    ),
]


class CorrectionRequest(DecisionRequest):
    """Body of ``POST /review/{id}/correct``."""

    data: Answer


class PoolWriteOut(BaseModel):
    """Where an accepted or corrected item went: a line of the task's example pool."""

    file: str = Field(description="the reviewers' pool file, relative to EXTRACTOR_HOME (pools/<task>.jsonl)")
    line_id: str = Field(description="the line's id in the pool")
    task_version: str = Field(description="the task's version once the catalog reloaded with the line")


class DecisionOut(ReviewItemOut):
    """Body of a decision: the item as decided, and the pool line it became (accepted or corrected)."""

    pool: PoolWriteOut | None = None
    note: str | None = Field(default=None, description="why an accepted or corrected item did not go to the pool")
