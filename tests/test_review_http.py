"""The review loop over HTTP (scripted engine, the real app): queueing, decisions, 409s, corrections into the pool."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from extractor import Extractor, ScriptedEngine, Settings
from extractor.catalog.reload import load_catalog
from extractor.catalog.tasks import ReviewSettings, load_task
from extractor.cli import main
from extractor.config import repo_root
from extractor.errors import TaskError
from extractor.jobs.gold import load_gold
from extractor.results import ExtractionResult
from extractor.server import create_app

from .conftest import landmark
from .live import served

TASK = "landmark_slots"
TEXT = "阿尔罕布拉宫位于西班牙格拉纳达，是摩尔人统治时期的宫殿建筑。"
NEAR = "阿尔罕布拉宫位于西班牙格拉纳达，是摩尔人统治时期的宫殿。"
WRONG = {"name": "阿尔罕布拉宫", "country": "西班牙", "city": None, "category": "宫殿建筑", "period": "摩尔人统治时期"}
RIGHT = {**WRONG, "city": "格拉纳达"}
KEY = "k-review-0123456789"


def make_catalog(root: Path, *, review: dict[str, Any] | None = None) -> Path:
    """A copy of the shipped landmark task (schema, prompt, pool) that the tests may write to."""
    for folder, name in (("schemas", f"{TASK}.json"), ("prompts", f"{TASK}.j2"), ("examples", f"{TASK}.jsonl")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(repo_root() / folder / name, root / folder / name)
    if review is not None:
        path = root / "schemas" / f"{TASK}.json"
        schema = json.loads(path.read_text(encoding="utf-8"))
        schema["x-extractor"]["review"] = review
        path.write_text(json.dumps(schema, ensure_ascii=False), encoding="utf-8")
    return root


def make_extractor(root: Path, home: Path, engine: ScriptedEngine, **settings: Any) -> Extractor:
    values = {"engine": "scripted", "home": home, "tasks_dir": root, **settings}
    return Extractor(settings=Settings.from_env({}, **values), engine=engine, catalog=load_catalog(root))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_catalog(tmp_path / "catalog")


@pytest.fixture
def review_extractor(root: Path, tmp_path: Path, engine: ScriptedEngine, database_url: str | None) -> Extractor:
    return make_extractor(root, tmp_path / "home", engine, database_url=database_url)


@pytest.fixture
def sqlite_extractor(root: Path, tmp_path: Path, engine: ScriptedEngine) -> Extractor:
    return make_extractor(root, tmp_path / "home", engine)


async def client_for(extractor: Extractor) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(extractor)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c
    app.state.service.review.close()


@pytest.fixture
async def client(review_extractor: Extractor) -> AsyncIterator[httpx.AsyncClient]:
    async for c in client_for(review_extractor):
        yield c


@pytest.fixture
async def sqlite_client(sqlite_extractor: Extractor) -> AsyncIterator[httpx.AsyncClient]:
    async for c in client_for(sqlite_extractor):
        yield c


async def queue(client: httpx.AsyncClient, engine: ScriptedEngine, text: str = TEXT, answer: Any = None) -> int:
    engine.enqueue([json.dumps(answer or WRONG, ensure_ascii=False)])
    response = await client.post(f"/extract/{TASK}", json={"text": text, "review": True})
    assert response.status_code == 200, response.text
    review_id = response.json()["review_id"]
    assert isinstance(review_id, int)
    return review_id


def shipped_lines(root: Path) -> list[dict[str, Any]]:
    path = root / "examples" / f"{TASK}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def reviewed_lines(root: Path) -> list[dict[str, Any]]:
    """The reviewers' pool under the home beside the catalog (the fixtures' tmp_path / "home")."""
    path = root.parent / "home" / "pools" / f"{TASK}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def pool_lines(root: Path) -> list[dict[str, Any]]:
    """The task's pool as the catalog merges it (shipped, then reviewed), without who decided."""
    reviewed = [{k: v for k, v in line.items() if k != "review"} for line in reviewed_lines(root)]
    return shipped_lines(root) + reviewed


