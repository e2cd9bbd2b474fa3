"""The service's catalog reloads: on file changes (watchfiles), on ``POST /tasks/reload`` and on SIGHUP.

Each reload builds a whole new catalog in a worker thread (requests keep being served meanwhile)
and swaps the extractor's reference in one assignment on the event loop. Reloads run one at a
time; the engine is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import watchfiles
from prometheus_client import Counter, Gauge, Histogram

from extractor.api import Extractor
from extractor.catalog.reload import ReloadReport, rebuild
from extractor.server.metrics import Metrics

log = logging.getLogger("extractor.server")
WATCHED = ("schemas", "prompts", "examples", "adapters", "calibration")
# watchfiles yields once no change came for STEP_MS (at most DEBOUNCE_MS after the first one):
# a save touching the schema and the template is one reload.
STEP_MS = 100
DEBOUNCE_MS = 1000


class CatalogReloader:
    """Reloads the extractor's catalog and counts the reloads in the service's metrics."""

    def __init__(self, extractor: Extractor, metrics: Metrics) -> None:
        self.extractor = extractor
        self.generation = 0
        self._lock = asyncio.Lock()
        self._watch: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._sighup = False
        # Called after each reload, in order (the MCP server tells its clients the tools changed).
        self.listeners: list[Callable[[ReloadReport], Awaitable[None]]] = []
        r = metrics.registry
        self._reloads = Counter(
            "extractor_catalog_reloads",
            "catalog reloads by trigger (watch, http, sighup) and outcome (ok; errors: some task failed its checks)",
            ["trigger", "outcome"],
            registry=r,
        )
        self._failures = Counter(
            "extractor_catalog_task_failures", "tasks that failed their load checks on a reload", registry=r
        )
        self._seconds = Histogram(
            "extractor_catalog_reload_seconds",
            "time to build a new catalog",
            buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        Gauge("extractor_catalog_tasks", "tasks serving", registry=r).set_function(
            lambda: len(self.extractor.catalog.tasks)
        )
        Gauge("extractor_catalog_stale_tasks", "tasks serving their last good version", registry=r).set_function(
            lambda: len(self.extractor.catalog.stale)
        )

    async def reload(self, trigger: str) -> ReloadReport:
        """Build a new catalog from the files and swap it in; one reload at a time."""
        async with self._lock:
            settings = self.extractor.settings
            previous = self.extractor.catalog
            catalog, report = await asyncio.to_thread(
                rebuild, previous, root=settings.tasks_dir, backend=settings.grammar_backend, pools=settings.pools_dir
            )
            self.extractor.catalog = catalog  # the swap: requests read this reference once, at their start
            self.generation += 1
        self._reloads.labels(trigger, "errors" if report.failed else "ok").inc()
        before = {str(e) for e in previous.errors}
        new_failures = [e for e in catalog.errors if str(e) not in before]
        if new_failures:
            self._failures.inc(len(new_failures))
        self._seconds.observe(report.seconds)
        log.info(
            "catalog reloaded (%s) in %.0f ms: added %s, changed %s, removed %s, stale %s, %d error(s)",
            trigger,
            report.seconds * 1000,
            list(report.added),
            list(report.changed),
            list(report.removed),
            list(report.stale),
            report.errors,
        )
        for error in new_failures:
            log.warning("task left out or stale: %s", error)
        for listener in self.listeners:
            try:
                await listener(report)
            except Exception:  # a listener's bug must not fail the reload, which is done
                log.exception("a reload listener failed")
        return report

    def start(self, *, watch: bool) -> None:
        """SIGHUP reloads (where the loop can take signals); with ``watch``, file changes do too."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError, AttributeError):
            loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
            self._sighup = True
        if watch:
            self._stop.clear()
            self._watch = asyncio.create_task(self._watch_files())

    def _on_sighup(self) -> None:
        task = asyncio.get_running_loop().create_task(self.reload("sighup"))
        task.add_done_callback(_log_failure)

    async def stop(self) -> None:
        """Stop watching and give SIGHUP back."""
        if self._sighup:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            self._sighup = False
        if self._watch is not None:
            self._stop.set()
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None

    def watched(self) -> list[Path]:
        """The catalog folders that exist, and the reviewers' pools (a folder created later is seen by a reload)."""
        settings = self.extractor.settings
        folders = [settings.tasks_dir / name for name in WATCHED] + [settings.pools_dir]
        return [folder for folder in folders if folder.is_dir()]

    async def _watch_files(self) -> None:
        folders = self.watched()
        if not folders:
            root = self.extractor.settings.tasks_dir
            log.warning("no catalog folder to watch under %s; POST /tasks/reload reloads", root)
            return
        log.info("watching %s for task changes", ", ".join(str(f) for f in folders))
        try:
            async for _ in watchfiles.awatch(
                *folders, step=STEP_MS, debounce=DEBOUNCE_MS, stop_event=self._stop, recursive=True
            ):
                try:
                    await self.reload("watch")
                except Exception:  # a reload bug must not stop the watching
                    log.exception("catalog reload failed")
        except OSError as error:  # no inotify, too many watches: reloads still come by HTTP and SIGHUP
            log.warning("cannot watch the catalog (%s); use POST /tasks/reload or SIGHUP", error)


def _log_failure(task: asyncio.Task[ReloadReport]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("catalog reload failed: %s", task.exception())
