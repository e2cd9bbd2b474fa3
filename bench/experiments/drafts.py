"""Drafts for constrained answers (issue 28; ``extractor/engines/vllm_proposer.py``): how many tokens a
decoding step could take, and what they were worth on the H200.

    python -m bench.experiments.drafts --replay --per-task 4   # the real engine here (greedy), each answer replayed
    python -m bench.experiments.drafts --render                # bench/results/drafts.md from the raw runs

``--replay`` generates greedy answers (task schema and substring grammar) on this machine's engine,
then replays each through its grammar with a proposer offering up to 4 drafts after every step:
each step takes the sampled token and the drafts that match the answer (what the model's check
keeps at greedy), so tokens per step is the most a proposer can save. The proposers: the grammar's
forced tokens alone; vLLM's prompt lookup (its ``ngram``: earliest match in prompt and answer so
far) of 2-5 and of 1-5 tokens, cut to what the grammar accepts; ``GrammarDrafts`` (the forced tokens
or the 1-5 lookup, whichever is longer). The H200 rows come from ``bench.mask_fill`` run with and
without ``EXTRACTOR_SPECULATIVE_METHOD=grammar EXTRACTOR_SPECULATIVE_TOKENS=4`` (commands:
``bench/gpu/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from bench import common
from bench.common import RESULTS

DRAFTS = 4
RAW = RESULTS / "raw"
REPLAY = RAW / "drafts-replay.json"
GPU_RUNS = {  # label -> (without drafts, with them): bench.mask_fill reports, EXTRACTOR_MASK_THREADS=16 in both
    "SmolLM2-135M, real weights": ("drafts-smollm2-off.json", "drafts-smollm2-grammar4.json"),
    "7B-class, dummy weights": ("drafts-7b-off.json", "drafts-7b-grammar4.json"),
}


def lookup(context: Sequence[int], shortest: int, limit: int) -> list[int]:
    """vLLM's own prompt lookup (what its ``NgramProposer`` runs per sequence), ``limit`` tokens.

    The tokens after the earliest match of the longest suffix of ``shortest`` to 5 tokens.
    """
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens

    found = _find_longest_matched_ngram_and_propose_tokens(
        np.asarray(context, dtype=np.int32), shortest, 5, 1 << 30, limit
    )
    return [int(t) for t in found]


def steps(matcher: Any, prompt: Sequence[int], answer: Sequence[int], propose: Callable[..., list[int]]) -> int:
    """Decoding steps for ``answer`` when each step also keeps the proposed drafts the answer agrees with."""
    done, count = 0, 0
    while done < len(answer):
        count += 1
        done += 1  # the token the step samples
        if done == len(answer):
            break
        if not matcher.consume_token(answer[done - 1]):
            raise ValueError(f"the grammar refuses its own answer: {matcher.get_error()}")
        drafts = propose(matcher, list(prompt) + list(answer[:done]))
        kept = 0
        while kept < len(drafts) and done + kept < len(answer) and drafts[kept] == answer[done + kept]:
            kept += 1
        for token in answer[done : done + kept]:
            matcher.consume_token(token)
        done += kept
    return count


def _checked(matcher: Any, drafts: list[int]) -> list[int]:
    return drafts[: matcher.validate_tokens(drafts)] if drafts else []


PROPOSERS: dict[str, Callable[[Any, list[int]], list[int]]] = {
    "forced tokens": lambda m, ctx: list(m.compute_ff_tokens()[:DRAFTS]),
    "prompt lookup 2-5 (vLLM's ngram as we had it)": lambda m, ctx: _checked(m, lookup(ctx, 2, DRAFTS)),
    "prompt lookup 1-5": lambda m, ctx: _checked(m, lookup(ctx, 1, DRAFTS)),
}


def _grammar_drafts(matcher: Any, context: list[int]) -> list[int]:
    forced = PROPOSERS["forced tokens"](matcher, context)
    found = PROPOSERS["prompt lookup 1-5"](matcher, context)
    return forced if len(forced) >= len(found) else found


PROPOSERS["GrammarDrafts (forced or lookup 1-5, the longer)"] = _grammar_drafts


async def _answers(per_task: int) -> dict[str, Any]:
    from extractor import Extractor

    settings = common.settings()
    extractor = Extractor(settings=settings)
    items = common.gold_items(extractor.catalog.names())
    work = common.jobs(items, sorted({i.task for i in items}), per_task)
    await extractor.astart()
    out: dict[str, Any] = {"machine": common.machine(), "model": str(settings.model), "lines": len(work)}
    try:
        for grounded in (False, True):
            requests = [common.request(extractor.task(i.task), i.text, grounded=grounded) for i in work]
            requests = [replace(r, temperature=0.0) for r in requests]
            generations, _ = await common.generate_all(extractor.engine, requests)
            rows = []
            for request, generation in zip(requests, generations, strict=True):
                rows.append(
                    {
                        "prompt": list(extractor.engine.prompt_ids(request.messages)),  # type: ignore[attr-defined]
                        "grammar": request.grammar,
                        "schema": request.json_schema,
                        "answer": generation.text,
                    }
                )
            out["grounded" if grounded else "schema"] = rows
    finally:
        await extractor.aclose()
    return out


def replay(answers: dict[str, Any]) -> dict[str, Any]:
    """Tokens per decoding step for each proposer, per constraint."""
    import llguidance
    import llguidance.hf
    from transformers import AutoTokenizer

    from extractor import Settings
    from extractor.models import resolve_model_dir

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_dir(Settings.from_env())))
    ll = llguidance.hf.from_tokenizer(tokenizer)
    result: dict[str, Any] = {}
    for side in ("schema", "grounded"):
        tokens, counts = 0, dict.fromkeys(PROPOSERS, 0)
        for row in answers[side]:
            answer = [*tokenizer.encode(row["answer"], add_special_tokens=False), ll.eos_token]
            tokens += len(answer)
            for name, propose in PROPOSERS.items():
                grammar = (
                    llguidance.LLMatcher.grammar_from_lark(row["grammar"])
                    if row["grammar"]
                    else llguidance.LLMatcher.grammar_from_json_schema(
                        row["schema"], defaults={"whitespace_flexible": False}
                    )
                )
                counts[name] += steps(llguidance.LLMatcher(ll, grammar), row["prompt"], answer, propose)
        result[side] = {"tokens": tokens, "tokens_per_step": {n: tokens / c for n, c in counts.items()}}
    return result


def _gpu_table() -> list[str]:
    lines = [
        "| model | layout | free tok/s, off → on | task schema, off → on | substring grammar, off → on |",
        "|---|---|---:|---:|---:|",
    ]
    for label, (off_name, on_name) in GPU_RUNS.items():
        off, on = (json.loads((RESULTS / "raw" / n).read_text(encoding="utf-8")) for n in (off_name, on_name))
        for layout in ("per_task", "mixed"):
            cells = []
            for side in ("free", "schema", "grounded"):
                a, b = off[layout][side]["tok_s"], on[layout][side]["tok_s"]
                cells.append(f"{a:,.0f} → {b:,.0f} (**{b / a:.2f}x**)")
            lines.append(f"| {label} | {layout.replace('_', ' ')} | {' | '.join(cells)} |")
    return lines


def markdown(replayed: dict[str, Any]) -> str:
    machine = replayed["machine"]
    rows = ["| proposer | task schema | substring grammar |", "|---|---:|---:|"]
    for name in PROPOSERS:
        rows.append(
            f"| {name} | {replayed['schema']['tokens_per_step'][name]:.2f} | "
            f"{replayed['grounded']['tokens_per_step'][name]:.2f} |"
        )
    first = json.loads((RESULTS / "raw" / GPU_RUNS["7B-class, dummy weights"][0]).read_text(encoding="utf-8"))
    gpu = first["machine"]
    return "\n".join(
        [
            "# Drafts for constrained answers (issue 28)",
            "",
            "`extractor/engines/vllm_proposer.py`: the grammar's forced tokens and a prompt lookup as speculative",
            "drafts (`EXTRACTOR_SPECULATIVE_METHOD=grammar`, `EXTRACTOR_SPECULATIVE_TOKENS=4`). Rendered by",
            "`python -m bench.drafts --render`.",
            "",
            "## How many tokens a step could take",
            "",
            f"{replayed['lines']} SNIPS dev lines, greedy answers of "
            f"{'SmolLM2-135M-Instruct (the default model)' if replayed['model'] == 'default' else replayed['model']} "
            f"on {machine.get('cores')} "
            f"CPU cores (vLLM {machine.get('vllm')}, {machine.get('date')}), each replayed through its grammar "
            f"with up to {DRAFTS} drafts per step (`python -m bench.drafts --replay --per-task 4`). Tokens per "
            "decoding step, the end of the answer included:",
            "",
            *rows,
            "",
            "The prompt holds the task's worked examples, so the keys of an answer are there as well as its",
            "values: a lookup of single tokens finds most of an answer; the grammar's forced tokens add where",
            "a lookup finds nothing (a task without examples, an enum's tail).",
            "",
            "## What they were worth on the H200",
            "",
            f"{gpu.get('date')}, one {gpu.get('gpu')}, vLLM {gpu.get('vllm')}, {gpu.get('cores')} host cores; "
            "`bench.mask_fill` (350 SNIPS lines, greedy, free text cut at the constrained answers' mean "
            "length, each side twice) with the llguidance mask pool on (`EXTRACTOR_MASK_THREADS=16`) in both "
            "engines, without and with the drafts; output tokens/s:",
            "",
            *_gpu_table(),
            "",
            "- The drafts lose on vLLM 0.26. A `custom_class` proposer turns vLLM's async scheduling off",
            "  (0.26 overlaps the next step's scheduling with the GPU only for EAGLE, MTP, draft models and",
            "  its GPU n-gram), and free text shows what that costs alone: 0.61-0.72x, since free text gets",
            "  no drafts. Constrained output keeps more (0.75-0.94x) because the drafts give some of it back,",
            "  but not all: a step with drafts also fills a mask per draft position and checks them.",
            "- On dummy weights the acceptance means little (a random model agrees with a lookup by chance;",
            "  forced tokens mostly are, where their masks allow one token); SmolLM2's rows are real answers.",
            "- So the proposer is off by default. Greedy answers are the same with it (`tests/test_engine_process.py`",
            "  starts vLLM with it and compares). On CPU cores the forward pass costs per token, so drafts",
            "  cannot save much there either. What would make it pay: drafts under async scheduling (vLLM's GPU",
            "  n-gram proposer runs async; a forced-token proposer would need the grammar on the GPU worker's",
            "  side of the step).",
            "",
            *gpu_lookup(),
        ]
    )


def gpu_lookup() -> list[str]:
    """vLLM's GPU prompt lookup (``ngram_gpu``), the proposer that keeps async scheduling: tried, ruled out."""
    runs = {n: json.loads((RAW / f"mask-fill-ngram-gpu-{n}.json").read_text(encoding="utf-8")) for n in ("16", "0")}
    plain = json.loads((RAW / "mask-fill-runner-v2.json").read_text(encoding="utf-8"))

    def rate(run: dict[str, Any], side: str) -> str:
        return f"{run['per_task'][side]['tok_s']:,.0f}"

    pool, own = runs["16"], runs["0"]
    return [
        "## vLLM's GPU prompt lookup (`ngram_gpu`): ruled out on 0.26",
        "",
        f"{pool['machine']['date']}, one H200, vLLM 0.26.0, the 7B-class dummy, `bench.mask_fill --per-task 50`, "
        "4 drafts a step (`raw/mask-fill-ngram-gpu-{16,0}.json`; the run's code: "
        "`bench/gpu/ngram-gpu-experiment.patch`, not kept). The one lookup proposer that keeps async scheduling "
        "runs on vLLM's V1 model runner only (0.26 says so and switches). Two vLLM faults met it: the "
        "scheduler hands the proposer's -1 padding to llguidance's `validate_tokens`, which refuses the negative "
        "id and kills the engine core (the patch checked the drafts before the padding only); past that, "
        f"3,151-3,152 requests per run were ended by 'grammar rejected tokens' with vLLM's own mask fill as with "
        f"the pool, so constrained answers averaged {pool['matched_tokens']} tokens instead of 26. Free text "
        f"alone fell to {rate(pool, 'free')} and {rate(own, 'free')} tok/s one task at a time, against "
        f"{rate(plain, 'free')} on the same host without drafts (`raw/mask-fill-runner-v2.json`). Not a lever "
        "on vLLM 0.26.",
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replay", action="store_true", help="generate greedy answers here and replay them")
    parser.add_argument("--per-task", type=int, default=4)
    parser.add_argument("--render", action="store_true", help="write bench/results/drafts.md")
    args = parser.parse_args()
    if args.replay:
        answers = asyncio.run(_answers(args.per_task))
        report = {k: answers[k] for k in ("machine", "model", "lines")} | replay(answers)
        common.save(REPLAY, report)
        for side in ("schema", "grounded"):
            print(side, {k: round(v, 2) for k, v in report[side]["tokens_per_step"].items()})
    if args.render:
        out = RESULTS / "drafts.md"
        out.write_text(markdown(json.loads(REPLAY.read_text(encoding="utf-8"))), encoding="utf-8")
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
