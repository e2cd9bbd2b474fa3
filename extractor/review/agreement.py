"""Whether the task's pool agrees with a value: a second witness beside the model's probability. Pure.

A small model is often sure and wrong, and sure in the same way whether it is right or not: a
confident wrong type (a company called an organisation) or an invented entity looks, in token
probabilities, like a right one. The labelled pool knows something the model's probability does
not: how its labellers marked this very string. Each value gets one verdict:

* ``agrees``: the pool labelled this string, most often as this field;
* ``differs``: the pool labelled this string, most often as another field;
* ``unseen``: the pool never labelled this string, though it keeps such strings;
* ``other``: a value the pool's lexicon does not keep (not a string, a field that is not
  grounded such as an enum or a date, a string too short or too long), or no pool.

The calibration (:mod:`extractor.review.calibration`) fits a map per verdict, so a value the pool
contradicts, or has never seen, is ranked for review before an equally probable value the pool
agrees with. On CLUENER served from its pool, 98 % of ``differs`` and 93 % of ``unseen`` values
were wrong against 36 % of ``agrees`` (``bench/results/calibration.md``).

The verdict uses the lexicon of the pool the task is served with
(:class:`extractor.examples.lexicon.Lexicon`): when calibrating, the pool less the fold being
extracted, so no value is judged by its own label.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from extractor.constraints import wrapping
from extractor.examples.lexicon import Lexicon
from extractor.grounding import field_path, is_grounded_field, scalar_leaves

if TYPE_CHECKING:
    from extractor.catalog.tasks import Task

AGREES = "agrees"
DIFFERS = "differs"
UNSEEN = "unseen"
OTHER = "other"
VERDICTS = (AGREES, DIFFERS, UNSEEN, OTHER)


def verdict(lexicon: Lexicon | None, pointer: str, value: Any, *, skip: frozenset[str] = frozenset()) -> str:
    """The pool's verdict on ``value`` at ``pointer``; ``skip``: the task's fields that are not grounded."""
    if lexicon is None or not isinstance(value, str) or not is_grounded_field(pointer, skip):
        return OTHER
    if not lexicon.keeps(value):
        return OTHER
    counts = lexicon.fields.get(value)
    if not counts:
        return UNSEEN
    mine = counts.get(field_path(pointer), 0)
    return AGREES if mine > 0 and mine == max(counts.values()) else DIFFERS


def verdicts(lexicon: Lexicon | None, data: Any, *, skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """The verdict on every scalar value of ``data``, by JSON pointer."""
    return {pointer: verdict(lexicon, pointer, value, skip=skip) for pointer, value in scalar_leaves(data)}


def of_task(task: Task, data: Any, *, decoded: bool = False) -> dict[str, str]:
    """The verdict of ``task``'s pool on every value of ``data``: a result's, or the answer as decoded.

    Judged on the answer as decoded (the lexicon and the task's ungrounded fields speak of it),
    keyed by pointers into ``data``.
    """
    lexicon = task.pool.lexicon if task.pool is not None else None
    if task.wrapped is None or decoded:
        return verdicts(lexicon, data, skip=task.ungrounded)
    found = verdicts(lexicon, {task.wrapped: data}, skip=task.ungrounded)
    return {wrapping.unwrap_pointer(p, task.wrapped): v for p, v in found.items()}
