"""render -> generate -> parse/repair/validate/ground -> re-ask, at most three attempts.

A text too long for the model window fails with :class:`TextTooLongError` unless chunking is on
(task setting ``x-extractor.chunking`` or request option ``chunk=True``): then it is split into
overlapping chunks (:mod:`extractor.chunking`), each chunk runs this loop concurrently, and the
chunks' results are merged with spans mapped back to offsets in the whole text.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from extractor import chunking, grounding, passages, values
from extractor.catalog.budget import fit_window
from extractor.catalog.prompting import prepare_answers, render
from extractor.catalog.tasks import ChunkSettings, Task, TaskSettings
from extractor.chunking import Chunk, ChunkOutcome
from extractor.config import MAX_ATTEMPTS_LIMIT, Settings
from extractor.constraints import grounded_decoding, wrapping
from extractor.constraints.grounded_decoding import MAX_WORDS as MAX_GROUNDED_WORDS
from extractor.constraints.grounded_decoding import Constrained as Constraint
from extractor.engines.base import Engine, Generation, GenerationRequest, Message
from extractor.errors import (
    ChunkedExtractionFailed,
    ExtractionFailed,
    InputError,
    TextTooLongError,
    UnstatedValueError,
)
from extractor.grounding import GroundingPolicy, Span
from extractor.options import Options
from extractor.parsing import Parsed, drop_repeats, parse, validate
from extractor.results import Attempt, ChunkModel, ExtractionResult, SpanModel, Usage
from extractor.review import agreement, confidence
from extractor.schema import escape, join, node_at, unescape
from extractor.stages import stage
from extractor.typed import TypedModel, build_value
from extractor.values import phrases

# Room kept in each chunk's window for a re-ask: the previous answer and the feedback lines.
FEEDBACK_RESERVE_TOKENS = 128
MIN_CHUNK_CHARS = 32
# A re-ask whose previous answer does not fit the window carries each problem up to this long.
MAX_FEEDBACK_CHARS = 300
DEFAULT_OVERLAP_CHARS = 200
# What a re-ask adds when the answer repeated the last one word for word (its prompt then differs from the last).
REPEATED = (
    "attempt {number} repeated attempt {last} word for word, with the same errors: "
    "write a different answer where the errors point"
)
# A re-ask names at most this many of the text's phrases for a typed value that could not be read.
MAX_HINTED_PHRASES = 8


@dataclass(frozen=True)
class Plan:
    """The effective settings of one extraction."""

    temperature: float
    max_tokens: int
    max_attempts: int
    grounding: GroundingPolicy
    # The task's (else the global) max_tokens: what a request that asks more is never clamped below.
    configured_max_tokens: int = 0
    chunking: ChunkSettings | None = None
    # True: every grounded string field; None: only fields marked "x-extractive"; False: none.
    grounded_decoding: bool | None = None
    grounded_max_words: int = MAX_GROUNDED_WORDS
    grounded_clauses: bool = True
    # The substring grammar is llguidance's Lark: only the guidance backend reads it (xgrammar: the enum).
    substring_grammar: bool = True
    # ask each token's logprob: what the values' confidences are made of
    confidences: bool = True
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    reference_date: dt.date | None = None


def asks_confidences(task: TaskSettings, default: bool) -> bool:
    """Whether the task's requests ask for token logprobs: the task's own say, else the global setting.

    A task with a ``review`` block always asks (it sends results to review by their confidence; a
    global ``EXTRACTOR_CONFIDENCES=false`` does not silence its threshold).
    """
    if task.confidences is not None:
        return task.confidences
    return True if task.review is not None else default


def plan(task: Task, options: Options, settings: Settings) -> Plan:
    """Resolve request option > task setting > global setting."""
    attempts = options.max_attempts or task.settings.max_attempts or settings.max_attempts
    if not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
        raise InputError(f"max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}, got {attempts}")
    temperature = _first(options.temperature, task.settings.temperature, settings.temperature)
    if not 0.0 <= temperature <= 2.0:
        raise InputError(f"temperature must be between 0 and 2, got {temperature}")
    configured = task.settings.max_tokens or settings.max_tokens
    max_tokens = options.max_tokens or configured
    if max_tokens < 1:
        raise InputError(f"max_tokens must be at least 1, got {max_tokens}")
    if options.chunk is None:
        chunk_settings = task.settings.chunking
    else:
        chunk_settings = (task.settings.chunking or ChunkSettings()) if options.chunk else None
    decode = options.grounded_decoding
    if decode is None:
        decode = True if task.settings.grounded_decoding else None
    return Plan(
        temperature=temperature,
        max_tokens=max_tokens,
        max_attempts=attempts,
        configured_max_tokens=configured,
        grounding=options.grounding or task.settings.grounding,
        chunking=chunk_settings,
        grounded_decoding=decode,
        grounded_max_words=settings.grounded_max_words,
        grounded_clauses=settings.grounded_clauses,
        substring_grammar=settings.grammar_backend == "guidance",
        confidences=asks_confidences(task.settings, settings.confidences),
        top_p=options.top_p,
        seed=options.seed,
        stop=options.stop,
        reference_date=options.reference_date,
    )


def _first(*values: float | None) -> float:
    return next(float(v) for v in values if v is not None)


@dataclass
class Extracted:
    """One text's (or one chunk's) accepted data, before it becomes a result."""

    data: Any
    spans: list[Span]
    removed: list[Span]
    attempts: list[Attempt]
    grounded_fields: tuple[str, ...] = ()
    chunks: list[Chunk] = field(default_factory=list)
    decoding: Constraint | None = None
    # Every non-null scalar's confidence by pointer; None: the engine gave no token probabilities.
    confidences: dict[str, float] | None = None
    calibrated: bool = False
    # What the result should say: relative dates read against today, typed values left null and why.
    notes: list[str] = field(default_factory=list)


def served(task: Task, settings: Settings) -> Task:
    """The task as the settings serve it: under ``adapter_serving`` "off", without its adapter.

    The base model then serves it, shown the task's worked examples.
    """
    if settings.adapter_serving == "off" and task.adapter is not None:
        return _without_adapter(task)
    return task


def prepare(task: Task, settings: Settings) -> None:
    """Build now what the task's texts reuse, not on the first one: read by field, each field's task and pool index.

    Each field's worked examples come from its own index over the pool (:func:`passages.field_task`):
    0.6 s for the four fields of the contract task over 254 documents' passages, on 2 cores; and
    the pool's answers, their typed values as the words that state them (:func:`prepare_answers`).
    """
    task = served(task, settings)
    if task.reads_by_field:  # (a task read whole builds its one index with the catalog)
        for name in task.schema.get("properties", {}):
            prepare_answers(passages.field_task(task, name))


@functools.lru_cache(maxsize=256)
def _without_adapter(task: Task) -> Task:
    # One copy per task: tasks hash by identity, and the prompt's caches (the system turn, the
    # fixed examples) are keyed by the task, so a fresh copy per request missed them every time.
    return replace(task, adapter=None, adapter_by_field=False)


@functools.lru_cache(maxsize=256)
def _bare(task: Task) -> Task:
    # The task's prompt without worked examples and hints: what a passage read by field must fit the
    # window with (split_for), and what its request falls back to where its examples crowd it out.
    return replace(task, examples=(), pool=None)


async def run(
    task: Task,
    text: str,
    *,
    engine: Engine,
    settings: Settings,
    options: Options | None = None,
    typed: TypedModel | None = None,
) -> ExtractionResult:
    """Extract ``task`` from ``text``; raise :class:`ExtractionFailed` with every attempt."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("text is empty: pass the text to extract from")
    task = served(task, settings)
    p, clamped = fitted(task, text, plan(task, options or Options(), settings), engine)
    started = time.perf_counter()
    with stage("splitting"):
        pieces = split_for(task, text, p, engine) if p.chunking is not None else None
    # An adapter that learned the task read by field serves those requests only (extractor.passages)
    whole = _without_adapter(task) if task.adapter_by_field else task
    if pieces is None:
        extracted = await extract_text(whole, text, p, engine)
    elif p.chunking is not None and p.chunking.by_field:
        extracted = await _extract_by_field(task, pieces, p, engine)
    else:
        extracted = await _extract_chunks(whole, pieces, p, engine)
    return _result(task, extracted, engine, started, typed, notes=[clamped] if clamped else [])