async def test_a_queued_result_is_listed_and_fetched(client: httpx.AsyncClient, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫")])
    plain = await client.post(f"/extract/{TASK}", json={"text": TEXT})
    assert plain.status_code == 200 and plain.json()["review_id"] is None  # not asked, no threshold: not queued
    first = await queue(client, engine)
    second = await queue(client, engine, text=NEAR)
    listed = (await client.get("/review")).json()
    assert [i["id"] for i in listed["items"]] == [second, first] and listed["next_cursor"] is None
    item = (await client.get(f"/review/{first}")).json()
    assert item["text"] == TEXT and item["status"] == "pending" and item["version"] == 1
    assert item["result"]["data"] == WRONG and item["task_version"] == item["result"]["task_version"] != ""
    page = (await client.get("/review", params={"limit": 1, "task": TASK, "status": "pending"})).json()
    assert [i["id"] for i in page["items"]] == [second]
    rest = (await client.get("/review", params={"limit": 1, "task": TASK, "cursor": page["next_cursor"]})).json()
    assert [i["id"] for i in rest["items"]] == [first] and rest["next_cursor"] is None
    assert (await client.get("/review", params={"task": "other"})).json()["items"] == []


async def test_the_threshold_queues_the_least_confident(
    tmp_path: Path, engine: ScriptedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_catalog(tmp_path / "catalog", review={"below": 0.8})
    extractor = make_extractor(root, tmp_path / "home", engine)
    assert extractor.task(TASK).settings.review == ReviewSettings(below=0.8)
    confidences = iter([0.5, 0.95, None, 0.79])
    run = extractor.arun

    async def with_confidence(*args: Any, **kwargs: Any) -> ExtractionResult:
        # the scripted engine gives no token probabilities: stand in for the engine's confidence
        result = await run(*args, **kwargs)
        return result.model_copy(update={"confidence": next(confidences)})

    monkeypatch.setattr(extractor, "arun", with_confidence)
    async for client in client_for(extractor):
        engine.enqueue([json.dumps(WRONG, ensure_ascii=False)] * 4)
        ids = []
        for _ in range(3):
            ids.append((await client.post(f"/extract/{TASK}", json={"text": TEXT})).json()["review_id"])
        batch = await client.post(f"/extract/{TASK}/batch", json={"items": [{"id": "a", "text": TEXT}]})
        ids.append(batch.json()["results"][0]["review_id"])
        assert [i is not None for i in ids] == [True, False, False, True]  # 0.5 and 0.79 < 0.8; None never
        listed = (await client.get("/review", params={"order": "confidence"})).json()["items"]
        assert [(i["id"], i["confidence"]) for i in listed] == [(ids[0], 0.5), (ids[3], 0.79)]
        below = (await client.get("/review", params={"below": 0.6})).json()["items"]
        assert [i["id"] for i in below] == [ids[0]]


def test_a_bad_review_setting_names_the_file(tmp_path: Path) -> None:
    root = make_catalog(tmp_path / "catalog", review={"below": 1.5})
    with pytest.raises(TaskError, match=r"landmark_slots\.json: #/x-extractor/review/below: 1\.5 is greater"):
        load_task(root / "schemas" / f"{TASK}.json", root / "prompts")
    root = make_catalog(tmp_path / "catalog", review={"under": 0.5})
    with pytest.raises(TaskError, match=r"landmark_slots\.json: #/x-extractor/review: Additional properties are not"):
        load_task(root / "schemas" / f"{TASK}.json", root / "prompts")


async def test_a_correction_teaches_the_next_request(
    sqlite_client: httpx.AsyncClient, engine: ScriptedEngine, root: Path
) -> None:
    client = sqlite_client
    before = pool_lines(root)
    shipped = (root / "examples" / f"{TASK}.jsonl").read_bytes()
    version = (await client.get(f"/tasks/{TASK}")).json()["version"]
    item_id = await queue(client, engine)
    response = await client.post(f"/review/{item_id}/correct", json={"data": RIGHT}, headers={"x-reviewer": "ann"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["status"], body["corrected"], body["reviewer"], body["version"]) == ("corrected", RIGHT, "ann", 2)
    assert body["pool"]["file"] == f"pools/{TASK}.jsonl" and body["pool"]["line_id"] == f"review-{item_id}"
    assert (root / "examples" / f"{TASK}.jsonl").read_bytes() == shipped  # the catalog's files are never written
    lines = pool_lines(root)
    assert lines[: len(before)] == before  # nothing lost
    assert lines[len(before) :] == [{"id": f"review-{item_id}", "text": TEXT, "output": RIGHT}]
    decided = reviewed_lines(root)[-1]["review"]
    assert (decided["decision"], decided["by"]) == ("corrected", "ann") and decided["at"].endswith("+00:00")
    detail = (await client.get(f"/tasks/{TASK}")).json()
    assert detail["version"] == body["pool"]["task_version"] != version and detail["pool"] == len(before) + 1
    # the next request for a near-identical text retrieves the corrected example (BM25)
    engine.enqueue([json.dumps(RIGHT, ensure_ascii=False)])
    answer = await client.post(f"/extract/{TASK}", json={"text": NEAR})
    assert answer.status_code == 200 and answer.json()["task_version"] == detail["version"]
    messages = engine.history[-1].messages
    text = [m["content"].split("\n\n")[0] for m in messages]  # each text is followed by the pool's hints
    shown = [(text[n], messages[n + 1]["content"]) for n, m in enumerate(messages[:-1]) if m["role"] == "user"]
    assert (TEXT, json.dumps(RIGHT, ensure_ascii=False, separators=(",", ":"))) in shown
    assert messages[-1]["role"] == "user" and text[-1] == NEAR


async def test_accept_adds_the_result_and_reject_adds_nothing(
    sqlite_client: httpx.AsyncClient, engine: ScriptedEngine, root: Path
) -> None:
    client = sqlite_client
    before = pool_lines(root)
    accepted = await queue(client, engine, answer=RIGHT)
    rejected = await queue(client, engine, text=NEAR)
    done = await client.post(f"/review/{rejected}/reject")
    assert done.status_code == 200 and done.json()["status"] == "rejected" and done.json()["pool"] is None
    assert pool_lines(root) == before
    huge = await client.post(f"/review/{accepted}/accept", json={"version": 2**65})  # found by schemathesis
    assert huge.status_code == 422 and huge.json()["error"] == "bad_request"  # a bad body, not a database overflow
    done = await client.post(f"/review/{accepted}/accept", json={"version": 1})
    assert done.status_code == 200 and done.json()["status"] == "accepted"
    assert pool_lines(root) == [*before, {"id": f"review-{accepted}", "text": TEXT, "output": RIGHT}]
    again = await client.post(f"/review/{accepted}/reject")
    assert again.status_code == 409 and again.json()["error"] == "conflict"
    assert f"review item {accepted} was already accepted" in again.json()["message"]


async def test_a_first_correction_creates_the_pool_with_the_fixed_examples(
    tmp_path: Path, engine: ScriptedEngine
) -> None:
    root = make_catalog(tmp_path / "catalog")
    (root / "examples" / f"{TASK}.jsonl").unlink()
    extractor = make_extractor(root, tmp_path / "home", engine)
    fixed = [e.text for e in extractor.task(TASK).examples]
    async for client in client_for(extractor):
        item_id = await queue(client, engine)
        assert (await client.post(f"/review/{item_id}/correct", json={"data": RIGHT})).status_code == 200
        assert [line["text"] for line in pool_lines(root)] == [*fixed, TEXT]
        assert (await client.get(f"/tasks/{TASK}")).json()["pool"] == len(fixed) + 1


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({**RIGHT, "city": "马德里"}, "/data/city: '马德里' does not occur in the text as written"),
        ({**RIGHT, "city": 5}, "/data/city: does not match the schema: 5 is not of type 'string', 'null'"),
        ({**RIGHT, "extra": "x"}, "does not match the schema: Additional properties are not allowed"),
        (["格拉纳达"], "/data: must be a JSON object"),
    ],
)
async def test_a_bad_correction_is_422_naming_what_to_fix(
    sqlite_client: httpx.AsyncClient, engine: ScriptedEngine, root: Path, data: Any, problem: str
) -> None:
    before = pool_lines(root)
    item_id = await queue(sqlite_client, engine)
    response = await sqlite_client.post(f"/review/{item_id}/correct", json={"data": data})
    assert response.status_code == 422 and response.json()["error"] == "bad_correction"
    message = response.json()["message"]
    assert problem in message and f"review item {item_id}: the correction does not fit task" in message
    assert "\n" not in message
    assert (await sqlite_client.get(f"/review/{item_id}")).json()["status"] == "pending"
    assert pool_lines(root) == before


async def test_the_document_declares_a_corrections_data_an_answer_never_null(
    sqlite_client: httpx.AsyncClient, engine: ScriptedEngine, root: Path
) -> None:
    document = (await sqlite_client.get("/openapi.json")).json()
    body = document["paths"]["/review/{item_id}/correct"]["post"]["requestBody"]["content"]["application/json"]
    declared = jsonschema.Draft202012Validator({**body["schema"], "components": document["components"]})
    assert not declared.is_valid({"data": None}) and not declared.is_valid({"data": None, "nothing_found": True})
    assert declared.is_valid({"data": RIGHT}) and declared.is_valid({"data": ["格拉纳达"]})  # a wrapped task's
    before = pool_lines(root)
    item_id = await queue(sqlite_client, engine)
    refused = await sqlite_client.post(f"/review/{item_id}/correct", json={"data": None})
    assert refused.status_code == 422 and "null is no answer" in refused.json()["message"]
    assert (await sqlite_client.get(f"/review/{item_id}")).json()["status"] == "pending"
    assert pool_lines(root) == before


async def test_an_ungrounded_result_cannot_be_accepted(
    sqlite_client: httpx.AsyncClient, engine: ScriptedEngine, root: Path
) -> None:
    before = pool_lines(root)
    item_id = await queue(sqlite_client, engine, answer={**RIGHT, "city": "马德里"})  # kept, flagged missing
    response = await sqlite_client.post(f"/review/{item_id}/accept")
    assert response.status_code == 422
    assert f"correct it instead (POST /review/{item_id}/correct)" in response.json()["message"]
    assert pool_lines(root) == before


async def test_two_reviewers_one_item_one_409(client: httpx.AsyncClient, engine: ScriptedEngine, root: Path) -> None:
    before = pool_lines(root)
    for _ in range(3):
        item_id = await queue(client, engine)
        answers = await asyncio.gather(
            client.post(f"/review/{item_id}/correct", json={"data": RIGHT}, headers={"x-reviewer": "ann"}),
            client.post(f"/review/{item_id}/correct", json={"data": RIGHT}, headers={"x-reviewer": "bob"}),
            client.post(f"/review/{item_id}/reject", headers={"x-reviewer": "cid"}),
        )
        assert sorted(a.status_code for a in answers) == [200, 409, 409], [a.text for a in answers]
        winner = next(a.json() for a in answers if a.status_code == 200)
        assert (await client.get(f"/review/{item_id}")).json()["reviewer"] == winner["reviewer"]
    added = pool_lines(root)[len(before) :]
    assert len(added) == len({line["id"] for line in added})  # a correction is appended once at most


async def test_unknown_items_and_bad_parameters(sqlite_client: httpx.AsyncClient) -> None:
    missing = await sqlite_client.get("/review/4242")
    assert missing.status_code == 404 and missing.json()["message"].startswith("no review item 4242")
    assert (await sqlite_client.post("/review/4242/accept")).status_code == 404
    for params in ({"limit": 0}, {"below": 2}, {"order": "random"}, {"status": "done"}):
        response = await sqlite_client.get("/review", params=params)
        assert response.status_code == 422 and response.json()["message"].startswith("the request is invalid")
    bad_cursor = await sqlite_client.get("/review", params={"cursor": "abc"})
    assert bad_cursor.status_code == 422 and "cursor: not a next_cursor" in bad_cursor.json()["message"]
    empty_cursor = await sqlite_client.get("/review", params={"cursor": ""})  # a form's empty field: the first page
    assert empty_cursor.status_code == 200 and empty_cursor.json() == (await sqlite_client.get("/review")).json()
    assert (await sqlite_client.get("/review/abc")).status_code == 422
    no_data = await sqlite_client.post("/review/1/correct", json={})
    assert no_data.status_code == 422 and "data" in no_data.json()["message"]


async def test_api_keys_apply_to_the_review_routes(root: Path, tmp_path: Path, engine: ScriptedEngine) -> None:
    extractor = make_extractor(root, tmp_path / "home", engine, api_keys=KEY)
    async for client in client_for(extractor):
        for method, path in [
            ("GET", "/review"),
            ("GET", "/review/1"),
            ("POST", "/review/1/accept"),
            ("POST", "/review/1/correct"),
            ("POST", "/review/1/reject"),
        ]:
            refused = await client.request(method, path, json={"data": RIGHT}, headers={"authorization": "Bearer no"})
            assert refused.status_code == 401, (method, path)
        keyed = {"authorization": f"Bearer {KEY}"}
        engine.enqueue([json.dumps(WRONG, ensure_ascii=False)])
        sent = await client.post(f"/extract/{TASK}", json={"text": TEXT, "review": True}, headers=keyed)
        item_id = sent.json()["review_id"]
        assert (await client.get("/review", headers=keyed)).json()["items"][0]["id"] == item_id
        decided = await client.post(f"/review/{item_id}/reject", headers=keyed)
        assert decided.status_code == 200
        assert decided.json()["reviewer"].startswith("key:") and KEY not in decided.text
        document = (await client.get("/openapi.json", headers=keyed)).json()
        assert "401" in document["paths"]["/review/{item_id}/correct"]["post"]["responses"]
        assert "409" in document["paths"]["/review/{item_id}/correct"]["post"]["responses"]


async def test_the_cli_lists_and_exports(
    sqlite_client: httpx.AsyncClient,
    sqlite_extractor: Extractor,
    engine: ScriptedEngine,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = await queue(sqlite_client, engine)
    second = await queue(sqlite_client, engine, text=NEAR, answer={**RIGHT, "category": "宫殿"})
    assert (await sqlite_client.post(f"/review/{first}/correct", json={"data": RIGHT})).status_code == 200
    assert (await sqlite_client.post(f"/review/{second}/accept")).status_code == 200
    home = ["--home", str(sqlite_extractor.settings.home)]
    capsys.readouterr()
    assert main(["review", "list", "--json", *home]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(i["id"], i["status"]) for i in listed["items"]] == [(second, "accepted"), (first, "corrected")]
    assert main(["review", "list", "--status", "corrected", *home]) == 0
    assert capsys.readouterr().out.split()[:2] == [str(first), "corrected"]
    out = tmp_path / "gold.jsonl"
    assert main(["review", "export", TASK, "--out", str(out), *home]) == 0
    gold = load_gold(out, task=None, known=[TASK])
    assert [(g.id, g.text, g.expected) for g in gold] == [
        (f"review-{first}", TEXT, RIGHT),
        (f"review-{second}", NEAR, {**RIGHT, "category": "宫殿"}),
    ]


def tree_digest(root: Path) -> dict[str, str]:
    """Every file of the catalog's folders, by its SHA-256."""
    files = sorted(
        p for folder in ("schemas", "prompts", "examples") for p in (root / folder).rglob("*") if p.is_file()
    )
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


async def test_corrections_on_the_shipped_catalog_never_touch_the_source_tree(
    tmp_path: Path, engine: ScriptedEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_digest(repo_root())
    home = tmp_path / "home"
    extractor = make_extractor(repo_root(), home, engine)
    async for client in client_for(extractor):
        item_id = await queue(client, engine)
        decided = await client.post(f"/review/{item_id}/correct", json={"data": RIGHT})
        assert decided.status_code == 200 and decided.json()["pool"]["file"] == f"pools/{TASK}.jsonl"
        # the next request's examples hold the correction (the catalog merged the home pool at its reload)
        engine.enqueue([json.dumps(RIGHT, ensure_ascii=False)])
        assert (await client.post(f"/extract/{TASK}", json={"text": NEAR})).status_code == 200
        shown = [m["content"].split("\n\n")[0] for m in engine.history[-1].messages if m["role"] == "user"]
        assert TEXT in shown  # (each text is followed by the pool's hints)
    assert tree_digest(repo_root()) == before
    [line] = [json.loads(x) for x in (home / "pools" / f"{TASK}.jsonl").read_text().splitlines()]
    assert (line["id"], line["output"], line["review"]["decision"]) == (f"review-{item_id}", RIGHT, "corrected")
    # an analyst writes them out for a commit: into a copy of the catalog here, once
    analyst = make_catalog(tmp_path / "analyst")
    shipped = shipped_lines(analyst)
    args = ["review", "export", TASK, "--pool", "--home", str(home), "--tasks-dir", str(analyst)]
    assert main(args) == 0 and main(args) == 0
    assert shipped_lines(analyst) == [*shipped, line]
    assert "0 reviewed line(s)" in capsys.readouterr().err
    assert load_catalog(analyst).tasks[TASK].pool is not None
    assert len(load_catalog(analyst, pools=home / "pools").tasks[TASK].pool or ()) == len(shipped) + 1  # once


def _post_many(url: str, texts: list[str], acked: list[int], stop: threading.Event) -> None:
    def post(text: str) -> None:
        try:
            response = httpx.post(f"{url}/extract/{TASK}", json={"text": text, "review": True}, timeout=30)
        except httpx.TransportError:
            return
        if response.status_code == 200:
            acked.append(response.json()["review_id"])

    with ThreadPoolExecutor(max_workers=6) as pool:
        for text in texts:
            if stop.is_set():
                break
            pool.submit(post, text)


def _ready(url: str) -> None:
    deadline = time.monotonic() + 60
    while httpx.get(f"{url}/readyz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "the server did not turn ready"
        time.sleep(0.1)


@pytest.fixture
def server_catalog(tmp_path: Path) -> Iterator[Path]:
    yield make_catalog(tmp_path / "catalog")


def test_the_queue_survives_a_sigkill(tmp_path: Path, database_url: str | None, server_catalog: Path) -> None:
    env = {"EXTRACTOR_DATABASE_URL": database_url} if database_url else {}
    args = ("--scripted-delay-s", "0.2", "--no-watch")
    acked: list[int] = []
    with served(tmp_path, env=env, args=args, tasks_dir=server_catalog) as (process, url):
        _ready(url)
        stop = threading.Event()
        texts = [f"第{n}座宫殿位于西班牙格拉纳达。" for n in range(60)]
        client = threading.Thread(target=_post_many, args=(url, texts, acked, stop))
        client.start()
        deadline = time.monotonic() + 60
        while len(acked) < 10:  # kill while requests are still in flight
            assert time.monotonic() < deadline and client.is_alive(), acked
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        stop.set()
        client.join(timeout=60)
    killed_with = list(acked)
    assert len(killed_with) < len(texts)  # the kill landed mid-stream
    with served(tmp_path, env=env, args=args, tasks_dir=server_catalog) as (_, url):
        _ready(url)
        listed = httpx.get(f"{url}/review", params={"limit": 500}, timeout=10).json()["items"]
    ids = {i["id"] for i in listed}
    assert set(killed_with) <= ids, sorted(set(killed_with) - ids)  # every acknowledged item is there
    assert all(i["status"] == "pending" and i["text"].startswith("第") for i in listed)


async def test_an_empty_answer_joins_the_pool_only_when_the_reviewer_says_the_text_holds_nothing(
    sqlite_client: httpx.AsyncClient, engine: ScriptedEngine, root: Path
) -> None:
    nothing = dict.fromkeys(RIGHT)
    before = pool_lines(root)
    item_id = await queue(sqlite_client, engine)
    refused = await sqlite_client.post(f"/review/{item_id}/correct", json={"data": nothing})
    assert refused.status_code == 422 and '"nothing_found": true' in refused.json()["message"]
    assert pool_lines(root) == before
    done = await sqlite_client.post(f"/review/{item_id}/correct", json={"data": nothing, "nothing_found": True})
    assert done.status_code == 200, done.text
    assert pool_lines(root)[len(before) :] == [{"id": f"review-{item_id}", "text": TEXT, "output": nothing}]


def test_a_typed_value_is_corrected_in_the_words_of_the_text() -> None:
    from extractor.catalog.tasks import Catalog
    from extractor.errors import CorrectionError
    from extractor.review import corrections

    task = Catalog.load(repo_root()).get("query_conditions")
    text = "帮我找杭州的酒店，每晚不超过500元"
    words = {"conditions": [{"field": "price", "operator": "le", "value": "500元"}]}
    typed = corrections.check(task, text, words, item_id=1, corrected=True)
    assert typed == {"conditions": [{"field": "price", "operator": "le", "value": 500, "unit": "CNY"}]}
    assert corrections.check(task, text, typed, item_id=1, corrected=True) == typed  # or as the value itself
    with pytest.raises(CorrectionError, match="does not fit task 'query_conditions'"):
        corrections.check(
            task, text, {"conditions": [{"field": "x", "operator": "about", "value": 1}]}, item_id=1, corrected=True
        )
