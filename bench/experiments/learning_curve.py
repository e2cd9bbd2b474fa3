"""Renders `bench/results/learning_curve.md` and `.png` from `raw/learning_curve.json`
(`bench.experiments.new_task`'s rows).

.venv/bin/python -m bench.experiments.learning_curve
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bench.common import RESULTS, pyplot

KINDS = ("boundary", "wrong_field", "boundary_and_field", "invented", "duplicate", "missed")


def _where(row: dict[str, Any]) -> str:
    m = row["machine"]
    return m["gpu"] or f"{m['cores']} CPU cores"


def _label(row: dict[str, Any]) -> str:
    if row["variant"] == "lexicon":
        return "pool hints alone (no model)"
    label = f"{row['variant']}, {row['model']}"
    return label + (f" ({row['label']})" if row.get("label") else "")


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| variant | pool lines | epochs, rank | dev lines | F1 | P | R | valid | not in text | docs/s | where |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (_label(r), _where(r), r["pool"])):
        recipe = f"{r['epochs']:g}, {r['rank']}" if "epochs" in r else "–"
        lines.append(
            f"| {_label(r)} | {r['pool']:,} | {recipe} | {r['docs']} | **{r['f1']:.3f}** | {r['precision']:.3f} | "
            f"{r['recall']:.3f} | {r['schema_valid_rate']:.1%} | {r['ungrounded_rate'] or 0:.1%} | "
            f"{r['docs_per_s']:.1f} | {_where(r)} |"
        )
    return lines


def error_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| variant | pool lines | where | correct | " + " | ".join(KINDS) + " | empty lists |",
        "|---|---|---|---|" + "---|" * len(KINDS) + "---|",
    ]
    for r in sorted(rows, key=lambda r: (_label(r), _where(r), r["pool"])):
        e = r["errors"]
        shares = " | ".join(f"{e[k]} ({e['error_shares'][k]:.0%})" for k in KINDS)
        lines.append(f"| {_label(r)} | {r['pool']:,} | {_where(r)} | {e['correct']} | {shares} | {e['empty_values']} |")
    return lines


def plot(rows: Sequence[dict[str, Any]]) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    series: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        series.setdefault(f"{_label(r)} · {_where(r)}", []).append(r)
    for name, found in sorted(series.items()):
        found.sort(key=lambda r: r["pool"])
        ax.plot([r["pool"] for r in found], [r["f1"] for r in found], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("labelled lines in the pool")
    ax.set_ylabel("F1 on CLUENER dev")
    ax.axhline(0.60, color="grey", linestyle=":", linewidth=1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "learning_curve.png", dpi=110)
    return True


def render(rows: Sequence[dict[str, Any]]) -> None:
    drew = plot(rows)
    lines = [
        "# A new task: F1 against labelled lines (CLUENER, Chinese, ten entity types)",
        "",
        "The analyst's task `bench/tasks/zh_entities/` (schema + prompt, no code), its pool the first N lines of "
        "`../shared/eval/cluener/pool.jsonl`, scored on `dev.jsonl` (the first `dev lines`) with `extractor eval`'s "
        "code: `python -m bench.experiments.new_task` (raw rows: [raw/learning_curve.json](raw/learning_curve.json)). "
        "*retrieval*: the base model with 3 retrieved examples; *adapter*: `extractor train`'s code on the pool, "
        "served as the task's adapter (merged), no examples.",
        "",
        *(["![F1 against pool size](learning_curve.png)", ""] if drew else []),
        *table(rows),
        "",
        "## Errors by kind (`extractor eval --errors`, `extractor/jobs/diagnosis.py`)",
        "",
        "Each predicted or expected value counted once: a boundary error is a value overlapping an expected one "
        "of its field; wrong field, the same value under another field; invented, a value overlapping no "
        "expected one; missed, an expected value nothing matched. Percentages are shares of all errors.",
        "",
        *error_table(rows),
    ]
    (RESULTS / "learning_curve.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    render(json.loads((RESULTS / "raw" / "learning_curve.json").read_text(encoding="utf-8")))
