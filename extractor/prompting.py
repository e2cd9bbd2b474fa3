"""render(task, text, feedback) -> chat messages. Pure.

The task's template renders one user turn. Variables it can use:

- ``text``: the source text;
- ``fields``: the top-level fields (``name``, ``description``, ``type``, ``required``);
- ``task``: ``name``, ``title``, ``description``;
- ``schema``: the JSON Schema as compact JSON;
- ``feedback``: the problems of the previous attempt (empty on the first attempt);
- ``previous``: the previous attempt's raw output (None on the first attempt).

Worked examples become few-shot turns before it: the template rendered on the example's
text, then the expected output as the assistant's compact JSON answer.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from extractor.engines.base import Message
from extractor.tasks import Task

DEFAULT_SYSTEM = (
    "You extract structured data from text. Answer with one JSON object that follows the "
    "schema. Copy values exactly as they appear in the text; use null when a field is absent."
)


def compact_json(value: Any) -> str:
    """JSON without optional whitespace, non-ASCII kept as is (fewer tokens)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def render_instruction(task: Task, text: str, *, feedback: Sequence[str] = (), previous: str | None = None) -> str:
    """The task template rendered for one text."""
    return task.template.render(
        text=text,
        fields=task.fields,
        task={"name": task.name, "title": task.title, "description": task.description},
        schema=compact_json(task.engine_schema),
        feedback=list(feedback),
        previous=previous,
    ).strip()


@functools.lru_cache(maxsize=256)
def _preamble(task: Task) -> tuple[Message, ...]:
    # The system turn and the worked examples are the same for every request of a task:
    # render them through the sandbox once (tasks hash by identity, so a reload is a new key).
    messages: list[Message] = [{"role": "system", "content": task.settings.system or DEFAULT_SYSTEM}]
    for example in task.examples:
        messages.append({"role": "user", "content": render_instruction(task, example.text)})
        messages.append({"role": "assistant", "content": compact_json(example.output)})
    return tuple(messages)


def render(task: Task, text: str, *, feedback: Sequence[str] = (), previous: str | None = None) -> list[Message]:
    """The full chat for one attempt: system, few-shot examples, then the request."""
    messages: list[Message] = [m.copy() for m in _preamble(task)]
    messages.append({"role": "user", "content": render_instruction(task, text, feedback=feedback, previous=previous)})
    return messages
