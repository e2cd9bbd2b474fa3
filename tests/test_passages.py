"""Long documents read field by field (extractor.passages), on the scripted engine."""

from __future__ import annotations

import json
from pathlib import Path

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.engines.base import GenerationRequest
from extractor.passages import FieldQuery, choose, rank

FILLER = "The Recipient shall hold the Confidential Information in strict confidence and use it only for the Purpose. "
TEXT = (
    "THIS AGREEMENT is made as of May 20, 2014 by and between Acme Widgets, Inc. and Beta Labs LLC. "
    + FILLER * 12
    + "This Agreement shall be governed by the laws of the State of New York. "
    + FILLER * 12
    + "The obligations hereunder shall survive for a period of three (3) years. "
    + FILLER * 6
)
SCHEMA = {
    "type": "object",
    "properties": {
        "party": {"type": "array", "items": {"type": "string"}, "x-extractor": {"from": "start", "passages": 1}},
        "effective_date": {"type": ["string", "null"], "format": "date", "x-extractor": {"from": "start"}},
        "jurisdiction": {"type": ["string", "null"], "x-extractor": {"query": "governed by the laws of the State of"}},
        "term": {"type": ["string", "null"], "format": "duration", "x-extractor": {"query": "period of years survive"}},
    },
    "required": ["party", "effective_date", "jurisdiction", "term"],
    "x-extractor": {"chunking": {"max_chars": 600, "overlap": 100, "by_field": True}},
}
ANSWERS = {
    "party": ("Acme Widgets", {"party": ["Acme Widgets, Inc.", "Beta Labs LLC"]}),
    "effective_date": ("May 20, 2014", {"effective_date": "May 20, 2014"}),
    "jurisdiction": ("State of New York", {"jurisdiction": "New York"}),
    "term": ("three (3) years", {"term": "three (3) years"}),
}


def respond(request: GenerationRequest) -> str:
    passage = request.messages[-1]["content"]
    schema = json.dumps(request.json_schema or {}) + (request.grammar or "")
    for name, (needle, answer) in ANSWERS.items():
        if f'"{name}"' in schema or name in schema:
            if name == "jurisdiction" and "Beta Labs" in passage:
                return "not json at all {"  # a passage that never answers: it must not fail the document
            return json.dumps(answer if needle in passage else {name: [] if name == "party" else None})
    raise AssertionError("a one-field request was expected")


def test_bm25_ranks_the_passage_about_the_query_first() -> None:
    passages = ["parties and recitals", "governed by the laws of the State of Delaware", "term of two years"]
    assert rank(passages, "governing law: governed by the laws of the State", 1) == [1]
    assert rank(passages, "", 2) == [0, 1]


def test_a_field_reads_each_of_its_places_in_turn() -> None:
    texts = [f"passage {i}" for i in range(6)]
    both = FieldQuery("effective_date", "date", k=1, merge="rank", where=("start", "end"))
    assert choose(both, texts) == [0, 5]  # the top first, then under the signatures
    assert choose(FieldQuery("party", "", k=2, merge="rank", where=("end",)), texts) == [5, 4]
    assert choose(FieldQuery("x", "", k=4, merge="rank", where=("start", "end")), texts[:3]) == [0, 1, 2]


async def test_each_field_from_its_own_passages(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "schemas" / "nda.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "prompts" / "nda.j2").write_text("Answer with the fields of the contract.")
    engine = ScriptedEngine(respond=respond)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(tmp_path))
    result = await extractor.aextract("nda", TEXT)
    assert result.data == {
        "party": ["Acme Widgets, Inc.", "Beta Labs LLC"],
        "effective_date": "2014-05-20",
        "jurisdiction": "New York",
        "term": "P3Y",
    }
    # every request asked one field, of one passage, not the whole document
    assert all(len(r.messages[-1]["content"]) <= 600 for r in engine.history)
    assert len(engine.history) <= 2 * 4 + 6  # at most two passages a field, and re-asks
    spans = {s.path: s for s in result.spans}
    assert TEXT[spans["/jurisdiction"].start : spans["/jurisdiction"].end] == "New York"
    date = spans["/effective_date"]
    assert TEXT[date.start : date.end] == "May 20, 2014" and date.normalized == "2014-05-20"
    assert len(result.chunks) > 3


