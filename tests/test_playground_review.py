"""The playground's Review tab in a real browser: Debian's Chromium, headless, driven by Playwright.

One service for the module (the real app under uvicorn, in a thread, on a scripted engine whose
requests the tests read), with an API key: the page sends the key typed into it on every call.
The key gate also closes the page's own files; a proxy in front would add the key to those, and
here the browser's router does (the API calls carry only what the page itself sends).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from extractor import Extractor, ScriptedEngine, Settings
from extractor.catalog.reload import load_catalog
from extractor.config import repo_root
from extractor.engines.base import GenerationRequest
from extractor.server import create_app

from .test_playground_browser import CHROMIUM, CHROMIUM_ARGS

TASK = "landmark_slots"
KEY = "k-playground-review-0123456789"
TEXT = "阿尔罕布拉宫位于西班牙格拉纳达，是摩尔人统治时期的宫殿建筑。"
NEAR = "阿尔罕布拉宫位于西班牙格拉纳达，是摩尔人统治时期的宫殿。"
# The wrong city is a span of the text, as grounded decoding would allow: the country's.
WRONG = {
    "name": "阿尔罕布拉宫",
    "country": "西班牙",
    "city": "西班牙",
    "category": "宫殿建筑",
    "period": "摩尔人统治时期",
}
RIGHT = {**WRONG, "city": "格拉纳达"}
# What the scripted model answers for a text (set by each test); any other text gets the output of
# the worked example nearest to it, so what the next request answers follows from its prompt.
ANSWERS: dict[str, dict[str, Any]] = {}


def respond(request: GenerationRequest) -> str:
    messages = request.messages
    text = messages[-1]["content"].split("\n\n")[0]  # the text, without the pool's hints after it
    if text in ANSWERS:
        return json.dumps(ANSWERS[text], ensure_ascii=False)
    shown = [
        (m["content"], messages[n + 1]["content"])
        for n, m in enumerate(messages[:-1])
        if m["role"] == "user" and messages[n + 1]["role"] == "assistant"
    ]
    if not shown:  # the readiness canary
        return "{}"
    return max(shown, key=lambda pair: len(set(pair[0]) & set(text)))[1]


def unsure_of_the_city(raw: str, start: int, end: int) -> float:
    """Token log-probabilities: the city's tokens are the doubtful ones."""
    city, after = raw.find('"city"'), raw.find('"category"')
    return -0.5 if 0 <= city <= start < after else -0.01


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shipped landmark task (schema, prompt, pool) that corrections may write to."""
    root = tmp_path_factory.mktemp("playground") / "catalog"
    root.mkdir()
    for folder, name in (("schemas", f"{TASK}.json"), ("prompts", f"{TASK}.j2"), ("examples", f"{TASK}.jsonl")):
        (root / folder).mkdir()
        shutil.copy(repo_root() / folder / name, root / folder / name)
    return root


@pytest.fixture(scope="module")
def engine() -> ScriptedEngine:
    return ScriptedEngine(respond=respond, token_logprob=unsure_of_the_city)


@pytest.fixture(scope="module")
def server(root: Path, engine: ScriptedEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = root.parent / "home"  # the reviewers' pool lands here, never in the catalog's examples/
    settings = Settings.from_env({}, engine="scripted", home=home, tasks_dir=root, api_keys=KEY)
    extractor = Extractor(settings=settings, engine=engine, catalog=load_catalog(root))
    server = uvicorn.Server(uvicorn.Config(create_app(extractor), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    while httpx.get(f"{url}/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the engine did not turn ready"
        time.sleep(0.05)
    yield url
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def http(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, headers={"authorization": f"Bearer {KEY}"}, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} not found: the browser tests need Debian's chromium; run `make setup-browser`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def empty_queue(http: httpx.Client) -> Iterator[None]:
    """Each test starts with nothing pending and leaves nothing pending."""
    yield
    for item in http.get("/review", params={"status": "pending"}).json()["items"]:
        http.post(f"/review/{item['id']}/reject")


def queue(http: httpx.Client, text: str, answer: dict[str, Any]) -> int:
    """Extract ``text`` (the model answers ``answer``) and send the result to review; the item's id."""
    ANSWERS[text] = answer
    response = http.post(f"/extract/{TASK}", json={"text": text, "review": True})
    assert response.status_code == 200, response.text
    review_id: int = response.json()["review_id"]
    return review_id


