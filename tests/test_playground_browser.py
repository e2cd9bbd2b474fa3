"""The playground in a real browser: Debian's Chromium, headless, driven by Playwright, against `extractor serve`.

No browser is ever downloaded: Playwright drives /usr/bin/chromium (`make setup-browser` installs
it). A missing browser fails these tests with a message saying how to install it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from extractor.config import repo_root

from .conftest import LANDMARK_TEXT

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
EMOJI_TEXT = "🎉🎈 Party with Zoë 👩‍👩‍👧 at Café Ñandú tonight!"
XSS_DESCRIPTION = '<img src=x onerror="window.__pwned=1;alert(1)"> <script>window.__pwned=2</script>'
XSS_TEXT = '<script>window.__pwned=3;alert(3)</script> then <img src=x onerror="window.__pwned=4;alert(4)">'
XSS_VALUE = '<img src=x onerror="window.__pwned=4;alert(4)">'


def _write_task(root: Path, name: str, schema: dict[str, Any]) -> None:
    (root / "schemas" / f"{name}.json").write_text(json.dumps(schema, ensure_ascii=False), encoding="utf-8")
    template = f"Extract {name}: {{{{ fields | map(attribute='name') | join(', ') }}}}"
    (root / "prompts" / f"{name}.j2").write_text(template, encoding="utf-8")


def _catalog(root: Path) -> Path:
    """landmark_slots with its fixed examples only, plus the emoji, markup and stale cases."""
    (root / "schemas").mkdir(parents=True)
    (root / "prompts").mkdir()
    shutil.copy(repo_root() / "schemas" / "landmark_slots.json", root / "schemas")
    shutil.copy(repo_root() / "prompts" / "landmark_slots.j2", root / "prompts")
    _write_task(root, "emoji_names", _emoji_schema())
    _write_task(
        root,
        "markup_probe",
        {
            "type": "object",
            "title": "<b>markup</b> probe",
            "description": XSS_DESCRIPTION,
            "properties": {"snippet": {"type": "string", "description": '<img src=x onerror="alert(5)">'}},
            "required": ["snippet"],
            "x-extractor": {"examples": [{"text": XSS_TEXT, "output": {"snippet": XSS_VALUE}}]},
        },
    )
    return root


def _emoji_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "who and where",
        "properties": {"name": {"type": "string"}, "place": {"type": "string"}},
        "required": ["name", "place"],
        "x-extractor": {"examples": [{"text": EMOJI_TEXT, "output": {"name": "Zoë", "place": "Café Ñandú"}}]},
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(
    home: Path,
    tasks_dir: Path,
    *,
    engine: str = "scripted",
    ready_s: float = 60,
    extra: Sequence[str] = (),
    wait_ready: bool = True,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`extractor serve` as a process (watching its catalog, as by default); yields its URL once ready.

    Without ``wait_ready``, as soon as it answers at all (the engine may still be starting).
    """
    port = _free_port()
    command = [sys.executable, "-m", "extractor.cli", "serve", "--engine", engine, "--port", str(port)]
    command += ["--tasks-dir", str(tasks_dir), *extra]
    if engine == "scripted":  # the real engine reads the prepared model from the default home
        command += ["--home", str(home)]
    log_path = home / f"serve-{port}.log"
    home.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=repo_root(), stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + ready_s
            while True:
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "the server did not turn ready:\n" + log_path.read_text()
                try:
                    ready = httpx.get(f"{url}/readyz", timeout=10)
                except httpx.TransportError:
                    time.sleep(0.2)
                    continue
                if ready.status_code == 200 or not wait_ready:
                    break
                assert "failed" not in ready.json()["reason"], log_path.read_text()
                time.sleep(0.2)
            yield url, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium under Playwright; fails (never skips) when either is missing."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} not found: the browser tests need Debian's chromium; run `make setup-browser`")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: install the dev extra (`make setup`)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _catalog(tmp_path_factory.mktemp("catalog"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, catalog_dir: Path) -> Iterator[str]:
    with serve(tmp_path_factory.mktemp("home"), catalog_dir) as (url, _):
        yield url


class Page:
    """One browser page on the playground, recording dialogs and page errors."""

    def __init__(self, browser: Any, url: str) -> None:
        self.page = browser.new_page()
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url + "/")
        self.page.wait_for_selector("select#task option", state="attached")

    def pick(self, task: str) -> None:
        self.page.select_option("select#task", task)
        # the picked task's own detail, not the one shown before (its late arrival would clear a result)
        self.page.wait_for_function(
            "name => document.body.dataset.task === name && "
            "document.querySelector('#task-version').textContent !== '' && "
            "document.querySelector('#fields tbody tr') !== null && "
            "document.querySelector('#example').options.length > 1",
            arg=task,
        )

    def run_example(self, task: str, index: int = 0) -> dict[str, Any]:
        self.pick(task)
        self.page.select_option("select#example", str(index))
        return self.run()

    def run(self) -> dict[str, Any]:
        with self.page.expect_response(lambda r: "/extract/" in r.url) as answer:
            self.page.click("button#run")
        result: dict[str, Any] = answer.value.json()
        self.page.wait_for_selector("#stats:not(:empty)")
        return result

    def marks(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = self.page.eval_on_selector_all(
            "#highlighted mark", "ms => ms.map(m => [m.dataset.path, m.textContent])"
        )
        return found

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Page]:
    page = Page(browser, server)
    yield page
    assert not page.errors, page.errors
    page.close()


