"""``extractor review``: the review queue listed, its decided items exported as gold or as pool lines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from extractor.cli.output import print_json
from extractor.cli.settings import add_settings, settings_from
from extractor.errors import ConfigError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``review list`` and ``review export TASK``."""
    review = commands.add_parser("review", help="the review queue: list its items, export the decided ones as gold")
    review_actions = review.add_subparsers(dest="action", required=True)
    lister = review_actions.add_parser("list", help="items of the queue, newest (or least confident) first")
    lister.add_argument("--task", help="only this task's items")
    lister.add_argument("--status", choices=["pending", "accepted", "corrected", "rejected"])
    lister.add_argument("--below", type=float, help="only items with a confidence under this")
    lister.add_argument("--order", choices=["newest", "confidence"], default="newest")
    lister.add_argument("--limit", type=int, default=50, help="items to list (default 50, at most 500)")
    lister.add_argument("--cursor", help="the next page: the cursor the previous listing printed")
    lister.add_argument("--json", action="store_true", help="print one JSON object {items, next_cursor}")
    add_settings(lister)
    lister.set_defaults(handler=run)
    exporter = review_actions.add_parser(
        "export",
        help="write a task's accepted and corrected items as a gold file (`extractor eval` reads it), "
        "or (--pool) the reviewers' pool into the catalog's examples/ for an analyst to commit",
    )
    exporter.add_argument("task")
    exporter.add_argument(
        "--out", metavar="FILE.jsonl", help="the gold file to write (with --pool: the pool to append to)"
    )
    exporter.add_argument(
        "--pool",
        action="store_true",
        help="append the reviewed lines of $EXTRACTOR_HOME/pools/TASK.jsonl missing from examples/TASK.jsonl "
        "(or --out) to it, who decided and when included",
    )
    add_settings(exporter)
    exporter.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """List the queue's items, or export a task's decided items (as gold, or with ``--pool`` as pool lines)."""
    from extractor.review.export import write_gold
    from extractor.review.store import ReviewStore

    store = ReviewStore.from_settings(settings_from(args))
    try:
        if args.action == "export" and args.pool:
            return _export_pool(args)
        if args.action == "export":
            if args.out is None:
                raise ConfigError("extractor review export: give --out GOLD.jsonl (or --pool)")
            out = Path(args.out)
            done = write_gold(out, store.decided(args.task))
            skipped = f"; {done.skipped} skipped (not an object answer)" if done.skipped else ""
            print(f"{done.written} accepted or corrected item(s) of {args.task} written{skipped}", file=sys.stderr)
            print(out)
            return 0
        page = store.page(
            task=args.task, status=args.status, below=args.below, order=args.order, limit=args.limit, cursor=args.cursor
        )
    finally:
        store.close()
    if args.json:
        print_json({"items": [i.as_json() for i in page.items], "next_cursor": page.next_cursor})
        return 0
    for item in page.items:
        confidence = f"{item.confidence:.2f}" if item.confidence is not None else "-"
        text = " ".join(item.text.split())
        text = text if len(text) <= 60 else text[:59] + "…"
        print(f"{item.id:>6}  {item.status:<9}  {confidence:>4}  {item.task}  {text}")
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}", file=sys.stderr)
    return 0


def _export_pool(args: argparse.Namespace) -> int:
    from extractor.catalog.tasks import TASK_NAME
    from extractor.review.corrections import pool_path
    from extractor.review.export import append_pool

    settings = settings_from(args)
    if not TASK_NAME.match(args.task):
        raise ConfigError(f"extractor review export: {args.task!r} is not a task name")
    out = Path(args.out) if args.out else settings.tasks_dir / "examples" / f"{args.task}.jsonl"
    reviewed = pool_path(settings.pools_dir, args.task)
    done = append_pool(reviewed, out)
    print(
        f"{done.written} reviewed line(s) of {args.task} from {reviewed} appended ({done.skipped} there already)",
        file=sys.stderr,
    )
    print(out)
    return 0
