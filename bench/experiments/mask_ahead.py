"""The engine core's main-thread time a step in the grammar's work, masks filled after vs ahead (issue 28).

    python -m bench.experiments.mask_ahead [--per-task 10]
    # prints, writes bench/results/mask_ahead.md and raw/mask-ahead.json

``EXTRACTOR_MASK_AHEAD=1`` (``extractor/engines/vllm_ahead.py``) moves each step's grammar advance
and the next step's mask fill off vLLM's engine-core thread, into a job that runs while that thread
goes through the rest of ``Scheduler.update_from_output``. On the H200 that thread is what the GPU
waits on; its speed there is for ``bench.mask_fill`` on the GPU host. This shows, on this machine's
real engine, what leaves the thread: vLLM in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
its ``LLM`` class), the pool of ``EXTRACTOR_MASK_THREADS`` threads, and a timer around
``update_from_output`` and the masks (``StructuredOutputManager.grammar_bitmask``), one child
process per side (the plugin is loaded when the engine starts). SNIPS dev lines, the pipeline's first
request (the task schema, then the substring grammar), greedy, all at once; the answers of both
sides are compared token for token.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import common
from bench.common import RESULTS, write_table

RAW = RESULTS / "raw" / "mask-ahead.json"


def timed(cls: Any, name: str, into: dict[str, float]) -> None:
    """Wrap ``cls.name``: each call adds its seconds to ``into[name]`` and one to ``into[name + '_calls']``."""
    inner: Callable[..., Any] = getattr(cls, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            into[name] = into.get(name, 0.0) + time.perf_counter() - started
            into[name + "_calls"] = into.get(name + "_calls", 0) + 1

    setattr(cls, name, wrapper)


def child(per_task: int, max_num_seqs: int) -> dict[str, Any]:
    """One engine, this process's EXTRACTOR_MASK_AHEAD: main-thread seconds per step of each side."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.structured_output import StructuredOutputManager

    from extractor import Extractor
    from extractor.models import resolve_model_dir

    settings = common.settings()
    model = str(resolve_model_dir(settings))
    llm = LLM(
        model=model,
        max_num_seqs=max_num_seqs,
        max_model_len=settings.max_model_len,
        enforce_eager=True,
        seed=0,
        structured_outputs_config={"backend": "guidance", "disable_any_whitespace": True},
    )
    tokenizer = AutoTokenizer.from_pretrained(model)
    extractor = Extractor(settings=settings)
    items = common.jobs(common.gold_items(extractor.catalog.names()), list(common.SNIPS_TASKS), per_task)
    spent: dict[str, float] = {}
    timed(Scheduler, "update_from_output", spent)
    timed(StructuredOutputManager, "grammar_bitmask", spent)
    report: dict[str, Any] = {"ahead": common.mask_ahead(), "threads": os.environ.get("EXTRACTOR_MASK_THREADS")}
    for side in ("schema", "grounded"):
        requests = [common.request(extractor.task(i.task), i.text, grounded=side == "grounded") for i in items]
        prompts = [
            tokenizer.apply_chat_template(list(r.messages), add_generation_prompt=True, tokenize=False)
            for r in requests
        ]
        params = [
            SamplingParams(
                temperature=0.0,
                max_tokens=r.max_tokens,
                structured_outputs=StructuredOutputsParams(json=dict(r.json_schema))
                if r.grammar is None
                else StructuredOutputsParams(grammar=r.grammar),
            )
            for r in requests
        ]
        llm.generate(prompts[:4], params[:4], use_tqdm=False)  # warm-up: grammars compiled, caches filled
        spent.clear()
        started = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - started
        steps = spent.get("update_from_output_calls", 0)
        tokens = [list(o.outputs[0].token_ids) for o in outputs]
        report[side] = {
            "docs": len(outputs),
            "tokens": sum(map(len, tokens)),
            "steps": steps,
            "wall_s": wall,
            "update_ms": 1e3 * spent.get("update_from_output", 0.0) / max(steps, 1),
            "masks_ms": 1e3 * spent.get("grammar_bitmask", 0.0) / max(spent.get("grammar_bitmask_calls", 0), 1),
            "mask_calls": spent.get("grammar_bitmask_calls", 0),
            "answers": hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16],
        }
        print(f"bench: ahead={report['ahead']} {side}: {report[side]}", flush=True)
    return report


