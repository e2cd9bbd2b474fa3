"""schemathesis with every check against `extractor serve` (scripted engine): the document and the behaviour agree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from extractor.config import repo_root

from .live import served

pytestmark = pytest.mark.adversarial


def test_schemathesis_finds_nothing(tmp_path: Path) -> None:
    # A copy of the catalog: an item it queues and then accepts would be appended to the task's pool.
    catalog = tmp_path / "catalog"
    for folder in ("schemas", "prompts", "examples", "adapters", "calibration"):
        if (repo_root() / folder).is_dir():
            shutil.copytree(repo_root() / folder, catalog / folder)
    with served(tmp_path, tasks_dir=catalog) as (_, url):
        command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(repo_root() / "schemathesis.toml")]
        # 100 examples, seed 1: against the routes before issue 52 this config and hook fail on an empty cursor,
        # a content that is not base64 (with an undeclared media type in the same case) and /v1's n: 0.
        command += ["run", f"{url}/openapi.json", "--checks", "all", "--max-examples", "100", "--seed", "1"]
        command += ["--output-sanitize", "false", "--no-color"]
        env = {**os.environ, "PYTHONPATH": str(repo_root()), "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks"}
        done = subprocess.run(command, cwd=repo_root(), env=env, capture_output=True, text=True, timeout=400)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert "No issues found" in report or "passed" in report, report[-3000:]
    print(next((line for line in report.splitlines() if "generated" in line), ""), report.splitlines()[-1])


def test_schemathesis_with_an_extract_only_key_writes_nothing_and_decides_nothing(tmp_path: Path) -> None:
    # The fuzzer's key may extract only: its review decisions and reloads get 403, and the catalog
    # the service reads (a copy here, as the service would read the source tree) stays as it was.
    catalog = tmp_path / "catalog"
    for folder in ("schemas", "prompts", "examples", "calibration"):
        if (repo_root() / folder).is_dir():
            shutil.copytree(repo_root() / folder, catalog / folder)
    before = {p.relative_to(catalog): p.read_bytes() for p in catalog.rglob("*") if p.is_file()}
    fuzzer, reviewer = "k-fuzz-extract-0001", "k-check-review-0001"
    config = tmp_path / "schemathesis.toml"
    text = (repo_root() / "schemathesis.toml").read_text(encoding="utf-8")
    config.write_text(text.replace('expected-statuses = ["2xx"', 'expected-statuses = ["2xx", "403"'))
    keys = f"{fuzzer} name=fuzzer scopes=extract, {reviewer} name=checker scopes=review"
    with served(tmp_path, tasks_dir=catalog, env={"EXTRACTOR_API_KEYS": keys}) as (_, url):
        command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config)]
        command += ["run", f"{url}/openapi.json", "--checks", "all", "--max-examples", "30", "--seed", "1"]
        command += ["--header", f"Authorization: Bearer {fuzzer}", "--output-sanitize", "false", "--no-color"]
        env = {**os.environ, "PYTHONPATH": str(repo_root()), "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks"}
        done = subprocess.run(command, cwd=repo_root(), env=env, capture_output=True, text=True, timeout=300)
        headers = {"authorization": f"Bearer {reviewer}"}
        decided = [
            item
            for status in ("accepted", "corrected", "rejected")
            for item in httpx.get(f"{url}/review", params={"status": status}, headers=headers).json()["items"]
        ]
        queued = httpx.get(f"{url}/review", params={"status": "pending"}, headers=headers).json()["items"]
        refused = httpx.post(f"{url}/review/1/accept", headers={"authorization": f"Bearer {fuzzer}"})
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert queued, "the fuzzer queued nothing: the review routes were not reached"
    assert decided == [], decided
    assert refused.status_code == 403 and "lacks the scope 'review'" in refused.json()["message"]
    after = {p.relative_to(catalog): p.read_bytes() for p in catalog.rglob("*") if p.is_file()}
    assert after == before
    assert not (tmp_path / "home" / "pools").exists()
    print(next((line for line in report.splitlines() if "generated" in line), ""), report.splitlines()[-1])
