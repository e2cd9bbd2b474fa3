"""Catalog reload: a whole new catalog built beside the one serving, each task stamped with a version.

A reload never edits the catalog that serves: it builds another one and the caller swaps the
reference in one step, so a request sees one version of a task (its schema, template and pool
together) from start to end. A task whose files did not change keeps its loaded object (a reload
costs what the changed tasks cost); a task that fails its checks after an edit keeps its **last
good version**, marked stale beside the new error; a deleted task is gone.

A task's version is a hash of the files it came from (schema, prompt template, example pool,
adapter manifest). Files are hashed before and after a task loads; when they differ (an edit
landed mid-load), the task is loaded again, so a version never labels another version's content.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from extractor.catalog.tasks import PROMPT_SUFFIXES, Catalog, Task, calibration_path, load_task
from extractor.catalog.tuned import tuned_path
from extractor.config import GrammarBackend
from extractor.errors import TaskError

VERSION_CHARS = 12
_MANIFEST = "extractor-adapter.json"
_TRIES = 3


@dataclass(frozen=True)
class ReloadReport:
    """What one reload changed, for ``POST /tasks/reload``, the log and the metrics."""

    added: tuple[str, ...]
    changed: tuple[str, ...]
    removed: tuple[str, ...]
    stale: tuple[str, ...]
    errors: int
    seconds: float

    @property
    def failed(self) -> bool:
        """Some task failed its load checks (it is stale, or left out when it never loaded)."""
        return self.errors > 0


def task_files(root: Path, name: str, adapter: Path | None = None, pools: Path | None = None) -> list[Path]:
    """The files a task is built from, whether or not each exists now (``pools``: the reviewers' pool's folder)."""
    files = [root / "schemas" / f"{name}.json"]
    files += [root / "prompts" / f"{name}{suffix}" for suffix in PROMPT_SUFFIXES]
    files.append(root / "examples" / f"{name}.jsonl")
    files.append((adapter or root / "adapters" / name) / _MANIFEST)
    files.append(calibration_path(root, name))  # `extractor calibrate`'s map
    files.append(tuned_path(root, name))  # `extractor tune`'s settings
    if pools is not None:
        files.append(pools / f"{name}.jsonl")
    return files


def fingerprint(root: Path, name: str, adapter: Path | None = None, pools: Path | None = None) -> str:
    """A hash of the task's files as they are on disk now (a missing file counts as absent)."""
    digest = hashlib.sha256()
    for path in task_files(root, name, adapter, pools):
        try:
            content = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
        except OSError as error:  # unreadable: hashed as such, the load reports it
            content = f"unreadable: {error}".encode()
        where = path.relative_to(root).as_posix() if path.is_relative_to(root) else f"pools/{path.name}"
        digest.update(f"{where}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()[:VERSION_CHARS]


def _load_versioned(path: Path, root: Path, backend: GrammarBackend, pools: Path | None) -> Task:
    """One task, stamped with the version of exactly the files it was built from."""
    name = path.stem
    for _ in range(_TRIES):
        before = fingerprint(root, name, pools=pools)
        task = load_task(path, root / "prompts", backend=backend, example_dir=root / "examples", root=root, pools=pools)
        adapter = task.adapter if task.adapter is not None and task.adapter != root / "adapters" / name else None
        if fingerprint(root, name, pools=pools) == before:
            return replace(task, version=fingerprint(root, name, adapter, pools) if adapter else before)
    raise TaskError(str(path), "", "the task's files kept changing while it loaded; save them and reload")


def load_catalog(root: Path, *, backend: GrammarBackend = "guidance", pools: Path | None = None) -> Catalog:
    """:meth:`Catalog.load` with every task stamped with its version."""
    catalog, _ = rebuild(None, root=root, backend=backend, pools=pools)
    return catalog


def rebuild(
    previous: Catalog | None,
    *,
    root: Path | None = None,
    backend: GrammarBackend = "guidance",
    pools: Path | None = None,
) -> tuple[Catalog, ReloadReport]:
    """A new catalog from the files under ``root`` (default: ``previous.root``), and what changed.

    ``previous`` is only read: tasks whose files are unchanged are reused, and a task that now
    fails its checks keeps its previous good version (listed in ``stale`` with the error).
    ``pools``: the reviewers' pools (default: ``previous.pools``).
    """
    started = time.perf_counter()
    root = root if root is not None else previous.root if previous is not None else Path()
    pools = pools if pools is not None else previous.pools if previous is not None else None
    schema_dir = root / "schemas"
    catalog = Catalog(root=root, pools=pools)
    old: Mapping[str, Task] = previous.tasks if previous is not None else {}
    if not schema_dir.is_dir():
        error = TaskError(str(schema_dir), "", "no schemas/ folder here (see --tasks-dir)")
        catalog.errors.append(error)
        # The folder itself gone (a checkout in progress, a bad mount): every task keeps serving, stale.
        catalog.tasks.update(old)
        catalog.stale.update(dict.fromkeys(old, error))
    paths = sorted(schema_dir.glob("*.json")) if schema_dir.is_dir() else []
    added, changed = [], []
    for path in paths:
        name = path.stem
        kept = old.get(name)
        if kept is not None and previous is not None and name not in previous.stale:
            adapter = kept.adapter if kept.adapter != root / "adapters" / name else None
            if kept.version and fingerprint(root, name, adapter, pools) == kept.version:
                catalog.tasks[name] = kept
                continue
        try:
            task = _load_versioned(path, root, backend, pools)
        except TaskError as error:
            catalog.errors.append(error)
            if kept is not None:  # the last good version keeps serving
                catalog.tasks[name] = kept
                catalog.stale[name] = error
            continue
        catalog.tasks[name] = task
        if kept is None:
            added.append(name)
        elif kept.version != task.version:
            changed.append(name)
    report = ReloadReport(
        added=tuple(added),
        changed=tuple(changed),
        removed=tuple(sorted(set(old) - set(catalog.tasks))),
        stale=tuple(sorted(catalog.stale)),
        errors=len(catalog.errors),
        seconds=time.perf_counter() - started,
    )
    return catalog, report
