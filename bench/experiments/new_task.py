"""A new task as an analyst adds it: the Chinese ten-type entity task on CLUENER, retrieval and adapters by pool size.

The task is `bench/tasks/zh_entities/` (a schema and a prompt, no code). For each pool size N
the first N lines of `../shared/eval/cluener/pool.jsonl` are imported as its pool
(`extractor examples import`'s code), then each variant is scored on `dev.jsonl` with
`extractor eval`'s code, errors sorted by kind (`extractor.jobs.diagnosis`):

- ``lexicon``: no model at all, the pool's hints (``extractor.examples.lexicon``) as the answer;
- ``retrieval``: the base model, 3 pool examples retrieved per request (no training);
- ``adapter``: `extractor train`'s code on the pool (epochs and rank from the pool size unless
  ``--epochs``/``--rank``), then the adapter served as the task's (merged where the engine does).

Rows are appended to `bench/results/raw/learning_curve.json` (one per model, variant, size and
machine; a re-run replaces its own rows) and `bench/results/learning_curve.md` + `.png` are
rendered from all of them (``--render``: only that). Nothing of CLUENER (data or weights) is written
into the project: the catalogs and adapters live in a temporary folder (``--keep`` copies an adapter elsewhere).

    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.experiments.new_task --sizes 250,all --variants retrieval
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, machine, pyplot, save
from bench.train import SCORED, fit
from extractor import Catalog, Extractor, Settings
from extractor.examples.importing import import_gold, write_pool
from extractor.jobs.diagnosis import diagnose_all
from extractor.jobs.evaluation import evaluate
from extractor.jobs.gold import load_gold
from extractor.models import resolve_model_dir
from extractor.training import data
from extractor.training.recipe import recipe

TASK = "zh_entities"
CLUENER = Path(os.environ.get("BENCH_CLUENER_DIR") or ROOT.parent / "shared" / "eval" / "cluener")
RAW = RESULTS / "raw" / "learning_curve.json"


def catalog(folder: Path, size: int | None, *, name: str = TASK) -> int:
    """The analyst's task in ``folder`` as ``name``, with the first ``size`` pool lines (all: None); lines kept."""
    source = ROOT / "bench" / "tasks" / TASK
    for sub in ("schemas", "prompts"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "schemas" / f"{TASK}.json", folder / "schemas" / f"{name}.json")
    shutil.copy(source / "prompts" / f"{TASK}.j2", folder / "prompts" / f"{name}.j2")
    task = Catalog.load(folder).get(name)
    lines, _ = import_gold(CLUENER / "pool.jsonl", task)
    lines = lines[:size] if size else lines
    write_pool(folder / "examples" / f"{name}.jsonl", lines)
    return len(lines)


