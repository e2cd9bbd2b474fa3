"""The playground over HTTP: the page and its files, the headers that keep it to itself, turning it off."""

from __future__ import annotations

import re

import httpx
import pytest

from extractor import Extractor, ScriptedEngine, Settings
from extractor.server import create_app


@pytest.fixture
def settings_off(settings: Settings) -> Settings:
    return settings.with_(playground=False)


async def get(extractor: Extractor, path: str) -> httpx.Response:
    app = create_app(extractor)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.get(path)


async def test_page_and_its_files_with_a_strict_policy(extractor: Extractor) -> None:
    page = await get(extractor, "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy and "style-src 'self'" in policy
    assert "unsafe" not in policy and page.headers["x-content-type-options"] == "nosniff"
    # The page's hooks, and nothing it loads from elsewhere or inline.
    assert '<select id="task">' in page.text and '<textarea id="text"' in page.text
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    # each script slices texts by code point, as the API's offsets are
    scripts = {"/playground/playground.js": "Array.from(text)", "/playground/review.js": "Array.from(raw.text)"}
    assert sources == ["/playground/playground.css", *scripts]
    assert "<script>" not in page.text and "style=" not in page.text
    for path in [*scripts, "/playground/playground.css"]:
        response = await get(extractor, path)
        kind = "text/css" if path.endswith(".css") else "text/javascript"
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
    for path, slicing in scripts.items():
        script = (await get(extractor, path)).text
        assert not re.search(r"\.(innerHTML|outerHTML)|insertAdjacentHTML|document\.write|eval\(", script)
        assert slicing in script


async def test_no_playground_setting(settings_off: Settings, catalog: object) -> None:
    extractor = Extractor(settings=settings_off, engine=ScriptedEngine(), catalog=catalog)  # type: ignore[arg-type]
    for path in ("/", "/playground/playground.js"):
        assert (await get(extractor, path)).status_code == 404
    assert (await get(extractor, "/tasks")).status_code == 200


def test_no_playground_flag() -> None:
    from extractor.cli import build_parser

    args = build_parser().parse_args(["serve", "--no-playground", "--no-watch"])
    assert args.playground is False and args.watch is False
    args = build_parser().parse_args(["serve"])
    assert args.playground is None and args.watch is None
    assert Settings().playground is True and Settings().watch is True