def _catalog(tmp_path: Path) -> Path:
    root = tmp_path / "catalog"
    (root / "schemas").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "schemas" / "nda.json").write_text(json.dumps(SCHEMA))
    (root / "prompts" / "nda.j2").write_text("Answer with the fields of the contract.")
    return root


def _pooled_catalog(tmp_path: Path) -> Path:
    """The contract task with a pool imported from one labelled DOCX (its passages, in their own words)."""
    from extractor.examples.importing import import_gold

    from .documents import docx_bytes

    root = _catalog(tmp_path)
    (tmp_path / "nda.docx").write_bytes(docx_bytes([p + "." for p in TEXT.split(". ") if p]))
    label = {"party": ["Acme Widgets Inc."], "effective_date": "2014-05-20", "jurisdiction": "New York", "term": None}
    (tmp_path / "gold.jsonl").write_text(json.dumps({"file": "nda.docx", "expected": label}) + "\n")
    lines, _ = import_gold(tmp_path / "gold.jsonl", Catalog.load(root).get("nda"))
    (root / "examples").mkdir()
    (root / "examples" / "nda.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def test_labelled_documents_become_passages_in_their_own_words(tmp_path: Path) -> None:
    from extractor.examples.importing import import_gold

    from .documents import docx_bytes

    root = _catalog(tmp_path)
    (tmp_path / "nda.docx").write_bytes(docx_bytes([p + "." for p in TEXT.split(". ") if p]))
    label = {"party": ["Acme Widgets Inc.", "Nobody Else Corp."], "effective_date": "2014-05-20", "term": "3 years"}
    label["jurisdiction"] = "New York"
    (tmp_path / "gold.jsonl").write_text(json.dumps({"file": "nda.docx", "expected": label}) + "\n")
    lines, report = import_gold(tmp_path / "gold.jsonl", Catalog.load(root).get("nda"))
    assert report.documents == 1 and report.placed == 4
    assert report.unplaced == ["nda.docx: party: 'Nobody Else Corp.'"]
    first = lines[0]
    assert first["output"]["party"][0].startswith("Acme Widgets, Inc")  # the document's words, not the label's
    assert first["output"]["effective_date"] == "2014-05-20"
    assert all(len(line["text"]) <= 600 for line in lines)  # passages, not the whole document
    terms = [line["output"]["term"] for line in lines if line["output"]["term"]]
    assert terms == ["P3Y"]  # "3 years" placed on "three (3) years", typed
    assert sum(1 for line in lines if not any(line["output"].values())) == 1  # one passage stating nothing


def test_gold_lines_may_name_documents(tmp_path: Path) -> None:
    from extractor.jobs.gold import load_gold

    from .documents import docx_bytes

    (tmp_path / "nda.docx").write_bytes(docx_bytes(["Governed by the laws of the State of New York."]))
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"file": "nda.docx", "task": "nda", "expected": {"jurisdiction": "New York"}}) + "\n")
    items = load_gold(gold, task=None, known=["nda"])
    assert "State of New York" in items[0].text


def test_an_expected_field_is_asked_for_a_value(tmp_path: Path) -> None:
    from extractor.passages import field_task

    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["party"]["x-extractor"]["expect"] = True
    schema["properties"]["effective_date"]["x-extractor"]["expect"] = True
    empty = {"party": [], "effective_date": None, "jurisdiction": None, "term": None}
    schema["x-extractor"]["examples"] = [{"text": "Nothing here.", "output": empty}]
    root = tmp_path / "c"
    (root / "schemas").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "schemas" / "nda.json").write_text(json.dumps(schema))
    (root / "prompts" / "nda.j2").write_text("Answer.")
    task = Catalog.load(root).get("nda")
    party = field_task(task, "party").engine_schema["properties"]["party"]
    assert party["minItems"] == 1
    assert field_task(task, "effective_date").engine_schema["properties"]["effective_date"]["type"] == "string"
    assert field_task(task, "party").examples == ()  # the example stating nothing is not shown for it
    assert field_task(task, "term").engine_schema["properties"]["term"]["type"] == ["string", "null"]