def check_highlights(page: Page, text: str, result: dict[str, Any]) -> None:
    """Every placed span is one mark holding exactly text[start:end] (code points, as Python slices)."""
    placed = {s["path"]: text[s["start"] : s["end"]] for s in result["spans"] if s["start"] is not None}
    assert placed, result
    assert dict(page.marks()) == placed


def test_landmark_example_highlights_every_value(page: Page) -> None:
    result = page.run_example("landmark_slots", 0)
    text = page.page.input_value("textarea#text")
    assert text == "埃菲尔铁塔位于法国巴黎，建于十九世纪末。"
    check_highlights(page, text, result)
    assert {p for p, _ in page.marks()} == {"/name", "/country", "/city", "/category", "/period"}
    assert page.page.text_content("#highlighted") == text  # highlighting adds no character and drops none
    assert page.page.is_visible("#tree li[data-path='/country']")


def test_hover_selects_the_field(page: Page) -> None:
    page.run_example("landmark_slots", 0)
    page.page.hover("#highlighted mark[data-path='/city']")
    assert page.page.get_attribute("#tree li[data-path='/city']", "class") == "selected"
    assert page.page.locator("#tree li.selected").count() == 1
    page.page.hover("#tree li[data-path='/period']")  # and the reverse
    assert "selected" in (page.page.get_attribute("#highlighted mark[data-path='/period']", "class") or "")
    page.page.click("#legend button[data-field='city']")  # the legend filters
    assert "off" in (page.page.get_attribute("#highlighted mark[data-path='/city']", "class") or "")


def test_emoji_before_a_value_is_highlighted_at_the_right_characters(page: Page) -> None:
    result = page.run_example("emoji_names", 0)
    assert [s["start"] for s in result["spans"]] == [EMOJI_TEXT.index("Zoë"), EMOJI_TEXT.index("Café Ñandú")]
    check_highlights(page, EMOJI_TEXT, result)
    assert dict(page.marks()) == {"/name": "Zoë", "/place": "Café Ñandú"}


def test_values_not_in_the_text_are_listed_apart_and_ctrl_enter_runs(page: Page) -> None:
    page.pick("landmark_slots")
    page.page.select_option("select#example", "1")  # the scripted model answers with example 0's values
    with page.page.expect_response(lambda r: "/extract/" in r.url) as answer:
        page.page.press("textarea#text", "Control+Enter")
    result = answer.value.json()
    page.page.wait_for_selector("#stats:not(:empty)")
    assert {s["status"] for s in result["spans"]} == {"missing"} and page.marks() == []
    listed = page.page.eval_on_selector_all("#ungrounded li", "items => items.map(i => i.dataset.path)")
    assert listed == [s["path"] for s in result["spans"]]
    assert page.page.is_visible("#ungrounded")


def test_copy_as_curl_and_python(page: Page, server: str) -> None:
    page.run_example("emoji_names", 0)
    page.page.select_option("#opt-grounding", "strict")
    page.page.click("button#copy-curl")
    curl = page.page.text_content("pre#snippet") or ""
    assert curl.startswith(f"curl -s '{server}/extract/emoji_names'") and '"grounding":"strict"' in curl
    page.page.click("button#copy-python")
    python = page.page.text_content("pre#snippet") or ""
    namespace: dict[str, Any] = {}
    exec(python.split("result =")[0], namespace)  # the body is a Python literal
    assert namespace["body"] == {"text": EMOJI_TEXT, "options": {"grounding": "strict"}}


