"""Catalog reload: versions, last good versions, one version per request, the HTTP and metrics side."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from extractor import Extractor, ScriptedEngine, Settings
from extractor.catalog.reload import fingerprint, load_catalog, rebuild
from extractor.engines.base import GenerationRequest
from extractor.server import create_app

from .test_server import metric

PROBE_PROMPT = "Template version {k}. Fill the fields: {{% for f in fields %}}{{{{ f.name }}}} {{% endfor %}}"


def probe_schema(k: int) -> dict[str, Any]:
    """A task whose answer must name version ``k``: a schema of one edit with a template of another fails."""
    return {
        "type": "object",
        "description": f"probe, schema version {k}",
        "properties": {"version": {"type": "string", "enum": [str(k)], "x-grounded": False}},
        "required": ["version"],
        "additionalProperties": False,
        "x-extractor": {"max_attempts": 1},
    }


def write(path: Path, text: str) -> None:
    """Write like an editor that saves atomically (temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)


def write_probe(root: Path, k: int, name: str = "probe") -> None:
    write(root / "prompts" / f"{name}.j2", PROBE_PROMPT.format(k=k))
    write(root / "schemas" / f"{name}.json", json.dumps(probe_schema(k)))


def answer_from_template(request: GenerationRequest) -> str:
    """The scripted model answers with the template version it was shown."""
    shown = " ".join(m["content"] for m in request.messages)
    found = re.search(r"Template version (\d+)", shown)
    return json.dumps({"version": found.group(1) if found else "?"})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "catalog"
    write_probe(root, 1)
    return root


# -- the catalog ------------------------------------------------------------------------------


def test_version_is_a_hash_of_the_task_files(root: Path) -> None:
    catalog = load_catalog(root)
    first = catalog.get("probe").version
    assert first == fingerprint(root, "probe") and len(first) == 12
    write(root / "prompts" / "probe.j2", PROBE_PROMPT.format(k=1) + " ")
    assert fingerprint(root, "probe") != first
    write(root / "examples" / "probe.jsonl", "")
    assert fingerprint(root, "probe") != first


def test_unchanged_tasks_are_reused_and_edits_rebuilt(root: Path) -> None:
    write_probe(root, 1, name="other")
    first = load_catalog(root)
    write_probe(root, 2)
    second, report = rebuild(first)
    assert second is not first and first.get("probe").description == "probe, schema version 1"  # never edited
    assert second.get("other") is first.get("other")
    assert second.get("probe").description == "probe, schema version 2"
    assert report.changed == ("probe",) and not report.added and not report.removed and not report.failed


def test_broken_edit_keeps_the_last_good_version(root: Path) -> None:
    good = load_catalog(root)
    write(root / "schemas" / "probe.json", json.dumps(probe_schema(2))[:40])  # half a file
    broken, report = rebuild(good)
    assert broken.get("probe") is good.get("probe")
    assert report.stale == ("probe",) and report.failed
    error = broken.stale["probe"]
    assert error.path.endswith("schemas/probe.json") and "invalid JSON" in error.reason
    assert broken.errors == [error]
    # Still broken: still the last good version, never the broken one.
    write(root / "schemas" / "probe.json", json.dumps({**probe_schema(2), "type": "strnig"}))
    again, _ = rebuild(broken)
    assert again.get("probe") is good.get("probe")
    assert again.stale["probe"].pointer.startswith("#")
    write_probe(root, 3)
    fixed, report = rebuild(again)
    assert fixed.get("probe").description == "probe, schema version 3"
    assert not fixed.stale and not fixed.errors and report.changed == ("probe",)


def test_added_removed_and_never_good(root: Path) -> None:
    first = load_catalog(root)
    write_probe(root, 1, name="added")
    write(root / "schemas" / "bad.json", "{")
    (root / "schemas" / "probe.json").unlink()
    second, report = rebuild(first)
    assert second.names() == ["added"]
    assert report.added == ("added",) and report.removed == ("probe",)
    assert "bad" not in second.stale and [e.path for e in second.errors] == [str(root / "schemas" / "bad.json")]


def test_a_vanished_schemas_folder_keeps_everything_stale(root: Path) -> None:
    first = load_catalog(root)
    (root / "schemas").rename(root / "moved")
    second, report = rebuild(first)
    assert second.get("probe") is first.get("probe") and report.stale == ("probe",)


# -- the service -------------------------------------------------------------------------------


@pytest.fixture
def probe_extractor(root: Path, tmp_path: Path) -> Extractor:
    settings = Settings.from_env({}, home=tmp_path / "home", engine="scripted", tasks_dir=root)
    engine = ScriptedEngine(respond=answer_from_template, delay_s=0.01)
    return Extractor(settings=settings, engine=engine)


@pytest.fixture
async def app(probe_extractor: Extractor) -> FastAPI:
    return create_app(probe_extractor)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


