"""What the benchmark phases share: sizes, the SNIPS sample, the engine settings, the machine."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from extractor import Extractor, Settings, Task, pipeline
from extractor.catalog.prompting import render
from extractor.constraints import grounded_decoding
from extractor.engines.base import Engine, Generation, GenerationRequest
from extractor.jobs import batch
from extractor.jobs.gold import GoldItem, load_gold, select, task_map

ROOT = Path(__file__).resolve().parent.parent
# SNIPS: shared/ is the repo's sibling; BENCH_SNIPS_DIR points elsewhere (the GPU host: /tmp/stage)
SNIPS = Path(os.environ.get("BENCH_SNIPS_DIR") or ROOT.parent / "shared" / "eval" / "snips")
GOLD = SNIPS / "dev.jsonl"
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Sizes:
    """How many documents each measurement uses."""

    throughput_tasks: tuple[str, ...]  # P1 and P3: these tasks, one after another
    throughput_per_task: int
    seed_per_task: int  # P2: one request at a time is slow, so fewer
    quality_per_task: int  # the quality table: the first N lines of every intent


QUICK = Sizes(
    throughput_tasks=("snips_get_weather", "snips_play_music", "snips_book_restaurant"),
    throughput_per_task=8,
    seed_per_task=2,
    quality_per_task=3,
)
SNIPS_TASKS = (
    "snips_add_to_playlist",
    "snips_book_restaurant",
    "snips_get_weather",
    "snips_play_music",
    "snips_rate_book",
    "snips_search_creative_work",
    "snips_search_screening_event",
)
FULL = Sizes(
    throughput_tasks=SNIPS_TASKS,
    throughput_per_task=16,
    seed_per_task=4,
    quality_per_task=20,
)
# Throughput runs decode greedily, so both sides of a comparison generate the same thing.
TEMPERATURE = 0.0
CONCURRENCY = 64


def sizes(quick: bool) -> Sizes:
    return QUICK if quick else FULL


# The benchmarks' adapter serving: off (the retrieval layout) unless the environment names a mode.
ADAPTER_SERVING = os.environ.get("EXTRACTOR_ADAPTER_SERVING", "off")


def settings() -> Settings:
    """From the environment (default: the default model in-process), KV cache 2 GiB on CPU.

    ``EXTRACTOR_ENGINE=scripted`` gives a dry run of the whole benchmark in seconds. Adapters are off
    unless ``EXTRACTOR_ADAPTER_SERVING`` says otherwise: P1-P5 and the quality table measure the
    retrieval layout (worked examples in every prompt: the most work for the pipeline); the SNIPS
    tasks' shipped adapter is measured by ``bench.train`` (``bench/results/train.md``).
    """
    return Settings.from_env(kv_cache_space_gib=2, adapter_serving=ADAPTER_SERVING)


def gold_items(known: Sequence[str]) -> list[GoldItem]:
    """Every SNIPS dev line, its intent mapped to our task name."""
    if not GOLD.exists():
        raise SystemExit(f"{GOLD}: the SNIPS gold file is missing (shared/ must sit beside the repo)")
    return load_gold(GOLD, task=None, known=known, task_field="intent", mapping=task_map("snips"))


def jobs(items: Sequence[GoldItem], tasks: Sequence[str], per_task: int) -> list[GoldItem]:
    """The first ``per_task`` lines of each of ``tasks``, grouped by task in that order."""
    chosen = select([i for i in items if i.task in tasks], per_task=per_task)
    return sorted(chosen, key=lambda i: tasks.index(i.task))


def request(task: Task, text: str, *, schema: bool = True, grounded: bool = False) -> GenerationRequest:
    """The first attempt's request exactly as the pipeline builds it (greedy).

    ``grounded``: with the task's grounded decoding (when the task turns it on), as the pipeline's
    first attempt sends it: the substring grammar, or the enum schema where the grammar cannot go.
    """
    s = settings()
    max_tokens = task.settings.max_tokens or s.max_tokens
    json_schema: Any = task.engine_schema if schema else None
    grammar = None
    if schema and grounded and task.settings.grounded_decoding:
        constrained = grounded_decoding.constrain(
            task.schema, text, everywhere=True, max_words=s.grounded_max_words, clauses=s.grounded_clauses
        )
        if constrained is not None and constrained.grammar is not None:
            json_schema, grammar = None, constrained.grammar
        elif constrained is not None and constrained.schema is not None:
            json_schema = constrained.schema
    task = pipeline.served(task, s)  # as the pipeline does: "off" serves the base model, examples shown
    return GenerationRequest(
        messages=render(task, text),
        json_schema=json_schema,
        grammar=grammar,
        temperature=TEMPERATURE,
        max_tokens=max_tokens,
        adapter=str(task.adapter) if task.adapter is not None else None,
    )


async def generate_all(
    engine: Engine, requests: Sequence[GenerationRequest], *, concurrency: int | None = None
) -> tuple[list[Generation], float]:
    """Generate every request, ``concurrency`` (default ``CONCURRENCY``) at once; the generations and the seconds."""
    gate = asyncio.Semaphore(concurrency or CONCURRENCY)

    async def one(r: GenerationRequest) -> Generation:
        async with gate:
            return await engine.generate(r)

    started = time.perf_counter()
    results = list(await asyncio.gather(*(one(r) for r in requests)))
    return results, time.perf_counter() - started


@contextmanager
def gpu_busy(into: dict[str, Any], every_s: float = 0.02) -> Iterator[None]:
    """The GPU's mean utilization while the block runs (NVML: the share of time some kernel ran), 0-1.

    Written to ``into["gpu_busy"]``; nothing where NVML or a GPU is missing (vLLM ships NVML's bindings).
    """
    try:
        from vllm.third_party import pynvml
    except ImportError:
        yield
        return
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except pynvml.NVMLError:  # no NVML library or no GPU (the CPU): no such figure
        yield
        return
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every_s):
            samples.append(int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

    sampler = threading.Thread(target=sample, name="bench-gpu-busy", daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join()
        pynvml.nvmlShutdown()
        if samples:
            into["gpu_busy"] = sum(samples) / len(samples) / 100


async def started(engine: Callable[[Settings], Engine | None] | None = None) -> tuple[Extractor, list[GoldItem], float]:
    """An extractor on the environment's settings (its engine from ``engine`` where given), started
    (``CONCURRENCY`` set): it, its SNIPS items, the seconds its engine took to start."""
    global CONCURRENCY
    settings_ = settings()
    CONCURRENCY = settings_.max_num_seqs  # both sides of a pair
    extractor = Extractor(settings=settings_, engine=engine(settings_) if engine else None)
    items = gold_items(extractor.catalog.names())
    begun = time.perf_counter()
    await extractor.astart()
    return extractor, items, time.perf_counter() - begun


def machine() -> dict[str, Any]:
    """Where the numbers were measured."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory": f"{psutil.virtual_memory().total / 1024**3:.0f} GiB",
        "python": platform.python_version(),
        "gpu": None,
    }
    try:
        import torch
        import vllm

        info["vllm"], info["torch"] = vllm.__version__, torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - the description is best effort
        pass
    return info