async def test_a_value_the_whole_schema_refuses_is_left_out_not_the_document(tmp_path: Path) -> None:
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["party"]["items"]["not"] = {"pattern": "AGREEMENT"}  # checked on the whole answer
    (tmp_path / "schemas").mkdir()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "schemas" / "nda.json").write_text(json.dumps(schema))
    (tmp_path / "prompts" / "nda.j2").write_text("Answer with the fields of the contract.")

    def with_a_title(request: GenerationRequest) -> str:
        if "party" in json.dumps(request.json_schema or {}) + (request.grammar or ""):
            return json.dumps({"party": ["THIS AGREEMENT", "Acme Widgets, Inc."]})
        return respond(request)

    engine = ScriptedEngine(respond=with_a_title)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(tmp_path))
    result = await extractor.aextract("nda", TEXT)
    assert result.data["party"] == ["Acme Widgets, Inc."] and result.data["jurisdiction"] == "New York"
    assert any(n.startswith("/party/0: ") and n.endswith("left out") for n in result.notes)
    party = next(s for s in result.spans if s.path == "/party/0")
    assert TEXT[party.start : party.end] == "Acme Widgets, Inc."
    assert not any(s.path == "/party/1" for s in result.spans)


async def test_a_list_no_passage_answers_is_empty_not_a_failed_document(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "schemas" / "nda.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "prompts" / "nda.j2").write_text("Answer with the fields of the contract.")

    def never_the_parties(request: GenerationRequest) -> str:
        if "party" in json.dumps(request.json_schema or {}) + (request.grammar or ""):
            return "not json at all {"  # every attempt at every passage of the parties fails
        return respond(request)

    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    engine = ScriptedEngine(respond=never_the_parties)
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(tmp_path))
    result = await extractor.aextract("nda", TEXT)
    assert result.data["party"] == [] and result.data["jurisdiction"] == "New York"
    assert any(n.startswith("/party: no valid answer from passage 0") for n in result.notes)


async def test_an_adapter_trained_by_field_learns_and_serves_the_field_requests_only(tmp_path: Path) -> None:
    from extractor.adapters import manifest
    from extractor.jobs.adapting import field_tasks
    from extractor.training import data

    root = _pooled_catalog(tmp_path)
    task = Catalog.load(root).get("nda")

    lines = [json.loads(x) for x in (root / "examples" / "nda.jsonl").read_text().splitlines()]
    # The training chats: one field over one passage each, as serving asks for it
    samples, refused = data.samples(task, fields=field_tasks(task))
    assert not refused and samples
    answers = [json.loads(s.answer) for s in samples]
    assert all(len(a) == 1 for a in answers)
    assert {"effective_date": "May 20, 2014"} in answers  # the words of the text, as the model writes a typed value
    assert sum(1 for a in answers if "party" in a) >= 1
    stating = sum(1 for line in lines if any(line["output"].values()))
    assert len(samples) >= stating and len({s.line for s in samples}) == len(lines)  # null passages teach null too
    assert all(len(s.messages[-1]["content"]) < 1200 for s in samples)  # a passage, not the document
    document = lines[0]["source"]["document"]
    assert data.samples(task, fields=field_tasks(task), documents={document})[0] == []  # held-out documents stay out

    # Served: the field requests go through the adapter, a short text's whole answer through the base model
    folder = root / "adapters" / "nda"
    folder.mkdir(parents=True)
    entry = {"template_sha256": task.fingerprint(), "requests": manifest.BY_FIELD}
    record = {"format": manifest.FORMAT, "tasks": {"nda": entry}}
    (folder / manifest.MANIFEST).write_text(json.dumps(record))
    served = Catalog.load(root).get("nda")
    assert served.adapter == folder and served.adapter_by_field
    engine = ScriptedEngine(respond=respond)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
    result = await extractor.aextract("nda", TEXT)
    assert result.data["effective_date"] == "2014-05-20", result.data
    assert engine.history and {r.adapter for r in engine.history} == {str(folder)}
    short = ScriptedEngine(respond=lambda _: json.dumps({k: [] if k == "party" else None for k in ANSWERS}))
    extractor = Extractor(settings=settings, engine=short, catalog=Catalog.load(root))
    await extractor.aextract("nda", "Nothing of a contract here.")
    assert [r.adapter for r in short.history] == [None]