def fitted(task: Task, text: str, p: Plan, engine: Engine) -> tuple[Plan, str | None]:
    """The plan with an asked ``max_tokens`` the window cannot hold clamped (see README, Limits), and a note."""
    if p.max_tokens <= p.configured_max_tokens:
        return p, None
    prompt_tokens = engine.count_prompt_tokens(render(task, text))
    reserve = FEEDBACK_RESERVE_TOKENS if p.max_attempts > 1 else 0  # a re-ask's feedback must fit too
    fit = fit_window(
        p.max_tokens,
        at_least=p.configured_max_tokens,
        prompt_tokens=prompt_tokens + reserve,
        max_model_len=engine.max_model_len,
    )
    if fit == p.max_tokens:
        return p, None
    note = (
        f"max_tokens {p.max_tokens} clamped to {fit}: what the {engine.max_model_len}-token model window "
        f"leaves after the prompt ({prompt_tokens} tokens)"
    )
    return replace(p, max_tokens=fit), note


def _prompt(
    task: Task, text: str, engine: Engine, feedback: list[str], previous: str | None
) -> tuple[list[Message], int]:
    """The attempt's chat messages and their prompt tokens, each timed as its stage."""
    with stage("rendering"):
        messages = render(task, text, feedback=feedback, previous=previous)
    with stage("tokenizing"):
        return messages, engine.count_prompt_tokens(messages)


