"""Tasks and the catalog: discover ``schemas/`` + ``prompts/``, check each task at load.

A bad task is reported (file + JSON pointer) and left out; the other tasks keep working.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import jinja2
import jinja2.meta
import jsonschema
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator

from extractor import grounding, values
from extractor.catalog import limits, templating
from extractor.config import MAX_ATTEMPTS_LIMIT, GrammarBackend
from extractor.constraints import decoding, grounded_decoding, task_schema
from extractor.engines.base import Message
from extractor.errors import ConfigError, TaskError, UnknownTaskError
from extractor.examples.pool import Example, ExamplePool, PoolSettings, load_pool, summarize
from extractor.review import calibration
from extractor.review.calibration import Calibration
from extractor.schema import join, resolve, walk
from extractor.training.manifest import MANIFEST, AdapterError, check_task
from extractor.typed import TypedModel, model_for_schema
from extractor.values import ValueField

TASK_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")
PROMPT_SUFFIXES = (".j2", ".jinja", ".jinja2", ".md", ".txt")
SETTINGS_KEY = "x-extractor"

# The per-task settings block, checked like any other schema.
_SETTINGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 8192},
        "max_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT},
        "grounding": {"enum": ["strict", "flag", "off"]},
        "system": {"type": "string"},
        "allow_unenforced": {"type": "boolean"},
        "strict_enforcement": {"type": "boolean"},
        "grounded_decoding": {"type": "boolean"},
        # tesseract's languages for the PDF pages of this task's documents read by OCR (EXTRACTOR_OCR_LANGUAGES)
        "ocr_languages": {"type": "string", "pattern": "^[a-z]{3}(_[a-z]+)*(\\+[a-z]{3}(_[a-z]+)*)*$"},
        # each value's confidence from its tokens' logprobs (default: the global EXTRACTOR_CONFIDENCES)
        "confidences": {"type": "boolean"},
        # how typed values' evidence is read (extractor.values): dateparser's languages, day/month order
        "languages": {"type": "array", "items": {"type": "string", "minLength": 2}},
        "date_order": {"enum": ["DMY", "MDY", "YMD"]},
        # a LoRA adapter: a folder under the catalog root, false for none (default: adapters/<task>/ if there)
        "adapter": {"type": ["string", "boolean"], "minLength": 1},
        "adapter_examples": {"type": "boolean"},  # show worked examples to the adapter too (default: no)
        "examples_from_pool": {  # true/false, or how many and how chosen
            "type": ["boolean", "object"],
            "additionalProperties": False,
            "properties": {
                "k": {"type": "integer", "minimum": 0, "maximum": 16},
                "diverse": {"type": "boolean"},
                "hints": {"type": "boolean"},  # show the pool's labelled values found in the text
            },
        },
        "chunking": {  # true, or the sizes (object keywords apply to objects only: specific errors)
            "type": ["boolean", "object"],
            "additionalProperties": False,
            "properties": {
                "max_chars": {"type": "integer", "minimum": 100},
                "overlap": {"type": "integer", "minimum": 0},
                "by_field": {"type": "boolean"},  # each field from its own best passages (extractor.passages)
            },
        },
        "review": {  # send results less confident than `below` to the review queue
            "type": "object",
            "additionalProperties": False,
            "required": ["below"],
            "properties": {"below": {"type": "number", "minimum": 0, "maximum": 1}},
        },
        "examples": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["text", "output"],
                "additionalProperties": False,
                "properties": {"text": {"type": "string", "minLength": 1}, "output": {}},
            },
        },
    },
}
_SETTINGS_VALIDATOR = Draft202012Validator(_SETTINGS_SCHEMA)
_SAMPLE_TEXT = "Sample text used to check the template."


@dataclass(frozen=True)
class FieldInfo:
    """One top-level field as the prompt describes it."""

    name: str
    description: str
    type: str
    required: bool


@dataclass(frozen=True)
class ChunkSettings:
    """Long-document splitting (``x-extractor.chunking``); None sizes are derived from the model window."""

    max_chars: int | None = None
    overlap: int | None = None
    # Read each top-level field from the passages most about it, instead of merging whole answers.
    by_field: bool = False


@dataclass(frozen=True)
class ReviewSettings:
    """``x-extractor.review``: a result whose lowest value confidence is under ``below`` goes to the review queue."""

    below: float


@dataclass(frozen=True)
class TaskSettings:
    """Per-task settings from the schema's ``x-extractor`` block (None: use the global default)."""

    temperature: float | None = None
    max_tokens: int | None = None
    max_attempts: int | None = None
    grounding: Literal["strict", "flag", "off"] = "flag"
    system: str | None = None
    # A keyword the grammar cannot enforce is left out of decoding and checked after generation (a
    # load warning), unless ``strict_enforcement`` refuses the task for it; ``allow_unenforced``
    # (the older name) says the same the other way round when set.
    allow_unenforced: bool | None = None
    strict_enforcement: bool = False
    grounded_decoding: bool = False
    chunking: ChunkSettings | None = None
    # How examples are drawn from the task's pool (None: the fixed examples only).
    examples_from_pool: PoolSettings | None = field(default_factory=PoolSettings)
    adapter: str | bool = True
    adapter_examples: bool = False
    # Results sent to the review queue by their confidence (None: only those a request asks for).
    review: ReviewSettings | None = None
    # Ask vLLM for each token's logprob, what confidences are made of (None: the global setting). False
    # saves what vLLM charges for them (on an H200 `extractor batch` 0.84 -> 1.09 of raw vLLM).
    confidences: bool | None = None
    # Typed values' evidence (extractor.values): the languages it is in (empty: detected), day/month order.
    languages: tuple[str, ...] = ()
    date_order: Literal["DMY", "MDY", "YMD"] | None = None
    # tesseract's languages for the OCR'd pages of this task's documents (None: EXTRACTOR_OCR_LANGUAGES)
    ocr_languages: str | None = None

    @property
    def unenforced_allowed(self) -> bool:
        """Whether keywords decoding cannot enforce are checked after generation (else the task is refused)."""
        return self.allow_unenforced if self.allow_unenforced is not None else not self.strict_enforcement


