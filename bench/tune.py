"""A task that tunes itself (issue 51), tried as a new user would: the CLI only, on the 2 cores.

    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.tune --task zh_entities --budget 1500
    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.tune --task zh_entities --model gemma3-270m --no-tune
    flock /tmp/extractor-engine.lock .venv/bin/python -m bench.tune --shipped snips_get_weather ... --lines 40 --k 0,3

For the Chinese entity task (CLUENER, ``../shared/eval/cluener``): the task of ``bench/tasks/``
written **without options** (its schema's ``x-extractor`` block cut to its fixed examples) is put
in a temporary catalog; then, as an analyst would, ``extractor examples import`` of the pool,
``extractor tune`` (``--budget``), and ``extractor eval`` on the first ``--dev`` held-out dev
lines (never in the pool). Each command's own output is kept in the record. Rows go to
``bench/results/tuning.json`` (figures only: no CLUENER text) and ``bench/results/tuning.md`` is
rendered from them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, machine, save

DATA = {"zh_entities": ROOT.parent / "shared" / "eval" / "cluener"}
RAW = RESULTS / "tuning.json"
PAGE = RESULTS / "tuning.md"


def new_task(folder: Path, name: str) -> None:
    """``name`` from bench/tasks as a new user writes it: schema and prompt, no options but its examples."""
    source = ROOT / "bench" / "tasks" / name
    for sub in ("schemas", "prompts"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    schema = json.loads((source / "schemas" / f"{name}.json").read_text(encoding="utf-8"))
    block = schema.get("x-extractor") or {}
    schema["x-extractor"] = {"examples": block["examples"]} if "examples" in block else {}
    (folder / "schemas" / f"{name}.json").write_text(json.dumps(schema, ensure_ascii=False, indent=2))
    shutil.copy(source / "prompts" / f"{name}.j2", folder / "prompts" / f"{name}.j2")


def cli(*args: str, env: dict[str, str]) -> tuple[str, str, float]:
    """Run ``extractor ARGS`` as a user would; its stdout, stderr (engine logs dropped) and seconds."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "extractor"), *args], env=env, capture_output=True, text=True, check=False
    )
    took = time.perf_counter() - started
    said = "\n".join(x for x in done.stderr.splitlines() if not re.search(r"\b(INFO|WARNING|DEBUG)\b|^\s*$|it/s]", x))
    if done.returncode != 0:
        raise SystemExit(f"extractor {' '.join(args)} failed ({done.returncode}):\n{said[-3000:]}")
    return done.stdout, said, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="zh_entities", choices=sorted(DATA))
    parser.add_argument("--budget", type=float, default=1500, help="extractor tune --budget (seconds)")
    parser.add_argument("--lines", type=int, default=100, help="extractor tune --lines")
    parser.add_argument("--dev", type=int, default=100, help="held-out dev lines scored by extractor eval")
    parser.add_argument("--model", default="default", help="EXTRACTOR_MODEL for tune and eval")
    parser.add_argument("--no-tune", action="store_true", help="eval the task as imported (the defaults alone)")
    parser.add_argument("--label", default="")
    parser.add_argument("--note", default="", help="a line the page prints under the run's table (how it ran)")
    parser.add_argument(
        "--shipped",
        nargs="+",
        metavar="TASK",
        help="instead: `extractor tune` each shipped task on a copy of the catalog (--dry-run: the table only)",
    )
    parser.add_argument("--k", default="0,3,5", help="extractor tune --k (with --shipped)")
    args = parser.parse_args()
    if args.shipped:
        for task in args.shipped:
            shipped(task, lines=args.lines, budget=args.budget, ks=args.k)
        return
    folder = Path(tempfile.mkdtemp(prefix=f"tune-{args.task}-"))
    env = {**os.environ, "EXTRACTOR_TASKS_DIR": str(folder), "EXTRACTOR_MODEL": args.model}
    data = DATA[args.task]
    new_task(folder, args.task)
    record: dict[str, Any] = {"task": args.task, "model": args.model, "machine": machine()}
    _, said, took = cli("examples", "import", args.task, str(data / "pool.jsonl"), env=env)
    record["import"] = {"seconds": round(took, 1)}  # what it said names the data's lines: not kept
    if not args.no_tune:
        table, said, took = cli("tune", args.task, "--budget", str(args.budget), "--lines", str(args.lines), env=env)
        record["tune"] = {"seconds": round(took, 1), "budget_s": args.budget, "table": table.strip()}
        print(said, file=sys.stderr)
        record["tuned"] = json.loads((folder / "tuned" / f"{args.task}.json").read_text())
    out, said, took = cli("eval", args.task, str(data / "dev.jsonl"), "--limit", str(args.dev), "--json", env=env)
    report = json.loads(out)
    keys = ("docs", "f1", "precision", "recall", "schema_valid_rate", "docs_per_s", "ungrounded_rate")
    record["eval"] = {"seconds": round(took, 1), **{k: report[k] for k in keys}}
    label = args.label or f"{args.task}-{args.model}-{'defaults' if args.no_tune else 'tuned'}"
    if args.note:
        record["note"] = args.note
    keep(label, record)
    shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(record["eval"]), file=sys.stderr)