async def extract_text(
    task: Task,
    text: str,
    p: Plan,
    engine: Engine,
    *,
    chunk: int | None = None,
    by_field: bool = False,
) -> Extracted:
    """The attempt loop on one text (a whole document or one chunk; ``chunk`` tags its attempts).

    ``by_field``: ``task`` is one field of a task read by field, ``text`` one of its passages
    (:mod:`extractor.passages`). The passage was checked for the window without worked examples
    (:func:`split_for`): where its examples leave no room for the answer, it is read without them, with a
    note. Where the field is a typed value and the passage states no phrase of its kind, nothing is asked
    (:func:`_unasked`).
    """
    constrained = None
    decoded = task.answer_schema
    # Each typed field's evidence is held to the text's phrases of its kind; refused evidence leaves them.
    lookup = phrases.Lookup(text, task.values, _context(task, p)) if task.values else None
    grammar_failed: str | None = None  # why the substring grammar was given up mid-way, if it was
    if p.grounded_decoding is not False:
        with stage("grammar"):
            constrained = _constrain(decoded, text, p, lookup, grammar_failed)
    if by_field and constrained is not None and constrained.unstated:
        unasked = _unasked(task, constrained)
        if unasked is not None:
            return unasked
    grammar, json_schema, fields = _decoding(task, constrained)
    attempts: list[Attempt] = []
    feedback: list[str] = []
    previous: str | None = None
    last_value: Any = None
    last_spans: list[Span] = []
    last_scores: Scores | None = None
    last_problems: dict[str, str] = {}
    notes: list[str] = []
    shown = task  # what the prompt renders: the task, or the task without its worked examples
    yielded: list[str] = []
    budget, cut = p.max_tokens, False
    for number in range(1, p.max_attempts + 1):
        messages, prompt_tokens = _prompt(shown, text, engine, feedback, previous)
        if by_field and shown is task and prompt_tokens + budget > engine.max_model_len:
            yielded = [
                f"worked examples left out: with them the prompt ({prompt_tokens} tokens) left no room in the "
                f"{engine.max_model_len}-token model window for a {budget}-token answer"
            ]
            shown = _bare(task)
            messages, prompt_tokens = _prompt(shown, text, engine, feedback, previous)
        if number > 1 and prompt_tokens + (2 * budget if cut else budget) > engine.max_model_len:
            # A huge (or cut) previous answer must not crowd the text out of the window: re-ask without it.
            clipped = [e if len(e) <= MAX_FEEDBACK_CHARS else e[:MAX_FEEDBACK_CHARS] + "…" for e in feedback]
            messages, prompt_tokens = _prompt(shown, text, engine, clipped, None)
        if cut:
            # The same budget would cut the answer at the same place again: grow it, or stop.
            grown = reask_budget(budget, prompt_tokens=prompt_tokens, max_model_len=engine.max_model_len)
            if grown is None:
                attempts[-1].errors.append(
                    f"no room in the model window ({engine.max_model_len} tokens) for an answer longer than "
                    f"{budget} tokens: raise max_model_len, or bound the schema (maxItems, maxLength)"
                )
                break
            budget = grown
        elif prompt_tokens + budget > engine.max_model_len:
            raise TextTooLongError(prompt_tokens=prompt_tokens, max_tokens=budget, max_model_len=engine.max_model_len)
        request = GenerationRequest(
            messages=messages,
            json_schema=json_schema,
            grammar=grammar,
            temperature=p.temperature,
            max_tokens=budget,
            adapter=str(task.adapter) if task.adapter is not None else None,
            top_p=p.top_p,
            seed=p.seed,
            stop=p.stop,
            logprobs=p.confidences,
        )
        t0 = time.perf_counter()
        with stage("engine"):
            generation = await engine.generate(request)
        with stage("reading"):
            answer = read_answer(task, generation.text, p, text=text)
        parsed = answer.parsed
        errors = [*parsed.errors, *answer.problems.values()]
        notes = [*yielded, *answer.notes]
        if errors and grammar is not None and parsed.repaired and generation.finish_reason != "length":
            # Under the substring grammar a cut answer that was not cut by max_tokens means the
            # grammar left no token to go on with (llguidance masks to EOS, silently): decode the
            # next attempts without it rather than meet the same wall three times.
            grammar_failed = f"the substring grammar ended attempt {number} early ({generation.text[-40:]!r})"
            constrained = _constrain(decoded, text, p, lookup, grammar_failed)
            grammar, json_schema, fields = _decoding(task, constrained)
        elif constrained is not None and lookup is not None and _refuse(task, lookup, answer):
            # The next attempt must not be the same request: the refused evidence leaves its field's phrases.
            with stage("grammar"):
                constrained = _constrain(decoded, text, p, lookup, grammar_failed) or constrained
            grammar, json_schema, fields = _decoding(task, constrained)
        cut = generation.finish_reason == "length"
        if cut:
            # Never a result: json-repair would close it, but its last value may be cut short too.
            errors.insert(0, f"the answer was cut off at {budget} tokens: give shorter values")
        spans: list[Span] = []
        if not errors and p.grounding != "off":
            spans = answer.spans(text, task.ungrounded)
            if p.grounding == "strict":
                errors.extend(grounding.missing_messages(spans, text))
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
                chunk=chunk,
            )
        )
        scored = scores(task, generation, parsed.value) if not errors or (parsed.ok and not cut) else None
        if not errors:
            extracted = Extracted(parsed.value, spans, [], attempts, fields, decoding=constrained, notes=notes)
            return _scored(extracted, scored)
        if parsed.ok and not cut:
            last_value, last_scores, last_problems = parsed.value, scored, answer.problems
            last_spans = spans if spans or p.grounding == "off" else answer.spans(text, task.ungrounded)
        hints = _phrase_hints(task, lookup, answer)
        if generation.text == previous:
            # The same answer to the same feedback: a re-ask that says only that again would get it again.
            hints.append(REPEATED.format(number=number, last=number - 1))
        feedback, previous = [*errors, *hints], generation.text
    if last_value is not None:
        # Valid but for typed values whose evidence could not be read (nulled, with a note) and, under
        # strict grounding, values not in the text as written (dropped): keep the rest if still valid.
        readable = remove_values(last_value, list(last_problems))
        missing = [s for s in last_spans if s.status in grounding.UNGROUNDED] if p.grounding == "strict" else []
        if (last_problems or missing) and not validate(task.validator, readable):
            pruned = remove_values(readable, [s.path for s in missing])
            if not validate(task.validator, pruned):
                kept = [s for s in last_spans if s.status not in grounding.UNGROUNDED and s.path not in last_problems]
                if last_scores is not None:
                    last_scores = replace(last_scores, values=confidence.follow(last_value, pruned, last_scores.values))
                left = [f"{why}; left null after {len(attempts)} attempt(s)" for why in last_problems.values()]
                extracted = Extracted(
                    pruned, kept, missing, attempts, fields, decoding=constrained, notes=[*notes, *left]
                )
                return _scored(extracted, last_scores)
    raise ExtractionFailed(task.name, attempts)