# label, the pool's threads (None: --threads), masks ahead
SIDES: tuple[tuple[str, int | None, bool], ...] = (
    ("vLLM's own fill and advance (the CPU default)", 0, False),
    ("llguidance's pool", None, False),
    ("llguidance's pool, masks ahead (`EXTRACTOR_MASK_AHEAD=1`)", None, True),
)


def run(threads: int, ahead: bool, per_task: int, max_num_seqs: int) -> dict[str, Any]:
    env = {**os.environ, "EXTRACTOR_MASK_THREADS": str(threads), "EXTRACTOR_MASK_AHEAD": "1" if ahead else "0"}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder, "child.json")
        command = [sys.executable, "-m", "bench.experiments.mask_ahead", "--child", str(out)]
        command += ["--per-task", str(per_task)]
        command += ["--max-num-seqs", str(max_num_seqs)]
        done = subprocess.run(command, env=env, cwd=common.ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"bench.mask_ahead child failed:\n{done.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def render(runs: list[dict[str, Any]], per_task: int, threads: int) -> None:
    rows = []
    for side in ("schema", "grounded"):
        first = runs[0][side]
        for (label, _, _), run_ in zip(SIDES, runs, strict=True):
            row = run_[side]
            same = "yes" if row["answers"] == first["answers"] else "**no**"
            rows.append(
                f"| {side} | {label} | {row['update_ms']:.2f} | {row['masks_ms']:.2f} "
                f"| **{row['update_ms'] + row['masks_ms']:.2f}** | {row['wall_s']:.1f} | {same} |"
            )
    machine = common.machine()
    steps = runs[0]["schema"]["steps"]
    write_table(
        "mask_ahead.md",
        "The grammar's work on vLLM's engine-core thread: masks filled after the step vs ahead (issue 28)",
        f"{machine['date']}, {machine['cores']} cores ({machine['cpu']}), vLLM {machine['vllm']}, the default model "
        f"(SmolLM2-135M), vLLM's CPU backend in this process, the pool of {threads} threads; {per_task} SNIPS "
        f"dev lines a task ({runs[0]['schema']['docs']} requests, all at once, about {steps} steps), the pipeline's "
        "first request, greedy, after a warm-up; one engine per row. Main-thread milliseconds: "
        "`Scheduler.update_from_output` a step (it advances the grammars; with `EXTRACTOR_MASK_AHEAD=1` it starts "
        "the job that advances them and fills their next masks instead) and `grammar_bitmask` a call (with it, "
        "it waits for that job and copies its rows). `python -m bench.mask_ahead`. On this machine the model's "
        "forward pass takes most of each step (the wall seconds, which vary by 10-15 % from run to run), so this "
        "shows what leaves the thread, not what it is worth: on the H200 the GPU waits on that thread "
        "(`mask_fill.md`), and `bench.mask_fill` with `EXTRACTOR_MASK_AHEAD=1` there measures it "
        "(`bench/gpu/README.md`). The CPU keeps vLLM's own fill (the pool's threads and the model's share the "
        "cores).",
        [
            "grammar",
            "masks",
            "update ms",
            "masks ms",
            "grammar work on the thread, ms a step",
            "wall s",
            "same answers",
        ],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-task", type=int, default=9)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the pool's threads")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.child.write_text(json.dumps(child(args.per_task, args.max_num_seqs)), encoding="utf-8")
        return 0
    runs = [run(args.threads if t is None else t, ahead, args.per_task, args.max_num_seqs) for _, t, ahead in SIDES]
    common.save(RAW, {"machine": common.machine(), "per_task": args.per_task, "threads": args.threads, "runs": runs})
    render(runs, args.per_task, args.threads)
    print(f"bench: {RESULTS / 'mask_ahead.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
