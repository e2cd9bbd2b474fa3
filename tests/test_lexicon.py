"""The pool's labelled values found again in a text, and shown to the model as hints."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from extractor.catalog.prompting import HINTS_INTRO, render
from extractor.catalog.tasks import Catalog
from extractor.examples.lexicon import Lexicon
from extractor.training.data import samples

POOL = [
    {"company": ["招商银行"], "name": ["王立新"]},
    {"company": ["招商银行"]},
    {"organization": ["招商银行"], "address": ["深圳"]},
    {"game": ["Dota"], "name": ["Art"]},
]


def test_values_are_found_leftmost_longest_with_their_most_frequent_field() -> None:
    lexicon = Lexicon.build(POOL)
    hints = lexicon.find("深圳招商银行的王立新")
    assert [(h.value, h.field, h.start) for h in hints] == [
        ("深圳", "/address", 0),
        ("招商银行", "/company", 2),
        ("王立新", "/name", 7),
    ]


def test_spaced_words_match_whole_and_short_values_are_not_kept() -> None:
    lexicon = Lexicon.build([*POOL, {"name": ["王"]}])
    assert [h.value for h in lexicon.find("A party at Art Basel with Dota2 and Dota")] == ["Art", "Dota"]
    assert lexicon.find("王") == []


def test_a_line_left_out_of_its_own_hints() -> None:
    lexicon = Lexicon.build(POOL)
    # The first line alone labelled 王立新: without it, nothing is known of that name.
    assert [h.value for h in lexicon.find("王立新在招商银行", without=[POOL[0]])] == ["招商银行"]
    # 招商银行: company twice, organization once; without one company line it is a tie, first labelled wins.
    assert lexicon.find("招商银行", without=[POOL[0]])[0].field == "/company"


def _catalog(tmp_path: Path, hints: bool) -> Catalog:
    for sub in ("schemas", "prompts", "examples"):
        (tmp_path / sub).mkdir()
    props = {k: {"type": "array", "items": {"type": "string"}} for k in ("company", "name", "address", "organization")}
    schema = {
        "type": "object",
        "properties": props,
        "additionalProperties": False,
        "x-extractor": {"examples_from_pool": {"k": 1, "hints": hints}},
    }
    (tmp_path / "schemas" / "ents.json").write_text(json.dumps(schema), encoding="utf-8")
    (tmp_path / "prompts" / "ents.j2").write_text("找出实体。", encoding="utf-8")
    lines = [
        {"text": "招商银行总经理王立新", "output": POOL[0]},
        {"text": "招商银行在深圳", "output": {"company": ["招商银行"], "address": ["深圳"]}},
    ]
    pool = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    (tmp_path / "examples" / "ents.jsonl").write_text(pool, encoding="utf-8")
    return Catalog.load(tmp_path)


def test_the_request_and_its_examples_carry_hints_when_the_task_asks(tmp_path: Path) -> None:
    task = _catalog(tmp_path, hints=True).get("ents")
    chat = render(task, "王立新去了深圳")
    assert chat[-1]["content"].endswith(f'{HINTS_INTRO} {{"name":["王立新"],"address":["深圳"]}}')
    # the worked example's hints leave its own line out: 王立新 was labelled by that line alone
    example = chat[1]["content"]
    assert example == f'招商银行总经理王立新\n\n{HINTS_INTRO} {{"company":["招商银行"]}}'
    (tmp_path / "off").mkdir()
    assert HINTS_INTRO not in render(_catalog(tmp_path / "off", hints=False).get("ents"), "王立新")[-1]["content"]


def test_training_samples_get_the_hints_a_new_text_would_get(tmp_path: Path) -> None:
    found, refused = samples(_catalog(tmp_path, hints=True).get("ents"))
    assert not refused
    first = found[0].messages
    assert len(first) == 2  # system and request: an adapter sees no worked examples
    assert first[-1]["content"].endswith(f'{HINTS_INTRO} {{"company":["招商银行"]}}')


def test_the_indexed_scan_finds_what_trying_every_length_at_every_place_finds() -> None:
    """The scan tries only the lengths of values starting with the two characters at hand: same hints as all."""
    import random

    from extractor.examples.lexicon import MIN_CHARS, Hint, _bounded

    rng = random.Random(7)
    words = ["Acme", "Acme Inc", "Inc", "New York", "New", "York City", "招商", "招商银行", "ab", "abc", "b c"]
    pool = [{"party": rng.sample(words, 3)} for _ in range(20)] + [{"law": ["New York", "ab"]}]
    lexicon = Lexicon.build(pool)
    without = {"party": ["Acme Inc"]}
    own = Counter((f"/{k}", v) for k, vs in without.items() for v in vs)

    longest = max(map(len, lexicon.fields))

    def every_length(text: str) -> list[Hint]:
        hints, i = [], 0
        while i < len(text):
            for j in range(min(len(text), i + longest), i + MIN_CHARS - 1, -1):
                label = lexicon._label(text[i:j], own)
                if label is not None and _bounded(text, i, j):
                    hints.append(Hint(text[i:j], label, i))
                    i = j
                    break
            else:
                i += 1
        return hints

    for _ in range(200):
        text = "".join(rng.choice([*words, " ", ", ", "x", "招", "银行"]) for _ in range(rng.randint(0, 30)))
        assert lexicon.find(text, without=[without]) == every_length(text)


def test_a_passage_shown_as_an_example_gets_no_hint_from_its_own_documents_other_passages() -> None:
    """Two passages of one contract both name Sybase: leaving out the shown line alone would still hint it."""
    from extractor.examples.pool import Example, ExamplePool, Source
    from extractor.examples.selection import Selector

    lines = [
        Example("Sybase, Inc. and SAP AG agree.", {"party": ["Sybase, Inc.", "SAP AG"]}, 1, Source("d1", 0, 30, 90)),
        Example("Sybase, Inc. shall pay.", {"party": ["Sybase, Inc."]}, 2, Source("d1", 60, 83, 90)),
        Example("SAP AG and Acme LLC agree.", {"party": ["SAP AG", "Acme LLC"]}, 3, Source("d2", 0, 26, 26)),
    ]
    pool = ExamplePool(Path("pool.jsonl"), tuple(lines), Selector([e.text for e in lines]))
    lexicon = Lexicon.build(e.output for e in lines)
    assert [h.value for h in lexicon.find(lines[0].text, without=[lines[0].output])] == ["Sybase, Inc.", "SAP AG"]
    assert pool.outputs_of("d1") == (lines[0].output, lines[1].output) and pool.outputs_of("d3") == ()
    assert [h.value for h in lexicon.find(lines[0].text, without=pool.outputs_of("d1"))] == ["SAP AG"]