def test_markup_in_texts_and_descriptions_runs_nothing(page: Page) -> None:
    result = page.run_example("markup_probe", 0)
    assert result["data"] == {"snippet": XSS_VALUE}
    assert dict(page.marks()) == {"/snippet": XSS_VALUE}
    assert page.page.text_content("#highlighted") == XSS_TEXT
    assert page.page.text_content("#task-description") == XSS_DESCRIPTION
    page.page.fill("textarea#text", XSS_TEXT + " <svg onload=alert(6)>")
    page.run()
    page.page.wait_for_timeout(300)  # an onerror would have fired by now
    assert page.dialogs == []
    assert page.page.evaluate("window.__pwned") is None
    assert page.page.locator("main img, main script, main svg, main b").count() == 0


def test_broken_task_shows_stale_after_reload(page: Page, catalog_dir: Path, server: str) -> None:
    page.pick("emoji_names")
    good = page.page.text_content("#task-version")
    schema_path = catalog_dir / "schemas" / "emoji_names.json"
    schema_path.write_text(json.dumps(_emoji_schema())[:50], encoding="utf-8")  # half a file
    try:
        page.page.wait_for_selector("#task-stale:not([hidden])", timeout=10_000)
        assert "emoji_names.json" in page.page.text_content("#task-error")
        assert "invalid JSON" in page.page.text_content("#task-error")
        assert page.page.text_content("select#task option[value='emoji_names']") == "emoji_names (stale)"
        assert page.page.text_content("#task-version") == good
        result = page.run_example("emoji_names", 0)  # the last good version still answers
        assert result["data"] == {"name": "Zoë", "place": "Café Ñandú"}
    finally:
        schema_path.write_text(json.dumps(_emoji_schema(), ensure_ascii=False), encoding="utf-8")
    page.page.wait_for_selector("#task-stale", state="hidden", timeout=10_000)


def test_sighup_reloads_without_a_watcher(tmp_path: Path) -> None:
    root = _catalog(tmp_path / "catalog")
    with serve(tmp_path / "home", root, extra=["--no-watch"]) as (url, process):
        _write_task(root, "added_later", _emoji_schema())
        time.sleep(0.5)
        assert httpx.get(f"{url}/tasks/added_later").status_code == 404  # no watcher: not yet
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/tasks/added_later").status_code != 200:
            assert time.monotonic() < deadline, "SIGHUP did not reload the catalog"
            time.sleep(0.05)
        assert process.poll() is None  # SIGHUP reloads, it does not end the service
        assert 'trigger="sighup"' in httpx.get(f"{url}/metrics").text


@pytest.mark.engine
@pytest.mark.slow  # a service of its own waiting out a real engine's start: make test-slow
def test_real_engine_landmark(browser: Any, tmp_path: Path) -> None:
    """The shipped catalog on the real engine: the page waits out the engine start, then the Chinese example."""
    shots = os.environ.get("EXTRACTOR_SCREENSHOT_DIR")
    # adapters off: one engine (the landmark task has no adapter; the SNIPS one would start a second)
    extra = ["--adapter-serving", "off"]
    with serve(tmp_path / "home", repo_root(), engine="vllm", ready_s=900, wait_ready=False, extra=extra) as (url, _):
        page = Page(browser, url)
        page.page.set_viewport_size({"width": 1280, "height": 860})
        page.pick("landmark_slots")
        page.page.fill("textarea#text", LANDMARK_TEXT)
        starting = httpx.get(f"{url}/readyz").status_code == 503
        with page.page.expect_response(lambda r: "/extract/" in r.url and r.status == 200, timeout=900_000) as answer:
            page.page.click("button#run")
            if starting:  # a 503 while the engine starts: the page says so and retries by itself
                page.page.wait_for_function(
                    "() => document.querySelector('#status').textContent.includes('engine is starting')"
                )
        result = answer.value.json()
        page.page.wait_for_selector("#stats:not(:empty)")
        check_highlights(page, LANDMARK_TEXT, result)
        first = result["spans"][0]["path"]
        page.page.hover(f"#highlighted mark[data-path='{first}']")
        assert page.page.get_attribute(f"#tree li[data-path='{first}']", "class") == "selected"
        assert not page.errors and not page.dialogs
        if shots:  # docs/: the page before and after a run, the engine ready
            page.page.reload()
            page.page.wait_for_selector("select#task option", state="attached")
            page.pick("landmark_slots")
            page.page.fill("textarea#text", LANDMARK_TEXT)
            page.page.wait_for_selector("#engine.ok")
            page.page.screenshot(path=str(Path(shots) / "playground-before.png"))
            page.run()
            page.page.hover(f"#highlighted mark[data-path='{first}']")
            page.page.screenshot(path=str(Path(shots) / "playground-after.png"), full_page=True)
        page.close()