def train(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    task = Catalog.load(folder).get(TASK)
    samples, _ = data.samples(task, exclude=data.gold_texts([CLUENER / "dev.jsonl"]))
    train_set, held_out = data.split(samples, held_out=0.02, seed=0)
    plan = recipe(len(train_set), epochs=args.epochs, rank=args.rank)
    config = plan.config(learning_rate=args.learning_rate, batch_size=args.batch_size)
    out = folder / "adapters" / TASK
    recorded = {"epochs": plan.epochs, "rank": plan.rank, "samples": len(train_set)}
    report = fit(out, [task], (train_set, held_out), config, recorded)
    if args.keep:
        shutil.copytree(out, args.keep / f"{TASK}-{len(train_set)}", dirs_exist_ok=True)
    return {"train": report.as_dict(), **recorded}


def lexicon_only(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """No model: the pool's hints (leftmost-longest labelled values, most frequent field) taken as the answer."""
    from extractor.jobs.metrics import Counts, compare

    task = Catalog.load(folder).get(TASK)
    assert task.pool is not None
    items = load_gold(CLUENER / "dev.jsonl", task=TASK, known=[TASK])
    items = items[: args.dev_limit] if args.dev_limit else items
    summed, records = Counts(), []
    started = time.perf_counter()
    for item in items:
        predicted: dict[str, list[str]] = {}
        for hint in task.pool.lexicon.find(item.text):
            predicted.setdefault(hint.field.lstrip("/"), []).append(hint.value)
        for counts in compare(item.expected, predicted).values():
            summed += counts
        records.append({"text": item.text, "expected": item.expected, "predicted": predicted})
    elapsed = time.perf_counter() - started
    errors = diagnose_all(records, keep=0).as_dict()
    errors.pop("examples")
    return {
        "docs": len(items),
        **{k: v for k, v in summed.as_dict().items() if k in ("f1", "precision", "recall")},
        "schema_valid_rate": 1.0,
        "ungrounded_rate": 0.0,
        "docs_per_s": len(items) / elapsed,
        "errors": errors,
    }


async def score(
    folder: Path, args: argparse.Namespace, *, adapter: bool, names: list[str]
) -> dict[str, dict[str, Any]]:
    """Each task of ``names`` scored on dev, all in one engine (retrieval: one catalog holds every pool size)."""
    settings = Settings.from_env(kv_cache_space_gib=2, tasks_dir=folder)
    if not adapter:
        settings = settings.with_(adapter_serving="off")
    extractor = Extractor(settings=settings, tasks=names)
    items = []
    for name in names:
        found = load_gold(CLUENER / "dev.jsonl", task=name, known=names)
        items += found[: args.dev_limit] if args.dev_limit else found
    async with extractor:
        await extractor.astart()
        report, predictions = await evaluate(extractor, items, concurrency=args.concurrency)
    rows = {}
    for name in names:
        mine = report["per_task"][name]
        # no example texts: CLUENER lines never go into the project, results included
        errors = diagnose_all((p.record() for p in predictions if p.item.task == name), keep=0).as_dict()
        errors.pop("examples")
        # docs/s: the whole run's (the tasks ran interleaved in one engine)
        rows[name] = {**{k: mine[k] for k in SCORED}, "docs_per_s": report["docs_per_s"], "errors": errors}
        rows[name]["per_field"] = mine["per_field"]
    return rows


KINDS = ("boundary", "wrong_field", "boundary_and_field", "invented", "duplicate", "missed")


def _where(row: dict[str, Any]) -> str:
    m = row["machine"]
    return m["gpu"] or f"{m['cores']} CPU cores"


def _label(row: dict[str, Any]) -> str:
    if row["variant"] == "lexicon":
        return "pool hints alone (no model)"
    label = f"{row['variant']}, {row['model']}"
    return label + (f" ({row['label']})" if row.get("label") else "")


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| variant | pool lines | epochs, rank | dev lines | F1 | P | R | valid | not in text | docs/s | where |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (_label(r), _where(r), r["pool"])):
        trained = f"{r['epochs']:g}, {r['rank']}" if "epochs" in r else "–"
        lines.append(
            f"| {_label(r)} | {r['pool']:,} | {trained} | {r['docs']} | **{r['f1']:.3f}** | {r['precision']:.3f} | "
            f"{r['recall']:.3f} | {r['schema_valid_rate']:.1%} | {r['ungrounded_rate'] or 0:.1%} | "
            f"{r['docs_per_s']:.1f} | {_where(r)} |"
        )
    return lines


def error_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| variant | pool lines | where | correct | " + " | ".join(KINDS) + " | empty lists |",
        "|---|---|---|---|" + "---|" * len(KINDS) + "---|",
    ]
    for r in sorted(rows, key=lambda r: (_label(r), _where(r), r["pool"])):
        e = r["errors"]
        shares = " | ".join(f"{e[k]} ({e['error_shares'][k]:.0%})" for k in KINDS)
        lines.append(f"| {_label(r)} | {r['pool']:,} | {_where(r)} | {e['correct']} | {shares} | {e['empty_values']} |")
    return lines


