"""``extractor batch --ray``: the batch pipeline per row, run by a Ray Data actor pool.

Each actor holds one :class:`~extractor.api.Extractor` (one engine: a GPU each where the cluster
has GPUs, a CPU share otherwise) and extracts a batch of rows per call, exactly as ``extractor
batch`` does on one machine. The driver reads the input files (one or many; a folder of
documents is a row a file, its path shipped and the file converted by the actor that reads it:
the actors' nodes see the driver's files, as on one host where several actors share a GPU
with ``--gpus-per-actor``, each with its own pipeline thread), writes the records of bad lines
itself, ships the other rows to the cluster through the object store, and is the
one writer of the sharded output (:mod:`extractor.scale.shards`): a record comes back to it, is
appended and fsynced, and counts in the progress line. An actor whose process dies is restarted
by Ray and its batch retried (Ray Data's defaults for actor pools: ``max_restarts=-1``,
``max_task_retries=-1``); a batch that comes back twice is written once. A node that dies takes
the same road: its actors are restarted where there is room (on a full cluster, once the other
actors have run out of work and left) and the calls sent to them run again there
(``tests/test_ray_node_loss.py``). An engine failure stops the job, as it does on one machine; the
records written are kept and a re-run resumes.

Ray is imported here only (``pip install 'extractor[ray]'``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from extractor.api import Extractor
from extractor.config import Settings
from extractor.engines import Engine
from extractor.engines.vllm import cuda_mask_threads
from extractor.errors import ExtractorError
from extractor.jobs.batch import (
    BatchInterruptedError,
    BatchSummary,
    RecordStats,
    error_record,
    extract_row,
    record_stats,
)
from extractor.jobs.progress import Progress
from extractor.jobs.rows import DEFAULT_MAX_CHARS, BadRow, Row, count_lines, input_rows, reads_documents
from extractor.options import ExtractOptions
from extractor.scale.shards import ShardedOutput, record_key

if TYPE_CHECKING:
    import pyarrow

T = TypeVar("T")
EngineFactory = Callable[[], Engine]
# Columns an actor returns per row: the record's identity and JSON text, and what it adds to the summary.
STAT_COLUMNS = ("ok", "kind", "attempts", "repaired", "prompt_tokens", "completion_tokens")
# When the actor's call that made the row began and ended (the actor's wall clock, time.time()).
CLOCK_COLUMNS = ("call_started", "call_finished")


@dataclass
class Window:
    """When the actors extracted: from the first call's start to the last call's end (wall clock).

    A batch's rate counts this window only, as ``extractor batch`` on one machine counts from its
    engine ready: the actors' start (an engine each, one after another on a shared GPU) is the
    summary's ``start_s``. The actors' clocks are their nodes' (one host's, or a cluster's in sync).
    """

    first: float | None = None
    last: float | None = None

    def add(self, started: list[float], finished: list[float]) -> None:
        if started:
            self.first = min(started) if self.first is None else min(self.first, *started)
        if finished:
            self.last = max(finished) if self.last is None else max(self.last, *finished)

    def split(self, began: float, ended: float) -> tuple[float, float]:
        """(start_s, elapsed_s) of a run from ``began`` to ``ended``: the whole run where no call came back."""
        if self.first is None or self.last is None or not began <= self.first <= self.last:
            return 0.0, ended - began
        return self.first - began, self.last - self.first


@dataclass(frozen=True)
class RayBatchConfig:
    """What to extract from where, and the actor pool that does it."""

    task: str
    inputs: tuple[Path, ...]
    output: Path  # a folder of part-NNNNN.jsonl shards
    address: str | None = None  # a Ray cluster ("auto", "ray://host:10001", "host:6379"); None: start or reuse one
    actors: int | None = None  # None: one per GPU of the cluster, else one
    cpus_per_actor: float = 1.0
    gpus_per_actor: float | None = None  # None: 1 where the cluster has GPUs, else 0
    concurrency: int = 64  # extractions in flight per actor
    batch_rows: int | None = None  # rows per actor call (None: concurrency); a killed actor's call is retried whole
    calls_per_actor: int = 2  # calls running at once on an actor: one fills the engine while the other ends
    shard_rows: int = 100_000
    text_field: str = "text"
    id_field: str = "id"
    max_chars: int = DEFAULT_MAX_CHARS
    options: ExtractOptions = field(default_factory=ExtractOptions)  # each row's (a line's reference_date first)

    @property
    def rows_per_call(self) -> int:
        return self.batch_rows or self.concurrency


def summary_path(config: RayBatchConfig) -> Path:
    """Where the summary of a distributed batch goes: ``OUT/summary.json``."""
    return config.output / "summary.json"


def run(
    config: RayBatchConfig,
    *,
    settings: Settings,
    progress: Progress | None = None,
    engine_factory: EngineFactory | None = None,
) -> BatchSummary:
    """Run (or resume) a batch on a Ray cluster; return the summary of the whole output folder.

    ``engine_factory`` builds each actor's engine (a test double); None: the engine the settings name.
    A Ray session already open in this process is used as it is; otherwise one is opened on
    ``config.address`` (None: a cluster named by ``RAY_ADDRESS``, else a local one) and closed at the end.

    Raises:
        ExtractorError: an unknown task, a missing input, an output folder in use, or a failure
            of the job (the records written are kept: run the same command to resume).

    """
    import ray

    _check(config, settings)
    total = sum(count_lines(path) for path in config.inputs)
    output = ShardedOutput(config.output, shard_rows=config.shard_rows)
    began = time.time()
    window = Window()
    owned = False
    try:
        if not ray.is_initialized():
            ray.init(address=config.address, runtime_env=_runtime_env(), log_to_driver=False, configure_logging=False)
            owned = True
        if progress is not None:
            progress.start(total=total, done=output.summary.rows, errors=output.summary.failed)
        refs = _ship_rows(config, output, progress)
        if refs:
            _extract(config, settings, engine_factory, refs, output, progress, window)
        output.summary.complete = True
    except KeyboardInterrupt:
        raise BatchInterruptedError(
            f"interrupted; the records written to {config.output} are kept: run the same command to resume"
        ) from None
    except Exception as error:  # a Ray failure, or an actor's (its engine's): the records so far stay written
        raise ExtractorError(
            f"the Ray job failed: {_first_line(error)}; the records written to "
            f"{config.output} are kept: run the same command to resume"
        ) from error
    finally:
        output.summary.start_s, output.summary.elapsed_s = window.split(began, time.time())
        output.flush()
        output.write_summary()
        output.close()
        if progress is not None:
            progress.finish()
        if owned:
            ray.shutdown()
    return output.summary


def _check(config: RayBatchConfig, settings: Settings) -> None:
    if not config.inputs:
        raise ExtractorError("no input file")
    for path in config.inputs:
        if not path.is_file() and not path.is_dir():
            raise ExtractorError(f"{path}: no such input file or folder")
    if config.concurrency < 1 or config.rows_per_call < 1 or config.calls_per_actor < 1:
        raise ExtractorError("--concurrency and the rows per call must be at least 1")
    if config.actors is not None and config.actors < 1:
        raise ExtractorError("--actors must be at least 1")
    Extractor(settings=settings, tasks=[config.task]).task(config.task)  # an unknown task fails before Ray starts


def _runtime_env() -> dict[str, Any]:
    """Workers import the extractor the driver imports (a checkout on PYTHONPATH included)."""
    path = os.environ.get("PYTHONPATH")
    return {"env_vars": {"PYTHONPATH": path}} if path else {}


def _first_line(error: BaseException) -> str:
    """What went wrong, in one line: an actor's extractor error where Ray's traceback text names one."""
    text = str(error)
    # Ray re-raises an actor's exception as its own, with the actor's traceback in the message only.
    raised = re.findall(r"^extractor\.errors\.(\w+): (.*)$", text, re.MULTILINE)
    if raised:
        return "{}: {}".format(*raised[-1])
    lines = text.strip().splitlines()
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"


def _rows(config: RayBatchConfig) -> Iterator[tuple[str, Row | BadRow]]:
    for path in config.inputs:  # a folder's documents are converted in the actor that reads each
        source = str(path)
        items = input_rows(path, text_field=config.text_field, id_field=config.id_field, max_chars=config.max_chars)
        yield from ((source, item) for item in items)


def _ship_rows(config: RayBatchConfig, output: ShardedOutput, progress: Progress | None) -> list[Any]:
    """Put the rows still to do into the object store, a block per actor call; write bad lines' records."""
    import pyarrow as pa
    import ray

    refs: list[Any] = []
    block: dict[str, list[Any]] = {"source": [], "line": [], "id": [], "text": [], "document": []}
    for source, item in _rows(config):
        kind = item.kind if isinstance(item, BadRow) else None
        if record_key(source, kind, item.id, item.line) in output.done:
            continue
        if isinstance(item, BadRow):
            written, failed = output.add({"source": source, **error_record(item, item.kind, item.message)})
            if progress is not None and written:
                progress.update(done=written, errors=failed)
            continue
        block["source"].append(source)
        block["line"].append(item.line)
        block["id"].append(json.dumps(item.id))  # a string or an integer: one Arrow column either way
        block["text"].append(item.text)
        block["document"].append(None if item.document is None else str(item.document))
        if len(block["line"]) >= config.rows_per_call:
            refs.append(ray.put(pa.table(block)))
            block = {name: [] for name in block}
    if block["line"]:
        refs.append(ray.put(pa.table(block)))
    return refs


