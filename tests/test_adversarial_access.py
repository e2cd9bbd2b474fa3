"""Access (issue 13, case 18): optional API keys, open health routes, never logged, CORS off unless set."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.server import create_app
from extractor.server.access import ApiKeyGate, api_keys, exposure_warning

from .conftest import LANDMARK_TEXT, landmark
from .live import log_of, served

pytestmark = pytest.mark.adversarial
KEY, OTHER = "k-3f9a1c7e5b2d4f60", "k-second-key-0001"


async def client_for(extractor: Extractor) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(extractor)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c


def keyed(catalog: Catalog, tmp_path: Path, engine: ScriptedEngine, **settings: object) -> Extractor:
    values = {"engine": "scripted", "home": tmp_path, "api_keys": f"{KEY}, {OTHER}", **settings}
    return Extractor(settings=Settings.from_env({}, **values), engine=engine, catalog=catalog)


@pytest.fixture
async def client(catalog: Catalog, tmp_path: Path, engine: ScriptedEngine) -> AsyncIterator[httpx.AsyncClient]:
    async for c in client_for(keyed(catalog, tmp_path, engine)):
        yield c


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/extract/landmark_slots"),
        ("POST", "/extract/landmark_slots/batch"),
        ("POST", "/chat"),
        ("GET", "/tasks"),
        ("GET", "/tasks/landmark_slots"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/nope"),
    ],
)
async def test_every_route_but_health_needs_a_key(client: httpx.AsyncClient, method: str, path: str) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": KEY}, {"authorization": f"Basic {KEY}"}):
        response = await client.request(method, path, headers=headers, json={"text": "x"})
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["www-authenticate"].startswith('Bearer realm="extractor"')
        assert response.json()["error"] == "unauthorized"
        assert KEY not in response.text and "wrong" not in response.text


async def test_either_key_opens_the_routes(client: httpx.AsyncClient, engine: ScriptedEngine) -> None:
    engine.enqueue([landmark(name="阿尔罕布拉宫")] * 2)
    for key in (KEY, OTHER):
        response = await client.post(
            "/extract/landmark_slots", json={"text": LANDMARK_TEXT}, headers={"authorization": f"bearer {key}"}
        )
        assert response.status_code == 200
    assert (await client.get("/tasks", headers={"authorization": f"Bearer {KEY}"})).status_code == 200


async def test_health_routes_stay_open(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code in (200, 503)
    assert "www-authenticate" not in (await client.get("/healthz")).headers


async def test_the_playground_page_is_open_and_its_api_calls_are_not(
    catalog: Catalog, tmp_path: Path, engine: ScriptedEngine
) -> None:
    # a browser must get the page before it can send the key typed into it; the page holds no data
    async for c in client_for(keyed(catalog, tmp_path, engine)):
        for path in ("/", "/playground/playground.js", "/playground/review.js", "/playground/playground.css"):
            assert (await c.get(path)).status_code == 200, path
        assert (await c.get("/review")).status_code == 401
        assert (await c.get("/playground/other.js")).status_code == 401
    async for c in client_for(keyed(catalog, tmp_path, engine, playground=False)):
        assert (await c.get("/")).status_code == 401


async def test_the_key_is_checked_before_the_body_is_read(client: httpx.AsyncClient) -> None:
    response = await client.post("/extract/landmark_slots", content=b"x" * 5_000_000)
    assert response.status_code == 401  # not 413: an unauthenticated client gets nothing read


async def test_metrics_can_be_left_open(catalog: Catalog, tmp_path: Path, engine: ScriptedEngine) -> None:
    async for c in client_for(keyed(catalog, tmp_path, engine, metrics_open=True)):
        assert (await c.get("/metrics")).status_code == 200
        assert (await c.get("/tasks")).status_code == 401


async def test_the_document_declares_the_key_and_the_401(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json", headers={"authorization": f"Bearer {KEY}"})).json()
    assert document["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    assert "401" in document["paths"]["/extract/{task}"]["post"]["responses"]
    assert document["paths"]["/healthz"]["get"]["security"] == []


def test_keys_from_a_file_and_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# ops keys\nfile-key-1\n\n  file-key-2  \n")
    settings = Settings.from_env({"EXTRACTOR_API_KEYS": "a,b", "EXTRACTOR_API_KEYS_FILE": str(path)})
    assert api_keys(settings) == ("a", "b", "file-key-1", "file-key-2")
    assert "a,b" not in repr(settings)
    assert api_keys(Settings.from_env({})) == ()


def test_a_key_is_all_or_nothing() -> None:
    # Compared as SHA-256 digests through hmac.compare_digest against every key (constant time by
    # construction; a timing assertion on a shared 2-core machine would only measure the neighbours).
    gate = ApiKeyGate(lambda *a: None, keys=[KEY, OTHER], open_paths=frozenset())  # type: ignore[arg-type, return-value]
    assert gate.allowed(f"Bearer {KEY}".encode()) and gate.allowed(f"bearer  {OTHER}".encode())
    for header in (
        f"Bearer {KEY[:-1]}X",
        f"Bearer X{KEY[1:]}",
        f"Bearer {KEY}{KEY}",
        f"Bearer {KEY[:4]}",
        "Bearer ",
        "",
    ):
        assert not gate.allowed(header.encode()), header
    assert not gate.allowed(None)


async def test_cors_is_off_unless_configured(catalog: Catalog, tmp_path: Path, engine: ScriptedEngine) -> None:
    preflight = {"origin": "https://app.example", "access-control-request-method": "POST"}
    plain = Extractor(settings=Settings.from_env({}, engine="scripted", home=tmp_path), engine=engine, catalog=catalog)
    async for c in client_for(plain):
        response = await c.options("/extract/landmark_slots", headers=preflight)
        assert "access-control-allow-origin" not in response.headers
        got = await c.get("/healthz", headers={"origin": "https://app.example"})
        assert "access-control-allow-origin" not in got.headers
    async for c in client_for(keyed(catalog, tmp_path, engine, cors_origins="https://app.example")):
        response = await c.options("/extract/landmark_slots", headers=preflight)
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        other = await c.options("/extract/landmark_slots", headers={**preflight, "origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_exposure_warning() -> None:
    assert exposure_warning(Settings.from_env({})) is None  # default bind: 127.0.0.1
    assert exposure_warning(Settings.from_env({}, host="::1")) is None
    assert "without API keys" in (exposure_warning(Settings.from_env({}, host="0.0.0.0")) or "")
    assert exposure_warning(Settings.from_env({}, host="0.0.0.0", api_keys="k")) is None


def test_serve_warns_on_a_public_bind_and_never_logs_a_key(tmp_path: Path) -> None:
    with served(tmp_path, args=("--host", "0.0.0.0")) as (_, url):
        assert httpx.get(f"{url}/healthz").status_code == 200
    assert "without API keys" in log_of(tmp_path)
    keyed_dir = tmp_path / "keyed"
    keyed_dir.mkdir()
    with served(keyed_dir, env={"EXTRACTOR_API_KEYS": KEY}, args=("--host", "0.0.0.0")) as (_, url):
        for header in (f"Bearer {KEY}", "Bearer not-the-key-7777", KEY):
            httpx.post(f"{url}/extract/landmark_slots", json={"text": LANDMARK_TEXT}, headers={"authorization": header})
            httpx.get(f"{url}/tasks", headers={"authorization": header})
    log = log_of(keyed_dir)
    assert "without API keys" not in log and "POST /extract/landmark_slots" in log
    assert KEY not in log and "not-the-key-7777" not in log


EXTRACT, REVIEW, ADMIN = "k-extract-only-0001", "k-review-only-00001", "k-admin-only-000001"
SCOPED = f"{EXTRACT} name=app scopes=extract, {REVIEW} name=ann scopes=review, {ADMIN} name=ops scopes=admin"


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("POST", "/extract/landmark_slots", "extract"),
        ("POST", "/extract/landmark_slots/batch", "extract"),
        ("POST", "/chat", "extract"),
        ("POST", "/v1/chat/completions", "extract"),
        ("GET", "/v1/models", "extract"),
        ("GET", "/tasks", "extract"),
        ("GET", "/review", "review"),
        ("GET", "/review/1", "review"),
        ("POST", "/review/1/accept", "review"),
        ("POST", "/review/1/correct", "review"),
        ("POST", "/review/1/reject", "review"),
        ("POST", "/tasks/reload", "admin"),
    ],
)
async def test_a_key_without_the_scope_gets_403_naming_it(
    catalog: Catalog, tmp_path: Path, engine: ScriptedEngine, method: str, path: str, scope: str
) -> None:
    extractor = keyed(catalog, tmp_path, engine, api_keys=SCOPED)
    keys = {"extract": EXTRACT, "review": REVIEW, "admin": ADMIN}
    async for c in client_for(extractor):
        for name, key in keys.items():
            response = await c.request(method, path, headers={"authorization": f"Bearer {key}"}, json={"text": "x"})
            if name == scope:
                assert response.status_code not in (401, 403), (name, response.text)
                continue
            assert response.status_code == 403, (name, response.text)
            assert response.json()["error"] == "forbidden"
            assert f"lacks the scope '{scope}'" in response.json()["message"] and key not in response.text
        document = (await c.get("/openapi.json", headers={"authorization": f"Bearer {ADMIN}"})).json()
        template = path.replace("landmark_slots", "{task}").replace("/1/", "/{item_id}/")
        template = template.replace("/review/1", "/review/{item_id}")
        assert "403" in document["paths"][template][method.lower()]["responses"]


async def test_a_named_key_decides_as_its_name(catalog: Catalog, tmp_path: Path, engine: ScriptedEngine) -> None:
    extractor = keyed(catalog, tmp_path, engine, api_keys=f"{EXTRACT} name=app scopes=extract, {REVIEW} name=ann")
    async for c in client_for(extractor):
        engine.enqueue([landmark(name="阿尔罕布拉宫")])
        sent = await c.post(
            "/extract/landmark_slots",
            json={"text": LANDMARK_TEXT, "review": True},
            headers={"authorization": f"Bearer {EXTRACT}"},
        )
        item = sent.json()["review_id"]
        headers = {"authorization": f"Bearer {REVIEW}", "x-reviewer": "Ann B."}
        decided = await c.post(f"/review/{item}/reject", headers=headers)
        assert decided.json()["reviewer"] == "ann (Ann B.)"


def test_key_entries_name_what_is_wrong(tmp_path: Path) -> None:
    from extractor.errors import ConfigError
    from extractor.server.access import configured_keys

    path = tmp_path / "keys"
    path.write_text("# name and scopes\nk-file-1 name=ann scopes=review,extract\nk-file-2\n")
    keys = configured_keys(
        Settings.from_env({"EXTRACTOR_API_KEYS": "k-env scopes=admin", "EXTRACTOR_API_KEYS_FILE": str(path)})
    )
    assert [(k.name.startswith("key:"), sorted(k.scopes)) for k in keys] == [
        (True, ["admin"]),
        (False, ["extract", "review"]),
        (True, ["admin", "extract", "review"]),  # no scopes=: every scope, as before scopes
    ]
    assert keys[1].name == "ann" and "k-file-1" not in repr(keys[1])
    with pytest.raises(ConfigError, match=r"entry 1: scopes reveiw not known") as error:
        configured_keys(Settings.from_env({"EXTRACTOR_API_KEYS": "k-secret scopes=reveiw"}))
    assert "k-secret" not in str(error.value)
    with pytest.raises(ConfigError, match=r"keys:2: 'role' is not an option"):
        path.write_text("k-1\nk-secret role=admin\n")
        configured_keys(Settings.from_env({"EXTRACTOR_API_KEYS_FILE": str(path)}))
    with pytest.raises(ConfigError, match="'ann' is given to more than one key"):
        configured_keys(Settings.from_env({"EXTRACTOR_API_KEYS": "k-1 name=ann, k-2 name=ann"}))


async def test_mcp_needs_the_extract_scope(catalog: Catalog, tmp_path: Path, engine: ScriptedEngine) -> None:
    extractor = keyed(catalog, tmp_path, engine, api_keys=SCOPED)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async for c in client_for(extractor):
        refused = await c.post("/mcp", headers={"authorization": f"Bearer {REVIEW}"}, json=body)
        assert refused.status_code == 403 and "lacks the scope 'extract'" in refused.json()["message"]
        allowed = await c.post("/mcp", headers={"authorization": f"Bearer {EXTRACT}"}, json=body)
        assert allowed.status_code not in (401, 403), allowed.text
