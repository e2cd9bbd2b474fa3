"""What each quality lever is worth: worked examples (how many, fixed or retrieved), the prompt
layout, grounded decoding, and nulls vs omitted absent slots, on SNIPS dev, one engine for all.

Each variant is a copy of the shipped catalog, changed in one respect, in a temporary folder, so
the tasks load through the same checks as the shipped ones. Scored with `extractor eval`'s code.

    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.experiments.quality   # all 700 lines
    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.experiments.quality \\
        --per-intent 20 --variants k3,fixed-turns
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ADAPTER_SERVING, GOLD, RESULTS, ROOT, machine
from bench.train import per_intent_table
from extractor import Catalog, Extractor, Settings
from extractor.engines.base import Engine
from extractor.jobs.evaluation import Prediction, evaluate
from extractor.jobs.gold import GoldItem, load_gold, select, task_map

SNIPS = "snips_"
# The turns layout as it shipped before pools: the whole instruction rendered around each text.
TURNS_SUFFIX = (
    "Text: {{ text }}\n{% if feedback %}\nYour previous answer {{ previous }} has these problems, fix them:\n"
    "{% for problem in feedback %}- {{ problem }}\n{% endfor %}{% endif %}\n"
)


@dataclass(frozen=True)
class Variant:
    """One row of the ablation: a catalog edit and request options."""

    name: str
    what: str
    pool: bool | dict[str, Any] = True  # x-extractor.examples_from_pool (False: no pool at all)
    turns: bool = False
    nulls: bool = False  # every slot required, null when absent (the SNIPS tasks before this change)
    options: dict[str, Any] = field(default_factory=dict)


VARIANTS = [
    Variant("before", "3 fixed examples, turns layout, absent slots null (as shipped before)", False, True, True),
    Variant("fixed", "3 fixed examples", pool=False),
    Variant("k0", "no examples", pool={"k": 0}),
    Variant("k3", "3 retrieved (shipped)"),
    Variant("k6", "6 retrieved", pool={"k": 6}),
    Variant("k3-turns", "3 retrieved, turns layout", turns=True),
    Variant("k3-same", "3 retrieved, no near-duplicate filter", pool={"k": 3, "diverse": False}),
    Variant("k3-nogd", "3 retrieved, grounded decoding off", options={"grounded_decoding": False}),
    Variant("k3-nulls", "3 retrieved, absent slots null", nulls=True),
    Variant("k6-nulls", "6 retrieved, absent slots null", pool={"k": 6}, nulls=True),
]


def build_catalog(variant: Variant, into: Path) -> Catalog:
    """The shipped SNIPS tasks, edited as ``variant`` says, loaded from ``into``."""
    for folder in ("schemas", "prompts", "examples"):
        (into / folder).mkdir(parents=True)
    for schema_path in sorted((ROOT / "schemas").glob(f"{SNIPS}*.json")):
        name = schema_path.stem
        schema = json.loads(schema_path.read_text(encoding="utf-8"))
        settings = schema.setdefault("x-extractor", {})
        prompt = (ROOT / "prompts" / f"{name}.j2").read_text(encoding="utf-8")
        pool_lines = (ROOT / "examples" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        if isinstance(variant.pool, dict):
            settings["examples_from_pool"] = variant.pool
        if variant.turns:
            prompt = prompt.replace("each user request", "the user's request") + TURNS_SUFFIX
        if variant.nulls:
            schema, pool_lines, prompt = _with_nulls(schema, pool_lines, prompt)
        (into / "schemas" / schema_path.name).write_text(json.dumps(schema, ensure_ascii=False), encoding="utf-8")
        (into / "prompts" / f"{name}.j2").write_text(prompt, encoding="utf-8")
        if variant.pool is not False:
            (into / "examples" / f"{name}.jsonl").write_text("\n".join(pool_lines) + "\n", encoding="utf-8")
    catalog = Catalog.load(into)
    if catalog.errors:
        raise SystemExit(f"variant {variant.name}: {catalog.errors[0]}")
    return catalog


def _with_nulls(schema: dict[str, Any], lines: list[str], prompt: str) -> tuple[dict[str, Any], list[str], str]:
    """Every slot required and nullable, absent ones null: the SNIPS tasks as they were shipped before."""
    names = list(schema["properties"])

    def fill(output: dict[str, Any]) -> dict[str, Any]:
        return {name: output.get(name) for name in names}

    for sub in schema["properties"].values():
        if sub.get("type") == "string":
            sub["type"] = ["string", "null"]
    schema["required"] = names
    for example in schema["x-extractor"].get("examples", []):
        example["output"] = fill(example["output"])
    edited = []
    for line in lines:
        value = json.loads(line)
        value["output"] = fill(value["output"])
        edited.append(json.dumps(value, ensure_ascii=False))
    prompt = prompt.replace(
        "answer with one JSON object of the slots it mentions",
        "answer with one JSON object that has every slot as a key",
    ).replace("leave out a slot that is not mentioned", "use null for a slot that is not mentioned")
    return schema, edited, prompt


def row(variant: Variant, report: dict[str, Any], predictions: list[Prediction]) -> dict[str, Any]:
    done = [p.result for p in predictions if p.result is not None]
    returned = [s for r in done for s in r.spans]
    return {
        "variant": variant.name,
        "what": variant.what,
        "f1": report["f1"],
        "precision": report["precision"],
        "recall": report["recall"],
        "valid": report["schema_valid_rate"],
        "not_in_text": sum(s.status not in ("exact", "normalized") for s in returned),
        "values": len(returned),
        "prompt_tokens": report["prompt_tokens_per_doc"],
        "output_tokens": report["output_tokens_per_doc"],
        "docs_per_s": report["docs_per_s"],
        "attempts": report["mean_attempts"],
        "per_task": {name: t["f1"] for name, t in report["per_task"].items()},
    }


async def run_variant(engine: Engine, settings: Settings, variant: Variant, items: list[GoldItem]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"quality-{variant.name}-") as folder:
        catalog = build_catalog(variant, Path(folder))
        extractor = Extractor(settings=settings, engine=engine, catalog=catalog)
        # Warm-up, not scored: one line per task, so the prefix cache and compiled grammars are
        # in the state a running service has.
        await evaluate(extractor, select(items, per_task=1), concurrency=16, options=variant.options)
        report, predictions = await evaluate(extractor, items, concurrency=64, options=variant.options)
    return row(variant, report, predictions)


def markdown(rows: list[dict[str, Any]], items: int, command: str, elapsed: float) -> str:
    m = machine()
    lines = [
        "# Quality levers on SNIPS dev",
        "",
        f"{items} utterances of `shared/eval/snips/dev.jsonl`, the shipped SNIPS tasks and pools, default model "
        f"(SmolLM2-135M-Instruct) on vLLM CPU, {m.get('cores', '?')} cores ({m.get('cpu', '?')}), 64 concurrent, "
        f"each variant after a one-line-per-task warm-up. `{command}`, {elapsed / 60:.0f} min, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| variant | what | F1 | P | R | schema-valid | values not in text | prompt tok/doc | output tok/doc "
        "| docs/s | attempts |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['what']} | {r['f1']:.3f} | {r['precision']:.3f} | {r['recall']:.3f} | "
            f"{r['valid']:.1%} | {r['not_in_text']}/{r['values']} | {r['prompt_tokens']:.0f} | "
            f"{r['output_tokens']:.1f} | {r['docs_per_s']:.2f} | {r['attempts']:.2f} |"
        )
    return "\n".join([*lines, "", *per_intent_table(rows)]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description="SNIPS quality ablation")
    parser.add_argument("--per-intent", type=int, help="the first N lines of each intent (default: all 700)")
    parser.add_argument("--variants", help="comma-separated names (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS / "quality.md")
    args = parser.parse_args()
    chosen = VARIANTS
    if args.variants:
        wanted = args.variants.split(",")
        chosen = [v for v in VARIANTS if v.name in wanted]
    settings = Settings.from_env(kv_cache_space_gib=2, adapter_serving=ADAPTER_SERVING)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_space_gib))
    base = Extractor(settings=settings)
    items = load_gold(GOLD, task=None, known=base.catalog.names(), task_field="intent", mapping=task_map("snips"))
    if args.per_intent:
        items = select(items, per_task=args.per_intent)
    started = time.perf_counter()
    rows = asyncio.run(_all(base, settings, chosen, items, print_row=_echo))
    command = "python -m bench.experiments.quality" + (f" --per-intent {args.per_intent}" if args.per_intent else "")
    if args.variants:
        command += f" --variants {args.variants}"
    text = markdown(rows, len(items), command, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    (RESULTS / "raw").mkdir(exist_ok=True)
    (RESULTS / "raw" / f"{args.out.stem}.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(text)


def _echo(r: dict[str, Any]) -> None:
    print(
        f"bench: {r['variant']:12} F1 {r['f1']:.3f} P {r['precision']:.3f} R {r['recall']:.3f} "
        f"valid {r['valid']:.1%} off-text {r['not_in_text']} prompt {r['prompt_tokens']:.0f} "
        f"out {r['output_tokens']:.1f} {r['docs_per_s']:.2f} docs/s",
        flush=True,
    )


async def _all(
    base: Extractor,
    settings: Settings,
    variants: list[Variant],
    items: list[GoldItem],
    *,
    print_row: Callable[[dict[str, Any]], None],
) -> list[dict[str, Any]]:
    rows = []
    async with base:
        for variant in variants:
            rows.append(await run_variant(base.engine, settings, variant, items))
            print_row(rows[-1])
    return rows


if __name__ == "__main__":
    main()