def keep(label: str, record: dict[str, Any]) -> None:
    """``record`` as the row ``label`` of ``tuning.json`` (replacing one of that label), and the page again."""
    rows = json.loads(RAW.read_text()) if RAW.is_file() else {}
    rows[label] = record
    save(RAW, rows)
    PAGE.write_text(render(rows))


def shipped(task: str, *, lines: int, budget: float, ks: str) -> None:
    """``extractor tune TASK --dry-run`` of a shipped task, on a copy of the catalog (the tree is never written)."""
    folder = Path(tempfile.mkdtemp(prefix=f"tune-{task}-"))
    for sub in ("schemas", "prompts", "examples", "adapters", "tuned", "calibration"):
        if (ROOT / sub).is_dir():
            shutil.copytree(ROOT / sub, folder / sub)
    env = {**os.environ, "EXTRACTOR_TASKS_DIR": str(folder)}
    schema = json.loads((folder / "schemas" / f"{task}.json").read_text(encoding="utf-8"))
    # An adapter that learned every pool line (its manifest holds none out) cannot be measured on them: the
    # task is tuned as served without it (its worth is measured on dev: `extractor eval`, docs/guides).
    adapter = bool((schema.get("x-extractor") or {}).get("adapter"))
    if adapter:
        env["EXTRACTOR_ADAPTER_SERVING"] = "off"
    args = ("tune", task, "--lines", str(lines), "--k", ks, "--budget", str(budget), "--no-try-model", "--dry-run")
    table, said, took = cli(*args, env=env)
    print(said, file=sys.stderr)
    chosen = re.search(r"^chosen: (.+?) \(dry run", said, re.M)
    record = {
        "task": task,
        "model": "default",
        "machine": machine(),
        "tune": {"seconds": round(took, 1), "budget_s": budget, "lines": lines, "table": table.strip()},
        "chosen": chosen.group(1) if chosen else "?",
        "adapter": "off" if adapter else "none",
    }
    keep(f"{task}-shipped", record)
    shutil.rmtree(folder, ignore_errors=True)


def render(rows: dict[str, Any]) -> str:
    """The results page from the rows."""
    lines = [
        "# A task that tunes itself",
        "",
        "`python -m bench.tune` (see its docstring): the task written without options, its pool imported, "
        "`extractor tune`, then `extractor eval` on held-out dev lines, each a CLI command as a new user runs it.",
        "",
        "| run | model | tune time (budget) | chosen | dev lines | F1 | P | R | valid | docs/s | where |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        if "eval" not in r:
            continue  # a shipped task's dry run: below
        e, t = r["eval"], r.get("tune")
        spent = f"{t['seconds']:.0f} s ({t['budget_s']:.0f} s)" if t else "not tuned"
        chosen = r["tuned"]["chosen"] if "tuned" in r else "the defaults"
        lines.append(
            f"| {label} | {r['model']} | {spent} | {chosen} | {e['docs']} | **{e['f1']:.3f}** "
            f"| {e['precision']:.3f} | {e['recall']:.3f} | {e['schema_valid_rate']:.1%} | {e['docs_per_s']:.2f} "
            f"| {r['machine']['cores']} cores |"
        )
    dry = {label: r for label, r in rows.items() if "eval" not in r}
    if dry:
        lines += [
            "",
            "## The shipped tasks, tuned on their own pools",
            "",
            "`python -m bench.tune --shipped TASK ...`: `extractor tune TASK --dry-run` on a copy of the catalog as "
            "shipped. The SNIPS tasks' adapter learned every line of their pools, so it cannot be measured on "
            "them: they are tuned as served without it (`EXTRACTOR_ADAPTER_SERVING=off`), the retrieval settings "
            "an analyst has before training; the adapter's own worth is measured on SNIPS dev.",
            "",
            "| task | adapter | lines | tune time (budget) | chosen | where |",
            "|---|---|---|---|---|---|",
        ]
        for r in dry.values():
            t = r["tune"]
            lines.append(
                f"| {r['task']} | {r.get('adapter', 'none')} | {t['lines']} | {t['seconds']:.0f} s "
                f"({t['budget_s']:.0f} s) | {r['chosen']} "
                f"| {r['machine']['cores']} cores |"
            )
    for label, r in rows.items():
        if r.get("tune"):
            lines += ["", f"## `extractor tune` of {label}", "", r["tune"]["table"]]
            lines += ["", r["note"]] if r.get("note") else []
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
