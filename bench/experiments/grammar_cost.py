"""What the substring grammar costs llguidance per request: compile, and the mask along the answer.

vLLM compiles each request's grammar on its engine core's host CPU before the request's first
step (the grounded grammar holds the text, so nothing is shared between requests), then computes a
token mask per step. This builds the grammar of every SNIPS dev utterance for its task, as the
pipeline does, in two forms: ``lean`` (as shipped: each grounded value written in place, a length
bound only where a clause of the text could break it) and ``full`` (a rule per grounded field and
every bound: the form before that cut; ``substring.skeleton(..., lean=False)``). For each it times
llguidance's matcher construction (vLLM's compile: ``LLMatcher``, log level 1 as vLLM 0.26 sets
it) and the mask at every token of the gold answer, written compactly as the model writes it.
Order per utterance: lean, full, full, lean; the task schema's own grammar (grounding off) once,
for scale. llguidance and the default model's tokenizer on this machine's CPU.

    .venv/bin/python -m bench.experiments.grammar_cost [--per-task 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench import common
from bench.common import write_table
from extractor import Catalog, Settings
from extractor.constraints import decoding, substring
from extractor.constraints.grounded_decoding import extractive_nodes
from extractor.models import default_model_dir

_COMPACT = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


def measure(lt: Any, tokenizer: Any, grammar: str, answer: str) -> tuple[float, float, int]:
    """Compile ms, mask ms summed over the answer's tokens, and how many masks."""
    import llguidance
    import llguidance.numpy

    started = time.perf_counter()
    matcher = llguidance.LLMatcher(lt, grammar, log_level=1)
    compile_ms = 1000 * (time.perf_counter() - started)
    if matcher.is_error():
        raise SystemExit(f"grammar does not compile: {matcher.get_error()}")
    mask = llguidance.numpy.allocate_token_bitmask(1, lt.vocab_size)
    spent, count = 0.0, 0
    for token in [*tokenizer.encode(answer, add_special_tokens=False), tokenizer.eos_token_id]:
        started = time.perf_counter()
        llguidance.numpy.fill_next_token_bitmask(matcher, mask, 0)
        spent += time.perf_counter() - started
        count += 1
        if not matcher.consume_token(token):
            break  # a gold value the grammar does not hold (not a substring of one clause): stop there
    return compile_ms, 1000 * spent, count


def ordered(task_schema: dict[str, Any], expected: dict[str, Any]) -> str:
    """The gold answer as the model writes it: compact, keys in the schema's order."""
    keys = list((task_schema.get("properties") or {}).keys())
    return json.dumps({k: expected[k] for k in keys if k in expected}, ensure_ascii=False, separators=(",", ":"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-task", type=int, default=100)
    args = parser.parse_args()
    import llguidance
    import llguidance.hf
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir(Settings.from_env())))
    lt = llguidance.hf.from_tokenizer(tokenizer)
    catalog = Catalog.load(common.ROOT)
    items = common.jobs(common.gold_items(catalog.names()), sorted(catalog.names()), args.per_task)
    sums: dict[str, list[float]] = {k: [0.0, 0.0, 0.0, 0.0] for k in ("lean", "full", "schema")}
    compiles: dict[str, list[float]] = {k: [] for k in sums}
    sizes: dict[str, list[int]] = {"lean": [], "full": []}
    skeletons: dict[str, dict[str, substring.Skeleton]] = {}
    for item in items:
        task = catalog.get(item.task)
        schema = dict(task.schema)
        targets = extractive_nodes(schema, everywhere=True)
        forms = skeletons.setdefault(
            item.task,
            {"lean": substring.skeleton(schema, targets), "full": substring.skeleton(schema, targets, lean=False)},
        )
        answer = ordered(schema, item.expected)
        grammars = {name: forms[name].grammar(item.text).lark for name in ("lean", "full")}
        for name in ("lean", "full", "full", "lean"):
            ms, mask_ms, masks = measure(lt, tokenizer, grammars[name], answer)
            compiles[name].append(ms)
            for i, value in enumerate((ms, mask_ms, masks, 1)):
                sums[name][i] += value
        for name in ("lean", "full"):
            sizes[name].append(len(grammars[name].splitlines()))
        embedded: Any = decoding.engine_schema(schema)
        embedded["x-guidance"] = _COMPACT
        ms, mask_ms, masks = measure(lt, tokenizer, llguidance.LLMatcher.grammar_from_json_schema(embedded), answer)
        compiles["schema"].append(ms)
        for i, value in enumerate((ms, mask_ms, masks, 1)):
            sums["schema"][i] += value
    rows = []
    for name, label in (
        ("full", "grounded, full (a rule per field, every bound)"),
        ("lean", "grounded, lean (as shipped)"),
        ("schema", "the task schema (grounding off)"),
    ):
        total_compile, total_mask, masks, runs = sums[name]
        lines = f"{statistics.mean(sizes[name]):.1f}" if name in sizes else "—"
        rows.append(
            f"| {label} | {lines} | {total_compile / runs:.3f} | {statistics.median(compiles[name]):.3f} "
            f"| {1000 * total_mask / masks:.1f} | {(total_compile + total_mask) / runs:.3f} |"
        )
        print(f"bench: {rows[-1]}", flush=True)
    lean, full = sums["lean"], sums["full"]
    ratio_compile = lean[0] / full[0]
    ratio_mask = (lean[1] / lean[2]) / (full[1] / full[2])
    ratio_all = (lean[0] + lean[1]) / (full[0] + full[1])
    write_table(
        "grammar_cost.md",
        "The substring grammar's cost in llguidance: compile and masks per request",
        f"`python -m bench.grammar_cost --per-task {args.per_task}`: {len(items)} SNIPS dev utterances over "
        f"{len(skeletons)} tasks, each grammar built as the pipeline builds it, compiled by llguidance "
        f"{llguidance.__version__ if hasattr(llguidance, '__version__') else ''} (`LLMatcher`, as vLLM's engine core "
        "does per request) and masked at every token of the gold answer; lean, full, full, lean per utterance; this "
        f"machine's CPU ({common.machine().get('cores', '?')} cores). Lean against full: "
        f"compile **{ratio_compile:.2f}**, "
        f"mask per token **{ratio_mask:.2f}**, both per request **{ratio_all:.2f}**.",
        ["grammar", "lines", "compile ms (mean)", "compile ms (median)", "mask µs/token", "compile + masks ms/request"],
        rows,
    )


if __name__ == "__main__":
    main()
