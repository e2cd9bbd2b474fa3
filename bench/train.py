"""Task adapters on SNIPS: one LoRA adapter trained on the 7 tasks' pools, scored on all of dev.

Trains in-process (`extractor.training`, as `extractor train` does) on the first ``--per-task``
usable lines of each SNIPS pool, never on a dev text, into a copy of the catalog whose SNIPS tasks
point at the adapter; then runs `extractor eval`'s code on the 700 dev lines with the adapter
(no worked examples: the layout it was trained on) and with the adapter plus 3 retrieved
examples. The base model with 3 retrieved examples (the shipped layout) is `quality_shipped.md`.

    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.train --per-task 300 --epochs 1

On a GPU (the H200 host, `bench/gpu/README.md`) training runs on CUDA; ``--base`` scores the
base model with 3 retrieved examples in the same run, for a same-hardware comparison.
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

from bench.common import GOLD, RESULTS, ROOT, gold_items, machine, publish
from extractor import Catalog, Extractor, Settings, Task
from extractor.adapters import manifest
from extractor.adapters.merge import merge
from extractor.jobs.evaluation import evaluate
from extractor.jobs.gold import select
from extractor.models import resolve_model_dir
from extractor.training import data, trainer

ADAPTER = "adapters/snips"
# What a variant's row keeps of `extractor eval`'s report, beside the run's docs/s
SCORED: tuple[str, ...] = ("docs", "f1", "precision", "recall", "schema_valid_rate", "ungrounded_rate")
SCORED += ("prompt_tokens_per_doc", "output_tokens_per_doc", "mean_attempts")


def catalog_copy(folder: Path) -> list[str]:
    """The shipped SNIPS tasks (schemas, prompts, pools) copied into ``folder``; their names."""
    names = sorted(p.stem for p in (ROOT / "schemas").glob("snips_*.json"))
    for sub, suffix in (("schemas", ".json"), ("prompts", ".j2"), ("examples", ".jsonl")):
        (folder / sub).mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copy(ROOT / sub / f"{name}{suffix}", folder / sub / f"{name}{suffix}")
    return names


def point_at_adapter(folder: Path, names: Sequence[str], *, examples: bool, adapter: str | None = ADAPTER) -> None:
    """Each task of ``names`` in ``folder`` served with ``adapter`` (None: none), its worked examples shown or not."""
    for name in names:
        path = folder / "schemas" / f"{name}.json"
        schema = json.loads(path.read_text(encoding="utf-8"))
        schema.setdefault("x-extractor", {}).update({"adapter": adapter or False, "adapter_examples": examples})
        path.write_text(json.dumps(schema, ensure_ascii=False, indent=2), encoding="utf-8")


def fit(
    out: Path,
    tasks: list[Task],
    samples: tuple[list[data.Sample], list[data.Sample]],
    config: trainer.TrainConfig,
    recorded: dict[str, Any],
) -> trainer.TrainReport:
    """An adapter for ``tasks`` trained into ``out`` as ``extractor train`` trains one (``samples``: train,
    held out), its manifest recording ``recorded`` as the training's configuration."""
    model_dir = resolve_model_dir(Settings.from_env())
    train_set, held_out = samples
    report = trainer.train(model_dir, train_set, held_out, out, config)
    data_hash = data.digest(train_set)
    manifest.write(
        out, model_dir=model_dir, tasks=tasks, data_hash=data_hash, config=recorded, metrics=report.as_dict()
    )
    return report


def train(folder: Path, names: list[str], per_task: int, config: trainer.TrainConfig) -> dict[str, Any]:
    catalog = Catalog.load(folder)
    dev_texts = data.gold_texts([GOLD])
    kept: list[data.Sample] = []
    refused = 0
    for name in names:
        found, bad = data.samples(catalog.get(name), exclude=dev_texts)
        kept += found[:per_task]
        refused += len(bad)
    train_set, held_out = data.split(kept, held_out=0.05, seed=0)
    recorded = {"epochs": config.epochs, "rank": config.rank, "per_task": per_task, "batch_size": config.batch_size}
    report = fit(folder / ADAPTER, [catalog.get(n) for n in names], (train_set, held_out), config, recorded)
    size = _size(folder / ADAPTER)
    return {
        **report.as_dict(),
        "samples": len(train_set),
        "held_out": len(held_out),
        "refused": refused,
        "adapter_bytes": size,
    }