@dataclass(frozen=True, eq=False)
class Task:
    """A loaded, checked task: schema + prompt template + settings + worked examples."""

    name: str
    schema: Mapping[str, Any]
    schema_path: Path
    prompt_path: Path
    template: jinja2.Template
    settings: TaskSettings
    examples: tuple[Example, ...]
    fields: tuple[FieldInfo, ...]
    validator: Validator
    ungrounded: frozenset[str]
    warnings: tuple[str, ...] = ()
    engine_schema: Mapping[str, Any] = field(default_factory=dict)
    typed: TypedModel | None = None
    # Labelled texts to draw worked examples from per request (``examples/<task>.jsonl``).
    pool: ExamplePool | None = None
    # The template renders only the instruction (it does not use ``text``): the instruction goes
    # in the system turn, identical for every request, and examples are compact demonstrations.
    instruction_only: bool = False
    # A LoRA adapter trained for this task (``extractor train``): its requests go through it.
    adapter: Path | None = None
    # A request's own chat (the OpenAI front's ad-hoc tasks): sent as given instead of the
    # template's rendering; a re-ask appends the previous answer and its problems.
    conversation: tuple[Message, ...] = ()
    # The schema as written (``schema`` is it in 2020-12 terms, as decoded), its draft, and the
    # property a non-object top level is wrapped in for decoding (None: not wrapped).
    source_schema: Mapping[str, Any] = field(default_factory=dict)
    draft: str = "2020-12"
    wrapped: str | None = None
    # A hash of the files the task was built from (set by ``extractor.catalog.reload``; empty otherwise).
    version: str = ""
    # The map from raw to calibrated confidence (``calibration/<task>.json``, ``extractor calibrate``).
    calibration: Calibration | None = None
    # Typed value fields by field path (extractor.values): the model answers their evidence, the
    # service reads the typed value from it; ``engine_schema`` is then the evidence schema.
    values: Mapping[str, ValueField] = field(default_factory=dict)
    # The schema the model answers in: ``schema`` with each typed value field as its evidence, a
    # string (``schema`` itself without value fields); ``engine_schema`` is it without ``x-*`` keys.
    answer_schema: Mapping[str, Any] = field(default_factory=dict)

    @property
    def uses_pool(self) -> bool:
        """Whether requests draw their worked examples from the pool."""
        settings = self.settings.examples_from_pool
        return self.pool is not None and len(self.pool) > 0 and settings is not None

    @property
    def examples_per_request(self) -> int:
        """How many worked examples each request shows (at most: a small pool may have fewer)."""
        settings = self.settings.examples_from_pool
        return settings.k if self.uses_pool and settings is not None else len(self.examples)

    @property
    def title(self) -> str:
        return str(self.schema.get("title") or self.name)

    @property
    def description(self) -> str:
        return str(self.schema.get("description") or "")

    def instruction(self, text: str, *, feedback: Sequence[str] = (), previous: str | None = None) -> str:
        """The task template rendered for one text (the instruction of :func:`extractor.catalog.prompting.render`)."""
        return self.template.render(
            text=text,
            fields=self.fields,
            task={"name": self.name, "title": self.title, "description": self.description},
            schema=templating.compact_json(self.engine_schema),
            feedback=list(feedback),
            previous=previous,
        ).strip()

    def fingerprint(self) -> str:
        """SHA-256 of what shapes the task's prompt and answer: prompt file, schema, system prompt.

        What an adapter's manifest records (:mod:`extractor.training.manifest`). The schema's
        ``x-extractor`` block is left out but for ``system`` and the pool's ``hints``: how many
        attempts, grounding or whether the adapter also sees examples do not change what the
        adapter learned.
        """
        h = hashlib.sha256(self.prompt_path.read_bytes())
        schema = {k: v for k, v in self.schema.items() if k != "x-extractor"}
        h.update(json.dumps(schema, sort_keys=True, ensure_ascii=False).encode())
        h.update((self.settings.system or "").encode())
        pool = self.settings.examples_from_pool
        if pool is not None and pool.hints:  # the adapter learned to read the pool's hints: it needs them
            h.update(b"\0hints")
        return h.hexdigest()


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
    checked = _check_all(where, source, name, backend)
    settings, examples, validator = checked.settings, checked.examples, checked.validator
    schema, ungrounded, as_written = checked.prepared.schema, checked.ungrounded, checked.as_written
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
    task = Task(
        name=name,
        schema=schema,
        schema_path=schema_path,
        prompt_path=prompt_path,
        template=template,
        settings=settings,
        examples=examples,
        fields=describe_fields(schema),
        validator=validator,
        ungrounded=ungrounded,
        warnings=tuple(warnings),
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
    _check_renders(task)
    if root is not None:
        task = _with_adapter(where, task, root)
        task = _with_calibration(task, root)
    return task


def calibration_path(root: Path, name: str) -> Path:
    """Where a task's calibration lives: ``calibration/<task>.json`` under the catalog root."""
    return root / "calibration" / f"{name}.json"


def _with_calibration(task: Task, root: Path) -> Task:
    path = calibration_path(root, task.name)
    if not path.is_file():
        return task
    limits.check_inside(path, root)
    try:
        return replace(task, calibration=calibration.load(path))
    except ConfigError as error:
        raise TaskError(str(path), "", str(error).removeprefix(f"{path}: ")) from None


@dataclass(frozen=True)
class _Checked:
    """What the schema-level load checks produce."""

    settings: TaskSettings
    examples: tuple[Example, ...]  # as decoded (wrapped when the top level is not an object)
    warnings: tuple[str, ...]
    typed: TypedModel | None
    validator: Validator
    ungrounded: frozenset[str]
    engine_schema: dict[str, Any]
    answer_schema: dict[str, Any]
    prepared: task_schema.TaskSchema
    as_written: tuple[Validator, frozenset[str]]  # the validator and ungrounded paths of unwrapped values
    values: dict[str, ValueField]


def _check_all(where: str, source: dict[str, Any], name: str, backend: GrammarBackend) -> _Checked:
    """Every load check of a schema: limits, draft, meta-schema, refs, settings, keywords, typing, examples, compile."""
    limits.check_schema(where, source)
    settings, examples = _read_settings(where, source)
    prepared = task_schema.prepare(where, source, backend=backend, allow_unenforced=settings.unenforced_allowed)
    schema = prepared.schema  # 2020-12, an object top level, only what decoding enforces
    _check_schema(where, schema)
    warnings = list(prepared.warnings)
    warnings += [f"{where}: {w}" for w in grounded_decoding.check(schema)]
    typed, typed_warnings = _build_typed(where, prepared.meaning or schema, name)
    warnings += typed_warnings
    ungrounded = grounding.ungrounded_paths(schema)
    typed_values = values.value_fields(schema)
    warnings += [f"{where}: {w}" for w in values.check_settings(schema, typed_values)]
    # Examples are written as the schema describes them (unwrapped) and shown as decoded; their
    # typed values are checked by the schema, not looked for verbatim (the text states them in words).
    as_written = task_schema.as_written(prepared, ungrounded | frozenset(typed_values))
    _check_examples(where, examples, *as_written)
    examples = task_schema.wrap_examples(prepared, examples)
    # Value fields are decoded as their evidence: the model copies the words, the service types them.
    answer_schema = values.evidence_schema(schema) if typed_values else schema
    engine_schema = decoding.engine_schema(answer_schema)
    warnings += limits.check_compiles(
        where, engine_schema, backend=backend, allow_unenforced=settings.unenforced_allowed
    )
    return _Checked(
        settings,
        examples,
        tuple(warnings),
        typed,
        prepared.validator,
        ungrounded,
        engine_schema,
        answer_schema,
        prepared,
        as_written,
        typed_values,
    )


_SCHEMA_ONLY_TEMPLATE = "Answer with one JSON object that follows this schema: {{ schema }}"


def task_from_schema(name: str, schema: dict[str, Any], *, where: str, backend: GrammarBackend = "guidance") -> Task:
    """A task built in memory from a schema alone (no files), under the same checks as a catalog task.

    Its prompt is a one-line instruction; a caller with its own chat sets ``conversation``
    (``dataclasses.replace``). Raises :class:`TaskError` naming ``where`` and the JSON pointer.
    """
    checked = _check_all(where, schema, name, backend)
    decoded = checked.prepared.schema
    task = Task(
        name=name,
        schema=decoded,
        schema_path=Path(where),
        prompt_path=Path(where),
        template=_JINJA.from_string(_SCHEMA_ONLY_TEMPLATE),
        settings=checked.settings,
        examples=checked.examples,
        fields=describe_fields(decoded),
        validator=checked.validator,
        ungrounded=checked.ungrounded,
        warnings=checked.warnings,
        engine_schema=checked.engine_schema,
        answer_schema=checked.answer_schema,
        typed=checked.typed,
        values=checked.values,
        instruction_only=True,
        source_schema=schema,
        draft=checked.prepared.draft.name,
        wrapped=checked.prepared.wrapped,
    )
    _check_renders(task)
    return task


def _with_adapter(where: str, task: Task, root: Path) -> Task:
    """The task with its adapter, checked against the task as it is now (:class:`TaskError` if stale)."""
    setting = task.settings.adapter
    if setting is False:
        return task
    folder = root / setting if isinstance(setting, str) else root / "adapters" / task.name
    if not (folder / MANIFEST).is_file():
        if isinstance(setting, str):
            raise TaskError(where, f"#/{SETTINGS_KEY}/adapter", f"{folder}: no adapter there (no {MANIFEST})")
        return task
    try:
        check_task(folder, task)
    except AdapterError as error:
        raise TaskError(where, f"#/{SETTINGS_KEY}/adapter", str(error)) from None
    return replace(task, adapter=folder)


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


def _check_schema(where: str, schema: dict[str, Any]) -> None:
    # ``schema`` is already checked by its own draft and translated (extractor.constraints.task_schema).
    for pointer, sub in walk(schema):
        for key in ("$ref", "$dynamicRef"):
            ref = sub.get(key)
            if ref is None:
                continue
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise TaskError(
                    where,
                    f"{pointer}/{key}",
                    f"{key} {ref!r} points outside this schema; only local refs ('#/$defs/...') are allowed",
                )
            if not isinstance(resolve(schema, ref), (Mapping, bool)):
                raise TaskError(where, f"{pointer}/{key}", f"{key} {ref!r} does not resolve to a schema in this file")
        if "$id" in sub and pointer != "#":
            raise TaskError(where, f"{pointer}/$id", "nested $id is not allowed (it changes how refs resolve)")
    _check_ref_cycles(where, schema)


def _check_ref_cycles(where: str, schema: Mapping[str, Any]) -> None:
    """Reject refs that loop back without going into the instance (validation would recurse forever)."""
    pointers = {id(sub): pointer for pointer, sub in walk(schema)}
    done: set[int] = set()

    def in_place(sub: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
        # Subschemas applied to the same instance as ``sub``, each with its keyword.
        for key in ("not", "if", "then", "else"):
            yield key, sub.get(key)
        for key in ("allOf", "anyOf", "oneOf"):
            for branch in sub.get(key) or []:
                yield key, branch
        for branch in (sub.get("dependentSchemas") or {}).values():
            yield "dependentSchemas", branch
        for key in ("$ref", "$dynamicRef"):
            if isinstance(sub.get(key), str):
                yield key, resolve(schema, sub[key])

    def visit(sub: Mapping[str, Any], stack: list[int]) -> None:
        if id(sub) in done:
            return
        stack.append(id(sub))
        for key, child in in_place(sub):
            if not isinstance(child, Mapping):
                continue
            if id(child) in stack:
                raise TaskError(
                    where,
                    f"{pointers.get(id(sub), '#')}/{key}",
                    f"{key} loops back to {pointers.get(id(child), '#')} without going into a property or item; "
                    "validation would never end",
                )
            visit(child, stack)
        stack.pop()
        done.add(id(sub))

    for _, sub in walk(schema):
        visit(sub, [])


def _read_settings(where: str, schema: Mapping[str, Any]) -> tuple[TaskSettings, tuple[Example, ...]]:
    raw = schema.get(SETTINGS_KEY, {})
    error = next(iter(sorted(_SETTINGS_VALIDATOR.iter_errors(raw), key=lambda e: list(e.path))), None)
    if error is not None:
        raise TaskError(where, join([SETTINGS_KEY, *error.path], "#"), error.message)
    examples = tuple(Example(text=e["text"], output=e["output"]) for e in raw.get("examples", []))
    values = {k: v for k, v in raw.items() if k not in ("examples", "chunking", "examples_from_pool", "review")}
    if "languages" in raw:
        values["languages"] = tuple(raw["languages"])
    if "review" in raw:
        values["review"] = ReviewSettings(below=float(raw["review"]["below"]))
    from_pool = raw.get("examples_from_pool", True)
    values["examples_from_pool"] = (
        PoolSettings(**from_pool) if isinstance(from_pool, dict) else (PoolSettings() if from_pool else None)
    )
    chunking = raw.get("chunking", False)
    if isinstance(chunking, dict):
        size, overlap = chunking.get("max_chars"), chunking.get("overlap")
        by_field = bool(chunking.get("by_field", False))
        if size is not None and overlap is not None and overlap * 2 > size:
            raise TaskError(where, f"#/{SETTINGS_KEY}/chunking/overlap", "overlap must be at most half of max_chars")
        values["chunking"] = ChunkSettings(max_chars=size, overlap=overlap, by_field=by_field)
    elif chunking:
        values["chunking"] = ChunkSettings()
    if raw.get("confidences") is False and "review" in raw:
        raise TaskError(
            where,
            f"#/{SETTINGS_KEY}/confidences",
            "review sends results by their confidence: keep confidences on, or drop the review block",
        )
    if raw.get("allow_unenforced") is not None and raw.get("strict_enforcement") is not None:
        raise TaskError(
            where, f"#/{SETTINGS_KEY}/strict_enforcement", "set strict_enforcement or allow_unenforced, not both"
        )
    settings = TaskSettings(**values)
    return settings, examples


def _build_typed(where: str, schema: Mapping[str, Any], name: str) -> tuple[TypedModel | None, list[str]]:
    """The pydantic model behind ``result.value``; constructs it types loosely become load warnings."""
    try:
        typed = model_for_schema(schema, name=name)
    except Exception as error:  # noqa: BLE001 - a typing gap must never cost the task itself
        return None, [f"{where}: cannot build the typed model ({error}); result.value will be None"]
    return typed, [f"{where}: {w} (in result.value)" for w in typed.warnings]


def _check_examples(where: str, examples: Sequence[Example], validator: Validator, ungrounded: frozenset[str]) -> None:
    for i, example in enumerate(examples):
        base = f"#/{SETTINGS_KEY}/examples/{i}/output"
        error = jsonschema.exceptions.best_match(validator.iter_errors(example.output))
        if error is not None:
            raise TaskError(where, base + join(error.path), f"example does not match the schema: {error.message}")
        for span in grounding.locate(example.text, example.output, skip=ungrounded):
            if span.status == "missing":
                raise TaskError(where, base + span.path, f"example value {span.value!r} does not occur in its text")


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


def describe_fields(schema: Mapping[str, Any]) -> tuple[FieldInfo, ...]:
    """The top-level fields with a short type label each, for the prompt."""
    required = set(schema.get("required") or [])
    return tuple(
        FieldInfo(
            name=name,
            description=str(sub.get("description") or sub.get("title") or ""),
            type=type_label(schema, sub),
            required=name in required,
        )
        for name, sub in (schema.get("properties") or {}).items()
        if isinstance(sub, Mapping)
    )


def type_label(root: Mapping[str, Any], sub: Mapping[str, Any], depth: int = 0) -> str:
    """A human label such as ``string or null`` or ``one of "eq", "lt"``."""
    if depth > 8:
        return "value"
    if isinstance(sub.get("$ref"), str):
        target = resolve(root, sub["$ref"])
        return type_label(root, target, depth + 1) if isinstance(target, Mapping) else "value"
    if "const" in sub:
        return f"exactly {json.dumps(sub['const'], ensure_ascii=False)}"
    if "enum" in sub:
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in sub["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(sub.get(key), list):
            return " or ".join(type_label(root, b, depth + 1) for b in sub[key] if isinstance(b, Mapping))
    kind = sub.get("type", "value")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if kind == "array":
        items = sub.get("items")
        label = "list of " + (type_label(root, items, depth + 1) if isinstance(items, Mapping) else "values")
        return label + (f" (at most {sub['maxItems']})" if "maxItems" in sub else "")
    return str(kind)
