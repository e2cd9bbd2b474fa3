"""Real contracts (issue 47): Kleister-NDA's EDGAR PDFs through the documents path, Kleister's own metric.

    python -m bench.kleister                       # dev split, every document, the task as shipped
    python -m bench.kleister --newcomer --pool 254 --limit 40 --raw   # a newcomer's task, its pool's sources learned
    python -m bench.kleister --newcomer --pool 254 --train            # and an adapter trained on that pool, by field
    python -m bench.kleister --newcomer --pool 254 --tune 12 --train  # tune's readings, then its adapter candidate

The task is `bench/tasks/kleister_nda/` (a schema and a prompt, no code): parties as written, the
effective date and the term typed from their evidence (extractor.values), the governing law as
written, long documents read field by field (extractor.passages). The data stays in
``../shared/eval/kleister_nda`` (never copied here).

Kleister's metric (its README): F1 over ``key=value`` pairs, values upper-cased with spaces as
``_``, summed over documents. A result becomes Kleister's format the way a user would write it:
a date as it is (ISO), a duration in words of its unit (``P3Y`` -> ``3 years``), commas dropped from
names, and a leading "State of" / "Commonwealth of" dropped from the governing law.

Results: ``bench/results/kleister.md`` and ``kleister.json`` (one section per ``--label``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import RESULTS, save
from extractor import Catalog, Extractor, Settings, documents, stages
from extractor.errors import DocumentError, ExtractorError
from extractor.examples.importing import import_gold, write_pool
from extractor.pipeline import Options
from extractor.results import Attempt
from extractor.values import Context, ValueField
from extractor.values.durations import words
from extractor.values.evidence import find

# The data stays outside the project (BENCH_KLEISTER_DIR where it was carried elsewhere, as to the GPU host).
DATA = Path(os.environ.get("BENCH_KLEISTER_DIR") or Path(__file__).resolve().parents[2] / "shared/eval/kleister_nda")
TASK_ROOT = Path(__file__).resolve().parent / "tasks" / "kleister_nda"
KEYS = ("party", "effective_date", "jurisdiction", "term")
_SUFFIX = re.compile(r"\b(Inc|Corp|Ltd|Co)$", re.IGNORECASE)
_PLACE = re.compile(r"^(?:the\s+)?(?:state|commonwealth|province|laws?)\s+of\s+(?:the\s+)?", re.IGNORECASE)


def kleister_pairs(data: dict[str, Any]) -> set[str]:
    """A result (or a gold ``expected``) as Kleister's ``key=VALUE`` pairs."""
    pairs: set[str] = set()
    for key in KEYS:
        value = data.get(key)
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item is None or item == "":
                continue
            text = str(item)
            if key == "term" and text.upper().startswith("P"):
                text = words(text)
            if key == "jurisdiction":
                text = _PLACE.sub("", text)
            if key == "party":  # Kleister writes names without commas, "Inc." with its stop, "LLC" without
                text = _SUFFIX.sub(r"\1.", text.replace(",", "").replace("L.L.C.", "LLC").strip())
            text = re.sub(r"\s+", " ", text).strip().rstrip(".") if key != "party" else re.sub(r"\s+", " ", text)
            pairs.add(f"{key}={text.strip().replace(' ', '_').replace(':', '_').upper()}")
    return pairs


def f1(tp: int, fp: int, fn: int) -> dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return {"p": round(p, 3), "r": round(r, 3), "f1": round(2 * p * r / (p + r), 3) if p + r else 0.0}


def gold_position(text: str, key: str, value: Any) -> float | None:
    """Where in the document (0-1) the gold value is first stated, or None when it is not found."""
    if key in ("effective_date", "term"):
        kind = "date" if key == "effective_date" else "duration"
        span = find(text, ValueField(f"/{key}", kind, {}), value, Context(date_order="MDY", languages=("en",)))
        return span[0] / max(1, len(text)) if span else None
    at = text.casefold().find(str(value).casefold()[:24])
    return at / max(1, len(text)) if at >= 0 else None


# A newcomer's task (issue 56): the four fields with descriptions from Kleister's README, no options.
NEWCOMER_ROOT = Path(__file__).resolve().parent / "tasks" / "kleister_newcomer"