def plot(rows: Sequence[dict[str, Any]]) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    series: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        series.setdefault(f"{_label(r)} · {_where(r)}", []).append(r)
    for name, found in sorted(series.items()):
        found.sort(key=lambda r: r["pool"])
        ax.plot([r["pool"] for r in found], [r["f1"] for r in found], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("labelled lines in the pool")
    ax.set_ylabel("F1 on CLUENER dev")
    ax.axhline(0.60, color="grey", linestyle=":", linewidth=1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "learning_curve.png", dpi=110)
    return True


def render(rows: Sequence[dict[str, Any]]) -> None:
    drew = plot(rows)
    lines = [
        "# A new task: F1 against labelled lines (CLUENER, Chinese, ten entity types)",
        "",
        "The analyst's task `bench/tasks/zh_entities/` (schema + prompt, no code), its pool the first N lines of "
        "`../shared/eval/cluener/pool.jsonl`, scored on `dev.jsonl` (the first `dev lines`) with `extractor eval`'s "
        "code: `python -m bench.experiments.new_task` (raw rows: [raw/learning_curve.json](raw/learning_curve.json)). "
        "*retrieval*: the base model with 3 retrieved examples; *adapter*: `extractor train`'s code on the pool, "
        "served as the task's adapter (merged), no examples.",
        "",
        *(["![F1 against pool size](learning_curve.png)", ""] if drew else []),
        *table(rows),
        "",
        "## Errors by kind (`extractor eval --errors`, `extractor/jobs/diagnosis.py`)",
        "",
        "Each predicted or expected value counted once: a boundary error is a value overlapping an expected one "
        "of its field; wrong field, the same value under another field; invented, a value overlapping no "
        "expected one; missed, an expected value nothing matched. Percentages are shares of all errors.",
        "",
        *error_table(rows),
    ]
    (RESULTS / "learning_curve.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,1000,4000,all", help="pool sizes (lines), comma-separated")
    parser.add_argument("--variants", default="retrieval,adapter")
    parser.add_argument("--dev-limit", type=int, help="score the first N dev lines (default: all 1,000)")
    parser.add_argument("--epochs", type=float)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--label", default="", help="a note for this run's rows (e.g. the model)")
    parser.add_argument("--keep", type=Path, help="copy each trained adapter here (outside the project)")
    parser.add_argument("--raw", type=Path, default=RAW)
    parser.add_argument("--render", action="store_true", help="only render the page and plot from --raw")
    args = parser.parse_args()
    rows = json.loads(args.raw.read_text(encoding="utf-8")) if args.raw.is_file() else []
    if args.render:
        render(rows)
        return
    model_dir = resolve_model_dir(Settings.from_env())
    where = machine()
    sizes = [None if text == "all" else int(text) for text in args.sizes.split(",")]
    variants = args.variants.split(",")

    def record(row: dict[str, Any], started: float) -> None:
        nonlocal rows
        row |= {"minutes": (time.perf_counter() - started) / 60, "machine": where}
        brief = {k: v for k, v in row.items() if k not in ("per_field", "errors", "machine", "train")}
        print(f"bench: {json.dumps(brief)}", flush=True)
        rows = [r for r in rows if _key(r) != _key(row)] + [row]
        save(args.raw, rows)

    base = {"model": model_dir.name, "label": args.label}
    if "retrieval" in variants:  # every pool size in one catalog and one engine
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="extractor-new-task-") as tmp:
            pools = {
                f"{TASK}_{size or 'all'}": catalog(Path(tmp), size, name=f"{TASK}_{size or 'all'}") for size in sizes
            }
            scored = asyncio.run(score(Path(tmp), args, adapter=False, names=list(pools)))
        for name, lines in pools.items():
            record({"variant": "retrieval", "pool": lines, **base, **scored[name]}, started)
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="extractor-new-task-") as tmp:
            folder = Path(tmp)
            lines = catalog(folder, size)
            for variant in (v for v in variants if v != "retrieval"):
                started = time.perf_counter()
                row: dict[str, Any] = {"variant": variant, "pool": lines, **base}
                if variant == "lexicon":
                    row |= lexicon_only(folder, args)
                else:
                    row |= train(folder, args)
                    row |= asyncio.run(score(folder, args, adapter=True, names=[TASK]))[TASK]
                record(row, started)
    render(rows)


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["variant"], row["pool"], row["model"], row.get("label", ""), row["machine"].get("gpu"), row["docs"])


if __name__ == "__main__":
    main()
