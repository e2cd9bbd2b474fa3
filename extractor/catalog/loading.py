"""Loading the catalog: discover ``schemas/`` + ``prompts/``, check each task, attach what lies beside it.

A bad task is reported (file + JSON pointer) and left out; the other tasks keep working. Beside
each task the loader finds its example pool, its adapter (``adapters/<task>/``, checked against
the task by its manifest: :mod:`extractor.adapters.manifest`) and its calibration
(``calibration/<task>.json``: :mod:`extractor.catalog.calibration`), and attaches them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta

from extractor.adapters.manifest import MANIFEST, AdapterError, by_field, check_task
from extractor.catalog import calibration, limits, templating, tuned
from extractor.catalog.checks import Checked, check_all
from extractor.catalog.settings import SETTINGS_KEY
from extractor.catalog.task import Task, describe_fields
from extractor.catalog.tuned import READING
from extractor.config import GrammarBackend
from extractor.constraints import task_schema
from extractor.errors import ConfigError, TaskError, UnknownTaskError
from extractor.examples import reading
from extractor.examples.pool import ExamplePool, load_pool, summarize

TASK_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")
PROMPT_SUFFIXES = (".j2", ".jinja", ".jinja2", ".md", ".txt")
_SAMPLE_TEXT = "Sample text used to check the template."


@dataclass
class Catalog:
    """The tasks found under a catalog root, and the errors of those left out."""

    root: Path
    tasks: dict[str, Task] = field(default_factory=dict)
    errors: list[TaskError] = field(default_factory=list)
    # Tasks serving their last good version after an edit that failed its checks (see extractor.catalog.reload).
    stale: dict[str, TaskError] = field(default_factory=dict)
    # The reviewers' pools (``<task>.jsonl``, outside the catalog: Settings.pools_dir), merged after each task's.
    pools: Path | None = None

    @classmethod
    def load(cls, root: Path, *, backend: GrammarBackend = "guidance", pools: Path | None = None) -> Catalog:
        """Load every ``schemas/<task>.json`` with its ``prompts/<task>.*`` under ``root`` (pools: see ``pools``)."""
        catalog = cls(root=root, pools=pools)
        schema_dir = root / "schemas"
        if not schema_dir.is_dir():
            catalog.errors.append(TaskError(str(schema_dir), "", "no schemas/ folder here (see --tasks-dir)"))
            return catalog
        for path in sorted(schema_dir.glob("*.json")):
            try:
                task = load_task(
                    path, root / "prompts", backend=backend, example_dir=root / "examples", root=root, pools=pools
                )
            except TaskError as error:
                catalog.errors.append(error)
            else:
                catalog.tasks[task.name] = task
        return catalog

    def get(self, name: str) -> Task:
        """The task called ``name``; unknown names raise :class:`UnknownTaskError`."""
        try:
            return self.tasks[name]
        except (KeyError, TypeError):
            raise UnknownTaskError(str(name), sorted(self.tasks)) from None

    def names(self) -> list[str]:
        return sorted(self.tasks)


def load_task(
    schema_path: Path,
    prompt_dir: Path,
    *,
    backend: GrammarBackend = "guidance",
    example_dir: Path | None = None,
    root: Path | None = None,
    pools: Path | None = None,
) -> Task:
    """Load and check one task; raise :class:`TaskError` naming the file and pointer.

    ``example_dir`` holds the optional pool ``<task>.jsonl``; its bad lines become warnings.
    ``pools`` holds the reviewers' ``<task>.jsonl`` (under the home), merged after it, checked alike.
    ``root`` (the catalog's) holds adapters: ``adapters/<task>/`` or the ``adapter`` setting's folder.
    """
    name = schema_path.stem
    where = str(schema_path)
    if not TASK_NAME.match(name):
        raise TaskError(where, "", f"task name {name!r} must match {TASK_NAME.pattern}; rename the file")
    catalog_root = root if root is not None else schema_path.parent.parent
    limits.check_file(schema_path, catalog_root)
    source = _read_schema(schema_path)
    layers = _tuned_layer(catalog_root, name) if root is not None else None
    checked = check_all(where, source, name, backend, layers=layers)
    as_written = checked.as_written
    warnings = list(checked.warnings)
    prompt_path = _find_prompt(prompt_dir, name)
    limits.check_file(prompt_path, catalog_root)
    template, instruction_only = _compile_template(prompt_path)
    pool = None
    pool_path = example_dir / f"{name}.jsonl" if example_dir is not None else None
    reviewed = pools / f"{name}.jsonl" if pools is not None else None
    if pool_path is not None and not pool_path.is_file() and reviewed is not None and reviewed.is_file():
        pool_path, reviewed = reviewed, None  # no shipped pool: the reviewers' is the whole pool
    elif pool_path is not None and pool_path.is_file():
        limits.check_inside(pool_path, catalog_root)
    else:
        pool_path = None
    if pool_path is not None:
        also = (reviewed,) if reviewed is not None else ()
        pool = load_pool(pool_path, validator=as_written[0], ungrounded=as_written[1], also=also)
        pool = replace(pool, examples=task_schema.wrap_examples(checked.prepared, pool.examples))
        warnings += [f"{p} (line left out)" for p in summarize(pool.problems)]
        if not len(pool):
            warnings.append(f"{pool_path}: no usable line; the fixed examples are used")
    task = _task(
        name,
        checked,
        source,
        schema_path=schema_path,
        prompt_path=prompt_path,
        template=template,
        instruction_only=instruction_only,
        warnings=tuple(warnings),
        pool=pool,
    )
    task = _with_reading(task, written=source, tuned=layers)
    _check_renders(task)
    if root is not None:
        task = _with_adapter(where, task, root)
        task = _with_calibration(task, root)
    return task


_SCHEMA_ONLY_TEMPLATE = "Answer with one JSON object that follows this schema: {{ schema }}"


def task_from_schema(name: str, schema: dict[str, Any], *, where: str, backend: GrammarBackend = "guidance") -> Task:
    """A task built in memory from a schema alone (no files), under the same checks as a catalog task.

    Its prompt is a one-line instruction; a caller with its own chat sets ``conversation``
    (``dataclasses.replace``). Raises :class:`TaskError` naming ``where`` and the JSON pointer.
    """
    checked = check_all(where, schema, name, backend)
    task = _task(
        name,
        checked,
        schema,
        schema_path=Path(where),
        prompt_path=Path(where),
        template=_JINJA.from_string(_SCHEMA_ONLY_TEMPLATE),
        instruction_only=True,
        warnings=tuple(checked.warnings),
    )
    _check_renders(task)
    return task


def _task(
    name: str,
    checked: Checked,
    source: dict[str, Any],
    *,
    schema_path: Path,
    prompt_path: Path,
    template: jinja2.Template,
    instruction_only: bool,
    warnings: tuple[str, ...],
    pool: ExamplePool | None = None,
) -> Task:
    """The :class:`Task` of a checked schema (``source``: as written) and its prompt."""
    schema = checked.prepared.schema
    return Task(
        name=name,
        schema=schema,
        schema_path=schema_path,
        prompt_path=prompt_path,
        template=template,
        settings=checked.settings,
        examples=checked.examples,
        fields=describe_fields(schema),
        validator=checked.validator,
        ungrounded=checked.ungrounded,
        warnings=warnings,
        engine_schema=checked.engine_schema,
        answer_schema=checked.answer_schema,
        typed=checked.typed,
        values=checked.values,
        pool=pool,
        instruction_only=instruction_only,
        source_schema=source,
        draft=checked.prepared.draft.name,
        wrapped=checked.prepared.wrapped,
    )


def _with_adapter(where: str, task: Task, root: Path) -> Task:
    """The task with its adapter, checked against the task as it is now (:class:`TaskError` if stale)."""
    setting = task.settings.adapter
    if setting is False:
        return task
    folder = root / setting if isinstance(setting, str) else root / "adapters" / task.name
    if task.settings.model is not None and (folder / MANIFEST).is_file():  # trained for another model's weights
        note = f"{where}: served by {task.settings.model} (x-extractor.model): its adapter {folder} is not used"
        return replace(task, warnings=(*task.warnings, note))
    if not (folder / MANIFEST).is_file():
        if isinstance(setting, str):
            raise TaskError(where, f"#/{SETTINGS_KEY}/adapter", f"{folder}: no adapter there (no {MANIFEST})")
        return task
    try:
        manifest = check_task(folder, task)
    except AdapterError as error:
        raise TaskError(where, f"#/{SETTINGS_KEY}/adapter", str(error)) from None
    return replace(task, adapter=folder, adapter_by_field=by_field(manifest, task.name))


def _with_reading(task: Task, *, written: Mapping[str, Any], tuned: tuple[dict[str, Any], str] | None) -> Task:
    """A task whose pool came from labelled documents: long documents read field by field, as the pool taught.

    Each field's learned options (:func:`extractor.examples.reading.learn`), under the variant the
    tuned file chose for it (``extractor tune --documents``), sit under what the analyst wrote on
    it; reading by field is on unless the schema or the tuned file says otherwise.
    """
    if task.pool is None or not len(task.pool):
        return task
    learned = reading.of_schema(task.pool.examples, task.schema)
    if learned is None:
        return task
    chosen = (tuned[0] if tuned else {}).get(READING) or {}  # per field, the variant tune measured best
    learned = {f: reading.variant(chosen[f], o) if f in chosen else o for f, o in learned.items()}
    chunking = task.settings.chunking
    said = [layer.get(SETTINGS_KEY, layer).get("chunking") for layer in (written, tuned[0] if tuned else {})]
    if chunking is not None and not any(isinstance(c, Mapping) and "by_field" in c for c in said):
        chunking = replace(chunking, by_field=True, max_chars=chunking.max_chars or reading.PASSAGE_CHARS)
    return replace(task, reading=learned, settings=replace(task.settings, chunking=chunking))


def _tuned_layer(root: Path, name: str) -> tuple[dict[str, Any], str]:
    """The tuned settings of a catalog task (``tuned/<task>.json``; none: empty) and where they come from."""
    path = tuned.tuned_path(root, name)
    if not path.is_file():
        return {}, str(path)
    limits.check_inside(path, root)
    try:
        return tuned.read(path), str(path)
    except ConfigError as error:
        raise TaskError(str(path), "", str(error).removeprefix(f"{path}: ")) from None


def _with_calibration(task: Task, root: Path) -> Task:
    """``task`` with its calibration from under the catalog ``root``, when one was fitted."""
    path = calibration.calibration_path(root, task.name)
    if not path.is_file():
        return task
    limits.check_inside(path, root)
    try:
        return replace(task, calibration=calibration.load(path))
    except ConfigError as error:
        raise TaskError(str(path), "", str(error).removeprefix(f"{path}: ")) from None


def _read_schema(path: Path) -> dict[str, Any]:
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise TaskError(str(path), "", f"not UTF-8: {error}") from None
    except json.JSONDecodeError as error:
        raise TaskError(
            str(path), "", f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except OSError as error:
        raise TaskError(str(path), "", f"cannot read the file: {error}") from None
    if not isinstance(schema, dict):
        raise TaskError(str(path), "#", "a task schema must be a JSON object")
    return schema


def _find_prompt(prompt_dir: Path, name: str) -> Path:
    found = [prompt_dir / f"{name}{suffix}" for suffix in PROMPT_SUFFIXES if (prompt_dir / f"{name}{suffix}").is_file()]
    if not found:
        raise TaskError(str(prompt_dir / f"{name}.j2"), "", "no prompt template for this task (prompts/<task>.j2)")
    if len(found) > 1:
        raise TaskError(str(found[1]), "", f"more than one prompt template for {name!r}: keep one")
    return found[0]


_JINJA = templating.environment()  # sandboxed, and bounded in time, output and memory


def _compile_template(path: Path) -> tuple[jinja2.Template, bool]:
    """The compiled template, and whether it renders the instruction alone (never uses ``text``)."""
    try:
        source = path.read_text(encoding="utf-8")
        variables = jinja2.meta.find_undeclared_variables(_JINJA.parse(source))
        return _JINJA.from_string(source), "text" not in variables
    except UnicodeDecodeError as error:
        raise TaskError(str(path), "", f"not UTF-8: {error}") from None
    except OSError as error:
        raise TaskError(str(path), "", f"cannot read the file: {error}") from None
    except jinja2.TemplateSyntaxError as error:
        raise TaskError(str(path), f"line {error.lineno}", f"template syntax error: {error.message}") from None


def _check_renders(task: Task) -> None:
    for feedback in ((), ("example error",)):
        try:
            task.instruction(_SAMPLE_TEXT, feedback=feedback, previous="{}" if feedback else None)
        except Exception as error:  # noqa: BLE001 - any template failure is the analyst's to fix
            raise TaskError(str(task.prompt_path), "", f"template does not render: {error}") from None
