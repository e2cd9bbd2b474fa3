"""schemathesis with every check against `extractor serve` (scripted engine): the document and the behaviour agree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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
        command += ["run", f"{url}/openapi.json", "--checks", "all", "--max-examples", "60", "--seed", "1"]
        command += ["--output-sanitize", "false", "--no-color"]
        env = {**os.environ, "PYTHONPATH": str(repo_root()), "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks"}
        done = subprocess.run(command, cwd=repo_root(), env=env, capture_output=True, text=True, timeout=300)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    assert "No issues found" in report or "passed" in report, report[-3000:]
    print(next((line for line in report.splitlines() if "generated" in line), ""), report.splitlines()[-1])
