"""A decoding step's grammar advance: vLLM's loop vs one call to llguidance's pool, ruled out (issue 28).

    python -m bench.experiments.grammar_advance [--threads N] [--batches 50,100,256]
    # prints each row, writes bench/results/grammar_advance.md and raw/grammar-advance.json

Every step vLLM 0.26 advances each structured sequence's grammar by its new token, one request
after another on the engine core's main thread (``GuidanceGrammar.accept_tokens`` inside
``Scheduler.update_from_output``), then fills the next step's masks (with
``EXTRACTOR_MASK_THREADS``: llguidance's pool, in one call). py-spy of that thread on the H200
showed ``accept_tokens`` about as often as the pool's fill (``mask_fill.md``). llguidance 1.7 can
advance a batch in its pool too (``LLExecutor.consume_token_par``). This walks batches of real SNIPS
answers (the gold slots of dev lines, as compact JSON in the schema's key order, then the stop
token) through the shipped tasks' grammars, the task schema and the substring grammar of each line,
one token a step, both ways: vLLM's own class and loop, and the batch call alone (the least any
patch doing it could cost: no per-request bookkeeping). Milliseconds per step, the mean over the
walk, the best of three walks; the pool's fill of the same steps beside it. No engine runs; the
grammars, tokenizer and pool are what vLLM's engine core holds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import common
from bench.common import write_table
from bench.experiments.grammar_cost import ordered
from bench.pipeline_cpu import shaped
from extractor import Catalog
from extractor.config import repo_root


def vllms_loop(pool: Any, step: Sequence[tuple[Any, list[int]]]) -> None:
    """What ``Scheduler.update_from_output`` does to grammars: each request's new tokens to its grammar."""
    for grammar, tokens in step:
        grammar.accept_tokens("r", tokens)


def pooled(pool: Any, step: Sequence[tuple[Any, list[int]]]) -> None:
    """The step's tokens to llguidance's pool in one call (grammars that ended take none, as in vLLM's)."""
    live = [(grammar.ll_matcher, tokens[0]) for grammar, tokens in step if not grammar.ll_matcher.is_stopped()]
    if live:
        pool.consume_token_par(live)


def answers(per_task: int) -> list[tuple[Any, str, str]]:
    """(task, text, answer): gold answers (each slot's first value) as compact JSON in the schema's key order."""
    catalog = Catalog.load(repo_root())
    items = common.jobs(common.gold_items(list(catalog.names())), list(common.SNIPS_TASKS), per_task)
    made = []
    for item in items:
        task = catalog.get(item.task)
        made.append((task, item.text, ordered(task.engine_schema, shaped(task.engine_schema, item.expected))))
    return made


def walks(kind: str, per_task: int, hf: Any, lt: Any) -> list[tuple[str, list[int]]]:
    """(llguidance grammar, answer tokens + stop) for each line whose answer the grammar takes whole."""
    import llguidance

    made = []
    for task, text, answer in answers(per_task):
        request = common.request(task, text, grounded=kind == "grounded")
        if request.grammar is not None:
            grammar = llguidance.grammar_from("lark", request.grammar)
        else:
            schema = request.json_schema
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
        tokens = [*hf.encode(answer, add_special_tokens=False), lt.eos_token]
        if llguidance.LLMatcher(lt, grammar).validate_tokens(tokens) == len(tokens):
            made.append((grammar, tokens))
    return made


Advance = Callable[[Any, Sequence[tuple[Any, list[int]]]], None]


def walk(lt: Any, pool: Any, advance: Advance, lines: Sequence[tuple[str, list[int]]]) -> tuple[float, float]:
    """Milliseconds per step: advancing every grammar, and the pool's fill of the next masks."""
    import llguidance
    import llguidance.torch as llguidance_torch
    from vllm.v1.structured_output.backend_guidance import GuidanceGrammar

    held = [
        (GuidanceGrammar(ll_matcher=llguidance.LLMatcher(lt, g), ll_tokenizer=lt, vocab_size=lt.vocab_size), t)
        for g, t in lines
    ]
    bitmask = llguidance_torch.allocate_token_bitmask(len(held), lt.vocab_size)
    steps = max(len(t) for _, t in held)
    advancing = filling = 0.0
    for position in range(steps):
        step = [(g, t[position : position + 1]) for g, t in held if position < len(t)]
        started = time.perf_counter()
        advance(pool, step)
        middle = time.perf_counter()
        live = [(g.ll_matcher, row) for row, (g, _) in enumerate(held) if not g.is_terminated()]
        if live:
            llguidance_torch.fill_next_token_bitmask_par(pool, live, bitmask)
        advancing += middle - started
        filling += time.perf_counter() - middle
    return advancing / steps * 1e3, filling / steps * 1e3