async def score(
    folder: Path, label: str, per_intent: int | None, *, model: Path | None = None, warmup: int = 0
) -> dict[str, Any]:
    settings = Settings.from_env(kv_cache_space_gib=2, tasks_dir=folder)
    # "adapter" variants go through vLLM's per-request LoRA; "merged" ones run on the merged model itself
    settings = settings.with_(model=str(model)) if model else settings.with_(adapter_serving="lora")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    extractor = Extractor(settings=settings)
    items = gold_items(extractor.catalog.names())
    items = select(items, per_task=per_intent) if per_intent else items
    async with extractor:
        await extractor.astart()
        if warmup:  # untimed: the first pass pays one-off costs (kernel JIT, grammar and prefix caches)
            await evaluate(extractor, select(items, per_task=warmup), concurrency=64)
        report, _ = await evaluate(extractor, items, concurrency=64)
    row = {**{k: report[k] for k in SCORED}, "docs_per_s": report["docs_per_s"]}
    row["variant"], row["per_task"] = label, {t: v["f1"] for t, v in report.get("per_task", {}).items()}
    print(f"bench: {label}: {json.dumps({k: v for k, v in row.items() if k != 'per_task'})}", flush=True)
    return row


def markdown(training: dict[str, Any], rows: list[dict[str, Any]], args: argparse.Namespace, minutes: float) -> str:
    m = machine()
    rows_shipped = json.loads((RESULTS / "raw" / "quality_shipped.json").read_text(encoding="utf-8"))
    shipped = next(r for r in rows_shipped if r["variant"] == "k3")
    base_row = []
    if not args.eval_per_intent and not args.base:
        base_row = [
            f"| base model, 3 retrieved examples (shipped; `quality_shipped.md`) | {shipped['f1']:.3f} | "
            f"{shipped['precision']:.3f} | {shipped['recall']:.3f} | {shipped['valid']:.1%} | "
            f"{shipped['not_in_text']} | {shipped['prompt_tokens']:.0f} | {shipped['docs_per_s']:.2f} |"
        ]
    lines = [
        "# Task adapters on SNIPS",
        "",
        f"{m['date']}, scored on {m['cores']} CPU cores ({m['cpu']}) or the GPU the command names, vLLM "
        f"{m.get('vllm', '?')}, default model (SmolLM2-135M-Instruct). One LoRA adapter (rank 8, all 7 "
        f"projection modules, dropout 0, bf16 autocast) for the 7 SNIPS tasks, trained on "
        + (f"the adapter folder `{args.adapter}` (its manifest's figures below)" if args.adapter else "")
        + (f"the first {args.per_task} usable lines of each SNIPS pool" if not args.adapter else "")
        + f" ({training['samples']} samples), never on a dev text; scored on dev (the table says how many "
        f"lines) with `extractor eval`'s code. `python -m bench.train "
        + (f"--adapter {args.adapter}" if args.adapter else f"--per-task {args.per_task} --epochs {args.epochs:g}")
        + (f" --eval-per-intent {args.eval_per_intent}" if args.eval_per_intent else "")
        + (f" --warmup {args.warmup}" if args.warmup else "")
        + (f" --variants {args.variants}" if args.variants else "")
        + (" --base" if args.base else "")
        + f"`, {minutes:.0f} min.",
        "",
        "## Training",
        "",
        f"- {training['steps']} steps, {training['examples']} examples in {training['seconds'] / 60:.1f} min: "
        f"**{training['examples_per_s']:.2f} examples/s** on {_device(training)}; peak RSS "
        f"{training['peak_rss_mib']:,.0f} MiB"
        + (f", peak GPU memory {training['peak_gpu_mib']:,.0f} MiB" if training.get("peak_gpu_mib") else ""),
        f"- loss {training['first_loss']:.3f} (first step) → {training['train_loss']:.3f} (last 20 steps); "
        f"held-out loss {training['val_loss']:.3f}",
        f"- adapter: {training['adapter_bytes'] / 1e6:.1f} MB (`adapter_model.safetensors`, fp32)",
        "",
        f"## Dev ({rows[0]['docs'] if rows else 0} lines)",
        "",
        "| variant | F1 | P | R | schema-valid | values not in text | prompt tok/doc | docs/s |",
        "|---|---|---|---|---|---|---|---|",
        *base_row,
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | **{r['f1']:.3f}** | {r['precision']:.3f} | {r['recall']:.3f} | "
            f"{r['schema_valid_rate']:.1%} | {r['ungrounded_rate'] or 0:.1%} | {r['prompt_tokens_per_doc']:.0f} | "
            f"{r['docs_per_s']:.2f} |"
        )
    return "\n".join([*lines, "", *per_intent_table(rows)]) + "\n"


