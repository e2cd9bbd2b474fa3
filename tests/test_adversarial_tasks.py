"""Hostile task files at load time (issue 13, cases 1-5): refs, symlinks, templates, pathological schemas, ReDoS.

Each hostile task sits beside a good one: the hostile one is a load error naming its file (and
pointer), the good one loads and serves, and the load stays within a time and memory bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx
import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.catalog import limits, templating
from extractor.server import create_app

from .live import StubServer

pytestmark = pytest.mark.adversarial

PROMPT = "Extract {{ task.name }}: {% for f in fields %}{{ f.name }} {% endfor %}"


def good_schema(**properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties or {"city": {"type": ["string", "null"], "maxLength": 40}},
        "additionalProperties": False,
    }


def write(root: Path, name: str, schema: Any, prompt: str = PROMPT) -> Path:
    (root / "schemas").mkdir(parents=True, exist_ok=True)
    (root / "prompts").mkdir(parents=True, exist_ok=True)
    path = root / "schemas" / f"{name}.json"
    path.write_text(schema if isinstance(schema, str) else json.dumps(schema), encoding="utf-8")
    (root / "prompts" / f"{name}.j2").write_text(prompt, encoding="utf-8")
    return path


def load_bounded(root: Path, *, seconds: float = 10.0, megabytes: float = 100.0) -> Catalog:
    """Load ``root`` in a thread, failing (not hanging) past ``seconds``; peak Python allocation under ``megabytes``."""
    found: list[Catalog] = []
    tracemalloc.start()
    worker = threading.Thread(target=lambda: found.append(Catalog.load(root)), daemon=True)
    started = time.perf_counter()
    worker.start()
    worker.join(seconds)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    assert not worker.is_alive(), f"the catalog load did not end within {seconds} s"
    assert peak < megabytes, f"the load allocated {peak:.0f} MB at its peak"
    assert found, "the catalog load raised"
    print(f"load: {time.perf_counter() - started:.2f} s, peak {peak:.1f} MB")
    return found[0]


def scripted(tmp_path: Path, engine: ScriptedEngine, catalog: Catalog) -> Extractor:
    return Extractor(settings=Settings.from_env({}, engine="scripted", home=tmp_path), engine=engine, catalog=catalog)


def only_error(catalog: Catalog, name: str) -> Any:
    assert "good" in catalog.tasks, [str(e) for e in catalog.errors]
    errors = [e for e in catalog.errors if Path(e.path).stem == name]
    assert len(errors) == 1, [str(e) for e in catalog.errors]
    return errors[0]


# ---- case 1: $ref that points out of the file, loops, or chains without end ----


def test_refs_out_of_the_file_fetch_and_read_nothing(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    os.mkfifo(secret)  # whoever opens it for reading blocks: a load that read it would never end
    with StubServer() as stub:
        write(tmp_path, "good", good_schema())
        write(tmp_path, "by_file", good_schema(a={"$ref": f"file://{secret}"}))
        write(tmp_path, "by_http", good_schema(a={"$ref": f"{stub.url}/schema.json"}))
        relative = {**good_schema(a={"$ref": "schema.json#/a"}), "$id": f"{stub.url}/root.json"}
        write(tmp_path, "by_id", relative)  # a relative ref resolved against an http $id
        with_meta = {**good_schema(), "$schema": f"{stub.url}/draft/2020-12/schema"}
        write(tmp_path, "by_meta", with_meta)
        catalog = load_bounded(tmp_path, seconds=10)
        assert stub.connections == 0 and stub.requests == []
    for name in ("by_file", "by_http", "by_id"):
        error = only_error(catalog, name)
        assert error.pointer == "#/properties/a/$ref" and "outside this schema" in error.reason
    assert "by_meta" in catalog.tasks or only_error(catalog, "by_meta")  # a $schema URI is a name, never fetched
    assert stub.connections == 0


@pytest.mark.parametrize(
    ("name", "schema", "pointer", "words"),
    [
        ("up", good_schema(a={"$ref": "#/../.."}), "#/properties/a/$ref", "does not resolve"),
        (
            "loop",
            {**good_schema(a={"$ref": "#/$defs/x"}), "$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}}},
            "#/properties/a/$ref",
            "cycle",
        ),
        (
            "loop_all_of",
            {**good_schema(a={"$ref": "#/$defs/x"}), "$defs": {"x": {"allOf": [{"$ref": "#/$defs/x"}]}}},
            "#/$defs/x/allOf/0/$ref",
            "loops back",
        ),
        (
            "chain",
            {
                **good_schema(a={"$ref": "#/$defs/d0"}),
                "$defs": {**{f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(1000)}, "d1000": {"type": "string"}},
            },
            "#/properties/a/$ref",
            f"more than {limits.MAX_REF_CHAIN} $refs",
        ),
        (
            "chain_all_of",
            {
                **good_schema(a={"$ref": "#/$defs/d0"}),
                "$defs": {**{f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}]} for i in range(1000)}, "d1000": {}},
            },
            None,
            "once $refs are followed",
        ),
    ],
)
def test_bad_refs_are_load_errors_naming_file_and_pointer(
    tmp_path: Path, name: str, schema: dict[str, Any], pointer: str | None, words: str
) -> None:
    write(tmp_path, "good", good_schema())
    path = write(tmp_path, name, schema)
    error = only_error(load_bounded(tmp_path), name)
    assert error.path == str(path)
    assert words in error.reason
    if pointer is not None:
        assert error.pointer == pointer
    else:
        assert error.pointer.startswith("#/")


def test_recursion_through_items_still_loads(tmp_path: Path) -> None:
    node = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "parts": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3},
        },
    }
    write(tmp_path, "good", {**good_schema(root={"$ref": "#/$defs/node"}), "$defs": {"node": node}})
    catalog = load_bounded(tmp_path)
    assert "good" in catalog.tasks, [str(e) for e in catalog.errors]


# ---- case 2: symlinks out of the catalog root ----


def test_symlinks_out_of_the_catalog_are_not_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "catalog", tmp_path / "outside"
    write(root, "good", good_schema())
    write(outside, "linked_schema", good_schema())
    write(outside, "linked_prompt", good_schema())
    (root / "schemas" / "linked_schema.json").symlink_to(outside / "schemas" / "linked_schema.json")
    (root / "prompts" / "linked_schema.j2").write_text(PROMPT)
    (root / "schemas" / "linked_prompt.json").write_text(json.dumps(good_schema()))
    (root / "prompts" / "linked_prompt.j2").symlink_to(outside / "prompts" / "linked_prompt.j2")
    (root / "examples").mkdir()
    (outside / "pool.jsonl").write_text('{"text": "Paris", "output": {"city": "Paris"}}\n')
    (root / "schemas" / "linked_pool.json").write_text(json.dumps(good_schema()))
    (root / "prompts" / "linked_pool.j2").write_text(PROMPT)
    (root / "examples" / "linked_pool.jsonl").symlink_to(outside / "pool.jsonl")
    inside = root / "shared.j2"
    inside.write_text(PROMPT)
    (root / "schemas" / "linked_inside.json").write_text(json.dumps(good_schema()))
    (root / "prompts" / "linked_inside.j2").symlink_to(inside)  # a link that stays inside is fine
    catalog = load_bounded(root)
    for name, file in [
        ("linked_schema", "schemas/linked_schema.json"),
        ("linked_prompt", "prompts/linked_prompt.j2"),
        ("linked_pool", "examples/linked_pool.jsonl"),
    ]:
        error = only_error(catalog, name)
        assert error.path == str(root / file) and "outside the catalog root" in error.reason
    assert "linked_inside" in catalog.tasks


# ---- case 3: hostile templates ----

HOSTILE_TEMPLATES = {
    "mro": "{{ ''.__class__.__mro__ }}",
    "globals": "{{ cycler|attr('__init__')|attr('__globals__') }}",
    "big_range": "{% for i in range(10**9) %}x{% endfor %}",
    "big_string": "{{ 'x' * 10**9 }}",
    "nested_loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "recursive_macro": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "doubling_macro": "{% macro f(s) %}{{ f(s ~ s) }}{% endmacro %}{{ f('x') }}",
    "padding": "{{ 'x'|center(10**9) }}{{ '%999999999s' % 'x' }}",
    "format_padding": "{{ '{:>999999999}'.format('x') }}",
    "accumulate": "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "replace": "{{ ('x' * 100000)|replace('x', 'y' * 100000) }}",
    "join": "{{ range(100000)|join('z' * 100000) }}",
    "map_join": "{{ range(100000)|map('string')|join('z' * 100000) }}",
    "indent": "{{ ('a\n' * 100000)|indent(100000) }}",
    "mutate": "{% set l = [] %}{% for i in range(100000) %}{{ l.append(l) }}{% endfor %}",
}


def test_hostile_templates_fail_the_load_within_a_bound_and_others_serve(tmp_path: Path) -> None:
    write(tmp_path, "good", good_schema())
    for name, source in HOSTILE_TEMPLATES.items():
        write(tmp_path, name, good_schema(), prompt=source)
    started = time.perf_counter()
    catalog = load_bounded(tmp_path, seconds=30, megabytes=100)
    elapsed = time.perf_counter() - started
    assert set(catalog.tasks) == {"good"}
    for name in HOSTILE_TEMPLATES:
        error = only_error(catalog, name)
        assert error.path.endswith(f"prompts/{name}.j2") and "template does not render" in error.reason
    # every render is stopped at the time bound (two renders per template at load)
    assert elapsed < 2 * templating.MAX_RENDER_S * 2 + 10
    engine = ScriptedEngine(['{"city": "Paris"}'])
    extractor = Extractor(
        settings=Settings.from_env({}, engine="scripted", home=tmp_path), engine=engine, catalog=catalog
    )

    async def call() -> httpx.Response:
        app = create_app(extractor)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.post("/extract/good", json={"text": "I live in Paris."})

    response = asyncio.run(call())
    assert response.status_code == 200 and response.json()["data"] == {"city": "Paris"}


@pytest.mark.parametrize("name", sorted(HOSTILE_TEMPLATES))
def test_each_hostile_template_is_stopped_in_time_and_memory(name: str) -> None:
    template = templating.environment().from_string(HOSTILE_TEMPLATES[name])
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(Exception) as caught:
        template.render(fields=[], text="x")
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    assert elapsed < templating.MAX_RENDER_S + 1.0, elapsed
    assert peak < 50, f"{peak:.0f} MB"
    assert not isinstance(caught.value, MemoryError)


def test_the_shipped_templates_render_under_the_bounds(catalog: Catalog) -> None:
    assert not catalog.errors and len(catalog.tasks) >= 9


# ---- case 4: pathological schemas ----


def nested(key: str, depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string", "maxLength": 10}
    for _ in range(depth):
        node = {key: [node, {"type": "integer"}]}
    return node


@pytest.mark.parametrize(
    ("name", "schema", "pointer", "words"),
    [
        (
            "one_of_10",  # under strict_enforcement; by default decoded as anyOf and checked after generation
            {**good_schema(a=nested("oneOf", 10)), "x-extractor": {"strict_enforcement": True}},
            "#/properties/a/oneOf",
            "oneOf",
        ),
        ("enum_100k", good_schema(a={"enum": [f"v{i}" for i in range(100_000)]}), "#/properties/a/enum", "100000"),
        ("five_mb", {**good_schema(), "description": "x" * 5_000_000}, "", "over the limit"),
        ("min_length", good_schema(a={"type": "string", "minLength": 10**12}), "#/properties/a/minLength", "limit"),
        ("max_items", good_schema(a={"type": "array", "maxItems": 10**9}), "#/properties/a/maxItems", "limit"),
        (
            "long_pattern",  # look-around and backreferences load (checked after generation, bounded in time)
            good_schema(a={"type": "string", "pattern": "(?=a)" + "a?" * 20_000}),
            "#/properties/a/pattern",
            "characters",
        ),
        ("deep_json", '{"type": "object", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "", "nests deeper"),
        (
            "laughs",  # 2**40 subschemas once the refs are followed
            {
                **good_schema(a={"$ref": "#/$defs/l0"}),
                "$defs": {
                    **{
                        f"l{i}": {"anyOf": [{"$ref": f"#/$defs/l{i + 1}"}, {"$ref": f"#/$defs/l{i + 1}"}]}
                        for i in range(40)
                    },
                    "l40": {"type": "string"},
                },
            },
            None,
            "subschemas",
        ),
    ],
)
def test_pathological_schemas_are_rejected_by_a_stated_limit(
    tmp_path: Path, name: str, schema: Any, pointer: str | None, words: str
) -> None:
    write(tmp_path, "good", good_schema())
    write(tmp_path, name, schema)
    error = only_error(load_bounded(tmp_path, seconds=10), name)
    assert words in error.reason, error.reason
    if pointer is not None:
        assert error.pointer == pointer


def test_bounded_pathological_schemas_compile_at_load_within_a_bound(tmp_path: Path) -> None:
    write(tmp_path, "good", good_schema())
    write(tmp_path, "any_of_10", good_schema(a=nested("anyOf", 10)))
    write(tmp_path, "catastrophic", good_schema(a={"type": "string", "pattern": "^(a+)+$"}))
    write(tmp_path, "enum_5000", good_schema(a={"enum": [f"v{i}" for i in range(5000)]}))  # JSON Schema Store has such
    # decoded as the longest string an answer holds; the schema's own bound is checked after (it always holds)
    write(tmp_path, "max_length", good_schema(a={"type": "string", "maxLength": 10**12}))
    write(tmp_path, "one_of_10", good_schema(a=nested("oneOf", 10)))
    # patterns RE2 cannot run: checked after generation only, each match bounded in time
    write(tmp_path, "lookahead", good_schema(a={"type": "string", "pattern": "^(?=a)a+$"}))
    write(tmp_path, "backref", good_schema(a={"type": "string", "pattern": "^(a)\\1$"}))
    # a schema of schemas (the draft-07 meta-schema's shape): each property refers back to the root
    recursive = {"type": "object", "properties": {f"p{i}": {"$ref": "#"} for i in range(12)}, "x-grounded": False}
    write(
        tmp_path, "recursive", {**recursive, "properties": {**recursive["properties"], "x": {"items": {"$ref": "#"}}}}
    )
    started = time.perf_counter()
    catalog = load_bounded(tmp_path, seconds=20)
    loaded = {"any_of_10", "catastrophic", "enum_5000", "one_of_10", "recursive", "lookahead", "backref", "max_length"}
    assert loaded <= set(catalog.tasks), [str(e) for e in catalog.errors]
    assert catalog.get("max_length").engine_schema["properties"]["a"]["maxLength"] == 100_000
    assert any("maxLength 1000000000000 is decoded as 100000" in w for w in catalog.get("max_length").warnings)
    assert time.perf_counter() - started < 3 * limits.MAX_COMPILE_S


# ---- case 5: ReDoS at validation ----


def test_a_backtracking_pattern_validates_in_linear_time(tmp_path: Path) -> None:
    evil = "a" * 40 + "!"
    write(tmp_path, "good", good_schema())
    write(
        tmp_path,
        "redos",
        {
            "type": "object",
            "properties": {"word": {"type": "string", "pattern": "^(a+)+$", "maxLength": 100}},
            "patternProperties": {"^(b+)+$": {"type": "string"}},
            "additionalProperties": False,
            "x-extractor": {"allow_unenforced": True},  # patternProperties is checked after generation only
        },
    )
    catalog = load_bounded(tmp_path)
    task = catalog.get("redos")
    started = time.perf_counter()
    errors = list(task.validator.iter_errors({"word": evil, "b" * 40 + "!": "x"}))
    assert time.perf_counter() - started < 0.1
    assert len(errors) == 2  # the pattern fails, and the key matches no pattern: both found, at once
    engine = ScriptedEngine([json.dumps({"word": evil})] * 3 + ['{"city": "Paris"}'])
    extractor = Extractor(
        settings=Settings.from_env({}, engine="scripted", home=tmp_path), engine=engine, catalog=catalog
    )

    async def both() -> tuple[httpx.Response, httpx.Response, float]:
        app = create_app(extractor)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            started = time.perf_counter()
            hostile = await client.post("/extract/redos", json={"text": f"the word is {evil}"})
            other = await client.post("/extract/good", json={"text": "I live in Paris."})
            return hostile, other, time.perf_counter() - started

    hostile, other, seconds = asyncio.run(both())
    assert hostile.status_code == 422 and "does not match" in hostile.text
    assert len(hostile.json()["attempts"]) == 3
    assert other.status_code == 200
    assert seconds < 2.0
