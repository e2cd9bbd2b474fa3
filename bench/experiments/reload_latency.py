"""Catalog reload latency: a task file saved -> that version served, through `extractor serve` and its watcher.

.venv/bin/python -m bench.experiments.reload_latency [--rounds 10]

Runs `extractor serve` on the scripted engine (a reload never touches the engine, so the engine
does not matter) over a copy of the shipped catalog (9 tasks, 8 pools, about 7,000 pool lines),
then for each round: adds a new task, edits it, breaks it (half a schema written), fixes it.
Each step is timed from the moment the last file is saved (os.replace) until GET /tasks shows
that version (polled every 5 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import write_table
from bench.service import running
from extractor.config import repo_root

POLL_S = 0.005


def _save(path: Path, text: str) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)


def _schema(k: int) -> str:
    return json.dumps(
        {
            "type": "object",
            "description": f"round {k}",
            "properties": {"city": {"type": "string", "description": "the city"}},
            "x-extractor": {"examples": [{"text": "I live in Oslo.", "output": {"city": "Oslo"}}]},
        }
    )


def _wait(url: str, name: str, check: object, timeout_s: float = 30) -> float:
    """Seconds until GET /tasks shows ``name`` in the state ``check`` wants."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        listed = httpx.get(f"{url}/tasks", timeout=10).json()
        task = next((t for t in listed["tasks"] if t["name"] == name), None)
        if check(task):  # type: ignore[operator]
            return time.perf_counter() - start
        time.sleep(POLL_S)
    raise TimeoutError(f"{name}: not served within {timeout_s} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "catalog"
        for folder in ("schemas", "prompts", "examples"):
            shutil.copytree(repo_root() / folder, root / folder)
        steps: dict[str, list[float]] = {"add": [], "edit": [], "break (stale shown)": [], "fix": []}
        with running("scripted", extra=["--tasks-dir", str(root), "--home", tmp]) as (_, url):
            time.sleep(1.0)  # the watcher is set up
            for k in range(args.rounds):
                name = f"bench_{k}"
                _save(root / "prompts" / f"{name}.j2", "Extract the city.")
                _save(root / "schemas" / f"{name}.json", _schema(k))
                steps["add"].append(_wait(url, name, lambda t: t is not None))
                _save(root / "schemas" / f"{name}.json", _schema(k + 1000))
                steps["edit"].append(_wait(url, name, lambda t, k=k: t and t["description"] == f"round {k + 1000}"))
                _save(root / "schemas" / f"{name}.json", _schema(k)[:30])
                steps["break (stale shown)"].append(_wait(url, name, lambda t: t and t["stale"]))
                _save(root / "schemas" / f"{name}.json", _schema(k + 2000))
                steps["fix"].append(_wait(url, name, lambda t: t and not t["stale"]))
                time.sleep(0.3)
            metrics = httpx.get(f"{url}/metrics", timeout=10).text
    rows = []
    for step, times in steps.items():
        ms = sorted(t * 1000 for t in times)
        rows.append(f"| {step} | {len(ms)} | {statistics.median(ms):.0f} | {max(ms):.0f} | {min(ms):.0f} |")
    reloads = [line for line in metrics.splitlines() if line.startswith("extractor_catalog_reloads_total")]
    intro = (
        f"`python -m bench.experiments.reload_latency --rounds {args.rounds}`: `extractor serve` (scripted engine, "
        "watcher on) over a copy of the shipped catalog; each step timed from the file saved to GET /tasks showing "
        "that version "
        f"(polled every {POLL_S * 1000:.0f} ms). The watcher waits for 100 ms without change before it reloads. "
        "Reload counters at the end: " + "; ".join(f"`{line}`" for line in reloads)
    )
    path = write_table("reload.md", "Catalog reload latency", intro, ["step", "n", "p50 ms", "max ms", "min ms"], rows)
    print(path.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