def actor_settings(settings: Settings, gpus_per_actor: float) -> Settings:
    """An actor's settings: where actors share a GPU, each engine takes its share of it.

    ``gpus_per_actor`` below 1 scales the GPU memory the engine may take
    (``gpu_memory_utilization``, which vLLM reads as a share of the whole card: four engines
    asking 0.5 each would not start) and, where unset, the threads of its mask pool
    (``EXTRACTOR_MASK_THREADS``: a pool of the host's cores an engine by default, so four engines
    would put 64 mask threads on 16 cores) and its conversion processes
    (``EXTRACTOR_CONVERSION_PROCESSES``: four actors' 32 processes on 16 cores made a contract's
    conversion 3.8 s against 1.0 s for one actor on an H100 host).
    """
    if not 0.0 < gpus_per_actor < 1.0:
        return settings
    changes: dict[str, Any] = {"gpu_memory_utilization": settings.gpu_memory_utilization * gpus_per_actor}
    if settings.mask_threads is None:
        changes["mask_threads"] = max(1, int(cuda_mask_threads() * gpus_per_actor))
    if settings.conversion_processes is None and settings.conversion_workers:
        changes["conversion_processes"] = max(1, int(settings.conversion_workers * gpus_per_actor))
    return settings.with_(**changes)


