"""Typed values end to end on the real engine (issue 46): each phrasing of tests/test_values.py in a sentence.

    python -m bench.typed_phrasings          # the default model on vLLM; ~2-4 min on 2 cores

Also the issue-57 sentences: a three-field lease task (date, duration, number) on an English and a
Chinese sentence, with the attempts each took.

Each phrasing is put in a short sentence and extracted by a one-field task whose field has the
phrasing's type: the model copies the evidence (grounded decoding), the service types it. A row
passes when ``data`` holds the table's value and the span's evidence is exactly where the text
states it. Results: ``bench/results/typed_phrasings.md``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from extractor import Extractor, Settings
from extractor.catalog.tasks import task_from_schema
from extractor.errors import ExtractionFailed, ExtractorError
from extractor.pipeline import Options
from tests.test_values import PHRASINGS, REFERENCE

WHAT = {
    "date": "the date",
    "date-time": "the date and time",
    "time": "the time of day",
    "duration": "how long it lasts",
    "number": "the number, amount or quantity",
    "integer": "the number",
}


def sentence(kind: str, evidence: str) -> str:
    chinese = any("\u4e00" <= c <= "\u9fff" for c in evidence)
    if chinese:
        return f"请注意：{evidence}。"
    return f"Please note: {evidence}. Thank you."


def schema(kind: str, settings: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"description": WHAT[kind]}
    # The text states the value: the field is asked for one (nullable, SmolLM2 answers null for most).
    if kind in ("number", "integer"):
        node["type"] = kind
    else:
        node.update({"type": "string", "format": kind})
    if settings:
        node["x-extractor"] = settings
    return {
        "type": "object",
        "properties": {"value": node},
        "required": ["value"],
        "x-extractor": {"temperature": 0},
    }


# The two sentences (57), read by a three-field task as a new user would write it.
LEASE = json.loads((Path(__file__).parent / "data" / "typed_sentences.json").read_text(encoding="utf-8"))


async def sentences(extractor: Extractor) -> list[str]:
    """The lease task on the issue's two sentences: data, evidence and attempts."""
    task = task_from_schema("lease", LEASE["schema"], where="bench")
    lines = ["| sentence | data | evidence | attempts | right |", "|---|---|---|---|---|"]
    for case in LEASE["sentences"]:
        text, expected, words = case["text"], case["data"], case["evidence"]
        try:
            result = await extractor.arun(task, text, options=Options(reference_date=REFERENCE))
            shown = {s.path.lstrip("/"): text[s.start : s.end] for s in result.spans if s.start is not None}
            right = result.data == expected and all(shown.get(k) == v for k, v in words.items())
            data, attempts = json.dumps(result.data, ensure_ascii=False), len(result.attempts)
        except ExtractorError as error:
            shown, right, data, attempts = {}, False, str(error)[:100], -1
        evidence = json.dumps(shown, ensure_ascii=False)
        lines.append(f"| {text} | {data} | {evidence} | {attempts} | {'yes' if right else 'no'} |")
    return lines


async def main() -> None:
    extractor = Extractor(settings=Settings.from_env(engine="vllm"))
    await extractor.astart()
    rows: list[dict[str, Any]] = []

    async def one(kind: str, settings: dict[str, Any], evidence: str, expected: Any, unit: str | None) -> None:
        text = sentence(kind, evidence)
        task = task_from_schema(f"typed_{kind}", schema(kind, settings), where="bench")
        row: dict[str, Any] = {"kind": kind, "evidence": evidence, "expected": expected}
        try:
            result = await extractor.arun(task, text, options=Options(reference_date=REFERENCE))
            span = next((s for s in result.spans if s.path == "/value"), None)
            row["value"] = result.data.get("value")
            row["span"] = text[span.start : span.end] if span and span.start is not None else None
            row["ok"] = row["value"] == expected and span is not None and span.status == "exact"
            row["exact_words"] = row["span"] == evidence
            row["attempts"] = len(result.attempts)
        except ExtractionFailed as error:
            row.update(ok=False, error=str(error)[:120], attempts=len(error.attempts))
        except ExtractorError as error:
            row.update(ok=False, error=str(error)[:120], attempts=0)
        rows.append(row)

    started = time.perf_counter()
    await asyncio.gather(*(one(*p) for p in PHRASINGS))
    elapsed = time.perf_counter() - started
    lease = await sentences(extractor)
    await extractor.aclose()
    passed = sum(r["ok"] for r in rows)
    attempts = sum(r["attempts"] for r in rows) / len(rows)
    lines = [
        "# Typed values end to end (real engine)",
        "",
        f"`python -m bench.typed_phrasings`, {dt.date.today().isoformat()}, SmolLM2-135M-Instruct on vLLM (CPU), "
        f"reference date {REFERENCE.isoformat()}: **{passed} of {len(rows)}** phrasings typed right with an exact "
        f"evidence span ({elapsed:.0f} s for all), {attempts:.2f} attempts a phrasing. Each phrasing sits in a "
        "short sentence; a one-field task of its type reads it.",
        "",
        "The issue's two sentences, a three-field task (a date, a duration, a number):",
        "",
        *lease,
        "",
        "| kind | evidence in the text | expected | data | evidence span | ok |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["kind"], r["evidence"])):
        shown = r.get("error") or json.dumps(r.get("value"), ensure_ascii=False)
        lines.append(
            f"| {r['kind']} | {r['evidence']} | {json.dumps(r['expected'], ensure_ascii=False)} | {shown} | "
            f"{r.get('span')} | {'yes' if r['ok'] else 'no'} |"
        )
    (RESULTS / "typed_phrasings.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{passed}/{len(rows)} in {elapsed:.0f} s, {attempts:.2f} attempts a phrasing")
    print("\n".join(lease))


if __name__ == "__main__":
    asyncio.run(main())