async def test_a_passage_read_by_field_yields_its_worked_examples_not_its_size_to_the_window(tmp_path: Path) -> None:
    # One worked example too long for the window beside any passage: the passages keep the task's
    # max_chars (checked without examples), and each field request is read without the example, with a note.
    root = _catalog(tmp_path)
    (root / "examples").mkdir()
    output = {"party": ["Gamma Corp."], "effective_date": None, "jurisdiction": None, "term": None}
    long_example = {"text": FILLER * 30 + "Made by Gamma Corp.", "output": output}
    (root / "examples" / "nda.jsonl").write_text(json.dumps(long_example) + "\n")
    engine = ScriptedEngine(respond=respond, max_model_len=1200)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
    assert extractor.catalog.get("nda").uses_pool
    result = await extractor.aextract("nda", TEXT)
    assert result.data["party"] == ["Acme Widgets, Inc.", "Beta Labs LLC"] and result.data["term"] == "P3Y"
    assert all(c.end - c.start <= 600 for c in result.chunks) and len(result.chunks) < 12  # not shrunk
    assert any(n.startswith("worked examples left out: with them the prompt") for n in result.notes)
    assert not any("Gamma Corp." in m["content"] for r in engine.history for m in r.messages)


async def test_each_fields_pool_index_and_answers_are_made_while_the_engine_starts(tmp_path: Path) -> None:
    """The first document of a task read by field does not build its fields' pool indexes, nor render
    its worked examples' typed answers (dateparser over each example's text): the start did."""
    from extractor import passages
    from extractor.catalog import prompting

    root = _pooled_catalog(tmp_path)
    catalog = Catalog.load(root)
    task = catalog.get("nda")
    assert task.reads_by_field
    extractor = Extractor(settings=Settings.from_env({}, tasks_dir=root), catalog=catalog, engine=ScriptedEngine())
    await extractor.astart()
    before = passages.field_task.cache_info()
    for name in task.schema["properties"]:
        passages.field_task(task, name)
    after = passages.field_task.cache_info()
    assert after.hits - before.hits == len(task.schema["properties"]) and after.misses == before.misses
    dated = passages.field_task(task, "effective_date")
    assert dated.values and dated.pool is not None and len(dated.pool.examples)
    rendered = prompting._answer.cache_info()
    for example in dated.pool.examples:
        shown = prompting.answer(dated, example.text, example.output)
        assert "2014-05-20" not in shown  # the date as the example's words state it, not as labelled
    assert prompting._answer.cache_info().misses == rendered.misses  # all rendered at the start


async def test_a_typed_field_is_not_asked_of_a_passage_that_states_no_value_of_its_kind(tmp_path: Path) -> None:
    root = _catalog(tmp_path)
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted")
    for expect in (True, False):
        schema = json.loads(json.dumps(SCHEMA))
        own = {"from": ["start", "end"], "passages": 1, "expect": expect}
        schema["properties"]["effective_date"]["x-extractor"] = own
        (root / "schemas" / "nda.json").write_text(json.dumps(schema))
        engine = ScriptedEngine(respond=respond)
        extractor = Extractor(settings=settings, engine=engine, catalog=Catalog.load(root))
        result = await extractor.aextract("nda", TEXT)
        assert result.data["effective_date"] == "2014-05-20"
        # the last passage states no date: it is not asked (the first is)
        [dated] = [r.messages[-1]["content"] for r in engine.history if '\\"effective_date\\"' in (r.grammar or "")]
        assert "May 20, 2014" in dated
        # where the field may not be null, the passage fails at once and says why; else its answer is null
        failed = [n for n in result.notes if "states no date, and /effective_date may not be null: not asked" in n]
        assert len(failed) == (1 if expect else 0), result.notes