def catalog_root(documents_: int, into: Path, *, newcomer: bool = False, sources: bool = True) -> Path:
    """The task as shipped (or a newcomer's), with a pool of the first ``documents_`` train documents (0: none).

    The pool is built as an analyst would (``extractor examples import`` of labelled PDFs) into a
    temporary catalog: research data never lands in the project. ``sources=False`` writes the pool
    as imports did before pools remembered their documents (nothing learned from them).
    """
    if not documents_ and not newcomer:
        return TASK_ROOT
    shutil.copytree(NEWCOMER_ROOT if newcomer else TASK_ROOT, into, dirs_exist_ok=True)
    if not documents_:
        return into
    gold = into / "train.jsonl"
    lines = (DATA / "train.jsonl").read_text().splitlines()[:documents_]
    gold.write_text("\n".join(json.dumps({**json.loads(x), "file": str(DATA / json.loads(x)["file"])}) for x in lines))
    task = Catalog.load(into).get("nda")
    pool, report = import_gold(gold, task, limits=documents.Limits.from_settings(Settings.from_env()))
    if not sources:
        pool = [{k: v for k, v in line.items() if k != "source"} for line in pool]
    write_pool(into / "examples" / "nda.jsonl", pool)
    print(report.text().splitlines()[-1] if report.documents else report.text())
    return into


def tokens(attempts: Sequence[Attempt]) -> dict[str, int]:
    """Where the engine's time went on one document: tokens read and written, answers cut by ``max_tokens``."""
    return {
        "prompt": sum(a.prompt_tokens for a in attempts),
        "completion": sum(a.completion_tokens for a in attempts),
        "cut": sum(a.finish_reason == "length" for a in attempts),
    }


def bring_tuned(root: Path, path: Path) -> dict[str, Any]:
    """A tune's file from another run (its catalog's ``tuned/nda.json``) into ``root``, kept as found; what it chose."""
    (root / "tuned").mkdir(exist_ok=True)
    shutil.copy(path, root / "tuned" / "nda.json")
    return {"tuned": json.loads(path.read_text()).get("chosen")}