def pyplot() -> Any:
    """matplotlib's pyplot drawing into files (Agg), or None where matplotlib is missing (the GPU host)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def publish(text: str, page: Path | None, data: dict[str, Any] | None = None) -> None:
    """A results page: ``text`` printed and written to ``page`` (where given), ``data`` beside it as ``.json``."""
    print(text)
    if page is not None:
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text, encoding="utf-8")
        if data is not None:
            save(page.with_suffix(".json"), data)


def write_table(name: str, title: str, intro: str, header: Sequence[str], rows: Sequence[str]) -> Path:
    """``bench/results/<name>``: a title, a paragraph, then a markdown table."""
    align = "|" + "---|" * len(header)
    lines = [f"# {title}", "", intro, "", "| " + " | ".join(header) + " |", align, *rows]
    path = RESULTS / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def percentile(values: Sequence[float], q: float) -> float:
    """The value at quantile ``q`` (0-1) of ``values``, the nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# (module, attribute, stage): what the pipeline and batch call, by the name they call it.
_STAGES = [
    (pipeline, "render", "render (prompt + example selection)"),
    (pipeline.grounded_decoding, "constrain", "constraint (grammar build)"),
    (pipeline, "parse_and_validate", "parse + validate"),
    (pipeline.grounding, "locate", "grounding"),
    (batch._Writer, "flush", "journal writes (fsync)"),
]


@contextmanager
def stage_times(engine: Any) -> Iterator[dict[str, float]]:
    """Patch the stage functions (and ``engine.generate``) for the block; yields seconds per stage.

    Synchronous stages (render, constraint, parse/validate, grounding, journal writes) run on the event
    loop one at a time, so their sums are real time spent; ``generate`` is the time requests wait on the
    engine, summed over concurrent requests (it overlaps itself: compare it with the run's wall time,
    not with the other stages).
    """
    seconds: dict[str, float] = defaultdict(float)
    restore: list[tuple[Any, str, Any]] = []

    def wrap_sync(func: Callable[..., Any], stage: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                seconds[stage] += time.perf_counter() - start

        return wrapper

    for module, name, stage in _STAGES:
        if hasattr(module, name):
            original = getattr(module, name)
            restore.append((module, name, original))
            setattr(module, name, wrap_sync(original, stage))
    generate = engine.generate

    async def timed_generate(request: Any) -> Any:
        start = time.perf_counter()
        try:
            return await generate(request)
        finally:
            seconds["generate (engine, overlapping)"] += time.perf_counter() - start

    engine.generate = timed_generate
    try:
        yield seconds
    finally:
        engine.generate = generate
        for module, name, original in restore:
            setattr(module, name, original)
