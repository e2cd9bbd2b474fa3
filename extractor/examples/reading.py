"""How to read a long document, learned per field from a pool of labelled documents. Pure.

An expert reading contracts writes, per field, where to look (``from: start``), what words
announce it (a ``query``), how many passages to read and whether every document states it
(``expect``). Each of those is a fact the labelled pool already holds when its lines were imported
from documents (each line's ``source``: the document, the passage's offsets, every label placed
in the document):

* **where**: a field whose labels sit in the document's first passage in most documents is read
  from the start; one whose labels sit in the first or the last passage, from both ends; any
  other is ranked by its query;
* **the query**: the words that stand before the field's labels across documents, weighed
  against how common they are in the pool's passages (a tf-idf), with the field's own words;
* **expect**: a field the labels state in nearly every document is asked without null;
* **how many passages**: one where the place is sure, else the default.

A field's learned options fill only what the analyst left unwritten (:func:`learn` gives them;
:mod:`extractor.passages` reads them under the analyst's), and a task whose pool came from
documents reads its long documents field by field.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from extractor.examples.pool import Example, Source

PASSAGE_CHARS = 1600  # a document's passage when read by field: what the sure places are measured in
SURE = 0.8  # the share of documents whose labels sit in a place for the field to be read there alone
STATED = 0.9  # the share of documents stating a field for it to be asked without null
QUERY_WORDS = 8
WINDOW_CHARS = 80  # the words before a label that may announce it
_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "this",
        "that",
        "with",
        "from",
        "such",
        "any",
        "all",
        "its",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "been",
        "being",
        "shall",
        "will",
        "would",
        "may",
        "not",
        "but",
        "can",
        "into",
        "than",
        "then",
        "there",
        "their",
        "them",
        "they",
        "which",
        "who",
        "whom",
        "what",
        "when",
        "where",
        "whose",
        "each",
        "other",
    ]
)


def learn(
    examples: Sequence[Example], fields: Sequence[str], descriptions: Mapping[str, str]
) -> dict[str, dict[str, object]] | None:
    """Per-field ``x-extractor`` reading options from the pool lines that came from labelled documents.

    None when no line did.
    """
    documents = sources(examples)
    if not documents:
        return None
    passages = [e for e in examples if e.source is not None]
    seen: Counter[str] = Counter(w for e in passages for w in set(_words(e.text)))  # each word's passages
    learned: dict[str, dict[str, object]] = {}
    for name in fields:
        firsts = [
            (s, min((x for x in s.labels if x.field == name), key=lambda x: x.start, default=None)) for s in documents
        ]
        stated = [(s, label) for s, label in firsts if label is not None]
        at_start = sum(label.start < PASSAGE_CHARS for _, label in stated) / max(1, len(stated))
        at_ends = sum(label.start < PASSAGE_CHARS or label.end > s.length - PASSAGE_CHARS for s, label in stated)
        options: dict[str, object] = {}
        if stated and at_start >= SURE:
            options.update({"from": "start", "passages": 1})
        elif stated and at_ends / len(stated) >= SURE:
            options.update({"from": ["start", "end"], "passages": 1})
        else:
            options["query"] = query(passages, seen, name, descriptions.get(name, ""))
        if len(stated) / len(documents) >= STATED:
            options["expect"] = True
        learned[name] = options
    return learned


def query(passages: Sequence[Example], seen: Counter[str], name: str, description: str) -> str:
    """The words that announce a field's labels in the pool's passages, with the field's own words.

    ``seen``: how many of the passages hold each word.
    """
    before: Counter[str] = Counter()
    for example in passages:
        source = example.source
        assert source is not None
        for label in source.labels:
            if label.field != name or not (source.start <= label.start and label.end <= source.end):
                continue
            at = label.start - source.start
            before.update(set(_words(example.text[max(0, at - WINDOW_CHARS) : at])))
    total = max(1, len(passages))
    scored = {w: n * math.log(total / seen[w]) for w, n in before.items() if seen[w] and n > 1}
    chosen = sorted(scored, key=lambda w: (-scored[w], w))[:QUERY_WORDS]
    own = [w for w in _words(f"{name.replace('_', ' ')} {description}") if w not in chosen]
    return " ".join([*chosen, *own])


def _words(text: str) -> list[str]:
    return [w for w in (m.group(0).casefold() for m in _WORD.finditer(text)) if w not in _STOP]


def sources(examples: Sequence[Example]) -> list[Source]:
    """The distinct documents a pool's lines came from."""
    return list({e.source.document: e.source for e in examples if e.source is not None}.values())