@dataclass(frozen=True)
class Answer:
    """One attempt's answer read: parsed and typed, its schema errors, and the typed values' problems."""

    parsed: Parsed  # ``value``: the data with typed values; ``errors``: schema errors but at ``problems``
    evidence: Any  # the answer as the model wrote it (typed values as their words)
    typed: dict[str, values.Typed] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def spans(self, text: str, skip: frozenset[str]) -> list[Span]:
        """Each grounded string's span, found by its evidence, with the typed value read from it."""
        found = grounding.locate(text, self.evidence, skip=skip)
        if not self.typed:
            return found
        return [
            replace(s, normalized=self.typed[s.path].value, unit=self.typed[s.path].unit) if s.path in self.typed else s
            for s in found
        ]


def read_answer(task: Task, raw: str, p: Plan, *, text: str = "") -> Answer:
    """Parse (repairing), type the value fields from their evidence, validate against the task schema.

    Items an array repeats where the schema says ``uniqueItems`` are dropped first, with a note
    (:func:`extractor.parsing.drop_repeats`).

    Evidence the model cut short ("2014" of "May 20, 2014") is widened to the phrase of ``text`` that
    holds it, evidence that runs past its phrase narrowed to it (:func:`extractor.values.phrases.fit`),
    before it is read.
    """
    first = parse(raw)
    if not first.ok:
        return Answer(first, None)
    value, dropped = drop_repeats(task.validator, first.value) if task.drops_repeats else (first.value, [])
    if not task.values:
        parsed = Parsed(value=value, repaired=first.repaired, errors=tuple(validate(task.validator, value)))
        return Answer(parsed, value, notes=dropped)
    ctx = _context(task, p)
    fitted_notes: list[str] = [*dropped]
    evidence_data = _fitted(task, value, text, "", ctx, fitted_notes) if text else value
    applied = values.apply(evidence_data, task.values, ctx)
    # A value that could not be read has its own line; the schema's complaint at it would say less.
    errors = [
        e for e in validate(task.validator, applied.data) if not any(e.startswith(f"{q}:") for q in applied.problems)
    ]
    parsed = Parsed(value=applied.data, repaired=first.repaired, errors=tuple(errors))
    return Answer(parsed, evidence_data, applied.typed, applied.problems, [*fitted_notes, *applied.notes])


