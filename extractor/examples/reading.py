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
* **the date order**: a date field whose labels are written in digits (``05/06/2014``) is read
  day-first or month-first as those labels are;
* **how many passages**: one where the place is sure, else the default;
* **the shape of a value** (a field of words, not a typed value): how long its labels run, and the
  words common in the passages that state it which its labels never hold ("Agreement", "Party",
  "between" for a contract's parties): an answer longer by half than the longest label, or holding
  one of those words, is refused as the schema's ``maxLength`` and ``not`` would refuse it; a list
  holds no more items than a labelled passage does (``maxItems``).

A field's learned options fill only what the analyst left unwritten (:func:`learn` gives them;
:mod:`extractor.passages` reads them under the analyst's), and a task whose pool came from
documents reads its long documents field by field.

What is learned is a guess from where labels sit, not a measurement. ``extractor tune --documents``
measures each field's reading among :data:`VARIANTS` (rules applied to the learned options, so a
choice stays right when the pool grows) and ``tuned/<task>.json`` names the one chosen per field.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from extractor.examples.pool import Example, Source
from extractor.schema import types_of

PASSAGE_CHARS = 1600  # a document's passage when read by field: what the sure places are measured in
SURE = 0.8  # the share of documents whose labels sit in a place for the field to be read there alone
STATED = 0.9  # the share of documents stating a field for it to be asked without null
QUERY_WORDS = 8
SHAPED = 20  # a field's labels for the shape of its values to be learned
# The most words an answer may be refused for: the substring grammar negates them (in three cases
# each), and llguidance's lexer ran out of fuel on 14 of 40 Kleister passages with 24 (none with 16).
NOT_WORDS = 12
COMMON = 1 / 3  # the share of a field's passages a word is in for it to be one of those
SHORTEST = 0.02  # the share of a field's labels shorter than the minLength learned from them
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
    examples: Sequence[Example],
    fields: Sequence[str],
    descriptions: Mapping[str, str],
    *,
    worded: Collection[str] = (),
) -> dict[str, dict[str, object]] | None:
    """Per-field ``x-extractor`` reading options from the pool lines that came from labelled documents.

    ``worded``: the fields whose values are the text's words (not typed values): their shape is
    learned too. None when no line came from a document.
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
        # the query is kept where a place is sure too: reading it ranked is one of the variants tune measures
        options: dict[str, object] = {"query": query(passages, seen, name, descriptions.get(name, ""))}
        if stated and at_start >= SURE:
            options.update({"from": "start", "passages": 1})
        elif stated and at_ends / len(stated) >= SURE:
            options.update({"from": ["start", "end"], "passages": 1})
        if len(stated) / len(documents) >= STATED:
            options["expect"] = True
        order = date_order(passages, name)
        if order is not None:
            options["date_order"] = order
        found = shape(passages, name) if name in worded else None
        if found is not None:
            options["shape"] = found
        learned[name] = options
    return learned


def _stated(value: object) -> list[str]:
    return [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str) and v]


def shape(passages: Sequence[Example], name: str) -> dict[str, object] | None:
    """``minLength``, ``maxLength``, ``not_words`` (and a list's ``maxItems``) of a field of words, from its labels.

    None with fewer than :data:`SHAPED` labels. ``minLength``: the length :data:`SHORTEST` of the
    labels are shorter than (a role such as "Company" or a bare "Ken" is shorter than 98 % of
    Kleister's party names). ``not_words``: the words (case aside) in at least :data:`COMMON` of the
    passages stating the field and in none of its labels, the most common first, function words aside
    (a title's "Agreement", "Confidential", "Non" are refused, not "with" or "shall"). ``maxItems``
    (a field whose labels are lists): the most items one passage's labels hold, the bound an expert
    writes (Kleister's parties: 5 in 254 contracts' passages), without which SmolLM2 once listed
    "Company" until the answer was cut at 256, then 512, then 1,024 tokens.
    """
    labels = [v for e in passages for v in _stated(e.output.get(name))]
    if len(labels) < SHAPED:
        return None
    held = [e.text for e in passages if _stated(e.output.get(name))]
    inside = {w.lower() for v in labels for w in _WORD.findall(v)}
    common = Counter(w for text in held for w in {x.lower() for x in _WORD.findall(text)})
    ranked = sorted(common.items(), key=lambda item: (-item[1], item[0]))  # ties in word order: the same every run
    # a function word ("with", "that", "shall") tells no wrong answer from a right one: its place goes to one that does
    never = [w for w, n in ranked if n >= COMMON * len(held) and w not in inside and w not in _STOP][:NOT_WORDS]
    lengths = sorted(len(v) for v in labels)
    found: dict[str, object] = {"maxLength": math.ceil(1.5 * lengths[-1])}
    listed = [len(_stated(e.output.get(name))) for e in passages if isinstance(e.output.get(name), list)]
    if listed:  # a list: no more items than a labelled passage ever holds (a looping answer stops there)
        found["maxItems"] = max(listed)
    if lengths[int(SHORTEST * len(lengths))] > 1:
        found["minLength"] = lengths[int(SHORTEST * len(lengths))]
    if never:
        found["not_words"] = never
    return found


_NUMERIC_DATE = re.compile(r"\b(\d{1,2})[./-](\d{1,2})[./-](\d{2}|\d{4})\b")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


def _labels_in(example: Example, name: str) -> list[tuple[int, int]]:
    """Where in ``example``'s passage each of its document's labels of ``name`` sits, for those inside it."""
    source = example.source
    assert source is not None
    return [
        (label.start - source.start, label.end - source.start)
        for label in source.labels
        if label.field == name and source.start <= label.start and label.end <= source.end
    ]


def date_order(passages: Sequence[Example], name: str) -> str | None:
    """``DMY`` or ``MDY``: how the documents write a date field's labels in digits, where they agree.

    Each placed label written as ``05/06/2014`` is read against the value the pool holds for it
    (``2014-06-05``); None when fewer than :data:`SURE` of those that tell the two apart agree.
    """
    votes: Counter[str] = Counter()
    for example in passages:
        held = example.output.get(name)
        value = _ISO_DATE.fullmatch(held) if isinstance(held, str) else None
        if value is None:
            continue
        month, day = int(value.group(2)), int(value.group(3))
        for start, end in _labels_in(example, name):
            words = _NUMERIC_DATE.search(example.text[start:end])
            if words is None or words.group(1) == words.group(2):
                continue
            first, second = int(words.group(1)), int(words.group(2))
            votes["DMY" if (first, second) == (day, month) else "MDY" if (first, second) == (month, day) else ""] += 1
    votes.pop("", None)
    told = sum(votes.values())
    best = votes.most_common(1)
    return best[0][0] if best and best[0][1] / told >= SURE else None


def of_schema(examples: Sequence[Example], schema: Mapping[str, object]) -> dict[str, dict[str, object]] | None:
    """:func:`learn` for every top-level field of ``schema``, with their descriptions."""
    properties = schema.get("properties")
    nodes = properties if isinstance(properties, Mapping) else {}
    descriptions = {str(k): str(v.get("description") or "") for k, v in nodes.items() if isinstance(v, Mapping)}
    worded = [str(k) for k, v in nodes.items() if _is_worded(v)]
    return learn(examples, list(descriptions), descriptions, worded=worded)


def _is_worded(node: object) -> bool:
    """A string field without a format (or a list of them): its values are the text's own words."""
    if not isinstance(node, Mapping):
        return False
    named = types_of(node)
    if "array" in named:
        return _is_worded(node.get("items"))
    return "string" in named and "format" not in node and "enum" not in node and "const" not in node


# How a field may be read, each a rule over its learned options (:func:`variant`): what tune measures per field.
VARIANTS = ("learned", "ranked", "start", "ends", "unexpected", "plain")


def variant(name: str, learned: Mapping[str, object]) -> dict[str, object]:
    """A field's reading options under the variant ``name`` (one of :data:`VARIANTS`), from its learned ones.

    ``learned``: as the pool taught (its place, query and whether it is expected); ``ranked``: its
    passages ranked by the learned query, three of them; ``start`` / ``ends``: its first two
    passages / its first and last; ``unexpected``: as learned, but null allowed; ``plain``: no
    learned option (the field's own words, the default passages).
    """
    kept = {k: learned[k] for k in ("expect", "date_order", "shape") if k in learned}  # by every variant but plain
    if name == "learned":
        return dict(learned)
    if name == "ranked":
        return ({"query": learned["query"]} if "query" in learned else {}) | {"passages": 3} | kept
    if name == "start":
        return {"from": "start", "passages": 2} | kept
    if name == "ends":
        return {"from": ["start", "end"], "passages": 1} | kept
    if name == "unexpected":
        return {k: v for k, v in learned.items() if k != "expect"}
    if name == "plain":
        return {}
    raise ValueError(f"no reading variant {name!r}; one of {', '.join(VARIANTS)}")


def query(passages: Sequence[Example], seen: Counter[str], name: str, description: str) -> str:
    """The words that announce a field's labels in the pool's passages, with the field's own words.

    ``seen``: how many of the passages hold each word.
    """
    before: Counter[str] = Counter()
    for example in passages:
        for at, _ in _labels_in(example, name):
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
