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


def test_sigterm_finishes_in_flight_and_refuses_new(tmp_path: Path) -> None:
    with serve(tmp_path) as (process, url):
        answers: list[httpx.Response] = []
        client = threading.Thread(
            target=lambda: answers.append(
                httpx.post(f"{url}/extract/landmark_slots", json={"text": LANDMARK_TEXT}, timeout=30)
            )
        )
        client.start()
        time.sleep(0.5)  # the request is in flight
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(httpx.ConnectError):
            httpx.post(f"{url}/extract/landmark_slots", json={"text": LANDMARK_TEXT}, timeout=5)
        client.join(timeout=30)
        assert answers and answers[0].status_code == 200, answers
        assert answers[0].json()["task"] == "landmark_slots"
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once drained