class Review:
    """One browser page on the Review tab, its key and reviewer typed in; records page errors."""

    def __init__(self, browser: Any, url: str) -> None:
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url + "/#review")
        self.page.fill("#api-key", KEY)
        self.page.fill("#reviewer", "ann")
        self.page.press("#reviewer", "Tab")  # change events: the key is kept, the queue reloads with it
        self.settled()
        self.page.locator("body").click(position={"x": 5, "y": 5})  # nothing focused: keys go to the page

    def refresh(self) -> None:
        """Reload the queue (items were added since the page opened) and open its first item."""
        self.page.click("#queue-refresh")
        self.settled()
        self.page.locator("body").click(position={"x": 5, "y": 5})

    def settled(self) -> None:
        """Wait until the queue and the open item have loaded."""
        self.page.wait_for_selector("#review-view[aria-busy='false']", state="attached")

    def current(self, item_id: int) -> None:
        """Wait until item ``item_id`` is open (the list's current row, and its title)."""
        self.page.wait_for_selector(f"#queue-list tr.current[data-id='{item_id}']")
        self.page.wait_for_function(
            "t => document.querySelector('#item-title').textContent.startsWith(t)", arg=f"#{item_id} "
        )

    def message(self) -> str:
        return self.page.text_content("#review-message") or ""

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def review(browser: Any, server: str) -> Iterator[Review]:
    page = Review(browser, server)
    yield page
    assert not page.errors, page.errors
    page.close()


def drag_over(page: Any, start: int, end: int) -> None:
    """Select characters ``start:end`` (code points) of the item's text with the mouse, as a person does."""
    first, last = page.evaluate(
        """([start, end]) => {
            const view = document.getElementById('review-text');
            const walker = document.createTreeWalker(view, NodeFilter.SHOW_TEXT);
            const boxes = {};
            let at = 0;
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                let unit = 0;
                for (const ch of Array.from(node.data)) {
                    if (at === start || at === end - 1) {
                        const range = document.createRange();
                        range.setStart(node, unit);
                        range.setEnd(node, unit + ch.length);
                        boxes[at] = range.getBoundingClientRect().toJSON();
                    }
                    unit += ch.length;
                    at += 1;
                }
            }
            return [boxes[start], boxes[end - 1]];
        }""",
        [start, end],
    )
    page.mouse.move(first["left"] + 1, first["top"] + first["height"] / 2)
    page.mouse.down()
    page.mouse.move(last["right"] - 1, last["top"] + last["height"] / 2, steps=4)
    page.mouse.up()


def key_name() -> str:
    from extractor.server.access import parse_key

    return parse_key(KEY, where="the test's key").name


def pool_lines(root: Path) -> list[dict[str, Any]]:
    """The merged pool: the shipped lines, then the reviewers' under the home, without who decided."""
    lines = (root / "examples" / f"{TASK}.jsonl").read_text(encoding="utf-8").splitlines()
    reviewed = root.parent / "home" / "pools" / f"{TASK}.jsonl"
    if reviewed.is_file():
        lines += reviewed.read_text(encoding="utf-8").splitlines()
    found = [json.loads(line) for line in lines if line.strip()]
    return [{k: v for k, v in line.items() if k != "review"} for line in found]


def test_a_value_corrected_by_selecting_it_teaches_the_next_request(
    review: Review, http: httpx.Client, engine: ScriptedEngine, root: Path
) -> None:
    item_id = queue(http, TEXT, WRONG)
    before = pool_lines(root)
    page = review.page
    review.refresh()
    review.current(item_id)
    # every span highlighted with its confidence; the doubtful city is the least confident
    assert page.text_content("#review-text") == TEXT
    marks = page.eval_on_selector_all(
        "#review-text mark", "ms => ms.map(m => [m.dataset.pointer, m.dataset.badge, m.className])"
    )
    assert {pointer for pointer, _, _ in marks} == {"/name", "/country", "/city", "/category", "/period"}
    assert all(badge.endswith("%") for _, badge, _ in marks)
    city = next(m for m in marks if m[0] == "/city")
    assert "conf-low" in city[2] and all("conf-high" in m[2] for m in marks if m[0] != "/city")
    assert "conf-low" in (page.get_attribute("#queue-list tr.current td:nth-child(3) span", "class") or "")

    start = TEXT.index("格拉纳达")
    drag_over(page, start, start + len("格拉纳达"))
    page.wait_for_selector("#assign:not([hidden])")
    assert page.text_content("#assign-value") == "格拉纳达"
    page.select_option("#assign-field", "/city")
    page.keyboard.press("Enter")  # assigns the selection
    page.wait_for_selector("#assign", state="hidden")
    assert "格拉纳达" in (page.text_content("#review-fields tr[data-pointer='/city']") or "")
    assert page.text_content("#review-text mark.edited") == "格拉纳达"
    with page.expect_response(lambda r: r.url.endswith(f"/review/{item_id}/correct")) as answer:
        page.keyboard.press("Enter")  # sends the correction
    assert answer.value.status == 200, answer.value.text()
    page.wait_for_function("() => document.querySelector('#review-message').textContent.includes('corrected')")
    assert f"pools/{TASK}.jsonl" in review.message()

    item = http.get(f"/review/{item_id}").json()
    # the key decides, the name the reviewer typed beside it
    assert (item["status"], item["corrected"], item["reviewer"]) == ("corrected", RIGHT, f"{key_name()} (ann)")
    assert pool_lines(root) == [*before, {"id": f"review-{item_id}", "text": TEXT, "output": RIGHT}]
    # the next request for a near-identical text shows the corrected example, and the city comes back right
    result = http.post(f"/extract/{TASK}", json={"text": NEAR}).json()
    messages = engine.history[-1].messages
    text = [m["content"].split("\n\n")[0] for m in messages]  # each text is followed by the pool's hints
    shown = [(text[n], messages[n + 1]["content"]) for n, m in enumerate(messages[:-1]) if m["role"] == "user"]
    assert (TEXT, json.dumps(RIGHT, ensure_ascii=False, separators=(",", ":"))) in shown
    assert messages[-1]["role"] == "user" and text[-1] == NEAR
    assert result["data"]["city"] == "格拉纳达"


