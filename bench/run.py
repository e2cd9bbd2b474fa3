"""`make bench`: P1–P3 and the quality table in one run, then the report and the plot.

Each phase starts its own engine in its own process (one engine at a time on a small machine):
``bench.compact`` (P1, P2, the quality table and P3's compact side), then ``bench.whitespace``
(P3's other side). Results: ``bench/results/{quick,full}.md`` and ``.png``, and the raw JSON
under ``bench/results/raw/``.

    python -m bench.run --quick      # ~5 minutes on 2 CPU cores, engine starts included
    python -m bench.run              # the full run
    python -m bench.run --report     # re-render the report from the last raw results
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench import report
from bench.common import RESULTS, ROOT


def main() -> int:
    parser = argparse.ArgumentParser(description="extractor benchmarks: P1-P3 and quality")
    parser.add_argument("--quick", action="store_true", help="a small run (a few minutes)")
    parser.add_argument("--report", action="store_true", help="only render the report from the last raw results")
    args = parser.parse_args()
    name = "quick" if args.quick else "full"
    raw = {phase: RESULTS / "raw" / f"{name}-{phase}.json" for phase in ("compact", "whitespace")}
    started = time.perf_counter()
    if not args.report:
        for phase, path in raw.items():
            log = path.with_suffix(".log")
            print(f"== {phase} phase (engine logs: {log})", flush=True)
            command = [sys.executable, "-m", f"bench.{phase}", "--out", str(path), *(["--quick"] if args.quick else [])]
            if run_phase(command, log) != 0:
                print(f"bench: the {phase} phase failed; see {log}", file=sys.stderr)
                return 1
    compact, whitespace = (json.loads(path.read_text(encoding="utf-8")) for path in raw.values())
    png = RESULTS / f"{name}.png"
    plotted = report.plot(compact, whitespace, png)
    text = report.markdown(compact, whitespace, plot=png.name if plotted else None)
    (RESULTS / f"{name}.md").write_text(text, encoding="utf-8")
    print(text)
    print(f"report: {RESULTS / f'{name}.md'}" + (f", plot: {png}" if plotted else " (no matplotlib: no plot)"))
    if not args.report:
        print(f"bench took {time.perf_counter() - started:.0f} s")
    return 0


def run_phase(command: list[str], log: Path) -> int:
    """Run one phase, its output to ``log``; echo its ``bench:`` lines (vLLM's logs are long)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        for line in process.stdout:
            sink.write(line)
            if line.startswith("bench: "):
                print(line.removeprefix("bench: "), end="", flush=True)
        return process.wait()


if __name__ == "__main__":
    sys.exit(main())
