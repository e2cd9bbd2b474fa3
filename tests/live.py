"""Real servers on free ports for the adversarial tests: `extractor serve` (scripted engine) and stub HTTP servers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from extractor.config import repo_root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(
    tmp_path: Path, *, env: dict[str, str] | None = None, args: tuple[str, ...] = (), tasks_dir: Path | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``extractor serve --engine scripted`` on a free port, ready; yields the process and its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "extractor.cli", "serve", "--engine", "scripted", "--port", str(port)]
    command += ["--home", str(tmp_path / "home"), "--tasks-dir", str(tasks_dir or repo_root()), *args]
    log_path = tmp_path / f"serve-{port}.log"
    log = log_path.open("wb")
    full_env = {**os.environ, "PYTHONPATH": str(repo_root()), **(env or {})}
    process = subprocess.Popen(command, cwd=repo_root(), stdout=log, stderr=subprocess.STDOUT, env=full_env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the server did not start"
            try:
                httpx.get(f"{url}/healthz", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        log.close()


def log_of(tmp_path: Path) -> str:
    """Everything the servers started in ``tmp_path`` wrote."""
    return "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("serve-*.log")))


class StubServer:
    """An HTTP server on a free port that counts every connection and answers 404."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub.requests.append(self.path)
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def verify_request(self, request: object, client_address: object) -> bool:
                stub.connections += 1
                return True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
