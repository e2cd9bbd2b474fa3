"""``extractor model``: prepare a packaged model, or merge an adapter into a copy of the weights."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from extractor.cli.settings import add_settings, settings_from
from extractor.errors import ExtractorError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``model prepare|merge``."""
    model = commands.add_parser(
        "model", help="prepare a packaged model (--model default|gemma3-270m), or merge an adapter"
    )
    model.add_argument("action", choices=["prepare", "merge"])
    model.add_argument("--force", action="store_true", help="prepare: convert again even if already prepared")
    model.add_argument("--adapter", help="merge: the adapter folder (`extractor train`'s output)")
    model.add_argument("--out", help="merge: the merged model's folder (then EXTRACTOR_MODEL=that folder)")
    add_settings(model)
    model.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Prepare the packaged model, or merge ``--adapter`` into a copy of the weights at ``--out``."""
    from extractor.models import prepare_model, resolve_model_dir

    settings = settings_from(args)
    if args.action == "prepare":
        print(prepare_model(settings, force=args.force))
        return 0
    from extractor.adapters.merge import merge

    if not args.adapter or not args.out:
        raise ExtractorError("model merge needs --adapter FOLDER (from `extractor train`) and --out FOLDER")
    out = merge(resolve_model_dir(settings), Path(args.adapter), Path(args.out))
    print(f"merged {args.adapter} into {out}; serve it with EXTRACTOR_MODEL={out}", file=sys.stderr)
    print(out)
    return 0