def _fitted(task: Task, value: Any, text: str, pointer: str, ctx: values.Context, notes: list[str]) -> Any:
    """``value`` with each typed value's copied words fitted (widened or narrowed) to the phrase stating it."""
    if isinstance(value, dict):
        return {k: _fitted(task, v, text, f"{pointer}/{escape(str(k))}", ctx, notes) for k, v in value.items()}
    if isinstance(value, list):
        return [_fitted(task, v, text, pointer, ctx, notes) for v in value]
    found = task.values.get(pointer)
    if found is None or not isinstance(value, str):
        return value
    words, note = phrases.fit(text, found, value, ctx)
    if note is not None:
        notes.append(note)
    return words


def _context(task: Task, p: Plan) -> values.Context:
    return values.Context(
        languages=task.settings.languages, date_order=task.settings.date_order, reference_date=p.reference_date
    )


def _decoding(task: Task, constrained: Constraint | None) -> tuple[str | None, Any, tuple[str, ...]]:
    """What a request is decoded under: the grammar, else the JSON schema; and the fields held to the text."""
    if constrained is None:
        return None, task.engine_schema, ()
    if constrained.grammar is not None:
        return constrained.grammar, None, constrained.fields
    return None, constrained.schema if constrained.schema is not None else task.engine_schema, constrained.fields


def _refuse(task: Task, lookup: phrases.Lookup, answer: Answer) -> bool:
    """Leave each typed value's evidence that could not be read out of its field's phrases; True if any left."""
    changed = False
    for pointer in answer.problems:
        words = node_at(answer.evidence, pointer)
        if isinstance(words, str):
            changed = lookup.refuse(grounding.field_path(pointer), words) or changed
    return changed


def _constrain(
    decoded: Any, text: str, p: Plan, lookup: phrases.Lookup | None, grammar_failed: str | None
) -> Constraint | None:
    """What the next request is decoded under: the plan's grounded decoding, with the phrases left in ``lookup``.

    ``grammar_failed``: why the substring grammar was given up for this text (the enum of spans, else
    a post-hoc check, from then on).
    """
    everywhere = p.grounded_decoding is True
    if grammar_failed is not None:
        return grounded_decoding.without_grammar(
            decoded, text, everywhere=everywhere, why=grammar_failed, phrases=lookup
        )
    return grounded_decoding.constrain(
        decoded,
        text,
        everywhere=everywhere,
        max_words=p.grounded_max_words,
        clauses=p.grounded_clauses,
        grammar=p.substring_grammar,
        phrases=lookup,
    )