def _device(training: dict[str, Any]) -> str:
    device = str(training.get("device", "cpu"))
    return f"{machine()['cores']} CPU cores" if device == "cpu" else device


VARIANTS = {
    "base": "base model, 3 retrieved examples (shipped before adapters)",
    "adapter": "adapter, no examples (LoRA)",
    "adapter_k3": "adapter + 3 retrieved examples (LoRA)",
    "merged": "merged model (`extractor model merge`), no examples",
    "merged_k3": "merged model + 3 retrieved examples",
}


def per_intent_table(rows: list[dict[str, Any]]) -> list[str]:
    """ "Per-intent F1:" and a table, a row per variant (``variant`` and ``per_task``: task -> F1)."""
    tasks = sorted({t for r in rows for t in r["per_task"]})
    lines = ["Per-intent F1:", "", "| variant | " + " | ".join(t.removeprefix("snips_") for t in tasks) + " |"]
    lines.append("|---|" + "---|" * len(tasks))
    for r in rows:
        lines.append(f"| {r['variant']} | " + " | ".join(f"{r['per_task'].get(t, 0):.3f}" for t in tasks) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-task", type=int, default=300)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--adapter", type=Path, help="score this trained adapter instead of training one")
    parser.add_argument("--out", type=Path, default=RESULTS / "train.md")
    parser.add_argument("--keep", type=Path, help="copy the trained adapter here")
    parser.add_argument("--raw", type=Path, default=RESULTS / "raw" / "train.json", help="the figures as JSON")
    parser.add_argument("--eval-per-intent", type=int, help="score the first N dev lines per intent (default: all)")
    parser.add_argument("--base", action="store_true", help="also score the base model with 3 retrieved examples")
    parser.add_argument("--warmup", type=int, default=0, help="first score N dev lines per intent, untimed")
    parser.add_argument("--variants", help=f"comma-separated, of {', '.join(VARIANTS)} (default: adapter,adapter_k3)")
    args = parser.parse_args()
    chosen = args.variants.split(",") if args.variants else ["adapter", "adapter_k3"]
    if (args.eval_per_intent or args.base) and "base" not in chosen:  # the shipped layout on the same lines
        chosen.insert(0, "base")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        names = catalog_copy(folder)
        point_at_adapter(folder, names, examples=False, adapter=None)  # none yet
        if args.adapter:
            shutil.copytree(args.adapter, folder / ADAPTER)
            training = {**manifest.read(folder / ADAPTER)["metrics"], "adapter_bytes": _size(folder / ADAPTER)}
            epochs = manifest.read(folder / ADAPTER)["config"].get("epochs") or 1
            training.setdefault("samples", round(training.get("examples", 0) / epochs))
            training.setdefault("held_out", 0)
        else:
            config = trainer.TrainConfig(
                epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate, save_every=0
            )
            training = train(folder, names, args.per_task, config)
        print(f"bench: training {json.dumps(training)}", flush=True)
        if args.keep:
            shutil.copytree(folder / ADAPTER, args.keep, dirs_exist_ok=True)
        rows, merged = [], None
        for name in chosen:
            model = None
            if name.startswith("merged"):  # merged once, for both merged variants
                merged = merged or merge(resolve_model_dir(Settings.from_env()), folder / ADAPTER, folder / "merged")
                model = merged
            examples = name in ("base", "adapter_k3", "merged_k3")
            point_at_adapter(folder, names, examples=examples, adapter=None if name == "base" else ADAPTER)
            rows.append(
                asyncio.run(score(folder, VARIANTS[name], args.eval_per_intent, model=model, warmup=args.warmup))
            )
    text = markdown(training, rows, args, (time.perf_counter() - started) / 60)
    args.raw.write_text(json.dumps({"training": training, "rows": rows}, indent=1), "utf-8")
    publish(text, args.out)


def _size(adapter: Path) -> int:
    return sum(p.stat().st_size for p in adapter.glob("adapter_model.*"))


if __name__ == "__main__":
    main()