def _pool_size(config: RayBatchConfig, gpus: float, gpus_per_actor: float) -> int:
    if config.actors is not None:
        return config.actors
    return max(1, int(gpus // gpus_per_actor)) if gpus and gpus_per_actor else 1


def _extract(
    config: RayBatchConfig,
    settings: Settings,
    engine_factory: EngineFactory | None,
    refs: list[Any],
    output: ShardedOutput,
    progress: Progress | None,
    window: Window,
) -> None:
    import ray
    import ray.data

    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call, unused-ignore]  # ray typed or not installed
    gpus = float(resources.get("GPU", 0))
    ray.data.DataContext.get_current().enable_progress_bars = False  # the batch's own progress line is enough
    gpus_per_actor = config.gpus_per_actor if config.gpus_per_actor is not None else (1.0 if gpus else 0.0)
    dataset = ray.data.from_arrow_refs(refs).map_batches(
        RowActor,
        batch_size=config.rows_per_call,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(
            size=_pool_size(config, gpus, gpus_per_actor),
            max_concurrent_calls_per_actor=config.calls_per_actor,
            enable_true_multi_threading=True,
        ),
        fn_constructor_kwargs={
            "settings": actor_settings(settings, gpus_per_actor),
            "config": config,
            "engine_factory": engine_factory,
        },
        num_cpus=config.cpus_per_actor,
        num_gpus=gpus_per_actor,
    )
    batch: Any
    for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
        columns = {name: batch.column(name).to_pylist() for name in ("key", "record", *STAT_COLUMNS, *CLOCK_COLUMNS)}
        window.add(columns["call_started"], columns["call_finished"])
        items = [
            (key, line, record_stats_of(columns, i))
            for i, (key, line) in enumerate(zip(columns["key"], columns["record"], strict=True))
        ]
        written, failed = output.add_lines(items)
        if progress is not None and written:
            progress.update(done=written, errors=failed)
    written, failed = output.flush()
    if progress is not None and written:
        progress.update(done=written, errors=failed)


def record_stats_of(columns: dict[str, list[Any]], index: int) -> RecordStats:
    """The stats of row ``index`` of an actor's answer."""
    return RecordStats(**{name: columns[name][index] for name in STAT_COLUMNS})


class RowActor:
    """One engine in a Ray actor: extracts a batch of rows per call, several calls at once.

    The engine lives on an event loop of its own thread, so the calls Ray runs in parallel
    threads (``calls_per_actor``) share it and keep it busy between batches.
    """

    def __init__(self, *, settings: Settings, config: RayBatchConfig, engine_factory: EngineFactory | None) -> None:
        self._config = config
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="extractor-engine-loop", daemon=True).start()
        engine = engine_factory() if engine_factory is not None else None
        self._extractor = Extractor(settings=settings, engine=engine, tasks=[config.task])
        self._slots: asyncio.Semaphore | None = None
        # a folder's documents convert here: the conversion workers start beside the engine
        self._wait(self._extractor.astart(documents=reads_documents(config.inputs)))

    def _wait(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    def __call__(self, batch: pyarrow.Table) -> dict[str, list[Any]]:
        started = time.time()
        rows = batch.to_pylist()
        records = self._wait(self._extract_all(rows))
        finished = time.time()
        out: dict[str, list[Any]] = {name: [] for name in ("key", "record", *STAT_COLUMNS)}
        out["call_started"], out["call_finished"] = [started] * len(rows), [finished] * len(rows)
        for row, record in zip(rows, records, strict=True):
            stats = record_stats(record)
            out["key"].append(record_key(row["source"], stats.kind or None, record["id"], record["line"]))
            out["record"].append(json.dumps({"source": row["source"], **record}, ensure_ascii=False))
            for name in STAT_COLUMNS:
                out[name].append(getattr(stats, name))
        return out

    async def _extract_all(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._config.concurrency)
        slots = self._slots

        async def one(row: dict[str, Any]) -> dict[str, Any]:
            async with slots:
                document = Path(row["document"]) if row.get("document") else None
                item = Row(line=int(row["line"]), id=json.loads(row["id"]), text=row["text"], document=document)
                return await extract_row(self._extractor, self._config, item)

        return list(await asyncio.gather(*(one(row) for row in rows)))
