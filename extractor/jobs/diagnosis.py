"""What kind of wrong: every predicted and every expected value of a scored document, sorted into kinds. Pure.

F1 says how much is wrong; this says what to change. Each value (``(field, value)`` as
:func:`extractor.jobs.metrics.leaves` yields it) is matched once, in this order:

- ``correct``: the same value in the same field;
- ``duplicate``: a value predicted more often than the gold lists it (the surplus);
- ``wrong_field``: the same value under another field (a type error);
- ``boundary``: the same field, a value overlapping an expected one (too long, too short, shifted);
- ``boundary_and_field``: overlapping an expected value of another field;
- ``invented``: overlapping no expected value at all (a value the gold does not have);
- ``missed``: an expected value nothing above consumed.

Overlap is judged on the text: the two values' first occurrences share a character, or one
contains the other. ``empty`` counts the empty lists and nulls the model wrote (output it paid
for that carries no value).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extractor.comparison import Leaf, leaves, normalize

KINDS = ("correct", "duplicate", "wrong_field", "boundary", "boundary_and_field", "invented", "missed")


@dataclass
class Diagnosis:
    """Counts of each kind, over one document or many; ``examples`` keeps a few of each for reading."""

    counts: Counter[str] = field(default_factory=Counter)
    empty: int = 0
    docs: int = 0
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, other: Diagnosis, *, keep: int = 5) -> None:
        self.counts.update(other.counts)
        self.empty += other.empty
        self.docs += other.docs
        for kind, found in other.examples.items():
            mine = self.examples.setdefault(kind, [])
            mine.extend(found[: max(0, keep - len(mine))])

    def as_dict(self) -> dict[str, Any]:
        """Counts, and each error kind's share of all errors (false positives and negatives)."""
        errors = sum(self.counts[k] for k in KINDS if k != "correct")
        return {
            "docs": self.docs,
            **{k: self.counts[k] for k in KINDS},
            "empty_values": self.empty,
            "error_shares": {k: self.counts[k] / errors if errors else 0.0 for k in KINDS if k != "correct"},
            "examples": self.examples,
        }


def diagnose(text: str, expected: Any, predicted: Any) -> Diagnosis:
    """Sort one document's values into :data:`KINDS` (``predicted`` None: nothing predicted)."""
    gold = list(leaves(expected))
    pred = list(leaves(predicted)) if predicted is not None else []
    out = Diagnosis(docs=1, empty=_empty(predicted))
    folded = normalize(text)
    remaining = Counter(gold)
    surplus: list[Leaf] = []
    for leaf in pred:  # exact matches first, so a later near miss never takes an exact match's gold value
        if remaining[leaf] > 0:
            remaining[leaf] -= 1
            out.counts["correct"] += 1
        else:
            surplus.append(leaf)
    listed, seen = Counter(gold), set[Leaf]()
    for leaf in surplus:
        # the gold has this value and exact matches used it up, or it repeats an unmatched one: a surplus copy
        duplicate = listed[leaf] > 0 or leaf in seen
        kind, taken = ("duplicate", None) if duplicate else _classify(leaf, remaining, folded)
        seen.add(leaf)
        if taken is not None:
            remaining[taken] -= 1
        out.counts[kind] += 1
        out.examples.setdefault(kind, []).append({"text": text, "field": leaf[0], "value": leaf[1], "gold": taken})
    for leaf, n in remaining.items():
        if n > 0:
            out.counts["missed"] += n
            out.examples.setdefault("missed", []).append({"text": text, "field": leaf[0], "value": leaf[1]})
    return out


def diagnose_all(records: Iterable[Mapping[str, Any]], *, keep: int = 5) -> Diagnosis:
    """Sum :func:`diagnose` over ``{"text", "expected", "predicted"}`` records (``eval --out`` lines)."""
    total = Diagnosis()
    for record in records:
        total.add(diagnose(str(record["text"]), record["expected"], record.get("predicted")), keep=keep)
    return total


def _classify(leaf: Leaf, remaining: Counter[Leaf], text: str) -> tuple[str, Leaf | None]:
    path, value = leaf
    open_gold = [g for g, n in remaining.items() if n > 0]
    for gold in open_gold:
        if gold[1] == value and gold[0] != path:
            return "wrong_field", gold
    for same_field in (True, False):
        for gold in open_gold:
            if (gold[0] == path) == same_field and _overlap(value, gold[1], text):
                return ("boundary" if same_field else "boundary_and_field"), gold
    return "invented", None


def _overlap(a: str, b: str, text: str) -> bool:
    if a in b or b in a:
        return True
    i, j = text.find(a), text.find(b)
    return i >= 0 and j >= 0 and i < j + len(b) and j < i + len(a)


def _empty(data: Any) -> int:
    if isinstance(data, Mapping):
        return sum(_empty(v) if v not in (None, [], {}) else 1 for v in data.values())
    if isinstance(data, list):
        return sum(_empty(v) for v in data)
    return 0


def report_text(diagnosis: Diagnosis) -> str:
    """The kinds as a short table: count and share of the errors."""
    d = diagnosis.as_dict()
    lines = [f"{'kind':20} {'values':>7} {'of errors':>10}", f"{'correct':20} {d['correct']:7d} {'':>10}"]
    for kind, share in d["error_shares"].items():
        lines.append(f"{kind:20} {d[kind]:7d} {share:10.1%}")
    lines.append(f"{'empty lists/nulls':20} {d['empty_values']:7d}")
    return "\n".join(lines)
