"""extractor: reliable structured extraction on vLLM.

Public API: :func:`extract`, :func:`aextract`, :class:`Extractor`, tasks, results and errors.
"""

from extractor.api import Extractor, aextract, extract
from extractor.catalog.tasks import Catalog, Task
from extractor.chat import ChatReply
from extractor.config import Settings
from extractor.documents import Document
from extractor.engines import Engine, ScriptedEngine
from extractor.engines import lifeline as _lifeline
from extractor.errors import (
    ConfigError,
    DocumentError,
    DocumentTooLargeError,
    EngineError,
    ExtractionFailed,
    ExtractorError,
    InputError,
    ModelNotPreparedError,
    TaskError,
    TextTooLongError,
    UnknownTaskError,
)
from extractor.results import Attempt, ExtractionResult, SpanModel, Usage

# A process started by one that owns engines dies with its owner, however the owner dies: vLLM's
# spawned engine core and workers import the main module again, and with it this package.
_lifeline.watch()

__all__ = [
    "Attempt",
    "Catalog",
    "ChatReply",
    "ConfigError",
    "Document",
    "DocumentError",
    "DocumentTooLargeError",
    "Engine",
    "EngineError",
    "ExtractionFailed",
    "ExtractionResult",
    "Extractor",
    "ExtractorError",
    "InputError",
    "ModelNotPreparedError",
    "ScriptedEngine",
    "Settings",
    "SpanModel",
    "Task",
    "TaskError",
    "TextTooLongError",
    "UnknownTaskError",
    "Usage",
    "aextract",
    "extract",
]