async def test_results_name_the_version_that_produced_them(client: httpx.AsyncClient, root: Path) -> None:
    detail = (await client.get("/tasks/probe")).json()
    assert detail["version"] == fingerprint(root, "probe") and detail["stale"] is False
    body = (await client.post("/extract/probe", json={"text": "anything"})).json()
    assert body["task_version"] == detail["version"] and body["data"] == {"version": "1"}


async def test_a_failure_names_the_version_that_failed(
    client: httpx.AsyncClient, probe_extractor: Extractor, root: Path
) -> None:
    engine = probe_extractor.engine
    assert isinstance(engine, ScriptedEngine)
    engine.enqueue(['{"version": "9"}'])  # not the version the schema allows
    response = await client.post("/extract/probe", json={"text": "x"})
    assert response.status_code == 422
    assert response.json()["task_version"] == fingerprint(root, "probe") and response.json()["attempts"]


async def test_reload_endpoint_stale_listing_and_metrics(client: httpx.AsyncClient, root: Path) -> None:
    good = (await client.get("/tasks/probe")).json()["version"]
    write(root / "schemas" / "probe.json", '{"type": "object", "properties": {"version": ')
    reloaded = (await client.post("/tasks/reload")).json()
    assert reloaded["stale"] == ["probe"] and reloaded["generation"] == 1
    listed = (await client.get("/tasks")).json()
    (task,) = listed["tasks"]
    assert task["stale"] is True and task["version"] == good
    assert task["error"]["file"].endswith("probe.json") and "invalid JSON" in task["error"]["message"]
    assert listed["errors"] == [task["error"]]
    body = (await client.post("/extract/probe", json={"text": "x"})).json()
    assert body["task_version"] == good and body["data"] == {"version": "1"}  # the last good version answers
    write_probe(root, 2)
    reloaded = (await client.post("/tasks/reload")).json()
    assert reloaded["changed"] == ["probe"] and reloaded["stale"] == [] and reloaded["errors"] == []
    assert (await client.post("/extract/probe", json={"text": "x"})).json()["data"] == {"version": "2"}
    text = (await client.get("/metrics")).text
    assert metric(text, "extractor_catalog_reloads_total", trigger="http", outcome="errors") == 1
    assert metric(text, "extractor_catalog_reloads_total", trigger="http", outcome="ok") == 1
    assert metric(text, "extractor_catalog_task_failures_total") == 1
    assert metric(text, "extractor_catalog_stale_tasks") == 0
    (root / "schemas" / "probe.json").unlink()
    assert (await client.post("/tasks/reload")).json()["removed"] == ["probe"]
    assert (await client.post("/extract/probe", json={"text": "x"})).status_code == 404


async def test_each_response_matches_exactly_one_version(client: httpx.AsyncClient, root: Path) -> None:
    """Add, edit, break, fix and delete the task while requests run against it."""
    versions: dict[str, str] = {(await client.get("/tasks/probe")).json()["version"]: "1"}
    done = False
    answers: list[httpx.Response] = []

    async def requests() -> None:
        while not done:
            batch = [client.post("/extract/probe", json={"text": "x"}) for _ in range(8)]
            answers.extend(await asyncio.gather(*batch))

    async def edits() -> None:
        for k in range(2, 12):
            if k % 4 == 0:  # a broken edit: the schema half written
                write(root / "schemas" / "probe.json", json.dumps(probe_schema(k))[:30])
            elif k == 7:  # deleted, then added back at the next edit
                (root / "schemas" / "probe.json").unlink()
            else:
                write_probe(root, k)
            await client.post("/tasks/reload")
            detail = await client.get("/tasks/probe")
            if detail.status_code == 200 and not detail.json()["stale"]:
                versions[detail.json()["version"]] = str(k)
            await asyncio.sleep(0.03)

    runner = asyncio.create_task(requests())
    await edits()
    done = True
    await runner
    ok = [a.json() for a in answers if a.status_code == 200]
    assert {a.status_code for a in answers} <= {200, 404} and len(ok) > 20
    for body in ok:  # the template (data) and the schema (enum) of one version, and its version hash
        assert versions[body["task_version"]] == body["data"]["version"]
    assert len({body["data"]["version"] for body in ok}) >= 4


async def test_watcher_reloads_on_save(probe_extractor: Extractor, root: Path) -> None:
    app = create_app(probe_extractor, watch=True)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client,
    ):
        await asyncio.sleep(0.3)  # the watcher is set up
        write_probe(root, 5, name="fresh")
        saved = time.monotonic()
        while (await client.get("/tasks/fresh")).status_code != 200:
            assert time.monotonic() - saved < 10, "the new task was not picked up"
            await asyncio.sleep(0.02)
        assert time.monotonic() - saved < 2.0
