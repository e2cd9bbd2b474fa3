"""vLLM compiled (the default) vs eager (``EXTRACTOR_ENFORCE_EAGER``) on the CPU: start and throughput.

vLLM 0.32 on the CPU compiles the model at every engine start (its compile cache does not load
there). This runs ``extractor eval`` on the first ``--per-task`` SNIPS dev lines of each task, as
shipped (the SNIPS adapter merged: two engines), once compiled and once eager, one after the
other; the command's wall time less the evaluation's own elapsed time is the start.

    .venv/bin/python -m bench.experiments.eager [--per-task 20]   # runs both, writes raw/eager-*.json and eager.md
    .venv/bin/python -m bench.experiments.eager --render          # eager.md from the raw files
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench import common
from bench.common import RESULTS, ROOT, write_table

MODES = {"compiled": "0", "eager": "1"}


def run(per_task: int) -> None:
    for name, flag in MODES.items():
        command = [sys.executable, "-m", "extractor.cli", "eval", str(common.GOLD), "--task-field", "intent"]
        command += ["--task-map", "snips", "--per-task", str(per_task), "--json"]
        env = {**os.environ, "EXTRACTOR_ENFORCE_EAGER": flag}
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - started
        report = json.loads(done.stdout)
        keep = {k: report[k] for k in ("docs", "f1", "docs_per_s", "elapsed_s", "schema_valid_rate")}
        record = {**keep, "wall_s": wall, "per_task": per_task, "machine": common.machine()}
        (RESULTS / "raw" / f"eager-{name}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"bench: {name}: {wall:.0f} s, {report['docs_per_s']:.3f} docs/s", flush=True)


def render() -> None:
    runs: dict[str, dict[str, Any]] = {
        name: json.loads((RESULTS / "raw" / f"eager-{name}.json").read_text(encoding="utf-8")) for name in MODES
    }
    rows = [
        f"| {name} | {r['wall_s'] - r['elapsed_s']:.0f} | {r['docs_per_s']:.3f} | {r['f1']:.3f} "
        f"| {r['schema_valid_rate']:.0%} | {r['wall_s']:.0f} |"
        for name, r in runs.items()
    ]
    first = runs["compiled"]
    m = first["machine"]
    write_table(
        "eager.md",
        "vLLM on the CPU: compiled (default) vs eager",
        f"{m['date']}, {m['cores']} cores ({m['cpu']}), {m['memory']}, vLLM {m.get('vllm', '?')}: `extractor eval` "
        f"on the first {first['per_task']} SNIPS dev lines of each task ({first['docs']} lines) as shipped (the "
        "SNIPS adapter merged: two engines), compiled then eager, one after the other "
        "(`python -m bench.experiments.eager`). Start: the command's wall time less the evaluation's own.",
        ["vLLM", "start s", "docs/s", "F1", "schema-valid", "wall s"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-task", type=int, default=20)
    parser.add_argument("--render", action="store_true", help="only write eager.md from the raw files")
    args = parser.parse_args()
    if not args.render:
        run(args.per_task)
    render()


if __name__ == "__main__":
    main()
