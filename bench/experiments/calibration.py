"""Confidences you can act on: calibration and the catch rate on SNIPS dev and CLUENER dev.

For each suite, in one engine:

1. calibrate every task as ``extractor calibrate`` does (:mod:`extractor.review.fitting`): served
   from its pool (``--serving off``), the pool cross-fitted; served with an adapter, the lines its
   training held out (``--train`` trains one first, holding out ``--held-out`` of the pool);
2. score the dev set with ``extractor eval``'s code, the raw confidences, then each mapped
   through its task's calibration exactly as the pipeline maps it;
3. write a row to ``bench/results/raw/calibration.json`` and render ``bench/results/calibration.md``
   and a reliability plot per suite and serving (``reliability_<suite>_<serving>.png``).

Nothing of CLUENER (data or weights) is written into the project: catalogs and adapters live in
a temporary folder.

    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.experiments.calibration --suite snips --serving off
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import GOLD, RESULTS, gold_items, machine, pyplot, save
from bench.experiments import new_task
from bench.train import catalog_copy, fit, point_at_adapter
from extractor import Catalog, Extractor, Settings
from extractor.catalog.tasks import Task, calibration_path
from extractor.jobs.evaluation import evaluate
from extractor.jobs.gold import GoldItem, load_gold, select
from extractor.review import calibration, fitting
from extractor.training import data
from extractor.training.recipe import recipe

RAW = RESULTS / "raw" / "calibration.json"


def cluener_catalog(folder: Path) -> list[str]:
    new_task.catalog(folder, None)
    return [new_task.TASK]


def dev_items(suite: str, known: Sequence[str], limit: int | None) -> list[GoldItem]:
    if suite == "snips":
        return select(gold_items(known), limit=limit)
    return select(load_gold(new_task.CLUENER / "dev.jsonl", task=known[0], known=known), limit=limit)


def train(folder: Path, names: list[str], args: argparse.Namespace, exclude: Sequence[str]) -> dict[str, Any]:
    """One adapter for ``names`` on their pools, ``--held-out`` of the lines kept out (and listed in its manifest)."""
    catalog = Catalog.load(folder)
    tasks = [catalog.get(n) for n in names]
    samples: list[data.Sample] = []
    for task in tasks:
        samples += data.samples(task, exclude=exclude)[0]
    train_set, held_out = data.split(samples, held_out=args.held_out, seed=0)
    if args.train_limit:  # a dry run of the plumbing: a few steps
        train_set = train_set[: args.train_limit]
    plan = recipe(len(train_set), epochs=args.epochs, rank=args.rank)
    config = plan.config(learning_rate=args.learning_rate, batch_size=args.batch_size)
    out = folder / "adapters" / ("snips" if len(names) > 1 else names[0])
    recorded = {"epochs": plan.epochs, "rank": plan.rank, "samples": len(train_set)}
    report = fit(out, tasks, (train_set, held_out), config, recorded | {"held_out_lines": data.lines_by_task(held_out)})
    return {"train": {"samples": len(train_set), "held_out": len(held_out), "seconds": report.seconds}}


async def run(folder: Path, names: list[str], suite: str, args: argparse.Namespace, serving: str) -> dict[str, Any]:
    settings = Settings.from_env(tasks_dir=folder, adapter_serving=serving, kv_cache_space_gib=2)
    extractor = Extractor(settings=settings, tasks=names)
    await extractor.astart()
    try:
        fitted: dict[str, calibration.Calibration] = {}
        pairs: dict[str, list[fitting.Mark]] = {}
        started = time.perf_counter()

        async def collect(task: Task) -> None:
            cases = fitting.own_cases(task, lines=args.lines, folds=5, seed=0)
            pairs[task.name] = await fitting.collect(extractor.arun, cases, concurrency=args.concurrency)

        from extractor import pipeline

        served = [pipeline.served(extractor.task(n), settings) for n in names]
        await asyncio.gather(*(collect(t) for t in served))
        source = "held-out pool lines" if served[0].adapter is not None else "pool, 5-fold cross-fitted"
        joint = [p for n in names for p in pairs[n]]
        for task in served:  # one map for the suite's tasks (one model, one serving)
            fitted[task.name] = fitting.fit(joint, task=task, model=extractor.engine.model_name, source=source)
            calibration.save(fitted[task.name], calibration_path(folder, task.name))
        calibrate_s = time.perf_counter() - started
        items = dev_items(suite, names, args.dev_limit)
        report, predictions = await evaluate(extractor, items, concurrency=args.concurrency)
    finally:
        await extractor.aclose()
    raw: list[tuple[float, bool]] = []
    mapped: list[tuple[float, bool]] = []
    joint: list[tuple[float, bool]] = []  # one map for all values, no pool verdicts (the earlier calibration)
    dev: list[fitting.Mark] = []
    by_name = {t.name: t for t in served}
    for p in predictions:
        if p.result is None:
            continue
        assert not p.result.calibrated, "the dev run must see raw confidences (the maps are applied here)"
        for mark in fitting.marks(p.item.expected, p.result, by_name[p.item.task]):
            dev.append(mark)
            raw.append((mark.confidence, mark.right))
            mapped.append((fitted[p.item.task](mark.confidence, mark.verdict), mark.right))
            joint.append((fitted[p.item.task](mark.confidence), mark.right))
    summaries = {
        name: _summary(scored) for name, scored in (("raw", raw), ("calibrated", mapped), ("calibrated_joint", joint))
    }
    summaries["verdicts"] = _verdicts(dev)
    return {
        "suite": suite,
        "serving": serving,
        "docs": report["docs"],
        "f1": report["f1"],
        "docs_per_s": report["docs_per_s"],
        "calibration_values": {n: len(found) for n, found in pairs.items()},
        "calibration_map": "one for the suite's tasks",
        "calibrate_s": calibrate_s,
        **summaries,
    }


def _verdicts(marks: Sequence[fitting.Mark]) -> dict[str, dict[str, Any]]:
    """Per pool verdict: how many values had it, and how many of them were right."""
    out: dict[str, dict[str, Any]] = {}
    for mark in marks:
        slot = out.setdefault(mark.verdict, {"values": 0, "right": 0})
        slot["values"] += 1
        slot["right"] += mark.right
    return out


def _summary(pairs: list[tuple[float, bool]]) -> dict[str, Any]:
    conf, ok = [c for c, _ in pairs], [o for _, o in pairs]
    return {
        **calibration.summary(conf, ok),
        "catch_10": calibration.catch_rate(conf, ok, share=0.1),
        "catch_30": calibration.catch_rate(conf, ok, share=0.3),
        "reliability": calibration.reliability(conf, ok),
    }


def _plot(path: Path, row: dict[str, Any]) -> None:
    """Reliability diagrams, raw and calibrated, from the row's bins (the GPU host has no matplotlib)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, name in zip(axes, ("raw", "calibrated"), strict=True):
        scores, bins = row[name], row[name]["reliability"]
        ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
        ax.bar([b[0] + 0.05 for b in bins], [b[2] for b in bins], width=0.09, alpha=0.6, label="accuracy")
        ax.plot([b[1] for b in bins], [b[2] for b in bins], marker="o", color="C3", label="mean conf. vs acc.")
        for b in bins:
            ax.annotate(str(b[3]), (b[0] + 0.05, b[2]), ha="center", va="bottom", fontsize=7)
        ax.set_title(f"{name}: ECE {scores['ece']:.3f}, catch@20% {scores['catch_rate']:.0%}", fontsize=10)
        ax.set_xlabel("confidence")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.05)
    axes[0].set_ylabel("share of values right")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{row['suite']} dev ({row['docs']} texts), adapter serving {row['serving']}, F1 {row['f1']:.3f}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(rows: list[dict[str, Any]]) -> Path:
    header = (
        "| suite | serving | machine | dev docs | F1 | values | wrong | ECE raw | ECE calibrated | catch@20% "
        "(ceiling) | catch@20%, one map | catch@10% / 30% | AUROC (one map) | plot |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines, verdicts = [], []
    for r in rows:
        kind = "gpu" if r["machine"].get("gpu") else "cpu"
        plot = RESULTS / f"reliability_{r['suite']}_{r['serving']}_{kind}.png"
        _plot(plot, r)
        c, raw, one = r["calibrated"], r["raw"], r.get("calibrated_joint")
        where = r["machine"].get("gpu") or r["machine"].get("cpu", "cpu")
        auroc = f"{c['auroc']:.3f}" if c["auroc"] is not None else "n/a"
        if one is not None and one["auroc"] is not None:
            auroc += f" ({one['auroc']:.3f})"
        before = f"{one['catch_rate']:.1%}" if one is not None else "n/a"
        lines.append(
            f"| {r['suite']} | {r['serving']} | {where} | {r['docs']} | {r['f1']:.3f} | {c['values']} | {c['wrong']} | "
            f"{raw['ece']:.3f} | **{c['ece']:.3f}** | **{c['catch_rate']:.1%}** ({c['catch_ceiling']:.0%}) | "
            f"{before} | {c['catch_10']:.1%} / {c['catch_30']:.1%} | {auroc} | [png]({plot.name}) |"
        )
        if r.get("verdicts"):
            cells = []
            for v in ("agrees", "differs", "unseen", "other"):
                n = r["verdicts"].get(v, {"values": 0, "right": 0})
                cells.append(f"{n['values']} ({n['right'] / n['values']:.0%})" if n["values"] else "0")
            verdicts.append(f"| {r['suite']} | {r['serving']} | {where} | " + " | ".join(cells) + " |")
    out = RESULTS / "calibration.md"
    by_verdict = ""
    if verdicts:
        by_verdict = (
            "\n## The pool's verdict on the dev values\n\nValues (share right) by what the task's pool says of "
            "the string (`extractor/review/agreement.py`): it labelled it most often as this field (agrees), as "
            "another (differs), never (unseen), or the lexicon does not keep such a value (other: not a string, "
            "a field that is not grounded, too short).\n\n"
            "| suite | serving | machine | agrees | differs | unseen | other |\n|---|---|---|---|---|---|---|\n"
            + "\n".join(verdicts)
            + "\n"
        )
    if any("calibrated_joint" not in r for r in rows):
        by_verdict += (
            "\nA row with n/a under *one map* was measured before the pool's verdicts were part of the "
            "calibration (one map for all values) and not run again since.\n"
        )
    out.write_text(
        "# Confidence: calibration and the catch rate (`python -m bench.experiments.calibration`)\n\n"
        "Each task calibrated on its own pool (cross-fitted; with an adapter, the lines its training held out), "
        "then scored on the dev set. The calibration fits one isotonic map per verdict of the pool on the value "
        "(agrees, differs, unseen, other) that had 25 values or more, and one for all values; catch@20%, one "
        "map: the same values through the map of all values only (no verdicts), as before the verdicts. ECE: "
        "expected calibration error over 10 equal-width bins. catch@20%: the share of the wrong values among "
        "the least confident 20 % of values (ceiling: what 20 % of the values can hold at most, when more than "
        "20 % are wrong). AUROC: the chance a right value is more confident than a wrong one.\n\n"
        + header
        + "\n".join(lines)
        + "\n"
        + by_verdict,
        encoding="utf-8",
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=["snips", "cluener"], required=True)
    parser.add_argument("--serving", default="off", help="adapter serving: off (retrieval) or merged/lora (--train)")
    parser.add_argument("--train", action="store_true", help="train the adapter first, holding out --held-out")
    parser.add_argument("--held-out", type=float, default=0.1)
    parser.add_argument("--train-limit", type=int, help="train on at most N samples (a dry run)")
    parser.add_argument("--lines", type=int, default=400, help="pool lines per task to calibrate on (retrieval)")
    parser.add_argument("--dev-limit", type=int)
    parser.add_argument("--epochs", type=float)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--raw", type=Path, default=RAW)
    parser.add_argument("--render", action="store_true", help="only render the table and plots from --raw")
    args = parser.parse_args()
    if args.render:
        print(render(json.loads(args.raw.read_text(encoding="utf-8"))))
        return
    adapter = args.serving != "off"
    with tempfile.TemporaryDirectory(prefix="extractor-calibration-") as tmp:
        folder = Path(tmp)
        if args.suite == "snips":  # the shipped SNIPS tasks with their pools, without their adapter
            names = catalog_copy(folder)
            point_at_adapter(folder, names, examples=False, adapter=None)
        else:
            names = cluener_catalog(folder)
        row: dict[str, Any] = {}
        if adapter:
            if not args.train:
                raise SystemExit("--serving with an adapter needs --train (an adapter that lists held-out lines)")
            gold = GOLD if args.suite == "snips" else new_task.CLUENER / "dev.jsonl"
            row |= train(folder, names, args, data.gold_texts([gold]))
            adapter = "adapters/snips" if args.suite == "snips" else f"adapters/{names[0]}"
            point_at_adapter(folder, names, examples=False, adapter=adapter)
        row |= asyncio.run(run(folder, names, args.suite, args, args.serving))
    row["machine"] = machine()
    brief = {k: v for k, v in row.items() if k not in ("raw", "calibrated", "calibrated_joint", "machine")}
    print("bench:", json.dumps(brief), json.dumps({k: row[k]["ece"] for k in ("raw", "calibrated")}), flush=True)
    print("bench: calibrated", json.dumps({k: v for k, v in row["calibrated"].items() if k != "reliability"}))
    rows = json.loads(args.raw.read_text(encoding="utf-8")) if args.raw.is_file() else []
    key = (row["suite"], row["serving"], row["machine"].get("gpu"))
    rows = [r for r in rows if (r["suite"], r["serving"], r["machine"].get("gpu")) != key] + [row]
    save(args.raw, rows)
    if args.raw == RAW:
        print(render(rows))


if __name__ == "__main__":
    main()
