"""render -> generate -> parse/repair/validate/ground -> re-ask, at most three attempts."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from extractor import grounding
from extractor.config import MAX_ATTEMPTS_LIMIT, Settings
from extractor.engines.base import Engine, GenerationRequest
from extractor.errors import ExtractionFailed, InputError, TextTooLongError
from extractor.grounding import GroundingPolicy, Span
from extractor.parsing import parse_and_validate, validate
from extractor.prompting import render
from extractor.results import Attempt, ExtractionResult, SpanModel, Usage
from extractor.tasks import Task
from extractor.typed import TypedModel, build_value


@dataclass(frozen=True)
class Options:
    """Per-request overrides; None falls back to the task's setting, then the global one."""

    temperature: float | None = None
    max_tokens: int | None = None
    max_attempts: int | None = None
    grounding: GroundingPolicy | None = None


@dataclass(frozen=True)
class Plan:
    """The effective settings of one extraction."""

    temperature: float
    max_tokens: int
    max_attempts: int
    grounding: GroundingPolicy


def plan(task: Task, options: Options, settings: Settings) -> Plan:
    """Resolve request option > task setting > global setting."""
    attempts = options.max_attempts or task.settings.max_attempts or settings.max_attempts
    if not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
        raise InputError(f"max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}, got {attempts}")
    temperature = _first(options.temperature, task.settings.temperature, settings.temperature)
    if not 0.0 <= temperature <= 2.0:
        raise InputError(f"temperature must be between 0 and 2, got {temperature}")
    max_tokens = options.max_tokens or task.settings.max_tokens or settings.max_tokens
    if max_tokens < 1:
        raise InputError(f"max_tokens must be at least 1, got {max_tokens}")
    return Plan(
        temperature=temperature,
        max_tokens=max_tokens,
        max_attempts=attempts,
        grounding=options.grounding or task.settings.grounding,
    )


def _first(*values: float | None) -> float:
    return next(float(v) for v in values if v is not None)


async def run(
    task: Task,
    text: str,
    *,
    engine: Engine,
    settings: Settings,
    options: Options = Options(),
    typed: TypedModel | None = None,
) -> ExtractionResult:
    """Extract ``task`` from ``text``; raise :class:`ExtractionFailed` with every attempt."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("text is empty: pass the text to extract from")
    p = plan(task, options, settings)
    started = time.perf_counter()
    attempts: list[Attempt] = []
    feedback: list[str] = []
    previous: str | None = None
    last_value: Any = None
    last_spans: list[Span] = []
    for number in range(1, p.max_attempts + 1):
        messages = render(task, text, feedback=feedback, previous=previous)
        prompt_tokens = engine.count_prompt_tokens(messages)
        if prompt_tokens + p.max_tokens > engine.max_model_len:
            raise TextTooLongError(
                prompt_tokens=prompt_tokens, max_tokens=p.max_tokens, max_model_len=engine.max_model_len
            )
        request = GenerationRequest(
            messages=messages, json_schema=task.engine_schema, temperature=p.temperature, max_tokens=p.max_tokens
        )
        t0 = time.perf_counter()
        generation = await engine.generate(request)
        parsed = parse_and_validate(generation.text, task.validator)
        errors = list(parsed.errors)
        if errors and generation.finish_reason == "length":
            errors.append(f"the answer was cut off at {p.max_tokens} tokens: give shorter values")
        spans: list[Span] = []
        if not errors and p.grounding != "off":
            spans = grounding.locate(text, parsed.value, skip=task.ungrounded)
            if p.grounding == "strict":
                errors.extend(grounding.missing_messages(spans))
        attempts.append(
            Attempt(
                number=number,
                raw=generation.text,
                repaired=parsed.repaired,
                errors=errors,
                prompt_tokens=generation.prompt_tokens,
                completion_tokens=generation.completion_tokens,
                finish_reason=generation.finish_reason,
                latency_ms=(time.perf_counter() - t0) * 1000,
            )
        )
        if not errors:
            return _result(task, parsed.value, spans, [], attempts, engine, started, typed)
        if parsed.ok:
            last_value, last_spans = parsed.value, spans
        feedback, previous = errors, generation.text
    if p.grounding == "strict" and last_value is not None and not validate(task.validator, last_value):
        # Valid but for values not in the text: drop those, keep the rest if still valid.
        missing = [s for s in last_spans if s.status == "missing"]
        pruned = remove_values(last_value, [s.path for s in missing])
        if not validate(task.validator, pruned):
            kept = grounding.locate(text, pruned, skip=task.ungrounded)
            return _result(task, pruned, kept, missing, attempts, engine, started, typed)
    raise ExtractionFailed(task.name, attempts)


def remove_values(data: Any, pointers: list[str]) -> Any:
    """A copy of ``data`` with the values at ``pointers`` nulled (objects) or dropped (arrays)."""
    result = copy.deepcopy(data)
    drops: list[tuple[list[Any], int]] = []
    for pointer in pointers:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
        parent: Any = result
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        if isinstance(parent, list):
            drops.append((parent, int(tokens[-1])))
        else:
            parent[tokens[-1]] = None
    for array, index in sorted(drops, key=lambda d: -d[1]):  # right to left keeps indices valid
        del array[index]
    return result


def _result(
    task: Task,
    data: Any,
    spans: list[Span],
    removed: list[Span],
    attempts: list[Attempt],
    engine: Engine,
    started: float,
    typed: TypedModel | None,
) -> ExtractionResult:
    usage = Usage()
    for attempt in attempts:
        usage = usage + Usage(prompt_tokens=attempt.prompt_tokens, completion_tokens=attempt.completion_tokens)
    return ExtractionResult(
        task=task.name,
        data=data,
        value=build_value(typed, data) if typed is not None else None,
        spans=[SpanModel(**vars(s)) for s in spans],
        removed=[SpanModel(**vars(s)) for s in removed],
        attempts=attempts,
        usage=usage,
        model=engine.model_name,
        latency_ms=(time.perf_counter() - started) * 1000,
    )