def _unasked(task: Task, constrained: Constraint) -> Extracted | None:
    """A one-field task's answer where its text states no phrase of the field's kind, without asking the model.

    The phrase rule leaves such a field null alone, where it may be null: the answer is that, whatever
    the model. Where it may not (``"expect": true``), the rule falls back to any words of the text, and
    over the 83 Kleister dev contracts none of those guesses (228 requests, re-asks included) read as
    the right date: the passage fails at once (:class:`UnstatedValueError`), as it failed after its attempts.
    None: the field is not such a value, and the text is asked as usual.
    """
    names = list(task.schema.get("properties", {}))
    if len(names) != 1:
        return None
    kind = dict(constrained.unstated).get(f"#/properties/{escape(names[0])}")
    if kind is None:
        return None
    answer = {names[0]: None}
    if not validate(task.validator, answer):
        return Extracted(answer, [], [], [], constrained.fields, decoding=constrained)
    raise UnstatedValueError(task.name, [], reason=f"it states no {kind}, and /{names[0]} may not be null: not asked")


def _phrase_hints(task: Task, lookup: phrases.Lookup | None, answer: Answer) -> list[str]:
    """For each typed value that could not be read, the phrases of the text that state a value of its kind."""
    if lookup is None:
        return []
    hints = []
    for pointer in answer.problems:
        found = task.values.get(grounding.field_path(pointer))
        if found is None:
            continue
        left = lookup.left(found)[:MAX_HINTED_PHRASES]
        if left:
            hints.append(f"{pointer}: the text states a {found.kind} only as one of: {', '.join(map(repr, left))}")
    return hints


@dataclass(frozen=True)
class Scores:
    """An accepted answer's confidences by pointer, and whether the task's calibration made them."""

    values: dict[str, float]
    calibrated: bool


def scores(task: Task, generation: Generation, value: Any) -> Scores | None:
    """Each value's confidence from the generation's token probabilities (None: it had none).

    Raw probabilities go through the task's calibration when it was fitted for the way the task
    is served now (with its adapter or without); a calibration with a map per pool verdict
    takes each value's verdict from the pool the task is served with (``value``: the answer as decoded).
    """
    if not generation.token_logprobs:
        return None
    raw = confidence.raw_confidences(generation.text, generation.token_ends, generation.token_logprobs)
    mapping = task.calibration
    if mapping is None or mapping.adapter != (task.adapter is not None):
        return Scores(raw, calibrated=False)
    found = agreement.of_task(task, value, decoded=True) if mapping.strata else {}
    return Scores({pointer: mapping(c, found.get(pointer)) for pointer, c in raw.items()}, calibrated=True)


def _scored(extracted: Extracted, found: Scores | None) -> Extracted:
    """``extracted`` with its confidences, on the spans too."""
    if found is None:
        return extracted
    extracted.spans = [replace(s, confidence=found.values.get(s.path)) for s in extracted.spans]
    extracted.removed = [replace(s, confidence=found.values.get(s.path)) for s in extracted.removed]
    extracted.confidences, extracted.calibrated = found.values, found.calibrated
    return extracted


def reask_budget(budget: int, *, prompt_tokens: int, max_model_len: int) -> int | None:
    """The ``max_tokens`` of a re-ask after an answer cut at ``budget``: double, within the window.

    None when the window leaves no room for more than ``budget`` (a re-ask would be cut again).
    """
    grown = min(2 * budget, max_model_len - prompt_tokens)
    return grown if grown > budget else None


