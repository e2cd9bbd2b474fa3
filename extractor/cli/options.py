"""The extraction options a command takes on its command line (None: the task's setting, then the global one)."""

from __future__ import annotations

import argparse
import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from extractor.options import OptionArgs


def _reference_date(value: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date: write YYYY-MM-DD") from None


def options_from(args: argparse.Namespace) -> OptionArgs:
    """The extraction options given on the command line (None: the task's setting, then the global one)."""
    return {
        "temperature": args.temperature,
        "max_attempts": args.max_attempts,
        "max_tokens": args.max_tokens,
        "grounding": args.grounding,
        "chunk": args.chunk,
        "grounded_decoding": args.grounded_decoding,
        "reference_date": args.reference_date,
    }


def add_reference_date(parser: argparse.ArgumentParser) -> None:
    """``--reference-date``: what relative dates in typed values are read against."""
    parser.add_argument(
        "--reference-date",
        type=_reference_date,
        metavar="DATE",
        help="YYYY-MM-DD that relative dates in typed values are read against (default: today)",
    )


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command that runs many extractions (``batch``, ``eval``)."""
    parser.add_argument("--grounding", choices=["strict", "flag", "off"])
    parser.add_argument("--chunk", action=argparse.BooleanOptionalAction, help="chunk long texts (default: the task's)")
    add_reference_date(parser)
    parser.add_argument(
        "--grounded-decoding",
        action=argparse.BooleanOptionalAction,
        help="hold grounded string fields to the text while decoding (default: each task's setting)",
    )
    parser.add_argument("--concurrency", type=int, metavar="N", help="extractions in flight (default: max-num-seqs)")
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds between progress lines off a terminal",
    )
