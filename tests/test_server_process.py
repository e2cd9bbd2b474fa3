"""`extractor serve` as a process (scripted engine): client disconnects and SIGTERM over real HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from extractor.config import repo_root

from .conftest import LANDMARK_TEXT
from .test_server import metric

DELAY_S = 2.0  # each scripted generation takes this long, so a request stays in flight


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    command = [sys.executable, "-m", "extractor.cli", "serve", "--engine", "scripted", "--port", str(port)]
    command += ["--scripted-delay-s", str(DELAY_S), "--home", str(tmp_path), "--tasks-dir", str(repo_root())]
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(command, cwd=repo_root(), stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "the server did not turn ready"
            try:
                if httpx.get(f"{url}/readyz", timeout=10).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        log.close()


def test_client_disconnect_aborts_its_request(tmp_path: Path) -> None:
    with serve(tmp_path) as (_, url):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/extract/landmark_slots", json={"text": LANDMARK_TEXT}, timeout=0.5)
        time.sleep(0.3)  # well before the generation would have ended (DELAY_S)
        text = httpx.get(f"{url}/metrics").text
        assert metric(text, "extractor_requests_total", task="landmark_slots", status="499") == 1
        assert metric(text, "extractor_in_flight") == 0


def _in_flight(url: str, answers: list[httpx.Response | Exception]) -> threading.Thread:
    def post() -> None:
        try:
            answers.append(httpx.post(f"{url}/extract/landmark_slots", json={"text": LANDMARK_TEXT}, timeout=30))
        except httpx.TransportError as error:
            answers.append(error)

    client = threading.Thread(target=post)
    client.start()
    time.sleep(0.5)  # the request is in flight
    return client


def test_sigterm_drains_while_still_listening(tmp_path: Path) -> None:
    with serve(tmp_path) as (process, url), httpx.Client(base_url=url, timeout=5) as kept:
        assert kept.get("/healthz").status_code == 200  # a keep-alive connection opened before the signal
        answers: list[httpx.Response | Exception] = []
        client = _in_flight(url, answers)
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        time.sleep(0.3)
        # new requests: answered 503 (not a refused connection), on a new connection and on the kept one
        fresh = httpx.post(f"{url}/extract/landmark_slots", json={"text": LANDMARK_TEXT}, timeout=5)
        on_kept = kept.post("/extract/landmark_slots", json={"text": LANDMARK_TEXT})
        messages = [{"role": "user", "content": LANDMARK_TEXT}]
        openai = httpx.post(f"{url}/v1/chat/completions", json={"model": "landmark_slots", "messages": messages})
        chat = httpx.post(f"{url}/chat", json={"query": "hi"}, timeout=5)
        ready = httpx.get(f"{url}/readyz", timeout=5)
        assert process.poll() is None  # still draining
        client.join(timeout=30)
        code = process.wait(timeout=30)
        stopped_s = time.monotonic() - signalled
    for refused in (fresh, on_kept, openai, chat):
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1" and refused.headers["connection"] == "close"
    assert fresh.json()["error"] == "not_ready" and "shutting down" in fresh.json()["message"]
    assert openai.json()["error"]["code"] == "not_ready"  # OpenAI's error shape under /v1
    assert ready.status_code == 503 and "shutting down" in ready.json()["reason"]
    assert len(answers) == 1 and isinstance(answers[0], httpx.Response), answers
    assert answers[0].status_code == 200 and answers[0].json()["task"] == "landmark_slots"
    assert code == 0, (tmp_path / "serve.log").read_text()
    assert stopped_s < DELAY_S + 3  # it exits once the in-flight request is answered, not at the timeout


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    with serve(tmp_path) as (process, url):
        answers: list[httpx.Response | Exception] = []
        client = _in_flight(url, answers)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = process.wait(timeout=30)
        stopped_s = time.monotonic() - signalled
        client.join(timeout=30)
    assert stopped_s < DELAY_S - 0.5  # before the in-flight request could have finished
    assert code == -signal.SIGTERM
    assert len(answers) == 1 and isinstance(answers[0], httpx.TransportError), answers