def test_keyboard_only_next_previous_accept_reject(review: Review, http: httpx.Client, root: Path) -> None:
    texts: dict[str, dict[str, Any]] = {
        "圣家族大教堂位于西班牙巴塞罗那，始建于1882年。": {
            "name": "圣家族大教堂", "country": "西班牙", "city": "巴塞罗那", "category": "大教堂", "period": "1882年"
        },
        "比萨斜塔是意大利比萨的一座钟楼。": {
            "name": "比萨斜塔", "country": "意大利", "city": "比萨", "category": "钟楼", "period": None
        },
    }  # fmt: skip
    for text, answer in texts.items():
        queue(http, text, answer)
    order = [i["id"] for i in http.get("/review", params={"status": "pending", "order": "confidence"}).json()["items"]]
    assert len(order) == 2
    before = pool_lines(root)
    page = review.page
    review.refresh()  # the queue as it is now, least confident first
    review.current(order[0])
    page.keyboard.press("j")
    review.current(order[1])
    page.keyboard.press("k")
    review.current(order[0])
    with page.expect_response(lambda r: r.url.endswith(f"/review/{order[0]}/accept")) as answer:
        page.keyboard.press("a")
    assert answer.value.status == 200
    review.current(order[1])  # moved on by itself
    with page.expect_response(lambda r: r.url.endswith(f"/review/{order[1]}/reject")) as answer:
        page.keyboard.press("r")
    assert answer.value.status == 200
    page.wait_for_selector("#item-empty:not([hidden])")
    assert page.locator("#queue-list tbody tr").count() == 0
    assert [http.get(f"/review/{i}").json()["status"] for i in order] == ["accepted", "rejected"]
    accepted = http.get(f"/review/{order[0]}").json()
    assert pool_lines(root) == [
        *before,
        {"id": f"review-{order[0]}", "text": accepted["text"], "output": texts[accepted["text"]]},
    ]


def test_decided_elsewhere_first_is_a_clear_409_and_a_bad_accept_shows_the_422(
    review: Review, http: httpx.Client
) -> None:
    item_id = queue(http, TEXT, WRONG)
    taj = {"name": "泰姬陵", "country": "印度", "city": "新德里", "category": "陵墓", "period": None}
    missing = queue(http, "泰姬陵是印度阿格拉的一座陵墓。", taj)  # the city is not in the text
    page = review.page
    review.refresh()
    page.click(f"#queue-list tr[data-id='{item_id}']")
    review.current(item_id)
    assert http.post(f"/review/{item_id}/reject", headers={"x-reviewer": "bob"}).status_code == 200
    with page.expect_response(lambda r: r.url.endswith(f"/review/{item_id}/accept")) as answer:
        page.keyboard.press("a")
    assert answer.value.status == 409
    page.wait_for_selector("#item-status:text('rejected')")  # the item as it is now
    assert review.message().startswith("Decided by someone else: ")
    assert f"review item {item_id} was already rejected by" in review.message() and "(bob)" in review.message()
    assert page.is_disabled("#do-accept") and page.is_disabled("#do-reject")
    # values not in the text cannot be accepted as they are: the server's reason shows
    page.click(f"#queue-list tr[data-id='{missing}']")
    review.current(missing)
    assert "not in the text" in (page.text_content("#review-fields tr[data-pointer='/city']") or "")
    with page.expect_response(lambda r: r.url.endswith(f"/review/{missing}/accept")) as answer:
        page.keyboard.press("a")
    assert answer.value.status == 422
    page.wait_for_function("() => document.querySelector('#review-message').textContent.startsWith('Not saved')")
    assert f"correct it instead (POST /review/{missing}/correct)" in review.message()
    assert http.get(f"/review/{missing}").json()["status"] == "pending"