def best(measure: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    runs = [measure() for _ in range(3)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the pool's threads")
    parser.add_argument("--batches", default="50,100,256", help="sequences a step")
    parser.add_argument("--per-task", type=int, default=40, help="SNIPS dev lines a task")
    args = parser.parse_args(argv)
    import llguidance
    import llguidance.hf
    from transformers import AutoTokenizer

    from extractor.models import default_model_dir

    hf = AutoTokenizer.from_pretrained(str(default_model_dir(common.settings())))
    lt = llguidance.hf.from_tokenizer(hf)
    pool = llguidance.LLExecutor(args.threads)
    rows, raw = [], []
    for kind in ("schema", "grounded"):
        lines = walks(kind, args.per_task, hf, lt)
        for size in (int(b) for b in args.batches.split(",")):
            batch = [lines[i % len(lines)] for i in range(size)]
            theirs = best(lambda b=batch: walk(lt, pool, vllms_loop, b))  # type: ignore[misc]
            ours = best(lambda b=batch: walk(lt, pool, pooled, b))  # type: ignore[misc]
            raw.append({"grammar": kind, "sequences": size, "vllm": theirs, "pool": ours, "lines": len(lines)})
            rows.append(
                f"| {kind} | {size} | {theirs[0]:.2f} | {ours[0]:.2f} | **{theirs[0] / ours[0]:.1f}x** "
                f"| {(theirs[0] + ours[1]):.2f} | {sum(ours):.2f} |"
            )
            print(f"bench: {rows[-1]}", flush=True)
    machine = common.machine()
    path = write_table(
        "grammar_advance.md",
        "A decoding step's grammar advance: vLLM's loop vs one call to llguidance's pool (issue 28)",
        f"{machine['date']}, {machine['cores']} cores ({machine['cpu']}), vLLM {machine['vllm']}, llguidance "
        f"{llguidance.__version__}, the pool of {args.threads} threads; the default model's tokenizer. SNIPS dev "
        f"lines' gold answers ({args.per_task} a task, {raw[0]['lines']} and {raw[-1]['lines']} the grammars took "
        "whole), one token a step through each line's grammar: the task schema, or the substring grammar of its "
        "text (the pipeline's first request). Milliseconds per step, the best of three walks "
        "(`python -m bench.grammar_advance`). The fill (the next step's masks, llguidance's pool in one call, as "
        "`EXTRACTOR_MASK_THREADS` ships) follows the advance on the engine core's main thread either way; the "
        "step's grammar work is the two together.",
        [
            "grammar",
            "sequences a step",
            "advance: vLLM's loop, ms",
            "advance: the pool, one call, ms",
            "faster",
            "advance + fill, vLLM's loop",
            "advance + fill, the pool",
        ],
        rows,
    )
    per_request = [r["vllm"][0] * 1e3 / r["sequences"] for r in raw]
    saved = max(r["vllm"][0] - r["pool"][0] for r in raw)
    faster = [r["vllm"][0] / r["pool"][0] for r in raw]
    with path.open("a", encoding="utf-8") as out:
        out.write(
            "\n## What it says\n\n"
            f"- vLLM's loop costs {min(per_request):.1f}-{max(per_request):.1f} µs a request a step here (the "
            "mean over the walk, finished grammars included): a few microseconds of Rust and Python each. One "
            f"call to the pool is at best {saved:.2f} ms a step faster "
            f"({min(faster):.1f}-{max(faster):.1f}x; "
            "slower at 50 sequences, where handing the work to the threads costs more than it saves), against "
            "an H200 step of 9-31 ms at 50-256 sequences (`mask_fill.md`): on this evidence not a lever on its "
            "own (and a patch doing only that would change what happens to a token a grammar rejects: vLLM ends "
            "that request in the same step). `EXTRACTOR_MASK_AHEAD=1` (`extractor/engines/vllm_ahead.py`) takes "
            "both the advance and the fill off the main thread's path instead: one job on a thread of its own "
            "advances the grammars in the pool and fills their next masks while the main thread goes through "
            "the rest of `update_from_output`.\n"
            "- py-spy counted about 14 µs a request a step under `accept_tokens` on the H200 (37 samples at "
            "100 Hz over a schema pass of about 260 steps of 100 sequences), more than the work here: a slower "
            "core, or the main thread waiting there for the GIL that the engine core's input and output "
            "threads take in turn. If it is the work, one pooled call of 16 threads could save about 1 ms of a "
            "9-15 ms step at 100 sequences. This benchmark runs in seconds on the GPU host, no engine "
            "(`python3 -m bench.grammar_advance --threads 16`, the next row of `bench/gpu/README.md`): it "
            "says which; `bench.mask_fill` with `EXTRACTOR_MASK_AHEAD=1` says what taking both off the path "
            "is worth.\n"
        )
    common.save(
        common.RESULTS / "raw" / "grammar-advance.json", {"machine": machine, "threads": args.threads, "runs": raw}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
