"""The pipeline's calls beside a busy event-loop thread: why `extractor batch` trails raw vLLM on a GPU (issue 28).

In process, extractor's pipeline and vLLM's front end (AsyncLLM: an asyncio loop on the thread
``extractor-vllm`` that talks to the engine core over ZMQ) share one interpreter. A C call that
lets the GIL go (the tokenizer, numpy, a file write) must take it back, and CPython's waiter only
asks the holder to hand it over when a whole switch interval (5 ms) passed *without the GIL
changing hands*. An event loop that selects and sends all the time lets the GIL go and takes it
back every few microseconds, so the waiter can wait far longer than 5 ms. Pure Python code, which
never lets go, only shares the core.

This measures each pipeline step's wall time per call alone, then beside a thread that runs an
asyncio loop of ~0.3 ms of Python between ``await asyncio.sleep(...)`` (busy all the time, and
about half the time), as vLLM's front end is under load (0.3-0.8 of a core on the H200,
``bench/results/gpu.md``). CPU only, about a minute; nothing else should run meanwhile:

    python -m bench.experiments.gil_starvation          # prints the table; --out writes bench/results/gil_starvation.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import common
from extractor import Extractor, pipeline
from extractor.catalog.prompting import render
from extractor.constraints import grounded_decoding
from extractor.engines.tokenizer import chat_token_ids, load_tokenizer
from extractor.models import resolve_model_dir

LOOP_WORK = 3000  # squares summed per turn of the busy loop: about 0.3 ms of bytecode here


@contextmanager
def busy_loop(pause_s: float) -> Iterator[None]:
    """A thread running an asyncio loop: ~0.3 ms of Python, then ``await asyncio.sleep(pause_s)``, until the end."""
    stop = threading.Event()

    async def spin() -> None:
        while not stop.is_set():
            total = 0
            for k in range(LOOP_WORK):
                total += k * k
            await asyncio.sleep(pause_s)

    thread = threading.Thread(target=lambda: asyncio.run(spin()), name="busy-loop")
    thread.start()
    time.sleep(0.2)
    try:
        yield
    finally:
        stop.set()
        thread.join()


def per_call_us(step: Callable[[int], Any], calls: int) -> float:
    started = time.perf_counter()
    for k in range(calls):
        step(k)
    return (time.perf_counter() - started) / calls * 1e6


def steps() -> dict[str, Callable[[int], Any]]:
    """The pipeline's steps on SNIPS dev lines, each as a function of the line's number."""
    extractor = Extractor(settings=common.settings())
    settings = extractor.settings
    tasks = {n: pipeline.served(extractor.task(n), settings) for n in extractor.catalog.names()}
    items = [i for i in common.gold_items(extractor.catalog.names()) if i.task.startswith("snips_")][:210]
    tokenizer = load_tokenizer(resolve_model_dir(settings))
    chats = [render(tasks[i.task], i.text) for i in items]
    handle, path = tempfile.mkstemp()
    os.unlink(path)  # the open handle keeps the file until the process ends
    return {
        "render (prompt + 3 retrieved examples)": lambda k: render(tasks[items[k].task], items[k].text),
        "prompt tokens (chat template + tokenizer)": lambda k: chat_token_ids(tokenizer, chats[k]),
        "grounded grammar build": lambda k: grounded_decoding.constrain(
            tasks[items[k].task].schema,
            items[k].text,
            everywhere=True,
            max_words=settings.grounded_max_words,
            clauses=settings.grounded_clauses,
        ),
        "json.dumps of the chat (pure C, keeps the GIL)": lambda k: json.dumps(chats[k]),
        "a 100-byte file write": lambda k: os.write(handle, b"x" * 100),
    }


def measure(calls: int) -> dict[str, Any]:
    found = steps()
    rows: dict[str, dict[str, float]] = {name: {} for name in found}
    for name, step in found.items():
        per_call_us(step, 5)  # warm
        rows[name]["alone"] = per_call_us(step, calls)
    for label, pause in (("busy", 0.0), ("half busy", 0.0003)):
        with busy_loop(pause):
            for name, step in found.items():
                rows[name][label] = per_call_us(step, calls)
    return {"machine": common.machine(), "calls": calls, "switch_interval_s": sys.getswitchinterval(), "rows": rows}


def markdown(result: dict[str, Any]) -> str:
    machine = result["machine"]
    lines = [
        "# The pipeline's calls beside a busy event loop (GIL hand-over)",
        "",
        f"{machine['date']}, {machine['cores']} cores ({machine['cpu']}), Python {machine['python']}; "
        f"`python -m bench.gil_starvation --out bench/results/gil_starvation.md`, {result['calls']} calls "
        "each (SNIPS dev lines). Wall time per call, alone and beside a thread whose asyncio loop runs "
        "~0.3 ms of Python between `await asyncio.sleep(0)` (busy) or `sleep(0.0003)` (half busy), as "
        "vLLM's front end does between its ZMQ sends and receives.",
        "",
        "| step | alone µs | beside a half-busy loop µs | beside a busy loop µs |",
        "|---|---:|---:|---:|",
    ]
    for name, row in result["rows"].items():
        lines.append(f"| {name} | {row['alone']:,.0f} | {row['half busy']:,.0f} | {row['busy']:,.0f} |")
    lines += [
        "",
        "A call that lets the GIL go (the tokenizer, numpy's scoring in the example retrieval, a file "
        "write) waits to take it back until the loop thread happens to leave it free: CPython asks the "
        "holder to hand it over only after a switch interval (5 ms) in which it did not change hands, "
        "and an event loop that selects all the time changes hands every few microseconds. Pure Python "
        "(`json.dumps`) only shares the core. This is what held `extractor batch` on the H200: the "
        "prompt stage took 2-3 ms of wall time a document there for 0.15 ms of work "
        "(`bench/results/mask_fill.md`), on the thread beside vLLM's front end. The way out is not "
        "to share the interpreter: vLLM's front end in a process of its own (as behind `vllm serve`), "
        "the pipeline in another.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args()
    result = measure(args.calls)
    text = markdown(result)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        common.save(args.out.with_suffix(".json").parent / "raw" / "gil-starvation.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
