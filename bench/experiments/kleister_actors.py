"""Kleister-NDA through `extractor batch --ray` on one host: one engine, then several sharing its GPU (issue 58).

    python3 -m bench.experiments.kleister_actors --pool 254 --actors 1,2,4 --repeat 3 --label h100-actors

One engine serves one pipeline thread and one engine core, and with the contracts both are busy
on the CPU while the GPU waits (``bench/results/documents.md``). ``extractor batch --ray
--actors N --gpus-per-actor 1/N`` gives each of N actors its own pipeline and engine on the same
GPU; this measures it on the dev contracts as a user would run it: a folder of PDFs (the dev
split, ``--repeat`` times under new names), the task as shipped (or ``--newcomer``'s) with
``--pool`` train documents imported, each point on actors started afresh. The pool waits for
all its actors before the first call (Ray Data's ``wait_for_min_actors_s``; the product starts
work as the first is ready), so the batch's own rate, its extraction window from the actors'
clocks (the summary's ``elapsed_s``; their start is ``start_s``), is N engines' steady rate.
Kleister F1 over every record, each copy scored.

The data stays in ``../shared/eval/kleister_nda`` (links in a temporary folder); figures go to
``bench/results/kleister.json`` and ``kleister.md``, a run a label ``LABEL-actorsN``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, machine, save
from bench.kleister import DATA, bring_tuned, catalog_root, render, summarize, tokens, tune
from extractor import stages
from extractor.config import Settings
from extractor.jobs.batch import BatchSummary
from extractor.options import ExtractOptions
from extractor.results import Attempt
from extractor.scale import ray_batch
from extractor.scale.shards import shards


def dev_folder(lines: list[dict[str, Any]], into: Path, repeat: int) -> dict[str, dict[str, Any]]:
    """Links to the contracts' PDFs, ``repeat`` times under new names; the gold line of each name."""
    into.mkdir(parents=True, exist_ok=True)
    gold: dict[str, dict[str, Any]] = {}
    for copy in range(repeat):
        for line in lines:
            name = f"{copy}-{Path(line['file']).name}"
            (into / name).symlink_to(DATA / line["file"])
            gold[name] = line
    return gold


def scored(output: Path, gold: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The batch's records as ``bench.kleister`` scores them."""
    records = []
    for shard in shards(output):
        for text in shard.read_text(encoding="utf-8").splitlines():
            row = json.loads(text)
            line = gold[row["id"]]
            record: dict[str, Any] = {"id": row["id"], "gold": line["expected"], "positions": {}, "seconds": 0.0}
            record["stages"] = row.get("stages", {})
            if not row.get("ok"):
                record["error"] = f"{row['error']['kind']}: {row['error'].get('message', '')[:200]}"
                record["pages"] = 0
            else:
                result = row["result"]
                at = [Attempt.model_validate(a) for a in result.get("attempts", [])]
                document = result.get("document") or {}
                record.update(data=result["data"], attempts=len(at), pages=len(document.get("pages", [])))
                record["tokens"] = tokens(at)
            records.append(record)
    return records


def command(args: argparse.Namespace, root: Path, folder: Path, actors: int) -> tuple[Path, float, BatchSummary]:
    """One ``extractor batch --ray`` over ``folder`` on actors started afresh: (output, seconds, summary)."""
    import ray.data
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    settings = Settings.from_env(engine=args.engine, tasks_dir=root)
    out = folder.parent / f"out-{folder.name}"
    config = ray_batch.RayBatchConfig(
        task="nda",
        inputs=(folder,),
        output=out,
        actors=actors,
        gpus_per_actor=min(1.0, gpus / actors) if gpus else 0.0,
        concurrency=args.concurrency,
        batch_rows=args.rows_per_call,  # small calls, many at once: no actor waits on another's slow call
        calls_per_actor=max(1, args.concurrency // args.rows_per_call),
        options=ExtractOptions(chunk=True),
    )
    ray.data.DataContext.get_current().wait_for_min_actors_s = 3600  # every engine ready before the first call
    started = time.perf_counter()
    summary = ray_batch.run(config, settings=settings)
    return out, time.perf_counter() - started, summary


def point(args: argparse.Namespace, root: Path, lines: list[dict[str, Any]], tmp: Path, actors: int) -> dict[str, Any]:
    folder = tmp / f"docs-{actors}"
    gold = dev_folder(lines, folder, args.repeat)
    out, seconds, summary = command(args, root, folder, actors)
    records = scored(out, gold)
    result = summarize(records, elapsed=summary.elapsed_s, ready=summary.start_s, args=args)
    result.pop("records")
    result |= {
        "label": f"{args.label or 'actors'}-actors{actors}",
        "mode": "ray actors",
        "actors": actors,
        "gpus_per_actor": round(1 / actors, 3),
        "repeat": args.repeat,
        "command_s": round(seconds, 1),
        "docs_per_s_overall": round(summary.written / seconds, 3),
        "stages_s_per_doc": {
            k: round(v / max(1, len(records)), 3)
            for k, v in stages.total([r.get("stages", {}) for r in records]).items()
        },
        "machine": machine(),
    }
    print(f"bench: {json.dumps({k: v for k, v in result.items() if k != 'by_position'})}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="dev", choices=["dev", "train"])
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--label", default="")
    parser.add_argument("--engine", default="vllm", help="scripted: a dry run of the plumbing")
    parser.add_argument("--pool", type=int, default=0, help="train documents imported into the pool (0: none)")
    parser.add_argument("--newcomer", action="store_true", help="a newcomer's task: the fields' descriptions only")
    parser.add_argument("--tune", type=int, default=0, help="first `extractor tune --documents` on N of the pool's")
    parser.add_argument("--tune-budget", type=float, default=0, help="seconds for that tune (0: none)")
    parser.add_argument("--tuned", type=Path, help="a tune's file from another run (tuned/nda.json), kept as found")
    parser.add_argument("--actors", default="1,2,4", help="points: engines sharing the host's GPU")
    parser.add_argument("--repeat", type=int, default=3, help="copies of the contracts a point reads")
    parser.add_argument("--concurrency", type=int, default=64, help="documents in flight per actor")
    parser.add_argument("--rows-per-call", type=int, default=4, help="documents an actor call takes")
    args = parser.parse_args()
    args.forget_sources = False
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    if args.tune and args.tuned:
        parser.error("--tune or --tuned, not both: the one tunes here, the other brings a tune measured elsewhere")
    lines = [json.loads(x) for x in (DATA / f"{args.split}.jsonl").read_text().splitlines() if x.strip()]
    lines = lines[: args.limit] if args.limit else lines
    path = RESULTS / "kleister.json"
    with tempfile.TemporaryDirectory(prefix="kleister-actors-") as tmp:
        root = catalog_root(args.pool, Path(tmp) / "catalog", newcomer=args.newcomer)
        tuned: dict[str, Any] = {}  # what each point's row says of the task's tune
        if args.tune:  # on this host's engine, before the actors start
            seconds = tune(root, args.tune, budget=args.tune_budget, engine=args.engine)
            tuned = {"tuned_on_documents": args.tune, "tune_s": seconds}
        elif args.tuned:  # a tune measured elsewhere (bench.kleister --tune keeps its catalog's tuned/nda.json)
            tuned = bring_tuned(root, args.tuned)
        for actors in (int(a) for a in args.actors.split(",")):
            result = point(args, root, lines, Path(tmp), actors) | tuned
            runs = json.loads(path.read_text()) if path.is_file() else {}
            runs[result["label"]] = result
            save(path, runs)
            (RESULTS / "kleister.md").write_text(render(runs))


if __name__ == "__main__":
    main()