def tune(
    root: Path, documents_: int, *, budget: float, engine: str, train: bool = False, train_limit: int = 0
) -> float:
    """As a newcomer would: ``extractor tune --documents`` on ``documents_`` of the train documents imported; seconds.

    ``budget``: tune's seconds (0: none); ``train``: an adapter as tune's candidate, kept beyond noise.
    """
    started = time.perf_counter()
    command = [sys.executable, "-m", "extractor.cli", "tune", "nda", "--documents", str(root / "train.jsonl")]
    command += ["--docs", str(documents_), "--tasks-dir", str(root), "--engine", engine, "--no-try-model"]
    command += ["--budget", str(budget)] if budget else []
    command += ["--train"] if train else []
    command += ["--train-limit", str(train_limit)] if train and train_limit else []
    subprocess.run(command, check=True)
    return round(time.perf_counter() - started, 1)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    lines = [json.loads(line) for line in (DATA / f"{args.split}.jsonl").read_text().splitlines() if line.strip()]
    lines = [line for line in lines if line["id"] in args.id] if args.id else lines
    lines = lines[: args.limit] if args.limit else lines
    into = Path(tempfile.mkdtemp(prefix="kleister-"))
    root = catalog_root(args.pool, into, newcomer=args.newcomer, sources=not args.forget_sources)
    tuning_s = None
    brought = bring_tuned(root, args.tuned) if args.tuned else {}
    if args.tune:
        tuning_s = tune(
            root, args.tune, budget=args.tune_budget, engine=args.engine, train=args.train, train_limit=args.train_limit
        )
    training_s = None
    if args.train and not args.tune:  # as an analyst would: `extractor train` on the pool imported (train docs only)
        started = time.perf_counter()
        command = [sys.executable, "-m", "extractor.cli", "train", "nda", "--tasks-dir", str(root)]
        command += ["--epochs", str(args.train_epochs)] if args.train_epochs else []
        command += ["--limit", str(args.train_limit)] if args.train_limit else []
        subprocess.run(command, check=True)
        training_s = round(time.perf_counter() - started, 1)
    settings = Settings.from_env(engine=args.engine, tasks_dir=root)
    limits = documents.Limits.from_settings(settings)
    catalog = Catalog.load(root)
    extractor = Extractor(settings=settings, catalog=catalog)
    if args.record or args.replay:  # the run's answers kept, or replayed: the pipeline's own CPU (bench.pipeline_cpu)
        from bench.pipeline_cpu import RecordingEngine, ReplayEngine

        engine = ReplayEngine(settings, args.replay) if args.replay else RecordingEngine(extractor.engine, args.record)
        extractor = Extractor(settings=settings, catalog=catalog, engine=engine)
    started = time.perf_counter()
    await extractor.astart()
    ready = time.perf_counter() - started
    options = Options(chunk=True)
    task = catalog.tasks["nda"]
    by_field = task.reads_by_field
    print(f"nda: reading by field {by_field}, learned {dict(task.reading)}")
    gate = asyncio.Semaphore(args.concurrency)
    records: list[dict[str, Any]] = []

    async def one(line: dict[str, Any]) -> None:
        async with gate:
            started = time.perf_counter()
            record: dict[str, Any] = {"id": line["id"], "pages": 0, "chars": 0, "gold": line["expected"]}
            # EXTRACTOR_OCR=off where tesseract is missing (the GPU host): a scanned page is left unread.
            # The extractor converts it, as `extractor batch` does (EXTRACTOR_CONVERSION_PROCESSES: in its workers).
            try:
                with stages.measuring() as clock:
                    result = await extractor.aextract_document(task, DATA / line["file"], options=options)
            except DocumentError as error:
                record.update(error=f"{type(error).__name__}: {str(error)[:200]}", seconds=0.0, positions={})
                records.append(record)
                return
            except ExtractorError as error:
                result = None
                record["error"] = f"{type(error).__name__}: {str(error)[:200]}"
            record["stages"] = clock.rounded()
            document = result.document if result is not None else None
            if document is None:  # failed after its conversion: converted again, for the gold's positions
                document = await extractor.converter.read(DATA / line["file"], limits=limits)
            record.update(pages=len(document.pages), chars=len(document.text))
            if result is not None:
                at = result.attempts  # where the engine's time goes: tokens read and written, answers cut
                record.update(data=result.data, attempts=len(at), notes=len(result.notes))
                record["tokens"] = tokens(at)
                record["evidence"] = {
                    s.path: {
                        "words": s.value,
                        "pages": s.location.pages if s.location else [],
                        "boxes": bool(s.location and s.location.boxes),
                    }
                    for s in result.spans
                    if s.normalized is not None
                }
            record["seconds"] = round(time.perf_counter() - started, 2)
            texts[line["id"]] = document.text  # the gold's positions are found after the timed run
            records.append(record)

    texts: dict[str, str] = {}
    t0, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
    try:
        await asyncio.gather(*(one(line) for line in lines))
        elapsed, cpu, own = time.perf_counter() - t0, time.process_time() - cpu, time.thread_time() - own
        gold = {line["id"]: line["expected"] for line in lines}
        for record in records:
            if record["id"] in texts:
                record["positions"] = {
                    key: [gold_position(texts[record["id"]], key, v) for v in (val if isinstance(val, list) else [val])]
                    for key, val in gold[record["id"]].items()
                }
        files = [DATA / line["file"] for line in lines] if args.raw else []
        raw_s = await raw_reading(extractor, files, limits, args.concurrency) if args.raw else None
    finally:
        await extractor.aclose()
    summary = summarize(records, elapsed=elapsed, ready=ready, args=args)
    summary["cpu_s_per_doc"] = round(cpu / max(1, len(records)), 4)  # this process's: the pipeline's and more
    summary["pipeline_cpu_s_per_doc"] = round(own / max(1, len(records)), 4)  # the event loop's thread alone
    if args.replay:
        replayed: Any = extractor.engine
        summary["replay"] = {"asked": replayed.asked, "missed": replayed.missed}
    if tuning_s is not None:
        summary |= {"tuned_on_documents": args.tune, "tune_s": tuning_s}
    summary |= brought
    if training_s is not None:
        summary |= {"adapter": catalog.tasks["nda"].adapter is not None, "train_s": training_s}
    if raw_s is not None:
        summary["raw_vllm_s"] = round(raw_s, 1)
        summary["extractor_s"] = round(elapsed, 1)
        summary["extractor_over_raw"] = round(elapsed / raw_s, 2)
    return summary


async def raw_reading(extractor: Extractor, files: list[Path], limits: documents.Limits, concurrency: int) -> float:
    """Seconds for the bare engine to read each document once: one prompt a document, cut to the window.

    The baseline of issue 58: the same engine and model, the same documents converted the same way
    (conversion not timed), an unconstrained answer of the default length; what extractor's
    pipeline costs is measured against it.
    """
    from extractor.engines.base import GenerationRequest, Message

    engine = extractor.engine
    gate = asyncio.Semaphore(concurrency)
    ask = "Extract the parties, the effective date, the governing law and the term of this agreement as JSON.\n\n"
    room = engine.max_model_len - 256 - 64

    texts = []
    for path in files:
        with contextlib.suppress(ExtractorError):  # unreadable here (a scan without OCR): the extractor failed it too
            texts.append(documents.read(path.read_bytes(), media_type="application/pdf", limits=limits).text)

    async def one(text: str) -> None:
        async with gate:
            messages: list[Message] = [{"role": "user", "content": ask + text}]
            while engine.count_prompt_tokens(messages) > room:  # cut to the window, as a bare server would need
                text = text[: int(len(text) * 0.8)]
                messages = [{"role": "user", "content": ask + text}]
            await engine.generate(GenerationRequest(messages=messages, temperature=0.0, max_tokens=256))

    started = time.perf_counter()  # conversion apart: the baseline is the engine's reading alone
    await asyncio.gather(*(one(t) for t in texts))
    return time.perf_counter() - started


