"""One error tree: every error the library raises on purpose derives from ExtractorError."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from extractor.results import Attempt


class ExtractorError(Exception):
    """Root of every error extractor raises on purpose."""


class ConfigError(ExtractorError):
    """A setting is missing or has a bad value; the message names the setting."""


class TaskError(ExtractorError):
    """A task file is invalid; the message names the file and the JSON pointer."""

    def __init__(self, path: str, pointer: str, message: str) -> None:
        self.path = path
        self.pointer = pointer
        self.reason = message
        where = f"{path}: {pointer}" if pointer else path
        super().__init__(f"{where}: {message}")


class UnknownTaskError(ExtractorError):
    """The task name is not in the loaded catalog."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = list(known)
        listed = ", ".join(self.known) if self.known else "(no tasks loaded)"
        super().__init__(f"unknown task {name!r}; known tasks: {listed}")


class TaskNotLoadedError(ExtractorError):
    """The task's files are in the catalog folder, but it was left out at load; carries why."""

    def __init__(self, name: str, errors: Sequence[TaskError]) -> None:
        self.name = name
        self.errors = list(errors)
        reasons = "; ".join(str(e) for e in self.errors)
        super().__init__(
            f"task {name!r} was left out of the catalog at load: {reasons}; "
            "fix it (the catalog reloads on save, on POST /tasks/reload and on SIGHUP)"
        )


class InputError(ExtractorError):
    """The input text cannot be extracted from as given (empty, too long, ...)."""


class TextTooLongError(InputError):
    """The rendered prompt does not fit in the model's context window."""

    def __init__(self, *, prompt_tokens: int, max_tokens: int, max_model_len: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.max_model_len = max_model_len
        super().__init__(
            f"text too long: the prompt takes {prompt_tokens} tokens and the answer up to "
            f"{max_tokens}, but the model window is {max_model_len} tokens; shorten the text "
            "or raise max_model_len"
        )


class BadRequestError(InputError):
    """The request asks for something the API cannot do (``n`` > 1, an image part, ...); names the field."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


class RequestRejectedError(InputError):
    """The engine refused the request as malformed (a remote 400 or 422); retrying cannot help."""


class PayloadTooLargeError(InputError):
    """A request body, a text or a batch is over a configured limit; the message names it."""


class BadJsonError(InputError):
    """A request body is not JSON we accept (not UTF-8, duplicate keys, NaN, too deep...); the message says where."""


class BodyTimeoutError(InputError):
    """The request body did not arrive within ``body_timeout_s`` (a slow or stalled client)."""


class HeaderTimeoutError(InputError):
    """The request line and headers did not arrive within ``header_timeout_s`` (a slow or stalled client)."""


class EngineError(ExtractorError):
    """The generation engine failed or is not available."""


class UpstreamError(EngineError):
    """The remote engine's servers failed on every try (5xx, broken answers): HTTP 502."""


class UpstreamTimeoutError(UpstreamError):
    """The remote engine's servers did not answer in time on every try: HTTP 504."""


class EngineDeadError(EngineError):
    """The in-process engine died (its core process is gone): the service stops so a supervisor restarts it."""


class ModelNotPreparedError(EngineError):
    """The default model has not been converted yet."""


class EngineNotReadyError(EngineError):
    """The engine is still starting, failed to start, or the service is shutting down."""

    def __init__(self, message: str, *, retry_after: int = 5) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class ShuttingDownError(EngineNotReadyError):
    """The service is draining after SIGTERM or SIGINT: what is in flight finishes, nothing new starts."""


class OverloadedError(ExtractorError):
    """The service is at its admission limit (in flight + queued); retry later."""

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class RequestTimeoutError(ExtractorError):
    """The request ran past the per-request timeout; its engine work was aborted."""


class ExtractionFailed(ExtractorError):  # noqa: N818 - the name users catch, as in the docs
    """No attempt produced a valid result; carries every attempt."""

    def __init__(self, task: str, attempts: Sequence[Attempt]) -> None:
        self.task = task
        self.attempts = list(attempts)
        self.task_version = ""  # the version of the task that failed (set by the Extractor)
        last = self.attempts[-1].errors if self.attempts else []
        detail = "; ".join(last[:3]) if last else "no attempt was made"
        super().__init__(f"task {task!r}: no valid result after {len(self.attempts)} attempt(s): {detail}")


class _ReasonedFailure(ExtractionFailed):
    """An :class:`ExtractionFailed` whose message is its ``reason``, not the last attempt's errors."""

    def __init__(self, task: str, attempts: Sequence[Attempt], *, reason: str) -> None:
        super().__init__(task, attempts)
        self.reason = reason
        self.args = (f"task {task!r}: {reason}",)


class ChunkedExtractionFailed(_ReasonedFailure):
    """A long document's chunks could not all be extracted, or their merge broke the schema.

    Carries every chunk's attempts (each with its ``chunk`` index); the message names the chunk.
    """


class UnstatedValueError(_ReasonedFailure):
    """A passage read for one typed field states no phrase of its kind, and the field may not be null.

    Nothing was asked (no attempts): the substring rule would only have let the model guess (``reason``
    says which field). Not a chunk's failure: the passage is one field's reading, and the document goes on.
    """


class ReviewError(ExtractorError):
    """The review queue cannot do what was asked; the subclasses say why."""


class ReviewNotFoundError(ReviewError):
    """No review item has this id: HTTP 404."""

    def __init__(self, item_id: int) -> None:
        self.item_id = item_id
        super().__init__(f"no review item {item_id}; GET /review lists the queue")


class ReviewConflictError(ReviewError):
    """The item was decided by someone else first (or changed since the version given): HTTP 409."""


class CorrectionError(ReviewError):
    """A correction (or an accepted result) cannot teach the task: not valid, or a value not in the text (422)."""


class ReviewStoreError(ReviewError):
    """The review database cannot be reached or refused the work: HTTP 503; the message names the database."""


class DocumentError(InputError):
    """A document cannot be read (corrupt, not what its media type says): HTTP 422; the message says what to fix."""


class UnsupportedDocumentError(DocumentError):
    """A document of a media type extractor does not read: HTTP 415; the message lists the ones it does."""


class EncryptedDocumentError(DocumentError):
    """A password-protected PDF: HTTP 422."""


class NoTextLayerError(DocumentError):
    """A PDF with no text at all, neither a text layer nor any read by OCR (EXTRACTOR_OCR=off, or a blank scan): 422."""


class OcrUnavailableError(ExtractorError):
    """A page needs OCR and tesseract, or one of its languages, is not installed: HTTP 503, naming the package."""


class DocumentTooLargeError(PayloadTooLargeError):
    """A document over a limit: pages, converted characters, or a DOCX's unpacked size (a zip bomb): HTTP 413."""
