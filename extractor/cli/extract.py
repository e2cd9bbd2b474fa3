"""``extractor extract``: one text (or a file: a PDF, HTML or DOCX converts), its result as JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from extractor.cli.options import add_reference_date, options_from
from extractor.cli.output import engine_output_to_stderr, print_json
from extractor.cli.settings import add_settings, settings_from
from extractor.config import Settings
from extractor.errors import ExtractionFailed, ExtractorError, UnsupportedDocumentError

if TYPE_CHECKING:
    from extractor.documents import Document


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``extract TASK``: its text from ``--text``, ``--file`` or stdin."""
    extract = commands.add_parser("extract", help="extract one text and print the result as JSON")
    extract.add_argument("task")
    source = extract.add_mutually_exclusive_group()
    source.add_argument("--text", help="the text (default: stdin)")
    source.add_argument(
        "--file", help="read the text from this file: a PDF, HTML or DOCX converts and each value gets its location"
    )
    extract.add_argument("--grounding", choices=["strict", "flag", "off"])
    extract.add_argument(
        "--chunk",
        action=argparse.BooleanOptionalAction,
        help="split a text too long for the model window into overlapping chunks (default: the task's setting)",
    )
    extract.add_argument(
        "--grounded-decoding",
        action=argparse.BooleanOptionalAction,
        help="constrain grounded string fields to spans of the text while decoding (default: the task's setting)",
    )
    add_reference_date(extract)
    add_settings(extract)
    extract.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Extract the task from the text and print the result (or the failure and its attempts) as JSON."""
    from extractor.api import Extractor
    from extractor.documents import TEXT

    document: Document | None = None
    if args.text is None and args.file is None and sys.stdin.isatty():
        raise ExtractorError("no text: pass --text, --file or pipe the text on stdin")
    extractor = Extractor(settings=settings_from(args), tasks=[args.task])
    spec = extractor.task(args.task)  # fail fast on an unknown task, before loading the model
    if args.text is not None:
        text = args.text
    elif args.file is not None:
        document = _read_file(Path(args.file), settings_from(args), ocr_languages=spec.settings.ocr_languages)
        text = document.text
    else:
        text = sys.stdin.read()
    # The engine logs while it starts, works and shuts down: all of it inside the redirect.
    with engine_output_to_stderr():
        try:
            options = options_from(args)
            if document is not None and document.media_type != TEXT:
                result = extractor.extract_document(args.task, document, **options)
            else:
                result = extractor.extract(args.task, text, **options)
        except ExtractionFailed as error:
            failed: ExtractionFailed | None = error
        else:
            failed = None
        finally:
            extractor.close()
    if failed is not None:
        print_json(
            {
                "error": "extraction_failed",
                "message": str(failed),
                "attempts": [a.model_dump(mode="json") for a in failed.attempts],
            }
        )
        return 1
    print_json(result.model_dump(mode="json"))
    return 0


def _read_file(path: Path, settings: Settings, *, ocr_languages: str | None = None) -> Document:
    """``--file``: a PDF, HTML or DOCX converts (its spans get locations); any other file is read as UTF-8 text."""
    from extractor import documents

    try:
        data = path.read_bytes()
    except OSError as error:
        raise ExtractorError(f"{path}: cannot read it ({error.strerror})") from None
    limits = documents.Limits.from_settings(settings, ocr_languages=ocr_languages)
    try:
        documents.media_type_of(data, name=path.name)
    except UnsupportedDocumentError:
        return documents.convert(data, media_type=documents.TEXT, name=path.name, limits=limits)  # .json, .csv...
    return documents.convert(data, name=path.name, limits=limits)