def summarize(
    records: list[dict[str, Any]], *, elapsed: float, ready: float, args: argparse.Namespace
) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    by_key: dict[str, Counter[str]] = {k: Counter() for k in KEYS}
    by_position: dict[str, Counter[str]] = {}
    for record in records:
        gold = kleister_pairs(record["gold"])
        found = kleister_pairs(record.get("data") or {})
        counts["tp"] += len(gold & found)
        counts["fp"] += len(found - gold)
        counts["fn"] += len(gold - found)
        for key in KEYS:
            g = {p for p in gold if p.startswith(key + "=")}
            f = {p for p in found if p.startswith(key + "=")}
            by_key[key].update(tp=len(g & f), fp=len(f - g), fn=len(g - f))
        for key, positions in record["positions"].items():
            g = {p for p in gold if p.startswith(key + "=")}
            hit = bool(g & found) if key != "party" else None
            for where in positions:
                bucket = (
                    "not in text"
                    if where is None
                    else f"{int(min(where, 0.999) * 4) * 25}-{int(min(where, 0.999) * 4) * 25 + 25} %"
                )
                by_position.setdefault(f"{key} @ {bucket}", Counter())["gold"] += 1
                if hit:
                    by_position[f"{key} @ {bucket}"]["found"] += 1
    pages = sum(r["pages"] for r in records)
    summed_stages = stages.total([r.get("stages", {}) for r in records])
    typed = [(r, key) for r in records for key in ("effective_date", "term") if (r.get("data") or {}).get(key)]
    evidenced = [(r, k) for r, k in typed if (r.get("evidence") or {}).get(f"/{k}", {}).get("boxes")]
    return {
        "label": args.label or "by_field",
        "split": args.split,
        "mode": "by_field",
        "pool_documents": args.pool,
        "task": "newcomer" if args.newcomer else "expert",
        "learned_reading": not args.forget_sources,
        "attempts_per_doc": round(sum(r.get("attempts", 0) for r in records) / max(1, len(records)), 2),
        "tokens_per_doc": {
            k: round(sum(r.get("tokens", {}).get(k, 0) for r in records) / max(1, len(records)), 1)
            for k in ("prompt", "completion", "cut")
        },
        "stages_s_per_doc": {k: round(v / max(1, len(records)), 3) for k, v in summed_stages.items()},
        "documents": len(records),
        "failed": sum(1 for r in records if "error" in r),
        "errors": Counter(r["error"].split(":")[0] for r in records if "error" in r),
        "kleister": f1(counts["tp"], counts["fp"], counts["fn"]),
        "by_key": {k: f1(c["tp"], c["fp"], c["fn"]) for k, c in by_key.items()},
        "by_position": {k: dict(v) for k, v in sorted(by_position.items())},
        "typed_values": len(typed),
        "typed_with_page_and_boxes": len(evidenced),
        "docs_per_s": round(len(records) / elapsed, 3),
        "pages_per_s": round(pages / elapsed, 3),
        "seconds_per_doc_mean": round(sum(r["seconds"] for r in records) / max(1, len(records)), 1),
        "seconds_per_doc_max": max((r["seconds"] for r in records), default=0),
        "max_pages": max((r["pages"] for r in records), default=0),
        "engine_ready_s": round(ready, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "records": records,
    }


def stage_table(runs: dict[str, Any]) -> list[str]:
    """Seconds a document by stage for the runs that timed them (also on ``bench/results/documents.md``)."""
    timed = {label: run_ for label, run_ in runs.items() if run_.get("stages_s_per_doc")}
    names = list(stages.STAGES)
    rows = [
        "",
        "Seconds a document by stage (`extractor.stages`; engine waits overlap), attempts a document, and "
        "extractor's time over the bare engine reading each document once (`--raw`):",
        "",
        "| run | task | " + " | ".join(names) + " | attempts | docs/s | extractor / raw vLLM |",
        "|---|---|" + "---|" * (len(names) + 3),
    ]
    for label, run_ in timed.items():
        per = run_["stages_s_per_doc"]
        rows.append(
            f"| {label} | {run_.get('task', 'expert')} | "
            + " | ".join(str(per.get(n, "")) for n in names)
            + f" | {run_.get('attempts_per_doc', '')} | {run_['docs_per_s']} | {run_.get('extractor_over_raw', '')} |"
        )
    return rows if timed else []


def render(runs: dict[str, Any]) -> str:
    rows = [
        "| run | documents | failed | Kleister F1 | P | R | party | effective_date | jurisdiction | term "
        "| docs/s | pages/s | typed values with page and boxes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, run_ in runs.items():
        k, by = run_["kleister"], run_["by_key"]
        rows.append(
            f"| {label} | {run_['documents']} | {run_['failed']} | {k['f1']} | {k['p']} | {k['r']} | "
            + " | ".join(str(by[key]["f1"]) for key in KEYS)
            + f" | {run_['docs_per_s']} | {run_['pages_per_s']} | "
            + f"{run_.get('typed_with_page_and_boxes', 0)} of {run_.get('typed_values', 0)} |"
        )
    rows += stage_table(runs)
    positions = ["", "Recall by where the gold value sits in the document (share of the text):", ""]
    positions += ["| run | field @ position | gold | found |", "|---|---|---|---|"]
    for label, run_ in runs.items():
        for where, c in run_["by_position"].items():
            if not where.startswith("party"):
                positions.append(f"| {label} | {where} | {c.get('gold', 0)} | {c.get('found', 0)} |")
    return (
        "# Kleister-NDA through the documents path\n\n"
        "`python -m bench.kleister` (see the module's docstring). Kleister F1: the official metric "
        "(key=VALUE pairs, upper-cased, summed over documents); per field: F1 of its pairs. "
        "The published best on the test split: LAMBERT 0.818; text-only BERT/RoBERTa 0.78-0.80.\n\n"
        + "\n".join(rows)
        + "\n"
        + "\n".join(positions)
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", default="dev", choices=["dev", "train"])
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--label", default="")
    parser.add_argument("--engine", default="vllm")
    parser.add_argument("--concurrency", type=int, default=4, help="documents in flight")
    parser.add_argument("--id", action="append", default=[], help="only this document (file name; repeatable)")
    parser.add_argument("--pool", type=int, default=0, help="train documents imported into the pool (0: none)")
    parser.add_argument("--newcomer", action="store_true", help="a newcomer's task: the fields' descriptions only")
    parser.add_argument("--tune", type=int, default=0, help="first `extractor tune --documents` on N of the pool's")
    parser.add_argument("--tune-budget", type=float, default=0, help="seconds for that tune (0: none)")
    parser.add_argument("--tuned", type=Path, help="a tune's file from another run (tuned/nda.json), kept as found")
    parser.add_argument("--raw", action="store_true", help="then the bare engine reading each document once (issue 58)")
    parser.add_argument(
        "--train",
        action="store_true",
        help="first `extractor train` on the pool (by field); with --tune, tune's adapter candidate (tune --train)",
    )
    parser.add_argument("--train-epochs", type=float, default=0, help="its epochs (0: from the pool's size)")
    parser.add_argument("--train-limit", type=int, default=0, help="at most this many training chats (0: all)")
    parser.add_argument("--record", type=Path, help="keep each request's answer in this file (bench.pipeline_cpu)")
    parser.add_argument("--replay", type=Path, help="answer each request from this file at once (bench.pipeline_cpu)")
    parser.add_argument(
        "--forget-sources", action="store_true", help="the pool without its documents' sources (nothing learned)"
    )
    args = parser.parse_args()
    if args.tune and args.tuned:
        parser.error("--tune or --tuned, not both: the one tunes here, the other brings a tune measured elsewhere")
    summary = asyncio.run(run(args))
    # Per-document records hold the dataset's labels and text: they stay out of the project
    # (bench/results/raw/*.log is git-ignored); the results page and its JSON hold figures only.
    records = summary.pop("records")
    raw = RESULTS / "raw" / f"kleister-{summary['label']}.log"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n", encoding="utf-8")
    path = RESULTS / "kleister.json"
    runs = json.loads(path.read_text()) if path.is_file() else {}
    runs[summary["label"]] = summary
    save(path, runs)
    (RESULTS / "kleister.md").write_text(render(runs))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
