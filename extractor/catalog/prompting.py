"""render(task, text, feedback) -> chat messages. Pure.

The task's template renders the instruction. Variables it can use:

- ``text``: the source text;
- ``fields``: the top-level fields (``name``, ``description``, ``type``, ``required``);
- ``task``: ``name``, ``title``, ``description``;
- ``schema``: the JSON Schema as compact JSON;
- ``feedback``: the problems of the previous attempt (empty on the first attempt);
- ``previous``: the previous attempt's raw output (None on the first attempt).

Two layouts, picked by whether the template uses ``text``:

- **instruction** (the template never uses ``text``; the shipped tasks): the system turn holds
  the system prompt and the instruction, identical for every request of a task, so vLLM's prefix
  cache keeps it; then each worked example as a compact demonstration (the text as a user turn,
  the compact JSON answer as the assistant's); then the text, and on a re-ask the previous answer
  and its problems.
- **turns** (the template renders ``text``): each worked example is the whole template rendered
  on its text, then the answer; the request is the template rendered on the text.

Worked examples are the task's pool's nearest to the text when it has a pool
(:mod:`extractor.examples`), else its fixed ``examples``. With ``examples_from_pool.hints`` the text
(and each example's) is followed by the values the pool labelled that occur in it, by field.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from extractor.catalog.tasks import Task
from extractor.catalog.templating import compact_json
from extractor.engines.base import Message
from extractor.examples.pool import Example
from extractor.values import evidence

DEFAULT_SYSTEM = (
    "You extract structured data from text. Answer with one JSON object that follows the "
    "schema. Copy values exactly as they appear in the text; for a field the text does not "
    "mention, use null or leave the field out, as the instruction says."
)

# Before the hints (``examples_from_pool.hints``): the labels are the pool's, not this text's.
HINTS_INTRO = "Labelled in earlier texts (may not apply here):"


def render_instruction(task: Task, text: str, *, feedback: Sequence[str] = (), previous: str | None = None) -> str:
    """The task template rendered for one text (:meth:`Task.instruction`)."""
    return task.instruction(text, feedback=feedback, previous=previous)


def examples_for(task: Task, text: str) -> tuple[Example, ...]:
    """The worked examples shown for ``text``: the pool's nearest, or the task's fixed ones."""
    if task.uses_pool:
        assert task.pool is not None and task.settings.examples_from_pool is not None
        return task.pool.nearest(text, task.settings.examples_from_pool)
    return task.examples


def hints_block(task: Task, text: str, *, without: Sequence[Mapping[str, Any]] = ()) -> str:
    """The pool's labelled values found in ``text`` (``examples_from_pool.hints``), grouped by field; "" for none.

    ``without``: a pool line's own output and its document's other lines' (:meth:`ExamplePool.outputs_of`),
    left out of the counts when that line is shown (a worked example, a training sample), so its
    hints are the ones a new text would get.
    """
    settings = task.settings.examples_from_pool
    if task.pool is None or settings is None or not settings.hints:
        return ""
    grouped: dict[str, list[str]] = {}
    for hint in task.pool.lexicon.find(text, without=without):
        grouped.setdefault(hint.field.lstrip("/"), []).append(hint.value)
    if not grouped:
        return ""
    return f"\n\n{HINTS_INTRO} {compact_json(grouped)}"


def feedback_block(feedback: Sequence[str], previous: str | None) -> str:
    """What a re-ask adds after the text in the instruction layout."""
    if not feedback:
        return ""
    lines = "\n".join(f"- {problem}" for problem in feedback)
    answer = f"Your previous answer {previous} has" if previous is not None else "Your previous answer had"
    return f"\n\n{answer} these problems; answer again with them fixed:\n{lines}"


@functools.lru_cache(maxsize=256)
def _system(task: Task) -> str:
    # Rendered once per task (tasks hash by identity, so a reload is a new key).
    system = task.settings.system or DEFAULT_SYSTEM
    if not task.instruction_only:
        return system
    return f"{system}\n\n{render_instruction(task, '')}"


@functools.lru_cache(maxsize=256)
def _fixed_turns(task: Task) -> tuple[Message, ...]:
    return tuple(_turns(task, task.examples))


# A text's worked examples and hints, remembered for the latest texts: a passage is rendered again
# for each attempt, and a long document's chunks once when split (pipeline.split_for), then to be read.
@functools.lru_cache(maxsize=1024)
def _pool_turns(task: Task, text: str) -> tuple[Message, ...]:
    return tuple(_turns(task, examples_for(task, text)))


@functools.lru_cache(maxsize=1024)
def _hints(task: Task, text: str) -> str:
    return hints_block(task, text)


def _turns(task: Task, examples: Sequence[Example]) -> list[Message]:
    messages: list[Message] = []
    for example in examples:
        shown = example.text if task.instruction_only else render_instruction(task, example.text)
        output = compact_json(example.output)
        document = example.source.document if example.source is not None else None
        shown += _example_hints(task, example.text, output, document)
        messages.append({"role": "user", "content": shown})
        messages.append({"role": "assistant", "content": _answer(task, example.text, output)})
    return messages


@functools.lru_cache(maxsize=4096)
def _example_hints(task: Task, text: str, output: str, document: str | None) -> str:
    """A worked example's hints, its own and its document's labels left out: the same beside every text."""
    alike = task.pool.outputs_of(document) if task.pool is not None and document is not None else ()
    return hints_block(task, text, without=alike or (json.loads(output),))


ANSWERS_KEPT = 4096  # worked examples' answers remembered (:func:`_answer`'s cache)


def prepare_answers(task: Task, *, at_most: int = ANSWERS_KEPT // 4) -> None:
    """Render now the answers of the task's first ``at_most`` pool lines, where typed values make them cost.

    A typed value is shown as the words of the example's text that state it, found by reading the
    text's phrases (dateparser: milliseconds each, and its regular expressions compiled on first use).
    Rendered while the engine starts, the first documents do not pay for them.
    """
    if not task.values or task.pool is None:
        return
    for example in task.pool.examples[:at_most]:
        _answer(task, example.text, compact_json(example.output))


def answer(task: Task, text: str, output: Mapping[str, Any]) -> str:
    """``output`` (a pool line's, for ``text``) as the model writes it: typed values as the words stating them."""
    return _answer(task, text, compact_json(output))


@functools.lru_cache(maxsize=ANSWERS_KEPT)
def _answer(task: Task, text: str, output: str) -> str:
    """A worked example's answer as the model gives it: typed values as the words of the text that state them."""
    if not task.values:
        return output
    return compact_json(evidence.as_evidence(text, json.loads(output), task.values))


def render(
    task: Task,
    text: str,
    *,
    feedback: Sequence[str] = (),
    previous: str | None = None,
    without: Sequence[Mapping[str, Any]] | None = None,
) -> list[Message]:
    """The full chat for one attempt: system (+ instruction), worked examples, then the request.

    A task with its own ``conversation`` (a request's chat) is sent as given; a re-ask adds
    the previous answer and its problems as the next two turns. ``without``: the text is a pool
    line (training): these outputs (its own, its document's) are left out of its hints.
    """
    if task.conversation:
        chat: list[Message] = [m.copy() for m in task.conversation]
        if feedback:
            chat.append({"role": "assistant", "content": previous or ""})
            chat.append({"role": "user", "content": feedback_block(feedback, None).strip()})
        return chat
    messages: list[Message] = [{"role": "system", "content": _system(task)}]
    # An adapter learned the task from its pool, on prompts without worked examples.
    adapted = task.adapter is not None and not task.settings.adapter_examples
    if task.uses_pool and not adapted:
        messages += [m.copy() for m in _pool_turns(task, text)]
    elif not adapted:
        messages += [m.copy() for m in _fixed_turns(task)]
    hints = hints_block(task, text, without=without) if without is not None else _hints(task, text)
    if task.instruction_only:
        request = text + hints + feedback_block(feedback, previous)
    else:
        request = render_instruction(task, text, feedback=feedback, previous=previous) + hints
    messages.append({"role": "user", "content": request})
    return messages