def split_for(task: Task, text: str, p: Plan, engine: Engine) -> list[Chunk] | None:
    """The chunks of a text too long for one request (None when it fits, or fits the task's ``max_chars``).

    Without a task ``max_chars``, the size comes from the model window: the prompt of each chunk
    plus the answer, a previous answer and feedback (for a re-ask) must fit.

    A task read by field with a ``max_chars`` sends its pieces in field requests, each with its own
    worked examples, never in the whole task's prompt: each piece is checked bare (the task's prompt
    without worked examples and hints), and a field request whose examples crowd the window is read
    without them (:func:`extract_text`'s ``by_field``). Rendering every piece with the whole
    task's examples only to count it was half the pipeline's CPU a contract (issue 58).
    """
    assert p.chunking is not None
    size, overlap = p.chunking.max_chars, p.chunking.overlap
    # a text over the task's max_chars is split whatever its prompt would count: the whole is not rendered
    whole = engine.count_prompt_tokens(render(task, text)) if size is None or len(text) <= size else None
    if whole is not None and whole + p.max_tokens <= engine.max_model_len:
        return None
    if p.chunking.by_field and size is not None:
        task = _bare(task)
    base = engine.count_prompt_tokens(render(task, ""))
    room = engine.max_model_len - base - 2 * p.max_tokens - FEEDBACK_RESERVE_TOKENS
    if room <= 0:
        raise TextTooLongError(prompt_tokens=base, max_tokens=p.max_tokens, max_model_len=engine.max_model_len)
    if size is None:
        assert whole is not None
        chars_per_token = len(text) / max(1, whole - base)
        size = max(MIN_CHUNK_CHARS, int(room * chars_per_token * 0.9))
    while True:
        share = overlap if overlap is not None else DEFAULT_OVERLAP_CHARS
        pieces = chunking.split(text, max_chars=size, overlap=min(share, size // 2))
        if all(engine.count_prompt_tokens(render(task, c.text)) - base <= room for c in pieces):
            return pieces
        if size <= MIN_CHUNK_CHARS:
            worst = max(engine.count_prompt_tokens(render(task, c.text)) for c in pieces)
            raise TextTooLongError(prompt_tokens=worst, max_tokens=p.max_tokens, max_model_len=engine.max_model_len)
        size = max(MIN_CHUNK_CHARS, size * 3 // 4)


async def _extract_chunks(task: Task, pieces: Sequence[Chunk], p: Plan, engine: Engine) -> Extracted:
    """Every chunk in one concurrent batch, then the merge (see :mod:`extractor.chunking`)."""
    jobs = [extract_text(task, c.text, p, engine, chunk=i) for i, c in enumerate(pieces)]
    done = await asyncio.gather(*jobs, return_exceptions=True)
    attempts = [a for d in done if isinstance(d, Extracted) for a in d.attempts]
    attempts += [a for d in done if isinstance(d, ExtractionFailed) for a in d.attempts]
    attempts.sort(key=lambda a: (a.chunk or 0, a.number))
    for outcome in done:
        if isinstance(outcome, BaseException) and not isinstance(outcome, ExtractionFailed):
            raise outcome
    failed = [i for i, d in enumerate(done) if isinstance(d, ExtractionFailed)]
    if failed:
        where = ", ".join(f"{i} (characters {pieces[i].start}-{pieces[i].end})" for i in failed)
        raise ChunkedExtractionFailed(
            task.name,
            attempts,
            reason=f"no valid result for chunk(s) {where} of {len(pieces)}; see each attempt's errors",
        )
    outcomes = [
        ChunkOutcome(
            chunk=c,
            data=d.data,
            spans=chunking.offset_spans(d.spans, c.start),
            removed=chunking.offset_spans(d.removed, c.start),
        )
        for c, d in zip(pieces, done, strict=True)
        if isinstance(d, Extracted)
    ]
    with stage("merging"):
        merged = chunking.merge(outcomes, schema=task.schema)
    problems = validate(task.validator, merged.data)
    if problems:
        raise ChunkedExtractionFailed(
            task.name, attempts, reason=f"the merged chunks break the schema: {'; '.join(problems[:3])}"
        )
    fields = sorted({f for d in done if isinstance(d, Extracted) for f in d.grounded_fields})
    # The weakest decoding any chunk had speaks for the whole text.
    modes = [d.decoding for d in done if isinstance(d, Extracted) and d.decoding is not None]
    weakest = max(modes, key=lambda c: _STRENGTH.index(c.mode), default=None)
    extracted = Extracted(merged.data, merged.spans, merged.removed, attempts, tuple(fields), list(pieces), weakest)
    extracted.notes = list(dict.fromkeys(n for d in done if isinstance(d, Extracted) for n in d.notes))
    scored = [d for d in done if isinstance(d, Extracted) and d.confidences is not None]
    if scored:
        # Merged by pointer through the spans: a long text's confidences are its strings'.
        extracted.confidences = {s.path: s.confidence for s in merged.spans if s.confidence is not None}
        extracted.calibrated = all(d.calibrated for d in scored)
    return extracted


_STRENGTH = ("grammar", "enum", "posthoc")


async def _extract_by_field(task: Task, pieces: Sequence[Chunk], p: Plan, engine: Engine) -> Extracted:
    """Each top-level field from its best passages (see :mod:`extractor.passages`)."""

    async def one(narrowed: Task, chunk: Chunk, index: int) -> Extracted:
        return await extract_text(narrowed, chunk.text, p, engine, chunk=index, by_field=True)

    data, spans, attempts, notes, scored = await passages.read_by_field(task, pieces, one)
    attempts.sort(key=lambda a: (a.chunk or 0, a.number))
    problems = validate(task.validator, data)
    if problems:
        # A value a keyword checked only on the whole answer refuses is left out, not the document.
        bad = sorted({join(e.absolute_path) for e in task.validator.iter_errors(data) if e.absolute_path})
        kept = remove_values(data, bad) if bad else data
        if not bad or validate(task.validator, kept):
            raise ChunkedExtractionFailed(
                task.name, attempts, reason=f"the fields read by passage break the schema: {'; '.join(problems[:3])}"
            )
        data, spans = kept, _spans_without(spans, bad)
        scored = {s.path: s.confidence for s in spans if s.confidence is not None}
        notes += [f"{problem}; left out" for problem in problems]
    extracted = Extracted(data, spans, [], attempts, (), list(pieces), notes=notes)
    if scored:
        extracted.confidences, extracted.calibrated = scored, False
    return extracted


def _spans_without(spans: Sequence[Span], pointers: Sequence[str]) -> list[Span]:
    """``spans`` less those at (or under) ``pointers``, array items after a dropped one moved up (see remove_values)."""
    kept = list(spans)
    for pointer in sorted(pointers, key=lambda q: [int(t) if t.isdigit() else -1 for t in q.split("/")[1:]])[::-1]:
        parent, _, last = pointer.rpartition("/")
        kept = [s for s in kept if s.path != pointer and not s.path.startswith(pointer + "/")]
        if not last.isdigit():
            continue
        moved = []
        for s in kept:
            head, sep, rest = s.path[len(parent) + 1 :].partition("/")
            if s.path.startswith(parent + "/") and head.isdigit() and int(head) > int(last):
                s = replace(s, path=f"{parent}/{int(head) - 1}{sep}{rest}")
            moved.append(s)
        kept = moved
    return kept


def remove_values(data: Any, pointers: list[str]) -> Any:
    """A copy of ``data`` with the values at ``pointers`` nulled (objects) or dropped (arrays)."""
    result = copy.deepcopy(data)
    drops: list[tuple[list[Any], int]] = []
    for pointer in pointers:
        tokens = [unescape(t) for t in pointer.split("/")[1:]]
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
    extracted: Extracted,
    engine: Engine,
    started: float,
    typed: TypedModel | None,
    *,
    notes: Sequence[str] = (),
) -> ExtractionResult:
    usage = Usage()
    for attempt in extracted.attempts:
        usage = usage + Usage(prompt_tokens=attempt.prompt_tokens, completion_tokens=attempt.completion_tokens)
    key = task.wrapped  # a non-object top level was decoded wrapped: data is what the schema describes
    value = build_value(typed, extracted.data) if typed is not None else None
    return ExtractionResult(
        task=task.name,
        data=wrapping.unwrap(extracted.data, key),
        value=getattr(value, key, None) if key is not None else value,
        spans=[SpanModel(**{**vars(s), "path": wrapping.unwrap_pointer(s.path, key)}) for s in extracted.spans],
        removed=[SpanModel(**{**vars(s), "path": wrapping.unwrap_pointer(s.path, key)}) for s in extracted.removed],
        attempts=extracted.attempts,
        usage=usage,
        model=engine.model_name,
        latency_ms=(time.perf_counter() - started) * 1000,
        chunks=[ChunkModel(start=c.start, end=c.end) for c in extracted.chunks],
        grounded_fields=list(extracted.grounded_fields),
        grounded_decoding=extracted.decoding.mode if extracted.decoding is not None else "off",
        cuts=sum(1 for a in extracted.attempts if a.finish_reason == "length"),
        notes=[
            *notes,
            *([extracted.decoding.note] if extracted.decoding is not None and extracted.decoding.note else []),
            *extracted.notes,
        ],
        confidences={wrapping.unwrap_pointer(k, key): v for k, v in (extracted.confidences or {}).items()},
        confidence=confidence.lowest(extracted.confidences) if extracted.confidences is not None else None,
        calibrated=extracted.calibrated,
    )
